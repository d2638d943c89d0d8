//! The Redis store against a redis-server this test starts, stops and restarts itself (by PID):
//! what only a real outage shows. The scenarios every store shares are in store_conformance.rs.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use admission_authority::auth::{AuthPolicy, AuthVerdict, BucketRule};
use admission_authority::clock::ManualClock;
use admission_authority::store::redis::{AUTH_SKIP_MS, RedisStore};
use admission_authority::store::{AuthStore, Policy};

/// A redis-server on a loopback port, stopped when dropped.
struct RedisServer {
    child: Option<Child>,
    port: u16,
}

impl RedisServer {
    fn start(port: u16) -> RedisServer {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--port", &port.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (scripts/test installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        RedisServer {
            child: Some(child),
            port,
        }
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Log lines written while the guard lives, for checking what the store said.
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
    let port = RedisServer::free_port();
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

    // Redis comes back (empty). After the skip window the store uses it again, but the lockout
    // earned during the outage still holds.
    let _redis = RedisServer::start(port);
    clock.advance(AUTH_SKIP_MS);
    let locked = attempt("mallory").await.unwrap();
    assert_eq!(locked.verdict, AuthVerdict::LockedOut);
    assert!(locked.retry_after_ms > 0 && locked.retry_after_ms < 300_000);
    let carol = attempt("carol").await.unwrap();
    assert!(
        carol.allowed() && !carol.degraded,
        "shared again: {carol:?}"
    );
    assert_eq!(carol.remaining, 4);
}

#[tokio::test]
async fn a_custom_bucket_counts_once_across_two_replicas_of_the_store() {
    let redis = RedisServer::start(RedisServer::free_port());
    let rule = BucketRule::new(3, 60_000, 60_000);
    let policy = || Policy {
        auth: AuthPolicy {
            local_max_keys: 100,
            buckets: [("login".to_string(), rule)].into(),
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
