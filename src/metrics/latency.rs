//! Latency histograms: every unary RPC the gRPC port serves, by service, method and status
//! code, and every call the service makes to its store, by operation. Observing one costs a
//! few relaxed atomic additions (and, for an RPC, a read-locked map lookup by its path).
//!
//! Labels stay bounded: a method is one the server routes (a path it does not serve answers
//! UNIMPLEMENTED and is counted under `_unknown`), with a hard cap past which methods are
//! counted under `_other`; codes are gRPC's 17; store operations are a fixed enum.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::store::{Recorder, StoreOp};

/// Upper bounds of the buckets, in seconds: 100 µs to 10 s, about three per decade.
pub const LATENCY_BOUNDS_S: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];
const BOUNDS_NS: [u64; 16] = {
    let mut out = [0u64; 16];
    let mut i = 0;
    while i < 16 {
        out[i] = (LATENCY_BOUNDS_S[i] * 1e9) as u64;
        i += 1;
    }
    out
};

/// One histogram: counts per bucket (not cumulative; the last one is +Inf) and the sum.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; 17],
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let i = BOUNDS_NS.partition_point(|b| *b < ns);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// Its `_bucket`, `_sum` and `_count` lines under `name`, with `labels` (already escaped,
    /// `k="v",...`) before `le`.
    pub fn write(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            cumulative += b.load(Ordering::Relaxed);
            let le = LATENCY_BOUNDS_S
                .get(i)
                .map_or_else(|| "+Inf".to_string(), f64::to_string);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

/// Methods with a histogram of their own at most; more are counted under `_other`.
pub const MAX_METHODS: usize = 128;
/// gRPC's status codes, 0 (OK) to 16 (UNAUTHENTICATED), by number.
pub const GRPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];
const UNIMPLEMENTED: usize = 12;
/// Where paths the server does not route are counted.
const UNKNOWN: &str = "/_unknown/_unknown";
/// Where methods past [`MAX_METHODS`] are counted.
const OTHER: &str = "/_other/_other";

/// One method's histograms, by status code.
type ByCode = [Histogram; 17];

/// The unary RPCs' latency, from the request's arrival to its answer's headers.
///
/// A method's histograms are made once and never freed (at most [`MAX_METHODS`] + 2 per
/// process), so a call holds a plain reference to them; each thread keeps the ones it used in
/// a small cache of its own, so the common call takes no lock and touches no shared count
/// but its histogram's.
#[derive(Debug)]
pub struct RpcLatency {
    /// Unique in the process, for the threads' caches (an address could be reused).
    id: u64,
    /// `/package.Service/Method` → its histograms.
    methods: RwLock<HashMap<Box<str>, &'static ByCode>>,
}

impl Default for RpcLatency {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        RpcLatency {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            methods: RwLock::default(),
        }
    }
}

thread_local! {
    /// (the `RpcLatency`'s id, path) → its histograms, for the ones this thread used.
    static CACHE: std::cell::RefCell<Vec<(u64, Box<str>, &'static ByCode)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// One method's histograms, ready to record a call's answer.
#[derive(Clone, Copy, Debug)]
pub struct MethodLatency(&'static ByCode);

impl MethodLatency {
    /// Record one call that answered `code` (a gRPC status number) after `d`. A call that
    /// answered UNIMPLEMENTED was not routed: it is counted under `_unknown`.
    pub fn observe(self, rpc: &RpcLatency, code: usize, d: Duration) {
        let code = code.min(GRPC_CODES.len() - 1);
        let hist = if code == UNIMPLEMENTED {
            rpc.method(UNKNOWN).0
        } else {
            self.0
        };
        hist[code].observe(d);
    }
}

impl RpcLatency {
    /// The histograms of `path`: its own, or `_other` once [`MAX_METHODS`] methods have theirs.
    pub fn method(&self, path: &str) -> MethodLatency {
        let me = self.id;
        let cached = CACHE.with_borrow(|c| {
            c.iter()
                .find(|(owner, p, _)| *owner == me && &**p == path)
                .map(|(_, _, h)| *h)
        });
        if let Some(h) = cached {
            return MethodLatency(h);
        }
        let h = self.shared(path);
        CACHE.with_borrow_mut(|c| {
            // Bounded: a thread remembers at most as many as a process has.
            if c.len() < 4 * (MAX_METHODS + 2) {
                c.push((me, path.into(), h));
            }
        });
        MethodLatency(h)
    }

    fn shared(&self, path: &str) -> &'static ByCode {
        if let Some(h) = self.methods.read().expect("latency lock").get(path) {
            return h;
        }
        let mut methods = self.methods.write().expect("latency lock");
        let special = [UNKNOWN, OTHER]
            .iter()
            .filter(|k| methods.contains_key(**k))
            .count();
        let full = methods.len() - special >= MAX_METHODS;
        let key = if full && !methods.contains_key(path) && path != UNKNOWN {
            OTHER
        } else {
            path
        };
        methods
            .entry(key.into())
            .or_insert_with(|| Box::leak(Box::default()))
    }

    /// Record one call of `path` that answered `code` (a gRPC status number) after `d`.
    pub fn observe(&self, path: &str, code: usize, d: Duration) {
        self.method(path).observe(self, code, d);
    }

    /// `admission_grpc_server_handling_seconds` for every method and code seen.
    pub fn write(&self, out: &mut String) {
        let methods = self.methods.read().expect("latency lock");
        let mut paths: Vec<_> = methods.keys().collect();
        paths.sort();
        for path in paths {
            let (service, method) = path
                .trim_start_matches('/')
                .split_once('/')
                .unwrap_or(("_unknown", "_unknown"));
            for (code, h) in methods[path].iter().enumerate() {
                if h.count() > 0 {
                    let labels = format!(
                        "grpc_service=\"{}\",grpc_method=\"{}\",grpc_code=\"{}\"",
                        super::escape(service),
                        super::escape(method),
                        GRPC_CODES[code]
                    );
                    h.write(out, "admission_grpc_server_handling_seconds", &labels);
                }
            }
        }
    }
}

/// Store calls' latency by operation and result (`ok`, or `error` when the store failed).
#[derive(Debug)]
pub struct StoreLatency {
    ok: [Histogram; StoreOp::ALL.len()],
    error: [Histogram; StoreOp::ALL.len()],
}

impl Default for StoreLatency {
    fn default() -> Self {
        StoreLatency {
            ok: std::array::from_fn(|_| Histogram::default()),
            error: std::array::from_fn(|_| Histogram::default()),
        }
    }
}

impl Recorder for StoreLatency {
    fn observe(&self, op: StoreOp, ok: bool, d: Duration) {
        let set = if ok { &self.ok } else { &self.error };
        set[op as usize].observe(d);
    }
}

impl StoreLatency {
    /// `admission_store_call_duration_seconds` for every operation called.
    pub fn write(&self, out: &mut String) {
        for op in StoreOp::ALL {
            for (result, set) in [("ok", &self.ok), ("error", &self.error)] {
                let h = &set[op as usize];
                if h.count() > 0 {
                    let labels = format!("operation=\"{}\",result=\"{result}\"", op.name());
                    h.write(out, "admission_store_call_duration_seconds", &labels);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_at_or_above_it() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(100)); // on a bound: that bucket (le is inclusive)
        h.observe(Duration::from_micros(101));
        h.observe(Duration::from_secs(60)); // past the last bound: +Inf
        let mut out = String::new();
        h.write(&mut out, "x", "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.0001\"} 1\n"), "{out}");
        assert!(
            out.contains("x_bucket{a=\"b\",le=\"0.00025\"} 2\n"),
            "{out}"
        );
        assert!(out.contains("x_bucket{a=\"b\",le=\"10\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 3\n"), "{out}");
    }

    #[test]
    fn methods_past_the_cap_and_unrouted_paths_share_one_series() {
        let rpc = RpcLatency::default();
        let d = Duration::from_millis(1);
        for i in 0..MAX_METHODS + 10 {
            rpc.observe(&format!("/svc/M{i}"), 0, d);
        }
        rpc.observe("/svc/NoSuchMethod", UNIMPLEMENTED, d);
        let mut out = String::new();
        rpc.write(&mut out);
        let series = out.lines().filter(|l| l.contains("_count{")).count();
        assert_eq!(series, MAX_METHODS + 2, "the cap, _other and _unknown");
        assert!(out.contains("grpc_service=\"_other\",grpc_method=\"_other\""));
        assert!(out.contains(
            "grpc_service=\"_unknown\",grpc_method=\"_unknown\",grpc_code=\"UNIMPLEMENTED\""
        ));
        assert!(!out.contains("NoSuchMethod"));
    }
}
