//! The `http_admission` section: the policies under which Envoy's external processing filter
//! admits HTTP requests (see [`crate::http_admission`]).
//!
//! ```yaml
//! http_admission:
//!   policies:
//!     - name: chat                      # the filter's x-admission-policy picks it
//!       host_id: llm-gateway            # whose caps, queue, priorities and weights apply
//!       subject: { header: x-tenant }   # required
//!       account: { header: x-provider } # optional
//!       priority: { header: x-priority } # optional: 1 (highest) .. 5
//!       max_wait: 30s                   # the longest a request waits in the queue
//!       key: { header: x-conversation-id } # optional: the requests of one conversation
//!       key_policy: serial_keep_newest  # keep_newest | serial | reject_new | none
//!       debounce: 300ms                 # keep-newest policies: until the key is quiet
//! ```

use std::fmt::Write as _;

use super::walker::{Cx, check_id, format_ms, join, kind, yaml_key};
use super::*;
use crate::http_admission::{
    Api, DEFAULT_MAX_TOKENS, DEFAULT_MAX_WAIT_MS, HttpAdmissionConfig, HttpPolicy, KeySource,
    Source, Tokens, key_policy_name, key_policy_named,
};
use crate::scheduler::KeyPolicy;

/// The longest debounce: seconds of typing, not a schedule.
const MAX_DEBOUNCE_MS: u64 = 3_600_000;

const POLICY_KEYS: [&str; 11] = [
    "name",
    "host_id",
    "subject",
    "account",
    "priority",
    "max_wait",
    "tokens",
    "default_max_tokens",
    "key",
    "key_policy",
    "debounce",
];

/// The longest `max_wait`: a request held longer is better refused and retried.
const MAX_MAX_WAIT_MS: u64 = 3_600_000;

impl Cx {
    /// The `http_admission` section.
    pub(super) fn http_admission(&mut self, v: &Value) -> HttpAdmissionConfig {
        let mut out = HttpAdmissionConfig::default();
        let Some(m) = self.mapping(v, "http_admission", &["policies"]) else {
            return out;
        };
        let Some(list) = m.get("policies") else {
            return out;
        };
        let items = match list {
            Value::Null => return out,
            Value::Sequence(items) => items,
            other => {
                self.err(
                    "http_admission.policies",
                    format_args!("must be a list of policies, got {}", kind(other)),
                );
                return out;
            }
        };
        for (i, item) in items.iter().enumerate() {
            let path = format!("http_admission.policies[{i}]");
            if let Some(p) = self.http_policy(item, &path) {
                if out.policies.contains_key(&p.name) {
                    self.err(
                        &join(&path, "name"),
                        format_args!("{:?} names another policy already", p.name),
                    );
                    continue;
                }
                out.policies.insert(p.name.clone(), std::sync::Arc::new(p));
            }
        }
        out
    }

    fn http_policy(&mut self, v: &Value, path: &str) -> Option<HttpPolicy> {
        let m = self.mapping(v, path, &POLICY_KEYS)?;
        let id = |cx: &mut Cx, key: &str| -> Option<String> {
            let p = join(path, key);
            match m.get(key).map(|v| (v, v.as_str())) {
                None | Some((Value::Null, _)) => {
                    cx.err(&p, "is required");
                    None
                }
                Some((_, Some(s))) => match check_id(s) {
                    Ok(()) => Some(s.to_string()),
                    Err(rule) => {
                        cx.err(&p, rule);
                        None
                    }
                },
                Some((other, None)) => {
                    cx.err(&p, format_args!("must be a string, got {}", kind(other)));
                    None
                }
            }
        };
        let name = id(self, "name");
        let host_id = id(self, "host_id");
        let subject = match m.get("subject") {
            None | Some(Value::Null) => {
                self.err(
                    &join(path, "subject"),
                    "is required: where the subject comes from, e.g. { header: x-tenant }",
                );
                None
            }
            Some(v) => self.source(v, &join(path, "subject")),
        };
        let account = match m.get("account") {
            None | Some(Value::Null) => Some(None),
            Some(v) => self.source(v, &join(path, "account")).map(Some),
        };
        let priority = match m.get("priority") {
            None | Some(Value::Null) => Some(None),
            Some(v) => self.source(v, &join(path, "priority")).map(Some),
        };
        let max_wait_ms = match m.get("max_wait") {
            None | Some(Value::Null) => Some(DEFAULT_MAX_WAIT_MS),
            Some(v) => self.duration(v, &join(path, "max_wait"), 0, MAX_MAX_WAIT_MS),
        };
        let default_max_tokens = match m.get("default_max_tokens") {
            None | Some(Value::Null) => Some(DEFAULT_MAX_TOKENS),
            Some(v) => self.count(v, &join(path, "default_max_tokens"), 1, 10_000_000),
        };
        let tokens = match m.get("tokens").map(|v| (v, v.as_str())) {
            None | Some((Value::Null, _)) => {
                if m.contains_key("default_max_tokens") {
                    self.err(
                        &join(path, "default_max_tokens"),
                        "applies only with tokens: openai or anthropic",
                    );
                }
                Some(None)
            }
            Some((_, Some(name @ ("openai" | "anthropic")))) => {
                let api = if name == "openai" {
                    Api::OpenAi
                } else {
                    Api::Anthropic
                };
                default_max_tokens.map(|d| {
                    Some(Tokens {
                        api,
                        default_max_tokens: d,
                    })
                })
            }
            Some((v, text)) => {
                let got = text.map_or_else(|| kind(v).to_string(), |t| format!("{t:?}"));
                self.err(
                    &join(path, "tokens"),
                    format_args!("must be openai or anthropic (or left out), got {got}"),
                );
                None
            }
        };
        let key = self.policy_key(m, path);
        Some(HttpPolicy {
            name: name?,
            host_id: host_id?,
            subject: subject?,
            account: account?,
            priority: priority?,
            max_wait_ms: max_wait_ms?,
            tokens: tokens?,
            key: key?,
        })
    }

    /// A policy's `key`, `key_policy` (default `serial_keep_newest`) and `debounce`.
    fn policy_key(&mut self, m: &Mapping, path: &str) -> Option<Option<KeySource>> {
        let policy = match m.get("key_policy") {
            None | Some(Value::Null) => Some(KeyPolicy::SerialKeepNewest),
            Some(v) => match v.as_str().and_then(key_policy_named) {
                Some(p) => Some(p),
                None => {
                    self.err(
                        &join(path, "key_policy"),
                        "must be one of serial_keep_newest, keep_newest, serial, reject_new, none",
                    );
                    None
                }
            },
        };
        let debounce_ms = match m.get("debounce") {
            None | Some(Value::Null) => Some(0),
            Some(v) => self.duration(v, &join(path, "debounce"), 0, MAX_DEBOUNCE_MS),
        };
        let source = match m.get("key") {
            None | Some(Value::Null) => {
                for k in ["key_policy", "debounce"] {
                    if m.contains_key(k) {
                        self.err(&join(path, k), "applies only with a key");
                    }
                }
                return Some(None);
            }
            Some(v) => self.source(v, &join(path, "key")),
        };
        if let (Some(p), Some(d)) = (policy, debounce_ms)
            && d > 0
            && !p.keeps_newest()
        {
            self.err(
                &join(path, "debounce"),
                "needs key_policy keep_newest or serial_keep_newest",
            );
            return None;
        }
        Some(Some(KeySource {
            source: source?,
            policy: policy?,
            debounce_ms: debounce_ms?,
        }))
    }

    /// `{ header: NAME }` or `{ body: FIELD }`.
    fn source(&mut self, v: &Value, path: &str) -> Option<Source> {
        let m = self.mapping(v, path, &["header", "body"])?;
        if let Some(field) = m.get("body") {
            if m.contains_key("header") {
                self.err(path, "give one of header, body");
                return None;
            }
            return match field.as_str() {
                Some(f) if !f.is_empty() && f.len() <= 128 => Some(Source::Body(f.to_string())),
                _ => {
                    self.err(
                        &join(path, "body"),
                        "must be the name of a top-level field of the JSON body",
                    );
                    None
                }
            };
        }
        match m.get("header").map(|v| (v, v.as_str())) {
            Some((_, Some(h)))
                if !h.is_empty()
                    && h.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) =>
            {
                Some(Source::Header(h.to_ascii_lowercase()))
            }
            Some(_) => {
                self.err(
                    &join(path, "header"),
                    "must be a header name (letters, digits, '-', '_', '.')",
                );
                None
            }
            None => {
                self.err(
                    path,
                    "must name where the value comes from: { header: NAME } or { body: FIELD }",
                );
                None
            }
        }
    }
}

/// `http_admission` as `check-config` prints it.
pub(super) fn render(out: &mut String, c: &HttpAdmissionConfig) {
    if c.policies.is_empty() {
        let _ = writeln!(out, "http_admission:\n  policies: []");
        return;
    }
    let _ = writeln!(out, "http_admission:\n  policies:");
    for p in c.policies.values() {
        let source = |s: &Option<Source>| match s {
            Some(Source::Header(h)) => format!("{{ header: {} }}", yaml_key(h)),
            Some(Source::Body(f)) => format!("{{ body: {} }}", yaml_key(f)),
            None => "null".to_string(),
        };
        let _ = writeln!(out, "    - name: {}", yaml_key(&p.name));
        let _ = writeln!(out, "      host_id: {}", yaml_key(&p.host_id));
        let _ = writeln!(out, "      subject: {}", source(&Some(p.subject.clone())));
        let _ = writeln!(out, "      account: {}", source(&p.account));
        let _ = writeln!(out, "      priority: {}", source(&p.priority));
        let _ = writeln!(out, "      max_wait: {}", format_ms(p.max_wait_ms));
        match &p.tokens {
            Some(t) => {
                let _ = writeln!(out, "      tokens: {}", t.api.name());
                let _ = writeln!(out, "      default_max_tokens: {}", t.default_max_tokens);
            }
            None => {
                let _ = writeln!(out, "      tokens: null");
            }
        }
        if let Some(k) = &p.key {
            let _ = writeln!(out, "      key: {}", source(&Some(k.source.clone())));
            let _ = writeln!(out, "      key_policy: {}", key_policy_name(k.policy));
            if k.debounce_ms > 0 {
                let _ = writeln!(out, "      debounce: {}", format_ms(k.debounce_ms));
            }
        }
    }
}
