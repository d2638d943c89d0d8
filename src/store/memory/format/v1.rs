//! Format 1, read only: what the data dir held before it had a format of its own, the core's
//! in-memory types of that build written with postcard as they were. Each type below is a
//! frozen copy of one of them (fields in the same order, enums with their variants in the same
//! order): they must never change, whatever the core becomes. Read into the core through its
//! images; nothing writes format 1 any more (a dir of it is rewritten in the current format
//! when it is opened).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};

use serde::Deserialize;

use super::Piece;
use crate::auth::{AuthImage, BucketRule, EndpointImage};
use crate::ledger::{
    Allowance, Authorization, AuthorizeArgs, Budget, Coverage, Decision, LedgerImage, LedgerStats,
    Reason, Resolution, ResourcePolicy, RunImage, StepImage, StepState, UnknownUsage, Usage,
};
use crate::scheduler::{
    Adaptive, AdaptiveState, Counters, EndedImage, HeldArgs, HostImage, LEVELS, Limits,
    LimitsRecord, LimitsSource, MemoryLimits, Mode, Outcome, OverflowPolicy, Report, SubmitArgs,
    SubmitMode, TicketImage, TicketState, WaitHistogram,
};
use crate::store::memory::ops::{AuthOp, HostOp, LedgerOp, Record};

// ----- log records ---------------------------------------------------------------------------

#[derive(Deserialize)]
pub enum RecordV1 {
    Policy(PolicyV1),
    Host {
        host: String,
        seq: u64,
        now: u64,
        op: HostOpV1,
    },
    Ledger {
        host: String,
        seq: u64,
        now: u64,
        op: LedgerOpV1,
    },
    Auth {
        seq: u64,
        now: u64,
        op: AuthOpV1,
    },
}

#[derive(Deserialize)]
pub enum HostOpV1 {
    Create(LimitsRecordV1),
    Submit { args: SubmitArgsV1, key: u128 },
    Renew { key: u128, rss_mb: Option<u32> },
    Release { key: u128, report: ReportV1 },
    ReleaseRun { run_id: String, report: ReportV1 },
    Park(u128),
    Unpark(u128),
    Housekeeping,
    CountRejection,
    Limits(LimitsRecordV1),
    Restarted,
    Reclaim { held: HeldArgsV1, key: u128 },
}

#[derive(Deserialize)]
pub struct SubmitArgsV1 {
    instance_id: String,
    subject: String,
    account_id: Option<String>,
    run_id: String,
    mode: SubmitModeV1,
    rss_mb: Option<u32>,
    priority: u8,
}

#[derive(Deserialize)]
enum SubmitModeV1 {
    Queue,
    Try,
}

#[derive(Deserialize)]
pub struct ReportV1 {
    outcome: OutcomeV1,
    latency_ms: Option<u32>,
}

#[derive(Deserialize)]
enum OutcomeV1 {
    Unspecified,
    Ok,
    RateLimited,
    Overloaded,
    Failed,
}

#[derive(Deserialize)]
pub struct HeldArgsV1 {
    instance_id: String,
    subject: String,
    account_id: Option<String>,
    run_id: String,
    grant: u64,
    priority: u8,
}

#[derive(Deserialize)]
pub enum LedgerOpV1 {
    Authorize(AuthorizeArgsV1),
    Settle {
        run_id: String,
        step: u32,
        usage: UsageV1,
    },
    Resolve {
        run_id: String,
        step: u32,
        resolution: ResolutionV1,
    },
    Housekeeping,
}

#[derive(Deserialize)]
pub struct AuthorizeArgsV1 {
    run_id: String,
    step: u32,
    subject: String,
    account_id: Option<String>,
    model: String,
    requested_output_tokens: u64,
    estimated_input_tokens: u64,
    estimated_cost: u64,
}

#[derive(Deserialize)]
pub enum AuthOpV1 {
    Attempt {
        endpoint: String,
        identity: String,
        rule: BucketRuleV1,
    },
    Reset {
        endpoint: String,
        identity: String,
    },
    Prune,
    MaxKeys(usize),
}

#[derive(Deserialize)]
pub struct BucketRuleV1 {
    max_attempts: u32,
    window_ms: u64,
    lockout_ms: u64,
}

// ----- limits and policy ---------------------------------------------------------------------

#[derive(Deserialize)]
pub struct LimitsRecordV1 {
    limits: LimitsV1,
    source: LimitsSourceV1,
    revision: u64,
}

#[derive(Deserialize)]
enum LimitsSourceV1 {
    File,
    Operator,
}

#[derive(Deserialize)]
struct LimitsV1 {
    total: u32,
    per_subject: u32,
    per_account: Option<u32>,
    subjects: HashMap<String, u32>,
    accounts: HashMap<String, u32>,
    queue_total: u32,
    queue_per_subject: u32,
    queue_hard_total: u32,
    overflow: OverflowV1,
    lease_ttl_ms: u64,
    retention_ms: u64,
    max_retained: u32,
    memory: MemoryLimitsV1,
    weights: HashMap<String, u32>,
    priority_aging_ms: u64,
    mode: ModeV1,
    adaptive: HashMap<String, AdaptiveV1>,
    adaptive_default: Option<AdaptiveV1>,
}

#[derive(Deserialize)]
enum OverflowV1 {
    Reject,
    ShedOldest,
    Queue,
}

#[derive(Deserialize)]
enum ModeV1 {
    Enforce,
    Shadow,
}

#[derive(Deserialize)]
struct MemoryLimitsV1 {
    max_rss_mb: u32,
    soft_rss_mb: u32,
}

#[derive(Deserialize, Clone, Copy)]
struct AdaptiveV1 {
    min: u32,
    max: u32,
    decrease_pm: u32,
    increase: u32,
    cooldown_ms: u64,
}

#[derive(Deserialize)]
pub struct PolicyV1 {
    default: Option<BudgetV1>,
    subjects: HashMap<String, BudgetV1>,
    accounts: HashMap<String, BudgetV1>,
    allowances: HashMap<String, AllowanceV1>,
    reservation_ttl_ms: u64,
    run_retention_ms: u64,
}

#[derive(Deserialize)]
struct BudgetV1 {
    max_tokens: Option<u64>,
    max_cost: Option<u64>,
    unknown_usage: UnknownUsageV1,
}

/// In format 1 the policy's variants were declared weakest first.
#[derive(Deserialize)]
enum UnknownUsageV1 {
    Allow,
    Defer,
    Reject,
}

#[derive(Deserialize)]
struct AllowanceV1 {
    tokens: Option<u64>,
    cost: Option<u64>,
    window_ms: u64,
}

// ----- snapshot pieces -----------------------------------------------------------------------

#[derive(Deserialize)]
pub enum PieceV1 {
    Host {
        id: String,
        core: Box<HostCoreV1>,
    },
    Ledger {
        id: String,
        seq: u64,
        ledger: LedgerV1,
    },
    Auth {
        seq: u64,
        table: AuthTableV1,
    },
    End {
        now: u64,
        policy: PolicyV1,
    },
}

#[derive(Deserialize)]
pub struct HostCoreV1 {
    state: HostStateV1,
    limits: LimitsRecordV1,
    seq: u64,
}

#[derive(Deserialize)]
struct HostStateV1 {
    tickets: HashMap<u128, TicketV1>,
    ended: HashMap<u128, EndedV1>,
    runs: HashMap<String, u128>,
    _in_flight: u32,
    _queued: u32,
    _parked: u32,
    subjects: HashMap<String, SubjectStateV1>,
    _accounts: HashMap<String, AccountStateV1>,
    levels: [LevelV1; 5],
    _next_generation: u64,
    adaptive: HashMap<String, AdaptiveStateV1>,
    _aging: BTreeMap<(u64, i64), u128>,
    _leases: BTreeSet<(u64, u128)>,
    retained: VecDeque<(u64, u128, String)>,
    next_order: i64,
    next_front: i64,
    grant: u64,
    grant_floor: u64,
    counters: CountersV1,
    instances: HashMap<String, RssReportV1>,
}

#[derive(Deserialize)]
struct TicketV1 {
    subject: String,
    account: Option<String>,
    instance: String,
    run_id: String,
    state: TicketStateV1,
    grant: u64,
    deadline: u64,
    order: i64,
    since: u64,
    level: u8,
    reclaimed: bool,
}

#[derive(Deserialize, Clone, Copy)]
enum TicketStateV1 {
    Queued,
    Admitted,
    Released,
    Cancelled,
    Shed,
    Expired,
    Parked,
}

#[derive(Deserialize)]
struct EndedV1 {
    state: TicketStateV1,
    grant: u64,
}

#[derive(Deserialize)]
struct SubjectStateV1 {
    _in_flight: u32,
    lanes: [LaneV1; 5],
}

#[derive(Deserialize)]
struct LaneV1 {
    queue: BTreeMap<i64, u128>,
    entry: u64,
    credit: u32,
}

#[derive(Deserialize)]
struct LevelV1 {
    _queued: u32,
    rotation: VecDeque<(String, u64)>,
    _rotation_live: usize,
    _by_depth: BTreeSet<(u32, Reverse<i64>, String)>,
    _depth_counts: Vec<u32>,
}

#[derive(Deserialize)]
struct AccountStateV1 {
    _in_flight: u32,
    _queued: u32,
}

#[derive(Deserialize)]
struct AdaptiveStateV1 {
    cap_milli: u64,
    last_cut: u64,
    knee_milli: u64,
}

#[derive(Deserialize)]
struct RssReportV1 {
    rss_mb: u32,
    at: u64,
}

#[derive(Deserialize)]
struct CountersV1 {
    submitted: u64,
    admitted: u64,
    rejected: u64,
    released: u64,
    cancelled: u64,
    shed: u64,
    expired: u64,
    queue_wait: WaitHistogramV1,
    shadow: [u64; 4],
    hold_avg_ms: u64,
    outcomes: [u64; 4],
    latency_sum_ms: u64,
    latency_count: u64,
    reclaimed: u64,
}

#[derive(Deserialize)]
struct WaitHistogramV1 {
    buckets: [u64; 11],
    sum_ms: u64,
}

#[derive(Deserialize)]
pub struct LedgerV1 {
    runs: HashMap<String, RunV1>,
    windows: HashMap<String, AccountWindowV1>,
    deadlines: BTreeSet<(u64, String, u32)>,
    stats: LedgerStatsV1,
    next_forget: u64,
}

#[derive(Deserialize)]
struct RunV1 {
    subject: String,
    account: Option<String>,
    used_tokens: u64,
    used_cost: u64,
    partial_steps: u32,
    _open_steps: BTreeSet<u32>,
    steps: HashMap<u32, StepV1>,
    last_touched: u64,
}

#[derive(Deserialize)]
struct StepV1 {
    answer: AuthorizationV1,
    state: StepStateV1,
    model: String,
    reserved_tokens: u64,
    reserved_cost: u64,
    window: Option<u64>,
    decided_at: u64,
}

#[derive(Deserialize)]
struct AuthorizationV1 {
    decision: DecisionV1,
    reason: Option<ReasonV1>,
    granted_output_tokens: u64,
    remaining_tokens: Option<u64>,
    remaining_cost: Option<u64>,
    replay: bool,
}

#[derive(Deserialize)]
enum DecisionV1 {
    Allow,
    Deny,
    Unknown,
}

#[derive(Deserialize)]
enum ReasonV1 {
    ResourceLimit,
    QuotaExhausted,
    ResourceUsageUnknown,
}

#[derive(Deserialize, Clone, Copy)]
enum StepStateV1 {
    Reserved,
    Uncertain,
    Settled(UsageV1),
    Resolved(ResolutionV1),
    Closed,
}

#[derive(Deserialize, Clone, Copy)]
pub struct UsageV1 {
    input_tokens: u64,
    output_tokens: u64,
    cost: u64,
    coverage: CoverageV1,
}

#[derive(Deserialize, Clone, Copy)]
enum CoverageV1 {
    Complete,
    Partial,
    Unknown,
}

#[derive(Deserialize, Clone, Copy)]
pub enum ResolutionV1 {
    Consumed,
    Released,
}

#[derive(Deserialize)]
struct AccountWindowV1 {
    start: u64,
    end: u64,
    used_tokens: u64,
    used_cost: u64,
}

#[derive(Deserialize)]
struct LedgerStatsV1 {
    open: u64,
    uncertain: u64,
    allowed: u64,
    denied: u64,
    deferred: u64,
    settled: u64,
}

#[derive(Deserialize)]
pub struct AuthTableV1 {
    max_keys: usize,
    endpoints: HashMap<String, EndpointV1>,
    _len: usize,
}

#[derive(Deserialize)]
struct EndpointV1 {
    keys: HashMap<String, EntryV1>,
    expiries: BinaryHeap<Reverse<(u64, String)>>,
}

#[derive(Deserialize)]
struct EntryV1 {
    count: u32,
    window_end: u64,
    locked_until: u64,
}

// ----- into the core -------------------------------------------------------------------------

impl From<TicketStateV1> for TicketState {
    fn from(s: TicketStateV1) -> Self {
        match s {
            TicketStateV1::Queued => TicketState::Queued,
            TicketStateV1::Admitted => TicketState::Admitted,
            TicketStateV1::Released => TicketState::Released,
            TicketStateV1::Cancelled => TicketState::Cancelled,
            TicketStateV1::Shed => TicketState::Shed,
            TicketStateV1::Expired => TicketState::Expired,
            TicketStateV1::Parked => TicketState::Parked,
        }
    }
}

impl From<AdaptiveV1> for Adaptive {
    fn from(a: AdaptiveV1) -> Self {
        Adaptive {
            min: a.min,
            max: a.max,
            decrease_pm: a.decrease_pm,
            increase: a.increase,
            cooldown_ms: a.cooldown_ms,
        }
    }
}

impl From<LimitsRecordV1> for LimitsRecord {
    fn from(r: LimitsRecordV1) -> Self {
        let l = r.limits;
        LimitsRecord {
            limits: Limits {
                total: l.total,
                per_subject: l.per_subject,
                per_account: l.per_account,
                subjects: l.subjects,
                accounts: l.accounts,
                queue_total: l.queue_total,
                queue_per_subject: l.queue_per_subject,
                queue_hard_total: l.queue_hard_total,
                overflow: match l.overflow {
                    OverflowV1::Reject => OverflowPolicy::Reject,
                    OverflowV1::ShedOldest => OverflowPolicy::ShedOldest,
                    OverflowV1::Queue => OverflowPolicy::Queue,
                },
                lease_ttl_ms: l.lease_ttl_ms,
                retention_ms: l.retention_ms,
                max_retained: l.max_retained,
                memory: MemoryLimits {
                    max_rss_mb: l.memory.max_rss_mb,
                    soft_rss_mb: l.memory.soft_rss_mb,
                },
                weights: l.weights,
                priority_aging_ms: l.priority_aging_ms,
                mode: match l.mode {
                    ModeV1::Enforce => Mode::Enforce,
                    ModeV1::Shadow => Mode::Shadow,
                },
                adaptive: l.adaptive.into_iter().map(|(k, a)| (k, a.into())).collect(),
                adaptive_default: l.adaptive_default.map(Adaptive::from),
            },
            source: match r.source {
                LimitsSourceV1::File => LimitsSource::File,
                LimitsSourceV1::Operator => LimitsSource::Operator,
            },
            revision: r.revision,
        }
    }
}

impl From<BudgetV1> for Budget {
    fn from(b: BudgetV1) -> Self {
        Budget {
            max_tokens: b.max_tokens,
            max_cost: b.max_cost,
            unknown_usage: match b.unknown_usage {
                UnknownUsageV1::Allow => UnknownUsage::Allow,
                UnknownUsageV1::Defer => UnknownUsage::Defer,
                UnknownUsageV1::Reject => UnknownUsage::Reject,
            },
        }
    }
}

impl From<PolicyV1> for ResourcePolicy {
    fn from(p: PolicyV1) -> Self {
        ResourcePolicy {
            default: p.default.map(Budget::from),
            subjects: p.subjects.into_iter().map(|(k, b)| (k, b.into())).collect(),
            accounts: p.accounts.into_iter().map(|(k, b)| (k, b.into())).collect(),
            allowances: p
                .allowances
                .into_iter()
                .map(|(k, a)| {
                    let a = Allowance {
                        tokens: a.tokens,
                        cost: a.cost,
                        window_ms: a.window_ms,
                    };
                    (k, a)
                })
                .collect(),
            reservation_ttl_ms: p.reservation_ttl_ms,
            run_retention_ms: p.run_retention_ms,
        }
    }
}

impl From<UsageV1> for Usage {
    fn from(u: UsageV1) -> Self {
        Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cost: u.cost,
            coverage: match u.coverage {
                CoverageV1::Complete => Coverage::Complete,
                CoverageV1::Partial => Coverage::Partial,
                CoverageV1::Unknown => Coverage::Unknown,
            },
        }
    }
}

impl From<ResolutionV1> for Resolution {
    fn from(r: ResolutionV1) -> Self {
        match r {
            ResolutionV1::Consumed => Resolution::Consumed,
            ResolutionV1::Released => Resolution::Released,
        }
    }
}

impl From<ReportV1> for Report {
    fn from(r: ReportV1) -> Self {
        Report {
            outcome: match r.outcome {
                OutcomeV1::Unspecified => Outcome::Unspecified,
                OutcomeV1::Ok => Outcome::Ok,
                OutcomeV1::RateLimited => Outcome::RateLimited,
                OutcomeV1::Overloaded => Outcome::Overloaded,
                OutcomeV1::Failed => Outcome::Failed,
            },
            latency_ms: r.latency_ms,
        }
    }
}

impl From<RecordV1> for Record<'static> {
    fn from(r: RecordV1) -> Self {
        use std::borrow::Cow::Owned;
        match r {
            RecordV1::Policy(p) => Record::Policy(Owned(p.into())),
            RecordV1::Host { host, seq, now, op } => Record::Host {
                host: Owned(host),
                seq,
                now,
                op: Owned(op.into()),
            },
            RecordV1::Ledger { host, seq, now, op } => Record::Ledger {
                host: Owned(host),
                seq,
                now,
                op: Owned(op.into()),
            },
            RecordV1::Auth { seq, now, op } => Record::Auth {
                seq,
                now,
                op: Owned(op.into()),
            },
        }
    }
}

impl From<HostOpV1> for HostOp {
    fn from(op: HostOpV1) -> Self {
        match op {
            HostOpV1::Create(l) => HostOp::Create(l.into()),
            HostOpV1::Submit { args: a, key } => HostOp::Submit {
                args: SubmitArgs {
                    instance_id: a.instance_id,
                    subject: a.subject,
                    account_id: a.account_id,
                    run_id: a.run_id,
                    mode: match a.mode {
                        SubmitModeV1::Queue => SubmitMode::Queue,
                        SubmitModeV1::Try => SubmitMode::Try,
                    },
                    rss_mb: a.rss_mb,
                    priority: a.priority,
                    resubmit_expired: false,
                    keyed: None,
                },
                key,
            },
            HostOpV1::Renew { key, rss_mb } => HostOp::Renew { key, rss_mb },
            HostOpV1::Release { key, report } => HostOp::Release {
                key,
                report: report.into(),
            },
            HostOpV1::ReleaseRun { run_id, report } => HostOp::ReleaseRun {
                run_id,
                report: report.into(),
            },
            HostOpV1::Park(key) => HostOp::Park(key),
            HostOpV1::Unpark(key) => HostOp::Unpark(key),
            HostOpV1::Housekeeping => HostOp::Housekeeping,
            HostOpV1::CountRejection => HostOp::CountRejection,
            HostOpV1::Limits(l) => HostOp::Limits(l.into()),
            HostOpV1::Restarted => HostOp::Restarted,
            HostOpV1::Reclaim { held: h, key } => HostOp::Reclaim {
                held: HeldArgs {
                    instance_id: h.instance_id,
                    subject: h.subject,
                    account_id: h.account_id,
                    run_id: h.run_id,
                    grant: h.grant,
                    priority: h.priority,
                    key: None,
                },
                key,
            },
        }
    }
}

impl From<LedgerOpV1> for LedgerOp {
    fn from(op: LedgerOpV1) -> Self {
        match op {
            LedgerOpV1::Authorize(a) => LedgerOp::Authorize(AuthorizeArgs {
                run_id: a.run_id,
                step: a.step,
                subject: a.subject,
                account_id: a.account_id,
                model: a.model,
                requested_output_tokens: a.requested_output_tokens,
                estimated_input_tokens: a.estimated_input_tokens,
                estimated_cost: a.estimated_cost,
            }),
            LedgerOpV1::Settle {
                run_id,
                step,
                usage,
            } => LedgerOp::Settle {
                run_id,
                step,
                usage: usage.into(),
            },
            LedgerOpV1::Resolve {
                run_id,
                step,
                resolution,
            } => LedgerOp::Resolve {
                run_id,
                step,
                resolution: resolution.into(),
            },
            LedgerOpV1::Housekeeping => LedgerOp::Housekeeping,
        }
    }
}

impl From<AuthOpV1> for AuthOp {
    fn from(op: AuthOpV1) -> Self {
        match op {
            AuthOpV1::Attempt {
                endpoint,
                identity,
                rule,
            } => AuthOp::Attempt {
                endpoint,
                identity,
                rule: BucketRule::new(rule.max_attempts, rule.window_ms, rule.lockout_ms),
            },
            AuthOpV1::Reset { endpoint, identity } => AuthOp::Reset { endpoint, identity },
            AuthOpV1::Prune => AuthOp::Prune,
            AuthOpV1::MaxKeys(n) => AuthOp::MaxKeys(n),
        }
    }
}

impl TryFrom<PieceV1> for Piece {
    type Error = String;
    fn try_from(p: PieceV1) -> Result<Self, String> {
        Ok(match p {
            PieceV1::Host { id, core } => {
                let HostCoreV1 { state, limits, seq } = *core;
                Piece::Host {
                    id,
                    seq,
                    limits: limits.into(),
                    image: Box::new(host_image(state)?),
                }
            }
            PieceV1::Ledger { id, seq, ledger } => Piece::Ledger {
                id,
                seq,
                image: ledger_image(ledger),
            },
            PieceV1::Auth { seq, table } => Piece::Auth {
                seq,
                image: auth_image(table),
            },
            PieceV1::End { now, policy } => Piece::End {
                now,
                policy: policy.into(),
            },
        })
    }
}

/// A format 1 host as an image: its live tickets and remembered ended ones, and each level's
/// rotation without its stale entries (those whose lane was emptied since, which every reader
/// skipped).
fn host_image(h: HostStateV1) -> Result<HostImage, String> {
    let mut tickets: Vec<TicketImage> = h
        .tickets
        .into_iter()
        .map(|(key, t)| TicketImage {
            key,
            subject: t.subject,
            account: t.account,
            instance: t.instance,
            run_id: t.run_id,
            state: t.state.into(),
            grant: t.grant,
            deadline: t.deadline,
            order: t.order,
            since: t.since,
            level: t.level,
            reclaimed: t.reclaimed,
            keyed: None,
            key_seq: 0,
            ready_at: 0,
            burst_since: None,
            superseded_by: None,
        })
        .collect();
    tickets.sort_by_key(|t| t.key);
    let mut ended = Vec::with_capacity(h.retained.len());
    for (forget_at, key, run_id) in h.retained {
        let e = h
            .ended
            .get(&key)
            .ok_or_else(|| format!("retained ticket {key:x} is not among the ended"))?;
        ended.push(EndedImage {
            answers_run: h.runs.get(&run_id) == Some(&key),
            superseded_by: None,
            key_seq: 0,
            key,
            run_id,
            state: e.state.into(),
            grant: e.grant,
            forget_at,
        });
    }
    if h.levels.len() != LEVELS {
        return Err(format!("{} priority levels", h.levels.len()));
    }
    let mut levels = h.levels.into_iter().enumerate().map(|(l, level)| {
        level
            .rotation
            .into_iter()
            .filter_map(|(name, generation)| {
                let lane = &h.subjects.get(&name)?.lanes[l];
                (lane.entry == generation && !lane.queue.is_empty()).then_some((name, lane.credit))
            })
            .collect::<Vec<_>>()
    });
    let rotation = std::array::from_fn(|_| levels.next().expect("five levels"));
    let c = h.counters;
    let mut adaptive: Vec<_> = h
        .adaptive
        .into_iter()
        .map(|(a, s)| {
            let s = AdaptiveState {
                cap_milli: s.cap_milli,
                last_cut: s.last_cut,
                knee_milli: s.knee_milli,
            };
            (a, s)
        })
        .collect();
    adaptive.sort_by(|a, b| a.0.cmp(&b.0));
    let mut instances: Vec<_> = h
        .instances
        .into_iter()
        .map(|(i, r)| (i, r.rss_mb, r.at))
        .collect();
    instances.sort();
    Ok(HostImage {
        tickets,
        ended,
        rotation,
        next_order: h.next_order,
        next_front: h.next_front,
        grant: h.grant,
        grant_floor: h.grant_floor,
        counters: Counters {
            submitted: c.submitted,
            admitted: c.admitted,
            rejected: c.rejected,
            released: c.released,
            cancelled: c.cancelled,
            shed: c.shed,
            expired: c.expired,
            queue_wait: WaitHistogram {
                buckets: c.queue_wait.buckets,
                sum_ms: c.queue_wait.sum_ms,
            },
            shadow: c.shadow,
            hold_avg_ms: c.hold_avg_ms,
            outcomes: c.outcomes,
            latency_sum_ms: c.latency_sum_ms,
            latency_count: c.latency_count,
            reclaimed: c.reclaimed,
            ..Counters::default()
        },
        adaptive,
        instances,
        next_key_seq: 0,
    })
}

fn ledger_image(l: LedgerV1) -> LedgerImage {
    let deadlines: HashMap<(String, u32), u64> = l
        .deadlines
        .into_iter()
        .map(|(at, run, step)| ((run, step), at))
        .collect();
    let mut runs: Vec<RunImage> = l
        .runs
        .into_iter()
        .map(|(run_id, r)| {
            let mut steps: Vec<StepImage> = r
                .steps
                .into_iter()
                .map(|(n, s)| {
                    let state = match s.state {
                        StepStateV1::Reserved => StepState::Reserved,
                        StepStateV1::Uncertain => StepState::Uncertain,
                        StepStateV1::Settled(u) => StepState::Settled(u.into()),
                        StepStateV1::Resolved(r) => StepState::Resolved(r.into()),
                        StepStateV1::Closed => StepState::Closed,
                    };
                    let a = s.answer;
                    StepImage {
                        step: n,
                        answer: Authorization {
                            decision: match a.decision {
                                DecisionV1::Allow => Decision::Allow,
                                DecisionV1::Deny => Decision::Deny,
                                DecisionV1::Unknown => Decision::Unknown,
                            },
                            reason: a.reason.map(|r| match r {
                                ReasonV1::ResourceLimit => Reason::ResourceLimit,
                                ReasonV1::QuotaExhausted => Reason::QuotaExhausted,
                                ReasonV1::ResourceUsageUnknown => Reason::ResourceUsageUnknown,
                            }),
                            granted_output_tokens: a.granted_output_tokens,
                            remaining_tokens: a.remaining_tokens,
                            remaining_cost: a.remaining_cost,
                            replay: a.replay,
                        },
                        deadline: (state == StepState::Reserved)
                            .then(|| deadlines.get(&(run_id.clone(), n)).copied())
                            .flatten(),
                        state,
                        model: s.model,
                        reserved_tokens: s.reserved_tokens,
                        reserved_cost: s.reserved_cost,
                        window: s.window,
                        decided_at: s.decided_at,
                    }
                })
                .collect();
            steps.sort_by_key(|s| s.step);
            RunImage {
                run_id,
                subject: r.subject,
                account: r.account,
                used_tokens: r.used_tokens,
                used_cost: r.used_cost,
                partial_steps: r.partial_steps,
                last_touched: r.last_touched,
                steps,
            }
        })
        .collect();
    runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    let mut windows: Vec<_> = l
        .windows
        .into_iter()
        .map(|(a, w)| (a, w.start, w.end, w.used_tokens, w.used_cost))
        .collect();
    windows.sort();
    let s = l.stats;
    LedgerImage {
        runs,
        windows,
        stats: LedgerStats {
            open: s.open,
            uncertain: s.uncertain,
            allowed: s.allowed,
            denied: s.denied,
            deferred: s.deferred,
            settled: s.settled,
        },
        next_forget: l.next_forget,
    }
}

fn auth_image(t: AuthTableV1) -> AuthImage {
    let mut endpoints: Vec<EndpointImage> = t
        .endpoints
        .into_iter()
        .map(|(endpoint, ep)| {
            let mut keys: Vec<_> = ep
                .keys
                .into_iter()
                .map(|(id, e)| (id, e.count, e.window_end, e.locked_until))
                .collect();
            keys.sort();
            let mut expiries: Vec<_> = ep
                .expiries
                .into_iter()
                .map(|Reverse((at, id))| (at, id))
                .collect();
            expiries.sort();
            EndpointImage {
                endpoint,
                keys,
                expiries,
            }
        })
        .collect();
    endpoints.sort_by(|a, b| a.endpoint.cmp(&b.endpoint));
    AuthImage {
        max_keys: t.max_keys,
        endpoints,
    }
}
