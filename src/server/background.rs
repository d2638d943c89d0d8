//! What runs beside the services: the lease sweep, each host's history samples, the
//! authority's own memory watch, SIGHUP reloads, and the drain that SIGTERM starts.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Reload;
use crate::config::Config;
use crate::gates::Gates;
use crate::history;
use crate::http_admission::LivePolicies;
use crate::ratelimit::LiveRateLimits;
use crate::store::{Store, Timed};

/// What a reload replaces while the services read it.
pub(super) struct Live {
    pub(super) rate_limits: Arc<LiveRateLimits>,
    pub(super) policies: Arc<LivePolicies>,
}

/// The background tasks: SIGHUP reloads (with `reload`), the lease sweep, the authority's own
/// memory watch.
pub(super) fn start_background<S: Store>(
    store: &Arc<Timed<S>>,
    config: &Config,
    reload: Option<Reload>,
    live: &Live,
    gates: &Arc<Gates>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(reload) = reload {
        tasks.push(tokio::spawn(reload_on_sighup(
            store.clone(),
            config.clone(),
            reload,
            live.rate_limits.clone(),
            live.policies.clone(),
        )));
    }
    let sweep_every = sweep_interval(config.limits.shortest_lease_ms());
    tasks.push(tokio::spawn(sweep(
        store.clone(),
        sweep_every,
        live.rate_limits.clone(),
    )));
    tasks.push(tokio::spawn(sample_history(store.clone(), config.history)));
    tasks.push(tokio::spawn(watch_own_memory(
        gates.clone(),
        config.authority_max_rss_mb,
    )));
    tasks
}

/// After `signal` (SIGTERM or ctrl-c): drain, let admitted tickets finish (they keep renewing
/// and releasing as usual) until none is left here or `grace` has passed, then end the open
/// Wait streams and let the server stop.
pub(super) async fn drain_then_stop<S: Store>(
    signal: impl Future<Output = ()>,
    store: Arc<S>,
    gates: Arc<Gates>,
    grace: Duration,
) {
    signal.await;
    gates.start_drain();
    let deadline = tokio::time::Instant::now() + grace;
    let mut said = false;
    loop {
        if store.shared() {
            // Whether Redis answers or not, the tickets live there, not here.
            tracing::info!(
                "drained: the admitted tickets live in the shared store, and the other replicas \
                 serve them"
            );
            break;
        }
        let left = match store.in_flight_here().await {
            Ok(0) => {
                tracing::info!("drained: no admitted ticket left");
                break;
            }
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("draining: cannot count the admitted tickets: {e}");
                u64::MAX
            }
        };
        if !said && left != u64::MAX {
            said = true;
            tracing::info!(
                left,
                grace_ms = grace.as_millis() as u64,
                "draining: waiting for {left} admitted ticket(s) to be released, at most the \
                 drain grace"
            );
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                left,
                grace_ms = grace.as_millis() as u64,
                "drain grace over with tickets still admitted; stopping"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gates.close_streams();
    // Let the streams send their UNAVAILABLE and clients read it before the server starts
    // closing connections: a socket closed with a client's late frames unread is reset, and a
    // reset can reach the client before the status it has not read yet (seen under load as a
    // stream ending with UNKNOWN). Bounded: at most a second, plus a moment to flush.
    let until = tokio::time::Instant::now() + Duration::from_secs(1);
    while gates.open_streams() > 0 && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Once a bucket, in its middle (so a late tick still falls in it), each host's gauges and
/// counters into its history: the first `max_hosts` hosts by name. A host the store cannot
/// read this time has a longer bucket next time.
async fn sample_history<S: Store>(store: Arc<S>, shape: history::Shape) {
    if shape.max_hosts == 0 {
        return;
    }
    let width = shape.bucket_ms.max(1);
    loop {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut next = now / width * width + width / 2;
        if next <= now {
            next += width;
        }
        tokio::time::sleep(Duration::from_millis(next - now)).await;
        let Ok(mut hosts) = store.host_ids().await else {
            continue;
        };
        hosts.sort_unstable();
        hosts.truncate(shape.max_hosts);
        for host in hosts {
            if let Ok(stats) = store.stats(&host).await
                && let Err(e) = store
                    .record_history(&host, &history::Counts::of(&stats), &shape)
                    .await
            {
                tracing::debug!(host_id = %host, "history: a sample was not kept: {e}");
            }
        }
    }
}

/// Sweep a little faster than the shortest lease can run out, within 5 ms..1 s. Operations
/// expire due leases of their own host first, so the sweep only bounds how late an idle host
/// notices an expiry.
fn sweep_interval(shortest_lease_ms: u64) -> Duration {
    Duration::from_millis((shortest_lease_ms / 10).clamp(5, 1000))
}

/// The periodic sweep. A store outage is logged when it starts (with its cause and address),
/// when its cause changes, at most once a minute while it lasts, and when it ends: not once
/// per sweep.
async fn sweep<S: Store>(store: Arc<S>, every: Duration, rate_limits: Arc<LiveRateLimits>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut outage: Option<(String, tokio::time::Instant)> = None;
    loop {
        tick.tick().await;
        let domains: Vec<String> = rate_limits
            .get()
            .rules
            .domains()
            .map(|d| d.domain.clone())
            .collect();
        let swept = match store.sweep().await {
            Ok(()) => store.sweep_rate_limits(&domains).await,
            Err(e) => Err(e),
        };
        match swept {
            Ok(()) => {
                if outage.take().is_some() {
                    tracing::info!("store reachable again");
                }
            }
            Err(e) => {
                let text = e.to_string();
                let now = tokio::time::Instant::now();
                let say = match &outage {
                    Some((last, at)) => *last != text || now - *at >= Duration::from_secs(60),
                    None => true,
                };
                if say {
                    tracing::warn!("lease sweep failed: {text}");
                    outage = Some((text, now));
                }
            }
        }
    }
}

/// Refuse new tickets while the authority's own resident memory is at its ceiling, rather than
/// be killed by the OOM killer with every slot in its memory. Reads /proc through sysinfo once
/// a second; `max_rss_mb` 0 turns it off.
async fn watch_own_memory(gates: Arc<Gates>, max_rss_mb: u64) {
    if max_rss_mb == 0 {
        return;
    }
    use sysinfo::{ProcessRefreshKind, ProcessesToUpdate, System};
    let pid = sysinfo::Pid::from_u32(std::process::id());
    let mut system = match System::new() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(
                "cannot read the authority's own memory, authority.max_rss_mb is off: {e}"
            );
            return;
        }
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[pid]),
            true,
            ProcessRefreshKind::nothing().with_memory(),
        );
        let Some(rss_mb) = system.process(pid).map(|p| p.memory() / (1024 * 1024)) else {
            continue;
        };
        let full = rss_mb >= max_rss_mb;
        if gates.authority_memory_full.swap(full, Ordering::Relaxed) != full {
            if full {
                tracing::warn!(
                    rss_mb,
                    max_rss_mb,
                    "authority memory at its ceiling: refusing new tickets"
                );
            } else {
                tracing::info!(
                    rss_mb,
                    max_rss_mb,
                    "authority memory below its ceiling again"
                );
            }
        }
    }
}

/// On every SIGHUP, read the configuration again and apply what can change while serving: the
/// scheduling limits, the rate limits (with `rate_limits.config_dir`'s files read again) and
/// the HTTP admission policies (a request in flight keeps the policy it began under).
/// Every other key keeps its running value until a restart (logged by name when it changed);
/// an invalid file (or rate limit file) is logged with every problem and changes nothing.
async fn reload_on_sighup<S: Store>(
    store: Arc<S>,
    mut running: Config,
    reload: Reload,
    rate_limits: Arc<LiveRateLimits>,
    policies: Arc<LivePolicies>,
) {
    #[cfg(unix)]
    {
        let Reload { mut hangup, load } = reload;
        while hangup.recv().await.is_some() {
            let new = match load() {
                Ok(c) => c,
                Err(errors) => {
                    tracing::error!(
                        problems = %errors.0.join("; "),
                        "configuration not reloaded: the file has problems; the running \
                         configuration stays"
                    );
                    continue;
                }
            };
            let (mut applied, restart) = crate::config::changed_keys(&running, &new);
            store.reload_file_limits(new.limits.clone());
            running.limits = new.limits.clone();
            if new.rate_limits != running.rate_limits {
                rate_limits.set(new.rate_limits.policy.clone());
                running.rate_limits = new.rate_limits.clone();
                if !applied.iter().any(|k| k.starts_with("rate_limits")) {
                    // A change inside config_dir's files shows in no key of the file.
                    applied.push("rate_limits.config_dir".into());
                }
            }
            if new.http_admission != running.http_admission {
                policies.replace(new.http_admission.clone());
                running.http_admission = new.http_admission.clone();
            }
            tracing::info!(
                changed = %applied.join(", "),
                domains = rate_limits.get().rules.domains().count(),
                http_policies = policies.get().policies.len(),
                "configuration reloaded: scheduling limits, rate limits and HTTP admission \
                 policies applied"
            );
            if !restart.is_empty() {
                tracing::warn!(
                    keys = %restart.join(", "),
                    "these changed keys take effect only after a restart"
                );
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (store, running, reload, rate_limits, policies);
    }
}
