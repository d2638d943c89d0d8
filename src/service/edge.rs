//! The edge between the wire and the domain: request validation (every rule names its field)
//! and requests into domain arguments. Failures become statuses in [`super::status`]; replies
//! are built in [`super::replies`].

use crate::api;
use crate::auth::{AuthPolicy, BucketRule, BucketSource, MAX_AUTH_MS};
use crate::config::{MAX_TOKENS, check_id};
use crate::ledger::{AuthorizeArgs, Coverage, Resolution, Usage, usd_to_micros};
use crate::scheduler::{
    DEFAULT_PRIORITY, HeldArgs, KeyArgs, KeyPolicy, LEVELS, Outcome, Report, SubmitArgs, SubmitMode,
};
use crate::store::TicketId;

use super::status::ApiError;

/// Most tickets one Renew may name.
pub const MAX_RENEW_IDS: usize = 1000;
/// Most tickets one ListTickets may return.
pub const MAX_LIST: u32 = 10_000;
/// Largest rss_mb accepted (16 TiB): anything above is a unit mistake, not a measurement.
pub const MAX_RSS_MB: u32 = 16 * 1024 * 1024;
/// The longest debounce and debounce_max: a debounce is seconds of typing, not a schedule.
pub const MAX_DEBOUNCE_MS: u64 = 3_600_000;
/// A ticket id is a host id (≤ 128 bytes), a dot and 32 hex digits.
const MAX_TICKET_ID: usize = 128 + 1 + 32;

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
    let keyed = keyed(&req, mode)?;
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
            resubmit_expired: req.resubmit_expired,
            keyed,
        },
    ))
}

/// Validate a Submit's key, key_policy, supersede_running, debounce and debounce_max.
fn keyed(req: &api::SubmitRequest, mode: SubmitMode) -> Result<Option<KeyArgs>, ApiError> {
    let policy = match api::KeyPolicy::try_from(req.key_policy) {
        Ok(api::KeyPolicy::None) => KeyPolicy::None,
        Ok(api::KeyPolicy::KeepNewest) => KeyPolicy::KeepNewest,
        Ok(api::KeyPolicy::Serial) => KeyPolicy::Serial,
        Ok(api::KeyPolicy::SerialKeepNewest) => KeyPolicy::SerialKeepNewest,
        Ok(api::KeyPolicy::RejectNew) => KeyPolicy::RejectNew,
        Err(_) => {
            return Err(ApiError::invalid(
                "key_policy",
                format!(
                    "unknown value {}; use KEY_POLICY_NONE (0), KEY_POLICY_KEEP_NEWEST (1), \
                     KEY_POLICY_SERIAL (2), KEY_POLICY_SERIAL_KEEP_NEWEST (3) or \
                     KEY_POLICY_REJECT_NEW (4)",
                    req.key_policy
                ),
            ));
        }
    };
    let debounce_ms = duration_ms(req.debounce.as_ref(), "debounce")?;
    let debounce_max_ms = duration_ms(req.debounce_max.as_ref(), "debounce_max")?;
    if req.key.is_empty() {
        if policy != KeyPolicy::None {
            return Err(ApiError::invalid(
                "key",
                format!("must be set with key_policy {}", policy.code()),
            ));
        }
    } else {
        id(&req.key, "key")?;
    }
    let keep_newest = |field: &str| {
        ApiError::invalid(
            field,
            format!(
                "needs key_policy KEY_POLICY_KEEP_NEWEST or KEY_POLICY_SERIAL_KEEP_NEWEST, not {}",
                policy.code()
            ),
        )
    };
    if req.supersede_running && !policy.keeps_newest() {
        return Err(keep_newest("supersede_running"));
    }
    if debounce_ms > 0 {
        if !policy.keeps_newest() {
            return Err(keep_newest("debounce"));
        }
        if mode == SubmitMode::Try {
            return Err(ApiError::invalid(
                "debounce",
                "needs mode SUBMIT_MODE_QUEUE: a debounced ticket waits",
            ));
        }
    }
    if debounce_max_ms > 0 && debounce_max_ms < debounce_ms {
        return Err(ApiError::invalid(
            "debounce_max",
            format!("must be at least debounce ({debounce_ms} ms), or unset"),
        ));
    }
    if debounce_max_ms > 0 && debounce_ms == 0 {
        return Err(ApiError::invalid("debounce_max", "needs debounce"));
    }
    Ok((!req.key.is_empty()).then(|| KeyArgs {
        key: req.key.clone(),
        policy,
        supersede_running: req.supersede_running,
        debounce_ms,
        debounce_max_ms,
    }))
}

/// A Duration field as whole milliseconds: not negative, at most [`MAX_DEBOUNCE_MS`], no
/// fraction of a millisecond; unset is 0.
fn duration_ms(d: Option<&prost_types::Duration>, field: &str) -> Result<u64, ApiError> {
    let Some(d) = d else { return Ok(0) };
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(ApiError::invalid(field, "must not be negative"));
    }
    if d.nanos % 1_000_000 != 0 {
        return Err(ApiError::invalid(
            field,
            "must be a whole number of milliseconds",
        ));
    }
    let ms = (d.seconds as u64)
        .saturating_mul(1000)
        .saturating_add(d.nanos as u64 / 1_000_000);
    if ms > MAX_DEBOUNCE_MS {
        return Err(ApiError::invalid(
            field,
            format!("must be at most {MAX_DEBOUNCE_MS} ms (1 hour)"),
        ));
    }
    Ok(ms)
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
        key: req.key,
        key_policy: req.key_policy,
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
            key: args.keyed.map(|k| (k.key, k.policy)),
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
