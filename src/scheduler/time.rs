//! Time passing on a host: leases that run out, ended tickets forgotten past their retention,
//! debounces that run out, waiters aged into a higher priority, memory reports gone stale, and
//! a host restored after its process stopped. Touches the lease, retention, aging, debounce
//! and memory-report indexes, and ends tickets through `retention`.

use super::*;

impl HostState {
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
        freed |= self.debounce_due(now);
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
            || self.debouncing.first().is_some_and(|(d, _)| *d <= now)
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
}
