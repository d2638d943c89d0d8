//! What callers and operators see of a host: one ticket ([`HostState::view`], Submit's and
//! Wait's answers), the listing of its live tickets ([`TicketInfo`], ListTickets and the
//! console), and its counters and usage rows ([`HostState::stats`]). Reads; changes nothing.

use super::*;

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
    /// Its key and the key's policy, if its Submit named one.
    pub keyed: Option<(String, KeyPolicy)>,
    /// A newer ticket of its key told to supersede it (`supersede_running`).
    pub superseded_by: Option<TicketKey>,
    /// While debounced, the ms until it may be dispatched; 0 otherwise.
    pub debounce_left_ms: u64,
}

impl HostState {
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
                superseded_by: e.superseded_by,
                debounce_left_ms: 0,
            });
        };
        let blocked_by = (t.state == TicketState::Queued).then(|| self.blocker(limits, t, now));
        let (position, eta) = if t.state == TicketState::Queued {
            let (position, depth) = self.position(t);
            (position, self.wait_estimate(limits, t, position, depth))
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
            superseded_by: t.superseded_by,
            debounce_left_ms: if t.state == TicketState::Queued {
                t.ready_at.saturating_sub(now)
            } else {
                0
            },
        })
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

    /// Live tickets, at most `limit`: admitted and parked ones by grant, then queued ones in
    /// queue order. The bool is true when truncated.
    pub fn list(&self, limits: &Limits, limit: usize, now: Millis) -> (Vec<TicketInfo>, bool) {
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
                        let eta = self.wait_estimate(limits, t, position, depth);
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
                    blocked_by: queued.then(|| self.blocker(limits, t, now)),
                    in_state_ms: now.saturating_sub(t.since),
                    place,
                    eta_ms: eta,
                    keyed: t
                        .keyed
                        .as_ref()
                        .map(|k| (k.to_string(), self.keys[k].policy)),
                    superseded_by: t.superseded_by,
                    debounce_left_ms: if queued {
                        t.ready_at.saturating_sub(now)
                    } else {
                        0
                    },
                }
            })
            .collect();
        (out, truncated)
    }
}
