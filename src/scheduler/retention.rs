//! Ending tickets and forgetting them: the final state, the ended tickets kept for idempotent
//! retries (bounded by count and age), and names no live ticket uses any more.

use super::*;

impl HostState {
    /// End a live ticket in `state` (a terminal state): free what it held, schedule forgetting.
    /// Counters, and the mean hold, are the caller's: returns how long an admitted ticket held
    /// its slot.
    pub(super) fn end(
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
        if let Some(name) = &t.keyed {
            self.debouncing.remove(&(t.ready_at, key));
            let held = matches!(previous, TicketState::Admitted | TicketState::Parked);
            self.key_leave(name, t.key_seq, held);
        }
        let superseded_by = t.superseded_by.filter(|_| state == TicketState::Superseded);
        let ended = Ended {
            state,
            grant: t.grant,
            superseded_by,
            key_seq: t.key_seq,
        };
        self.note_ending(recent::Ending {
            key: Some(key),
            ended_as: recent::EndedAs::Ticket(state),
            run_id: t.run_id.clone(),
            subject: t.subject.clone(),
            account: t.account.clone(),
            instance: t.instance.clone(),
            keyed: t.keyed.clone(),
            superseded_by,
            at: now,
        });
        self.remember(limits, key, ended, t.run_id, now);
        self.forget_idle_names(&t.subject, t.account.as_deref());
        held
    }

    /// Remember ended ticket `key` of `run_id` (retained for idempotent retries).
    pub(super) fn remember(
        &mut self,
        limits: &Limits,
        key: TicketKey,
        ended: Ended,
        run_id: Arc<str>,
        now: Millis,
    ) {
        self.ended.insert(key, ended);
        self.retained
            .push_back((now + limits.retention_ms, key, run_id));
        if self.retained.len() >= limits.max_retained as usize + RETAIN_SLACK {
            for _ in 0..RETAIN_SLACK {
                self.forget_oldest();
            }
        }
        self.changes.push(key);
    }

    /// Forget the ended ticket remembered longest: a Submit of its run_id makes a new ticket.
    pub(super) fn forget_oldest(&mut self) {
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
    pub(super) fn forget_idle_names(&mut self, subject: &Arc<str>, account: Option<&str>) {
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
}

/// Ended tickets are forgotten early this many at a time, once `max_retained` + this many are
/// remembered: a store that keeps them apart from the live ones (Redis) trims them in batches.
pub const RETAIN_SLACK: usize = 32;
