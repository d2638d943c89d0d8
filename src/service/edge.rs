//! The edge between the wire and the domain: request validation (every rule names its field),
//! requests into domain arguments, and the single mapping from domain outcomes to gRPC
//! statuses. Replies are built in [`super::replies`].

use std::collections::HashMap;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::api;
use crate::auth::{AuthPolicy, BucketRule, BucketSource, MAX_AUTH_MS, MAX_DECLARED_BUCKETS};
use crate::config::{MAX_TOKENS, check_id};
use crate::ledger::{AuthorizeArgs, Coverage, LedgerError, Resolution, Usage, usd_to_micros};
use crate::scheduler::{
    DEFAULT_PRIORITY, HeldArgs, LEVELS, Outcome, ReclaimRefusal, Refusal, Report, SubmitArgs,
    SubmitError, SubmitMode,
};
use crate::store::{StoreError, TicketId};

/// The ErrorInfo domain of every refusal.
pub const ERROR_DOMAIN: &str = "admission.v1";
/// Most tickets one Renew may name.
pub const MAX_RENEW_IDS: usize = 1000;
/// Most tickets one ListTickets may return.
pub const MAX_LIST: u32 = 10_000;
/// Largest rss_mb accepted (16 TiB): anything above is a unit mistake, not a measurement.
pub const MAX_RSS_MB: u32 = 16 * 1024 * 1024;
/// A ticket id is a host id (≤ 128 bytes), a dot and 32 hex digits.
const MAX_TICKET_ID: usize = 128 + 1 + 32;

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
    #[error("ticket_id: no such ticket: {0}")]
    NotFound(String),
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
        }
    }
}

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

fn refusal_message(r: Refusal) -> &'static str {
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
            ApiError::RunIdConflict { .. } => Status::failed_precondition(message),
            ApiError::ReclaimRefused(r) => Status::with_error_details(
                Code::FailedPrecondition,
                message,
                ErrorDetails::with_error_info(
                    r.code(),
                    ERROR_DOMAIN,
                    HashMap::<String, String>::new(),
                ),
            ),
            ApiError::NotFound(_) | ApiError::Ledger(LedgerError::NoSuchReservation) => {
                Status::not_found(message)
            }
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

/// Check an id field: 1..128 bytes of printable ASCII.
pub fn id(value: &str, field: &str) -> Result<(), ApiError> {
    check_id(value).map_err(|rule| ApiError::invalid(field, rule))
}

/// Check a ticket id field: 1..161 bytes of printable ASCII. Returns the ticket it names, or
/// `None` for an id the authority cannot have issued (not `<host_id>.<32 hex digits>`), which
/// callers answer as an unknown ticket (NOT_FOUND on Wait, EXPIRED on Renew and Release),
/// never as bad input: a retry with a mangled id must not fail a whole Renew batch.
pub fn ticket_id(value: &str, field: &str) -> Result<Option<TicketId>, ApiError> {
    if value.is_empty() {
        return Err(ApiError::invalid(field, "must not be empty"));
    }
    if value.len() > MAX_TICKET_ID {
        return Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_TICKET_ID} bytes"),
        ));
    }
    if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(ApiError::invalid(field, "must be printable ASCII"));
    }
    Ok(TicketId::parse(value).filter(|t| check_id(&t.host_id).is_ok()))
}

/// What a Release names: a ticket by id (`None` for an id never issued), or the ticket of a run.
pub enum ReleaseTarget<'a> {
    Ticket(Option<TicketId>),
    Run { host_id: &'a str, run_id: &'a str },
}

/// Validate a ReleaseRequest's report: the outcome and latency of the run's provider call.
pub fn release_report(req: &api::ReleaseRequest) -> Result<Report, ApiError> {
    let outcome = match api::Outcome::try_from(req.outcome) {
        Ok(api::Outcome::Unspecified) => Outcome::Unspecified,
        Ok(api::Outcome::Ok) => Outcome::Ok,
        Ok(api::Outcome::RateLimited) => Outcome::RateLimited,
        Ok(api::Outcome::Overloaded) => Outcome::Overloaded,
        Ok(api::Outcome::Failed) => Outcome::Failed,
        Err(_) => {
            return Err(ApiError::invalid(
                "outcome",
                format!(
                    "unknown value {}; use OUTCOME_OK (1), OUTCOME_RATE_LIMITED (2), OUTCOME_OVERLOADED (3) or OUTCOME_FAILED (4)",
                    req.outcome
                ),
            ));
        }
    };
    Ok(Report {
        outcome,
        latency_ms: req.latency_ms,
    })
}

/// Validate a ReleaseRequest: `ticket_id`, or `host_id` and `run_id`, not both.
pub fn release_target(req: &api::ReleaseRequest) -> Result<ReleaseTarget<'_>, ApiError> {
    let by_run = !req.host_id.is_empty() || !req.run_id.is_empty();
    if !req.ticket_id.is_empty() && by_run {
        return Err(ApiError::invalid(
            "ticket_id",
            "give ticket_id, or host_id and run_id, not both",
        ));
    }
    if !by_run {
        return Ok(ReleaseTarget::Ticket(ticket_id(
            &req.ticket_id,
            "ticket_id",
        )?));
    }
    id(&req.host_id, "host_id")?;
    id(&req.run_id, "run_id")?;
    Ok(ReleaseTarget::Run {
        host_id: &req.host_id,
        run_id: &req.run_id,
    })
}

fn rss(value: Option<u32>) -> Result<Option<u32>, ApiError> {
    match value {
        Some(v) if v > MAX_RSS_MB => Err(ApiError::invalid(
            "rss_mb",
            format!("must be <= {MAX_RSS_MB} (MiB)"),
        )),
        v => Ok(v),
    }
}

/// Validate a SubmitRequest; returns the host and the core's arguments.
pub fn submit_args(req: api::SubmitRequest) -> Result<(String, SubmitArgs), ApiError> {
    id(&req.host_id, "host_id")?;
    id(&req.instance_id, "instance_id")?;
    id(&req.subject, "subject")?;
    if !req.account_id.is_empty() {
        id(&req.account_id, "account_id")?;
    }
    id(&req.run_id, "run_id")?;
    let mode = match api::SubmitMode::try_from(req.mode) {
        Ok(api::SubmitMode::Unspecified | api::SubmitMode::Queue) => SubmitMode::Queue,
        Ok(api::SubmitMode::Try) => SubmitMode::Try,
        Err(_) => {
            return Err(ApiError::invalid(
                "mode",
                format!(
                    "unknown value {}; use SUBMIT_MODE_QUEUE (1) or SUBMIT_MODE_TRY (2)",
                    req.mode
                ),
            ));
        }
    };
    let rss_mb = rss(req.rss_mb)?;
    let priority = match req.priority {
        0 => DEFAULT_PRIORITY,
        p if p <= LEVELS as u32 => p as u8,
        p => {
            return Err(ApiError::invalid(
                "priority",
                format!("must be 1 (highest) .. {LEVELS} (lowest), or 0 for the default; got {p}"),
            ));
        }
    };
    let account_id = (!req.account_id.is_empty()).then_some(req.account_id);
    Ok((
        req.host_id,
        SubmitArgs {
            instance_id: req.instance_id,
            subject: req.subject,
            account_id,
            run_id: req.run_id,
            mode,
            rss_mb,
            priority,
        },
    ))
}

/// Validate a ReclaimRequest: the ticket it names (an id this authority issues, for
/// `host_id`) and what its Submit said, by Submit's rules.
pub fn reclaim_args(req: api::ReclaimRequest) -> Result<(TicketId, HeldArgs), ApiError> {
    id(&req.host_id, "host_id")?;
    let ticket = ticket_id(&req.ticket_id, "ticket_id")?.ok_or_else(|| {
        ApiError::invalid(
            "ticket_id",
            "not a ticket id this authority issues (<host_id>.<32 hex digits>)",
        )
    })?;
    if ticket.host_id != req.host_id {
        return Err(ApiError::invalid(
            "ticket_id",
            format!(
                "names host {:?}, not host_id {:?}",
                ticket.host_id, req.host_id
            ),
        ));
    }
    if req.grant == 0 {
        return Err(ApiError::invalid(
            "grant",
            "must be the grant of the ticket's admission (> 0)",
        ));
    }
    let (_, args) = submit_args(api::SubmitRequest {
        host_id: req.host_id,
        instance_id: req.instance_id,
        subject: req.subject,
        account_id: req.account_id,
        run_id: req.run_id,
        priority: req.priority,
        ..Default::default()
    })?;
    Ok((
        ticket,
        HeldArgs {
            instance_id: args.instance_id,
            subject: args.subject,
            account_id: args.account_id,
            run_id: args.run_id,
            grant: req.grant,
            priority: args.priority,
        },
    ))
}

/// Validate a RenewRequest: the tickets it names (`None` for ids never issued) and rss_mb.
#[allow(clippy::type_complexity)]
pub fn renew_args(
    req: &api::RenewRequest,
) -> Result<(Vec<Option<TicketId>>, Option<u32>), ApiError> {
    if req.ticket_ids.len() > MAX_RENEW_IDS {
        return Err(ApiError::invalid(
            "ticket_ids",
            format!("at most {MAX_RENEW_IDS} per call"),
        ));
    }
    let ids = req
        .ticket_ids
        .iter()
        .enumerate()
        .map(|(i, t)| ticket_id(t, &format!("ticket_ids[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((ids, rss(req.rss_mb)?))
}

/// Largest step number: no run takes a million model steps.
pub const MAX_STEP: u32 = 1_000_000;

fn step(value: u32) -> Result<u32, ApiError> {
    if value == 0 || value > MAX_STEP {
        return Err(ApiError::invalid(
            "step",
            format!("must be 1..{MAX_STEP} (steps are 1-based)"),
        ));
    }
    Ok(value)
}

fn tokens(value: i64, field: &str, min: u64) -> Result<u64, ApiError> {
    match u64::try_from(value) {
        Ok(v) if (min..=MAX_TOKENS).contains(&v) => Ok(v),
        _ => Err(ApiError::invalid(
            field,
            format!("must be {min}..{MAX_TOKENS} tokens, got {value}"),
        )),
    }
}

fn usd(value: f64, field: &str) -> Result<u64, ApiError> {
    usd_to_micros(value).ok_or_else(|| {
        ApiError::invalid(
            field,
            format!(
                "must be a finite number of dollars, 0..{}, got {value}",
                crate::ledger::MAX_USD
            ),
        )
    })
}

/// Validate an AuthorizeRequest; returns the host and the ledger's arguments.
pub fn authorize_args(req: api::AuthorizeRequest) -> Result<(String, AuthorizeArgs), ApiError> {
    id(&req.host_id, "host_id")?;
    id(&req.run_id, "run_id")?;
    let step = step(req.step)?;
    id(&req.subject, "subject")?;
    if !req.account_id.is_empty() {
        id(&req.account_id, "account_id")?;
    }
    if !req.model.is_empty() {
        id(&req.model, "model")?;
    }
    let requested_output_tokens =
        tokens(req.requested_output_tokens, "requested_output_tokens", 1)?;
    let estimated_input_tokens = tokens(req.estimated_input_tokens, "estimated_input_tokens", 0)?;
    let estimated_cost = usd(req.estimated_cost_usd, "estimated_cost_usd")?;
    let account_id = (!req.account_id.is_empty()).then_some(req.account_id);
    Ok((
        req.host_id,
        AuthorizeArgs {
            run_id: req.run_id,
            step,
            subject: req.subject,
            account_id,
            model: req.model,
            requested_output_tokens,
            estimated_input_tokens,
            estimated_cost,
        },
    ))
}

/// Validate a SettleRequest; returns its step and usage.
pub fn settle_args(req: &api::SettleRequest) -> Result<(u32, Usage), ApiError> {
    id(&req.host_id, "host_id")?;
    id(&req.run_id, "run_id")?;
    let step = step(req.step)?;
    let u = req
        .usage
        .as_ref()
        .ok_or_else(|| ApiError::invalid("usage", "is required"))?;
    let coverage = match api::Coverage::try_from(u.coverage) {
        Ok(api::Coverage::Complete) => Coverage::Complete,
        Ok(api::Coverage::Partial) => Coverage::Partial,
        Ok(api::Coverage::Unknown) => Coverage::Unknown,
        _ => {
            return Err(ApiError::invalid(
                "usage.coverage",
                format!(
                    "must be COVERAGE_COMPLETE (1), COVERAGE_PARTIAL (2) or COVERAGE_UNKNOWN (3), \
                     got {}",
                    u.coverage
                ),
            ));
        }
    };
    Ok((
        step,
        Usage {
            input_tokens: tokens(u.input_tokens, "usage.input_tokens", 0)?,
            output_tokens: tokens(u.output_tokens, "usage.output_tokens", 0)?,
            cost: usd(u.cost_usd, "usage.cost_usd")?,
            coverage,
        },
    ))
}

/// Validate a ResolveReservationRequest; returns its step and resolution.
pub fn resolve_args(req: &api::ResolveReservationRequest) -> Result<(u32, Resolution), ApiError> {
    id(&req.host_id, "host_id")?;
    id(&req.run_id, "run_id")?;
    let step = step(req.step)?;
    let resolution = match api::Resolution::try_from(req.resolution) {
        Ok(api::Resolution::Consumed) => Resolution::Consumed,
        Ok(api::Resolution::Released) => Resolution::Released,
        _ => {
            return Err(ApiError::invalid(
                "resolution",
                format!(
                    "must be RESOLUTION_CONSUMED (1) or RESOLUTION_RELEASED (2), got {}",
                    req.resolution
                ),
            ));
        }
    };
    Ok((step, resolution))
}

/// Validate the (endpoint, identity) of an auth call; returns the endpoint's rule.
pub fn auth_key(
    policy: &AuthPolicy,
    endpoint: &str,
    identity: &str,
    declared: Option<&api::AuthBucket>,
) -> Result<(BucketRule, BucketSource), ApiError> {
    id(endpoint, "endpoint")?;
    id(identity, "identity")?;
    let declared = declared.map(declared_bucket).transpose()?;
    if declared.is_some() && !crate::auth::valid_endpoint_name(endpoint) {
        return Err(ApiError::invalid(
            "endpoint",
            crate::auth::ENDPOINT_NAME_RULE,
        ));
    }
    policy.resolve(endpoint, declared).ok_or_else(|| {
        ApiError::invalid(
            "endpoint",
            format!(
                "unknown endpoint {endpoint:?}; configured: {} (or declare its bucket in \
                 `declared`)",
                policy.endpoints().collect::<Vec<_>>().join(", ")
            ),
        )
    })
}

/// A caller's declared bucket, checked as the configuration's auth.buckets are.
fn declared_bucket(b: &api::AuthBucket) -> Result<BucketRule, ApiError> {
    let mut bad = Vec::new();
    if !(1..=1_000_000).contains(&b.max_attempts) {
        bad.push(("declared.max_attempts", "must be 1..1000000"));
    }
    if !(1..=MAX_AUTH_MS).contains(&b.window_ms) {
        bad.push(("declared.window_ms", "must be 1..604800000 (7 days)"));
    }
    if b.lockout_ms > MAX_AUTH_MS {
        bad.push(("declared.lockout_ms", "must be 0..604800000 (7 days)"));
    }
    if !bad.is_empty() {
        return Err(ApiError::InvalidFields(
            bad.into_iter()
                .map(|(f, r)| (f.to_string(), r.to_string()))
                .collect(),
        ));
    }
    Ok(BucketRule::new(b.max_attempts, b.window_ms, b.lockout_ms))
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
