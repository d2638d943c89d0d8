//! Prometheus metrics and the admin HTTP endpoint: `/metrics` (text exposition format),
//! `/healthz` (the process is up) and `/readyz` (it admits work: not draining, store reachable).
//!
//! Decisions are counted as they happen; per-host gauges and counters are read from the store
//! at scrape time, so every replica on a shared store reports the same per-host figures. Label
//! sets stay bounded: RPC names, decisions and reasons are fixed sets, endpoints come from the
//! configuration, and hosts are the installations an operator runs. Subjects, accounts and auth
//! identities are never labels.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;

use crate::service::Gates;
use crate::store::Store;

/// Store errors seen by any RPC (the store was unreachable or answered nonsense).
pub static STORE_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Counters the service updates as it decides.
#[derive(Debug, Default)]
pub struct Metrics {
    /// (rpc, decision, reason) → count.
    decisions: Mutex<BTreeMap<(&'static str, &'static str, &'static str), u64>>,
    /// endpoint → outcome → count; endpoints are the configured buckets, so an attempt looks
    /// its endpoint up without allocating.
    auth: Mutex<BTreeMap<String, BTreeMap<&'static str, u64>>>,
}

impl Metrics {
    /// Count one decision of `rpc`.
    pub fn decision(&self, rpc: &'static str, decision: &'static str, reason: &'static str) {
        *self
            .decisions
            .lock()
            .expect("metrics lock")
            .entry((rpc, decision, reason))
            .or_default() += 1;
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

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The text exposition of every metric.
pub async fn render<S: Store>(store: &S, gates: &Gates, metrics: &Metrics) -> String {
    let mut out = String::new();
    let family = |name: &str, kind: &str, help: &str, out: &mut String| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    family(
        "admission_decisions_total",
        "counter",
        "Decisions by RPC, decision and reason.",
        &mut out,
    );
    for ((rpc, decision, reason), n) in metrics.decisions.lock().expect("metrics lock").iter() {
        let _ = writeln!(
            out,
            "admission_decisions_total{{rpc=\"{rpc}\",decision=\"{decision}\",reason=\"{reason}\"}} {n}"
        );
    }
    family(
        "admission_auth_attempts_total",
        "counter",
        "Auth attempts by endpoint and outcome (allowed, locked_out, attempts_exhausted, key_table_full).",
        &mut out,
    );
    for ((endpoint, outcome), n) in metrics.auth_counts() {
        let _ = writeln!(
            out,
            "admission_auth_attempts_total{{endpoint=\"{}\",outcome=\"{outcome}\"}} {n}",
            escape(&endpoint)
        );
    }
    let hosts = store.host_ids().await;
    let mut gauges = String::new();
    let mut totals = String::new();
    let mut reservations = String::new();
    let mut waits = String::new();
    if let Ok(hosts) = &hosts {
        for host in hosts {
            let h = escape(host);
            if let Ok(s) = store.stats(host).await {
                let _ = writeln!(
                    gauges,
                    "admission_tickets_in_flight{{host_id=\"{h}\"}} {}\n\
                     admission_tickets_queued{{host_id=\"{h}\"}} {}\n\
                     admission_tickets_parked{{host_id=\"{h}\"}} {}",
                    s.in_flight, s.queued, s.parked
                );
                let c = s.counters;
                let mut cumulative = 0;
                for (i, n) in c.queue_wait.buckets.iter().enumerate() {
                    cumulative += n;
                    let le = crate::scheduler::QUEUE_WAIT_BOUNDS_MS.get(i).map_or_else(
                        || "+Inf".to_string(),
                        |ms| format!("{}", *ms as f64 / 1000.0),
                    );
                    let _ = writeln!(
                        waits,
                        "admission_queue_wait_seconds_bucket{{host_id=\"{h}\",le=\"{le}\"}} {cumulative}"
                    );
                }
                let _ = writeln!(
                    waits,
                    "admission_queue_wait_seconds_sum{{host_id=\"{h}\"}} {}\n\
                     admission_queue_wait_seconds_count{{host_id=\"{h}\"}} {}",
                    c.queue_wait.sum_ms as f64 / 1000.0,
                    c.queue_wait.count()
                );
                for (outcome, n) in [
                    ("admitted", c.admitted),
                    ("rejected", c.rejected),
                    ("released", c.released),
                    ("cancelled", c.cancelled),
                    ("shed", c.shed),
                    ("expired", c.expired),
                ] {
                    let _ = writeln!(
                        totals,
                        "admission_tickets_total{{host_id=\"{h}\",outcome=\"{outcome}\"}} {n}"
                    );
                }
            }
            if let Ok(l) = store.ledger_stats(host).await {
                let _ = writeln!(
                    reservations,
                    "admission_reservations_open{{host_id=\"{h}\"}} {}\n\
                     admission_reservations_uncertain{{host_id=\"{h}\"}} {}\n\
                     admission_reservations_settled_total{{host_id=\"{h}\"}} {}",
                    l.open, l.uncertain, l.settled
                );
            }
        }
    }
    family(
        "admission_tickets_in_flight",
        "gauge",
        "Admitted tickets per host.",
        &mut out,
    );
    family(
        "admission_tickets_queued",
        "gauge",
        "Queued tickets per host.",
        &mut out,
    );
    family(
        "admission_tickets_parked",
        "gauge",
        "Parked tickets per host.",
        &mut out,
    );
    out.push_str(&gauges);
    family(
        "admission_tickets_total",
        "counter",
        "Tickets per host by outcome; expired counts lease expiries.",
        &mut out,
    );
    out.push_str(&totals);
    family(
        "admission_queue_wait_seconds",
        "histogram",
        "Time queued tickets waited from Submit to admission, per host.",
        &mut out,
    );
    out.push_str(&waits);
    family(
        "admission_reservations_open",
        "gauge",
        "Reservations held (reserved or uncertain) per host.",
        &mut out,
    );
    family(
        "admission_reservations_uncertain",
        "gauge",
        "Reservations unsettled past reservation_ttl per host.",
        &mut out,
    );
    family(
        "admission_reservations_settled_total",
        "counter",
        "Steps settled per host.",
        &mut out,
    );
    out.push_str(&reservations);
    family(
        "admission_store_errors_total",
        "counter",
        "Calls that failed because the store was unreachable.",
        &mut out,
    );
    let _ = writeln!(
        out,
        "admission_store_errors_total {}",
        STORE_ERRORS.load(Ordering::Relaxed) + u64::from(hosts.is_err())
    );
    family(
        "admission_auth_fallback_active",
        "gauge",
        "1 while auth attempts are decided by the local bucket because the shared store is unreachable.",
        &mut out,
    );
    let _ = writeln!(
        out,
        "admission_auth_fallback_active {}",
        u8::from(store.auth_degraded())
    );
    family(
        "admission_draining",
        "gauge",
        "1 while this process drains.",
        &mut out,
    );
    let _ = writeln!(
        out,
        "admission_draining {}",
        u8::from(gates.draining.load(Ordering::Relaxed))
    );
    out
}

/// Serve `/metrics`, `/healthz` and `/readyz` on `listener` until the task is aborted.
pub async fn serve_admin<S: Store>(
    listener: TcpListener,
    store: Arc<S>,
    gates: Arc<Gates>,
    metrics: Arc<Metrics>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (store, gates, metrics) = (store.clone(), gates.clone(), metrics.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let (store, gates, metrics) = (store.clone(), gates.clone(), metrics.clone());
                async move {
                    Ok::<_, std::convert::Infallible>(
                        handle(req.uri().path(), &*store, &gates, &metrics).await,
                    )
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle<S: Store>(
    path: &str,
    store: &S,
    gates: &Gates,
    metrics: &Metrics,
) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            render(store, gates, metrics).await,
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/readyz" => {
            if gates.draining.load(Ordering::Relaxed) {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "draining\n".into(),
                )
            } else if let Err(e) = store.host_ids().await {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("{e}\n"),
                )
            } else {
                (StatusCode::OK, "text/plain", "ready\n".into())
            }
        }
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: /metrics, /healthz, /readyz\n".into(),
        ),
    };
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}
