//! The Redis store against a redis-server this test starts, stops and restarts itself (by PID):
//! what only a real outage shows. The scenarios every store shares are in store_conformance.rs.
#![allow(
    clippy::disallowed_types,
    reason = "it times real processes and a real redis-server"
)]

mod common;

use common::RedisServer;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use admission_authority::auth::{AuthPolicy, AuthVerdict, BucketRule};
use admission_authority::clock::ManualClock;
use admission_authority::scheduler::{Report, SubmitArgs, SubmitError};
use admission_authority::store::redis::{AUTH_SKIP_MS, RedisStore};
use admission_authority::store::{AuthStore, Policy};

/// Log lines written while the guard lives, for checking what the store said.
/// A queued-mode Submit of `subject` for `run` from one replica.
fn queue_args(subject: &str, run: &str) -> admission_authority::scheduler::SubmitArgs {
    admission_authority::scheduler::SubmitArgs {
        instance_id: "replica".into(),
        subject: subject.into(),
        account_id: None,
        run_id: run.into(),
        mode: admission_authority::scheduler::SubmitMode::Queue,
        rss_mb: None,
        priority: 3,
        resubmit_expired: false,
        keyed: None,
    }
}

fn capture_logs() -> (Arc<Mutex<Vec<u8>>>, tracing::subscriber::DefaultGuard) {
    #[derive(Clone)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = Sink(buf.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    (buf, tracing::subscriber::set_default(subscriber))
}

#[tokio::test(flavor = "current_thread")]
async fn auth_falls_back_to_a_local_bucket_and_its_lockouts_outlive_the_outage() {
    let (logs, _guard) = capture_logs();
    let port = common::free_port();
    let mut redis = RedisServer::start(port);
    let clock = ManualClock::new(1_000);
    let policy = Policy {
        auth: AuthPolicy {
            local_max_keys: 2,
            ..AuthPolicy::default()
        },
        ..Policy::default()
    };
    let store =
        RedisStore::new(&redis.url(), "outage:", 2, policy, Arc::new(clock.clone())).unwrap();
    let magic = store.auth_policy().bucket("magic_link").unwrap();
    let attempt = |who: &'static str| store.auth_attempt("magic_link", who, magic);

    for _ in 0..2 {
        let d = attempt("mallory").await.unwrap();
        assert!(d.allowed() && !d.degraded, "{d:?}");
    }

    redis.stop();
    // Decided locally from a fresh local bucket: the replica's own budget, never more.
    let mut verdicts = Vec::new();
    for _ in 0..6 {
        let d = attempt("mallory").await.unwrap();
        assert!(d.degraded, "{d:?}");
        verdicts.push(d.verdict);
    }
    let mut expected = vec![AuthVerdict::Allowed; 5];
    expected.push(AuthVerdict::LockedOut);
    assert_eq!(verdicts, expected);
    let again = attempt("mallory").await.unwrap();
    assert_eq!(
        (again.verdict, again.degraded),
        (AuthVerdict::LockedOut, true),
        "the local lockout answers, and says the store is being skipped"
    );
    // A peek during the outage reads the local bucket too.
    let peek = store
        .auth_peek("magic_link", "mallory", magic)
        .await
        .unwrap();
    assert_eq!(
        (peek.verdict, peek.retry_after_ms),
        (AuthVerdict::LockedOut, 300_000)
    );
    let fresh = store.auth_peek("magic_link", "dave", magic).await.unwrap();
    assert_eq!(
        (fresh.verdict, fresh.remaining, fresh.degraded),
        (AuthVerdict::Allowed, 5, true)
    );
    let said = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert_eq!(
        said.matches("Redis auth rate limiter unavailable, using local: ")
            .count(),
        1,
        "one log line, then Redis is skipped for 5 s: {said}"
    );
    // The local table is bounded: with it full, a new key is refused, never let through.
    assert!(attempt("alice").await.unwrap().allowed());
    let full = attempt("bob").await.unwrap();
    assert_eq!(
        (full.verdict, full.degraded),
        (AuthVerdict::KeyTableFull, true)
    );

    // Past the skip window, Redis still down: the fallback is still in force, and says so
    // (admission_auth_fallback_active) until Redis answers.
    clock.advance(AUTH_SKIP_MS);
    assert!(store.auth_degraded(), "Redis is still down");

    // Redis comes back (empty). After the skip window the store uses it again, but the lockout
    // earned during the outage still holds.
    let _redis = RedisServer::start(port);
    clock.advance(AUTH_SKIP_MS);
    let locked = attempt("mallory").await.unwrap();
    assert_eq!(
        (locked.verdict, locked.degraded),
        (AuthVerdict::LockedOut, false)
    );
    assert!(locked.retry_after_ms > 0 && locked.retry_after_ms < 300_000);
    let carol = attempt("carol").await.unwrap();
    assert!(
        carol.allowed() && !carol.degraded,
        "shared again: {carol:?}"
    );
    assert_eq!(carol.remaining, 4);
    assert!(!store.auth_degraded(), "back on Redis");
}

#[tokio::test]
async fn a_custom_bucket_counts_once_across_two_replicas_of_the_store() {
    let redis = RedisServer::start(common::free_port());
    let rule = BucketRule::new(3, 60_000, 60_000);
    let policy = || Policy {
        auth: AuthPolicy {
            local_max_keys: 100,
            buckets: [("login".to_string(), rule)].into(),
            configured: ["login".to_string()].into(),
        },
        ..Policy::default()
    };
    let clock = Arc::new(ManualClock::new(1_000));
    let a = RedisStore::new(&redis.url(), "two:", 2, policy(), clock.clone()).unwrap();
    let b = RedisStore::new(&redis.url(), "two:", 2, policy(), clock.clone()).unwrap();
    let other_env = RedisStore::new(&redis.url(), "staging:", 2, policy(), clock).unwrap();
    let mut allowed = 0;
    for i in 0..6 {
        let store = if i % 2 == 0 { &a } else { &b };
        if store
            .auth_attempt("login", "u", rule)
            .await
            .unwrap()
            .allowed()
        {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 3, "one budget for both replicas, not one each");
    let d = other_env.auth_attempt("login", "u", rule).await.unwrap();
    assert!(
        d.allowed() && d.remaining == 2,
        "another prefix is another environment"
    );
}

#[tokio::test]
async fn an_authority_on_redis_fails_closed_during_an_outage_and_recovers_after_it() {
    use admission_authority::api;
    use common::{Server, config_file, eventually, http_get, submit_req};
    use tonic::Code;

    let port = common::free_port();
    let mut redis = RedisServer::start(port);
    let admin = common::free_port();
    let fallback_gauge = |value: u8| {
        let line = format!("admission_auth_fallback_active {value}");
        http_get(admin, "/metrics").1.lines().any(|l| l == line)
    };
    let config = config_file(
        "outage-server",
        &format!(
            "store:\n  redis: {{ url: \"{}\" }}\nallowances:\n  acct: {{ tokens: 1000, window: 1h }}\n\
             scheduling: {{ lease_ttl: 1s }}\n",
            redis.url()
        ),
    );
    let admin_addr = format!("127.0.0.1:{admin}");
    let server = Server::start(&[
        "--config",
        config.to_str().unwrap(),
        "--admin-listen",
        &admin_addr,
    ]);
    let mut c = server.client().await;
    eventually("the admin endpoint", Duration::from_secs(5), || async {
        std::net::TcpStream::connect(("127.0.0.1", admin)).ok()
    })
    .await;
    assert!(fallback_gauge(0));
    let held = c
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(held.state, api::TicketState::Admitted as i32);
    let authorize = |run: &str| api::AuthorizeRequest {
        host_id: "h".into(),
        run_id: run.into(),
        step: 1,
        subject: "alice".into(),
        account_id: "acct".into(),
        model: String::new(),
        requested_output_tokens: 10,
        estimated_input_tokens: 0,
        estimated_cost_usd: 0.0,
    };
    let attempt = || api::AuthAttemptRequest {
        endpoint: "approval".into(),
        identity: "203.0.113.5".into(),
        ..Default::default()
    };

    redis.stop();
    let submit = c.submit(submit_req("h", "bob", "r2")).await.unwrap_err();
    assert_eq!(submit.code(), Code::Unavailable, "nothing admitted blind");
    let auth = c.authorize(authorize("run-1")).await.unwrap_err();
    assert_eq!(auth.code(), Code::Unavailable);
    let release = c
        .release(api::ReleaseRequest {
            ticket_id: held.ticket_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(release.code(), Code::Unavailable);
    // With the dead connection gone, Redis is known unreachable: the call was not applied, and
    // the answer says why and where (never the password).
    let unreachable = c.submit(submit_req("h", "bob", "r2")).await.unwrap_err();
    let reason = tonic_types::StatusExt::get_details_error_info(&unreachable)
        .expect("ErrorInfo")
        .reason;
    assert_eq!(reason, "STORE_UNAVAILABLE", "{unreachable:?}");
    let expected = format!("redis 127.0.0.1:{port}: connection refused");
    assert!(unreachable.message().contains(&expected), "{unreachable:?}");
    let a = c.check_auth_attempt(attempt()).await.unwrap().into_inner();
    assert!(
        a.allowed && a.degraded,
        "auth decided by the local bucket: {a:?}"
    );
    assert!(fallback_gauge(1), "the fallback shows on /metrics");
    let (status, body) = http_get(admin, "/readyz");
    assert_eq!(status, 503, "not ready without its store");
    assert!(body.contains(&expected), "/readyz names the cause: {body}");
    let errors: u64 = http_get(admin, "/metrics")
        .1
        .lines()
        .find_map(|l| l.strip_prefix("admission_store_errors_total "))
        .and_then(|n| n.parse().ok())
        .expect("admission_store_errors_total");
    assert!(errors >= 3, "the failed calls are counted: {errors}");

    // Redis returns (empty: its data is gone with the process); the authority recovers by
    // itself, without a restart. It sees the state lost: for a lease and a renew interval no
    // new run is admitted (here, with no queue, refused with the cause), while the holder,
    // whose Renew now answers EXPIRED, re-registers.
    let _redis = RedisServer::start(port);
    let learning = eventually(
        "Submit to reach Redis again",
        Duration::from_secs(10),
        || {
            let mut c = c.clone();
            async move {
                let e = c.submit(submit_req("h", "bob", "r2")).await.err()?;
                (e.code() == Code::ResourceExhausted).then_some(e)
            }
        },
    )
    .await;
    let info = tonic_types::StatusExt::get_details_error_info(&learning).expect("ErrorInfo");
    assert_eq!(
        (
            info.reason.as_str(),
            info.metadata.get("cause").map(String::as_str)
        ),
        ("BUSY", Some("STATE_LOSS")),
        "{learning:?}"
    );
    let (status, body) = http_get(admin, "/readyz");
    assert_eq!(status, 200, "ready: holders must reach it to re-register");
    assert!(body.contains("state loss detected"), "{body}");
    assert!(
        http_get(admin, "/metrics")
            .1
            .lines()
            .any(|l| l == "admission_state_loss_total 1")
    );
    let renewed = c
        .renew(api::RenewRequest {
            ticket_ids: vec![held.ticket_id.clone()],
            rss_mb: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(renewed.tickets[0].state, api::TicketState::Expired as i32);
    let back = c
        .reclaim(api::ReclaimRequest {
            ticket_id: held.ticket_id.clone(),
            host_id: "h".into(),
            run_id: "r1".into(),
            subject: "alice".into(),
            instance_id: "replica-1".into(),
            grant: held.grant,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(back.reclaimed && back.state == api::TicketState::Admitted as i32);
    c.release(api::ReleaseRequest {
        ticket_id: held.ticket_id.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let r = eventually(
        "the learning window to end",
        Duration::from_secs(10),
        || {
            let mut c = c.clone();
            async move { c.submit(submit_req("h", "bob", "r2")).await.ok() }
        },
    )
    .await
    .into_inner();
    assert_eq!(r.state, api::TicketState::Admitted as i32);
    let ok = c.authorize(authorize("run-2")).await.unwrap().into_inner();
    assert_eq!(ok.decision, api::Decision::Allow as i32);
    // Auth buckets return to Redis once the 5 s skip has passed (a new identity each time, so
    // no local lockout answers in between).
    let tries = std::sync::atomic::AtomicU32::new(0);
    eventually("auth to use Redis again", Duration::from_secs(10), || {
        let mut c = c.clone();
        let n = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async move {
            let req = api::AuthAttemptRequest {
                identity: format!("198.51.100.{n}"),
                ..attempt()
            };
            let a = c.check_auth_attempt(req).await.ok()?.into_inner();
            (!a.degraded).then_some(())
        }
    })
    .await;
    assert!(fallback_gauge(0));
    assert_eq!(http_get(admin, "/readyz").0, 200);
}

/// Three redis-server nodes on loopback ports joined into a Redis Cluster (no replicas),
/// stopped by PID when dropped.
struct Cluster {
    nodes: Vec<RedisServer>,
    _dir: std::path::PathBuf,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cluster-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let port = common::free_port();
            let child = Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--port", &port.to_string(), "--cluster-enabled", "yes"])
                .arg("--cluster-config-file")
                .arg(dir.join(format!("nodes-{port}.conf")))
                .current_dir(&dir)
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-server on PATH");
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "a cluster node did not start");
                std::thread::sleep(Duration::from_millis(10));
            }
            nodes.push(RedisServer {
                child: Some(child),
                port,
            });
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli on PATH");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        // Wait until every node agrees the cluster is up.
        let deadline = Instant::now() + Duration::from_secs(20);
        for n in &nodes {
            loop {
                let info = Command::new("redis-cli")
                    .args(["-p", &n.port.to_string(), "cluster", "info"])
                    .output()
                    .unwrap();
                if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "the cluster did not come up");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Cluster { nodes, _dir: dir }
    }

    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

#[tokio::test]
async fn the_store_works_on_a_three_node_redis_cluster() {
    use admission_authority::ledger::{AuthorizeArgs, Coverage, Decision, Usage};
    use admission_authority::scheduler::{LimitsTable, TicketState};
    use admission_authority::store::{LedgerStore, TicketStore, TicketWatch};

    let cluster = Cluster::start();
    let urls = cluster.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let limits = admission_authority::scheduler::Limits {
        total: 1,
        per_subject: 1,
        queue_total: 10,
        queue_hard_total: 10,
        ..Default::default()
    };
    let store = RedisStore::new_cluster(
        &nodes,
        "cluster:",
        Policy {
            limits: LimitsTable::uniform(limits),
            ..Policy::default()
        },
        Arc::new(ManualClock::new(1_000)),
    )
    .unwrap();
    // Several hosts, so their keys land on different nodes.
    for host in ["host-a", "host-b", "host-c", "host-d"] {
        let (holder, v) = store
            .submit(host, queue_args("alice", "r1"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(v.state, TicketState::Admitted);
        let (waiter, v) = store
            .submit(host, queue_args("bob", "r2"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(v.state, TicketState::Queued);
        let mut watch = store.watch(&waiter);
        assert_eq!(
            store.release(&holder, Report::default()).await.unwrap(),
            Some(TicketState::Admitted)
        );
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("the waiter is woken through the cluster's pub/sub");
        let now = store.ticket(&waiter).await.unwrap().unwrap();
        assert_eq!(now.state, TicketState::Admitted, "{host}");
        let stats = store.stats(host).await.unwrap();
        assert_eq!((stats.in_flight, stats.counters.released), (1, 1));

        let a = store
            .authorize(
                host,
                AuthorizeArgs {
                    run_id: "run".into(),
                    step: 1,
                    subject: "alice".into(),
                    account_id: None,
                    model: String::new(),
                    requested_output_tokens: 10,
                    estimated_input_tokens: 5,
                    estimated_cost: 0,
                },
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(a.decision, Decision::Allow);
        let usage = Usage {
            input_tokens: 5,
            output_tokens: 3,
            cost: 0,
            coverage: Coverage::Complete,
        };
        assert_eq!(
            store.settle(host, "run", 1, usage).await.unwrap(),
            Ok(false)
        );
    }
    let rule = store.auth_policy().bucket("magic_link").unwrap();
    let mut allowed = 0;
    for _ in 0..6 {
        if store
            .auth_attempt("magic_link", "eve", rule)
            .await
            .unwrap()
            .allowed()
        {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 5);
    // Concurrent attempts on buckets of different slots: each goes alone (a batch of them
    // would touch several slots), and each is counted.
    let store = Arc::new(store);
    let mut concurrent = tokio::task::JoinSet::new();
    for i in 0..30 {
        let store = store.clone();
        concurrent.spawn(async move {
            let who = ["a", "b", "c"][i % 3];
            store.auth_attempt("magic_link", who, rule).await.unwrap()
        });
    }
    let mut passed = 0;
    while let Some(d) = concurrent.join_next().await {
        let d = d.unwrap();
        assert!(!d.degraded, "{d:?}");
        passed += usize::from(d.allowed());
    }
    assert_eq!(passed, 15, "5 of each bucket's 10");
    // Concurrent rate limit requests of one domain share calls: its keys share one slot.
    let mut concurrent = tokio::task::JoinSet::new();
    for _ in 0..30 {
        let store = store.clone();
        concurrent.spawn(async move {
            use admission_authority::ratelimit::{Hit, Unit};
            use admission_authority::store::RateLimitStore;
            let hits = [Hit {
                key: "tenant=t|day".into(),
                unit: Unit::Day,
                addend: 1,
            }];
            store.rate_limit_hits("d", 10, &hits).await.unwrap().counts[0]
        });
    }
    let mut counts = Vec::new();
    while let Some(c) = concurrent.join_next().await {
        counts.push(c.unwrap().unwrap());
    }
    counts.sort_unstable();
    assert_eq!(counts, (1..=30).collect::<Vec<_>>());
    store.sweep_tickets().await.unwrap();
    store.sweep_ledger().await.unwrap();
}

/// Ended tickets are remembered for `retention`, compacted to what a retry needs, and leave
/// nothing behind without a TTL: every ticket and run key expires, and what stays is the host's
/// fixed set of structures (the `ended` list is bounded by `max_retained`).
#[tokio::test]
async fn ended_tickets_leave_only_keys_that_expire() {
    use admission_authority::scheduler::{Limits, LimitsTable, TicketState};
    use admission_authority::store::TicketStore;

    let redis = RedisServer::start(common::free_port());
    let limits = Limits {
        total: 1,
        per_subject: 1,
        queue_total: 4,
        queue_hard_total: 4,
        lease_ttl_ms: 300,
        retention_ms: 60_000,
        ..Default::default()
    };
    let policy = Policy {
        limits: LimitsTable::uniform(limits),
        ..Policy::default()
    };
    // Scripts take Redis TIME (nothing frozen): leases and TTLs run in real time.
    let store = RedisStore::new(
        &redis.url(),
        "ttl:",
        2,
        policy,
        Arc::new(ManualClock::new(0)),
    )
    .unwrap();
    let submit = |subject: &'static str, run: &'static str| {
        let store = &store;
        async move {
            store
                .submit("h", queue_args(subject, run))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let (holder, _) = submit("alice", "r1").await;
    let (waiter, v) = submit("bob", "r2").await;
    assert_eq!(v.state, TicketState::Queued);
    let (withdrawn, _) = submit("carol", "r3").await;
    assert_eq!(
        store.release(&withdrawn, Report::default()).await.unwrap(),
        Some(TicketState::Queued)
    );
    assert_eq!(
        store.release(&holder, Report::default()).await.unwrap(),
        Some(TicketState::Admitted)
    );
    assert_eq!(
        store.release(&waiter, Report::default()).await.unwrap(),
        Some(TicketState::Admitted)
    );
    let (abandoned, _) = submit("dave", "r4").await; // never renewed: its lease runs out
    common::eventually("the lease to expire", Duration::from_secs(5), || async {
        (store.stats("h").await.unwrap().counters.expired == 1).then_some(())
    })
    .await;
    assert_eq!(
        store.ticket(&abandoned).await.unwrap().unwrap().state,
        TicketState::Expired
    );

    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys = keys_with_ttls(&redis.url(), "ttl:*").await;
    let mut lasting = Vec::new();
    let mut expiring = 0;
    for (key, ttl) in &keys {
        let ttl = *ttl;
        if ttl > 0 {
            assert!(ttl <= 61_000, "{key} expires after retention: {ttl} ms");
            expiring += 1;
            if key.contains(":t:") {
                let kept: Vec<Option<String>> = redis::cmd("HMGET")
                    .arg(key)
                    .arg(&["subject", "account", "instance", "state", "run"])
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert_eq!(
                    kept[..3],
                    [
                        Some(String::new()),
                        Some(String::new()),
                        Some(String::new())
                    ],
                    "an ended ticket keeps only what a retry needs: {key}"
                );
                assert!(kept[3].is_some() && kept[4].is_some(), "{key}: {kept:?}");
            }
        } else {
            lasting.push(
                key.strip_prefix("ttl:sched:{h}:")
                    .unwrap_or(key)
                    .to_string(),
            );
        }
    }
    assert_eq!(expiring, 8, "four tickets and their four runs: {keys:?}");
    lasting.sort();
    for key in &lasting {
        assert!(
            [
                "c",
                "leases",
                "dc",
                "qw",
                "ended",
                // The newest endings, for operators: bounded, not per ticket.
                "recent",
                "ttl:hosts",
                "ttl:epoch",
                "ttl:losses"
            ]
            .contains(&key.as_str()),
            "{key} has no TTL and is not one of the host's fixed structures: {lasting:?}"
        );
    }
}

/// Replicas of two layouts share a prefix only when each runs beside the other's: a replica of
/// this version joins beside a live registration of layout 2 (the release before, which runs
/// beside layout 3) and refuses Submits with a key while it lives (its scripts would dispatch
/// them as if they had none), refuses to join beside a live one of a layout that does not run
/// beside it (or that it does not run beside), and joins once that registration has expired.
/// A prefix that still holds layout 0's `limits` hashes is refused too, naming the key.
#[tokio::test]
async fn replicas_of_two_layouts_share_a_prefix_only_when_each_runs_beside_the_other() {
    use admission_authority::store::redis::layout::{LAYOUT, RUNS_BESIDE};
    use admission_authority::store::{StoreError, TicketStore};

    let redis = RedisServer::start(common::free_port());
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let registry = "lay:replicas";
    let now = 1_000_000u64;
    let store = RedisStore::new(
        &redis.url(),
        "lay:",
        1,
        Policy::default(),
        Arc::new(ManualClock::new(0)),
    )
    .unwrap();
    store.freeze_time_for_tests(now);
    let register = async |conn: &mut redis::aio::MultiplexedConnection, id: &str, v: String| {
        let _: () = redis::cmd("HSET")
            .arg(registry)
            .arg(id)
            .arg(v)
            .query_async(conn)
            .await
            .unwrap();
    };
    let entries = async |conn: &mut redis::aio::MultiplexedConnection| -> Vec<String> {
        redis::cmd("HKEYS")
            .arg(registry)
            .query_async(conn)
            .await
            .unwrap()
    };
    assert_eq!((LAYOUT, RUNS_BESIDE), (3, 2));
    let keyed = |run: &str| SubmitArgs {
        keyed: Some(admission_authority::scheduler::KeyArgs {
            key: "conv".into(),
            policy: admission_authority::scheduler::KeyPolicy::Serial,
            supersede_running: false,
            debounce_ms: 0,
            debounce_max_ms: 0,
        }),
        ..queue_args("alice", run)
    };

    // A live replica of the release before: layout 2, running beside layout 1.
    register(&mut conn, "older", format!("2|1|{}", now + 5_000)).await;
    store.join().await.unwrap();
    assert_eq!(entries(&mut conn).await.len(), 2, "registered beside it");
    let refused = store.submit("h", keyed("k1")).await.unwrap();
    let Err(SubmitError::Unsupported { field, rule }) = refused else {
        panic!("{refused:?}");
    };
    assert!(field == "key" && rule.contains("layout 2"), "{rule}");
    store
        .submit("h", queue_args("alice", "plain"))
        .await
        .unwrap()
        .unwrap();

    // A live replica of a later layout that does not run beside layout 3.
    register(&mut conn, "newer", format!("4|4|{}", now + 5_000)).await;
    let refused = store.join().await.unwrap_err();
    let StoreError::Incompatible { what } = &refused else {
        panic!("{refused:?}");
    };
    assert!(
        what.contains("replica newer of Redis layout 4")
            && what.contains("this version writes layout 3")
            && what.contains("stop the other replicas first"),
        "{what}"
    );
    assert!(store.readiness().unwrap_err().contains("layout 4"));
    let denied = store
        .submit("h", queue_args("alice", "r1"))
        .await
        .unwrap_err();
    assert!(
        matches!(denied, StoreError::Incompatible { .. }),
        "{denied:?}"
    );

    // Its registration runs out (it was killed): this replica may use the prefix again.
    store.freeze_time_for_tests(now + 5_001);
    store.join().await.unwrap();
    assert!(store.readiness().is_ok());
    assert!(
        !entries(&mut conn).await.contains(&"newer".to_string()),
        "expired, dropped"
    );
    store
        .submit("h", queue_args("alice", "r1"))
        .await
        .unwrap()
        .unwrap();
    // The older replica is gone too: keys are decided.
    store.submit("h", keyed("k2")).await.unwrap().unwrap();
    store.leave().await;
    assert!(
        entries(&mut conn).await.is_empty(),
        "left, and older expired"
    );

    // Layout 0's operator limits, left on a prefix no replica is registered on.
    let _: () = redis::cmd("HSET")
        .arg("old:sched:{h}:limits")
        .arg(&["s", "1,2,2", "m", "{}"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let old = RedisStore::new(
        &redis.url(),
        "old:",
        1,
        Policy::default(),
        Arc::new(ManualClock::new(0)),
    )
    .unwrap();
    let refused = old.join().await.unwrap_err();
    assert!(
        refused.to_string().contains("old:sched:{h}:limits")
            && refused.to_string().contains("no longer reads"),
        "{refused}"
    );
    let registered: Vec<String> = redis::cmd("HKEYS")
        .arg("old:replicas")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        registered.is_empty(),
        "a refused replica does not stay registered"
    );
    let _: () = redis::cmd("DEL")
        .arg("old:sched:{h}:limits")
        .query_async(&mut conn)
        .await
        .unwrap();
    old.join().await.unwrap();

    // The look for layout 0's limits is a SCAN of the whole keyspace: made once, not again at
    // every sweep turn of a replica that runs alone on its prefix (Redis' CPU would grow with
    // its keyspace, every second).
    let scans = async |conn: &mut redis::aio::MultiplexedConnection| -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    };
    let before = scans(&mut conn).await;
    for _ in 0..5 {
        old.join().await.unwrap();
    }
    assert_eq!(
        scans(&mut conn).await,
        before,
        "joins after the first scanned again"
    );
}

/// The real binary: it registers on its prefix before it says it listens, refuses to start
/// (exit 2, saying why) beside a live replica it may not run beside, and leaves the registry
/// when it stops.
#[tokio::test]
async fn a_replica_refuses_to_start_beside_one_it_may_not_run_beside() {
    let redis = RedisServer::start(common::free_port());
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let server = common::Server::start(&["--redis-url", &redis.url()]);
    let registered: Vec<String> = redis::cmd("HVALS")
        .arg("admission:replicas")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(registered.len(), 1, "{registered:?}");
    assert!(registered[0].starts_with("3|2|"), "{registered:?}");
    // SIGTERM: it drains (nothing is admitted here) and leaves.
    Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    common::eventually("the replica to leave", Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move {
            let left: Vec<String> = redis::cmd("HKEYS")
                .arg("admission:replicas")
                .query_async(&mut conn)
                .await
                .unwrap();
            left.is_empty().then_some(())
        }
    })
    .await;
    drop(server);

    let until = 4_000_000_000_000u64; // far in the future of Redis TIME
    let _: () = redis::cmd("HSET")
        .arg("admission:replicas")
        .arg("newer")
        .arg(format!("4|4|{until}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let out = Command::new(common::BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--redis-url",
            &redis.url(),
        ])
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening on"));
    assert!(
        stderr.contains("may not use the prefix") && stderr.contains("layout 4"),
        "{stderr}"
    );
}

/// Grants strictly increase for the life of an installation: Redis killed (SIGKILL) and started
/// again empty on the same port, every later grant exceeds every earlier one.
#[tokio::test]
async fn grants_keep_increasing_after_redis_restarts_empty() {
    use admission_authority::scheduler::{Limits, LimitsTable};
    use admission_authority::store::TicketStore;

    let port = common::free_port();
    let mut redis = RedisServer::start(port);
    let policy = Policy {
        limits: LimitsTable::uniform(Limits {
            total: 4,
            per_subject: 4,
            queue_total: 8,
            queue_hard_total: 8,
            // A short lease: Redis restarted empty opens a learning window of a lease and a
            // third, in which Submits queue.
            lease_ttl_ms: 300,
            ..Default::default()
        }),
        ..Policy::default()
    };
    // Scripts take Redis TIME (nothing frozen), as in production.
    let store =
        RedisStore::new(&redis.url(), "g:", 1, policy, Arc::new(ManualClock::new(0))).unwrap();
    let cycle = async |run: String| {
        let (id, v) = store.submit("h", queue_args("alice", &run)).await?.unwrap();
        store.release(&id, Report::default()).await?;
        Ok::<u64, admission_authority::store::StoreError>(v.grant)
    };
    let mut before = Vec::new();
    for i in 0..200 {
        before.push(cycle(format!("before-{i}")).await.unwrap());
    }
    assert!(before.windows(2).all(|w| w[0] < w[1]), "{before:?}");
    redis.stop();
    let redis = RedisServer::start(port);
    // Back, empty: tickets queue (grant 0) until the learning window has passed.
    let tries = std::sync::atomic::AtomicU32::new(0);
    let first_after = common::eventually(
        "the store back on the new Redis, past its learning window",
        Duration::from_secs(10),
        || {
            let n = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async move { cycle(format!("after-0-{n}")).await.ok().filter(|g| *g > 0) }
        },
    )
    .await;
    let mut after = vec![first_after];
    for i in 1..200 {
        after.push(cycle(format!("after-{i}")).await.unwrap());
    }
    let last_before = *before.last().unwrap();
    assert!(
        after.iter().all(|g| *g > last_before),
        "a grant was handed out again: last before {last_before}, after {after:?}"
    );
    assert!(after.windows(2).all(|w| w[0] < w[1]), "{after:?}");
    drop(redis);
}

/// An authority pointed at a Redis that is not there says why and where once, in its log and
/// on /readyz, rather than an opaque pool timeout every second; the URL's password never shows.
#[tokio::test]
async fn an_unreachable_redis_is_named_with_its_cause_once() {
    use common::{Server, eventually, http_get};
    let port = common::free_port(); // nothing listens there
    let admin = common::free_port();
    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("unreachable-{}.log", std::process::id()));
    let url = format!("redis://:hunter2@127.0.0.1:{port}/0");
    let server = Server::spawn(
        &[
            "--redis-url",
            &url,
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
        ],
        "info",
        std::process::Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let expected = format!("redis 127.0.0.1:{port}: connection refused");
    let body = eventually("/readyz", Duration::from_secs(5), || async {
        std::net::TcpStream::connect(("127.0.0.1", admin)).ok()?;
        let (status, body) = http_get(admin, "/readyz");
        (status == 503).then_some(body)
    })
    .await;
    assert!(body.contains(&expected), "{body}");
    // Sweeps run every second or faster; three seconds of outage are said once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(server);
    let logged = std::fs::read_to_string(&log).unwrap();
    let failures: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("lease sweep failed"))
        .collect();
    assert_eq!(failures.len(), 1, "{logged}");
    assert!(failures[0].contains(&expected), "{logged}");
    assert!(!logged.contains("hunter2"), "the password leaked: {logged}");
}

/// The count of state losses outlives them: it is the installation's, carried across each
/// loss by the replicas that knew it, so a replica that missed losses (it did not look in
/// between) or started after them reports them all, each loss counted once however many
/// replicas see it; and the last one's time goes with it.
#[tokio::test]
async fn the_count_of_state_losses_survives_the_losses_and_the_replicas() {
    use admission_authority::scheduler::{Limits, LimitsTable};
    use admission_authority::store::TicketStore;

    let url = std::env::var("ADMISSION_TEST_REDIS_URL").expect("ADMISSION_TEST_REDIS_URL");
    let prefix = format!("losses-{}:", std::process::id());
    let policy = || Policy {
        limits: LimitsTable::uniform(Limits {
            total: 10,
            per_subject: 10,
            lease_ttl_ms: 300,
            ..Default::default()
        }),
        ..Policy::default()
    };
    let replica = || {
        let store = RedisStore::new(&url, &prefix, 1, policy(), Arc::new(ManualClock::new(0)));
        let store = store.unwrap();
        store.freeze_time_for_tests(5_000_000);
        Arc::new(store)
    };
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // Redis emptied under the replicas: every key of the prefix goes.
    let mut empty = async || {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    };
    let (a, b) = (replica(), replica());
    for (s, run) in [(&a, "a"), (&b, "b")] {
        s.submit("h", queue_args("alice", run))
            .await
            .unwrap()
            .unwrap();
        s.sweep_tickets().await.unwrap();
    }
    assert_eq!((a.state_losses(), b.state_losses()), (0, 0));
    assert_eq!(a.last_state_loss_ms(), 0);

    empty().await;
    a.sweep_tickets().await.unwrap();
    b.sweep_tickets().await.unwrap();
    assert_eq!(
        (a.state_losses(), b.state_losses()),
        (1, 1),
        "one loss, seen by both, counted once"
    );
    assert_eq!(
        a.last_state_loss_ms(),
        5_000_000,
        "when, on the scripts' clock"
    );
    // A replica started after it cannot tell it from a first start, but learns the count.
    let c = replica();
    c.sweep_tickets().await.unwrap();
    assert_eq!(c.state_losses(), 1);

    // Two more, seen by A alone; then once by B, which missed the one between.
    empty().await;
    a.sweep_tickets().await.unwrap();
    empty().await;
    a.sweep_tickets().await.unwrap();
    assert_eq!(a.state_losses(), 3);
    b.sweep_tickets().await.unwrap();
    assert_eq!(
        b.state_losses(),
        3,
        "B saw one change of epoch for two losses"
    );
    c.sweep_tickets().await.unwrap();
    assert_eq!(c.state_losses(), 3);
}

/// A state loss is told from a new host: the Submits racing a host's very first one (which
/// all find it without an epoch) open no window and count no loss; the host's keys deleted
/// under a running replica (as a Redis Cluster shard that failed over) are a loss of that host
/// alone, counted once however many Submits find it, with a learning window on the host.
#[tokio::test]
async fn a_host_whose_keys_vanish_is_a_loss_and_a_new_host_is_not() {
    use admission_authority::scheduler::{Blocker, Limits, LimitsTable, TicketState};
    use admission_authority::store::TicketStore;

    let url = std::env::var("ADMISSION_TEST_REDIS_URL").expect("ADMISSION_TEST_REDIS_URL");
    let prefix = format!("vanish-{}:", std::process::id());
    let policy = Policy {
        limits: LimitsTable::uniform(Limits {
            total: 100,
            per_subject: 100,
            queue_total: 100,
            queue_hard_total: 100,
            lease_ttl_ms: 300,
            ..Default::default()
        }),
        ..Policy::default()
    };
    let store =
        Arc::new(RedisStore::new(&url, &prefix, 1, policy, Arc::new(ManualClock::new(0))).unwrap());
    let submits = |tag: &'static str| {
        let store = store.clone();
        async move {
            let mut tasks = Vec::new();
            for i in 0..32 {
                let store = store.clone();
                tasks.push(tokio::spawn(async move {
                    let run = format!("{tag}-{i}");
                    store
                        .submit("h", queue_args("alice", &run))
                        .await
                        .unwrap()
                        .unwrap()
                        .1
                }));
            }
            let mut views = Vec::new();
            for t in tasks {
                let v = t.await.unwrap();
                views.push((v.state, v.blocked_by));
            }
            views
        }
    };
    let first = submits("first").await;
    assert!(
        first.iter().all(|v| *v == (TicketState::Admitted, None)),
        "{first:?}"
    );
    assert_eq!(store.state_losses(), 0, "a new host is no loss");

    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}sched:{{h}}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
    let after = submits("after").await;
    assert!(
        after
            .iter()
            .all(|v| *v == (TicketState::Queued, Some(Blocker::StateLoss))),
        "a learning window, and the waiters say so: {after:?}"
    );
    assert_eq!(store.state_losses(), 1, "counted once");
    let stats = store.stats("h").await.unwrap();
    assert!(
        stats.learning_left_ms > 0 && stats.learning_left_ms <= 400,
        "{stats:?}"
    );
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// A Redis stopped cleanly (SIGTERM: it closes its connections) is reported as unreachable
/// from the first call after: a write on a connection the peer closed never reached Redis, so
/// the answer is STORE_UNAVAILABLE (not applied), never OUTCOME_UNKNOWN.
#[tokio::test]
async fn a_redis_stopped_cleanly_is_unreachable_at_once_not_an_unknown_outcome() {
    use admission_authority::store::TicketStore;

    for round in 0..3 {
        let port = common::free_port();
        let mut redis = RedisServer::start(port);
        let store = RedisStore::new(
            &redis.url(),
            "clean:",
            1,
            Policy::default(),
            Arc::new(ManualClock::new(0)),
        )
        .unwrap();
        store
            .submit("h", queue_args("alice", "r1"))
            .await
            .unwrap()
            .unwrap();
        let mut child = redis.child.take().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
        let e = store
            .submit("h", queue_args("alice", "r2"))
            .await
            .unwrap_err();
        assert!(
            !e.may_have_applied(),
            "round {round}: the first call after a clean stop: {e}"
        );
    }
}

/// A store on `redis` whose hosts admit `total` at once (and as many per subject) and queue up
/// to 1,000, with leases of a minute; scripts take Redis TIME.
fn queueing_store(redis: &RedisServer, prefix: &str, total: u32) -> Arc<RedisStore> {
    use admission_authority::scheduler::{Limits, LimitsTable};
    let policy = Policy {
        limits: LimitsTable::uniform(Limits {
            total,
            per_subject: total,
            queue_total: 1_000,
            queue_per_subject: 1_000,
            queue_hard_total: 1_000,
            lease_ttl_ms: 60_000,
            ..Default::default()
        }),
        ..Policy::default()
    };
    let clock = Arc::new(ManualClock::new(0));
    Arc::new(RedisStore::new(&redis.url(), prefix, 1, policy, clock).unwrap())
}

/// Send `sig` (`-STOP`, `-CONT`) to process `pid`.
fn signal(pid: &str, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, pid])
            .status()
            .unwrap()
            .success()
    );
}

/// Every key matching `pattern` on the Redis at `url`, with its PTTL (ms; -1 for none), in key
/// order.
async fn keys_with_ttls(url: &str, pattern: &str) -> Vec<(String, i64)> {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.push((key, ttl));
    }
    out
}

/// A store on `redis` under `prefix` whose scripts take Redis TIME (nothing frozen): leases
/// and TTLs run in real time.
fn real_time_store(redis: &RedisServer, prefix: &str) -> Arc<RedisStore> {
    Arc::new(
        RedisStore::new(
            &redis.url(),
            prefix,
            1,
            Policy::default(),
            Arc::new(ManualClock::new(0)),
        )
        .unwrap(),
    )
}

/// How many EVALSHA calls the redis-server on `port` has run, by its own `INFO commandstats`.
fn evalsha_calls(port: u16) -> u64 {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "info", "commandstats"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .map(str::to_string)
        .unwrap_or_default();
    line.split(['=', ','])
        .nth(1)
        .map_or(0, |n| n.parse::<u64>().unwrap())
}

/// Assert that host `h`'s counts (in flight, queued) are its listed tickets'; returns how many
/// are in flight.
async fn counts_match_tickets(store: &RedisStore) -> usize {
    use admission_authority::scheduler::TicketState;
    use admission_authority::store::TicketStore;
    let stats = store.stats("h").await.unwrap();
    let (listed, _) = store.list("h", 10_000).await.unwrap();
    let admitted = listed
        .iter()
        .filter(|t| t.state == TicketState::Admitted)
        .count();
    assert_eq!(
        (stats.in_flight as usize, stats.queued as usize),
        (admitted, listed.len() - admitted),
        "the host's counts are not its tickets'"
    );
    admitted
}

/// The Submits and Releases of one host that arrive together go to Redis together, fewer
/// script calls than operations (Redis's own count of EVALSHA says so), and every answer is
/// one they would have had one by one: a cap of 50 under a burst of 200 Submits admits exactly
/// 50 and queues the rest; a Submit repeated in the same burst answers its first ticket; slots
/// released in a burst go to the queue, not to Submits that arrive with the releases. Callers
/// that vanish mid-call leave the host answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_concurrent_submits_and_releases_go_together_and_decide_as_one_by_one() {
    use admission_authority::scheduler::TicketState;
    use admission_authority::store::{TicketId, TicketStore};

    let port = common::free_port();
    let redis = RedisServer::start(port);
    let store = queueing_store(&redis, "co:", 50);
    let evalsha = || evalsha_calls(port);
    // One Submit first: the host begins under the store's epoch (its own calls, not counted).
    let (first, _) = store
        .submit("h", queue_args("s0", "warm"))
        .await
        .unwrap()
        .unwrap();
    store.release(&first, Report::default()).await.unwrap();
    let calls_before = evalsha();

    // 200 Submits of 8 subjects, and 20 of them again (a retry racing its first try).
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..220 {
        let store = store.clone();
        let run = format!("r{}", i % 200);
        let subject = format!("s{}", i % 200 % 8);
        burst.spawn(async move {
            let (id, v) = store
                .submit("h", queue_args(&subject, &run))
                .await
                .unwrap()
                .unwrap();
            (run, id, v.state)
        });
    }
    let mut by_run: std::collections::HashMap<String, (TicketId, TicketState)> =
        std::collections::HashMap::new();
    let mut answers = 0;
    while let Some(r) = burst.join_next().await {
        let (run, id, state) = r.unwrap();
        answers += 1;
        if let Some((seen, _)) = by_run.get(&run) {
            assert_eq!(*seen, id, "run {run} answered two tickets");
        }
        by_run.insert(run, (id, state));
    }
    assert_eq!((answers, by_run.len()), (220, 200));
    let admitted: Vec<TicketId> = by_run
        .values()
        .filter(|(_, s)| *s == TicketState::Admitted)
        .map(|(id, _)| id.clone())
        .collect();
    let stats = store.stats("h").await.unwrap();
    assert_eq!(
        (admitted.len(), stats.in_flight, stats.queued),
        (50, 50, 150)
    );

    // The 50 released while 50 new Submits arrive: the freed slots go to the queue.
    let mut burst = tokio::task::JoinSet::new();
    for (i, id) in admitted.into_iter().enumerate() {
        let releasing = store.clone();
        burst.spawn(async move {
            let was = releasing.release(&id, Report::default()).await.unwrap();
            assert_eq!(was, Some(TicketState::Admitted));
        });
        let submitting = store.clone();
        burst.spawn(async move {
            let (_, v) = submitting
                .submit("h", queue_args("late", &format!("late{i}")))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                v.state,
                TicketState::Queued,
                "a newcomer went ahead of the queue"
            );
        });
    }
    while let Some(r) = burst.join_next().await {
        r.unwrap();
    }
    let stats = store.stats("h").await.unwrap();
    assert_eq!((stats.in_flight, stats.queued), (50, 150));
    let calls = evalsha() - calls_before;
    let (batched, batches) = store.coalesced_counts();
    assert!(
        batches > 0 && calls < 320,
        "320 operations took {calls} script calls ({batched} operations in {batches} batches)"
    );

    // Callers that vanish mid-call: the host still answers, and its counts match its tickets.
    let mut gone = Vec::new();
    for i in 0..100 {
        let store = store.clone();
        gone.push(tokio::spawn(async move {
            let _ = store
                .submit("h", queue_args("gone", &format!("gone{i}")))
                .await;
        }));
    }
    for (i, task) in gone.iter().enumerate() {
        if i % 2 == 0 {
            task.abort();
        }
    }
    for task in gone {
        let _ = task.await;
    }
    let (_, v) = tokio::time::timeout(
        Duration::from_secs(5),
        store.submit("h", queue_args("after", "after")),
    )
    .await
    .expect("the host answers after callers vanished")
    .unwrap()
    .unwrap();
    assert_eq!(v.state, TicketState::Queued);
    counts_match_tickets(&store).await;
    drop(redis);
}

/// A Redis that stalls (SIGSTOP) while a host's Submits wait behind one call: every one of them
/// is answered, with an error, within a few of the store's 1 s timeouts (they fail together, not
/// one timeout after another), nothing is admitted blind, and once Redis runs again (SIGCONT)
/// the host answers and its counts are whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_answers_a_hosts_waiting_calls_together_and_the_host_recovers() {
    use admission_authority::scheduler::TicketState;
    use admission_authority::store::TicketStore;

    let port = common::free_port();
    let redis = RedisServer::start(port);
    let pid = redis.child.as_ref().unwrap().id().to_string();
    let store = queueing_store(&redis, "stall:", 1);
    let (_, v) = store
        .submit("h", queue_args("holder", "holder"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(v.state, TicketState::Admitted);

    let signal = |sig: &str| signal(&pid, sig);
    signal("-STOP");
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..40 {
        let store = store.clone();
        burst.spawn(async move { store.submit("h", queue_args("w", &format!("w{i}"))).await });
    }
    let answered = tokio::time::timeout(Duration::from_secs(20), async {
        let mut errors = 0;
        while let Some(r) = burst.join_next().await {
            if r.unwrap().is_err() {
                errors += 1;
            }
        }
        errors
    })
    .await;
    signal("-CONT");
    assert_eq!(
        answered.expect("every call answered while Redis was stopped"),
        40,
        "a call was answered as if Redis had run it"
    );

    // Back: the host answers, and its counts match its tickets.
    let tries = std::sync::atomic::AtomicU32::new(0);
    let (_, v) = common::eventually("the host answering again", Duration::from_secs(10), || {
        let n = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let store = store.clone();
        async move {
            store
                .submit("h", queue_args("w", &format!("after{n}")))
                .await
                .ok()
        }
    })
    .await
    .unwrap();
    assert_eq!(v.state, TicketState::Queued);
    assert_eq!(counts_match_tickets(&store).await, 1);
    drop(redis);
}

/// Auth attempts that arrive together go to Redis in shared script calls (fewer EVALSHA calls
/// than attempts, by Redis's own count), and each is answered as it would have been alone:
/// 20 identities, 30 concurrent attempts each, 5 allowed per window. Exactly 5 of each
/// identity's attempts pass, with 4, 3, 2, 1 and 0 remaining once each; the other 25 are
/// locked out (a rule with a lockout: the first refusal starts it) or refused until the window
/// ends (one without). Callers that vanish mid-call leave the others answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_auth_attempts_go_together_and_count_as_one_by_one() {
    use admission_authority::auth::AuthDecision;

    let port = common::free_port();
    let redis = RedisServer::start(port);
    let store = Arc::new(
        RedisStore::new(
            &redis.url(),
            "ab:",
            1,
            Policy::default(),
            Arc::new(ManualClock::new(0)),
        )
        .unwrap(),
    );
    let rule = |id: u32| BucketRule::new(5, 60_000, if id.is_multiple_of(2) { 30_000 } else { 0 });
    let before = evalsha_calls(port);
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..30 {
        for id in 0..20u32 {
            let store = store.clone();
            burst.spawn(async move {
                let d = store
                    .auth_attempt("login", &format!("u{id}"), rule(id))
                    .await
                    .unwrap();
                (id, d)
            });
        }
    }
    // Callers that vanish mid-call: their attempts may or may not count, but the others are
    // answered all the same.
    let mut vanishing = tokio::task::JoinSet::new();
    for i in 0..50 {
        let store = store.clone();
        vanishing.spawn(async move {
            let _ = store
                .auth_attempt("login", &format!("gone{i}"), rule(1))
                .await;
        });
    }
    vanishing.abort_all();
    let mut by_id: std::collections::HashMap<u32, Vec<AuthDecision>> = Default::default();
    while let Some(r) = burst.join_next().await {
        let (id, d) = r.unwrap();
        by_id.entry(id).or_default().push(d);
    }
    assert_eq!(by_id.len(), 20);
    for (id, ds) in &by_id {
        assert!(ds.iter().all(|d| !d.degraded), "u{id}: {ds:?}");
        let mut left: Vec<u32> = ds
            .iter()
            .filter(|d| d.allowed())
            .map(|d| d.remaining)
            .collect();
        left.sort_unstable();
        assert_eq!(left, [0, 1, 2, 3, 4], "u{id}: {ds:?}");
        let refused: Vec<&AuthDecision> = ds.iter().filter(|d| !d.allowed()).collect();
        assert_eq!(refused.len(), 25, "u{id}");
        let (verdict, longest) = if id.is_multiple_of(2) {
            (AuthVerdict::LockedOut, 30_000)
        } else {
            (AuthVerdict::AttemptsExhausted, 60_000)
        };
        for d in refused {
            assert_eq!(d.verdict, verdict, "u{id}: {d:?}");
            assert!(
                d.retry_after_ms > 0 && d.retry_after_ms <= longest,
                "u{id}: {d:?}"
            );
        }
    }
    let calls = evalsha_calls(port) - before;
    let (batched, batches) = store.auth_batched_counts();
    assert!(
        calls < 600 && batches > 0 && batched >= 2 * batches,
        "600 attempts (and up to 50 vanished) took {calls} script calls, {batched} attempts in \
         {batches} batches"
    );
    // Redis holds what the answers said: each locked-out identity is locked, each other one
    // has no attempt left in its window.
    for id in 0..20u32 {
        let d = store
            .auth_peek("login", &format!("u{id}"), rule(id))
            .await
            .unwrap();
        assert!(!d.allowed() && !d.degraded, "u{id}: {d:?}");
    }
    drop(redis);
}

/// Redis stopped (SIGSTOP) under 300 concurrent auth attempts, more than one call carries:
/// every one is answered by the replica's local buckets (degraded), none as if Redis had
/// counted it, all within a deadline that one call's timeout fits in but not one per batch
/// (the attempts behind a failed call are failed with it, not sent in turn); once Redis runs
/// again and the skip window has passed, attempts are Redis's again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_answers_concurrent_auth_attempts_locally_and_recovers() {
    let port = common::free_port();
    let redis = RedisServer::start(port);
    let pid = redis.child.as_ref().unwrap().id().to_string();
    let clock = ManualClock::new(1_000);
    let store = Arc::new(
        RedisStore::new(
            &redis.url(),
            "astall:",
            1,
            Policy::default(),
            Arc::new(clock.clone()),
        )
        .unwrap(),
    );
    let rule = BucketRule::new(100, 60_000, 0);
    let d = store.auth_attempt("login", "warm", rule).await.unwrap();
    assert!(d.allowed() && !d.degraded, "{d:?}");
    let signal = |sig: &str| signal(&pid, sig);
    signal("-STOP");
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..300 {
        let store = store.clone();
        burst.spawn(async move { store.auth_attempt("login", &format!("s{i}"), rule).await });
    }
    // A call waits out Redis's 1 s timeout: the batches in turn would take 5 s or more.
    let answered = tokio::time::timeout(Duration::from_secs(4), async {
        let mut degraded = 0;
        while let Some(r) = burst.join_next().await {
            let d = r.unwrap().unwrap();
            assert!(d.allowed(), "a fresh local bucket has room: {d:?}");
            if d.degraded {
                degraded += 1;
            }
        }
        degraded
    })
    .await;
    signal("-CONT");
    assert_eq!(
        answered.expect("every attempt answered while Redis was stopped"),
        300,
        "an attempt was answered as if Redis had counted it"
    );
    clock.advance(AUTH_SKIP_MS);
    let back = common::eventually("Redis counting again", Duration::from_secs(10), || {
        let store = store.clone();
        async move {
            let d = store.auth_attempt("login", "after", rule).await.ok()?;
            (!d.degraded).then_some(d)
        }
    })
    .await;
    assert!(back.allowed(), "{back:?}");
    drop(redis);
}

/// ShouldRateLimits of one domain that arrive together go to Redis in shared script calls
/// (fewer EVALSHA calls than requests, by Redis's own count), each applied whole and counted
/// exactly: 200 concurrent requests, each hitting counter `a` by 1 and `b` by 2, see `a` at 1 to
/// 200 once each and `b` at twice their `a` (both hits of a request together); another
/// domain's 50 requests at the same time count on their own. Callers that vanish mid-call
/// leave the others answered and every count whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domains_concurrent_rate_limit_requests_go_together_and_count_exactly() {
    use admission_authority::ratelimit::{Hit, Unit};
    use admission_authority::store::RateLimitStore;

    let port = common::free_port();
    let redis = RedisServer::start(port);
    let store = real_time_store(&redis, "rlb:");
    let hit = |key: &str, addend| Hit {
        key: key.into(),
        unit: Unit::Day,
        addend,
    };
    let before = evalsha_calls(port);
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..250 {
        let (store, hits) = (store.clone(), vec![hit("a", 1), hit("b", 2)]);
        let domain = if i % 5 == 4 { "e" } else { "d" };
        burst.spawn(async move {
            let c = store.rate_limit_hits(domain, 10, &hits).await.unwrap();
            (domain, c.counts)
        });
    }
    let mut vanishing = tokio::task::JoinSet::new();
    for _ in 0..30 {
        let (store, hits) = (store.clone(), vec![hit("a", 1), hit("b", 2)]);
        vanishing.spawn(async move {
            let _ = store.rate_limit_hits("d", 10, &hits).await;
        });
    }
    vanishing.abort_all();
    let (mut d, mut e) = (Vec::new(), Vec::new());
    while let Some(r) = burst.join_next().await {
        let (domain, counts) = r.unwrap();
        let (Some(a), Some(b)) = (counts[0], counts[1]) else {
            panic!("a count refused: {counts:?}");
        };
        assert_eq!(b, 2 * a, "a request's hits counted apart: {counts:?}");
        if domain == "d" { &mut d } else { &mut e }.push(a);
    }
    d.sort_unstable();
    e.sort_unstable();
    assert_eq!(
        e,
        (1..=50).collect::<Vec<_>>(),
        "e counted 1 by 1, on its own"
    );
    let look = store
        .rate_limit_hits("d", 10, &[hit("a", 0), hit("b", 0)])
        .await
        .unwrap()
        .counts;
    let total = look[0].unwrap();
    assert!(
        (200..=230).contains(&total) && look[1] == Some(2 * total),
        "{look:?}"
    );
    // The vanished callers' requests that were applied took counts among the burst's.
    let mut distinct = d.clone();
    distinct.dedup();
    assert!(
        distinct.len() == 200 && d[0] >= 1 && d[199] <= total,
        "d counted 1 by 1: {d:?}"
    );
    let calls = evalsha_calls(port) - before;
    let (batched, batches) = store.rate_limit_batched_counts();
    assert!(
        calls < 250 && batches > 0 && batched >= 2 * batches,
        "250 requests (and up to 30 vanished) took {calls} script calls, {batched} requests in \
         {batches} batches"
    );
    drop(redis);
}

/// Auth buckets, lockouts and the ledger's runs leave nothing behind on Redis that does not
/// expire: after attempts (one identity locked out), a reservation settled and one left open,
/// every key either has a TTL or is one of the few fixed structures (per prefix, or per host:
/// a bounded set, never one per identity or request), or the run whose reservation is still
/// open, which expires once settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_and_ledger_keys_expire_or_are_fixed_structures() {
    use admission_authority::ledger::{AuthorizeArgs, Coverage, Usage};
    use admission_authority::store::LedgerStore;

    let port = common::free_port();
    let redis = RedisServer::start(port);
    let store = real_time_store(&redis, "keep:");
    let rule = BucketRule {
        max_attempts: 2,
        window_ms: 60_000,
        lockout_ms: 30_000,
    };
    for who in ["locked", "locked", "locked", "once"] {
        store.auth_attempt("login", who, rule).await.unwrap();
    }
    let args = |run: &str| AuthorizeArgs {
        run_id: run.into(),
        step: 1,
        subject: "alice".into(),
        account_id: None,
        model: String::new(),
        requested_output_tokens: 10,
        estimated_input_tokens: 5,
        estimated_cost: 0,
    };
    for run in ["settled", "open"] {
        store.authorize("h", args(run)).await.unwrap().unwrap();
    }
    let usage = Usage {
        input_tokens: 5,
        output_tokens: 3,
        cost: 0,
        coverage: Coverage::Complete,
    };
    store
        .settle("h", "settled", 1, usage)
        .await
        .unwrap()
        .unwrap();

    let keys = keys_with_ttls(&redis.url(), "keep:*").await;
    let mut lasting = Vec::new();
    for (key, ttl) in &keys {
        if *ttl <= 0 {
            lasting.push(key.clone());
        } else if key.contains("authrl:") {
            assert!(*ttl <= 60_000, "{key} outlives its window: {ttl} ms");
        }
    }
    let expiring = keys.len() - lasting.len();
    let fixed = [
        "keep:epoch",
        "keep:hosts",
        "keep:ledger:{h}:reserved",
        "keep:ledger:{h}:stats",
        "keep:replicas",
        // A run with an open reservation is kept until the step is settled (or, once
        // uncertain, resolved): it is counted until then.
        "keep:ledger:{h}:run:open",
    ];
    for key in &lasting {
        assert!(
            fixed.contains(&key.as_str()),
            "{key} has no TTL and is not a fixed structure: {lasting:?}"
        );
    }
    assert!(
        keys.iter().any(|(k, _)| k.ends_with("{login:locked}:l"))
            && keys.iter().any(|(k, _)| k.ends_with("{login:once}:b")),
        "the lockout and the bucket are there: {keys:?}"
    );
    // The lockout, the other identity's bucket and the settled run.
    assert!(expiring >= 3, "{keys:?}");
    // Settled, the open run expires as the other did.
    store.settle("h", "open", 1, usage).await.unwrap().unwrap();
    let keys = keys_with_ttls(&redis.url(), "keep:ledger:{h}:run:open").await;
    assert!(
        matches!(keys[..], [(_, ttl)] if ttl > 0),
        "a settled run expires: {keys:?}"
    );
    drop(redis);
}

/// Rate limit counters and their domain's tally leave nothing behind on Redis: every key has a
/// TTL no longer than its window, after a lone request (the single script), after concurrent
/// ones (a batch) and after hits that found their counter in its window (which keep its TTL);
/// a counter of a one-second window is gone soon after that second ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_counters_expire_with_their_window() {
    use admission_authority::ratelimit::{Hit, Unit};
    use admission_authority::store::RateLimitStore;

    let port = common::free_port();
    let redis = RedisServer::start(port);
    let store = real_time_store(&redis, "rlttl:");
    let hit = |key: &str, unit| Hit {
        key: key.into(),
        unit,
        addend: 1,
    };
    for _ in 0..3 {
        store
            .rate_limit_hits("d", 10, &[hit("m|minute", Unit::Minute)])
            .await
            .unwrap();
    }
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..40 {
        let store = store.clone();
        burst.spawn(async move {
            let hits = [hit("m|minute", Unit::Minute), hit("s|second", Unit::Second)];
            store.rate_limit_hits("d", 10, &hits).await.unwrap()
        });
    }
    while let Some(r) = burst.join_next().await {
        let counts = r.unwrap().counts;
        assert!(counts.iter().all(Option::is_some), "{counts:?}");
    }
    let keys = keys_with_ttls(&redis.url(), "rlttl:*").await;
    assert_eq!(keys.len(), 3, "two counters and the tally: {keys:?}");
    for (key, ttl) in &keys {
        let most = if key.ends_with("s|second") {
            1_000
        } else {
            60_000
        };
        assert!(
            (1..=most).contains(ttl),
            "{key} expires within its window ({most} ms): PTTL {ttl}"
        );
    }
    let url = redis.url();
    common::eventually(
        "the one-second counter to expire",
        Duration::from_secs(3),
        || async {
            let left = keys_with_ttls(&url, "rlttl:*s|second").await;
            left.is_empty().then_some(())
        },
    )
    .await;
    drop(redis);
}

/// Redis stopped (SIGSTOP) under 300 concurrent rate limit requests of one domain, more than
/// one call carries: every one is answered with an error, none as counted, within a deadline
/// that one call's timeout fits in but not one per batch; once Redis runs again, requests count
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_fails_concurrent_rate_limit_requests_at_once_and_recovers() {
    use admission_authority::ratelimit::{Hit, Unit};
    use admission_authority::store::RateLimitStore;

    let port = common::free_port();
    let redis = RedisServer::start(port);
    let pid = redis.child.as_ref().unwrap().id().to_string();
    let store = real_time_store(&redis, "rlstall:");
    let hits = || {
        vec![Hit {
            key: "tenant=t|day".into(),
            unit: Unit::Day,
            addend: 1,
        }]
    };
    store.rate_limit_hits("d", 10, &hits()).await.unwrap();
    signal(&pid, "-STOP");
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..300 {
        let (store, hits) = (store.clone(), hits());
        burst.spawn(async move { store.rate_limit_hits("d", 10, &hits).await });
    }
    // A call waits out Redis's 1 s timeout: the batches in turn would take 5 s or more.
    let answered = tokio::time::timeout(Duration::from_secs(4), async {
        let mut errors = 0;
        while let Some(r) = burst.join_next().await {
            errors += usize::from(r.unwrap().is_err());
        }
        errors
    })
    .await;
    signal(&pid, "-CONT");
    assert_eq!(
        answered.expect("every request answered while Redis was stopped"),
        300,
        "a request was answered as if Redis had counted it"
    );
    let counts = common::eventually("Redis counting again", Duration::from_secs(10), || {
        let (store, hits) = (store.clone(), hits());
        async move { store.rate_limit_hits("d", 10, &hits).await.ok() }
    })
    .await;
    assert!(counts.counts[0] >= Some(2), "{counts:?}");
    drop(redis);
}
