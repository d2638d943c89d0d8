//! Dispatch and fitting: whether a ticket fits the caps (total, subject, account, memory),
//! admitting it, shedding to make room, and serving waiters round robin when slots free up.
//! The only room that admits tickets.

use super::*;

impl HostState {
    pub(super) fn report_rss(
        &mut self,
        limits: &Limits,
        instance: &Arc<str>,
        rss_mb: u32,
        now: Millis,
    ) {
        if limits.memory.max_rss_mb > 0 {
            self.instances
                .insert(instance.clone(), RssReport { rss_mb, at: now });
        }
    }

    pub(super) fn is_soft(&self, limits: &Limits, instance: &str, now: Millis) -> bool {
        instance_is_soft(limits, &self.instances, instance, now)
    }

    /// Whether one more ticket of `subject`/`account` fits under every cap.
    pub(super) fn fits(&self, limits: &Limits, subject: &str, account: Option<&str>) -> bool {
        if self.in_flight >= limits.total {
            return false;
        }
        let s = self.subjects.get(subject).map_or(0, |s| s.in_flight);
        s < limits.subject_cap(subject)
            && account_has_room(limits, &self.accounts, &self.adaptive, account)
    }

    /// Move a new ticket, or one already taken out of its queue, to ADMITTED. The caller has
    /// checked that it fits.
    pub(super) fn admit(&mut self, limits: &Limits, key: TicketKey, now: Millis) {
        let subject = self.admit_except_subject(limits, key, now);
        self.subjects.get_mut(&subject).expect("interned").in_flight += 1;
    }

    /// Everything of an admission but the subject's count, which the caller keeps (dispatch
    /// holds the subject already). Returns the subject.
    pub(super) fn admit_except_subject(
        &mut self,
        limits: &Limits,
        key: TicketKey,
        now: Millis,
    ) -> Arc<str> {
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
        let subject = t.subject.clone();
        self.key_hold(key, true);
        subject
    }

    /// Make room in the queue for one more ticket of `subject` at level index `level`, per
    /// the overflow policy. `shed_oldest` sheds from the lowest level with waiters, never from
    /// a level above the newcomer's: the oldest waiter of the newcomer's own subject at its
    /// lowest level when that subject's queue is full, otherwise the oldest waiter of the
    /// deepest lane of the lowest level.
    pub(super) fn make_room(
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
    pub(super) fn dispatch(&mut self, limits: &Limits, now: Millis) {
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
                let (tickets, accounts, instances, adaptive, keys) = (
                    &self.tickets,
                    &self.accounts,
                    &self.instances,
                    &self.adaptive,
                    &self.keys,
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
                                && keys::key_ready(keys, t, now)
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
    pub(super) fn first_fitting(
        &self,
        limits: &Limits,
        subject: &str,
        now: Millis,
    ) -> Option<TicketKey> {
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
                    || (self.key_ready(t, now)
                        && account_has_room(
                            limits,
                            &self.accounts,
                            &self.adaptive,
                            t.account.as_deref(),
                        )
                        && !instance_is_soft(limits, &self.instances, &t.instance, now))
            })
    }
}

/// Whether an account (if bound) has room for one more admitted ticket.
pub(super) fn account_has_room(
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
pub(super) fn account_cap(
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
pub(super) fn instance_is_soft(
    limits: &Limits,
    instances: &HashMap<Arc<str>, RssReport>,
    instance: &str,
    now: Millis,
) -> bool {
    instances.get(instance).is_some_and(|r| {
        now.saturating_sub(r.at) < limits.lease_ttl_ms && limits.memory.is_soft(r.rss_mb)
    })
}
