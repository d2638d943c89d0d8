//! The single mapping from every way a call can fail ([`ApiError`]: bad input, a refusal, a
//! ledger answer, a store failure) to a gRPC status with its `google.rpc` details. No catch-all:
//! each variant says its code. Requests are checked and converted in [`super::edge`].

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::auth::MAX_DECLARED_BUCKETS;
use crate::ledger::LedgerError;
use crate::scheduler::{KeyPolicy, ReclaimRefusal, Refusal, SubmitError};
use crate::store::StoreError;

/// The ErrorInfo domain of every refusal.
pub const ERROR_DOMAIN: &str = "admission.v1";
/// Every way a call can fail, mapped to a status in one place ([`From<ApiError> for Status`]).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{field}: {rule}")]
    Invalid { field: String, rule: String },
    /// Several fields broke their rules (each `(field, rule)`; never empty).
    #[error("{}", .0.iter().map(|(f, r)| format!("{f}: {r}")).collect::<Vec<_>>().join("; "))]
    InvalidFields(Vec<(String, String)>),
    #[error("{}", refusal_message(*.0))]
    Refused(Refusal),
    #[error("run_id: already names a ticket with another {field}")]
    RunIdConflict { field: &'static str },
    #[error(
        "KEY_BUSY: key: ticket {holder} holds this key (key_policy KEY_POLICY_REJECT_NEW); \
         submit again once it ends"
    )]
    KeyBusy { holder: String },
    #[error(
        "key_policy: the key's live tickets were submitted with {}, this Submit asks {}; a key \
         keeps the policy of its first live ticket",
        live.code(),
        asked.code()
    )]
    KeyPolicyConflict { live: KeyPolicy, asked: KeyPolicy },
    #[error("{field}: {rule}")]
    Unsupported {
        field: &'static str,
        rule: &'static str,
    },
    #[error("ticket_id: no such ticket: {0}")]
    NotFound(String),
    #[error(
        "host_id: no such host: {0:?} (a host is made by the first ticket, reservation or \
         limits change that names it, or listed in the configuration file under hosts:)"
    )]
    NoSuchHost(String),
    #[error("domain: {0:?} is not a configured rate limit domain (rate_limits)")]
    UnknownDomain(String),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Denied(#[from] crate::security::Denied),
    #[error("ticket_id: the ticket is {state}; {rule}")]
    WrongState {
        state: &'static str,
        rule: &'static str,
    },
    #[error(
        "{}: the store lost its state; while the runs still holding slots re-register \
         (about {left_ms} ms more) no new run is admitted, and this submit may not queue",
        refusal.code()
    )]
    Learning { refusal: Refusal, left_ms: u64 },
    #[error("{}", reclaim_message(*.0))]
    ReclaimRefused(ReclaimRefusal),
    #[error("TOO_MANY_STREAMS: {scope} already has {max} Wait streams open")]
    TooManyStreams { max: usize, scope: &'static str },
    #[error(transparent)]
    Unavailable(#[from] StoreError),
    #[error(
        "expected_revision: the limits are at revision {current}, not {expected}; read them again"
    )]
    RevisionMoved { expected: u64, current: u64 },
    #[error(
        "endpoint: {0:?} is not configured and {MAX_DECLARED_BUCKETS} other endpoints are \
         already declared on this authority; name it in auth.buckets"
    )]
    TooManyDeclaredBuckets(String),
}

impl ApiError {
    pub fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Self {
        ApiError::Invalid {
            field: field.into(),
            rule: rule.into(),
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Refused(r) => ApiError::Refused(r),
            SubmitError::Learning { refusal, left_ms } => ApiError::Learning { refusal, left_ms },
            SubmitError::RunIdConflict { field } => ApiError::RunIdConflict { field },
            // Without its host the holder is named by its key alone: see [`submit_error`].
            SubmitError::KeyBusy { holder } => ApiError::KeyBusy {
                holder: format!("{holder:032x}"),
            },
            SubmitError::KeyPolicyConflict { live, asked } => {
                ApiError::KeyPolicyConflict { live, asked }
            }
            SubmitError::Unsupported { field, rule } => ApiError::Unsupported { field, rule },
        }
    }
}

/// A Submit's refusal for host `host_id`, naming a busy key's holder by its ticket id.
pub fn submit_error(host_id: &str, e: SubmitError) -> ApiError {
    match e {
        SubmitError::KeyBusy { holder } => ApiError::KeyBusy {
            holder: crate::store::TicketId {
                host_id: host_id.to_string(),
                key: holder,
            }
            .to_string(),
        },
        e => e.into(),
    }
}

/// How long a caller refused KEY_BUSY should wait before trying again.
pub const KEY_BUSY_RETRY: Duration = Duration::from_secs(1);

/// Store, ledger, security and scheduling failures become statuses through [`ApiError`], so a
/// handler answers any of them with `?`.
macro_rules! status_via_api_error {
    ($($t:ty),*) => {$(
        impl From<$t> for Status {
            fn from(e: $t) -> Status {
                ApiError::from(e).into()
            }
        }
    )*};
}
status_via_api_error!(
    StoreError,
    LedgerError,
    crate::security::Denied,
    SubmitError
);

/// The ErrorInfo reason of an UNAVAILABLE answer: `STORE_UNAVAILABLE` when the store was never
/// reached (the call was not applied: retry freely), `OUTCOME_UNKNOWN` when it may have been
/// applied (retry with the same idempotency key, or release by run). Part of the contract.
pub fn store_error_reason(e: &StoreError) -> &'static str {
    if e.may_have_applied() {
        "OUTCOME_UNKNOWN"
    } else {
        "STORE_UNAVAILABLE"
    }
}

/// What a refusal means, for a caller (the gRPC status message, an HTTP refusal's body).
pub fn refusal_message(r: Refusal) -> &'static str {
    match r {
        Refusal::Busy => "BUSY: no slot is free and this submit may not queue",
        Refusal::QueueFull => {
            "QUEUE_FULL: the queue is full and the overflow policy cannot make room"
        }
        Refusal::MemoryPressure => "MEMORY_PRESSURE: reported memory is at the hard limit",
        Refusal::Draining => "DRAINING: this authority is draining and admits no new tickets",
    }
}

fn reclaim_message(r: ReclaimRefusal) -> String {
    match r {
        ReclaimRefusal::Ended(state) => format!(
            "TICKET_ENDED: ticket_id: the ticket ended ({}) and an ended run never comes back; \
             Submit a new ticket",
            crate::service::state_name(state)
        ),
        ReclaimRefusal::RunIdTaken => {
            "RUN_ID_TAKEN: run_id: another ticket of the host holds this run_id".to_string()
        }
        ReclaimRefusal::OtherRun => {
            "TICKET_MISMATCH: run_id: the ticket was submitted for another run".to_string()
        }
    }
}

/// How long a refused caller should wait before trying again (google.rpc.RetryInfo).
pub fn retry_after(r: Refusal) -> Duration {
    match r {
        Refusal::Busy => Duration::from_secs(1),
        Refusal::QueueFull => Duration::from_secs(2),
        Refusal::MemoryPressure => Duration::from_secs(5),
        Refusal::Draining => Duration::from_secs(10),
    }
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        let message = e.to_string();
        match e {
            ApiError::Invalid { field, rule } => Status::with_error_details(
                Code::InvalidArgument,
                message,
                ErrorDetails::with_bad_request_violation(field, rule),
            ),
            ApiError::InvalidFields(violations) => Status::with_error_details(
                Code::InvalidArgument,
                message,
                ErrorDetails::with_bad_request(
                    violations
                        .into_iter()
                        .map(|(f, r)| tonic_types::FieldViolation::new(f, r))
                        .collect::<Vec<_>>(),
                ),
            ),
            ApiError::Refused(r) => {
                let mut details = ErrorDetails::with_error_info(
                    r.code(),
                    ERROR_DOMAIN,
                    HashMap::<String, String>::new(),
                );
                details.set_retry_info(Some(retry_after(r)));
                Status::with_error_details(Code::ResourceExhausted, message, details)
            }
            ApiError::Learning { refusal, left_ms } => {
                let mut details = ErrorDetails::with_error_info(
                    refusal.code(),
                    ERROR_DOMAIN,
                    HashMap::from([
                        ("cause".to_string(), "STATE_LOSS".to_string()),
                        ("learning_left_ms".to_string(), left_ms.to_string()),
                    ]),
                );
                details.set_retry_info(Some(Duration::from_millis(left_ms.max(100))));
                Status::with_error_details(Code::ResourceExhausted, message, details)
            }
            ApiError::RunIdConflict { .. }
            | ApiError::KeyPolicyConflict { .. }
            | ApiError::Unsupported { .. } => Status::failed_precondition(message),
            ApiError::KeyBusy { holder } => {
                let mut details = ErrorDetails::with_error_info(
                    "KEY_BUSY",
                    ERROR_DOMAIN,
                    HashMap::from([("holder".to_string(), holder)]),
                );
                details.set_retry_info(Some(KEY_BUSY_RETRY));
                Status::with_error_details(Code::ResourceExhausted, message, details)
            }
            ApiError::ReclaimRefused(r) => Status::with_error_details(
                Code::FailedPrecondition,
                message,
                ErrorDetails::with_error_info(
                    r.code(),
                    ERROR_DOMAIN,
                    HashMap::<String, String>::new(),
                ),
            ),
            ApiError::NotFound(_)
            | ApiError::NoSuchHost(_)
            | ApiError::UnknownDomain(_)
            | ApiError::Ledger(LedgerError::NoSuchReservation) => Status::not_found(message),
            ApiError::Ledger(_) => Status::failed_precondition(message),
            ApiError::Denied(_) => Status::permission_denied(message),
            ApiError::WrongState { .. }
            | ApiError::RevisionMoved { .. }
            | ApiError::TooManyDeclaredBuckets(_) => Status::failed_precondition(message),
            ApiError::TooManyStreams { .. } => {
                let mut details = ErrorDetails::with_error_info(
                    "TOO_MANY_STREAMS",
                    ERROR_DOMAIN,
                    HashMap::<String, String>::new(),
                );
                details.set_retry_info(Some(Duration::from_secs(1)));
                Status::with_error_details(Code::ResourceExhausted, message, details)
            }
            ApiError::Unavailable(e) => {
                let mut details = ErrorDetails::with_error_info(
                    store_error_reason(&e),
                    ERROR_DOMAIN,
                    HashMap::<String, String>::new(),
                );
                details.set_retry_info(Some(Duration::from_secs(1)));
                Status::with_error_details(Code::Unavailable, message, details)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_maps_to_resource_exhausted_with_reason_and_retry() {
        for r in [
            Refusal::Busy,
            Refusal::QueueFull,
            Refusal::MemoryPressure,
            Refusal::Draining,
        ] {
            let status = Status::from(ApiError::Refused(r));
            assert_eq!(status.code(), Code::ResourceExhausted);
            let info = status.get_details_error_info().expect("ErrorInfo");
            assert_eq!(info.reason, r.code());
            assert_eq!(info.domain, ERROR_DOMAIN);
            let retry = status.get_details_retry_info().expect("RetryInfo");
            assert_eq!(retry.retry_delay, Some(retry_after(r)));
        }
    }

    #[test]
    fn store_failures_say_whether_the_call_may_have_been_applied() {
        for (e, reason) in [
            (
                StoreError::Unreachable {
                    what: "x".into(),
                    source: None,
                },
                "STORE_UNAVAILABLE",
            ),
            (
                StoreError::Incompatible { what: "x".into() },
                "STORE_UNAVAILABLE",
            ),
            (
                StoreError::Config {
                    what: "x".into(),
                    source: None,
                },
                "STORE_UNAVAILABLE",
            ),
            (StoreError::Timeout { what: "x".into() }, "OUTCOME_UNKNOWN"),
            (
                StoreError::ConnectionLost {
                    what: "x".into(),
                    source: None,
                },
                "OUTCOME_UNKNOWN",
            ),
            (StoreError::protocol("x"), "OUTCOME_UNKNOWN"),
        ] {
            let status = Status::from(ApiError::Unavailable(e));
            assert_eq!(status.code(), Code::Unavailable);
            let info = status.get_details_error_info().expect("ErrorInfo");
            assert_eq!(
                (info.reason.as_str(), info.domain.as_str()),
                (reason, ERROR_DOMAIN)
            );
        }
    }

    #[test]
    fn invalid_input_names_the_field() {
        let status = Status::from(ApiError::invalid("subject", "must not be empty"));
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "subject: must not be empty");
        let bad = status.get_details_bad_request().expect("BadRequest");
        assert_eq!(bad.field_violations[0].field, "subject");
    }
}
