//! Estimates: the hold average, a waiter's place in the dispatch order, and its expected wait.
//! Reads the queue; changes only the hold average.

use super::*;

impl HostState {
    /// [`eta_ms`] of a queued ticket at `position` and `depth`, by this host's hold average
    /// and caps.
    pub(super) fn wait_estimate(
        &self,
        limits: &Limits,
        t: &Ticket,
        position: u32,
        depth: u32,
    ) -> u64 {
        eta_ms(
            self.counters.hold_avg_ms,
            position,
            limits.total,
            depth,
            limits.subject_cap(&t.subject),
        )
    }

    /// A slot held `held` ms was freed: fold the hold into the host's mean.
    pub(super) fn observe_hold(&mut self, held: u64) {
        self.counters.hold_avg_ms = next_hold_avg(self.counters.hold_avg_ms, held);
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
    pub(super) fn position(&self, t: &Ticket) -> (u32, u32) {
        self.position_within(t, usize::MAX).unwrap_or((0, 0))
    }

    /// [`Self::position`] for a ticket fewer than `max_depth` deep in its lane; `None` for a
    /// deeper one (found in O(`max_depth`)).
    pub(super) fn position_within(&self, t: &Ticket, max_depth: usize) -> Option<(u32, u32)> {
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

/// Up to this many subjects with waiters, `position` is exact; beyond, a lower bound.
pub const EXACT_POSITION_SUBJECTS: usize = 1024;

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
