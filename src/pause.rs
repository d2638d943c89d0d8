//! The authority's own pauses. A process that did not run for a while (SIGSTOP, a throttled
//! container, a long stall of the machine) must not take its own silence for everybody's: the
//! Wait streams that keep queued tickets alive and the Renews of admitted holders sat in it
//! too, so on resuming it would end tickets whose holders and waiters kept their part.
//!
//! A heartbeat thread beats every [`HEARTBEAT`]. A store that is about to decide on a host
//! looks at the time it decides at ([`PauseWatch::look_at`]): when the last beat is older than
//! the threshold, the process was paused, and the pause is counted once. Each store then gives
//! every live ticket of a host a full lease from now, as a restart does, before anything else
//! happens on that host (the embedded store under the host's lock, Redis before the host's
//! next script): leases are counted from the resume.
//!
//! Unarmed (no heartbeat: a store in a unit test whose clock is moved by hand), it sees no
//! pause at all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Clock;
use crate::scheduler::Millis;

/// How often the heartbeat thread beats.
pub const HEARTBEAT: Duration = Duration::from_millis(50);

/// The gap between beats that counts as a pause for a host whose shortest lease is
/// `shortest_lease_ms`: a third of it (a pause shorter than that is covered by the renewals'
/// own slack), between 250 ms (a busy machine delays a thread by less) and 1 s.
pub fn threshold_for(shortest_lease_ms: u64) -> Millis {
    (shortest_lease_ms / 3).clamp(250, 1000)
}

/// A process's pauses, as seen by its heartbeat; see the module documentation.
pub struct PauseWatch {
    clock: Arc<dyn Clock>,
    /// The gap that counts as a pause; 0 while unarmed.
    threshold_ms: AtomicU64,
    /// The clock's time at the last beat, or at the last pause seen.
    last_beat: AtomicU64,
    /// Pauses seen since the process started. A store compares it with the count it last
    /// resumed a host at.
    pauses: AtomicU64,
    /// The longest pause seen, in ms (for `/metrics`).
    longest_ms: AtomicU64,
    /// Taken only when a pause may have happened, so that it is counted once.
    counting: Mutex<()>,
}

impl PauseWatch {
    /// An unarmed watch on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        PauseWatch {
            clock,
            threshold_ms: AtomicU64::new(0),
            last_beat: AtomicU64::new(0),
            pauses: AtomicU64::new(0),
            longest_ms: AtomicU64::new(0),
            counting: Mutex::new(()),
        }
    }

    /// Start seeing pauses longer than `threshold_ms` (the caller beats from now on).
    pub fn arm(&self, threshold_ms: Millis) {
        self.last_beat.store(self.clock.now_ms(), Ordering::Release);
        self.threshold_ms
            .store(threshold_ms.max(1), Ordering::Release);
    }

    /// One beat of the heartbeat: a pause that ended just now is counted first.
    pub fn beat(&self) {
        let now = self.clock.now_ms();
        self.look_at(now);
        self.last_beat.fetch_max(now, Ordering::AcqRel);
    }

    /// The pauses seen up to `now`, the time a decision is about to be made at: a pause that
    /// ended before `now` and that no one has counted yet is counted here.
    pub fn look_at(&self, now: Millis) -> u64 {
        let threshold = self.threshold_ms.load(Ordering::Acquire);
        if threshold == 0 || now.saturating_sub(self.last_beat.load(Ordering::Acquire)) <= threshold
        {
            // A pause is counted before the beat after it is stored: this count includes it.
            return self.pauses.load(Ordering::Acquire);
        }
        let _once = self.counting.lock().expect("pause watch lock");
        let last = self.last_beat.load(Ordering::Acquire);
        let gap = now.saturating_sub(last);
        if gap > threshold {
            self.pauses.fetch_add(1, Ordering::AcqRel);
            self.longest_ms.fetch_max(gap, Ordering::Relaxed);
            self.last_beat.fetch_max(now, Ordering::AcqRel);
            tracing::warn!(
                paused_ms = gap,
                "this process did not run for {gap} ms (stopped, throttled or stalled): every \
                 live ticket gets a full lease from now, as after a restart, so that no holder \
                 or waiter loses its ticket to the authority's own pause"
            );
        }
        self.pauses.load(Ordering::Acquire)
    }

    /// Pauses seen since the process started, and the longest one in ms.
    pub fn seen(&self) -> (u64, Millis) {
        (
            self.pauses.load(Ordering::Acquire),
            self.longest_ms.load(Ordering::Relaxed),
        )
    }

    /// Beat every [`HEARTBEAT`] on a thread of its own (not a task: a runtime busy with
    /// requests must not look like a paused process), for as long as the process runs.
    pub fn start_heartbeat(self: &Arc<Self>, threshold_ms: Millis) {
        self.arm(threshold_ms);
        let watch = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("pause-heartbeat".into())
            .spawn(move || {
                while let Some(w) = watch.upgrade() {
                    w.beat();
                    drop(w);
                    std::thread::sleep(HEARTBEAT);
                }
            });
        if let Err(e) = spawned {
            // Without it no pause is seen: the behaviour before pauses were watched.
            self.threshold_ms.store(0, Ordering::Release);
            tracing::warn!("no pause heartbeat ({e}): a pause of this process may end leases");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn watch() -> (PauseWatch, ManualClock) {
        let clock = ManualClock::new(1_000);
        (PauseWatch::new(Arc::new(clock.clone())), clock)
    }

    #[test]
    fn unarmed_sees_no_pause_however_time_moves() {
        let (w, clock) = watch();
        clock.advance(60_000);
        assert_eq!(w.look_at(61_000), 0);
        w.beat();
        assert_eq!(w.seen(), (0, 0));
    }

    #[test]
    fn a_gap_between_beats_over_the_threshold_is_one_pause() {
        let (w, clock) = watch();
        w.arm(500);
        for _ in 0..20 {
            clock.advance(50);
            w.beat();
        }
        assert_eq!(w.look_at(clock.now_ms()), 0, "steady beats are no pause");
        clock.advance(500);
        assert_eq!(w.look_at(clock.now_ms()), 0, "at the threshold is no pause");
        clock.advance(3_500);
        let now = clock.now_ms();
        assert_eq!(w.look_at(now), 1);
        assert_eq!(w.look_at(now), 1, "counted once, whoever looks next");
        w.beat();
        assert_eq!(w.seen(), (1, 4_000));
    }

    #[test]
    fn the_beat_after_a_pause_counts_it_before_a_decision_could_miss_it() {
        let (w, clock) = watch();
        w.arm(300);
        clock.advance(2_000);
        // The heartbeat thread runs first after the resume: a decision after it still sees
        // the pause counted.
        w.beat();
        assert_eq!(w.look_at(clock.now_ms()), 1);
    }

    #[test]
    fn a_decision_made_at_a_time_read_before_the_pause_is_not_one() {
        let (w, clock) = watch();
        w.arm(300);
        let before = clock.now_ms();
        clock.advance(2_000);
        assert_eq!(w.look_at(before), 0);
    }

    #[test]
    fn thresholds_follow_the_shortest_lease_within_bounds() {
        assert_eq!(threshold_for(300), 250);
        assert_eq!(threshold_for(1_500), 500);
        assert_eq!(threshold_for(30_000), 1_000);
    }
}
