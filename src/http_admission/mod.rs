//! Admission for HTTP requests that Envoy's external processing filter sends: the configured
//! policies (`http_admission.policies`), and what one request asks of the scheduler under
//! its policy (its host, subject, account, priority, run id), read from its headers or its
//! JSON body; [`openai`]: the request's tokens and the response's usage, for policies with
//! `tokens: openai`. Free of transport: the filter's stream protocol is `service::ext_proc`'s,
//! the tickets the scheduler's, unchanged.

pub mod anthropic;
pub mod openai;
pub mod usage;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// Where a value of a request comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A request header (lower-cased, as Envoy sends them).
    Header(String),
    /// A top-level string field of the request's JSON body (`model`).
    Body(String),
}

impl Source {
    /// The value in `headers` (the request's, keys lower-cased) or `body`, trimmed; `None`
    /// when absent or empty.
    pub fn read(&self, headers: &[(String, String)], body: &[u8]) -> Option<String> {
        let v = match self {
            Source::Header(name) => headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.trim().to_string()),
            Source::Body(field) => openai::field(body, field).map(|v| v.trim().to_string()),
        };
        v.filter(|v| !v.is_empty())
    }

    /// How the configuration names it (`header x-tenant`, `body field model`).
    pub fn describe(&self) -> String {
        match self {
            Source::Header(name) => format!("header {name}"),
            Source::Body(field) => format!("body field {field}"),
        }
    }
}

/// What a policy reserves of the ledger per request: the request's tokens reserved with
/// Authorize before it goes on, its response's usage settled, read in the shape of `api`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tokens {
    pub api: Api,
    /// Output tokens reserved for a request that sets no bound.
    pub default_max_tokens: u64,
}

/// The API whose bodies a policy with tokens reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `tokens: openai`: Chat Completions, Completions and Responses.
    OpenAi,
    /// `tokens: anthropic`: Anthropic's Messages API.
    Anthropic,
}

impl Api {
    /// The name a policy's `tokens` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
        }
    }

    /// What a request of this API asks for.
    pub fn asked(self, body: &[u8], default_output: u64) -> Result<openai::Asked, String> {
        match self {
            Api::OpenAi => openai::asked(body, default_output),
            Api::Anthropic => anthropic::asked(body, default_output),
        }
    }

    /// The request rewritten to a lower output bound.
    pub fn with_output_bound(self, body: &[u8], granted: u64) -> Option<Vec<u8>> {
        match self {
            Api::OpenAi => openai::with_output_bound(body, granted),
            Api::Anthropic => anthropic::with_output_bound(body, granted),
        }
    }
}

/// The request header whose value names a request's run id (with a per-stream suffix), as
/// Envoy sets it.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// `default_max_tokens` by default.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// One policy: which host's scheduler an HTTP request is admitted by, and where its subject,
/// account and priority come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpPolicy {
    pub name: String,
    pub host_id: String,
    pub subject: Source,
    pub account: Option<Source>,
    pub priority: Option<Source>,
    /// The longest a request waits in the queue, then 429.
    pub max_wait_ms: u64,
    pub tokens: Option<Tokens>,
    /// Requests of one key (a conversation): where the key comes from, its policy and debounce.
    pub key: Option<KeySource>,
}

/// Where a policy's requests take their key, and what the key does (the keys of the
/// scheduler: the newest message of a conversation wins, or its requests run one at a time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySource {
    pub source: Source,
    pub policy: crate::scheduler::KeyPolicy,
    /// Debounce (keep-newest policies): admitted only once no newer request of the key came
    /// for this long.
    pub debounce_ms: u64,
}

/// A key policy as a policy's `key_policy` spells it (as the clients and the LiteLLM drop-in
/// do).
pub fn key_policy_named(name: &str) -> Option<crate::scheduler::KeyPolicy> {
    use crate::scheduler::KeyPolicy as P;
    Some(match name {
        "none" => P::None,
        "keep_newest" => P::KeepNewest,
        "serial" => P::Serial,
        "serial_keep_newest" => P::SerialKeepNewest,
        "reject_new" => P::RejectNew,
        _ => return None,
    })
}

/// The name [`key_policy_named`] reads.
pub fn key_policy_name(p: crate::scheduler::KeyPolicy) -> &'static str {
    use crate::scheduler::KeyPolicy as P;
    match p {
        P::None => "none",
        P::KeepNewest => "keep_newest",
        P::Serial => "serial",
        P::SerialKeepNewest => "serial_keep_newest",
        P::RejectNew => "reject_new",
    }
}

impl HttpPolicy {
    /// Whether [`ask`] reads the request header `name` (lower-cased) under this policy: its
    /// sources' headers and `x-request-id`, the only headers worth copying out of Envoy's
    /// message.
    pub fn reads_header(&self, name: &str) -> bool {
        let reads = |s: &Source| matches!(s, Source::Header(h) if h == name);
        name == REQUEST_ID_HEADER
            || reads(&self.subject)
            || self.account.as_ref().is_some_and(reads)
            || self.priority.as_ref().is_some_and(reads)
            || self.key.as_ref().is_some_and(|k| reads(&k.source))
    }

    /// Whether a request is admitted only once its body is read (a body source, or tokens):
    /// the filter must send the request body (`request_body_mode: BUFFERED`).
    pub fn needs_body(&self) -> bool {
        let body = |s: &Option<Source>| matches!(s, Some(Source::Body(_)));
        self.tokens.is_some()
            || matches!(self.subject, Source::Body(_))
            || body(&self.account)
            || body(&self.priority)
            || matches!(
                &self.key,
                Some(KeySource {
                    source: Source::Body(_),
                    ..
                })
            )
    }
}

/// `max_wait` by default.
pub const DEFAULT_MAX_WAIT_MS: u64 = 30_000;

/// `http_admission`: the policies, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpAdmissionConfig {
    /// Shared, not copied, by each request admitted under one.
    pub policies: BTreeMap<String, Arc<HttpPolicy>>,
}

/// The policies in force, replaced whole by a reload (SIGHUP): a request keeps the policy it
/// began under.
#[derive(Debug, Default)]
pub struct LivePolicies(RwLock<Arc<HttpAdmissionConfig>>);

impl LivePolicies {
    pub fn new(config: HttpAdmissionConfig) -> Self {
        LivePolicies(RwLock::new(Arc::new(config)))
    }

    pub fn get(&self) -> Arc<HttpAdmissionConfig> {
        self.0.read().expect("policies lock").clone()
    }

    pub fn replace(&self, config: HttpAdmissionConfig) {
        *self.0.write().expect("policies lock") = Arc::new(config);
    }
}

/// What one request asks of the scheduler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub host_id: String,
    pub subject: String,
    pub account_id: Option<String>,
    /// 0 = the host's default.
    pub priority: u8,
    pub run_id: String,
    /// Its key, under the policy's key policy and debounce.
    pub keyed: Option<crate::scheduler::KeyArgs>,
}

/// Why a request cannot be asked for: answered 400, naming what is missing or wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    #[error("{what}: missing (policy {policy:?} takes the {role} from it)")]
    Missing {
        policy: String,
        role: &'static str,
        what: String,
    },
    #[error("{what}: {problem} (policy {policy:?} takes the {role} from it)")]
    Invalid {
        policy: String,
        role: &'static str,
        what: String,
        problem: &'static str,
    },
}

/// Ids the authority takes: 1..128 bytes of printable ASCII.
fn id_ok(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// The request with `headers` (and `body`, empty when not read) under `policy`: its subject
/// (required), account and priority (optional), and its run id: the request's own, made of
/// `stream` (a random number of its processing stream) after its `x-request-id` when it has
/// one (`<x-request-id>.<16 hex digits>`, so operators find it by the request id), else
/// `ext-proc-<16 hex digits>`. Each HTTP request is one ticket: a client can send any
/// `x-request-id`, and two live requests that send the same one must not share a slot.
///
/// Fails when the subject is missing, or a value is not an id (1..128 printable ASCII bytes)
/// or a priority (1..5).
pub fn ask(
    policy: &HttpPolicy,
    headers: &[(String, String)],
    body: &[u8],
    stream: u64,
) -> Result<Ask, BadRequest> {
    let id = |source: &Source, role: &'static str| -> Result<Option<String>, BadRequest> {
        match source.read(headers, body) {
            None => Ok(None),
            Some(v) if id_ok(&v) => Ok(Some(v)),
            Some(_) => Err(BadRequest::Invalid {
                policy: policy.name.clone(),
                role,
                what: source.describe(),
                problem: "must be 1..128 bytes of printable ASCII",
            }),
        }
    };
    let subject = id(&policy.subject, "subject")?.ok_or_else(|| BadRequest::Missing {
        policy: policy.name.clone(),
        role: "subject",
        what: policy.subject.describe(),
    })?;
    let account_id = match &policy.account {
        Some(s) => id(s, "account")?,
        None => None,
    };
    let priority = match &policy.priority {
        Some(s) => match s.read(headers, body) {
            None => 0,
            Some(v) => match v.parse::<u8>() {
                Ok(p) if (1..=5).contains(&p) => p,
                _ => {
                    return Err(BadRequest::Invalid {
                        policy: policy.name.clone(),
                        role: "priority",
                        what: s.describe(),
                        problem: "must be 1 (highest) to 5",
                    });
                }
            },
        },
        None => 0,
    };
    let keyed = match &policy.key {
        Some(k) => id(&k.source, "key")?.map(|key| crate::scheduler::KeyArgs {
            key,
            policy: k.policy,
            supersede_running: false,
            debounce_ms: k.debounce_ms,
            debounce_max_ms: 0,
        }),
        None => None,
    };
    let request_id = headers
        .iter()
        .find(|(k, _)| k == REQUEST_ID_HEADER)
        .map(|(_, v)| v.trim());
    let run_id = match request_id {
        // 128 bytes at most: the request id's first 111, a dot and 16 hex digits.
        Some(v) if id_ok(v) => format!("{}.{stream:016x}", &v[..v.len().min(111)]),
        _ => format!("ext-proc-{stream:016x}"),
    };
    Ok(Ask {
        host_id: policy.host_id.clone(),
        subject,
        account_id,
        priority,
        run_id,
        keyed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> HttpPolicy {
        HttpPolicy {
            name: "chat".into(),
            host_id: "llm".into(),
            subject: Source::Header("x-tenant".into()),
            account: Some(Source::Header("x-provider".into())),
            priority: Some(Source::Header("x-priority".into())),
            max_wait_ms: 1_000,
            tokens: None,
            key: None,
        }
    }

    #[test]
    fn a_policy_reads_its_sources_headers_and_the_request_id_and_nothing_else() {
        let mut p = policy();
        p.key = Some(KeySource {
            source: Source::Header("x-conversation".into()),
            policy: crate::scheduler::KeyPolicy::SerialKeepNewest,
            debounce_ms: 0,
        });
        for h in [
            "x-tenant",
            "x-provider",
            "x-priority",
            "x-conversation",
            "x-request-id",
        ] {
            assert!(p.reads_header(h), "{h}");
        }
        for h in [":path", "user-agent", "x-tenant-2", "content-type"] {
            assert!(!p.reads_header(h), "{h}");
        }
        p.subject = Source::Body("user".into());
        assert!(!p.reads_header("x-tenant"));
    }

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_request_is_asked_for_from_its_headers() {
        let h = headers(&[
            ("x-tenant", " acme "),
            ("x-provider", "openai"),
            ("x-priority", "2"),
            ("x-request-id", "req-1"),
        ]);
        let a = ask(&policy(), &h, b"", 0xab).unwrap();
        assert_eq!(
            a,
            Ask {
                host_id: "llm".into(),
                subject: "acme".into(),
                account_id: Some("openai".into()),
                priority: 2,
                run_id: "req-1.00000000000000ab".into(),
                keyed: None,
            }
        );
        let a = ask(&policy(), &headers(&[("x-tenant", "acme")]), b"", 7).unwrap();
        assert_eq!(
            (a.account_id, a.priority, a.run_id.as_str()),
            (None, 0, "ext-proc-0000000000000007")
        );
        // Two streams that send one x-request-id are two runs; a long id still fits.
        let long = "r".repeat(128);
        let h = headers(&[("x-tenant", "acme"), ("x-request-id", &long)]);
        let (a, b) = (
            ask(&policy(), &h, b"", 1).unwrap(),
            ask(&policy(), &h, b"", 2).unwrap(),
        );
        assert_ne!(a.run_id, b.run_id);
        assert_eq!(a.run_id.len(), 128);
        assert!(a.run_id.starts_with(&long[..111]));
    }

    #[test]
    fn a_body_field_is_read_from_the_json_body() {
        let mut p = policy();
        p.account = Some(Source::Body("model".into()));
        assert!(p.needs_body());
        let h = headers(&[("x-tenant", "acme")]);
        let a = ask(&p, &h, br#"{"model":"gpt-x"}"#, 1).unwrap();
        assert_eq!(a.account_id.as_deref(), Some("gpt-x"));
        let a = ask(&p, &h, b"not json", 1).unwrap();
        assert_eq!(a.account_id, None, "absent, as a missing header is");
        assert!(!policy().needs_body());
    }

    #[test]
    fn a_missing_or_bad_value_names_the_header_and_the_policy() {
        let e = ask(&policy(), &headers(&[("x-tenant", "")]), b"", 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "header x-tenant: missing (policy \"chat\" takes the subject from it)"
        );
        let e = ask(
            &policy(),
            &headers(&[("x-tenant", "a"), ("x-priority", "9")]),
            b"",
            1,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "header x-priority: must be 1 (highest) to 5 (policy \"chat\" takes the priority from it)"
        );
        let e = ask(&policy(), &headers(&[("x-tenant", "a\u{7f}")]), b"", 1).unwrap_err();
        assert!(e.to_string().contains("printable ASCII"), "{e}");
    }
}
