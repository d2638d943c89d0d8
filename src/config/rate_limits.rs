//! The `rate_limits` section: the rate limit service's domains in envoyproxy/ratelimit's own
//! file format, inline under `domains` or as that service's files, unchanged, in `config_dir`.
//!
//! Every key those files may hold is accepted. `metadata`, `value_to_metric` and
//! `detailed_metric` change nothing here (no dynamic metadata is answered, and metrics are
//! per configured descriptor, never per runtime value, so that a flood of tenant ids cannot
//! flood them); everything else is enforced. A problem in a file is reported with the file
//! and its path in the file (`/etc/ratelimit/config/a.yaml: descriptors[0].rate_limit.unit:
//! ...`); an inline one with its path under `rate_limits.domains`.

use std::path::{Path, PathBuf};

use super::walker::{Cx, given, join, kind};
use super::*;
use crate::ratelimit::rules::{DomainRules, Level, Limit, Node, Rule, Unit};
use crate::ratelimit::{DEFAULT_MAX_COUNTERS, RateLimitPolicy, Rules};

/// The largest `rate_limits.max_counters`: about 1.5 GiB of counters per domain.
const MAX_MAX_COUNTERS: u64 = 10_000_000;

/// The keys of one document (a domain) and of one descriptor, as upstream knows them.
const DOMAIN_KEYS: [&str; 2] = ["domain", "descriptors"];
const DESCRIPTOR_KEYS: [&str; 10] = [
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];
const RATE_LIMIT_KEYS: [&str; 5] = ["unit", "requests_per_unit", "unlimited", "name", "replaces"];

/// `rate_limits` as configured: the policy, and where its files came from.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct RateLimitsConfig {
    pub policy: RateLimitPolicy,
    /// `config_dir`, resolved against the configuration file's directory.
    pub config_dir: Option<PathBuf>,
}

impl Cx {
    /// The `rate_limits` section.
    pub(super) fn rate_limits(&mut self, v: &Value) -> RateLimitsConfig {
        let mut out = RateLimitsConfig::default();
        let Some(m) = self.mapping(
            v,
            "rate_limits",
            &[
                "config_dir",
                "domains",
                "max_counters",
                "near_limit_ratio",
                "response_headers",
            ],
        ) else {
            return out;
        };
        let policy = &mut out.policy;
        if let Some(v) = given(m, "max_counters") {
            policy.max_counters = self
                .count(v, "rate_limits.max_counters", 1, MAX_MAX_COUNTERS)
                .unwrap_or(DEFAULT_MAX_COUNTERS);
        }
        if let Some(v) = given(m, "near_limit_ratio") {
            match v.as_f64() {
                Some(r) if r > 0.0 && r <= 1.0 => policy.near_limit_ratio = r,
                Some(_) => self.err("rate_limits.near_limit_ratio", "must be > 0 and <= 1"),
                None => self.err(
                    "rate_limits.near_limit_ratio",
                    format_args!("must be a number, got {}", kind(v)),
                ),
            }
        }
        if let Some(v) = given(m, "response_headers") {
            match v.as_bool() {
                Some(b) => policy.response_headers = b,
                None => self.err(
                    "rate_limits.response_headers",
                    format_args!("must be true or false, got {}", kind(v)),
                ),
            }
        }
        let mut rules = Rules::default();
        if let Some(v) = given(m, "domains") {
            match v {
                Value::Sequence(docs) => {
                    for (i, doc) in docs.iter().enumerate() {
                        let path = format!("rate_limits.domains[{i}]");
                        if let Some(d) = self.domain_document(doc, &path, &path) {
                            self.add_domain(&mut rules, d, &join(&path, "domain"));
                        }
                    }
                }
                other => self.err(
                    "rate_limits.domains",
                    format_args!(
                        "must be a list of domains (envoyproxy/ratelimit's documents), got {}",
                        kind(other)
                    ),
                ),
            }
        }
        if let Some(v) = given(m, "config_dir") {
            match v.as_str() {
                Some(dir) => {
                    let dir = match &self.base {
                        Some(base) => base.join(dir),
                        None => PathBuf::from(dir),
                    };
                    self.config_dir(&dir, &mut rules);
                    out.config_dir = Some(dir);
                }
                None => self.err(
                    "rate_limits.config_dir",
                    format_args!("must be a directory path, got {}", kind(v)),
                ),
            }
        }
        out.policy.rules = rules;
        out
    }

    fn add_domain(&mut self, rules: &mut Rules, domain: DomainRules, path: &str) {
        let name = domain.domain.clone();
        let source = domain.source.clone();
        if let Err(first) = rules.insert(domain) {
            let at = if source.contains(": ") || source.starts_with("rate_limits") {
                path.to_string()
            } else {
                format!("{source}: domain")
            };
            self.err(
                &at,
                format_args!("duplicate domain {name:?}: {first} configures it already"),
            );
        }
    }

    /// Every file of `dir` (the hidden ones aside, such as a Kubernetes ConfigMap's `..data`),
    /// in name order, each one domain as envoyproxy/ratelimit reads them.
    fn config_dir(&mut self, dir: &Path, rules: &mut Rules) {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                self.err(
                    "rate_limits.config_dir",
                    format_args!("cannot read {}: {e}", dir.display()),
                );
                return;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for file in files {
            let name = file.display().to_string();
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) => {
                    self.err(&name, format_args!("cannot read: {e}"));
                    continue;
                }
            };
            let doc: Value = match serde_norway::from_str(&text) {
                Ok(v) => v,
                Err(e) => {
                    self.err(&name, format_args!("not valid YAML: {e}"));
                    continue;
                }
            };
            // Paths inside a file start at its root; each error names the file first.
            let mut inner = Cx {
                errors: Vec::new(),
                base: None,
            };
            let domain = inner.domain_document(&doc, "", &name);
            for e in inner.errors {
                let e = e.strip_prefix(": ").unwrap_or(&e).to_string();
                self.errors.push(format!("{name}: {e}"));
            }
            if let Some(d) = domain {
                self.add_domain(rules, d, &name);
            }
        }
    }

    /// One document: `domain` and its `descriptors`. `source` says where it came from.
    fn domain_document(&mut self, v: &Value, path: &str, source: &str) -> Option<DomainRules> {
        let m = self.mapping(v, path, &DOMAIN_KEYS)?;
        let domain = match given(m, "domain") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(other) if !other.is_string() => {
                self.err(
                    &join(path, "domain"),
                    format_args!("must be a string, got {}", kind(other)),
                );
                return None;
            }
            _ => {
                self.err(&join(path, "domain"), "a domain is required (not empty)");
                return None;
            }
        };
        let root = match given(m, "descriptors") {
            Some(d) => self.descriptors(d, &join(path, "descriptors"), ""),
            None => Level::default(),
        };
        Some(DomainRules {
            domain,
            root,
            source: source.to_string(),
        })
    }

    /// A `descriptors` list, below the stats path `parent` (empty at a domain's root).
    fn descriptors(&mut self, v: &Value, path: &str, parent: &str) -> Level {
        let mut level = Level::default();
        let Value::Sequence(items) = v else {
            self.err(
                path,
                format_args!("must be a list of descriptors, got {}", kind(v)),
            );
            return level;
        };
        for (i, item) in items.iter().enumerate() {
            let path = format!("{path}[{i}]");
            if let Some(node) = self.descriptor(item, &path, parent)
                && let Err(composite) = level.insert(node)
            {
                self.err(
                    &path,
                    format_args!(
                        "duplicate descriptor composite key {:?}",
                        if parent.is_empty() {
                            composite
                        } else {
                            format!("{parent}.{composite}")
                        }
                    ),
                );
            }
        }
        level
    }

    fn descriptor(&mut self, v: &Value, path: &str, parent: &str) -> Option<Node> {
        let m = self.mapping(v, path, &DESCRIPTOR_KEYS)?;
        // Checked on after a missing key, so one pass reports every problem.
        let key = match given(m, "key").and_then(scalar_text) {
            Some(k) if !k.is_empty() => Some(k),
            _ => {
                self.err(&join(path, "key"), "a descriptor needs a key (not empty)");
                None
            }
        };
        let value = match given(m, "value") {
            None => String::new(),
            Some(v) => match scalar_text(v) {
                Some(s) => s,
                None => {
                    self.err(
                        &join(path, "value"),
                        format_args!("must be a string, got {}", kind(v)),
                    );
                    String::new()
                }
            },
        };
        let flag = |cx: &mut Cx, name: &str| match given(m, name) {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                cx.err(
                    &join(path, name),
                    format_args!("must be true or false, got {}", kind(other)),
                );
                false
            }
        };
        let shadow_mode = flag(self, "shadow_mode");
        let quota_mode = flag(self, "quota_mode");
        let detailed_metric = flag(self, "detailed_metric");
        let _ = flag(self, "value_to_metric");
        let share_threshold = flag(self, "share_threshold");
        if let Some(md) = given(m, "metadata")
            && !md.is_mapping()
        {
            self.err(
                &join(path, "metadata"),
                format_args!("must be a mapping, got {}", kind(md)),
            );
        }
        let mut node = Node {
            key: key.clone().unwrap_or_default(),
            value,
            rule: None,
            share_threshold,
            children: Level::default(),
        };
        let composite = node.composite();
        if share_threshold && !node.value.contains('*') {
            self.err(
                &join(path, "share_threshold"),
                format_args!(
                    "only a wildcard value (with '*') can share its counter, got {composite:?}"
                ),
            );
        }
        let stats_path = if parent.is_empty() {
            composite
        } else {
            format!("{parent}.{composite}")
        };
        if let Some(rl) = given(m, "rate_limit") {
            node.rule = self
                .rule(rl, &join(path, "rate_limit"), &stats_path)
                .map(|mut r| {
                    r.shadow_mode = shadow_mode;
                    r.quota_mode = quota_mode;
                    r.detailed_metric = detailed_metric;
                    r
                });
        }
        if let Some(children) = given(m, "descriptors") {
            node.children = self.descriptors(children, &join(path, "descriptors"), &stats_path);
        }
        key.map(|_| node)
    }

    fn rule(&mut self, v: &Value, path: &str, stats_path: &str) -> Option<Rule> {
        let m = self.mapping(v, path, &RATE_LIMIT_KEYS)?;
        let unlimited = match given(m, "unlimited") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.err(
                    &join(path, "unlimited"),
                    format_args!("must be true or false, got {}", kind(other)),
                );
                return None;
            }
        };
        let unit_names = || {
            Unit::ALL
                .iter()
                .map(|u| u.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut bad_unit = false;
        let unit = match given(m, "unit") {
            None => None,
            Some(v) => match v.as_str().and_then(Unit::parse) {
                Some(u) => Some(u),
                None => {
                    self.err(
                        &join(path, "unit"),
                        format_args!(
                            "must be one of {} (in any case), got {}",
                            unit_names(),
                            scalar_text(v)
                                .map_or_else(|| kind(v).to_string(), |s| format!("{s:?}"))
                        ),
                    );
                    bad_unit = true;
                    None
                }
            },
        };
        let requests = given(m, "requests_per_unit");
        // `None` inside: a problem already reported; the rest is still checked.
        let limit: Option<Option<Limit>> = if unlimited {
            if unit.is_some() {
                self.err(
                    &join(path, "unit"),
                    "an unlimited rate_limit has no unit: remove one of them",
                );
            }
            Some(None)
        } else {
            match (unit, requests) {
                (None, _) if bad_unit => None,
                (None, _) => {
                    self.err(
                        &join(path, "unit"),
                        format_args!("required (one of {}), or unlimited: true", unit_names()),
                    );
                    None
                }
                (Some(_), None) => {
                    self.err(
                        &join(path, "requests_per_unit"),
                        "required: the hits each window allows (0 refuses every hit)",
                    );
                    None
                }
                (Some(unit), Some(requests)) => self
                    .count(
                        requests,
                        &join(path, "requests_per_unit"),
                        0,
                        u64::from(u32::MAX),
                    )
                    .map(|n| {
                        Some(Limit {
                            requests_per_unit: n as u32,
                            unit,
                        })
                    }),
            }
        };
        let name = match given(m, "name") {
            None => String::new(),
            Some(v) => scalar_text(v).unwrap_or_else(|| {
                self.err(&join(path, "name"), "must be a string");
                String::new()
            }),
        };
        let mut replaces = Vec::new();
        if let Some(v) = given(m, "replaces") {
            match v {
                Value::Sequence(items) => {
                    for (i, item) in items.iter().enumerate() {
                        let p = format!("{}[{i}]", join(path, "replaces"));
                        let Some(rm) = self.mapping(item, &p, &["name"]) else {
                            continue;
                        };
                        match given(rm, "name").and_then(scalar_text) {
                            Some(n) if n.is_empty() => {
                                self.err(&join(&p, "name"), "must not be empty")
                            }
                            Some(n) if n == name => self.err(
                                &join(&p, "name"),
                                format_args!("a rate_limit cannot replace itself ({n:?})"),
                            ),
                            Some(n) => replaces.push(n),
                            None => self.err(
                                &join(&p, "name"),
                                "the name of the rate_limit it replaces is required",
                            ),
                        }
                    }
                }
                other => self.err(
                    &join(path, "replaces"),
                    format_args!("must be a list of {{name: ...}}, got {}", kind(other)),
                ),
            }
        }
        Some(Rule {
            limit: limit?,
            name,
            replaces,
            path: stats_path.to_string(),
            ..Rule::default()
        })
    }
}

/// A scalar as the text upstream's YAML reader would give its string field (`value: 200` is
/// "200").
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `rate_limits` as check-config prints it: the settings, `config_dir` as given, the inline
/// domains in upstream's format, and a comment per domain read from the dir (so the output
/// loads back as the same configuration).
pub(super) fn render(out: &mut String, c: &RateLimitsConfig) {
    let p = &c.policy;
    let _ = writeln!(out, "rate_limits:");
    let _ = writeln!(out, "  max_counters: {}", p.max_counters);
    let _ = writeln!(out, "  near_limit_ratio: {}", p.near_limit_ratio);
    let _ = writeln!(out, "  response_headers: {}", p.response_headers);
    match &c.config_dir {
        Some(d) => {
            // Absolute, so the output loads back from any directory.
            let abs = std::path::absolute(d).unwrap_or_else(|_| d.clone());
            let _ = writeln!(
                out,
                "  config_dir: {}",
                yaml_key(&abs.display().to_string())
            );
        }
        None => {
            let _ = writeln!(out, "  config_dir: null");
        }
    }
    let inline: Vec<&DomainRules> = p
        .rules
        .domains()
        .filter(|d| d.source.starts_with("rate_limits.domains"))
        .collect();
    if inline.is_empty() {
        let _ = writeln!(out, "  domains: []");
    } else {
        let _ = writeln!(out, "  domains:");
        for d in inline {
            let _ = writeln!(out, "    - domain: {}", yaml_key(&d.domain));
            render_level(out, &d.root, "      ");
        }
    }
    for d in p.rules.domains() {
        if !d.source.starts_with("rate_limits.domains") {
            let _ = writeln!(
                out,
                "  # domain {} from {}: {} descriptors",
                d.domain,
                d.source,
                count_nodes(&d.root)
            );
        }
    }
}

fn count_nodes(level: &Level) -> usize {
    level.nodes().map(|n| 1 + count_nodes(&n.children)).sum()
}

fn render_level(out: &mut String, level: &Level, indent: &str) {
    if level.is_empty() {
        return;
    }
    let _ = writeln!(out, "{indent}descriptors:");
    for n in level.nodes() {
        let _ = writeln!(out, "{indent}  - key: {}", yaml_key(&n.key));
        let inner = format!("{indent}    ");
        if !n.value.is_empty() {
            let _ = writeln!(out, "{inner}value: {}", yaml_key(&n.value));
        }
        if n.share_threshold {
            let _ = writeln!(out, "{inner}share_threshold: true");
        }
        if let Some(r) = &n.rule {
            for (flag, on) in [
                ("shadow_mode", r.shadow_mode),
                ("quota_mode", r.quota_mode),
                ("detailed_metric", r.detailed_metric),
            ] {
                if on {
                    let _ = writeln!(out, "{inner}{flag}: true");
                }
            }
            let _ = writeln!(out, "{inner}rate_limit:");
            match r.limit {
                Some(l) => {
                    let _ = writeln!(
                        out,
                        "{inner}  unit: {}\n{inner}  requests_per_unit: {}",
                        l.unit.name(),
                        l.requests_per_unit
                    );
                }
                None => {
                    let _ = writeln!(out, "{inner}  unlimited: true");
                }
            }
            if !r.name.is_empty() {
                let _ = writeln!(out, "{inner}  name: {}", yaml_key(&r.name));
            }
            if !r.replaces.is_empty() {
                let _ = writeln!(out, "{inner}  replaces:");
                for name in &r.replaces {
                    let _ = writeln!(out, "{inner}    - name: {}", yaml_key(name));
                }
            }
        }
        render_level(out, &n.children, &inner);
    }
}
