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
//!
//! Rooms: this file holds the host's state and its public operations (submit, renew, park,
//! release, housekeeping, limits changes); `types` the public data; `queue` the lanes and
//! rotation; `dispatch` fitting, admitting and shedding; `retention` ending and forgetting;
//! `estimates` the hold average, places and waits; `image` the host as plain data (what a
//! store writes down to bring it back); `shadow` shadow mode; `views` what callers
//! see (view, list, stats); `blocked` why a waiter waits; `keys` a Submit's key and its policy
//! (supersede, serial, debounce); `time` leases running out and everything else time does;
//! `reclaim` re-registration; `adaptive`
//! the adaptive account cap; `limits` a host's limits; `audit` the invariant audit. Each room
//! adds methods to [`HostState`] and touches only what its opening comment says.

mod adaptive;
mod audit;
mod blocked;
mod dispatch;
mod estimates;
mod image;
mod keys;
mod limits;
mod queue;
mod recent;
mod reclaim;
mod retention;
mod shadow;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_keys;
mod time;
mod types;
mod views;

pub use adaptive::{Adaptive, AdaptiveState, Outcome, PROBE_SLOWDOWN, after_outcome};
pub use blocked::Blocker;
pub use estimates::{EXACT_POSITION_SUBJECTS, eta_ms, next_hold_avg};
pub use image::{EndedImage, HostImage, TicketImage};
pub use limits::{
    DEFAULT_PRIORITY, LEVELS, Limits, LimitsRecord, LimitsSource, LimitsTable, MAX_WEIGHT,
    MemoryLimits, Mode, OverflowPolicy,
};
pub use recent::{EndedAs, Ending, RECENT_ENDINGS};
pub use reclaim::{HeldArgs, ReclaimRefusal, Reclaimed};
pub use retention::RETAIN_SLACK;
pub use shadow::shadow_queue_decision;
pub use types::*;
pub use views::{LISTED_PLACE_DEPTH, TicketInfo};

use dispatch::{account_cap, account_has_room};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// A live ticket (queued, admitted or parked).
#[derive(Debug)]
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
    reclaimed: bool,
    /// Its key (an entry of `HostState::keys`), if its Submit named one.
    keyed: Option<Arc<str>>,
    /// Its place among its key's tickets (the order of their Submits).
    key_seq: u64,
    /// Debounced: not dispatched before this (0 otherwise).
    ready_at: Millis,
    /// Debounced: when the first ticket of its burst came (for `debounce_max`).
    burst_since: Option<Millis>,
    /// A newer ticket of its key that supersedes it (see [`TicketView::superseded_by`]).
    superseded_by: Option<TicketKey>,
}

/// An ended ticket: only what an idempotent retry needs (its run_id lives in `runs` and
/// `retained`). About 150 bytes of the host's memory with its entries there.
#[derive(Debug, Clone, Copy)]
struct Ended {
    state: TicketState,
    grant: u64,
    /// SUPERSEDED: the ticket that ended it.
    superseded_by: Option<TicketKey>,
    /// A keyed ticket's place among its key's (0 without a key): a Submit of its run again
    /// (`resubmit_expired`) takes this place, when its run first came.
    key_seq: u64,
}

#[derive(Debug, Default)]
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
#[derive(Debug, Default)]
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
#[derive(Debug, Default)]
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

#[derive(Debug, Default)]
struct AccountState {
    in_flight: u32,
    queued: u32,
}

#[derive(Debug, Clone, Copy)]
struct RssReport {
    rss_mb: u32,
    at: Millis,
}

/// One host's scheduling state. Operations keep every derived count in step; [`HostState::audit`]
/// recomputes them all from the tickets for tests.
#[derive(Debug, Default)]
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
    changes: Vec<TicketKey>,
    /// Keys with live tickets (see `keys`).
    keys: HashMap<Arc<str>, keys::KeyState>,
    /// The last `key_seq` handed out.
    next_key_seq: u64,
    /// Debounced waiters by the time they become ready, until then.
    debouncing: BTreeSet<(Millis, TicketKey)>,
    /// The newest endings, for operators (see [`recent`]; not kept on disk).
    recent: VecDeque<recent::Ending>,
}

impl HostState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Submit a new ticket under `key` (unused unless the run_id is new), or answer a repeat of
    /// the run_id with the existing ticket. With `resubmit_expired`, a run whose ticket ended
    /// EXPIRED gets a new ticket under the same run_id instead (its run never started on the
    /// lapsed one); if that Submit is refused, the run still names the expired ticket.
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
        // A run whose ticket lapsed before the run started asks again under its run_id: its
        // expired ticket does not answer for it (a live one, or one ended otherwise, does).
        let lapsed = |h: &Self, key: TicketKey| {
            args.resubmit_expired
                && !h.tickets.contains_key(&key)
                && h.ended
                    .get(&key)
                    .is_some_and(|e| e.state == TicketState::Expired)
        };
        // A resubmission takes the place among its key's tickets its run first had.
        let first_place = self
            .runs
            .get(args.run_id.as_str())
            .filter(|k| lapsed(self, **k))
            .map_or(0, |k| self.ended[k].key_seq);
        if let Some(&existing) = self
            .runs
            .get(args.run_id.as_str())
            .filter(|k| !lapsed(self, **k))
        {
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

        // A key that refuses the Submit refuses it before anything else changes. Shadow mode
        // admits every Submit: a key only labels its ticket there.
        let keyed = args.keyed.clone();
        if let Some(k) = keyed.as_ref().filter(|_| !limits.shadow()) {
            self.key_gate(k)
                .map_err(|e| self.note_refusal(&args, e, now))?;
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
            let e = self.refuse(Refusal::MemoryPressure);
            return Err(self.note_refusal(&args, e, now));
        }
        // Queued work goes first.
        self.dispatch(limits, now);

        // A keep-newest ticket ends its key's waiters once it is accepted; a debounced one
        // waits until its burst is quiet.
        let ended_before = self.counters.shed + self.counters.superseded;
        let plan = keyed
            .as_ref()
            .map(|k| self.key_plan(k, first_place, now))
            .unwrap_or_default();
        if let Some(newer) = plan.superseded_by {
            // Sent before a live ticket of its key: that newer one wins, at once.
            return Ok(self.superseded_at_submit(limits, args, key, newer, first_place, now));
        }
        let soft = self.is_soft(limits, &instance, now);
        let eligible =
            !soft && !plan.waits && self.fits(limits, &args.subject, args.account_id.as_deref());
        if !eligible {
            // Make room before interning the newcomer's names: shedding may drop idle names.
            if args.mode == SubmitMode::Try || limits.queue_total == 0 {
                let e = self.refuse(Refusal::Busy);
                return Err(self.note_refusal(&args, e, now));
            }
            if plan.waiters.is_empty() || !self.room_after(limits, &args.subject, &plan.waiters) {
                self.make_room(limits, &args.subject, level, now)
                    .map_err(|e| self.note_refusal(&args, e, now))?;
            }
        }
        // The key's waiters leave before the newcomer's names are interned (ending them may
        // drop idle names, as shedding does).
        self.supersede(limits, &plan.waiters, key, now);
        self.insert_ticket(args, instance, key, plan.place);
        if let Some(k) = &keyed {
            self.key_placed(k, &plan, key, now);
        }
        if eligible {
            self.admit(limits, key, now);
        } else {
            self.enqueue(limits, key, false, now);
        }
        if self.counters.shed + self.counters.superseded != ended_before {
            // A waiter that left may have been what a serial key's next waiter (this one
            // among them) waited for.
            self.dispatch(limits, now);
        }
        Ok(self.view(limits, key, now).expect("just inserted"))
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
                // It holds its key again once admitted (or waits first in its key's line).
                self.key_hold(key, false);
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
            | TicketState::Expired
            | TicketState::Superseded => {}
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

    /// Ended tickets remembered for idempotent retries.
    pub fn retained(&self) -> usize {
        self.retained.len()
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
        self.counters.refusals[Refusal::MemoryPressure.index()] += 1;
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

    // ----- internals -------------------------------------------------------------------------

    fn refuse(&mut self, refusal: Refusal) -> SubmitError {
        self.counters.rejected += 1;
        self.counters.refusals[refusal.index()] += 1;
        SubmitError::Refused(refusal)
    }

    /// A new ticket for a Submit under `key` (state still to set: the caller admits or
    /// queues it), its names interned, its run_id and its key indexed.
    fn insert_ticket(
        &mut self,
        args: SubmitArgs,
        instance: Arc<str>,
        key: TicketKey,
        key_place: u64,
    ) {
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
            keyed: None,
            key_seq: 0,
            ready_at: 0,
            burst_since: None,
            superseded_by: None,
        };
        self.tickets.insert(key, t);
        if let Some(k) = &args.keyed {
            self.key_join(k, key, key_place);
        }
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
