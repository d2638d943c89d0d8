//! The operator's listing of a host's live tickets (ListTickets, the console's host view):
//! [`TicketInfo`] and [`HostState::list`]. Reads the ticket table and the queue; changes nothing.

use super::{Blocker, HostState, Limits, Millis, TicketKey, TicketState, eta_ms};

/// A waiter's place and estimate are listed while it is fewer than this many deep in its
/// subject's line at its priority, so that a listing of 10,000 waiters stays linear: the
/// operator sees the place of everyone near the front of every line.
pub const LISTED_PLACE_DEPTH: usize = 20;

/// A live ticket as the operator listing sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketInfo {
    pub key: TicketKey,
    pub state: TicketState,
    pub subject: String,
    pub account_id: Option<String>,
    pub run_id: String,
    pub instance_id: String,
    pub grant: u64,
    pub lease_remaining_ms: u64,
    /// 1..=5; a waiter served as 1 after `priority_aging` shows 1.
    pub priority: u8,
    /// While queued, what holds it.
    pub blocked_by: Option<Blocker>,
    /// How long it has been in its state: held (admitted), waited (queued) or parked.
    pub in_state_ms: u64,
    /// While queued and near the front of its line ([`LISTED_PLACE_DEPTH`]): its 1-based place
    /// in the dispatch order (a Submit's `position` + 1); 0 otherwise.
    pub place: u32,
    /// With `place`, the expected wait as a Submit answers it; 0 otherwise or unknown.
    pub eta_ms: u64,
}

impl HostState {
    /// Live tickets, at most `limit`: admitted and parked ones by grant, then queued ones in
    /// queue order. The bool is true when truncated.
    pub fn list(&self, limits: &Limits, limit: usize, now: Millis) -> (Vec<TicketInfo>, bool) {
        let head = self.head_waiter();
        let mut live: Vec<_> = self.tickets.iter().collect();
        live.sort_by_key(|(_, t)| (t.state == TicketState::Queued, t.grant, t.order));
        let truncated = live.len() > limit;
        let out = live
            .into_iter()
            .take(limit)
            .map(|(k, t)| {
                let queued = t.state == TicketState::Queued;
                let (place, eta) = queued
                    .then(|| self.position_within(t, LISTED_PLACE_DEPTH))
                    .flatten()
                    .map_or((0, 0), |(position, depth)| {
                        let eta = eta_ms(
                            self.counters.hold_avg_ms,
                            position,
                            limits.total,
                            depth,
                            limits.subject_cap(&t.subject),
                        );
                        (position.saturating_add(1), eta)
                    });
                TicketInfo {
                    key: *k,
                    state: t.state,
                    subject: t.subject.to_string(),
                    account_id: t.account.as_deref().map(str::to_string),
                    run_id: t.run_id.to_string(),
                    instance_id: t.instance.to_string(),
                    grant: t.grant,
                    lease_remaining_ms: t.deadline.saturating_sub(now),
                    priority: t.level + 1,
                    blocked_by: queued.then(|| self.blocker(limits, *k, t, head, now)),
                    in_state_ms: now.saturating_sub(t.since),
                    place,
                    eta_ms: eta,
                }
            })
            .collect();
        (out, truncated)
    }
}
