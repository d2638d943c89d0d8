//! Admission for HTTP requests that Envoy's external processing filter sends: the configured
//! policies (`http_admission.policies`), and what one request asks of the scheduler under
//! its policy (its host, subject, account, priority, run id), read from its headers. Free of
//! transport: the filter's stream protocol is `service::ext_proc`'s, the tickets the
//! scheduler's, unchanged.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// Where a value of a request comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A request header (lower-cased, as Envoy sends them).
    Header(String),
}

impl Source {
    /// The value in `headers` (the request's, keys lower-cased), trimmed; `None` when absent
    /// or empty.
    pub fn read<'a>(&self, headers: &'a [(String, String)]) -> Option<&'a str> {
        let Source::Header(name) = self;
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// How the configuration names it (`header x-tenant`).
    pub fn describe(&self) -> String {
        let Source::Header(name) = self;
        format!("header {name}")
    }
}

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
}

/// `max_wait` by default.
pub const DEFAULT_MAX_WAIT_MS: u64 = 30_000;

/// `http_admission`: the policies, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpAdmissionConfig {
    pub policies: BTreeMap<String, HttpPolicy>,
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

/// The request with `headers` under `policy`: its subject (required), account and priority
/// (optional), and its run id (`x-request-id`, else `made`).
///
/// Fails when the subject is missing, or a value is not an id (1..128 printable ASCII bytes)
/// or a priority (1..5).
pub fn ask(
    policy: &HttpPolicy,
    headers: &[(String, String)],
    made: impl FnOnce() -> String,
) -> Result<Ask, BadRequest> {
    let id = |source: &Source, role: &'static str| -> Result<Option<String>, BadRequest> {
        match source.read(headers) {
            None => Ok(None),
            Some(v) if id_ok(v) => Ok(Some(v.to_string())),
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
        Some(s) => match s.read(headers) {
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
    let request_id = Source::Header("x-request-id".into());
    let run_id = match request_id.read(headers) {
        Some(v) if id_ok(v) => v.to_string(),
        _ => made(),
    };
    Ok(Ask {
        host_id: policy.host_id.clone(),
        subject,
        account_id,
        priority,
        run_id,
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
        }
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
        let a = ask(&policy(), &h, || unreachable!()).unwrap();
        assert_eq!(
            a,
            Ask {
                host_id: "llm".into(),
                subject: "acme".into(),
                account_id: Some("openai".into()),
                priority: 2,
                run_id: "req-1".into(),
            }
        );
        let a = ask(&policy(), &headers(&[("x-tenant", "acme")]), || {
            "made".into()
        })
        .unwrap();
        assert_eq!(
            (a.account_id, a.priority, a.run_id.as_str()),
            (None, 0, "made")
        );
    }

    #[test]
    fn a_missing_or_bad_value_names_the_header_and_the_policy() {
        let e = ask(&policy(), &headers(&[("x-tenant", "")]), String::new).unwrap_err();
        assert_eq!(
            e.to_string(),
            "header x-tenant: missing (policy \"chat\" takes the subject from it)"
        );
        let e = ask(
            &policy(),
            &headers(&[("x-tenant", "a"), ("x-priority", "9")]),
            String::new,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "header x-priority: must be 1 (highest) to 5 (policy \"chat\" takes the priority from it)"
        );
        let e = ask(&policy(), &headers(&[("x-tenant", "a\u{7f}")]), String::new).unwrap_err();
        assert!(e.to_string().contains("printable ASCII"), "{e}");
    }
}
