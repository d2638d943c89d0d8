//! Why a queued ticket waits (`blocked_by`): [`Blocker`] and the rule that picks it. Reads the
//! host's counts and queue; changes nothing.

use super::{HostState, Limits, Millis, Ticket, account_has_room};

/// What holds a queued ticket: the first that applies of `StateLoss`, `Key`, `Memory`, `Subject`,
/// `Account`, then `Total` while the host is at its total, else `Turn`. Whether a waiter is
/// next in line does not matter: while the host is full, the full host is what every waiter
/// not held by its own caps waits for, and `Turn` says that a slot is free but others go first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Blocker {
    /// The host is at its total (and its own caps have room).
    Total,
    /// Its subject is at its cap.
    Subject,
    /// Its account is at its cap (fixed or adaptive).
    Account,
    /// The replica that submitted it reported memory at the soft limit.
    Memory,
    /// A slot is free and its own caps have room, but others go first.
    Turn,
    /// A learning window after the shared store lost its state (only Redis opens one).
    StateLoss,
    /// Its key: an earlier ticket of a serial key holds it or waits ahead of it, or its
    /// debounce has not run out.
    Key,
}

impl Blocker {
    /// The code the Redis scripts answer.
    pub fn code(self) -> &'static str {
        match self {
            Blocker::Total => "total",
            Blocker::Subject => "subject",
            Blocker::Account => "account",
            Blocker::Memory => "memory",
            Blocker::Turn => "turn",
            Blocker::StateLoss => "state_loss",
            Blocker::Key => "key",
        }
    }

    pub fn from_code(code: &str) -> Option<Blocker> {
        [
            Blocker::Total,
            Blocker::Subject,
            Blocker::Account,
            Blocker::Memory,
            Blocker::Turn,
            Blocker::StateLoss,
            Blocker::Key,
        ]
        .into_iter()
        .find(|b| b.code() == code)
    }
}

impl HostState {
    /// What holds queued ticket `t` (see [`Blocker`]).
    pub(super) fn blocker(&self, limits: &Limits, t: &Ticket, now: Millis) -> Blocker {
        if !self.key_ready(t, now) {
            return Blocker::Key;
        }
        if self.is_soft(limits, &t.instance, now) {
            return Blocker::Memory;
        }
        let s = self.subjects.get(&t.subject).map_or(0, |s| s.in_flight);
        if s >= limits.subject_cap(&t.subject) {
            return Blocker::Subject;
        }
        if !account_has_room(limits, &self.accounts, &self.adaptive, t.account.as_deref()) {
            return Blocker::Account;
        }
        if self.in_flight >= limits.total {
            Blocker::Total
        } else {
            Blocker::Turn
        }
    }
}
