//! Process-wide switches that refuse new tickets before they reach the store (draining, the
//! authority's own memory), and the signals that go with them. The services, the metrics
//! endpoint and the composition root share one [`Gates`].

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Process-wide switches that refuse new tickets before they reach the store.
#[derive(Debug)]
pub struct Gates {
    /// Set by `Drain` and SIGTERM: new Submits get DRAINING.
    pub draining: AtomicBool,
    /// Set by the memory monitor while the authority's own RSS is at its ceiling.
    pub authority_memory_full: AtomicBool,
    /// Turns true when draining starts, for whoever waits on it (the health status).
    drain_started: tokio::sync::watch::Sender<bool>,
    /// Turns true when the process stops serving: open Wait streams end with UNAVAILABLE, so
    /// their clients follow their tickets on another replica (or after the restart).
    closing: tokio::sync::watch::Sender<bool>,
    /// Auth endpoints the configuration does not name that callers declared buckets for (at
    /// most `MAX_DECLARED_BUCKETS`).
    declared_buckets: Mutex<BTreeSet<String>>,
}

impl Default for Gates {
    fn default() -> Self {
        Gates {
            draining: AtomicBool::new(false),
            authority_memory_full: AtomicBool::new(false),
            drain_started: tokio::sync::watch::Sender::new(false),
            closing: tokio::sync::watch::Sender::new(false),
            declared_buckets: Mutex::new(BTreeSet::new()),
        }
    }
}

impl Gates {
    /// Stop admitting new tickets; true when this call started the drain.
    pub fn start_drain(&self) -> bool {
        let started = !self.draining.swap(true, Ordering::SeqCst);
        if started {
            tracing::warn!("draining: new tickets are refused from now on");
            self.drain_started.send_replace(true);
        }
        started
    }

    /// Resolves once draining has started.
    pub async fn drain_started(&self) {
        let mut rx = self.drain_started.subscribe();
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// End every open Wait stream (the process is about to stop).
    pub fn close_streams(&self) {
        self.closing.send_replace(true);
    }

    /// Turns true when the process stops serving (see `close_streams`).
    pub fn closing(&self) -> tokio::sync::watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// Accept a declared bucket for `endpoint`, which the configuration does not name: true
    /// when it was declared before or there is room for it among `max` declared endpoints.
    pub fn declare_bucket(&self, endpoint: &str, max: usize) -> bool {
        let mut declared = self.declared_buckets.lock().expect("declared buckets lock");
        if declared.contains(endpoint) {
            return true;
        }
        if declared.len() >= max {
            return false;
        }
        declared.insert(endpoint.to_string());
        true
    }

    /// Whether a caller declared a bucket for `endpoint` on this process.
    pub fn is_declared(&self, endpoint: &str) -> bool {
        self.declared_buckets
            .lock()
            .expect("declared buckets lock")
            .contains(endpoint)
    }

    /// Wait streams still open (each holds a `closing` receiver until it ends).
    pub fn open_streams(&self) -> usize {
        self.closing.receiver_count()
    }
}
