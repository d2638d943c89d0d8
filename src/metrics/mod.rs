//! Prometheus metrics: what the admin endpoint's `/metrics` renders (text exposition format).
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
use std::sync::atomic::Ordering;

use crate::gates::Gates;
use crate::ledger::LedgerStats;
use crate::scheduler::{Counters, HostStats};
use crate::store::Store;

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

/// The per-host figures `/metrics` shows, which can be summed over hosts.
#[derive(Debug, Default)]
struct HostCounts {
    in_flight: u64,
    queued: u64,
    parked: u64,
    counters: Counters,
    /// Adaptive caps in force by account (the host's rows that adapt).
    adaptive: Vec<(String, u32)>,
}

/// Adaptive-cap series per host at most (accounts with live tickets or a moved cap come
/// first by name; the rest are left out), so invented account ids cannot grow a scrape.
pub const MAX_ADAPTIVE_SERIES: usize = 100;

impl From<HostStats> for HostCounts {
    fn from(s: HostStats) -> Self {
        HostCounts {
            in_flight: u64::from(s.in_flight),
            queued: u64::from(s.queued),
            parked: u64::from(s.parked),
            counters: s.counters,
            adaptive: s
                .accounts
                .iter()
                .filter(|r| r.adaptive)
                .take(MAX_ADAPTIVE_SERIES)
                .map(|r| (r.name.clone(), r.cap))
                .collect(),
        }
    }
}

impl HostCounts {
    fn add(&mut self, o: &HostCounts) {
        self.in_flight += o.in_flight;
        self.queued += o.queued;
        self.parked += o.parked;
        let (c, d) = (&mut self.counters, &o.counters);
        c.submitted += d.submitted;
        c.admitted += d.admitted;
        c.rejected += d.rejected;
        c.released += d.released;
        c.cancelled += d.cancelled;
        c.shed += d.shed;
        c.expired += d.expired;
        c.reclaimed += d.reclaimed;
        for (b, n) in c.queue_wait.buckets.iter_mut().zip(d.queue_wait.buckets) {
            *b += n;
        }
        c.queue_wait.sum_ms += d.queue_wait.sum_ms;
        for (a, b) in c.shadow.iter_mut().zip(d.shadow) {
            *a += b;
        }
        for (a, b) in c.outcomes.iter_mut().zip(d.outcomes) {
            *a += b;
        }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The label value under which the hosts past `metrics.max_hosts` are summed.
pub const OTHER_HOSTS: &str = "_other";

/// The text exposition of every metric. Per-host series are written for the first `max_hosts`
/// hosts by name; the rest are summed under `host_id="_other"`, so a flood of host ids (an
/// open authority, say) cannot grow a scrape without bound.
pub async fn render<S: Store>(
    store: &S,
    gates: &Gates,
    metrics: &Metrics,
    max_hosts: usize,
) -> String {
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
    family(
        "admission_reclaim_refused_total",
        "counter",
        "Reclaims refused, by reason (TICKET_ENDED, RUN_ID_TAKEN, TICKET_MISMATCH, INVALID_ARGUMENT, PERMISSION_DENIED).",
        &mut out,
    );
    for (reason, n) in metrics.reclaim_refused_counts() {
        let _ = writeln!(
            out,
            "admission_reclaim_refused_total{{reason=\"{reason}\"}} {n}"
        );
    }
    family(
        "admission_state_loss_total",
        "counter",
        "Losses of the shared store's state this process detected (each opens a learning window).",
        &mut out,
    );
    let _ = writeln!(out, "admission_state_loss_total {}", store.state_losses());
    let hosts = store.host_ids().await;
    // Each host's figures, the first `max_hosts` by name under their own label and the rest
    // summed under OTHER_HOSTS.
    let mut rows: Vec<(String, Option<HostCounts>, Option<LedgerStats>)> = Vec::new();
    if let Ok(hosts) = &hosts {
        let mut hosts: Vec<&String> = hosts.iter().collect();
        hosts.sort();
        let mut other: Option<(HostCounts, LedgerStats)> = None;
        for (i, host) in hosts.into_iter().enumerate() {
            let s = store.stats(host).await.ok().map(HostCounts::from);
            let l = store.ledger_stats(host).await.ok();
            if i < max_hosts {
                rows.push((escape(host), s, l));
            } else {
                let (os, ol) = other.get_or_insert_with(Default::default);
                if let Some(s) = s {
                    os.add(&s);
                }
                if let Some(l) = l {
                    ol.open += l.open;
                    ol.uncertain += l.uncertain;
                    ol.settled += l.settled;
                }
            }
        }
        if let Some((s, l)) = other {
            rows.push((OTHER_HOSTS.to_string(), Some(s), Some(l)));
        }
    }
    let mut gauges = String::new();
    let mut totals = String::new();
    let mut reservations = String::new();
    let mut waits = String::new();
    let mut shadow = String::new();
    let mut adaptive = String::new();
    let mut outcomes = String::new();
    for (h, s, l) in &rows {
        if let Some(s) = s {
            let _ = writeln!(
                gauges,
                "admission_tickets_in_flight{{host_id=\"{h}\"}} {}\n\
                 admission_tickets_queued{{host_id=\"{h}\"}} {}\n\
                 admission_tickets_parked{{host_id=\"{h}\"}} {}",
                s.in_flight, s.queued, s.parked
            );
            let c = &s.counters;
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
            for (account, cap) in &s.adaptive {
                let _ = writeln!(
                    adaptive,
                    "admission_adaptive_cap{{host_id=\"{h}\",account_id=\"{}\"}} {cap}",
                    escape(account)
                );
            }
            for o in crate::scheduler::Outcome::REPORTED {
                let n = c.outcomes[o.index().expect("reported")];
                if n > 0 {
                    let _ = writeln!(
                        outcomes,
                        "admission_release_outcomes_total{{host_id=\"{h}\",outcome=\"{}\"}} {n}",
                        o.name()
                    );
                }
            }
            for d in crate::scheduler::ShadowDecision::ALL {
                let n = c.shadow[d.index()];
                if n > 0 {
                    let decision = match d {
                        crate::scheduler::ShadowDecision::Queued => "queue",
                        crate::scheduler::ShadowDecision::Refused(_) => "refuse",
                    };
                    let _ = writeln!(
                        shadow,
                        "admission_shadow_decisions_total{{host_id=\"{h}\",decision=\"{decision}\",reason=\"{}\"}} {n}",
                        d.code()
                    );
                }
            }
            for (outcome, n) in [
                ("admitted", c.admitted),
                ("rejected", c.rejected),
                ("released", c.released),
                ("cancelled", c.cancelled),
                ("shed", c.shed),
                ("expired", c.expired),
                ("reclaimed", c.reclaimed),
            ] {
                let _ = writeln!(
                    totals,
                    "admission_tickets_total{{host_id=\"{h}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
        if let Some(l) = l {
            let _ = writeln!(
                reservations,
                "admission_reservations_open{{host_id=\"{h}\"}} {}\n\
                 admission_reservations_uncertain{{host_id=\"{h}\"}} {}\n\
                 admission_reservations_settled_total{{host_id=\"{h}\"}} {}",
                l.open, l.uncertain, l.settled
            );
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
        "admission_shadow_decisions_total",
        "counter",
        "In shadow mode, Submits admitted that enforce mode would have queued (decision queue) or refused (decision refuse, reason BUSY, QUEUE_FULL or MEMORY_PRESSURE), per host.",
        &mut out,
    );
    out.push_str(&shadow);
    family(
        "admission_release_outcomes_total",
        "counter",
        "Releases of admitted tickets by the outcome the run reported (ok, rate_limited, overloaded, failed), per host.",
        &mut out,
    );
    out.push_str(&outcomes);
    family(
        "admission_adaptive_cap",
        "gauge",
        "The adaptive cap in force of accounts with live tickets or a cap moved from its max, per host (at most 100 accounts per host).",
        &mut out,
    );
    out.push_str(&adaptive);
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
        store.store_errors() + u64::from(hosts.is_err())
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
    if let Some(gate) = metrics.connections.get() {
        family(
            "admission_grpc_connections_open",
            "gauge",
            "gRPC connections open now (at most grpc.max_connections).",
            &mut out,
        );
        let _ = writeln!(out, "admission_grpc_connections_open {}", gate.open());
        family(
            "admission_grpc_connections_refused_total",
            "counter",
            "gRPC connections closed at once because grpc.max_connections were open.",
            &mut out,
        );
        let _ = writeln!(
            out,
            "admission_grpc_connections_refused_total {}",
            gate.refused()
        );
    }
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
