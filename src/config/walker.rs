//! The YAML walker: typed reads of a YAML value tree that report every problem with its path
//! and keep going, so an operator sees all of a file's mistakes in one pass.

use std::fmt;

use serde_norway::{Mapping, Value};

use super::MAX_COUNT;
use crate::scheduler::OverflowPolicy;

/// The walk of one configuration: every problem found so far, each with its path.
pub(super) struct Cx {
    pub(super) errors: Vec<String>,
    /// The config file's directory: relative paths in the file are relative to it.
    pub(super) base: Option<std::path::PathBuf>,
}

/// The value of `key` in `m`, where `key: null` means the same as leaving the key out (none,
/// or the default): `check-config` prints `null` for what is off, and its output loads back.
pub(super) fn given<'a>(m: &'a Mapping, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Cx {
    pub(super) fn err(&mut self, path: &str, msg: impl fmt::Display) {
        self.errors.push(format!("{path}: {msg}"));
    }

    /// The mapping at `path`, with unknown keys reported. `Null` (an empty section) is an
    /// empty mapping.
    pub(super) fn mapping<'a>(
        &mut self,
        v: &'a Value,
        path: &str,
        known: &[&str],
    ) -> Option<&'a Mapping> {
        static EMPTY: std::sync::OnceLock<Mapping> = std::sync::OnceLock::new();
        let m = match v {
            Value::Null => EMPTY.get_or_init(Mapping::new),
            Value::Mapping(m) => m,
            _ => {
                self.err(path, "must be a mapping of keys to values");
                return None;
            }
        };
        for k in m.keys() {
            match k.as_str() {
                Some(k) if known.contains(&k) => {}
                Some(k) => self.err(
                    &join(path, k),
                    format_args!("unknown key (known here: {})", known.join(", ")),
                ),
                None => self.err(path, "keys must be strings"),
            }
        }
        Some(m)
    }

    /// Entries of a map from names (ids) to values, with the names checked.
    pub(super) fn named_entries<'a>(
        &mut self,
        v: &'a Value,
        path: &str,
    ) -> Vec<(String, &'a Value)> {
        let m = match v {
            Value::Null => return Vec::new(),
            Value::Mapping(m) => m,
            _ => {
                self.err(path, "must be a mapping of names to values");
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for (k, v) in m {
            match k.as_str() {
                Some(name) => match check_id(name) {
                    Ok(()) => out.push((name.to_string(), v)),
                    Err(rule) => self.err(&format!("{path}.{name:?}"), format_args!("name {rule}")),
                },
                None => self.err(path, "names must be strings"),
            }
        }
        out
    }

    pub(super) fn count(&mut self, v: &Value, path: &str, min: u64, max: u64) -> Option<u64> {
        let n = match v {
            Value::Number(n) => n,
            _ => {
                self.err(
                    path,
                    format_args!("must be a whole number, got {}", kind(v)),
                );
                return None;
            }
        };
        if let Some(u) = n.as_u64() {
            if u < min {
                self.err(path, format_args!("must be >= {min}"));
                None
            } else if u > max {
                self.err(path, format_args!("must be <= {max}"));
                None
            } else {
                Some(u)
            }
        } else if n.as_i64().is_some() {
            self.err(path, format_args!("must be >= {min}"));
            None
        } else {
            self.err(path, "must be a whole number");
            None
        }
    }

    pub(super) fn count32(&mut self, v: &Value, path: &str, min: u64) -> Option<u32> {
        self.count(v, path, min, MAX_COUNT).map(|n| n as u32)
    }

    pub(super) fn duration(&mut self, v: &Value, path: &str, min: u64, max: u64) -> Option<u64> {
        let Some(s) = v.as_str() else {
            self.err(
                path,
                format_args!(
                    "must be a duration like 500ms, 30s, 10m or 1h, got {}",
                    kind(v)
                ),
            );
            return None;
        };
        self.duration_str(s, path, min, max)
    }

    pub(super) fn duration_str(&mut self, s: &str, path: &str, min: u64, max: u64) -> Option<u64> {
        match parse_duration_ms(s) {
            None => {
                self.err(
                    path,
                    format_args!("must be a duration like 500ms, 30s, 10m or 1h, got {s:?}"),
                );
                None
            }
            Some(ms) if ms < min => {
                self.err(path, format_args!("must be at least {}", format_ms(min)));
                None
            }
            Some(ms) if ms > max => {
                self.err(path, format_args!("must be at most {}", format_ms(max)));
                None
            }
            Some(ms) => Some(ms),
        }
    }

    /// A size like `64KiB`, `8MiB` or `1GiB` (a bare number is bytes), in bytes.
    pub(super) fn size(&mut self, v: &Value, path: &str, min: u64, max: u64) -> Option<u64> {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => String::new(),
        };
        let t = text.trim();
        let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
        let scale = match unit.trim() {
            "" | "B" => Some(1u64),
            "KiB" => Some(1 << 10),
            "MiB" => Some(1 << 20),
            "GiB" => Some(1 << 30),
            _ => None,
        };
        let bytes = scale.and_then(|k| digits.parse::<u64>().ok()?.checked_mul(k));
        match bytes {
            Some(b) if (min..=max).contains(&b) => Some(b),
            Some(_) => {
                self.err(
                    path,
                    format_args!("must be from {} to {}", format_size(min), format_size(max)),
                );
                None
            }
            None => {
                self.err(
                    path,
                    format_args!("must be a size like 64KiB, 8MiB or 1GiB, got {text:?}"),
                );
                None
            }
        }
    }

    pub(super) fn policy(&mut self, v: &Value, path: &str) -> Option<OverflowPolicy> {
        let s = v.as_str();
        match s.and_then(OverflowPolicy::parse) {
            Some(p) => Some(p),
            None => {
                let got = s.map_or_else(|| kind(v).to_string(), |s| format!("{s:?}"));
                self.err(
                    path,
                    format_args!(
                        "must be one of {}, got {got}",
                        OverflowPolicy::NAMES.join(", ")
                    ),
                );
                None
            }
        }
    }
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// `500ms`, `30s`, `10m`, `1h`, `24h` → milliseconds.
pub fn parse_duration_ms(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let factor = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

/// Milliseconds → the shortest exact duration text.
pub fn format_ms(ms: u64) -> String {
    for (unit, factor) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms != 0 && ms.is_multiple_of(factor) {
            return format!("{}{unit}", ms / factor);
        }
    }
    format!("{ms}ms")
}

/// The id rule of the whole contract: 1..128 bytes of printable ASCII.
pub fn check_id(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        Err("must not be empty")
    } else if s.len() > 128 {
        Err("must be at most 128 bytes")
    } else if !s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        Err("must be printable ASCII")
    } else {
        Ok(())
    }
}

/// A map key as YAML writes it (quoted unless plain), for paths and rendering.
pub(super) fn yaml_key(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        s.to_string()
    } else {
        format!("{s:?}")
    }
}

/// Bytes as the largest whole unit that `Cx::size` reads back (`8MiB`, `4KiB`, `100B`).
pub(super) fn format_size(bytes: u64) -> String {
    for (unit, k) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= k && bytes.is_multiple_of(k) {
            return format!("{}{unit}", bytes / k);
        }
    }
    format!("{bytes}B")
}
