//! The queue's lanes, levels and rotation: putting a waiter into its subject's lane of its
//! priority level, taking it out, aging it to priority 1, and keeping each level's round-robin
//! rotation and depth counts in step. Touches only the queue's structures and queued counts.

use super::*;

impl HostState {
    /// Put a ticket (state QUEUED) into its subject's lane of its level: at the back, or
    /// ahead of every waiter of that lane when `front` (a parked ticket asking again).
    pub(super) fn enqueue(&mut self, limits: &Limits, key: TicketKey, front: bool, now: Millis) {
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
    pub(super) fn enter_lane(
        &mut self,
        subject: Arc<str>,
        level: usize,
        order: i64,
        key: TicketKey,
    ) {
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
    pub(super) fn dequeue(&mut self, key: TicketKey) {
        self.uncount_queued(key);
        self.leave_lane(key);
    }

    /// The lane and level bookkeeping of a queued ticket leaving its lane.
    pub(super) fn leave_lane(&mut self, key: TicketKey) {
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
    pub(super) fn uncount_queued(&mut self, key: TicketKey) {
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
    pub(super) fn promote(&mut self, key: TicketKey) {
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
    pub(super) fn shrink_depth(
        &mut self,
        subject: Arc<str>,
        level: usize,
        depth: u32,
        old_head: i64,
    ) {
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
    pub(super) fn compact_rotation(&mut self, level: usize) {
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
}
