//! The injected clock. Stores read time only through a [`Clock`], so tests move time by hand
//! instead of sleeping. The one module that reads `std::time::Instant` (clippy.toml refuses it
//! elsewhere): [`SystemClock`] for decisions, [`Stopwatch`] for durations that are reported.
#![allow(clippy::disallowed_types)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::scheduler::Millis;

/// A source of monotonic milliseconds, and of the wall-clock time that grants start from.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> Millis;

    /// The wall clock, in microseconds since the Unix epoch, when `now_ms` was 0: a grant is at
    /// least this plus `now_ms` in µs, so grants keep increasing across restarts of the
    /// process (without reading the wall clock again on every operation).
    fn origin_epoch_us(&self) -> u64;
}

/// Milliseconds since the clock was made, from the monotonic system clock.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
    origin_epoch_us: u64,
}

impl SystemClock {
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
            origin_epoch_us: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        self.origin.elapsed().as_millis() as Millis
    }

    fn origin_epoch_us(&self) -> u64 {
        self.origin_epoch_us
    }
}

/// A clock that moves only when told to. Clones share one time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(start: Millis) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(start)),
        }
    }

    pub fn advance(&self, ms: Millis) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }

    /// 0: grants start from its milliseconds in µs, as the Redis store's scripts count a
    /// frozen time.
    fn origin_epoch_us(&self) -> u64 {
        0
    }
}

/// How long something took, for what metrics and logs report (an RPC's or a store call's
/// latency, a snapshot's pause). Never for a decision: decisions read a [`Clock`]. This and
/// [`SystemClock`] are the only places that read `std::time::Instant` (Cargo.toml's lints
/// refuse it elsewhere).
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    pub fn start() -> Self {
        Stopwatch(Instant::now())
    }

    pub fn elapsed(&self) -> std::time::Duration {
        self.0.elapsed()
    }
}
