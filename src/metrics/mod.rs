//! Prometheus metrics: what the admin endpoint's `/metrics` renders (text exposition format).
//!
//! Decisions are counted as they happen; per-host gauges and counters are read from the store
//! at scrape time, so every replica on a shared store reports the same per-host figures. Label
//! sets stay bounded: RPC names, decisions and reasons are fixed sets, endpoints come from the
//! configuration, and hosts are the installations an operator runs. Subjects, accounts and auth
//! identities are never labels.
//!
//! Rooms: this file holds the counters the service updates as it decides; `latency` the
//! histograms of RPCs and store calls; `ratelimit` the rate limit service's counts;
//! `http_admission` the external processor's per policy; `render` the exposition. docs/operations.md lists every
//! metric; `deploy/grafana-dashboard.json` and `deploy/prometheus-rules.yaml` use them (the
//! test command checks their queries against what a scrape shows).
//!
//! The exposition is written by hand rather than with `prometheus-client` (the Prometheus
//! project's crate), weighed this round: most of what `/metrics` shows is read from the store
//! at scrape time (the same per-host figures on every replica of a shared store) and summed
//! past `metrics.max_hosts`, which that crate expresses only as a custom collector encoding
//! the same series by hand; what it would take over is the format's escaping and the
//! histogram lines, about 40 lines here, tested by a parse in tests/metrics.rs and by
//! `promtool check metrics` in the test command. One dependency fewer on a lean tree.

mod http_admission;
mod latency;
mod ratelimit;
mod render;

pub use http_admission::HttpAdmissionMetrics;
pub use latency::{Histogram, LATENCY_BOUNDS_S, RpcLatency, StoreLatency};
pub use ratelimit::{MAX_RATE_LIMIT_SERIES, RateLimitMetrics};
pub use render::{MAX_ADAPTIVE_SERIES, OTHER_HOSTS, render};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;

/// Counters the service updates as it decides.
#[derive(Debug, Default)]
pub struct Metrics {
    /// (rpc, decision, reason) → count.
    decisions: Mutex<BTreeMap<(&'static str, &'static str, &'static str), u64>>,
    /// endpoint → outcome → count; endpoints are the configured buckets, so an attempt looks
    /// its endpoint up without allocating.
    auth: Mutex<BTreeMap<String, BTreeMap<&'static str, u64>>>,
    /// Reclaims refused, by reason (a [`ReclaimRefusal`](crate::scheduler::ReclaimRefusal)
    /// code, `INVALID_ARGUMENT` or `PERMISSION_DENIED`).
    reclaim_refused: Mutex<BTreeMap<&'static str, u64>>,
    /// The gRPC port's connections, once the server listens.
    connections: std::sync::OnceLock<Arc<crate::net::ConnectionGate>>,
    /// Unary RPCs' latency by method and code ([`crate::service::timing`] observes them).
    pub rpc: RpcLatency,
    /// Store calls' latency by operation ([`crate::store::Timed`] observes them).
    pub store: Arc<StoreLatency>,
    /// The rate limit service's counts per domain and configured descriptor.
    pub rate_limits: RateLimitMetrics,
    /// The external processor's figures per policy.
    pub http: HttpAdmissionMetrics,
}

impl Metrics {
    /// Report the gRPC port's open and refused connections.
    pub fn watch_connections(&self, gate: Arc<crate::net::ConnectionGate>) {
        let _ = self.connections.set(gate);
    }

    /// Count one decision of `rpc`.
    pub fn decision(&self, rpc: &'static str, decision: &'static str, reason: &'static str) {
        *self
            .decisions
            .lock()
            .expect("metrics lock")
            .entry((rpc, decision, reason))
            .or_default() += 1;
    }

    /// Count one refused Reclaim.
    pub fn reclaim_refused(&self, reason: &'static str) {
        *self
            .reclaim_refused
            .lock()
            .expect("metrics lock")
            .entry(reason)
            .or_default() += 1;
    }

    /// Refused Reclaims so far, by reason.
    pub fn reclaim_refused_counts(&self) -> Vec<(&'static str, u64)> {
        let r = self.reclaim_refused.lock().expect("metrics lock");
        r.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Every (rpc, decision, reason) count so far.
    pub fn decision_counts(&self) -> Vec<((&'static str, &'static str, &'static str), u64)> {
        let d = self.decisions.lock().expect("metrics lock");
        d.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Every (endpoint, outcome) count so far.
    pub fn auth_counts(&self) -> Vec<((String, &'static str), u64)> {
        let a = self.auth.lock().expect("metrics lock");
        a.iter()
            .flat_map(|(endpoint, outcomes)| {
                outcomes
                    .iter()
                    .map(move |(outcome, n)| ((endpoint.clone(), *outcome), *n))
            })
            .collect()
    }

    /// Count one auth attempt on `endpoint` with its outcome (`allowed`, or the refusal's
    /// reason in lower case).
    pub fn auth_attempt(&self, endpoint: &str, outcome: &'static str) {
        let mut auth = self.auth.lock().expect("metrics lock");
        let outcomes = match auth.get_mut(endpoint) {
            Some(o) => o,
            None => auth.entry(endpoint.to_string()).or_default(),
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
}

/// A label value in the exposition format: backslash, double quote and newline escaped.
pub(crate) fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
