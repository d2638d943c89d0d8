//! Format 2: the data dir's own types, field by field as `super`'s documentation lists them,
//! converted to and from the core's. Shared here: the enums (each written as its variant's
//! index, in the order declared), limits and the resource policy. Log records are in
//! [`records`], snapshot pieces in [`pieces`].
//!
//! Maps are written as lists of pairs sorted by key, so one state always makes the same bytes.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::auth::BucketRule;
use crate::ledger::{
    Allowance, Authorization, Budget, Coverage, Decision, Reason, Resolution, ResourcePolicy,
    StepState, UnknownUsage, Usage,
};
use crate::ratelimit::Unit;
use crate::scheduler::{
    Adaptive, KeyPolicy, Limits, LimitsRecord, LimitsSource, MemoryLimits, Mode, Outcome,
    OverflowPolicy, Report, SubmitMode, TicketState,
};

pub mod keys;
pub mod pieces;
pub mod records;

/// A map as a list of pairs, sorted by key.
fn pairs<V: Clone, W>(map: &HashMap<String, V>, f: impl Fn(&V) -> W) -> Vec<(String, W)> {
    let mut out: Vec<_> = map.iter().map(|(k, v)| (k.clone(), f(v))).collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A list of pairs as a map; a key twice is damage.
fn map<V, W>(
    pairs: Vec<(String, V)>,
    what: &str,
    f: impl Fn(V) -> Result<W, String>,
) -> Result<HashMap<String, W>, String> {
    let mut out = HashMap::with_capacity(pairs.len());
    for (k, v) in pairs {
        if out.insert(k.clone(), f(v)?).is_some() {
            return Err(format!("{what}: {k:?} twice"));
        }
    }
    Ok(out)
}

/// A rate limit unit: 0 second, 1 minute, 2 hour, 3 day, 4 week, 5 month, 6 year.
pub fn unit_code(u: Unit) -> u8 {
    match u {
        Unit::Second => 0,
        Unit::Minute => 1,
        Unit::Hour => 2,
        Unit::Day => 3,
        Unit::Week => 4,
        Unit::Month => 5,
        Unit::Year => 6,
    }
}

/// The unit of [`unit_code`]'s number; a number it never writes is damage.
pub fn unit_of(code: u8) -> Result<Unit, String> {
    Unit::ALL
        .into_iter()
        .find(|u| unit_code(*u) == code)
        .ok_or_else(|| format!("rate limit unit {code} is not one format 2 writes"))
}

/// A ticket's state.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub enum StateV2 {
    Queued,
    Admitted,
    Released,
    Cancelled,
    Shed,
    Expired,
    Parked,
    /// Format 4 on.
    Superseded,
}

impl From<TicketState> for StateV2 {
    fn from(s: TicketState) -> Self {
        match s {
            TicketState::Queued => StateV2::Queued,
            TicketState::Admitted => StateV2::Admitted,
            TicketState::Released => StateV2::Released,
            TicketState::Cancelled => StateV2::Cancelled,
            TicketState::Shed => StateV2::Shed,
            TicketState::Expired => StateV2::Expired,
            TicketState::Parked => StateV2::Parked,
            TicketState::Superseded => StateV2::Superseded,
        }
    }
}

impl From<StateV2> for TicketState {
    fn from(s: StateV2) -> Self {
        match s {
            StateV2::Queued => TicketState::Queued,
            StateV2::Admitted => TicketState::Admitted,
            StateV2::Released => TicketState::Released,
            StateV2::Cancelled => TicketState::Cancelled,
            StateV2::Shed => TicketState::Shed,
            StateV2::Expired => TicketState::Expired,
            StateV2::Parked => TicketState::Parked,
            StateV2::Superseded => TicketState::Superseded,
        }
    }
}

/// What a release reported: the outcome (0 unspecified, 1 ok, 2 rate limited, 3 overloaded,
/// 4 failed) and the latency in ms.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ReportV2 {
    pub outcome: u8,
    pub latency_ms: Option<u32>,
}

const OUTCOMES: [Outcome; 5] = [
    Outcome::Unspecified,
    Outcome::Ok,
    Outcome::RateLimited,
    Outcome::Overloaded,
    Outcome::Failed,
];

impl From<Report> for ReportV2 {
    fn from(r: Report) -> Self {
        ReportV2 {
            outcome: OUTCOMES.iter().position(|o| *o == r.outcome).unwrap_or(0) as u8,
            latency_ms: r.latency_ms,
        }
    }
}

impl TryFrom<ReportV2> for Report {
    type Error = String;
    fn try_from(r: ReportV2) -> Result<Self, String> {
        Ok(Report {
            outcome: *OUTCOMES
                .get(usize::from(r.outcome))
                .ok_or_else(|| format!("an outcome of {}", r.outcome))?,
            latency_ms: r.latency_ms,
        })
    }
}

/// Whether a Submit may queue: 0 queue, 1 try.
pub fn submit_mode(m: SubmitMode) -> u8 {
    match m {
        SubmitMode::Queue => 0,
        SubmitMode::Try => 1,
    }
}

/// A key policy's code: its place in [`KeyPolicy::ALL`] (0 none, 1 keep newest, 2 serial,
/// 3 serial keep newest, 4 reject new).
pub fn key_policy_code(p: KeyPolicy) -> u8 {
    KeyPolicy::ALL
        .iter()
        .position(|x| *x == p)
        .expect("every policy is listed") as u8
}

pub fn key_policy_of(code: u8) -> Result<KeyPolicy, String> {
    KeyPolicy::ALL
        .get(usize::from(code))
        .copied()
        .ok_or_else(|| format!("a key policy of {code}"))
}

pub fn submit_mode_of(m: u8) -> Result<SubmitMode, String> {
    match m {
        0 => Ok(SubmitMode::Queue),
        1 => Ok(SubmitMode::Try),
        n => Err(format!("a submit mode of {n}")),
    }
}

/// How an account's cap adapts.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct AdaptiveV2 {
    pub min: u32,
    pub max: u32,
    pub decrease_pm: u32,
    pub increase: u32,
    pub cooldown_ms: u64,
}

impl From<&Adaptive> for AdaptiveV2 {
    fn from(a: &Adaptive) -> Self {
        AdaptiveV2 {
            min: a.min,
            max: a.max,
            decrease_pm: a.decrease_pm,
            increase: a.increase,
            cooldown_ms: a.cooldown_ms,
        }
    }
}

impl From<AdaptiveV2> for Adaptive {
    fn from(a: AdaptiveV2) -> Self {
        Adaptive {
            min: a.min,
            max: a.max,
            decrease_pm: a.decrease_pm,
            increase: a.increase,
            cooldown_ms: a.cooldown_ms,
        }
    }
}

/// A host's limits in force, with their source (0 file, 1 operator) and revision.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LimitsRecordV2 {
    pub total: u32,
    pub per_subject: u32,
    pub per_account: Option<u32>,
    pub subjects: Vec<(String, u32)>,
    pub accounts: Vec<(String, u32)>,
    pub queue_total: u32,
    pub queue_per_subject: u32,
    pub queue_hard_total: u32,
    /// 0 reject, 1 shed_oldest, 2 queue.
    pub overflow: u8,
    pub lease_ttl_ms: u64,
    pub retention_ms: u64,
    pub max_retained: u32,
    pub max_rss_mb: u32,
    pub soft_rss_mb: u32,
    pub weights: Vec<(String, u32)>,
    pub priority_aging_ms: u64,
    /// 0 enforce, 1 shadow.
    pub mode: u8,
    pub adaptive: Vec<(String, AdaptiveV2)>,
    pub adaptive_default: Option<AdaptiveV2>,
    pub source: u8,
    pub revision: u64,
}

impl From<&LimitsRecord> for LimitsRecordV2 {
    fn from(r: &LimitsRecord) -> Self {
        let l = &r.limits;
        LimitsRecordV2 {
            total: l.total,
            per_subject: l.per_subject,
            per_account: l.per_account,
            subjects: pairs(&l.subjects, |v| *v),
            accounts: pairs(&l.accounts, |v| *v),
            queue_total: l.queue_total,
            queue_per_subject: l.queue_per_subject,
            queue_hard_total: l.queue_hard_total,
            overflow: match l.overflow {
                OverflowPolicy::Reject => 0,
                OverflowPolicy::ShedOldest => 1,
                OverflowPolicy::Queue => 2,
            },
            lease_ttl_ms: l.lease_ttl_ms,
            retention_ms: l.retention_ms,
            max_retained: l.max_retained,
            max_rss_mb: l.memory.max_rss_mb,
            soft_rss_mb: l.memory.soft_rss_mb,
            weights: pairs(&l.weights, |v| *v),
            priority_aging_ms: l.priority_aging_ms,
            mode: match l.mode {
                Mode::Enforce => 0,
                Mode::Shadow => 1,
            },
            adaptive: pairs(&l.adaptive, |a| AdaptiveV2::from(a)),
            adaptive_default: l.adaptive_default.as_ref().map(AdaptiveV2::from),
            source: match r.source {
                LimitsSource::File => 0,
                LimitsSource::Operator => 1,
            },
            revision: r.revision,
        }
    }
}

impl TryFrom<LimitsRecordV2> for LimitsRecord {
    type Error = String;
    fn try_from(r: LimitsRecordV2) -> Result<Self, String> {
        let ok = |v: u32| Ok::<_, String>(v);
        Ok(LimitsRecord {
            limits: Limits {
                total: r.total,
                per_subject: r.per_subject,
                per_account: r.per_account,
                subjects: map(r.subjects, "subjects", ok)?,
                accounts: map(r.accounts, "accounts", ok)?,
                queue_total: r.queue_total,
                queue_per_subject: r.queue_per_subject,
                queue_hard_total: r.queue_hard_total,
                overflow: match r.overflow {
                    0 => OverflowPolicy::Reject,
                    1 => OverflowPolicy::ShedOldest,
                    2 => OverflowPolicy::Queue,
                    n => return Err(format!("an overflow policy of {n}")),
                },
                lease_ttl_ms: r.lease_ttl_ms,
                retention_ms: r.retention_ms,
                max_retained: r.max_retained,
                memory: MemoryLimits {
                    max_rss_mb: r.max_rss_mb,
                    soft_rss_mb: r.soft_rss_mb,
                },
                weights: map(r.weights, "weights", ok)?,
                priority_aging_ms: r.priority_aging_ms,
                mode: match r.mode {
                    0 => Mode::Enforce,
                    1 => Mode::Shadow,
                    n => return Err(format!("a mode of {n}")),
                },
                adaptive: map(r.adaptive, "adaptive", |a| Ok(Adaptive::from(a)))?,
                adaptive_default: r.adaptive_default.map(Adaptive::from),
            },
            source: match r.source {
                0 => LimitsSource::File,
                1 => LimitsSource::Operator,
                n => return Err(format!("a limits source of {n}")),
            },
            revision: r.revision,
        })
    }
}

/// A per-run budget; `unknown_usage` 0 reject, 1 allow, 2 defer.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct BudgetV2 {
    pub max_tokens: Option<u64>,
    pub max_cost_micros: Option<u64>,
    pub unknown_usage: u8,
}

impl From<&Budget> for BudgetV2 {
    fn from(b: &Budget) -> Self {
        BudgetV2 {
            max_tokens: b.max_tokens,
            max_cost_micros: b.max_cost,
            unknown_usage: match b.unknown_usage {
                UnknownUsage::Reject => 0,
                UnknownUsage::Allow => 1,
                UnknownUsage::Defer => 2,
            },
        }
    }
}

impl TryFrom<BudgetV2> for Budget {
    type Error = String;
    fn try_from(b: BudgetV2) -> Result<Self, String> {
        Ok(Budget {
            max_tokens: b.max_tokens,
            max_cost: b.max_cost_micros,
            unknown_usage: match b.unknown_usage {
                0 => UnknownUsage::Reject,
                1 => UnknownUsage::Allow,
                2 => UnknownUsage::Defer,
                n => return Err(format!("an unknown_usage of {n}")),
            },
        })
    }
}

/// An account allowance per window.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct AllowanceV2 {
    pub tokens: Option<u64>,
    pub cost_micros: Option<u64>,
    pub window_ms: u64,
}

/// The resource policy the ledger records after it were decided under.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PolicyV2 {
    pub default: Option<BudgetV2>,
    pub subjects: Vec<(String, BudgetV2)>,
    pub accounts: Vec<(String, BudgetV2)>,
    pub allowances: Vec<(String, AllowanceV2)>,
    pub reservation_ttl_ms: u64,
    pub run_retention_ms: u64,
}

impl From<&ResourcePolicy> for PolicyV2 {
    fn from(p: &ResourcePolicy) -> Self {
        PolicyV2 {
            default: p.default.as_ref().map(BudgetV2::from),
            subjects: pairs(&p.subjects, |b| BudgetV2::from(b)),
            accounts: pairs(&p.accounts, |b| BudgetV2::from(b)),
            allowances: pairs(&p.allowances, |a| AllowanceV2 {
                tokens: a.tokens,
                cost_micros: a.cost,
                window_ms: a.window_ms,
            }),
            reservation_ttl_ms: p.reservation_ttl_ms,
            run_retention_ms: p.run_retention_ms,
        }
    }
}

impl TryFrom<PolicyV2> for ResourcePolicy {
    type Error = String;
    fn try_from(p: PolicyV2) -> Result<Self, String> {
        Ok(ResourcePolicy {
            default: p.default.map(Budget::try_from).transpose()?,
            subjects: map(p.subjects, "resources.subjects", Budget::try_from)?,
            accounts: map(p.accounts, "resources.accounts", Budget::try_from)?,
            allowances: map(p.allowances, "allowances", |a| {
                Ok(Allowance {
                    tokens: a.tokens,
                    cost: a.cost_micros,
                    window_ms: a.window_ms,
                })
            })?,
            reservation_ttl_ms: p.reservation_ttl_ms,
            run_retention_ms: p.run_retention_ms,
        })
    }
}

/// What a step used: coverage 0 complete, 1 partial, 2 unknown.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct UsageV2 {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_micros: u64,
    pub coverage: u8,
}

impl From<Usage> for UsageV2 {
    fn from(u: Usage) -> Self {
        UsageV2 {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cost_micros: u.cost,
            coverage: match u.coverage {
                Coverage::Complete => 0,
                Coverage::Partial => 1,
                Coverage::Unknown => 2,
            },
        }
    }
}

impl TryFrom<UsageV2> for Usage {
    type Error = String;
    fn try_from(u: UsageV2) -> Result<Self, String> {
        Ok(Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cost: u.cost_micros,
            coverage: match u.coverage {
                0 => Coverage::Complete,
                1 => Coverage::Partial,
                2 => Coverage::Unknown,
                n => return Err(format!("a coverage of {n}")),
            },
        })
    }
}

/// An operator's resolution: 0 consumed, 1 released.
pub fn resolution(r: Resolution) -> u8 {
    match r {
        Resolution::Consumed => 0,
        Resolution::Released => 1,
    }
}

pub fn resolution_of(r: u8) -> Result<Resolution, String> {
    match r {
        0 => Ok(Resolution::Consumed),
        1 => Ok(Resolution::Released),
        n => Err(format!("a resolution of {n}")),
    }
}

/// Authorize's answer: decision 0 allow, 1 deny, 2 unknown; reason 0 resource limit, 1 quota
/// exhausted, 2 usage unknown.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct AnswerV2 {
    pub decision: u8,
    pub reason: Option<u8>,
    pub granted_output_tokens: u64,
    pub remaining_tokens: Option<u64>,
    pub remaining_cost_micros: Option<u64>,
    pub replay: bool,
}

impl From<&Authorization> for AnswerV2 {
    fn from(a: &Authorization) -> Self {
        AnswerV2 {
            decision: match a.decision {
                Decision::Allow => 0,
                Decision::Deny => 1,
                Decision::Unknown => 2,
            },
            reason: a.reason.map(|r| match r {
                Reason::ResourceLimit => 0,
                Reason::QuotaExhausted => 1,
                Reason::ResourceUsageUnknown => 2,
            }),
            granted_output_tokens: a.granted_output_tokens,
            remaining_tokens: a.remaining_tokens,
            remaining_cost_micros: a.remaining_cost,
            replay: a.replay,
        }
    }
}

impl TryFrom<AnswerV2> for Authorization {
    type Error = String;
    fn try_from(a: AnswerV2) -> Result<Self, String> {
        Ok(Authorization {
            decision: match a.decision {
                0 => Decision::Allow,
                1 => Decision::Deny,
                2 => Decision::Unknown,
                n => return Err(format!("a decision of {n}")),
            },
            reason: a
                .reason
                .map(|r| match r {
                    0 => Ok(Reason::ResourceLimit),
                    1 => Ok(Reason::QuotaExhausted),
                    2 => Ok(Reason::ResourceUsageUnknown),
                    n => Err(format!("a reason of {n}")),
                })
                .transpose()?,
            granted_output_tokens: a.granted_output_tokens,
            remaining_tokens: a.remaining_tokens,
            remaining_cost: a.remaining_cost_micros,
            replay: a.replay,
        })
    }
}

/// Where a step is.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub enum StepStateV2 {
    Reserved,
    Uncertain,
    Settled(UsageV2),
    /// Resolved by an operator (see [`resolution`]).
    Resolved(u8),
    Closed,
}

impl From<StepState> for StepStateV2 {
    fn from(s: StepState) -> Self {
        match s {
            StepState::Reserved => StepStateV2::Reserved,
            StepState::Uncertain => StepStateV2::Uncertain,
            StepState::Settled(u) => StepStateV2::Settled(u.into()),
            StepState::Resolved(r) => StepStateV2::Resolved(resolution(r)),
            StepState::Closed => StepStateV2::Closed,
        }
    }
}

impl TryFrom<StepStateV2> for StepState {
    type Error = String;
    fn try_from(s: StepStateV2) -> Result<Self, String> {
        Ok(match s {
            StepStateV2::Reserved => StepState::Reserved,
            StepStateV2::Uncertain => StepState::Uncertain,
            StepStateV2::Settled(u) => StepState::Settled(u.try_into()?),
            StepStateV2::Resolved(r) => StepState::Resolved(resolution_of(r)?),
            StepStateV2::Closed => StepState::Closed,
        })
    }
}

/// An auth bucket's rule.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct RuleV2 {
    pub max_attempts: u32,
    pub window_ms: u64,
    pub lockout_ms: u64,
}

impl From<BucketRule> for RuleV2 {
    fn from(r: BucketRule) -> Self {
        RuleV2 {
            max_attempts: r.max_attempts,
            window_ms: r.window_ms,
            lockout_ms: r.lockout_ms,
        }
    }
}

impl From<RuleV2> for BucketRule {
    fn from(r: RuleV2) -> Self {
        BucketRule::new(r.max_attempts, r.window_ms, r.lockout_ms)
    }
}

/// A borrowed or owned string: records borrow from the state when written and from the bytes
/// when read.
pub type Text<'a> = Cow<'a, str>;

/// A string borrowed into a record or piece.
pub fn text(s: &str) -> Text<'_> {
    Cow::Borrowed(s)
}
