//! The pure resource ledger of one host: per-run budgets, account allowances, and the
//! reservations of `Authorize` / `Settle`. No I/O, no locks, no clock
//! reads: every operation takes `now`, so tests drive time by hand and a Redis store can replay
//! the same rules in a script.
//!
//! Money is counted in whole micro-dollars ([`Micros`]), never in floating point, so that a
//! step landing exactly on a cap lands on it: 0.1 + 0.2 is 0.3 here.
//!
//! Rules, per `(run_id, step)` of a host:
//! * A run's usage is the sum of its settled steps plus what its unsettled steps reserved. It is
//!   *unknown* while a step was settled with partial or unknown coverage, or an earlier step is
//!   unsettled; then the budget's `unknown_usage` decides.
//! * Authorize denies at or over a per-run cap (`RESOURCE_LIMIT`) and when an allowance is spent
//!   (`QUOTA_EXHAUSTED`); otherwise it reserves the input estimate plus the granted output
//!   against every limit, the grant lowered to what the tightest token limit has left.
//! * Every key is decided once: a repeat gets the first answer with `replay`. Settle is exactly
//!   once; a repeat with other numbers is a conflict.
//! * An unsettled reservation turns *uncertain* after `reservation_ttl` and keeps counting as
//!   spent until it is settled or an operator resolves it.

mod image;
mod policy;
#[cfg(test)]
mod tests;

pub use image::{LedgerImage, RunImage, StepImage};
pub use policy::*;

use std::collections::{BTreeSet, HashMap};

use crate::scheduler::Millis;

/// The answer of Authorize.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    Unknown,
}

/// Why Authorize did not simply allow. Part of the public contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// At or over a per-run cap, or the step cannot fit under it.
    ResourceLimit,
    /// An account allowance is spent for its window.
    QuotaExhausted,
    /// The run's usage is unknown and its budget rejects or defers.
    ResourceUsageUnknown,
}

impl Reason {
    pub fn code(self) -> &'static str {
        match self {
            Reason::ResourceLimit => "RESOURCE_LIMIT",
            Reason::QuotaExhausted => "QUOTA_EXHAUSTED",
            Reason::ResourceUsageUnknown => "RESOURCE_USAGE_UNKNOWN",
        }
    }
}

/// How much of a step's usage the gateway could measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    Complete,
    Partial,
    Unknown,
}

/// What a step used, as settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: Micros,
    pub coverage: Coverage,
}

impl Usage {
    fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// The arguments of Authorize, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizeArgs {
    pub run_id: String,
    /// 1-based.
    pub step: u32,
    pub subject: String,
    pub account_id: Option<String>,
    pub model: String,
    /// At least 1.
    pub requested_output_tokens: u64,
    pub estimated_input_tokens: u64,
    /// Reserved against cost limits; 0 when the gateway gives no estimate.
    pub estimated_cost: Micros,
}

/// Authorize's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Authorization {
    pub decision: Decision,
    pub reason: Option<Reason>,
    /// Output tokens the step may produce (0 unless allowed).
    pub granted_output_tokens: u64,
    /// What the tightest token limit has left after this step's reservation; `None` when no
    /// token limit applies.
    pub remaining_tokens: Option<u64>,
    /// The same for cost limits.
    pub remaining_cost: Option<Micros>,
    /// True when this answers a repeat of an already decided key.
    pub replay: bool,
}

/// How an operator resolves an uncertain reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The step ran: its reservation becomes its known usage.
    Consumed,
    /// The step did not run: its reservation is refunded.
    Released,
}

/// Where a step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepState {
    /// Allowed; holding its reservation until Settle.
    Reserved,
    /// Allowed, unsettled past `reservation_ttl`; still counted as spent.
    Uncertain,
    /// Settled with this usage.
    Settled(Usage),
    /// Resolved by an operator.
    Resolved(Resolution),
    /// Denied or deferred: nothing reserved, nothing to settle.
    Closed,
}

impl StepState {
    fn is_open(self) -> bool {
        matches!(self, StepState::Reserved | StepState::Uncertain)
    }
}

/// Refusals of ledger calls that are the caller's mistake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    #[error("run_id: already names a run with another {field}")]
    RunConflict { field: &'static str },
    #[error("step: was never authorized (call Authorize for it first)")]
    NotAuthorized,
    #[error("usage: this step was already settled with other numbers")]
    SettleConflict,
    #[error("step: was already resolved by an operator")]
    AlreadyResolved,
    #[error("step: no such reservation")]
    NoSuchReservation,
    #[error("step: the reservation is not uncertain (it is {state})")]
    NotUncertain { state: &'static str },
}

/// One step as listed for operators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationInfo {
    pub run_id: String,
    pub step: u32,
    pub subject: String,
    pub account_id: Option<String>,
    pub model: String,
    pub state: StepState,
    pub reserved_tokens: u64,
    pub reserved_cost: Micros,
    /// Milliseconds since it was authorized.
    pub age_ms: Millis,
}

/// Gauges and counters of a host's ledger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LedgerStats {
    /// Reservations held (reserved or uncertain).
    pub open: u64,
    /// Of those, uncertain ones.
    pub uncertain: u64,
    pub allowed: u64,
    pub denied: u64,
    pub deferred: u64,
    pub settled: u64,
}

#[derive(Clone, Debug)]
struct Step {
    answer: Authorization,
    state: StepState,
    model: Box<str>,
    reserved_tokens: u64,
    reserved_cost: Micros,
    /// Start of the allowance window the reservation was charged to.
    window: Option<Millis>,
    decided_at: Millis,
}

#[derive(Clone, Debug)]
struct Run {
    subject: Box<str>,
    account: Option<Box<str>>,
    used_tokens: u64,
    used_cost: Micros,
    /// Steps settled with partial or unknown coverage.
    partial_steps: u32,
    /// Steps holding a reservation.
    open_steps: BTreeSet<u32>,
    steps: HashMap<u32, Step>,
    last_touched: Millis,
}

impl Run {
    fn usage_unknown_before(&self, step: u32) -> bool {
        self.partial_steps > 0 || self.open_steps.range(..step).next().is_some()
    }
}

#[derive(Clone, Copy, Debug)]
struct AccountWindow {
    start: Millis,
    end: Millis,
    used_tokens: u64,
    used_cost: Micros,
}

/// One host's ledger.
#[derive(Debug, Default)]
pub struct Ledger {
    runs: HashMap<Box<str>, Run>,
    windows: HashMap<Box<str>, AccountWindow>,
    /// Reserved (not yet uncertain) steps by the time their TTL runs out. Settle removes its
    /// step, so this holds only what is still open.
    deadlines: BTreeSet<(Millis, Box<str>, u32)>,
    stats: LedgerStats,
    next_forget: Millis,
}

impl Ledger {
    pub fn new() -> Self {
        Ledger::default()
    }

    /// Decide one step: allow with a reservation, deny, or defer; a repeated key gets its
    /// first answer with `replay`.
    pub fn authorize(
        &mut self,
        policy: &ResourcePolicy,
        args: AuthorizeArgs,
        now: Millis,
    ) -> Result<Authorization, LedgerError> {
        self.housekeeping(policy, now);
        if let Some(run) = self.runs.get_mut(args.run_id.as_str()) {
            if *run.subject != *args.subject {
                return Err(LedgerError::RunConflict { field: "subject" });
            }
            if run.account.as_deref() != args.account_id.as_deref() {
                return Err(LedgerError::RunConflict {
                    field: "account_id",
                });
            }
            run.last_touched = now;
            if let Some(step) = run.steps.get(&args.step) {
                return Ok(Authorization {
                    replay: true,
                    ..step.answer
                });
            }
        }
        let budget = policy.effective(&args.subject, args.account_id.as_deref());
        let allowance = args
            .account_id
            .as_deref()
            .and_then(|a| policy.allowances.get(a).map(|al| (a, al)));
        let run = self
            .runs
            .entry(Box::from(args.run_id.as_str()))
            .or_insert_with(|| Run {
                subject: Box::from(args.subject.as_str()),
                account: args.account_id.as_deref().map(Box::from),
                used_tokens: 0,
                used_cost: 0,
                partial_steps: 0,
                open_steps: BTreeSet::new(),
                steps: HashMap::new(),
                last_touched: now,
            });
        let window = allowance
            .map(|(account, al)| (al, current_window(&mut self.windows, account, al, now)));

        // Every limit that applies, as (limit, used, reason when it is what runs out).
        let mut token_limits: Vec<(u64, u64, Reason)> = Vec::with_capacity(2);
        let mut cost_limits: Vec<(Micros, Micros, Reason)> = Vec::with_capacity(2);
        if let Some(m) = budget.max_tokens {
            token_limits.push((m, run.used_tokens, Reason::ResourceLimit));
        }
        if let Some(m) = budget.max_cost {
            cost_limits.push((m, run.used_cost, Reason::ResourceLimit));
        }
        if let Some((al, w)) = &window {
            if let Some(t) = al.tokens {
                token_limits.push((t, w.used_tokens, Reason::QuotaExhausted));
            }
            if let Some(c) = al.cost {
                cost_limits.push((c, w.used_cost, Reason::QuotaExhausted));
            }
        }
        let remaining = |limits: &[(u64, u64, Reason)], extra: u64| {
            limits
                .iter()
                .map(|(limit, used, _)| limit.saturating_sub(used.saturating_add(extra)))
                .min()
        };
        let deny = |reason: Reason| Authorization {
            decision: Decision::Deny,
            reason: Some(reason),
            granted_output_tokens: 0,
            remaining_tokens: remaining(&token_limits, 0),
            remaining_cost: remaining(&cost_limits, 0),
            replay: false,
        };

        // Known subtotals at or over a cap deny under every policy; per-run caps first (token
        // or cost), then the allowance.
        let mut answer = token_limits
            .iter()
            .chain(&cost_limits)
            .filter(|(limit, used, _)| used >= limit)
            .map(|l| l.2)
            .min_by_key(|r| *r != Reason::ResourceLimit)
            .map(deny);
        // Unknown usage matters where a per-run budget block applies: its unknown_usage says
        // what to do. (Allowances alone count what was reserved and settled.)
        if answer.is_none()
            && let Some(policy) = budget.unknown_usage
            && run.usage_unknown_before(args.step)
        {
            answer = match policy {
                UnknownUsage::Reject => Some(deny(Reason::ResourceUsageUnknown)),
                UnknownUsage::Defer => Some(Authorization {
                    decision: Decision::Unknown,
                    ..deny(Reason::ResourceUsageUnknown)
                }),
                UnknownUsage::Allow => None,
            };
        }
        if answer.is_none() {
            // The input estimate must fit under every token limit with room for output, and
            // the cost estimate under every cost limit.
            let input = args.estimated_input_tokens;
            let no_room =
                token_limits
                    .iter()
                    .filter(|(limit, used, _)| used.saturating_add(input) >= *limit)
                    .chain(cost_limits.iter().filter(|(limit, used, _)| {
                        used.saturating_add(args.estimated_cost) > *limit
                    }))
                    .map(|l| l.2)
                    .min_by_key(|r| *r != Reason::ResourceLimit);
            answer = no_room.map(deny);
        }
        let answer = match answer {
            Some(a) => {
                match a.decision {
                    Decision::Unknown => self.stats.deferred += 1,
                    _ => self.stats.denied += 1,
                }
                run.steps.insert(
                    args.step,
                    Step {
                        answer: a,
                        state: StepState::Closed,
                        model: Box::from(args.model.as_str()),
                        reserved_tokens: 0,
                        reserved_cost: 0,
                        window: None,
                        decided_at: now,
                    },
                );
                a
            }
            None => {
                let room = remaining(&token_limits, args.estimated_input_tokens);
                let granted = room.map_or(args.requested_output_tokens, |r| {
                    r.min(args.requested_output_tokens)
                });
                let tokens = args.estimated_input_tokens.saturating_add(granted);
                let cost = args.estimated_cost;
                run.used_tokens = run.used_tokens.saturating_add(tokens);
                run.used_cost = run.used_cost.saturating_add(cost);
                run.open_steps.insert(args.step);
                let charged = window.map(|(_, w)| {
                    w.used_tokens = w.used_tokens.saturating_add(tokens);
                    w.used_cost = w.used_cost.saturating_add(cost);
                    w.start
                });
                let a = Authorization {
                    decision: Decision::Allow,
                    reason: None,
                    granted_output_tokens: granted,
                    remaining_tokens: remaining(&token_limits, tokens),
                    remaining_cost: remaining(&cost_limits, cost),
                    replay: false,
                };
                run.steps.insert(
                    args.step,
                    Step {
                        answer: a,
                        state: StepState::Reserved,
                        model: Box::from(args.model.as_str()),
                        reserved_tokens: tokens,
                        reserved_cost: cost,
                        window: charged,
                        decided_at: now,
                    },
                );
                self.stats.allowed += 1;
                self.stats.open += 1;
                self.deadlines.insert((
                    now + policy.reservation_ttl_ms,
                    Box::from(args.run_id.as_str()),
                    args.step,
                ));
                a
            }
        };
        Ok(answer)
    }

    /// Record what a step used, replacing its reservation. Exactly once per key: a repeat
    /// with the same numbers answers `true` (a replay).
    pub fn settle(
        &mut self,
        policy: &ResourcePolicy,
        run_id: &str,
        step: u32,
        usage: Usage,
        now: Millis,
    ) -> Result<bool, LedgerError> {
        self.housekeeping(policy, now);
        let run = self
            .runs
            .get_mut(run_id)
            .ok_or(LedgerError::NotAuthorized)?;
        let s = run.steps.get_mut(&step).ok_or(LedgerError::NotAuthorized)?;
        match s.state {
            StepState::Settled(first) if first == usage => return Ok(true),
            StepState::Settled(_) => return Err(LedgerError::SettleConflict),
            StepState::Resolved(_) => return Err(LedgerError::AlreadyResolved),
            StepState::Reserved | StepState::Uncertain | StepState::Closed => {}
        }
        let was = s.state;
        s.state = StepState::Settled(usage);
        run.last_touched = now;
        let (refund_tokens, refund_cost) = if was.is_open() {
            run.open_steps.remove(&step);
            self.stats.open -= 1;
            if was == StepState::Uncertain {
                self.stats.uncertain -= 1;
            } else {
                self.deadlines.remove(&(
                    s.decided_at + policy.reservation_ttl_ms,
                    Box::from(run_id),
                    step,
                ));
            }
            (s.reserved_tokens, s.reserved_cost)
        } else {
            (0, 0)
        };
        run.used_tokens =
            (run.used_tokens.saturating_sub(refund_tokens)).saturating_add(usage.tokens());
        run.used_cost = (run.used_cost.saturating_sub(refund_cost)).saturating_add(usage.cost);
        if usage.coverage != Coverage::Complete {
            run.partial_steps += 1;
        }
        // The allowance: a reservation is replaced in the window it was charged to while that
        // window lasts (a closed window is not reopened); usage of a step that reserved nothing
        // is charged to the current window.
        if let Some(account) = run.account.as_deref()
            && let Some(al) = policy.allowances.get(account)
        {
            let w = current_window(&mut self.windows, account, al, now);
            match s.window {
                Some(start) if start != w.start => {}
                _ => {
                    w.used_tokens = (w.used_tokens.saturating_sub(refund_tokens))
                        .saturating_add(usage.tokens());
                    w.used_cost =
                        (w.used_cost.saturating_sub(refund_cost)).saturating_add(usage.cost);
                }
            }
        }
        self.stats.settled += 1;
        Ok(false)
    }

    /// An operator's resolution of an uncertain reservation.
    pub fn resolve(
        &mut self,
        policy: &ResourcePolicy,
        run_id: &str,
        step: u32,
        resolution: Resolution,
        now: Millis,
    ) -> Result<(), LedgerError> {
        self.housekeeping(policy, now);
        let run = self
            .runs
            .get_mut(run_id)
            .ok_or(LedgerError::NoSuchReservation)?;
        let s = run
            .steps
            .get_mut(&step)
            .ok_or(LedgerError::NoSuchReservation)?;
        if s.state != StepState::Uncertain {
            return Err(LedgerError::NotUncertain {
                state: state_name(s.state),
            });
        }
        s.state = StepState::Resolved(resolution);
        run.open_steps.remove(&step);
        run.last_touched = now;
        self.stats.open -= 1;
        self.stats.uncertain -= 1;
        if resolution == Resolution::Released {
            run.used_tokens = run.used_tokens.saturating_sub(s.reserved_tokens);
            run.used_cost = run.used_cost.saturating_sub(s.reserved_cost);
            if let Some(account) = run.account.as_deref()
                && let Some(w) = self.windows.get_mut(account)
                && s.window == Some(w.start)
                && now < w.end
            {
                w.used_tokens = w.used_tokens.saturating_sub(s.reserved_tokens);
                w.used_cost = w.used_cost.saturating_sub(s.reserved_cost);
            }
        }
        Ok(())
    }

    /// Whether [`Ledger::housekeeping`] at `now` would change anything.
    pub fn housekeeping_due(&self, now: Millis) -> bool {
        self.deadlines.first().is_some_and(|(d, ..)| *d <= now) || now >= self.next_forget
    }

    /// Mark reservations past their TTL uncertain, and (at most once a minute) forget runs
    /// idle past their retention with nothing unsettled.
    pub fn housekeeping(&mut self, policy: &ResourcePolicy, now: Millis) {
        while let Some((deadline, ..)) = self.deadlines.first() {
            if *deadline > now {
                break;
            }
            let Some((_, run_id, step)) = self.deadlines.pop_first() else {
                break;
            };
            if let Some(s) = self
                .runs
                .get_mut(&run_id)
                .and_then(|r| r.steps.get_mut(&step))
                && s.state == StepState::Reserved
            {
                s.state = StepState::Uncertain;
                self.stats.uncertain += 1;
            }
        }
        if now >= self.next_forget {
            self.next_forget = now + 60_000;
            self.runs.retain(|_, r| {
                !r.open_steps.is_empty() || now < r.last_touched + policy.run_retention_ms
            });
            self.windows.retain(|_, w| now < w.end);
        }
    }

    /// Reservations still held (reserved and uncertain), uncertain ones first, then oldest
    /// first; at most `limit`, and whether there were more.
    pub fn open_reservations(&self, limit: usize, now: Millis) -> (Vec<ReservationInfo>, bool) {
        let mut all: Vec<ReservationInfo> = self
            .runs
            .iter()
            .flat_map(|(run_id, run)| {
                run.open_steps.iter().map(move |n| {
                    let s = &run.steps[n];
                    ReservationInfo {
                        run_id: run_id.to_string(),
                        step: *n,
                        subject: run.subject.to_string(),
                        account_id: run.account.as_deref().map(str::to_string),
                        model: s.model.to_string(),
                        state: s.state,
                        reserved_tokens: s.reserved_tokens,
                        reserved_cost: s.reserved_cost,
                        age_ms: now.saturating_sub(s.decided_at),
                    }
                })
            })
            .collect();
        all.sort_by(|a, b| {
            (
                a.state != StepState::Uncertain,
                std::cmp::Reverse(a.age_ms),
                &a.run_id,
                a.step,
            )
                .cmp(&(
                    b.state != StepState::Uncertain,
                    std::cmp::Reverse(b.age_ms),
                    &b.run_id,
                    b.step,
                ))
        });
        let more = all.len() > limit;
        all.truncate(limit);
        (all, more)
    }

    pub fn stats(&self) -> LedgerStats {
        self.stats
    }

    /// Runs remembered (for replays and per-run usage).
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }
}

/// The allowance window of `account` that is current at `now`, opened (or rolled over) here.
fn current_window<'a>(
    windows: &'a mut HashMap<Box<str>, AccountWindow>,
    account: &str,
    al: &Allowance,
    now: Millis,
) -> &'a mut AccountWindow {
    let fresh = AccountWindow {
        start: now,
        end: now + al.window_ms,
        used_tokens: 0,
        used_cost: 0,
    };
    if !windows.contains_key(account) {
        windows.insert(Box::from(account), fresh);
    }
    let w = windows.get_mut(account).expect("inserted above");
    if now >= w.end {
        *w = fresh;
    }
    w
}

/// A step state's name for messages and listings.
pub fn state_name(s: StepState) -> &'static str {
    match s {
        StepState::Reserved => "reserved",
        StepState::Uncertain => "uncertain",
        StepState::Settled(_) => "settled",
        StepState::Resolved(Resolution::Consumed) => "resolved as consumed",
        StepState::Resolved(Resolution::Released) => "resolved as released",
        StepState::Closed => "denied or deferred",
    }
}
