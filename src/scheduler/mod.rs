//! The pure scheduling core: one host's tickets, caps, queue and counters, and the operations on
//! them (submit, renew, release, expire). No I/O, no locks and no clock reads: every operation
//! takes `now` in milliseconds, so unit and property tests drive time by hand and a Redis store
//! can replay the same rules in a script.
//!
//! Cost model: every operation is O(log n) in the number of tickets of the host, except
//! * dispatch, which visits queued subjects until one is admitted (a full pass only when the host
//!   has free slots but every queued ticket is blocked by its subject, account or memory); it
//!   returns at once when the host is at its total cap;
//! * `position`, which is O(subjects with queued tickets) and is only computed for queued tickets.

mod adaptive;
mod blocked;
mod limits;
mod listing;
mod reclaim;
#[cfg(test)]
mod tests;

pub use adaptive::{Adaptive, AdaptiveState, Outcome, PROBE_SLOWDOWN, after_outcome};
pub use blocked::Blocker;
pub use limits::{
    DEFAULT_PRIORITY, LEVELS, Limits, LimitsRecord, LimitsSource, LimitsTable, MAX_WEIGHT,
    MemoryLimits, Mode, OverflowPolicy,
};
pub use listing::{LISTED_PLACE_DEPTH, TicketInfo};
pub use reclaim::{HeldArgs, ReclaimRefusal, Reclaimed};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// Hashes a [`TicketKey`] by its low 64 bits. Keys are 128 random bits drawn by the store, never
/// chosen by a caller, so they need no keyed hash against collision floods; SipHash on every
/// ticket lookup would be pure cost.
#[derive(Default)]
pub struct TicketKeyHasher(u64);

impl Hasher for TicketKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for keys hashed as bytes; fold them in.
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

/// A map keyed by ticket, hashed with [`TicketKeyHasher`].
pub type TicketMap<V> = HashMap<TicketKey, V, BuildHasherDefault<TicketKeyHasher>>;

/// Milliseconds on the store's clock (monotonic for the memory store, Redis `TIME` for Redis).
pub type Millis = u64;

/// The random part of a ticket id; the host is implied by the `HostState` that holds it.
pub type TicketKey = u128;

/// Where a ticket is in its life.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TicketState {
    Queued,
    Admitted,
    Released,
    Cancelled,
    Shed,
    Expired,
    Parked,
}

impl TicketState {
    /// Queued, admitted and parked tickets hold a lease; the rest are remembered only for
    /// idempotent retries.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            TicketState::Queued | TicketState::Admitted | TicketState::Parked
        )
    }
}

/// Whether a Submit may queue.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SubmitMode {
    #[default]
    Queue,
    /// Admit now or refuse with `Busy`; never queue.
    Try,
}

/// A Submit, already validated at the edge.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
pub struct SubmitArgs {
    pub instance_id: String,
    pub subject: String,
    /// `None` = unbound (no account cap applies).
    pub account_id: Option<String>,
    pub run_id: String,
    pub mode: SubmitMode,
    pub rss_mb: Option<u32>,
    /// 1 (highest) ..= 5 (lowest); the edge turns "unset" into [`DEFAULT_PRIORITY`].
    pub priority: u8,
}

/// A refusal that the caller should retry later. A normal outcome, not an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Saturated and no queue configured, or TRY mode while saturated.
    Busy,
    /// A queue bound is reached and the overflow policy cannot make room.
    QueueFull,
    /// The replica's reported memory (or the authority's own) is at the hard limit.
    MemoryPressure,
    /// The authority is draining.
    Draining,
}

impl Refusal {
    /// Its name: the ErrorInfo reason callers see, and the code the Redis scripts answer.
    /// Part of the public contract.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::Busy => "BUSY",
            Refusal::QueueFull => "QUEUE_FULL",
            Refusal::MemoryPressure => "MEMORY_PRESSURE",
            Refusal::Draining => "DRAINING",
        }
    }
}

/// What enforce mode would have done with a Submit that shadow mode admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShadowDecision {
    /// It would have waited in the queue.
    Queued,
    /// It would have been refused.
    Refused(Refusal),
}

impl ShadowDecision {
    /// Every decision, in the order of [`Counters::shadow`].
    pub const ALL: [ShadowDecision; 4] = [
        ShadowDecision::Queued,
        ShadowDecision::Refused(Refusal::Busy),
        ShadowDecision::Refused(Refusal::QueueFull),
        ShadowDecision::Refused(Refusal::MemoryPressure),
    ];

    /// `QUEUED` or the refusal's code: `SubmitResponse.shadow_reason` and the metric's reason.
    pub fn code(self) -> &'static str {
        match self {
            ShadowDecision::Queued => "QUEUED",
            ShadowDecision::Refused(r) => r.code(),
        }
    }

    /// Its place in [`Counters::shadow`].
    pub fn index(self) -> usize {
        ShadowDecision::ALL
            .iter()
            .position(|d| *d == self)
            .expect("every decision is listed")
    }

    pub fn from_code(code: &str) -> Option<Self> {
        ShadowDecision::ALL.into_iter().find(|d| d.code() == code)
    }
}

/// Why a Submit was not answered with a ticket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitError {
    Refused(Refusal),
    /// Refused while the host is in a learning window after its shared store lost its state
    /// (only the Redis store answers it): `left_ms` of the window remain.
    Learning {
        refusal: Refusal,
        left_ms: u64,
    },
    /// The run_id already names a ticket for another subject or account.
    RunIdConflict {
        field: &'static str,
    },
}

/// A ticket as callers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketView {
    pub key: TicketKey,
    pub state: TicketState,
    /// 0-based place in the dispatch order while queued, else 0.
    pub position: u32,
    /// Fencing number of its admission, 0 while queued.
    pub grant: u64,
    /// Lease left from now; 0 for ended tickets.
    pub lease_remaining_ms: u64,
    /// While queued, the expected wait from now (see [`eta_ms`]); 0 = unknown or not queued.
    pub eta_ms: u64,
    /// Set only in the answer to a Submit that shadow mode admitted but enforce would not have.
    pub shadow: Option<ShadowDecision>,
    /// While queued, what holds it.
    pub blocked_by: Option<Blocker>,
}

/// Cumulative counters of one host.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Tickets created (each Submit that was not a repeat and was not refused).
    pub submitted: u64,
    pub admitted: u64,
    pub rejected: u64,
    pub released: u64,
    pub cancelled: u64,
    pub shed: u64,
    pub expired: u64,
    /// How long tickets that waited in the queue waited before their admission.
    pub queue_wait: WaitHistogram,
    /// Shadow mode's decisions by [`ShadowDecision::index`]: what enforce would have done.
    pub shadow: [u64; 4],
    /// The host's mean slot hold in ms (admission to release, park or expiry), a moving
    /// average of 1/16 weight (see [`next_hold_avg`]); 0 until a slot was freed.
    pub hold_avg_ms: u64,
    /// Releases of admitted tickets by the outcome they reported, by [`Outcome::index`].
    pub outcomes: [u64; 4],
    /// The latencies those releases reported (ms), summed, and how many did.
    pub latency_sum_ms: u64,
    pub latency_count: u64,
    /// Tickets re-registered by their holders ([`HostState::reclaim`]).
    pub reclaimed: u64,
}

/// What a Release says about the run's call to the model provider.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub outcome: Outcome,
    pub latency_ms: Option<u32>,
}

/// Accounts whose adaptive cap a host remembers away from its start at most: past it, the
/// outcomes of other accounts leave their caps at `max` (so invented account ids cannot grow
/// the host without bound).
pub const MAX_ADAPTIVE_ACCOUNTS: usize = 10_000;

/// Upper bounds (ms) of the queue-wait histogram's buckets; a last bucket takes the rest.
pub const QUEUE_WAIT_BOUNDS_MS: [u64; 10] = [
    10, 50, 100, 500, 1_000, 5_000, 10_000, 30_000, 60_000, 300_000,
];

/// A histogram of waits: counts per bucket of [`QUEUE_WAIT_BOUNDS_MS`] (not cumulative; the
/// last counts waits above every bound) and the sum in ms.
#[derive(serde::Serialize, serde::Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitHistogram {
    pub buckets: [u64; 11],
    pub sum_ms: u64,
}

impl WaitHistogram {
    pub fn observe(&mut self, waited_ms: u64) {
        let i = QUEUE_WAIT_BOUNDS_MS
            .iter()
            .position(|b| waited_ms <= *b)
            .unwrap_or(QUEUE_WAIT_BOUNDS_MS.len());
        self.buckets[i] += 1;
        self.sum_ms += waited_ms;
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// A per-subject or per-account row of [`HostStats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRow {
    pub name: String,
    pub in_flight: u32,
    pub queued: u32,
    pub cap: u32,
    /// An account whose cap adapts to the outcomes releases report.
    pub adaptive: bool,
}

/// A snapshot of one host's gauges and counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostStats {
    pub in_flight: u32,
    pub queued: u32,
    pub parked: u32,
    pub counters: Counters,
    /// Highest fresh rss report from a replica, 0 if none.
    pub reported_rss_mb: u32,
    pub subjects: Vec<UsageRow>,
    pub accounts: Vec<UsageRow>,
    /// The limits the host was scheduled under (on a shared store, the installation's limits
    /// of record, which may come from another replica's file).
    pub limits: Limits,
    /// While the host is in a learning window after its shared store lost its state, the ms
    /// left of it (no new Submit is admitted meanwhile); 0 otherwise. The core never opens
    /// one: only the Redis store detects a loss.
    pub learning_left_ms: u64,
}

/// A live ticket (queued, admitted or parked).
#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct Ticket {
    subject: Arc<str>,
    account: Option<Arc<str>>,
    instance: Arc<str>,
    run_id: Arc<str>,
    state: TicketState,
    grant: u64,
    /// Lease deadline.
    deadline: Millis,
    /// Key in its subject's queue while queued (smaller = earlier).
    order: i64,
    /// When it entered its state: joined the queue, or was admitted (for hold times).
    since: Millis,
    /// Its priority level's index (0 = priority 1): the lane it waits in.
    level: u8,
    /// Admitted by [`HostState::reclaim`], whatever the caps said (the audit counts it apart).
    #[serde(default)]
    reclaimed: bool,
}

/// An ended ticket: only what an idempotent retry needs (its run_id lives in `runs` and
/// `retained`). About 150 bytes of the host's memory with its entries there.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy)]
struct Ended {
    state: TicketState,
    grant: u64,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Default)]
struct SubjectState {
    in_flight: u32,
    /// Its waiters, one lane per priority level.
    lanes: [Lane; LEVELS],
}

impl SubjectState {
    fn queued(&self) -> u32 {
        self.lanes.iter().map(|l| l.queue.len() as u32).sum()
    }
}

/// A subject's waiters of one priority level.
#[derive(serde::Serialize, serde::Deserialize, Debug, Default)]
struct Lane {
    /// Queued tickets by order key: oldest first.
    queue: BTreeMap<i64, TicketKey>,
    /// The generation of this lane's live entry in its level's rotation; 0 while it has none
    /// (no waiters). Entries of other generations are stale.
    entry: u64,
    /// Admissions in a row in its current turn at the head of the rotation (weights).
    credit: u32,
}

/// The waiters of one priority level across subjects: the round robin of section "Dispatch"
/// runs within a level.
#[derive(serde::Serialize, serde::Deserialize, Debug, Default)]
struct Level {
    queued: u32,
    /// Subjects in round-robin order, head first. An entry whose lane has no queued ticket is
    /// stale: it is dropped when it reaches the head (or by compaction), so withdrawing a
    /// subject's last waiter costs O(1) instead of a search through the rotation. A lane that
    /// gains a first waiter again joins at the tail with a new generation, so a stale entry
    /// never gives it back an earlier place.
    rotation: VecDeque<(Arc<str>, u64)>,
    /// Number of rotation entries whose lane has queued tickets.
    rotation_live: usize,
    /// Lanes with queued tickets by depth and then by the order of their oldest waiter, for
    /// shedding from the deepest queue: the last is the deepest, and of equally deep ones the
    /// one whose oldest waiter came first (never the first by name, so tenant names do not
    /// decide who loses). The Redis store picks the same.
    by_depth: BTreeSet<(u32, Reverse<i64>, Arc<str>)>,
    /// `depth_counts[d]` = number of lanes with more than `d` waiters; its prefix sums give
    /// the waiters of earlier round-robin rounds without visiting every subject.
    depth_counts: Vec<u32>,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Default)]
struct AccountState {
    in_flight: u32,
    queued: u32,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy)]
struct RssReport {
    rss_mb: u32,
    at: Millis,
}

/// One host's scheduling state. Operations keep every derived count in step; [`HostState::audit`]
/// recomputes them all from the tickets for tests.
#[derive(serde::Serialize, serde::Deserialize, Debug, Default)]
pub struct HostState {
    /// Live tickets.
    tickets: TicketMap<Ticket>,
    /// Ended tickets still remembered (see `retained`).
    ended: TicketMap<Ended>,
    /// run_id → ticket (live or ended), for idempotent Submit; kept until the ticket is
    /// forgotten.
    runs: HashMap<Arc<str>, TicketKey>,
    in_flight: u32,
    queued: u32,
    parked: u32,
    subjects: HashMap<Arc<str>, SubjectState>,
    accounts: HashMap<Arc<str>, AccountState>,
    /// Waiters by priority level, highest first.
    levels: [Level; LEVELS],
    /// The last rotation generation handed out (per host, so never reused by a lane that
    /// was forgotten and came back).
    next_generation: u64,
    /// Adaptive caps learned away from their start, by account (at most
    /// [`MAX_ADAPTIVE_ACCOUNTS`]; an account back at its start is forgotten).
    adaptive: HashMap<Arc<str>, AdaptiveState>,
    /// Waiters below priority 1 by the time they joined the queue and their order (not
    /// their key, which each store draws at random: ties must break alike), for aging.
    aging: BTreeMap<(Millis, i64), TicketKey>,
    /// Live tickets by lease deadline.
    leases: BTreeSet<(Millis, TicketKey)>,
    /// Ended tickets by the time they may be forgotten, with their run_id (retention is
    /// constant per host, so pushing at the back keeps this ordered). At most
    /// `limits.max_retained` long: past it the oldest is forgotten early.
    retained: VecDeque<(Millis, TicketKey, Arc<str>)>,
    next_order: i64,
    /// Order keys handed to tickets that must go ahead of every waiter of their subject.
    next_front: i64,
    grant: u64,
    /// The smallest grant the next admission may take: the store's wall clock in µs, so
    /// grants keep increasing across restarts (see [`HostState::set_grant_floor`]).
    grant_floor: u64,
    counters: Counters,
    instances: HashMap<Arc<str>, RssReport>,
    /// Tickets whose state changed since the last [`HostState::take_changes`] (not kept on
    /// disk: a restored host wakes no stream).
    #[serde(skip)]
    changes: Vec<TicketKey>,
}

impl HostState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Submit a new ticket under `key` (unused unless the run_id is new), or answer a repeat of
    /// the run_id with the existing ticket.
    ///
    /// Fails with a refusal (counted in `rejected`) when the ticket can neither be admitted nor
    /// queued, and with `RunIdConflict` when the run_id is taken by another subject or account.
    pub fn submit(
        &mut self,
        limits: &Limits,
        args: SubmitArgs,
        key: TicketKey,
        now: Millis,
    ) -> Result<TicketView, SubmitError> {
        self.housekeeping(limits, now);
        if let Some(&existing) = self.runs.get(args.run_id.as_str()) {
            // An ended ticket no longer knows its subject and account: a repeat gets its final
            // state whoever asks (the caller may act for the host, which is all that matters).
            if let Some(t) = self.tickets.get(&existing) {
                if *t.subject != *args.subject {
                    return Err(SubmitError::RunIdConflict { field: "subject" });
                }
                if t.account.as_deref() != args.account_id.as_deref() {
                    return Err(SubmitError::RunIdConflict {
                        field: "account_id",
                    });
                }
            }
            return Ok(self
                .view(limits, existing, now)
                .expect("runs point at known tickets"));
        }

        let instance: Arc<str> = Arc::from(args.instance_id.as_str());
        if let Some(rss_mb) = args.rss_mb {
            self.report_rss(limits, &instance, rss_mb, now);
        }
        if limits.shadow() {
            return Ok(self.submit_shadow(limits, args, instance, key, now));
        }
        let level = level_of(args.priority);
        if limits.memory.is_hard(args.rss_mb) {
            return Err(self.refuse(Refusal::MemoryPressure));
        }
        // Queued work goes first.
        self.dispatch(limits, now);

        let soft = self.is_soft(limits, &instance, now);
        let eligible = !soft && self.fits(limits, &args.subject, args.account_id.as_deref());
        if !eligible {
            // Make room before interning the newcomer's names: shedding may drop idle names.
            if args.mode == SubmitMode::Try || limits.queue_total == 0 {
                return Err(self.refuse(Refusal::Busy));
            }
            self.make_room(limits, &args.subject, level, now)?;
        }
        self.insert_ticket(args, instance, key);
        if eligible {
            self.admit(limits, key, now);
        } else {
            self.enqueue(limits, key, false, now);
        }
        Ok(self.view(limits, key, now).expect("just inserted"))
    }

    /// Submit in shadow mode: admitted at once whatever the caps say, with what enforce would
    /// have done. Enforce's queue is modelled by the admissions over the caps: a host `n`
    /// over its total would have `n` waiters (so QUEUE_FULL is reported once that many reach
    /// the queue bounds).
    fn submit_shadow(
        &mut self,
        limits: &Limits,
        args: SubmitArgs,
        instance: Arc<str>,
        key: TicketKey,
        now: Millis,
    ) -> TicketView {
        // Waiters from before a switch to shadow go first, caps or not.
        self.dispatch(limits, now);
        let decision = if limits.memory.is_hard(args.rss_mb) {
            Some(ShadowDecision::Refused(Refusal::MemoryPressure))
        } else if !self.is_soft(limits, &instance, now)
            && self.fits(limits, &args.subject, args.account_id.as_deref())
        {
            None
        } else if args.mode == SubmitMode::Try || limits.queue_total == 0 {
            Some(ShadowDecision::Refused(Refusal::Busy))
        } else {
            let subject_over = self.subjects.get(args.subject.as_str()).map_or(0, |s| {
                s.in_flight
                    .saturating_sub(limits.subject_cap(&args.subject))
            });
            let total_over = self.in_flight.saturating_sub(limits.total);
            Some(shadow_queue_decision(limits, subject_over, total_over))
        };
        if let Some(d) = decision {
            self.counters.shadow[d.index()] += 1;
        }
        self.insert_ticket(args, instance, key);
        self.admit(limits, key, now);
        let mut view = self.view(limits, key, now).expect("just inserted");
        view.shadow = decision;
        view
    }

    /// Extend the lease of `key` (queued, admitted or parked) and record an rss report for the
    /// instance that submitted it. Returns the ticket after the renewal, `None` if unknown.
    pub fn renew(
        &mut self,
        limits: &Limits,
        key: TicketKey,
        rss_mb: Option<u32>,
        now: Millis,
    ) -> Option<TicketView> {
        self.housekeeping(limits, now);
        let Some(t) = self.tickets.get_mut(&key) else {
            return self.view(limits, key, now);
        };
        self.leases.remove(&(t.deadline, key));
        t.deadline = now + limits.lease_ttl_ms;
        self.leases.insert((t.deadline, key));
        if let Some(rss_mb) = rss_mb {
            let instance = t.instance.clone();
            let was_soft = self.is_soft(limits, &instance, now);
            self.report_rss(limits, &instance, rss_mb, now);
            if was_soft && !self.is_soft(limits, &instance, now) {
                self.dispatch(limits, now);
            }
        }
        self.view(limits, key, now)
    }

    /// Park an admitted ticket: it stops counting against every cap (its lease runs on) and
    /// the next waiter is dispatched. Parking a parked ticket changes nothing. Returns the
    /// ticket after the call; `None` for an unknown key.
    ///
    /// Fails with the ticket's state when it is neither admitted nor parked.
    pub fn park(
        &mut self,
        limits: &Limits,
        key: TicketKey,
        now: Millis,
    ) -> Option<Result<TicketView, TicketState>> {
        self.housekeeping(limits, now);
        let Some(t) = self.tickets.get(&key) else {
            return self.ended.get(&key).map(|e| Err(e.state));
        };
        match t.state {
            TicketState::Parked => {}
            TicketState::Admitted => {
                let (subject, account) = (t.subject.clone(), t.account.clone());
                self.observe_hold(now.saturating_sub(t.since));
                self.in_flight -= 1;
                self.subjects.get_mut(&subject).expect("interned").in_flight -= 1;
                if let Some(a) = &account {
                    self.accounts.get_mut(a).expect("interned").in_flight -= 1;
                }
                self.parked += 1;
                self.tickets.get_mut(&key).expect("known").state = TicketState::Parked;
                self.changes.push(key);
                self.forget_idle_names(&subject, account.as_deref());
                self.dispatch(limits, now);
            }
            other => return Some(Err(other)),
        }
        Some(Ok(self.view(limits, key, now).expect("known")))
    }

    /// Ask for a slot again for a parked ticket: admitted at once if it fits (a new grant),
    /// else queued ahead of every other waiter of its subject. Unparking an admitted or queued
    /// ticket changes nothing. Returns the ticket after the call; `None` for an unknown key.
    ///
    /// Fails with the ticket's state when it has ended.
    pub fn unpark(
        &mut self,
        limits: &Limits,
        key: TicketKey,
        now: Millis,
    ) -> Option<Result<TicketView, TicketState>> {
        self.housekeeping(limits, now);
        let Some(t) = self.tickets.get(&key) else {
            return self.ended.get(&key).map(|e| Err(e.state));
        };
        match t.state {
            TicketState::Admitted | TicketState::Queued => {}
            TicketState::Parked => {
                let (subject, account, instance) =
                    (t.subject.clone(), t.account.clone(), t.instance.clone());
                self.parked -= 1;
                let subject = intern(&mut self.subjects, &subject);
                if let Some(a) = &account {
                    intern(&mut self.accounts, a);
                }
                // No waiter fits now (dispatch runs after every change), so a free slot that
                // fits this ticket is its own.
                let fits = limits.shadow()
                    || (!self.is_soft(limits, &instance, now)
                        && self.fits(limits, &subject, account.as_deref()));
                if fits {
                    self.admit(limits, key, now);
                } else {
                    self.enqueue(limits, key, true, now);
                }
            }
            other => return Some(Err(other)),
        }
        Some(Ok(self.view(limits, key, now).expect("known")))
    }

    /// Free an admitted or parked ticket (RELEASED) or withdraw a queued one (CANCELLED), then
    /// dispatch. Returns the state before the call; `None` for an unknown key. Ended tickets are
    /// left as they are.
    pub fn release(&mut self, limits: &Limits, key: TicketKey, now: Millis) -> Option<TicketState> {
        self.release_reporting(limits, key, Report::default(), now)
    }

    /// [`HostState::release`] with what the run reports about its provider call: an admitted
    /// ticket's outcome is counted and moves its account's adaptive cap (before the dispatch
    /// the release makes, so a raised cap admits at once).
    pub fn release_reporting(
        &mut self,
        limits: &Limits,
        key: TicketKey,
        report: Report,
        now: Millis,
    ) -> Option<TicketState> {
        self.housekeeping(limits, now);
        let Some(t) = self.tickets.get(&key) else {
            return self.ended.get(&key).map(|e| e.state);
        };
        let previous = t.state;
        if previous == TicketState::Admitted {
            let account = t.account.clone();
            self.record_outcome(limits, account.as_deref(), report, now);
        }
        match previous {
            TicketState::Admitted | TicketState::Parked => {
                if let Some(held) = self.end(limits, key, TicketState::Released, now) {
                    self.observe_hold(held);
                }
                self.counters.released += 1;
                self.dispatch(limits, now);
            }
            TicketState::Queued => {
                self.end(limits, key, TicketState::Cancelled, now);
                self.counters.cancelled += 1;
                self.dispatch(limits, now);
            }
            TicketState::Released
            | TicketState::Cancelled
            | TicketState::Shed
            | TicketState::Expired => {}
        }
        Some(previous)
    }

    /// [`HostState::release`] of the ticket Submit made for `run_id`: its key and the state
    /// before the call; `None` when the run has no ticket (never submitted, or forgotten).
    pub fn release_run(
        &mut self,
        limits: &Limits,
        run_id: &str,
        report: Report,
        now: Millis,
    ) -> Option<(TicketKey, TicketState)> {
        self.housekeeping(limits, now);
        let key = *self.runs.get(run_id)?;
        self.release_reporting(limits, key, report, now)
            .map(|s| (key, s))
    }

    /// Count an admitted ticket's reported outcome and latency, and move its account's
    /// adaptive cap (given the account's admitted tickets before this release).
    fn record_outcome(
        &mut self,
        limits: &Limits,
        account: Option<&str>,
        report: Report,
        now: Millis,
    ) {
        if let Some(i) = report.outcome.index() {
            self.counters.outcomes[i] += 1;
        }
        if let Some(ms) = report.latency_ms {
            self.counters.latency_sum_ms += u64::from(ms);
            self.counters.latency_count += 1;
        }
        let Some(account) = account.filter(|_| report.outcome != Outcome::Unspecified) else {
            return;
        };
        let Some(a) = limits.adaptive_of(account) else {
            return;
        };
        let in_flight = self.accounts.get(account).map_or(0, |s| s.in_flight);
        // An OK below `min` cannot be at the cap, a FAILED changes nothing: no state to read.
        if (report.outcome == Outcome::Ok && in_flight < a.min) || report.outcome == Outcome::Failed
        {
            return;
        }
        let before = self
            .adaptive
            .get(account)
            .copied()
            .unwrap_or_else(|| a.fresh());
        let after = after_outcome(a, before, report.outcome, in_flight, now);
        // Only a change is written: an account is forgotten when a change brings it back to
        // its start (so the stores need not read the state of an account far below its cap).
        if after == before {
            return;
        }
        if after.is_fresh(a, now) {
            self.adaptive.remove(account);
        } else if self.adaptive.contains_key(account) || self.adaptive.len() < MAX_ADAPTIVE_ACCOUNTS
        {
            self.adaptive.insert(Arc::from(account), after);
        }
    }

    /// The cap of `account` in force now: its adaptive cap when it has one, else its fixed one
    /// (`None`: no cap).
    pub fn account_cap(&self, limits: &Limits, account: &str) -> Option<u32> {
        account_cap(limits, &self.adaptive, account)
    }

    /// Expire every lease due at `now`, forget tickets past retention, and dispatch into the
    /// freed slots. Every other operation does this first, so a periodic sweep only matters for
    /// hosts that see no traffic.
    pub fn housekeeping(&mut self, limits: &Limits, now: Millis) {
        let mut freed = false;
        // Slots freed together count into the mean hold shortest first, so the mean does not
        // depend on the order of tickets whose leases ran out at the same time.
        let mut holds = Vec::new();
        while let Some(&(deadline, key)) = self.leases.first() {
            if deadline > now {
                break;
            }
            holds.extend(self.end(limits, key, TicketState::Expired, now));
            self.counters.expired += 1;
            freed = true;
        }
        holds.sort_unstable();
        for held in holds {
            self.observe_hold(held);
        }
        while self.retained.front().is_some_and(|r| r.0 <= now) {
            self.forget_oldest();
        }
        if limits.priority_aging_ms > 0 {
            let cutoff = now.saturating_sub(limits.priority_aging_ms);
            while let Some((&(since, _), &key)) = self.aging.first_key_value() {
                if since > cutoff {
                    break;
                }
                // No dispatch needed: a waiter that fit would have been admitted at its own
                // level already; from now on it goes before the lower levels.
                self.promote(key);
            }
        }
        let stale_reports = self
            .instances
            .iter()
            .any(|(_, r)| now.saturating_sub(r.at) >= limits.lease_ttl_ms);
        if stale_reports {
            let before = self.instances.len();
            self.instances
                .retain(|_, r| now.saturating_sub(r.at) < limits.lease_ttl_ms);
            freed |= self.instances.len() != before;
        }
        if freed {
            self.dispatch(limits, now);
        }
    }

    /// Whether [`HostState::housekeeping`] at `now` would change anything: a lease due, a
    /// retained ticket to forget, a waiter to age or a stale memory report. A store that
    /// records every change (the durable embedded store) runs housekeeping for a read only
    /// when this says so.
    pub fn housekeeping_due(&self, limits: &Limits, now: Millis) -> bool {
        self.leases.first().is_some_and(|(d, _)| *d <= now)
            || self.retained.front().is_some_and(|r| r.0 <= now)
            || (limits.priority_aging_ms > 0
                && self
                    .aging
                    .first_key_value()
                    .is_some_and(|(&(since, _), _)| {
                        since <= now.saturating_sub(limits.priority_aging_ms)
                    }))
            || self
                .instances
                .values()
                .any(|r| now.saturating_sub(r.at) >= limits.lease_ttl_ms)
    }

    /// The store was restored from disk at `now` after its process stopped: every live
    /// ticket's lease runs at least one `lease_ttl` from now, so a holder that kept running
    /// through the restart keeps its slot by renewing, and a queued one keeps its place while
    /// its client comes back.
    pub fn restored(&mut self, limits: &Limits, now: Millis) {
        let floor = now + limits.lease_ttl_ms;
        let late: Vec<(Millis, TicketKey)> = self
            .leases
            .iter()
            .take_while(|(d, _)| *d < floor)
            .copied()
            .collect();
        for (deadline, key) in late {
            self.leases.remove(&(deadline, key));
            self.leases.insert((floor, key));
            if let Some(t) = self.tickets.get_mut(&key) {
                t.deadline = floor;
            }
        }
    }

    /// The host's limits changed to `limits`: admit waiters into any room a raised cap made.
    /// A lowered cap revokes nothing; new tickets wait until the host is under it.
    /// Every subject's turn starts afresh (its weight may have changed).
    pub fn limits_changed(&mut self, limits: &Limits, now: Millis) {
        for s in self.subjects.values_mut() {
            for lane in &mut s.lanes {
                lane.credit = 0;
            }
        }
        self.housekeeping(limits, now);
        self.dispatch(limits, now);
    }

    /// The ticket as callers see it, `None` if unknown (never issued, or forgotten).
    pub fn view(&self, limits: &Limits, key: TicketKey, now: Millis) -> Option<TicketView> {
        let Some(t) = self.tickets.get(&key) else {
            let e = self.ended.get(&key)?;
            return Some(TicketView {
                key,
                state: e.state,
                position: 0,
                grant: e.grant,
                lease_remaining_ms: 0,
                eta_ms: 0,
                shadow: None,
                blocked_by: None,
            });
        };
        let blocked_by = (t.state == TicketState::Queued)
            .then(|| self.blocker(limits, key, t, self.head_waiter(), now));
        let (position, eta) = if t.state == TicketState::Queued {
            let (position, depth) = self.position(t);
            let eta = eta_ms(
                self.counters.hold_avg_ms,
                position,
                limits.total,
                depth,
                limits.subject_cap(&t.subject),
            );
            (position, eta)
        } else {
            (0, 0)
        };
        Some(TicketView {
            key,
            state: t.state,
            position,
            grant: t.grant,
            lease_remaining_ms: t.deadline.saturating_sub(now),
            eta_ms: eta,
            shadow: None,
            blocked_by,
        })
    }

    /// Ended tickets remembered for idempotent retries.
    pub fn retained(&self) -> usize {
        self.retained.len()
    }

    /// Gauges, counters and per-subject/per-account rows (rows for names with live tickets).
    pub fn stats(&self, limits: &Limits, now: Millis) -> HostStats {
        let mut subjects: Vec<UsageRow> = self
            .subjects
            .iter()
            .filter(|(_, s)| s.in_flight > 0 || s.queued() > 0)
            .map(|(name, s)| UsageRow {
                name: name.to_string(),
                in_flight: s.in_flight,
                queued: s.queued(),
                cap: limits.subject_cap(name),
                adaptive: false,
            })
            .collect();
        subjects.sort_by(|a, b| a.name.cmp(&b.name));
        // Accounts with live tickets, and those whose adaptive cap moved from its start.
        let names: std::collections::BTreeSet<&str> = self
            .accounts
            .iter()
            .filter(|(_, a)| a.in_flight > 0 || a.queued > 0)
            .map(|(name, _)| &**name)
            .chain(
                self.adaptive
                    .keys()
                    .map(|n| &**n)
                    .filter(|n| limits.adaptive_of(n).is_some()),
            )
            .collect();
        let mut accounts: Vec<UsageRow> = names
            .into_iter()
            .map(|name| {
                let a = self.accounts.get(name);
                UsageRow {
                    name: name.to_string(),
                    in_flight: a.map_or(0, |a| a.in_flight),
                    queued: a.map_or(0, |a| a.queued),
                    cap: self.account_cap(limits, name).unwrap_or(0),
                    adaptive: limits.adaptive_of(name).is_some(),
                }
            })
            .collect();
        accounts.sort_by(|a, b| a.name.cmp(&b.name));
        let reported_rss_mb = self
            .instances
            .values()
            .filter(|r| now.saturating_sub(r.at) < limits.lease_ttl_ms)
            .map(|r| r.rss_mb)
            .max()
            .unwrap_or(0);
        HostStats {
            in_flight: self.in_flight,
            queued: self.queued,
            parked: self.parked,
            counters: self.counters,
            reported_rss_mb,
            subjects,
            accounts,
            limits: limits.clone(),
            learning_left_ms: 0,
        }
    }

    /// Admissions from now on take grants of at least `floor` (and always more than the last
    /// one): the store passes its wall clock in µs before each operation, so a host's grants
    /// strictly increase across restarts of the authority and of its store.
    pub fn set_grant_floor(&mut self, floor: u64) {
        self.grant_floor = floor;
    }

    /// Admitted tickets.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Count a Submit refused before it reached the core (the authority's own memory).
    pub fn count_rejection(&mut self) {
        self.counters.rejected += 1;
    }

    pub fn has_ticket(&self, key: TicketKey) -> bool {
        self.tickets.contains_key(&key) || self.ended.contains_key(&key)
    }

    pub fn state_of(&self, key: TicketKey) -> Option<TicketState> {
        match self.tickets.get(&key) {
            Some(t) => Some(t.state),
            None => self.ended.get(&key).map(|e| e.state),
        }
    }

    /// The tickets whose state changed since the last call, for waking their Wait streams.
    pub fn take_changes(&mut self) -> Vec<TicketKey> {
        std::mem::take(&mut self.changes)
    }

    /// Hand each changed ticket to `f` and forget the changes, keeping the buffer.
    pub fn drain_changes(&mut self, mut f: impl FnMut(TicketKey, Option<TicketState>)) {
        let mut changes = std::mem::take(&mut self.changes);
        for key in changes.drain(..) {
            f(key, self.state_of(key));
        }
        self.changes = changes;
    }

    /// Recompute every derived count from the tickets and compare, and check that no cap is
    /// exceeded and no waiter that fits is left queued; `Err` names the first violation. For
    /// tests and debugging; O(n).
    pub fn audit(&self, limits: &Limits, now: Millis) -> Result<(), String> {
        let mut in_flight = 0u32;
        let mut queued = 0u32;
        let mut parked = 0u32;
        let mut subj: HashMap<&str, (u32, u32)> = HashMap::new();
        let mut acct: HashMap<&str, (u32, u32)> = HashMap::new();
        // Reclaimed tickets count against the caps but may exceed them: the caps bind the rest.
        let mut reclaimed = 0u32;
        let mut reclaimed_of: HashMap<&str, u32> = HashMap::new();
        let mut reclaimed_acct: HashMap<&str, u32> = HashMap::new();
        for (key, t) in &self.tickets {
            let s = subj.entry(&t.subject).or_default();
            let a = t.account.as_deref().map(|a| acct.entry(a).or_default());
            match t.state {
                TicketState::Admitted => {
                    if t.reclaimed {
                        reclaimed += 1;
                        *reclaimed_of.entry(&t.subject).or_default() += 1;
                        if let Some(a) = t.account.as_deref() {
                            *reclaimed_acct.entry(a).or_default() += 1;
                        }
                    }
                    in_flight += 1;
                    s.0 += 1;
                    if let Some(a) = a {
                        a.0 += 1;
                    }
                }
                TicketState::Queued => {
                    queued += 1;
                    s.1 += 1;
                    if let Some(a) = a {
                        a.1 += 1;
                    }
                    let in_queue = self
                        .subjects
                        .get(&*t.subject)
                        .and_then(|s| s.lanes[t.level as usize].queue.get(&t.order));
                    if in_queue != Some(key) {
                        return Err(format!(
                            "queued ticket {key:x} missing from its subject queue"
                        ));
                    }
                }
                TicketState::Parked => parked += 1,
                _ => {}
            }
            if !t.state.is_live() || !self.leases.contains(&(t.deadline, *key)) {
                return Err(format!("lease index out of step for {key:x}"));
            }
        }
        if self.leases.len() != self.tickets.len() {
            return Err("a lease of no live ticket".into());
        }
        if self.retained.len() != self.ended.len() || self.runs.len() < self.tickets.len() {
            return Err("ended tickets and their index out of step".into());
        }
        if (in_flight, queued, parked) != (self.in_flight, self.queued, self.parked) {
            return Err(format!(
                "gauges ({}, {}, {}) != recomputed ({in_flight}, {queued}, {parked})",
                self.in_flight, self.queued, self.parked
            ));
        }
        // Shadow mode admits over the caps.
        let enforce = !limits.shadow();
        let over = |name: &str| reclaimed_of.get(name).copied().unwrap_or(0);
        if enforce && in_flight - reclaimed > limits.total {
            return Err(format!("in_flight {in_flight} over total {}", limits.total));
        }
        for (name, s) in &self.subjects {
            let (f, q) = subj.get(&**name).copied().unwrap_or_default();
            if (s.in_flight, s.queued()) != (f, q) {
                return Err(format!("subject {name}: counts out of step"));
            }
            if enforce && f - over(name) > limits.subject_cap(name) {
                return Err(format!("subject {name}: in_flight {f} over its cap"));
            }
            for (l, lane) in s.lanes.iter().enumerate() {
                let q = lane.queue.len() as u32;
                if q > 0 && lane.entry == 0 {
                    return Err(format!("subject {name}: queued but not in the rotation"));
                }
                let head = lane.queue.first_key_value().map_or(0, |(o, _)| *o);
                let indexed = self.levels[l]
                    .by_depth
                    .contains(&(q, Reverse(head), name.clone()));
                if (q > 0) != indexed {
                    return Err(format!("subject {name}: depth index out of step"));
                }
            }
        }
        for (name, a) in &self.accounts {
            let (f, q) = acct.get(&**name).copied().unwrap_or_default();
            if (a.in_flight, a.queued) != (f, q) {
                return Err(format!("account {name}: counts out of step"));
            }
            if let Some(cap) = self.account_cap(limits, name)
                && enforce
                && f - reclaimed_acct.get(&**name).copied().unwrap_or(0) > cap
            {
                return Err(format!("account {name}: in_flight {f} over its cap"));
            }
        }
        for (l, level) in self.levels.iter().enumerate() {
            let mut depth_counts: Vec<u32> = Vec::new();
            let mut queued = 0;
            for s in self.subjects.values() {
                let len = s.lanes[l].queue.len();
                queued += len as u32;
                for d in 0..len {
                    if depth_counts.len() <= d {
                        depth_counts.push(0);
                    }
                    depth_counts[d] += 1;
                }
            }
            if depth_counts != level.depth_counts || queued != level.queued {
                return Err(format!(
                    "level {l}: depth_counts {:?} != {depth_counts:?} or queued out of step",
                    level.depth_counts
                ));
            }
            let live = level
                .rotation
                .iter()
                .filter(|(name, generation)| {
                    self.subjects.get(&**name).is_some_and(|s| {
                        s.lanes[l].entry == *generation && !s.lanes[l].queue.is_empty()
                    })
                })
                .count();
            if live != level.rotation_live {
                return Err(format!(
                    "level {l}: rotation_live {} != {live}",
                    level.rotation_live
                ));
            }
        }
        for (key, t) in &self.tickets {
            let aging = self.aging.get(&(t.since, t.order)) == Some(key);
            if aging != (t.state == TicketState::Queued && t.level > 0) {
                return Err(format!("aging index out of step for {key:x}"));
            }
        }
        let c = self.counters;
        let ended = c.released + c.cancelled + c.shed + c.expired;
        if c.submitted + c.reclaimed != ended + u64::from(in_flight + queued + parked) {
            return Err(format!(
                "submitted {} + reclaimed {} != ended {ended} + live {}",
                c.submitted,
                c.reclaimed,
                in_flight + queued + parked
            ));
        }
        if c.admitted + c.reclaimed < u64::from(in_flight) + c.released {
            return Err("fewer admissions than admitted and released tickets".into());
        }
        for name in self.subjects.keys() {
            if let Some(key) = self.first_fitting(limits, name, now) {
                return Err(format!("waiter {key:x} of {name} fits but is still queued"));
            }
        }
        Ok(())
    }

    // ----- internals -------------------------------------------------------------------------

    fn refuse(&mut self, refusal: Refusal) -> SubmitError {
        self.counters.rejected += 1;
        SubmitError::Refused(refusal)
    }

    /// A new ticket for a Submit under `key` (state still to set: the caller admits or
    /// queues it), its names interned and its run_id indexed.
    fn insert_ticket(&mut self, args: SubmitArgs, instance: Arc<str>, key: TicketKey) {
        self.counters.submitted += 1;
        let subject = intern(&mut self.subjects, &args.subject);
        let account = args
            .account_id
            .as_deref()
            .map(|a| intern(&mut self.accounts, a));
        let run_id: Arc<str> = Arc::from(args.run_id);
        self.runs.insert(run_id.clone(), key);
        let t = Ticket {
            subject,
            account,
            instance,
            run_id,
            state: TicketState::Queued,
            grant: 0,
            deadline: 0,
            order: 0,
            since: 0,
            level: level_of(args.priority),
            reclaimed: false,
        };
        self.tickets.insert(key, t);
    }

    fn report_rss(&mut self, limits: &Limits, instance: &Arc<str>, rss_mb: u32, now: Millis) {
        if limits.memory.max_rss_mb > 0 {
            self.instances
                .insert(instance.clone(), RssReport { rss_mb, at: now });
        }
    }

    fn is_soft(&self, limits: &Limits, instance: &str, now: Millis) -> bool {
        instance_is_soft(limits, &self.instances, instance, now)
    }

    /// Whether one more ticket of `subject`/`account` fits under every cap.
    fn fits(&self, limits: &Limits, subject: &str, account: Option<&str>) -> bool {
        if self.in_flight >= limits.total {
            return false;
        }
        let s = self.subjects.get(subject).map_or(0, |s| s.in_flight);
        s < limits.subject_cap(subject)
            && account_has_room(limits, &self.accounts, &self.adaptive, account)
    }

    /// Move a new ticket, or one already taken out of its queue, to ADMITTED. The caller has
    /// checked that it fits.
    fn admit(&mut self, limits: &Limits, key: TicketKey, now: Millis) {
        let subject = self.admit_except_subject(limits, key, now);
        self.subjects.get_mut(&subject).expect("interned").in_flight += 1;
    }

    /// Everything of an admission but the subject's count, which the caller keeps (dispatch
    /// holds the subject already). Returns the subject.
    fn admit_except_subject(&mut self, limits: &Limits, key: TicketKey, now: Millis) -> Arc<str> {
        let t = self.tickets.get_mut(&key).expect("admit a known ticket");
        self.grant = (self.grant + 1).max(self.grant_floor);
        t.grant = self.grant;
        t.state = TicketState::Admitted;
        t.since = now;
        self.leases.remove(&(t.deadline, key));
        t.deadline = now + limits.lease_ttl_ms;
        self.leases.insert((t.deadline, key));
        self.in_flight += 1;
        if let Some(a) = &t.account {
            self.accounts.get_mut(a).expect("interned").in_flight += 1;
        }
        self.counters.admitted += 1;
        self.changes.push(key);
        t.subject.clone()
    }

    /// Put a ticket (state QUEUED) into its subject's lane of its level: at the back, or
    /// ahead of every waiter of that lane when `front` (a parked ticket asking again).
    fn enqueue(&mut self, limits: &Limits, key: TicketKey, front: bool, now: Millis) {
        let order = if front {
            self.next_front -= 1;
            self.next_front
        } else {
            self.next_order += 1;
            self.next_order
        };
        let t = self.tickets.get_mut(&key).expect("enqueue a known ticket");
        t.state = TicketState::Queued;
        t.order = order;
        t.since = now;
        self.leases.remove(&(t.deadline, key));
        t.deadline = now + limits.lease_ttl_ms;
        self.leases.insert((t.deadline, key));
        if let Some(a) = &t.account {
            self.accounts.get_mut(a).expect("interned").queued += 1;
        }
        if t.level > 0 {
            self.aging.insert((now, order), key);
        }
        let (subject, level) = (t.subject.clone(), t.level as usize);
        self.queued += 1;
        self.enter_lane(subject, level, order, key);
        self.changes.push(key);
    }

    /// The lane and level bookkeeping of a ticket joining `subject`'s lane of `level` under
    /// `order` (the host's and account's counts are the caller's).
    fn enter_lane(&mut self, subject: Arc<str>, level: usize, order: i64, key: TicketKey) {
        let lane = &mut self.subjects.get_mut(&subject).expect("interned").lanes[level];
        let depth = lane.queue.len() as u32;
        let old_head = lane.queue.first_key_value().map(|(o, _)| *o);
        lane.queue.insert(order, key);
        let head = old_head.map_or(order, |h| h.min(order));
        let lv = &mut self.levels[level];
        lv.queued += 1;
        if let Some(old_head) = old_head {
            lv.by_depth
                .remove(&(depth, Reverse(old_head), subject.clone()));
        } else {
            // A lane that gains its first waiter joins its level's rotation at the tail.
            lv.rotation_live += 1;
            self.next_generation += 1;
            lane.entry = self.next_generation;
            lane.credit = 0;
            lv.rotation
                .push_back((subject.clone(), self.next_generation));
        }
        lv.by_depth.insert((depth + 1, Reverse(head), subject));
        if lv.depth_counts.len() <= depth as usize {
            lv.depth_counts.push(0);
        }
        lv.depth_counts[depth as usize] += 1;
    }

    /// Take a queued ticket out of its lane (state unchanged).
    fn dequeue(&mut self, key: TicketKey) {
        self.uncount_queued(key);
        self.leave_lane(key);
    }

    /// The lane and level bookkeeping of a queued ticket leaving its lane.
    fn leave_lane(&mut self, key: TicketKey) {
        let t = &self.tickets[&key];
        let (subject, level, order) = (t.subject.clone(), t.level as usize, t.order);
        let lane = &mut self.subjects.get_mut(&subject).expect("interned").lanes[level];
        let depth = lane.queue.len() as u32;
        let old_head = *lane.queue.first_key_value().expect("queued").0;
        lane.queue.remove(&order);
        self.shrink_depth(subject, level, depth, old_head);
        if depth == 1 {
            self.compact_rotation(level);
        }
    }

    /// The host's, the account's and the aging counts, for a ticket leaving the queue.
    fn uncount_queued(&mut self, key: TicketKey) {
        let t = &self.tickets[&key];
        if let Some(a) = &t.account {
            self.accounts.get_mut(a).expect("interned").queued -= 1;
        }
        if t.level > 0 {
            self.aging.remove(&(t.since, t.order));
        }
        self.queued -= 1;
    }

    /// Serve a waiter past `priority_aging` as priority 1: it moves to its subject's lane of
    /// level 1, keeping its order (so among that subject's waiters of level 1 it stands where
    /// its age puts it).
    fn promote(&mut self, key: TicketKey) {
        let t = &self.tickets[&key];
        self.aging.remove(&(t.since, t.order));
        self.leave_lane(key);
        let t = self.tickets.get_mut(&key).expect("known");
        t.level = 0;
        let (subject, order) = (t.subject.clone(), t.order);
        self.enter_lane(subject, 0, order, key);
        self.changes.push(key);
    }

    /// The depth index and the live-rotation count of a lane that shrank from `depth` by one
    /// (its oldest waiter was `old_head`; the queue is already shorter).
    fn shrink_depth(&mut self, subject: Arc<str>, level: usize, depth: u32, old_head: i64) {
        let lv = &mut self.levels[level];
        lv.queued -= 1;
        lv.depth_counts[depth as usize - 1] -= 1;
        while lv.depth_counts.last() == Some(&0) {
            lv.depth_counts.pop();
        }
        lv.by_depth
            .remove(&(depth, Reverse(old_head), subject.clone()));
        let lane = self.subjects.get_mut(&subject).map(|s| &mut s.lanes[level]);
        match lane.as_ref().and_then(|l| l.queue.first_key_value()) {
            Some((head, _)) => {
                lv.by_depth.insert((depth - 1, Reverse(*head), subject));
            }
            None => {
                // Its rotation entry goes stale.
                lv.rotation_live -= 1;
                if let Some(lane) = lane {
                    lane.entry = 0;
                    lane.credit = 0;
                }
            }
        }
    }

    /// Drop a level's stale rotation entries once they outnumber live ones: amortised O(1)
    /// per removal.
    fn compact_rotation(&mut self, level: usize) {
        let lv = &mut self.levels[level];
        if lv.rotation.len() > 2 * lv.rotation_live + 16 {
            let subjects = &self.subjects;
            lv.rotation.retain(|(name, generation)| {
                subjects
                    .get(name)
                    .is_some_and(|s| s.lanes[level].entry == *generation)
            });
        }
    }

    /// A slot held `held` ms was freed: fold the hold into the host's mean.
    fn observe_hold(&mut self, held: u64) {
        self.counters.hold_avg_ms = next_hold_avg(self.counters.hold_avg_ms, held);
    }

    /// End a live ticket in `state` (a terminal state): free what it held, schedule forgetting.
    /// Counters, and the mean hold, are the caller's: returns how long an admitted ticket held
    /// its slot.
    fn end(
        &mut self,
        limits: &Limits,
        key: TicketKey,
        state: TicketState,
        now: Millis,
    ) -> Option<u64> {
        let previous = self.tickets.get(&key).map(|t| t.state)?;
        let mut held = None;
        match previous {
            TicketState::Queued => self.dequeue(key),
            TicketState::Admitted => {
                let t = &self.tickets[&key];
                let since = t.since;
                self.in_flight -= 1;
                self.subjects
                    .get_mut(&t.subject)
                    .expect("interned")
                    .in_flight -= 1;
                if let Some(a) = &t.account {
                    self.accounts.get_mut(a).expect("interned").in_flight -= 1;
                }
                held = Some(now.saturating_sub(since));
            }
            TicketState::Parked => self.parked -= 1,
            _ => return None,
        }
        let t = self.tickets.remove(&key).expect("known");
        self.leases.remove(&(t.deadline, key));
        self.ended.insert(
            key,
            Ended {
                state,
                grant: t.grant,
            },
        );
        self.retained
            .push_back((now + limits.retention_ms, key, t.run_id));
        if self.retained.len() >= limits.max_retained as usize + RETAIN_SLACK {
            for _ in 0..RETAIN_SLACK {
                self.forget_oldest();
            }
        }
        self.forget_idle_names(&t.subject, t.account.as_deref());
        self.changes.push(key);
        held
    }

    /// Forget the ended ticket remembered longest: a Submit of its run_id makes a new ticket.
    fn forget_oldest(&mut self) {
        let Some((_, key, run_id)) = self.retained.pop_front() else {
            return;
        };
        self.ended.remove(&key);
        if self.runs.get(&run_id) == Some(&key) {
            self.runs.remove(&run_id);
        }
    }

    /// Drop per-name state that holds nothing, so a stream of one-off subjects does not grow
    /// the maps. (A stale rotation entry of a forgotten subject is skipped where it is met.)
    fn forget_idle_names(&mut self, subject: &Arc<str>, account: Option<&str>) {
        if let Some(s) = self.subjects.get(subject)
            && s.in_flight == 0
            && s.queued() == 0
        {
            self.subjects.remove(subject);
        }
        if let Some(a) = account
            && self
                .accounts
                .get(a)
                .is_some_and(|a| a.in_flight == 0 && a.queued == 0)
        {
            self.accounts.remove(a);
        }
    }

    /// Make room in the queue for one more ticket of `subject` at level index `level`, per
    /// the overflow policy. `shed_oldest` sheds from the lowest level with waiters, never from
    /// a level above the newcomer's: the oldest waiter of the newcomer's own subject at its
    /// lowest level when that subject's queue is full, otherwise the oldest waiter of the
    /// deepest lane of the lowest level.
    fn make_room(
        &mut self,
        limits: &Limits,
        subject: &str,
        level: u8,
        now: Millis,
    ) -> Result<(), SubmitError> {
        let subject_depth = self.subjects.get(subject).map_or(0, SubjectState::queued);
        let subject_full =
            limits.queue_per_subject > 0 && subject_depth >= limits.queue_per_subject;
        let total_full = self.queued >= limits.queue_total;
        if !subject_full && !total_full {
            return Ok(());
        }
        match limits.overflow {
            OverflowPolicy::Reject => Err(self.refuse(Refusal::QueueFull)),
            OverflowPolicy::Queue => {
                if subject_full || self.queued >= limits.queue_hard_total {
                    Err(self.refuse(Refusal::QueueFull))
                } else {
                    Ok(())
                }
            }
            OverflowPolicy::ShedOldest => {
                let victim = if subject_full {
                    self.subjects.get(subject).and_then(|s| {
                        s.lanes
                            .iter()
                            .enumerate()
                            .rev()
                            .find_map(|(l, lane)| Some((l, *lane.queue.first_key_value()?.1)))
                    })
                } else {
                    self.levels.iter().enumerate().rev().find_map(|(l, lv)| {
                        let (_, _, s) = lv.by_depth.last()?;
                        let lane = &self.subjects.get(s)?.lanes[l];
                        Some((l, *lane.queue.first_key_value()?.1))
                    })
                };
                match victim {
                    Some((l, key)) if l >= level as usize => {
                        self.end(limits, key, TicketState::Shed, now);
                        self.counters.shed += 1;
                        Ok(())
                    }
                    _ => Err(self.refuse(Refusal::QueueFull)),
                }
            }
        }
    }

    /// Admit queued tickets while any fits: the highest level first, and within a level round
    /// robin over subjects: take the subject at the head of the level's rotation, admit its
    /// oldest ticket of that level that fits (skipping tickets whose account is full or whose
    /// replica is over the soft memory mark); a subject of weight w keeps the head until it
    /// was served w times in a row (or has nothing that fits), then moves to the tail.
    /// A level is done at the total cap or after a full pass that admitted nothing; admitting
    /// at a lower level never makes a higher level's waiter fit, so one pass over the levels
    /// suffices. In shadow mode every waiter is admitted, caps or not.
    fn dispatch(&mut self, limits: &Limits, now: Millis) {
        let shadow = limits.shadow();
        for level in 0..LEVELS {
            let mut idle_visits = 0usize;
            while (shadow || self.in_flight < limits.total)
                && idle_visits < self.levels[level].rotation_live
            {
                let Some((subject, generation)) = self.levels[level].rotation.pop_front() else {
                    break;
                };
                // One lookup of the subject serves the whole visit: this loop runs in every
                // release on a crowded host, where the subject map is large and lookups miss
                // the cache.
                let Some(s) = self
                    .subjects
                    .get_mut(&subject)
                    .filter(|s| s.lanes[level].entry == generation)
                else {
                    // Stale entry: the lane's waiters left by other ways than dispatch.
                    continue;
                };
                let (tickets, accounts, instances, adaptive) = (
                    &self.tickets,
                    &self.accounts,
                    &self.instances,
                    &self.adaptive,
                );
                let lane = &mut s.lanes[level];
                let pick = if shadow {
                    lane.queue.first_key_value().map(|(o, k)| (*o, *k))
                } else if s.in_flight < limits.subject_cap(&subject) {
                    lane.queue
                        .iter()
                        .find(|(_, key)| {
                            let t = &tickets[*key];
                            account_has_room(limits, accounts, adaptive, t.account.as_deref())
                                && !instance_is_soft(limits, instances, &t.instance, now)
                        })
                        .map(|(order, key)| (*order, *key))
                } else {
                    None
                };
                let Some((order, key)) = pick else {
                    idle_visits += 1;
                    lane.credit = 0;
                    self.levels[level].rotation.push_back((subject, generation));
                    continue;
                };
                let depth = lane.queue.len() as u32;
                let old_head = *lane.queue.first_key_value().expect("picked from it").0;
                lane.queue.remove(&order);
                lane.credit += 1;
                let stay = lane.credit < limits.weight(&subject);
                if !stay {
                    lane.credit = 0;
                }
                s.in_flight += 1;
                let emptied = lane.queue.is_empty();
                self.uncount_queued(key);
                self.shrink_depth(subject.clone(), level, depth, old_head);
                let waited = now.saturating_sub(self.tickets[&key].since);
                self.counters.queue_wait.observe(waited);
                self.admit_except_subject(limits, key, now);
                idle_visits = 0;
                if !emptied {
                    let rotation = &mut self.levels[level].rotation;
                    if stay {
                        rotation.push_front((subject, generation));
                    } else {
                        rotation.push_back((subject, generation));
                    }
                }
            }
        }
    }

    /// The oldest queued ticket of `subject` that fits now, if any.
    fn first_fitting(&self, limits: &Limits, subject: &str, now: Millis) -> Option<TicketKey> {
        let s = self.subjects.get(subject)?;
        if !limits.shadow()
            && (self.in_flight >= limits.total || s.in_flight >= limits.subject_cap(subject))
        {
            return None;
        }
        s.lanes
            .iter()
            .flat_map(|l| l.queue.values())
            .copied()
            .find(|key| {
                let t = &self.tickets[key];
                limits.shadow()
                    || (account_has_room(
                        limits,
                        &self.accounts,
                        &self.adaptive,
                        t.account.as_deref(),
                    ) && !instance_is_soft(limits, &self.instances, &t.instance, now))
            })
    }

    /// 0-based place of a queued ticket in the dispatch order, and its depth in its lane,
    /// counting as if every waiter were eligible and every weight 1: every waiter of a higher
    /// level goes first; within its level, in round r each lane with more than r waiters
    /// dispatches its r-th, in rotation order. A ticket at depth k of its lane comes after
    /// every waiter of rounds 0..k (the prefix sum of `depth_counts`, O(k)) and after the
    /// lanes ahead of its own in the rotation that have more than k waiters. Counting those
    /// visits the rotation up to the ticket's subject, so it is done only while at most
    /// [`EXACT_POSITION_SUBJECTS`] lanes of its level are queued; beyond that the position is
    /// the lower bound from the earlier rounds, and no operation grows with the number of
    /// queued subjects.
    fn position(&self, t: &Ticket) -> (u32, u32) {
        self.position_within(t, usize::MAX).unwrap_or((0, 0))
    }

    /// [`Self::position`] for a ticket fewer than `max_depth` deep in its lane; `None` for a
    /// deeper one (found in O(`max_depth`)).
    fn position_within(&self, t: &Ticket, max_depth: usize) -> Option<(u32, u32)> {
        let Some(own) = self.subjects.get(&t.subject) else {
            return Some((0, 0));
        };
        let level = t.level as usize;
        let depth = own.lanes[level]
            .queue
            .range(..t.order)
            .take(max_depth)
            .count();
        if depth >= max_depth {
            return None;
        }
        let lv = &self.levels[level];
        let mut before: u64 = self.levels[..level]
            .iter()
            .map(|l| u64::from(l.queued))
            .sum();
        before += lv
            .depth_counts
            .iter()
            .take(depth)
            .map(|&c| u64::from(c))
            .sum::<u64>();
        if lv.rotation_live <= EXACT_POSITION_SUBJECTS {
            for (name, generation) in &lv.rotation {
                let Some(s) = self
                    .subjects
                    .get(name)
                    .filter(|s| s.lanes[level].entry == *generation)
                else {
                    continue; // stale
                };
                if **name == *t.subject {
                    break;
                }
                if s.lanes[level].queue.len() > depth {
                    before += 1;
                }
            }
        }
        Some((
            u32::try_from(before).unwrap_or(u32::MAX),
            u32::try_from(depth).unwrap_or(u32::MAX),
        ))
    }
}

/// Ended tickets are forgotten early this many at a time, once `max_retained` + this many are
/// remembered: a store that keeps them apart from the live ones (Redis) trims them in batches.
pub const RETAIN_SLACK: usize = 32;

/// Up to this many subjects with waiters, `position` is exact; beyond, a lower bound.
pub const EXACT_POSITION_SUBJECTS: usize = 1024;

/// What enforce would have done with a Submit that does not fit, given how far the subject
/// and the host are over their caps (the waiters enforce would have): queued, or refused
/// when a queue bound would be reached (`shed_oldest` would queue it and shed another).
pub fn shadow_queue_decision(
    limits: &Limits,
    subject_over: u32,
    total_over: u32,
) -> ShadowDecision {
    let subject_full = limits.queue_per_subject > 0 && subject_over >= limits.queue_per_subject;
    let total_full = total_over >= limits.queue_total;
    let full = match limits.overflow {
        OverflowPolicy::Reject => subject_full || total_full,
        OverflowPolicy::Queue => subject_full || total_over >= limits.queue_hard_total,
        OverflowPolicy::ShedOldest => false,
    };
    if full {
        ShadowDecision::Refused(Refusal::QueueFull)
    } else {
        ShadowDecision::Queued
    }
}

/// The level index (0 = priority 1) of a priority 1..=5; anything else is the default's.
pub fn level_of(priority: u8) -> u8 {
    if (1..=LEVELS as u8).contains(&priority) {
        priority - 1
    } else {
        DEFAULT_PRIORITY - 1
    }
}

/// The host's mean hold after a slot held `held_ms` was freed, given the mean before (0 =
/// none yet): a moving average of weight 1/16, in whole ms (the Redis store computes the same).
pub fn next_hold_avg(avg: u64, held_ms: u64) -> u64 {
    if avg == 0 {
        held_ms.max(1)
    } else {
        ((15 * avg + held_ms) / 16).max(1)
    }
}

/// The expected wait of a waiter at `position` of the host's dispatch order and `depth` of
/// its subject's lane: slots free one every `hold_avg / cap` on average, half an interval
/// from now for the first, so the (p+1)-th free slot comes after (p + ½) intervals; the
/// host's total and the subject's own cap each bound that pace, the slower estimate wins.
/// 0 = unknown (no hold measured yet).
pub fn eta_ms(hold_avg_ms: u64, position: u32, total: u32, depth: u32, subject_cap: u32) -> u64 {
    if hold_avg_ms == 0 {
        return 0;
    }
    let pace =
        |p: u32, cap: u32| (2 * u64::from(p) + 1) * hold_avg_ms / (2 * u64::from(cap.max(1)));
    pace(position, total).max(pace(depth, subject_cap)).max(1)
}

/// Whether an account (if bound) has room for one more admitted ticket.
fn account_has_room(
    limits: &Limits,
    accounts: &HashMap<Arc<str>, AccountState>,
    adaptive: &HashMap<Arc<str>, AdaptiveState>,
    account: Option<&str>,
) -> bool {
    let Some(a) = account else { return true };
    let in_flight = || accounts.get(a).map_or(0, |s| s.in_flight);
    match limits.adaptive_of(a) {
        // Below `min` there is room whatever the cap learned (one lookup fewer).
        Some(ad) => {
            let n = in_flight();
            n < ad.min || n < adaptive.get(a).map_or(ad.max, |s| s.cap(ad))
        }
        None => limits.account_cap(a).is_none_or(|cap| in_flight() < cap),
    }
}

/// The cap of `account` in force: the adaptive cap when its limits make it adaptive (its
/// learned value, or `max` when none is remembered), else the fixed one.
fn account_cap(
    limits: &Limits,
    adaptive: &HashMap<Arc<str>, AdaptiveState>,
    account: &str,
) -> Option<u32> {
    match limits.adaptive_of(account) {
        Some(a) => Some(adaptive.get(account).map_or(a.max, |s| s.cap(a))),
        None => limits.account_cap(account),
    }
}

/// Whether a replica's fresh rss report is at or over the soft mark.
fn instance_is_soft(
    limits: &Limits,
    instances: &HashMap<Arc<str>, RssReport>,
    instance: &str,
    now: Millis,
) -> bool {
    instances.get(instance).is_some_and(|r| {
        now.saturating_sub(r.at) < limits.lease_ttl_ms && limits.memory.is_soft(r.rss_mb)
    })
}

/// The map's own key for `name`, inserting a default entry if there is none, so every ticket of
/// a name shares one allocation (and pointer equality identifies the name).
fn intern<V: Default>(map: &mut HashMap<Arc<str>, V>, name: &str) -> Arc<str> {
    if let Some((k, _)) = map.get_key_value(name) {
        return k.clone();
    }
    let k: Arc<str> = Arc::from(name);
    map.insert(k.clone(), V::default());
    k
}
