//! The text exposition of every metric (what `/metrics` answers): the counters [`Metrics`]
//! keeps, the latency histograms, and per-host figures read from the store at scrape time.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::{Metrics, escape};
use crate::gates::Gates;
use crate::ledger::LedgerStats;
use crate::scheduler::{Counters, HostStats};
use crate::store::Store;

/// The per-host figures `/metrics` shows, which can be summed over hosts.
#[derive(Debug, Default)]
struct HostCounts {
    in_flight: u64,
    queued: u64,
    parked: u64,
    /// The host's total cap and queue bound (summed over hosts under `_other`).
    total_cap: u64,
    queue_cap: u64,
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
            total_cap: u64::from(s.limits.total),
            queue_cap: u64::from(s.limits.queue_total),
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
        self.total_cap += o.total_cap;
        self.queue_cap += o.queue_cap;
        let (c, d) = (&mut self.counters, &o.counters);
        c.submitted += d.submitted;
        c.admitted += d.admitted;
        c.rejected += d.rejected;
        c.released += d.released;
        c.cancelled += d.cancelled;
        c.shed += d.shed;
        c.expired += d.expired;
        c.reclaimed += d.reclaimed;
        c.superseded += d.superseded;
        c.key_refused += d.key_refused;
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
        "admission_grpc_server_handling_seconds",
        "histogram",
        "Unary RPCs from arrival to answer, by gRPC service, method and status code (streams such as Wait are not timed).",
        &mut out,
    );
    metrics.rpc.write(&mut out);
    family(
        "admission_store_call_duration_seconds",
        "histogram",
        "Calls to the store (embedded or Redis) by operation and result (ok, error).",
        &mut out,
    );
    metrics.store.write(&mut out);
    metrics.rate_limits.write(&mut out);
    metrics.http.write(&mut out);
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
        "Losses of the shared store's state (each opens a learning window): the installation's \
         count, carried across the losses by the replicas.",
        &mut out,
    );
    let _ = writeln!(out, "admission_state_loss_total {}", store.state_losses());
    family(
        "admission_state_loss_last_timestamp_seconds",
        "gauge",
        "When the last loss of the shared store's state was detected (Unix time); 0 for none.",
        &mut out,
    );
    let _ = writeln!(
        out,
        "admission_state_loss_last_timestamp_seconds {}",
        store.last_state_loss_ms() as f64 / 1000.0
    );
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
    let mut caps = String::new();
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
            let _ = writeln!(
                caps,
                "admission_host_total_cap{{host_id=\"{h}\"}} {}\n\
                 admission_host_queue_cap{{host_id=\"{h}\"}} {}",
                s.total_cap, s.queue_cap
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
                ("superseded", c.superseded),
                ("key_refused", c.key_refused),
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
        "admission_host_total_cap",
        "gauge",
        "The total cap a host is decided with now (file, flags or an operator's SetLimits).",
        &mut out,
    );
    family(
        "admission_host_queue_cap",
        "gauge",
        "The queue bound (queue.total) a host is decided with now; 0 = no queue.",
        &mut out,
    );
    out.push_str(&caps);
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
        "admission_store_info",
        "gauge",
        "1, labelled with the store this process runs on (memory, data_dir or redis).",
        &mut out,
    );
    let _ = writeln!(out, "admission_store_info{{kind=\"{}\"}} 1", store.kind());
    family(
        "admission_store_ready",
        "gauge",
        "1 while the store takes changes (a data dir that cannot write, or an unreachable Redis, is 0).",
        &mut out,
    );
    let store_ready = store.readiness().is_ok() && hosts.is_ok();
    let _ = writeln!(out, "admission_store_ready {}", u8::from(store_ready));
    family(
        "admission_ready",
        "gauge",
        "1 while /readyz answers 200: the store is ready and the process is not draining.",
        &mut out,
    );
    let draining = gates.draining.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "admission_ready {}",
        u8::from(store_ready && !draining)
    );
    family(
        "admission_draining",
        "gauge",
        "1 while this process drains.",
        &mut out,
    );
    let _ = writeln!(out, "admission_draining {}", u8::from(draining));
    out
}
