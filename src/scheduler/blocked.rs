//! Why a queued ticket waits (`blocked_by`): [`Blocker`] and the rule that picks it. Reads the
//! host's counts and queue; changes nothing.

use super::{HostState, Limits, Millis, Ticket, TicketKey, account_has_room};

/// What holds a queued ticket: the first that applies of `StateLoss`, `Memory`, `Subject`,
/// `Account`, then `Total` for the waiter next in line ([`HostState::head_waiter`]) or `Turn`
/// for the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Blocker {
    /// The host is at its total and this is the next waiter to be served.
    Total,
    /// Its subject is at its cap.
    Subject,
    /// Its account is at its cap (fixed or adaptive).
    Account,
    /// The replica that submitted it reported memory at the soft limit.
    Memory,
    /// A slot could take it, but the host is at its total and others go first.
    Turn,
    /// A learning window after the shared store lost its state (only Redis opens one).
    StateLoss,
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
        ]
        .into_iter()
        .find(|b| b.code() == code)
    }
}

impl HostState {
    /// The next waiter to be served: the first of the highest priority's round-robin turn.
    pub fn head_waiter(&self) -> Option<TicketKey> {
        for (l, level) in self.levels.iter().enumerate() {
            if level.queued == 0 {
                continue;
            }
            for (name, generation) in &level.rotation {
                let Some(s) = self
                    .subjects
                    .get(name)
                    .filter(|s| s.lanes[l].entry == *generation)
                else {
                    continue; // stale
                };
                if let Some((_, k)) = s.lanes[l].queue.first_key_value() {
                    return Some(*k);
                }
            }
        }
        None
    }

    /// What holds queued ticket `t` (see [`Blocker`]), given the next in line.
    pub(super) fn blocker(
        &self,
        limits: &Limits,
        key: TicketKey,
        t: &Ticket,
        head: Option<TicketKey>,
        now: Millis,
    ) -> Blocker {
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
        if self.in_flight >= limits.total && head == Some(key) {
            Blocker::Total
        } else {
            Blocker::Turn
        }
    }
}
