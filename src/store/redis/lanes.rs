//! The queues the batchers share ([`super::coalesce`], [`super::auth_batch`],
//! [`super::rate_limit_batch`]): operations that arrive while a call of their lane (a host, a
//! domain, every auth attempt) is on its way to Redis wait in the lane, and the one task
//! sending for that lane takes them a batch at a time, until none waits. A lane exists while
//! its sender runs, so there is at most one call of a lane in flight and a lane's batches go
//! in arrival order.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The lanes of one batcher; `T` an operation and where its answer goes.
pub(super) struct Lanes<T> {
    lanes: Mutex<HashMap<String, Vec<T>>>,
    /// Operations sent in calls of two or more, and those calls (the tests read them).
    batched_ops: AtomicU64,
    batches: AtomicU64,
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Lanes {
            lanes: Mutex::default(),
            batched_ops: AtomicU64::new(0),
            batches: AtomicU64::new(0),
        }
    }
}

impl<T> Lanes<T> {
    /// The lanes. Nothing in this module panics while holding them, and should anything do
    /// so, what the map holds is still whole: a poisoned lock is taken as it is.
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<T>>> {
        self.lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queue `op` on `lane`; true when no sender runs for the lane, so the caller must start
    /// one ([`Lanes::sender`]).
    pub(super) fn push(&self, lane: &str, op: T) -> bool {
        let mut map = self.map();
        match map.get_mut(lane) {
            Some(waiting) => {
                waiting.push(op);
                false
            }
            None => {
                map.insert(lane.to_string(), vec![op]);
                true
            }
        }
    }

    /// Count one call carrying `ops` operations (two or more).
    pub(super) fn sent_together(&self, ops: usize) {
        self.batched_ops.fetch_add(ops as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Operations sent in calls of two or more, and how many such calls, so far.
    pub(super) fn batched(&self) -> (u64, u64) {
        (
            self.batched_ops.load(Ordering::Relaxed),
            self.batches.load(Ordering::Relaxed),
        )
    }

    /// The sender of `lane`, for the task that [`Lanes::push`] said to start. Should that task
    /// end any other way than by [`Sender::next`] finding nothing (a panic), the lane is not
    /// left with a sender that is gone: it goes, and the operations waiting there are dropped
    /// (their answer channels close).
    pub(super) fn sender<'a>(&'a self, lane: &'a str) -> Sender<'a, T> {
        Sender {
            lanes: self,
            lane,
            done: false,
        }
    }
}

/// The one task sending for a lane.
pub(super) struct Sender<'a, T> {
    lanes: &'a Lanes<T>,
    lane: &'a str,
    done: bool,
}

impl<T> Sender<'_, T> {
    /// The next batch: up to `max` operations from the front of the lane, as long as `same`
    /// holds between the first and each one. `None` when nothing waits: the lane then goes and
    /// this sender ends.
    pub(super) fn next(&mut self, max: usize, same: impl Fn(&T, &T) -> bool) -> Option<Vec<T>> {
        let mut map = self.lanes.map();
        let Some(waiting) = map.get_mut(self.lane).filter(|w| !w.is_empty()) else {
            map.remove(self.lane);
            self.done = true;
            return None;
        };
        let n = waiting
            .iter()
            .take(max)
            .take_while(|op| same(&waiting[0], op))
            .count();
        Some(waiting.drain(..n).collect())
    }

    /// Everything waiting on the lane now (to be failed at once when its call failed).
    pub(super) fn take_all(&mut self) -> Vec<T> {
        self.lanes
            .map()
            .get_mut(self.lane)
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

impl<T> Drop for Sender<'_, T> {
    fn drop(&mut self) {
        if !self.done {
            self.lanes.map().remove(self.lane);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Lanes;

    #[test]
    fn a_lane_has_one_sender_that_takes_its_batches_in_order_until_none_waits() {
        let lanes = Lanes::default();
        assert!(lanes.push("h", 1), "the first operation starts the sender");
        assert!(!lanes.push("h", 2), "later ones wait for it");
        assert!(lanes.push("other", 9), "another lane has its own");
        lanes.push("h", 3);
        lanes.push("h", 10);
        let mut sender = lanes.sender("h");
        // A batch ends at the first operation unlike its first.
        assert_eq!(
            sender.next(8, |a, b| (a < &10) == (b < &10)),
            Some(vec![1, 2, 3])
        );
        assert_eq!(sender.next(8, |_, _| true), Some(vec![10]));
        assert!(!lanes.push("h", 4), "the sender still runs");
        assert_eq!(sender.take_all(), vec![4]);
        assert_eq!(sender.next(8, |_, _| true), None);
        assert!(
            lanes.push("h", 5),
            "once it ended, the next operation starts a sender"
        );
    }

    #[test]
    fn a_sender_that_ends_abnormally_leaves_no_lane_behind() {
        let lanes = Lanes::default();
        lanes.push("h", 1);
        lanes.push("h", 2);
        let mut sender = lanes.sender("h");
        assert_eq!(sender.next(1, |_, _| true), Some(vec![1]));
        drop(sender);
        assert!(lanes.push("h", 3), "a new sender is started");
    }
}
