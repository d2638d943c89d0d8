//! Load generator: starts the release `admission-authority` binary on a loopback port with a
//! benchmark configuration, drives it over gRPC, prints a table, and stops the server by its
//! PID. Every figure is paired with a baseline measured in the same run (plain
//! `grpc.health.v1.Health/Check` calls), because this machine is shared and noisy.
//!
//! Run with `scripts/bench` (builds the binary and this example in release mode first), or:
//! `cargo build --release --bins --examples && target/release/examples/loadgen [--seconds N]`.
//!
//! Traffic goes only to 127.0.0.1, and every loop is bounded by a duration or a count.
#![allow(
    clippy::disallowed_types,
    reason = "the load generator measures wall time"
)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use admission_authority::api::{self, admission_client::AdmissionClient};

#[path = "../shared/adaptive_scenario.rs"]
mod adaptive_scenario;
#[path = "../shared/console_scenario.rs"]
mod console_scenario;
#[path = "../shared/ratelimit_scenario.rs"]
mod ratelimit_scenario;

mod acked;
mod adaptive;
mod console;
mod durable;
mod envoy;
mod keys;
mod on_redis;
mod ratelimit;
use tokio::sync::Mutex;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

const CONFIG: &str = r#"
scheduling:
  total: 100000
  per_subject: 100000
  queue: { total: 0 }
  lease_ttl: 10m
  retention: 1s
hosts:
  crowded-small:
    scheduling: { total: 64, queue: { total: 200000, hard_total: 200000 } }
  crowded:
    scheduling: { total: 64, queue: { total: 200000, hard_total: 200000 } }
  streams:
    scheduling: { total: 1, queue: { total: 20000, hard_total: 20000 } }
  # The free host's limits with weights and priority aging in force (cycles there use
  # priorities 1..5).
  weighted:
    scheduling:
      subjects: { s0: { weight: 5 }, s1: { weight: 3 }, s2: { weight: 2 }, s3: { weight: 8 } }
      priority_aging: 30s
  # Bound to accounts, releases reporting outcomes: with adaptive account caps, and without.
  bound:
    scheduling: { per_account: 100000 }
  bound-adaptive:
    scheduling: { adaptive: { max: 100000 } }
  # The wait-estimate scenario: 8 slots, a closed loop of 24 runs.
  eta:
    scheduling: { total: 8, per_subject: 8, queue: { total: 1000, hard_total: 1000 } }
resources:
  default: { max_tokens: 1000000000, unknown_usage: reject }
allowances:
  bench-account: { tokens: 1000000000000, window: 24h }
auth:
  local_max_keys: 200000
  buckets:
    bench: { max_attempts: 1000000, window: 1h, lockout: 0s }
"#;

/// Distinct identities in the auth table while CheckAuthAttempt is measured.
const AUTH_IDENTITIES: u64 = 100_000;
/// Open (authorized, unsettled) reservations on the host while Authorize+Settle is measured
/// the second time.
const OPEN_RESERVATIONS: u64 = 100_000;

struct Args {
    seconds: f64,
    rounds: usize,
    concurrency: Vec<usize>,
    /// `--only durable`'s concurrency: 64, or the first of `--concurrency`.
    durable_concurrency: usize,
    streams: usize,
    /// Also measure a server on this Redis against the in-memory one.
    redis_url: Option<String>,
    /// `--only NAME`: one scenario alone ([`Only`]); none: the whole run.
    only: Option<Only>,
    /// `store.redis.pool_size` of the server on Redis (default: the server's default).
    redis_pool: Option<u32>,
    /// `--soak SECONDS`: only the soak scenario, for that long per store.
    soak: Option<f64>,
    /// `--csv PATH`: the adaptive scenario's samples (seconds, cap, provider limit) as CSV.
    csv: Option<PathBuf>,
}

/// The scenarios `--only` runs alone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Only {
    /// `redis`: the Redis comparison, e.g. while tuning the Redis store.
    Redis,
    /// `wake`: the Wait-stream wake-up scenario.
    Wake,
    /// `eta`: the wait-estimate scenario.
    Eta,
    /// `adaptive`: the adaptive-cap scenario (needs `--redis-url`).
    Adaptive,
    /// `rules`: the cycles with priorities, weights and adaptive caps against those without,
    /// on the embedded store.
    Rules,
    /// `durable`: the data-dir scenarios (cycles per sync policy, a restart).
    Durable,
    /// `durable-cpu`: the CPU per cycle of each sync policy against in memory, the two servers
    /// loaded at the same moment.
    DurableCpu,
    /// `console`: the cost of an open console refreshing every second.
    Console,
    /// `ratelimit`: Envoy's rate limit service (and on Redis with `--redis-url`).
    RateLimit,
    /// `envoy`: a real Envoy with the external processing filter against without it.
    Envoy,
    /// `keys`: cycles with a key (serial, keep newest) against without, and a flood of keys.
    Keys,
    /// `acked`: cycles with `replicas_acked: 1` against without, on a Redis with one replica
    /// that it starts itself.
    Acked,
}

impl Only {
    fn parse(name: &str) -> Option<Only> {
        Some(match name {
            "redis" => Only::Redis,
            "wake" => Only::Wake,
            "eta" => Only::Eta,
            "adaptive" => Only::Adaptive,
            "rules" => Only::Rules,
            "durable" => Only::Durable,
            "durable-cpu" => Only::DurableCpu,
            "console" => Only::Console,
            "ratelimit" => Only::RateLimit,
            "envoy" => Only::Envoy,
            "keys" => Only::Keys,
            "acked" => Only::Acked,
            _ => return None,
        })
    }
}

const USAGE: &str = "usage: loadgen [--seconds 2] [--rounds 3] [--concurrency 1,16,64,256] [--streams 10000] [--redis-url URL] [--redis-pool N] [--only redis|wake|eta|adaptive|rules|durable|durable-cpu|console|ratelimit|envoy|keys] [--csv PATH] [--soak SECONDS]\n(see docs/benchmark.md)";

fn args() -> Args {
    let mut a = Args {
        seconds: 2.0,
        rounds: 3,
        concurrency: vec![1, 16, 64, 256],
        durable_concurrency: 64,
        streams: 10_000,
        redis_url: None,
        only: None,
        redis_pool: None,
        soak: None,
        csv: None,
    };
    let mut it = std::env::args();
    it.next(); // the program name
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--seconds" => a.seconds = value.parse().expect("--seconds N"),
            "--concurrency" => {
                a.concurrency = value
                    .split(',')
                    .map(|c| c.parse().expect("--concurrency 1,16,64"))
                    .collect();
                a.durable_concurrency = a.concurrency.first().copied().unwrap_or(64);
            }
            "--streams" => a.streams = value.parse().expect("--streams N"),
            "--rounds" => a.rounds = value.parse().expect("--rounds N"),
            "--redis-url" => a.redis_url = Some(value),
            "--only" => {
                a.only =
                    Some(Only::parse(&value).unwrap_or_else(|| unknown(&format!("{flag} {value}"))))
            }
            "--csv" => a.csv = Some(PathBuf::from(value)),
            "--redis-pool" => a.redis_pool = Some(value.parse().expect("--redis-pool N")),
            "--soak" => a.soak = Some(value.parse().expect("--soak SECONDS")),
            _ => unknown(&flag),
        }
    }
    a
}

/// An option, or `--only` value, this load generator does not know: say so, and stop.
fn unknown(flag: &str) -> ! {
    eprintln!("loadgen: unknown option {flag}\n{USAGE}");
    std::process::exit(2);
}

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(config: &std::path::Path) -> Server {
        Server::start_with(config, &[])
    }

    fn start_with(config: &std::path::Path, extra: &[&str]) -> Server {
        let exe = std::env::current_exe().unwrap();
        let bin: PathBuf = exe
            .parent()
            .and_then(|examples| examples.parent())
            .map(|dir| dir.join("admission-authority"))
            .unwrap();
        let mut command = Command::new(&bin);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(config)
            .args(extra)
            .env("RUST_LOG", "warn");
        Server::spawn(command)
    }

    /// Runs `command`, which prints `listening on ADDR` as its first line.
    fn spawn(mut command: Command) -> Server {
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap_or_else(|e| {
            panic!(
                "start {:?}: {e} (build it with --release --bins)",
                command.get_program()
            )
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_string();
        Server { child, addr }
    }

    /// CPU seconds the server has used so far (user + system), from /proc.
    fn cpu_secs(&self) -> f64 {
        cpu_secs_of(self.child.id())
    }

    fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: f64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap();
        kb / 1024.0
    }
}

/// CPU seconds process `pid` has used so far (user + system), from /proc.
fn cpu_secs_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses): utime is the 12th, stime
    // the 13th; both in clock ticks of 1/100 s on Linux.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    (f[11] + f[12]) / 100.0
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Requests/s and latency percentiles of one measurement.
struct Figures {
    /// Server CPU microseconds per operation, when measured.
    cpu_us: Option<f64>,
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn figures(ops: u64, elapsed: Duration, mut lat_us: Vec<u32>) -> Figures {
    lat_us.sort_unstable();
    let pct = |p: f64| {
        if lat_us.is_empty() {
            0.0
        } else {
            lat_us[((lat_us.len() - 1) as f64 * p) as usize] as f64 / 1000.0
        }
    };
    Figures {
        cpu_us: None,
        rate: ops as f64 / elapsed.as_secs_f64(),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
    }
}

async fn channels(addr: &str, n: usize) -> Vec<Channel> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            Channel::from_shared(format!("http://{addr}"))
                .unwrap()
                .initial_connection_window_size(16 * 1024 * 1024)
                .connect()
                .await
                .unwrap(),
        );
    }
    out
}

fn submit(host: &str, subject: String, run: String, mode: api::SubmitMode) -> api::SubmitRequest {
    api::SubmitRequest {
        host_id: host.into(),
        instance_id: "loadgen".into(),
        subject,
        account_id: String::new(),
        run_id: run,
        mode: mode as i32,
        rss_mb: None,
        priority: 0,
        resubmit_expired: false,
        ..Default::default()
    }
}

/// Run `op` from `concurrency` tasks for `seconds`; the latency recorded is the op's, and
/// `op` returns how many latencies it measured (to time the first RPC of a cycle alone).
async fn drive<F, Fut>(concurrency: usize, seconds: f64, op: F) -> (Figures, Figures)
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = (Duration, Duration)> + Send,
{
    let op = Arc::new(op);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut first = Vec::new();
            let mut whole = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let (a, b) = op(worker, i).await;
                first.push(a.as_micros() as u32);
                whole.push(b.as_micros() as u32);
                i += 1;
            }
            (first, whole)
        }));
    }
    let mut first = Vec::new();
    let mut whole = Vec::new();
    for t in tasks {
        let (a, b) = t.await.unwrap();
        first.extend(a);
        whole.extend(b);
    }
    let elapsed = start.elapsed();
    let n = whole.len() as u64;
    (figures(n, elapsed, first), figures(n, elapsed, whole))
}

async fn health_check(chans: &[Channel], c: usize, seconds: f64) -> Figures {
    let chans = chans.to_vec();
    drive(c, seconds, move |w, _| {
        let mut h = HealthClient::new(chans[w % chans.len()].clone());
        async move {
            let t = Instant::now();
            h.check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap();
            let d = t.elapsed();
            (d, d)
        }
    })
    .await
    .1
}

/// Call `op(client, i)` once for every `i` in `0..n`, from 64 tasks, and wait for all.
async fn fill<F, Fut>(chans: &[Channel], n: u64, op: F)
where
    F: Fn(AdmissionClient<Channel>, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let mut tasks = Vec::new();
    for w in 0..64u64 {
        let c = AdmissionClient::new(chans[w as usize % chans.len()].clone());
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < n {
                op(c.clone(), i).await;
                i += 64;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// One CheckAuthAttempt for each of the identities `0..AUTH_IDENTITIES`, so the table holds
/// them all before it is measured.
async fn seed_auth(chans: &[Channel]) {
    fill(chans, AUTH_IDENTITIES, |mut c, i| async move {
        let r = c
            .check_auth_attempt(auth_req(i))
            .await
            .unwrap()
            .into_inner();
        assert!(r.allowed, "seeding identity {i}: {r:?}");
    })
    .await;
}

fn auth_req(identity: u64) -> api::AuthAttemptRequest {
    api::AuthAttemptRequest {
        endpoint: "bench".into(),
        identity: format!("user-{identity}@example.com"),
        ..Default::default()
    }
}

/// CheckAuthAttempt on identities spread over the seeded table (a multiplicative hash of the
/// worker and call number, so workers do not walk the same keys in step).
async fn auth_attempts(chans: &[Channel], c: usize, seconds: f64) -> Figures {
    let chans = chans.to_vec();
    drive(c, seconds, move |w, i| {
        let mut client = AdmissionClient::new(chans[w % chans.len()].clone());
        let identity = ((w as u64) << 32 | i).wrapping_mul(0x9E37_79B9_7F4A_7C15) % AUTH_IDENTITIES;
        async move {
            let t = Instant::now();
            let r = client
                .check_auth_attempt(auth_req(identity))
                .await
                .unwrap()
                .into_inner();
            assert!(r.allowed, "{r:?}");
            let d = t.elapsed();
            (d, d)
        }
    })
    .await
    .1
}

fn authorize_req(run: String) -> api::AuthorizeRequest {
    api::AuthorizeRequest {
        host_id: "ledger".into(),
        run_id: run,
        step: 1,
        subject: "bench".into(),
        account_id: "bench-account".into(),
        model: "model-a".into(),
        requested_output_tokens: 1_000,
        estimated_input_tokens: 2_000,
        estimated_cost_usd: 0.0,
    }
}

/// Authorize then Settle a one-step run on host `ledger`; returns (Authorize alone, the pair).
async fn authorize_settle(
    chans: &[Channel],
    c: usize,
    seconds: f64,
    tag: &'static str,
) -> (Figures, Figures) {
    let chans = chans.to_vec();
    drive(c, seconds, move |w, i| {
        let mut client = AdmissionClient::new(chans[w % chans.len()].clone());
        async move {
            let run = format!("{tag}-{w}-{i}");
            let t = Instant::now();
            let a = client
                .authorize(authorize_req(run.clone()))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(a.decision, api::Decision::Allow as i32, "{a:?}");
            let first = t.elapsed();
            client
                .settle(api::SettleRequest {
                    host_id: "ledger".into(),
                    run_id: run,
                    step: 1,
                    usage: Some(api::Usage {
                        input_tokens: 1_900,
                        output_tokens: 700,
                        cost_usd: 0.0123,
                        coverage: api::Coverage::Complete as i32,
                    }),
                })
                .await
                .unwrap();
            (first, t.elapsed())
        }
    })
    .await
}

/// Authorize `OPEN_RESERVATIONS` one-step runs on host `ledger` and never settle them.
async fn open_reservations(chans: &[Channel]) {
    fill(chans, OPEN_RESERVATIONS, |mut c, i| async move {
        c.authorize(authorize_req(format!("open-{i}")))
            .await
            .unwrap();
    })
    .await;
}

/// Submit then Release, on `host` (priorities 1..5 in turn on the `weighted` host); returns
/// (Submit alone, whole cycle).
async fn submit_release(
    chans: &[Channel],
    host: &'static str,
    mode: api::SubmitMode,
    c: usize,
    seconds: f64,
    tag: &'static str,
) -> (Figures, Figures) {
    let chans = chans.to_vec();
    drive(c, seconds, move |w, i| {
        let mut client = AdmissionClient::new(chans[w % chans.len()].clone());
        async move {
            let t = Instant::now();
            let mut req = submit(
                host,
                format!("s{}", w % 500),
                format!("{tag}-{w}-{i}"),
                mode,
            );
            // The rules' hosts: priorities in turn; runs bound to accounts that report outcomes.
            let bound = host.starts_with("bound");
            if host == "weighted" {
                req.priority = 1 + (i % 5) as u32;
            }
            // The keys' host: one conversation per worker, the newest message winning.
            if host == "keyed" {
                req.key = format!("conversation-{w}");
                req.key_policy = api::KeyPolicy::SerialKeepNewest as i32;
            }
            if bound {
                req.account_id = format!("acct-{}", w % 50);
            }
            let r = client
                .submit(req)
                .await
                .expect("submit on a free host")
                .into_inner();
            let s = t.elapsed();
            let mut release = api::ReleaseRequest {
                ticket_id: r.ticket_id,
                ..Default::default()
            };
            if bound {
                release.outcome = api::Outcome::Ok as i32;
                release.latency_ms = Some(40);
            }
            client.release(release).await.unwrap();
            (s, t.elapsed())
        }
    })
    .await
}

/// A rule's cost: Submit+Release cycles at 64 on `with_rule` against `plain`, alternating
/// rounds (priorities and weights: `weighted` against `free`; adaptive caps, every Release
/// reporting OK: `bound-adaptive` against `bound`, 50 accounts). The median ratio and its
/// round's figures (plain, with the rule).
async fn rule_cycles(
    server: &Server,
    chans: &[Channel],
    rounds: usize,
    seconds: f64,
    (plain, with_rule): (&'static str, &'static str),
    tag: &'static str,
) -> (f64, (Figures, Figures)) {
    let cycles = |host| {
        metered(
            server,
            submit_release(chans, host, api::SubmitMode::Queue, 64, seconds, tag),
            move |(_, f)| f.rate * seconds,
            |(_, f), u| f.cpu_us = Some(u),
        )
    };
    let mut out = Vec::new();
    for _ in 0..rounds {
        let (_, p) = cycles(plain).await;
        let (_, r) = cycles(with_rule).await;
        out.push((r.rate / p.rate, (p, r)));
    }
    median(out)
}

/// The hosts `rule_cycles` compares.
const WEIGHTS: (&str, &str) = ("free", "weighted");
const ADAPTIVE: (&str, &str) = ("bound", "bound-adaptive");

/// The wait estimate against the wait: a closed loop of 24 runs on the `eta` host (8 slots),
/// each holding its slot 80..120 ms (spread evenly), for `seconds`. Every Submit that queued
/// records its eta_ms and the wait until its Wait stream said ADMITTED; the first second is
/// warm-up. Returns the samples and the median of |eta - wait| / wait.
async fn eta_accuracy(chans: &[Channel], seconds: f64) -> (usize, f64, f64) {
    let chans = chans.to_vec();
    let start = Instant::now();
    let warm = Duration::from_secs(1);
    let deadline = start + warm + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for w in 0..24usize {
        let mut client = AdmissionClient::new(chans[w % chans.len()].clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                let r = client
                    .submit(submit(
                        "eta",
                        format!("s{w}"),
                        format!("eta-{w}-{i}"),
                        api::SubmitMode::Queue,
                    ))
                    .await
                    .expect("submit on the eta host")
                    .into_inner();
                if r.state == api::TicketState::Queued as i32 {
                    let mut events = client
                        .wait(api::WaitRequest {
                            ticket_id: r.ticket_id.clone(),
                        })
                        .await
                        .unwrap()
                        .into_inner();
                    while let Some(e) = events.next().await {
                        if e.unwrap().state != api::TicketState::Queued as i32 {
                            break;
                        }
                    }
                    if t > start + warm {
                        samples.push((f64::from(r.eta_ms), t.elapsed().as_secs_f64() * 1000.0));
                    }
                }
                // Holds of 80..120 ms, spread evenly over the runs and their turns.
                let hold = 80 + (w as u64 * 7 + i * 13) % 41;
                tokio::time::sleep(Duration::from_millis(hold)).await;
                client
                    .release(api::ReleaseRequest {
                        ticket_id: r.ticket_id,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                i += 1;
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.unwrap());
    }
    let mut errors: Vec<f64> = samples
        .iter()
        .filter(|(_, wait)| *wait > 0.0)
        .map(|(eta, wait)| (eta - wait).abs() / wait)
        .collect();
    errors.sort_by(f64::total_cmp);
    let mut waits: Vec<f64> = samples.iter().map(|(_, w)| *w).collect();
    waits.sort_by(f64::total_cmp);
    let median_of = |v: &[f64]| v.get(v.len() / 2).copied().unwrap_or(f64::NAN);
    (samples.len(), median_of(&errors), median_of(&waits))
}

/// Fill `host` (total 64) with 64 admitted tickets and `queued` waiters over `subjects`
/// subjects, then release `releases` admitted tickets from 64 tasks: each release dispatches
/// the next waiter in round-robin order, which the loadgen predicts (every waiter is
/// eligible) so that it only ever releases admitted tickets.
/// A crowded host: the admitted tickets the loadgen may release, and the waiters in the order
/// dispatch will admit them.
type Crowd = Arc<Mutex<(Vec<String>, std::vec::IntoIter<String>)>>;

/// Returns the crowd and the rate of the concurrent (queued) Submits that filled it.
async fn crowd(
    chans: &[Channel],
    host: &'static str,
    queued: usize,
    subjects: usize,
) -> (Crowd, Figures) {
    let mut admitted = Vec::new();
    // Per subject, its waiters in queue order; and the rotation: subjects in the order their
    // first waiter arrived.
    let mut by_subject: Vec<Vec<String>> = vec![Vec::new(); subjects];
    let mut rotation_order: Vec<usize> = Vec::new();
    let total = 64 + queued;
    let one = |n: usize| {
        let chan = chans[n % chans.len()].clone();
        async move {
            let r = AdmissionClient::new(chan)
                .submit(submit(
                    host,
                    format!("subject-{}", n % subjects),
                    format!("fill-{n}"),
                    api::SubmitMode::Queue,
                ))
                .await
                .unwrap()
                .into_inner();
            (n, r)
        }
    };
    let mut record = |n: usize, r: api::SubmitResponse| {
        if r.state == api::TicketState::Admitted as i32 {
            admitted.push(r.ticket_id);
        } else {
            let s = n % subjects;
            if by_subject[s].is_empty() {
                rotation_order.push(s);
            }
            by_subject[s].push(r.ticket_id);
        }
    };
    // One by one until every subject has a waiter (that fixes the rotation order), then in
    // concurrent batches holding at most one ticket per subject (that keeps each subject's
    // queue order known).
    let mut n = 0;
    while n < total.min(64 + subjects) {
        let (n2, r) = one(n).await;
        record(n2, r);
        n += 1;
    }
    let batch = subjects.min(256);
    let fill_start = Instant::now();
    let fill_from = n;
    while n < total {
        let end = (n + batch).min(total);
        let handles: Vec<_> = (n..end).map(|i| tokio::spawn(one(i))).collect();
        for h in handles {
            let (n2, r) = h.await.unwrap();
            record(n2, r);
        }
        n = end;
    }
    let mut predicted = Vec::with_capacity(queued);
    let mut depth = 0;
    while predicted.len() < queued {
        for s in &rotation_order {
            if let Some(id) = by_subject[*s].get(depth) {
                predicted.push(id.clone());
            }
        }
        depth += 1;
    }
    let fill = figures((total - fill_from) as u64, fill_start.elapsed(), Vec::new());
    (
        Arc::new(Mutex::new((admitted, predicted.into_iter()))),
        fill,
    )
}

/// Release `releases` admitted tickets of a crowd from 64 tasks; each release dispatches the
/// next waiter.
async fn rotation(chans: &[Channel], pool: &Crowd, releases: usize) -> Figures {
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..64 {
        let pool = pool.clone();
        let done = done.clone();
        let mut c = AdmissionClient::new(chans[w % chans.len()].clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                if done.fetch_add(1, Ordering::Relaxed) >= releases as u64 {
                    return lat;
                }
                let id = pool.lock().await.0.pop().expect("an admitted ticket");
                let t = Instant::now();
                let r = c
                    .release(api::ReleaseRequest {
                        ticket_id: id,
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                lat.push(t.elapsed().as_micros() as u32);
                assert_eq!(
                    r.previous_state,
                    api::TicketState::Admitted as i32,
                    "prediction off"
                );
                let mut p = pool.lock().await;
                if let Some(next) = p.1.next() {
                    p.0.push(next);
                }
            }
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    figures(releases as u64, start.elapsed(), lat)
}

/// Open `n` Wait streams on queued tickets of host `streams` (total 1), then release the
/// admitted ticket `steps` times and time how long until the next waiter's stream says
/// ADMITTED. Returns (RSS MiB with the streams open, wake latency figures).
async fn wait_streams(
    server: &Server,
    chans: &[Channel],
    n: usize,
    steps: usize,
) -> (f64, f64, Figures) {
    let mut client = AdmissionClient::new(chans[0].clone());
    let holder = client
        .submit(submit(
            "streams",
            "holder".into(),
            "holder".into(),
            api::SubmitMode::Queue,
        ))
        .await
        .unwrap()
        .into_inner();
    let rss_before = server.rss_mib();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let mut ids = Vec::new();
    for i in 0..n {
        let mut c = AdmissionClient::new(chans[i % chans.len()].clone());
        let r = c
            .submit(submit(
                "streams",
                format!("w{}", i % 100),
                format!("w-{i}"),
                api::SubmitMode::Queue,
            ))
            .await
            .unwrap()
            .into_inner();
        ids.push(r.ticket_id.clone());
    }
    let opened = Arc::new(AtomicU64::new(0));
    for (i, id) in ids.iter().enumerate() {
        let mut c = AdmissionClient::new(chans[i % chans.len()].clone());
        let tx = tx.clone();
        let id = id.clone();
        let opened = opened.clone();
        tokio::spawn(async move {
            let mut s = c
                .wait(api::WaitRequest {
                    ticket_id: id.clone(),
                })
                .await
                .unwrap()
                .into_inner();
            opened.fetch_add(1, Ordering::Relaxed);
            while let Some(Ok(e)) = s.next().await {
                if e.state == api::TicketState::Admitted as i32 {
                    let _ = tx.send((id.clone(), Instant::now()));
                    return;
                }
            }
        });
    }
    let open_deadline = Instant::now() + Duration::from_secs(60);
    while (opened.load(Ordering::Relaxed) as usize) < n && Instant::now() < open_deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_open = server.rss_mib();
    let mut current = holder.ticket_id;
    let mut lat = Vec::new();
    let start = Instant::now();
    for _ in 0..steps.min(n) {
        let t = Instant::now();
        client
            .release(api::ReleaseRequest {
                ticket_id: current,
                ..Default::default()
            })
            .await
            .unwrap();
        let (next, at) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a waiter is woken")
            .unwrap();
        lat.push(at.duration_since(t).as_micros() as u32);
        current = next;
    }
    let f = figures(lat.len() as u64, start.elapsed(), lat);
    (rss_before, rss_open, f)
}

/// The round whose ratio is the median, so one noisy round does not decide a figure.
fn median<T>(mut rounds: Vec<(f64, T)>) -> (f64, T) {
    rounds.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mid = rounds.len() / 2;
    rounds.swap_remove(mid)
}

/// The median of `v`, its lowest and its highest value: a figure with the spread of its rounds.
fn spread(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    [v[v.len() / 2], v[0], v[v.len() - 1]]
}

/// The benchmark's configuration with the data dir synced under `policy`, written in `dir`.
fn sync_config(dir: &std::path::Path, policy: &str) -> PathBuf {
    let path = dir.join(format!("bench-{policy}.yaml"));
    let yaml = format!("{CONFIG}store:\n  embedded: {{ sync: {policy} }}\n");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The head of the table the rows ([`row`]) go in.
fn table_header() {
    println!(
        "| {:<58} | {:>4} | {:>9} | {:>7} | {:>7} | {:>9} |",
        "scenario", "conc", "ops/s", "p50 ms", "p99 ms", "srv µs/op"
    );
    println!(
        "|{:-<60}|{:->6}|{:->11}|{:->9}|{:->9}|{:->11}|",
        "", "", "", "", "", ""
    );
}

/// One scenario's figures as a row of the table.
fn row(name: &str, c: usize, f: &Figures) {
    let cpu = f
        .cpu_us
        .map_or_else(|| "-".to_string(), |c| format!("{c:.1}"));
    println!(
        "| {name:<58} | {c:>4} | {:>9.0} | {:>7.3} | {:>7.3} | {cpu:>9} |",
        f.rate, f.p50_ms, f.p99_ms
    );
}

/// Run a measurement and attach the server's CPU time per operation to its figures.
async fn metered<T>(
    server: &Server,
    fut: impl std::future::Future<Output = T>,
    ops: impl Fn(&T) -> f64,
    set: impl Fn(&mut T, f64),
) -> T {
    let before = server.cpu_secs();
    let mut out = fut.await;
    let used = server.cpu_secs() - before;
    let n = ops(&out);
    set(&mut out, used * 1e6 / n.max(1.0));
    out
}

#[tokio::main]
async fn main() {
    if std::env::args().nth(1).as_deref() == Some(envoy::SERVE_FLOOR) {
        return envoy::serve_floor().await;
    }
    let a = args();
    let dir = std::env::temp_dir().join(format!("admission-loadgen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Every scenario's servers are stopped when it returns; then its configs and data dirs go.
    run(&a, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// An embedded-store server on the standard configuration, and `n` channels to it.
async fn embedded(dir: &std::path::Path, n: usize) -> (Server, Vec<Channel>) {
    let config = dir.join("bench.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let server = Server::start(&config);
    let chans = channels(&server.addr, n).await;
    (server, chans)
}

/// `--only rules`: cycles with priorities, weights and adaptive caps against those without.
async fn rules(a: &Args, dir: &std::path::Path) {
    let (server, chans) = embedded(dir, 2).await;
    let (w, _) = rule_cycles(&server, &chans, a.rounds, a.seconds, WEIGHTS, "w").await;
    let (ad, _) = rule_cycles(&server, &chans, a.rounds, a.seconds, ADAPTIVE, "ad").await;
    println!(
        "embedded store: cycles with priorities, weights and aging {w:.2} × without ({}); reporting outcomes with adaptive caps {ad:.2} × without ({})",
        at_least(w, 0.95),
        at_least(ad, 0.95)
    );
}

/// `--only eta`: how far the wait estimates are from the waits.
async fn eta(a: &Args, dir: &std::path::Path) {
    let (_server, chans) = embedded(dir, 2).await;
    let (n, err, wait) = eta_accuracy(&chans, a.seconds.max(5.0)).await;
    println!(
        "wait estimate: median |eta - wait| / wait {:.0} % over {n} queued Submits (median wait {wait:.0} ms; {})",
        err * 100.0,
        at_most(err * 100.0, 25.0, " %")
    );
}

/// `--only wake`: how soon a Release wakes the next waiter among many Wait streams.
async fn wake(a: &Args, dir: &std::path::Path) {
    let (server, chans) = embedded(dir, 4).await;
    let (before, open, wake) = wait_streams(&server, &chans, a.streams, 1000).await;
    row(
        &format!("Release → next waiter's Wait event, {} streams", a.streams),
        1,
        &wake,
    );
    println!(
        "{} Wait streams: authority RSS {before:.0} MiB before, {open:.0} MiB with them open; wake p50 {:.3} ms, p99 {:.2} ms",
        a.streams, wake.p50_ms, wake.p99_ms
    );
}

/// The scenario the flags ask for.
async fn run(a: &Args, dir: &std::path::Path) {
    if let Some(seconds) = a.soak {
        durable::soak(a, dir, seconds).await;
        return;
    }
    match a.only {
        Some(Only::Adaptive) => return adaptive::adaptive(a, dir).await,
        Some(Only::Console) => return console::console(a, dir).await,
        Some(Only::RateLimit) => return ratelimit::rate_limits(a, dir).await,
        Some(Only::Envoy) => return envoy::envoy(a, dir).await,
        Some(Only::Keys) => return keys::keys(a, dir).await,
        Some(Only::Acked) => return acked::acked(a, dir).await,
        Some(Only::Durable) => return durable::durable(a, dir).await,
        Some(Only::DurableCpu) => return durable::durable_cpu(a, dir).await,
        Some(Only::Rules) => return rules(a, dir).await,
        Some(Only::Eta) => return eta(a, dir).await,
        Some(Only::Wake) => return wake(a, dir).await,
        Some(Only::Redis) | None => {}
    }
    let only_redis = a.only == Some(Only::Redis);
    let (server, chans) = embedded(dir, 2).await;
    println!(
        "admission-authority loadgen: server {} (pid {}), {} s per measurement\n",
        server.addr,
        server.child.id(),
        a.seconds
    );
    table_header();

    // Check and Submit+Release alternate, `rounds` times per concurrency; the round with the
    // median ratio is shown, so one noisy second does not decide a figure.
    let mut at64 = None;
    let concurrency = if only_redis {
        &[][..]
    } else {
        &a.concurrency[..]
    };
    for &c in concurrency {
        let secs = a.seconds;
        let mut rounds = Vec::new();
        for _ in 0..a.rounds {
            let check = metered(
                &server,
                health_check(&chans, c, secs),
                |f| f.rate * secs,
                |f, u| f.cpu_us = Some(u),
            )
            .await;
            let (sub, cycle) = metered(
                &server,
                submit_release(&chans, "free", api::SubmitMode::Queue, c, secs, "e"),
                |(_, f)| f.rate * secs,
                |(_, f), u| f.cpu_us = Some(u),
            )
            .await;
            rounds.push((cycle.rate / check.rate, (check, sub, cycle)));
        }
        let (ratio, (check, sub, cycle)) = median(rounds);
        row("health.Check (baseline)", c, &check);
        row("Submit+Release cycle", c, &cycle);
        row("  Submit alone (latency of the cycle's first RPC)", c, &sub);
        println!(
            "|   ratios: cycles/Check {ratio:.2}, Submit p99/Check p99 {:.2} {:>49} |",
            sub.p99_ms / check.p99_ms.max(0.001),
            ""
        );
        if c == 64 {
            at64 = Some((check, cycle));
        }
    }
    let mut weighted_summary = None;
    let mut adaptive_summary = None;
    let mut eta_summary = None;
    if !only_redis {
        let (ratio, (plain, weighted)) =
            rule_cycles(&server, &chans, a.rounds, a.seconds, WEIGHTS, "w").await;
        row("Submit+Release cycle, no priorities or weights", 64, &plain);
        row(
            "Submit+Release cycle, priorities 1..5, weights, aging",
            64,
            &weighted,
        );
        weighted_summary = Some(ratio);
        let (a_ratio, (plain, adaptive)) =
            rule_cycles(&server, &chans, a.rounds, a.seconds, ADAPTIVE, "ad").await;
        row("Submit+Release(OK) cycle, 50 accounts", 64, &plain);
        row(
            "Submit+Release(OK) cycle, 50 adaptive accounts",
            64,
            &adaptive,
        );
        adaptive_summary = Some(a_ratio);
        let (n, err, wait) = eta_accuracy(&chans, a.seconds.max(5.0)).await;
        eta_summary = Some((n, err, wait));
    }

    // The same Submit+Release cycles on a server whose store is Redis, each round measured right
    // after the in-memory server's, and the Redis commands each RPC costs.
    let redis_summary = match &a.redis_url {
        Some(url) => Some(on_redis::compare(a, dir, &server, &chans, url).await),
        None => None,
    };
    if only_redis {
        if let Some(summary) = redis_summary {
            println!();
            on_redis::summary(summary);
        }
        return;
    }

    // Crowded queues: 100,000 waiters across 10,000 subjects on one host. Each figure is
    // divided by a Check rate measured beside it, so the comparisons survive a noisy machine.
    let secs = a.seconds;
    let try_cycle = |tag: &'static str| {
        metered(
            &server,
            submit_release(&chans, "free", api::SubmitMode::Try, 64, secs, tag),
            move |(_, f)| f.rate * secs,
            |(_, f), u| f.cpu_us = Some(u),
        )
    };
    let mut before = Vec::new();
    for _ in 0..a.rounds {
        let check = health_check(&chans, 64, secs).await;
        let (_, t) = try_cycle("t0").await;
        before.push((t.rate / check.rate, t));
    }
    let (try_before_norm, try_before) = median(before);
    row(
        "Submit(TRY)+Release on a free host, no queue anywhere",
        64,
        &try_before,
    );

    // Both crowds exist while either is measured, and their rounds alternate with Check.
    let (small_crowd, _) = crowd(&chans, "crowded-small", 16_000, 100).await;
    let (big_crowd, fill) = crowd(&chans, "crowded", 100_000, 10_000).await;
    row(
        "queued Submits filling 100k waiters / 10k subj (batches)",
        256,
        &fill,
    );
    let mut rot = Vec::new();
    for _ in 0..a.rounds {
        let c1 = health_check(&chans, 64, secs).await;
        let small = rotation(&chans, &small_crowd, 5_000).await;
        let c2 = health_check(&chans, 64, secs).await;
        let big = rotation(&chans, &big_crowd, 5_000).await;
        rot.push(((big.rate / c2.rate) / (small.rate / c1.rate), (small, big)));
    }
    let (rotation_ratio, (small, big)) = median(rot);
    row(
        "rotation: Release+dispatch, 16k-1k queued / 100 subj",
        64,
        &small,
    );
    row(
        "rotation: Release+dispatch, 100k-85k queued / 10k subj",
        64,
        &big,
    );

    let mut after = Vec::new();
    for _ in 0..a.rounds {
        let check = health_check(&chans, 64, secs).await;
        let (_, t) = try_cycle("t1").await;
        after.push((t.rate / check.rate, t));
    }
    let (try_after_norm, try_free) = median(after);
    row(
        "Submit(TRY)+Release on a free host, 90k+ queued elsewhere",
        64,
        &try_free,
    );
    let try_ratio = try_after_norm / try_before_norm;

    // Auth buckets on a fresh server of their own, so that neither the crowds nor the auth table
    // shape the other's figures: CheckAuthAttempt against Check at 64, with 100,000 identities
    // in the table.
    drop(chans);
    drop(server);
    let (server, chans) = embedded(dir, 2).await;
    seed_auth(&chans).await;
    let mut auth_rounds = Vec::new();
    for _ in 0..a.rounds {
        let check = metered(
            &server,
            health_check(&chans, 64, a.seconds),
            |f| f.rate * a.seconds,
            |f, u| f.cpu_us = Some(u),
        )
        .await;
        let auth = metered(
            &server,
            auth_attempts(&chans, 64, a.seconds),
            |f| f.rate * a.seconds,
            |f, u| f.cpu_us = Some(u),
        )
        .await;
        auth_rounds.push((auth.rate / check.rate, (check, auth)));
    }
    let (auth_ratio, (check, auth)) = median(auth_rounds);
    row("health.Check (baseline)", 64, &check);
    row("CheckAuthAttempt, 100k identities in the table", 64, &auth);

    // Reservations on a fresh server: Authorize+Settle pairs against Check at 64, first on an
    // empty ledger, then with 100,000 open reservations on the same host.
    drop(chans);
    drop(server);
    let (server, chans) = embedded(dir, 2).await;
    let mut ledger_figures = Vec::new();
    for (phase, tag) in [("no", "p0"), ("100k", "p1")] {
        if tag == "p1" {
            open_reservations(&chans).await;
        }
        let mut rounds = Vec::new();
        for _ in 0..a.rounds {
            let check = health_check(&chans, 64, a.seconds).await;
            let (_, pair) = metered(
                &server,
                authorize_settle(&chans, 64, a.seconds, tag),
                |(_, f)| f.rate * a.seconds,
                |(_, f), u| f.cpu_us = Some(u),
            )
            .await;
            rounds.push((pair.rate / check.rate, (check, pair)));
        }
        let (ratio, (check, pair)) = median(rounds);
        row("health.Check (baseline)", 64, &check);
        row(
            &format!("Authorize+Settle pair, {phase} open reservations on the host"),
            64,
            &pair,
        );
        ledger_figures.push(ratio);
    }

    // Wait streams on a fresh server, so the RSS figure is the streams' and not the crowds'.
    drop(chans);
    drop(server);
    let (server, chans) = embedded(dir, 4).await;
    let (rss_before, rss_open, wake) = wait_streams(&server, &chans, a.streams, 1000).await;
    row(
        &format!("Release → next waiter's Wait event, {} streams", a.streams),
        1,
        &wake,
    );

    println!();
    if let Some((check, cycle)) = at64 {
        println!(
            "Submit+Release cycles/s ÷ Check/s at 64: {:.2} ({})",
            cycle.rate / check.rate,
            at_least(cycle.rate / check.rate, 0.45)
        );
        let _ = cycle;
        println!(
            "100k queued: rotation {rotation_ratio:.2} × the small-queue rate ({}); TRY on a free host {try_ratio:.2} × the empty-queue rate ({}; both relative to Check measured beside them)",
            at_least(rotation_ratio, 0.8),
            at_least(try_ratio, 0.8)
        );
    }
    if let Some(ratio) = weighted_summary {
        println!(
            "Submit+Release cycles with priorities 1..5, weights and aging = {ratio:.2} × the cycles without ({})",
            at_least(ratio, 0.95)
        );
    }
    if let Some(ratio) = adaptive_summary {
        println!(
            "Submit+Release cycles reporting outcomes with adaptive account caps = {ratio:.2} × without ({})",
            at_least(ratio, 0.95)
        );
    }
    if let Some((n, err, wait)) = eta_summary {
        println!(
            "wait estimate: median |eta - wait| / wait {:.0} % over {n} queued Submits (median wait {wait:.0} ms; {})",
            err * 100.0,
            at_most(err * 100.0, 25.0, " %")
        );
    }
    if let Some(summary) = redis_summary {
        on_redis::summary(summary);
    }
    println!(
        "Authorize+Settle pairs/s ÷ Check/s at 64: {:.2} ({}); with {OPEN_RESERVATIONS} open reservations {:.2} × that ({})",
        ledger_figures[0],
        at_least(ledger_figures[0], 0.45),
        ledger_figures[1] / ledger_figures[0],
        at_least(ledger_figures[1] / ledger_figures[0], 0.8)
    );
    println!(
        "CheckAuthAttempt/s ÷ Check/s at 64 with {AUTH_IDENTITIES} identities: {auth_ratio:.2} ({})",
        at_least(auth_ratio, 0.85)
    );
    println!(
        "{} Wait streams: authority RSS {:.0} MiB before, {:.0} MiB with them open ({}); wake p99 {:.2} ms ({})",
        a.streams,
        rss_before,
        rss_open,
        at_most(rss_open, 150.0, " MiB"),
        wake.p99_ms,
        at_most(wake.p99_ms, 5.0, " ms")
    );
    drop(server);
}

/// A summary's target: "target ≥ 0.5", or "target ≥ 0.5: MISSED" when `value` falls short, so
/// a summary line says which of its figures miss.
fn at_least(value: f64, goal: f64) -> String {
    let missed = if value < goal { ": MISSED" } else { "" };
    format!("target ≥ {goal}{missed}")
}

/// As [`at_least`], for a figure that must stay at or below `goal` (`unit` after it).
fn at_most(value: f64, goal: f64, unit: &str) -> String {
    let missed = if value > goal { ": MISSED" } else { "" };
    format!("target ≤ {goal}{unit}{missed}")
}
