//! The injected clock. Stores read time only through a [`Clock`], so tests move time by hand
//! instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::scheduler::Millis;

/// A source of monotonic milliseconds.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> Millis;
}

/// Milliseconds since the clock was made, from the monotonic system clock.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
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
}
