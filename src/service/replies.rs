//! Domain answers as wire replies: every response message is built here, by conversion, so a
//! handler validates, calls one store operation and converts, and a field's meaning on the wire
//! is decided in one place.

use crate::api;
use crate::auth::{AuthCleared, AuthDecision, BucketRule};
use crate::ledger::{
    Authorization, Decision, LedgerStats, ReservationInfo, StepState, micros_to_usd,
};
use crate::scheduler::{
    HostStats, Limits, LimitsRecord, LimitsSource, TicketInfo, TicketState, TicketView,
};
use crate::store::TicketId;

/// Milliseconds as a u32 field, saturating (no lease is anywhere near 49 days).
pub fn ms32(ms: u64) -> u32 {
    u32::try_from(ms).unwrap_or(u32::MAX)
}

impl From<TicketState> for api::TicketState {
    fn from(s: TicketState) -> Self {
        match s {
            TicketState::Queued => api::TicketState::Queued,
            TicketState::Admitted => api::TicketState::Admitted,
            TicketState::Released => api::TicketState::Released,
            TicketState::Cancelled => api::TicketState::Cancelled,
            TicketState::Shed => api::TicketState::Shed,
            TicketState::Expired => api::TicketState::Expired,
            TicketState::Parked => api::TicketState::Parked,
            TicketState::Superseded => api::TicketState::Superseded,
        }
    }
}

fn state(s: TicketState) -> i32 {
    api::TicketState::from(s) as i32
}

/// What holds a queued ticket, on the wire (UNSPECIFIED when nothing: not queued).
fn blocker(b: Option<crate::scheduler::Blocker>) -> i32 {
    use crate::scheduler::Blocker as B;
    (match b {
        None => api::Blocker::Unspecified,
        Some(B::Total) => api::Blocker::Total,
        Some(B::Subject) => api::Blocker::Subject,
        Some(B::Account) => api::Blocker::Account,
        Some(B::Memory) => api::Blocker::Memory,
        Some(B::Turn) => api::Blocker::Turn,
        Some(B::StateLoss) => api::Blocker::StateLoss,
        Some(B::Key) => api::Blocker::Key,
    }) as i32
}

/// A ticket id of `host_id` on the wire, empty for none.
fn id_of(host_id: &str, key: Option<crate::scheduler::TicketKey>) -> String {
    key.map_or_else(String::new, |key| {
        TicketId {
            host_id: host_id.to_string(),
            key,
        }
        .to_string()
    })
}

/// The wire's key policy.
pub fn key_policy(p: crate::scheduler::KeyPolicy) -> i32 {
    use crate::scheduler::KeyPolicy as P;
    (match p {
        P::None => api::KeyPolicy::None,
        P::KeepNewest => api::KeyPolicy::KeepNewest,
        P::Serial => api::KeyPolicy::Serial,
        P::SerialKeepNewest => api::KeyPolicy::SerialKeepNewest,
        P::RejectNew => api::KeyPolicy::RejectNew,
    }) as i32
}

impl From<(TicketId, TicketView)> for api::SubmitResponse {
    fn from((id, v): (TicketId, TicketView)) -> Self {
        api::SubmitResponse {
            ticket_id: id.to_string(),
            state: state(v.state),
            position: v.position,
            // The lease left, from the limits of record (on a shared store they may come from
            // another replica's file).
            lease_ttl_ms: ms32(v.lease_remaining_ms),
            grant: v.grant,
            eta_ms: ms32(v.eta_ms),
            shadow_reason: v.shadow.map_or_else(String::new, |d| d.code().to_string()),
            blocked_by: blocker(v.blocked_by),
            superseded_by: id_of(&id.host_id, v.superseded_by),
        }
    }
}

/// A ticket as a Wait stream reports it.
pub fn wait_event(id: &TicketId, v: &TicketView) -> api::WaitEvent {
    api::WaitEvent {
        ticket_id: id.to_string(),
        state: state(v.state),
        position: v.position,
        grant: v.grant,
        eta_ms: ms32(v.eta_ms),
        blocked_by: blocker(v.blocked_by),
        lease_remaining_ms: if matches!(v.state, TicketState::Admitted | TicketState::Parked) {
            ms32(v.lease_remaining_ms)
        } else {
            0
        },
        superseded_by: id_of(&id.host_id, v.superseded_by),
    }
}

/// One ticket of a Renew, as named in the request: a ticket the store does not know (never
/// issued, or forgotten) is answered EXPIRED.
pub fn renewed(ticket_id: String, view: Option<TicketView>) -> api::RenewedTicket {
    let (s, lease, by) = view.map_or((TicketState::Expired, 0, None), |v| {
        (v.state, v.lease_remaining_ms, v.superseded_by)
    });
    let host_id = ticket_id.rsplit_once('.').map_or("", |(h, _)| h);
    api::RenewedTicket {
        superseded_by: id_of(host_id, by),
        ticket_id,
        state: state(s),
        lease_ttl_ms: ms32(lease),
    }
}

/// A Reclaim's answer.
pub fn reclaimed(r: crate::scheduler::Reclaimed) -> api::ReclaimResponse {
    api::ReclaimResponse {
        state: state(r.view.state),
        lease_ttl_ms: ms32(r.view.lease_remaining_ms),
        grant: r.view.grant,
        reclaimed: r.reclaimed,
    }
}

/// A Release: the ticket's state before it, or EXPIRED and no id for a ticket the store does
/// not know.
pub fn released(ticket: Option<(String, TicketState)>) -> api::ReleaseResponse {
    let (ticket_id, previous) = ticket.unwrap_or((String::new(), TicketState::Expired));
    api::ReleaseResponse {
        previous_state: state(previous),
        ticket_id,
    }
}

impl From<TicketView> for api::ParkResponse {
    fn from(v: TicketView) -> Self {
        api::ParkResponse {
            state: state(v.state),
            lease_ttl_ms: ms32(v.lease_remaining_ms),
        }
    }
}

impl From<TicketView> for api::UnparkResponse {
    fn from(v: TicketView) -> Self {
        api::UnparkResponse {
            state: state(v.state),
            position: v.position,
            grant: v.grant,
            lease_ttl_ms: ms32(v.lease_remaining_ms),
            eta_ms: ms32(v.eta_ms),
        }
    }
}

impl From<Authorization> for api::AuthorizeResponse {
    fn from(a: Authorization) -> Self {
        let decision = match a.decision {
            Decision::Allow => api::Decision::Allow,
            Decision::Deny => api::Decision::Deny,
            Decision::Unknown => api::Decision::Unknown,
        };
        api::AuthorizeResponse {
            decision: decision as i32,
            reason: a.reason.map_or("", |r| r.code()).to_string(),
            granted_output_tokens: a.granted_output_tokens,
            replay: a.replay,
            remaining_tokens: a.remaining_tokens,
            remaining_cost_usd: a.remaining_cost.map(micros_to_usd),
        }
    }
}

impl From<AuthDecision> for api::AuthAttemptResponse {
    fn from(d: AuthDecision) -> Self {
        api::AuthAttemptResponse {
            allowed: d.allowed(),
            remaining: d.remaining,
            retry_after_ms: ms32(d.retry_after_ms),
            locked: d.locked(),
            degraded: d.degraded,
            reason: d.verdict.code().to_string(),
            bucket: None,
        }
    }
}

/// An auth bucket's numbers on the wire.
pub fn auth_bucket(rule: BucketRule) -> api::AuthBucket {
    api::AuthBucket {
        max_attempts: rule.max_attempts,
        window_ms: rule.window_ms,
        lockout_ms: rule.lockout_ms,
    }
}

impl From<AuthCleared> for api::AuthResetResponse {
    fn from(c: AuthCleared) -> Self {
        api::AuthResetResponse { cleared: c.existed }
    }
}

impl From<AuthCleared> for api::UnlockAuthResponse {
    fn from(c: AuthCleared) -> Self {
        api::UnlockAuthResponse {
            was_locked: c.was_locked,
            cleared: c.existed,
        }
    }
}

/// A host's statistics: its tickets, its ledger, whether this authority is draining, and the
/// state losses its store detected.
/// `state_losses`: the installation's count and when the last was (ms since the Unix epoch).
pub fn stats(
    s: HostStats,
    ledger: LedgerStats,
    draining: bool,
    (state_losses, last_state_loss_unix_ms): (u64, u64),
) -> api::Stats {
    // The limits the host is scheduled under: on a shared store, the limits of record.
    let limits = &s.limits;
    api::Stats {
        total: limits.total,
        queue_total: limits.queue_total,
        in_flight: s.in_flight,
        queued: s.queued,
        admitted: s.counters.admitted,
        rejected: s.counters.rejected,
        shed: s.counters.shed,
        cancelled: s.counters.cancelled,
        expired: s.counters.expired,
        parked: s.parked,
        max_rss_mb: limits.memory.max_rss_mb,
        released: s.counters.released,
        reported_rss_mb: s.reported_rss_mb,
        per_subject: limits.per_subject,
        queue_per_subject: limits.queue_per_subject,
        queue_hard_total: limits.queue_hard_total,
        draining,
        reservations_open: ledger.open,
        reservations_uncertain: ledger.uncertain,
        authorize_allowed: ledger.allowed,
        authorize_denied: ledger.denied,
        authorize_deferred: ledger.deferred,
        settled: ledger.settled,
        mode: limits.mode.name().to_string(),
        shadow_queued: s.counters.shadow[0],
        shadow_busy: s.counters.shadow[1],
        shadow_queue_full: s.counters.shadow[2],
        shadow_memory_pressure: s.counters.shadow[3],
        hold_avg_ms: ms32(s.counters.hold_avg_ms),
        outcome_ok: s.counters.outcomes[0],
        outcome_rate_limited: s.counters.outcomes[1],
        outcome_overloaded: s.counters.outcomes[2],
        outcome_failed: s.counters.outcomes[3],
        latency_sum_ms: s.counters.latency_sum_ms,
        latency_count: s.counters.latency_count,
        accounts_capped: limits.caps_accounts(),
        reclaimed: s.counters.reclaimed,
        superseded: s.counters.superseded,
        key_refused: s.counters.key_refused,
        learning_left_ms: ms32(s.learning_left_ms),
        state_losses,
        last_state_loss_unix_ms,
        subjects: s
            .subjects
            .into_iter()
            .map(|r| api::SubjectStats {
                subject: r.name,
                in_flight: r.in_flight,
                queued: r.queued,
                cap: r.cap,
            })
            .collect(),
        accounts: s
            .accounts
            .into_iter()
            .map(|r| api::AccountStats {
                account_id: r.name,
                in_flight: r.in_flight,
                queued: r.queued,
                cap: r.cap,
                adaptive: r.adaptive,
            })
            .collect(),
    }
}

/// A live ticket of `host_id` as ListTickets shows it.
pub fn ticket_info(host_id: &str, t: TicketInfo) -> api::TicketInfo {
    api::TicketInfo {
        ticket_id: TicketId {
            host_id: host_id.to_string(),
            key: t.key,
        }
        .to_string(),
        state: state(t.state),
        subject: t.subject,
        account_id: t.account_id.unwrap_or_default(),
        run_id: t.run_id,
        instance_id: t.instance_id,
        grant: t.grant,
        lease_remaining_ms: ms32(t.lease_remaining_ms),
        priority: u32::from(t.priority),
        blocked_by: blocker(t.blocked_by),
        in_state_ms: t.in_state_ms,
        place: t.place,
        eta_ms: ms32(t.eta_ms),
        key_policy: t.keyed.as_ref().map_or(0, |(_, p)| key_policy(*p)),
        key: t.keyed.map(|(k, _)| k).unwrap_or_default(),
        superseded_by: id_of(host_id, t.superseded_by),
        debounce_left_ms: ms32(t.debounce_left_ms),
    }
}

/// One of a host's newest endings.
pub fn ended_ticket(host_id: &str, e: &crate::scheduler::Ending) -> api::EndedTicket {
    let (ticket_state, refusal) = match e.ended_as {
        crate::scheduler::EndedAs::Ticket(s) => (state(s), ""),
        crate::scheduler::EndedAs::Refused(reason) => (0, reason),
    };
    api::EndedTicket {
        ticket_id: id_of(host_id, e.key),
        state: ticket_state,
        refusal: refusal.to_string(),
        run_id: e.run_id.to_string(),
        subject: e.subject.to_string(),
        account_id: e.account.as_deref().unwrap_or_default().to_string(),
        instance_id: e.instance.to_string(),
        key: e.keyed.as_deref().unwrap_or_default().to_string(),
        superseded_by: id_of(host_id, e.superseded_by),
        ended_unix_ms: e.at,
    }
}

impl From<ReservationInfo> for api::ReservationInfo {
    fn from(r: ReservationInfo) -> Self {
        api::ReservationInfo {
            run_id: r.run_id,
            step: r.step,
            subject: r.subject,
            account_id: r.account_id.unwrap_or_default(),
            model: r.model,
            // Only open reservations are listed: reserved or uncertain.
            state: match r.state {
                StepState::Uncertain => api::ReservationState::Uncertain,
                _ => api::ReservationState::Reserved,
            } as i32,
            reserved_tokens: r.reserved_tokens,
            reserved_cost_usd: micros_to_usd(r.reserved_cost),
            age_ms: r.age_ms,
        }
    }
}

impl From<&Limits> for api::HostLimits {
    fn from(l: &Limits) -> Self {
        api::HostLimits {
            total: l.total,
            per_subject: l.per_subject,
            per_account: l.per_account,
            subjects: l.subjects.clone().into_iter().collect(),
            accounts: l.accounts.clone().into_iter().collect(),
            queue: Some(api::QueueLimits {
                total: l.queue_total,
                per_subject: l.queue_per_subject,
                hard_total: l.queue_hard_total,
            }),
            overflow_policy: l.overflow.name().to_string(),
            lease_ttl_ms: l.lease_ttl_ms,
            retention_ms: l.retention_ms,
            max_retained: l.max_retained,
            weights: l.weights.clone().into_iter().collect(),
            priority_aging_ms: l.priority_aging_ms,
            mode: l.mode.name().to_string(),
            adaptive_accounts: l
                .adaptive
                .iter()
                .map(|(k, a)| (k.clone(), adaptive_limits(a)))
                .collect(),
            adaptive: l.adaptive_default.as_ref().map(adaptive_limits),
        }
    }
}

fn adaptive_limits(a: &crate::scheduler::Adaptive) -> api::AdaptiveLimits {
    api::AdaptiveLimits {
        min: a.min,
        max: a.max,
        decrease: f64::from(a.decrease_pm) / 1000.0,
        increase: a.increase,
        cooldown_ms: Some(a.cooldown_ms),
    }
}

fn source(s: LimitsSource) -> i32 {
    (match s {
        LimitsSource::File => api::LimitsSource::File,
        LimitsSource::Operator => api::LimitsSource::Operator,
    }) as i32
}

/// The three limits replies carry the same fields.
macro_rules! limits_reply {
    ($($reply:ident),*) => {$(
        impl From<LimitsRecord> for api::$reply {
            fn from(r: LimitsRecord) -> Self {
                api::$reply {
                    limits: Some((&r.limits).into()),
                    source: source(r.source),
                    revision: r.revision,
                }
            }
        }
    )*};
}
limits_reply!(SetLimitsResponse, ResetLimitsResponse);

/// GetLimits' answer without the live adaptive caps, which the handler reads next.
impl From<LimitsRecord> for api::GetLimitsResponse {
    fn from(r: LimitsRecord) -> Self {
        let api::SetLimitsResponse {
            limits,
            source,
            revision,
        } = r.into();
        api::GetLimitsResponse {
            limits,
            source,
            revision,
            adaptive_caps: Default::default(),
        }
    }
}

/// An http_admission policy as ListHttpPolicies lists it (sources spelled as the file does).
pub fn http_policy(p: &crate::http_admission::HttpPolicy) -> api::HttpPolicyInfo {
    use crate::http_admission::Source;
    let source = |s: &Source| match s {
        Source::Header(h) => format!("header {h}"),
        Source::Body(f) => format!("body {f}"),
    };
    api::HttpPolicyInfo {
        name: p.name.clone(),
        host_id: p.host_id.clone(),
        subject: source(&p.subject),
        account: p.account.as_ref().map(source).unwrap_or_default(),
        priority: p.priority.as_ref().map(source).unwrap_or_default(),
        max_wait_ms: p.max_wait_ms,
        tokens: p
            .tokens
            .as_ref()
            .map(|t| t.api.name().to_string())
            .unwrap_or_default(),
        default_max_tokens: p.tokens.as_ref().map_or(0, |t| t.default_max_tokens),
        key: p
            .key
            .as_ref()
            .map(|k| source(&k.source))
            .unwrap_or_default(),
        key_policy: p
            .key
            .as_ref()
            .map(|k| crate::http_admission::key_policy_name(k.policy).to_string())
            .unwrap_or_default(),
        debounce_ms: p.key.as_ref().map_or(0, |k| k.debounce_ms),
    }
}

/// The requests per unit of the rule a counter's descriptor meets; 0 when none does (or its
/// unit differs: rules reloaded since).
fn counter_limit(rules: &crate::ratelimit::Rules, domain: &str, key: &str) -> u64 {
    let Some((entries, unit)) = crate::ratelimit::decide::counter_entries(key) else {
        return 0;
    };
    match rules.lookup(domain, &entries) {
        crate::ratelimit::rules::Match::Rule {
            rule: crate::ratelimit::rules::Rule { limit: Some(l), .. },
            ..
        } if l.unit.name() == unit => u64::from(l.requests_per_unit),
        _ => 0,
    }
}

/// GetRateLimits' answer: each domain's rules (depth first, as configured) and the hottest
/// counters, each with the limit its rule holds it to (`rules` looks it up).
pub fn rate_limits(
    rules_in_force: &crate::ratelimit::Rules,
    domains: &[&crate::ratelimit::DomainRules],
    hottest: Vec<crate::ratelimit::CounterInfo>,
    max_counters: u64,
    response_headers: bool,
) -> api::GetRateLimitsResponse {
    fn rules(level: &crate::ratelimit::rules::Level, out: &mut Vec<api::RateLimitRule>) {
        for node in level.nodes() {
            if let Some(r) = &node.rule {
                out.push(api::RateLimitRule {
                    descriptor: r.path.clone(),
                    requests_per_unit: r.limit.map_or(0, |l| l.requests_per_unit),
                    unit: r.limit.map_or("", |l| l.unit.name()).to_string(),
                    unlimited: r.limit.is_none(),
                    name: r.name.clone(),
                    replaces: r.replaces.clone(),
                    shadow_mode: r.shadow_mode,
                    quota_mode: r.quota_mode,
                });
            }
            rules(&node.children, out);
        }
    }
    api::GetRateLimitsResponse {
        domains: domains
            .iter()
            .map(|d| {
                let mut out = Vec::new();
                rules(&d.root, &mut out);
                api::RateLimitDomain {
                    domain: d.domain.clone(),
                    source: d.source.clone(),
                    rules: out,
                }
            })
            .collect(),
        hottest: hottest
            .into_iter()
            .map(|c| api::RateLimitCounter {
                limit: counter_limit(rules_in_force, &c.domain, &c.key),
                domain: c.domain,
                key: c.key,
                count: c.count,
                window_start: c.window_start,
                unit: c.unit.name().to_string(),
            })
            .collect(),
        max_counters,
        response_headers,
    }
}

/// One bucket of a host's history.
pub fn history_bucket(p: &crate::history::Point) -> api::HistoryBucket {
    let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    api::HistoryBucket {
        end_unix_ms: p.at_ms,
        span_ms: p.span_ms,
        in_flight: clamp(p.in_flight),
        queued: clamp(p.queued),
        admitted: p.admitted,
        refused_busy: p.refused[0],
        refused_queue_full: p.refused[1],
        refused_memory_pressure: p.refused[2],
        refused_key_busy: p.refused[3],
        shed: p.shed,
        superseded: p.superseded,
        expired: p.expired,
        waited: p.waits,
        wait_p50_ms: p.wait_p50_ms.unwrap_or(0),
        wait_p95_ms: p.wait_p95_ms.unwrap_or(0),
    }
}
