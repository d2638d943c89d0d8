//! The adaptive-cap scenario, shared by the load generator (`loadgen --only adaptive`) and the
//! test with smaller numbers (`tests/adaptive.rs`), which include this file.
//!
//! A fake model provider (a real HTTP server on a loopback port) answers 429 at once whenever
//! more than N calls are in flight and otherwise answers 200 after `call_ms`. A fleet of runs,
//! spread over the authority replicas given, loops: Submit bound to the provider's account,
//! wait for admission, call the provider, Release with the outcome (429 → RATE_LIMITED, 200 →
//! OK) and the latency. The account's adaptive cap is sampled from GetStats as it moves. N
//! changes between phases. Every loop is bounded by the phases' durations.
#![allow(clippy::disallowed_types, reason = "the scenario runs in real time")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use admission_authority::api::{self, admission_client::AdmissionClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::StreamExt;
use tonic::transport::Channel;

/// A fake provider on 127.0.0.1: refuses (429) beyond `limit` concurrent calls.
pub struct Provider {
    pub addr: std::net::SocketAddr,
    pub limit: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Provider {
    pub async fn start(limit: usize, call_ms: u64) -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let limit = Arc::new(AtomicUsize::new(limit));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let l = limit.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (l, in_flight) = (l.clone(), in_flight.clone());
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let mut head = Vec::new();
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    let status = if now > l.load(Ordering::SeqCst) {
                        "429 Too Many Requests"
                    } else {
                        tokio::time::sleep(Duration::from_millis(call_ms)).await;
                        "200 OK"
                    };
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    let reply = format!(
                        "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                });
            }
        });
        Provider { addr, limit, task }
    }
}

/// One call to the provider: its HTTP status (0 when the connection failed).
async fn call(addr: std::net::SocketAddr) -> u16 {
    let Ok(mut conn) = TcpStream::connect(addr).await else {
        return 0;
    };
    if conn
        .write_all(b"POST /v1/messages HTTP/1.1\r\nhost: provider\r\ncontent-length: 0\r\n\r\n")
        .await
        .is_err()
    {
        return 0;
    }
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while got.len() < 12 {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    std::str::from_utf8(got.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A stretch of the run with the provider refusing beyond `limit` calls.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    pub limit: usize,
    pub seconds: f64,
}

/// What a phase came to.
#[derive(Clone, Debug, Default)]
pub struct PhaseFigures {
    pub limit: usize,
    pub seconds: f64,
    /// Seconds from the phase's start until the cap is within limit ± 1 and stays so for the
    /// rest of the phase, above the limit only in single samples (a probe); `None`: never.
    pub converged_after: Option<f64>,
    /// Of the samples after convergence, the share within limit ± 1.
    pub within_share: f64,
    /// The cap's mean after convergence.
    pub mean_cap: f64,
    /// Calls after convergence: answered 200, answered 429.
    pub ok: u64,
    pub limited: u64,
    /// Seconds after convergence (the span `ok` and `limited` were counted over).
    pub counted_seconds: f64,
}

/// One sample: seconds since the start, the cap in force, the provider's limit then.
pub type Sample = (f64, u32, usize);

/// Run the fleet over `phases` against `provider`: `runs` concurrent runs spread over
/// `channels` (one per authority replica), bound to `account` on `host`; the cap is sampled
/// every `sample_ms`. Returns every sample and each phase's figures. With `adaptive` false the
/// account's cap is fixed (a baseline), and convergence is not looked for.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    provider: &Provider,
    channels: &[Channel],
    host: &str,
    account: &str,
    runs: usize,
    phases: &[Phase],
    sample_ms: u64,
    adaptive: bool,
) -> (Vec<Sample>, Vec<PhaseFigures>) {
    let total: f64 = phases.iter().map(|p| p.seconds).sum();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(total);
    // Calls answered per tenth of a second: (ok, limited).
    let buckets = Arc::new(
        (0..(total * 10.0) as usize + 2)
            .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
            .collect::<Vec<_>>(),
    );
    let mut tasks = Vec::new();
    for w in 0..runs {
        let mut client = AdmissionClient::new(channels[w % channels.len()].clone());
        let (host, account, buckets, addr) = (
            host.to_string(),
            account.to_string(),
            buckets.clone(),
            provider.addr,
        );
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while Instant::now() < deadline {
                i += 1;
                let Ok(r) = client
                    .submit(api::SubmitRequest {
                        host_id: host.clone(),
                        instance_id: format!("fleet-{}", w % 2),
                        subject: format!("run-{w}"),
                        account_id: account.clone(),
                        run_id: format!("adaptive-{w}-{i}"),
                        mode: api::SubmitMode::Queue as i32,
                        rss_mb: None,
                        priority: 0,
                        resubmit_expired: false,
                        ..Default::default()
                    })
                    .await
                else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let r = r.into_inner();
                if r.state == api::TicketState::Queued as i32 {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let admitted = tokio::time::timeout(left, async {
                        let mut events = client
                            .wait(api::WaitRequest {
                                ticket_id: r.ticket_id.clone(),
                            })
                            .await
                            .ok()?
                            .into_inner();
                        while let Some(Ok(e)) = events.next().await {
                            if e.state != api::TicketState::Queued as i32 {
                                return Some(e.state == api::TicketState::Admitted as i32);
                            }
                        }
                        None
                    })
                    .await;
                    if admitted != Ok(Some(true)) {
                        let _ = client
                            .release(api::ReleaseRequest {
                                ticket_id: r.ticket_id,
                                ..Default::default()
                            })
                            .await;
                        continue;
                    }
                }
                let t = Instant::now();
                let status = call(addr).await;
                let latency = t.elapsed().as_millis() as u32;
                let outcome = match status {
                    200 => api::Outcome::Ok,
                    429 => api::Outcome::RateLimited,
                    _ => api::Outcome::Overloaded,
                };
                let tenth = (start.elapsed().as_secs_f64() * 10.0) as usize;
                if let Some((ok, limited)) = buckets.get(tenth) {
                    match status {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        _ => limited.fetch_add(1, Ordering::Relaxed),
                    };
                }
                let _ = client
                    .release(api::ReleaseRequest {
                        ticket_id: r.ticket_id,
                        outcome: outcome as i32,
                        latency_ms: Some(latency),
                        ..Default::default()
                    })
                    .await;
            }
        }));
    }
    // Phases and samples.
    let mut stats = AdmissionClient::new(channels[0].clone());
    let mut samples: Vec<Sample> = Vec::new();
    let mut bounds = Vec::new();
    let mut phase_start = 0.0;
    for p in phases {
        provider.limit.store(p.limit, Ordering::SeqCst);
        let end = phase_start + p.seconds;
        while start.elapsed().as_secs_f64() < end {
            let t = start.elapsed().as_secs_f64();
            if let Ok(s) = stats
                .get_stats(api::GetStatsRequest {
                    host_id: host.to_string(),
                })
                .await
            {
                let cap = s
                    .into_inner()
                    .accounts
                    .iter()
                    .find(|a| a.account_id == account)
                    .map(|a| a.cap);
                if let Some(cap) = cap {
                    samples.push((t, cap, p.limit));
                }
            }
            tokio::time::sleep(Duration::from_millis(sample_ms)).await;
        }
        bounds.push((phase_start, end, *p));
        phase_start = end;
    }
    for t in tasks {
        let _ = t.await;
    }
    let figures = bounds
        .into_iter()
        .map(|(from, to, p)| figures(&samples, &buckets, from, to, p, adaptive))
        .collect();
    (samples, figures)
}

fn figures(
    samples: &[Sample],
    buckets: &[(AtomicU64, AtomicU64)],
    from: f64,
    to: f64,
    p: Phase,
    adaptive: bool,
) -> PhaseFigures {
    let within = |cap: u32| (cap as i64 - p.limit as i64).abs() <= 1;
    let phase: Vec<&Sample> = samples.iter().filter(|s| s.0 >= from && s.0 < to).collect();
    // The first sample from which every sample is within limit ± 1, and none starts three in
    // a row above the limit: a probe one above it lasts until the provider's next refusal
    // comes back, which on a loaded machine can span two 100 ms samples; a cap that stays
    // above is not settled.
    let above = |i: usize| phase.get(i).is_some_and(|s| s.1 as usize > p.limit);
    let settled = |i: usize| within(phase[i].1) && !(above(i) && above(i + 1) && above(i + 2));
    let converged = if adaptive {
        (0..phase.len()).rev().take_while(|&i| settled(i)).last()
    } else {
        Some(0)
    };
    let mut f = PhaseFigures {
        limit: p.limit,
        seconds: p.seconds,
        ..PhaseFigures::default()
    };
    let Some(i) = converged.filter(|&i| phase[i].0 < to - 1.0) else {
        return f;
    };
    let since = phase[i].0;
    f.converged_after = Some(since - from);
    let after = &phase[i..];
    f.within_share = after.iter().filter(|s| within(s.1)).count() as f64 / after.len() as f64;
    f.mean_cap = after.iter().map(|s| f64::from(s.1)).sum::<f64>() / after.len() as f64;
    let (a, b) = ((since * 10.0).ceil() as usize, (to * 10.0) as usize);
    for (ok, limited) in buckets.get(a..b.min(buckets.len())).unwrap_or_default() {
        f.ok += ok.load(Ordering::Relaxed);
        f.limited += limited.load(Ordering::Relaxed);
    }
    f.counted_seconds = (b - a) as f64 / 10.0;
    f
}
