//! Auth buckets through the real server over gRPC: CheckAuthAttempt, ResetAuthAttempts and the
//! operator's UnlockAuth, the built-in budgets, and bad input.

mod common;

use std::time::Duration;

use admission_authority::api::{self, admission_client::AdmissionClient};
use common::{Server, eventually};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

/// A short bucket so that a lockout ends within the test: 3 attempts per 10 s, 300 ms lockout.
const CONFIG: &str = "
auth:
  buckets:
    login: { max_attempts: 3, window: 10s, lockout: 300ms }
";

fn attempt_req(endpoint: &str, identity: &str) -> api::AuthAttemptRequest {
    api::AuthAttemptRequest {
        endpoint: endpoint.into(),
        identity: identity.into(),
        ..Default::default()
    }
}

async fn attempt(
    c: &mut AdmissionClient<Channel>,
    endpoint: &str,
    identity: &str,
) -> api::AuthAttemptResponse {
    c.check_auth_attempt(attempt_req(endpoint, identity))
        .await
        .expect("an answer")
        .into_inner()
}

#[tokio::test]
async fn attempts_lock_out_then_a_fresh_window_opens_after_the_lockout() {
    let server = Server::start_with_config("auth-lockout", CONFIG, &[]);
    let mut c = server.client().await;
    for left in [2, 1, 0] {
        let r = attempt(&mut c, "login", "mallory@example.com").await;
        assert!(r.allowed && !r.locked && !r.degraded, "{r:?}");
        assert_eq!((r.remaining, r.retry_after_ms), (left, 0));
    }
    let r = attempt(&mut c, "login", "mallory@example.com").await;
    assert!(!r.allowed && r.locked, "{r:?}");
    assert_eq!(r.reason, "LOCKED_OUT");
    assert!(r.retry_after_ms > 0 && r.retry_after_ms <= 300, "{r:?}");
    assert!(
        attempt(&mut c, "login", "alice@example.com").await.allowed,
        "another identity has its own bucket"
    );
    // The lockout is 300 ms; afterwards the next attempt opens a fresh window.
    let fresh = eventually("the lockout to end", Duration::from_secs(5), || {
        let mut c = c.clone();
        async move {
            let r = attempt(&mut c, "login", "mallory@example.com").await;
            r.allowed.then_some(r)
        }
    })
    .await;
    assert_eq!(fresh.remaining, 2, "a fresh window with the whole budget");
}

#[tokio::test]
async fn a_peek_reports_the_bucket_and_counts_nothing() {
    let server = Server::start_with_config("auth-peek", CONFIG, &[]);
    let mut c = server.client().await;
    let peek = |c: &mut AdmissionClient<Channel>| {
        let mut c = c.clone();
        async move {
            let req = api::AuthAttemptRequest {
                peek: true,
                ..attempt_req("login", "mallory")
            };
            c.check_auth_attempt(req).await.unwrap().into_inner()
        }
    };
    for _ in 0..5 {
        let p = peek(&mut c).await;
        assert!(p.allowed && !p.locked && p.remaining == 3, "{p:?}");
    }
    for _ in 0..4 {
        attempt(&mut c, "login", "mallory").await;
    }
    let p = peek(&mut c).await;
    assert!(!p.allowed && p.locked && p.reason == "LOCKED_OUT", "{p:?}");
    assert!(p.retry_after_ms > 0 && p.retry_after_ms <= 300, "{p:?}");
}

#[tokio::test]
async fn reset_and_operator_unlock_clear_a_lockout() {
    let server = Server::start_with_config("auth-reset", CONFIG, &[]);
    let mut c = server.client().await;
    let mut op = server.operator().await;
    for _ in 0..4 {
        attempt(&mut c, "login", "u1").await;
    }
    assert!(attempt(&mut c, "login", "u1").await.locked);
    let reset = c
        .reset_auth_attempts(api::AuthResetRequest {
            endpoint: "login".into(),
            identity: "u1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(reset.cleared);
    assert_eq!(attempt(&mut c, "login", "u1").await.remaining, 2);

    for _ in 0..4 {
        attempt(&mut c, "login", "u1").await;
    }
    let unlock = |identity: &str| api::UnlockAuthRequest {
        endpoint: "login".into(),
        identity: identity.into(),
    };
    let r = op.unlock_auth(unlock("u1")).await.unwrap().into_inner();
    assert!(r.was_locked && r.cleared, "{r:?}");
    assert!(attempt(&mut c, "login", "u1").await.allowed);
    let r = op.unlock_auth(unlock("nobody")).await.unwrap().into_inner();
    assert!(!r.was_locked && !r.cleared, "{r:?}");
}

#[tokio::test]
async fn built_in_budgets_apply_without_a_config_file() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    for (endpoint, budget) in [
        ("approval", 10),
        ("ws_upgrade", 10),
        ("magic_link", 5),
        ("pairing_verify", 5),
    ] {
        for i in 0..budget {
            let r = attempt(&mut c, endpoint, "203.0.113.7").await;
            assert!(r.allowed, "{endpoint} attempt {}: {r:?}", i + 1);
        }
        let r = attempt(&mut c, endpoint, "203.0.113.7").await;
        assert!(!r.allowed && r.locked, "{endpoint}: {r:?}");
        assert_eq!(
            r.retry_after_ms, 300_000,
            "{endpoint}: a five-minute lockout"
        );
    }
}

#[tokio::test]
async fn bad_auth_input_is_refused_with_the_field_named_and_changes_nothing() {
    let server = Server::start_with_config("auth-bad", CONFIG, &[]);
    let mut c = server.client().await;
    let long = "x".repeat(129);
    let cases = [
        (attempt_req("", "u"), "endpoint: must not be empty"),
        (
            attempt_req(&long, "u"),
            "endpoint: must be at most 128 bytes",
        ),
        (attempt_req("login", ""), "identity: must not be empty"),
        (
            attempt_req("login", &long),
            "identity: must be at most 128 bytes",
        ),
        (
            attempt_req("login", "josé"),
            "identity: must be printable ASCII",
        ),
        (
            attempt_req("signup", "u"),
            "endpoint: unknown endpoint \"signup\"; configured: approval, login, magic_link, \
             pairing_verify, ws_upgrade (or declare its bucket in `declared`)",
        ),
    ];
    for (req, expected) in cases {
        let err = c.check_auth_attempt(req.clone()).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{expected}");
        assert_eq!(err.message(), expected);
        let field = &err
            .get_details_bad_request()
            .expect("BadRequest")
            .field_violations[0]
            .field;
        assert!(
            expected.starts_with(field.as_str()),
            "{field} in {expected}"
        );
        let reset = c
            .reset_auth_attempts(api::AuthResetRequest {
                endpoint: req.endpoint.clone(),
                identity: req.identity.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(reset.message(), expected);
        let unlock = server
            .operator()
            .await
            .unlock_auth(api::UnlockAuthRequest {
                endpoint: req.endpoint,
                identity: req.identity,
            })
            .await
            .unwrap_err();
        assert_eq!(unlock.message(), expected);
    }
    // None of them counted: "u" still has its whole budget on login.
    assert_eq!(attempt(&mut c, "login", "u").await.remaining, 2);
}

/// What an operator reads in the log: a full key table is said once (not per refused attempt),
/// and every UnlockAuth is logged with its endpoint and whether the key was locked.
#[tokio::test]
async fn a_full_key_table_and_an_operator_unlock_are_logged() {
    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("auth-log-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let config = common::config_file("auth-log", &format!("{CONFIG}  local_max_keys: 2\n"));
    let server = Server::spawn(
        &["--config", config.to_str().unwrap(), "--log-format", "json"],
        "info",
        std::process::Stdio::from(file),
    );
    let mut c = server.client().await;
    let mut op = server.operator().await;
    for who in ["a", "b"] {
        assert!(attempt(&mut c, "login", who).await.allowed);
    }
    for who in ["c", "d", "e"] {
        let r = attempt(&mut c, "login", who).await;
        assert_eq!((r.allowed, r.reason.as_str()), (false, "KEY_TABLE_FULL"));
    }
    // The bound is per endpoint: a full "login" refuses nobody on another endpoint.
    for who in ["c", "d"] {
        assert!(
            attempt(&mut c, "approval", who).await.allowed,
            "{who} on approval"
        );
    }
    for _ in 0..3 {
        attempt(&mut c, "login", "a").await;
    }
    op.unlock_auth(api::UnlockAuthRequest {
        endpoint: "login".into(),
        identity: "a".into(),
    })
    .await
    .unwrap();
    drop(server);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        logged
            .matches("auth bucket table is full of live keys")
            .count(),
        1,
        "once, not per refused attempt: {logged}"
    );
    let unlock = logged
        .lines()
        .find(|l| l.contains("auth bucket unlocked by an operator"))
        .unwrap_or_else(|| panic!("no unlock line: {logged}"));
    assert!(
        unlock.contains(r#""endpoint":"login""#) && unlock.contains(r#""was_locked":true"#),
        "{unlock}"
    );
    let full = logged
        .lines()
        .find(|l| l.contains("auth bucket table is full of live keys"))
        .unwrap();
    assert!(
        full.contains(r#""endpoint":"login""#),
        "names the endpoint: {full}"
    );
}

/// A gateway's limiter declares the numbers it was built with: they apply to an endpoint the
/// operator's file does not name (a built-in name included, or one the authority has never
/// heard of), the operator's bucket wins where the file names the endpoint, and every answer
/// says which bucket decided.
#[tokio::test]
async fn a_declared_bucket_applies_unless_the_operators_file_names_the_endpoint() {
    let server = Server::start_with_config("auth-declared", CONFIG, &[]);
    let mut c = server.client().await;
    let three = api::AuthBucket {
        max_attempts: 3,
        window_ms: 60_000,
        lockout_ms: 200,
    };
    let declared =
        |endpoint: &str, identity: &str, bucket: &api::AuthBucket| api::AuthAttemptRequest {
            declared: Some(*bucket),
            ..attempt_req(endpoint, identity)
        };
    // pairing_verify is built in at 5 attempts; the declared 3 win over it.
    for endpoint in ["pairing_verify", "pairing_code"] {
        for _ in 0..3 {
            let r = c
                .check_auth_attempt(declared(endpoint, "u", &three))
                .await
                .unwrap()
                .into_inner();
            assert!(r.allowed, "{endpoint}: {r:?}");
            assert_eq!(
                r.bucket,
                Some(three),
                "{endpoint}: the declared bucket decides"
            );
        }
        let r = c
            .check_auth_attempt(declared(endpoint, "u", &three))
            .await
            .unwrap()
            .into_inner();
        assert!(
            !r.allowed && r.locked,
            "{endpoint}: the fourth is refused: {r:?}"
        );
        assert!(
            r.retry_after_ms <= 200,
            "{endpoint}: the declared lockout: {r:?}"
        );
    }
    // The file names login (3 / 10 s / 300 ms): it wins over a declared 100.
    let generous = api::AuthBucket {
        max_attempts: 100,
        ..three
    };
    let r = c
        .check_auth_attempt(declared("login", "v", &generous))
        .await
        .unwrap()
        .into_inner();
    let operators = api::AuthBucket {
        max_attempts: 3,
        window_ms: 10_000,
        lockout_ms: 300,
    };
    assert_eq!((r.remaining, r.bucket), (2, Some(operators)), "{r:?}");
    // Without a declaration the built-in bucket decides, and says so.
    let r = attempt(&mut c, "magic_link", "w").await;
    assert_eq!(r.bucket.map(|b| b.max_attempts), Some(5));

    // A declared endpoint can be reset (declaring it again) and unlocked by an operator.
    let reset = c
        .reset_auth_attempts(api::AuthResetRequest {
            endpoint: "pairing_code".into(),
            identity: "u".into(),
            declared: Some(three),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(reset.cleared);
    let unlock = server
        .operator()
        .await
        .unlock_auth(api::UnlockAuthRequest {
            endpoint: "pairing_code".into(),
            identity: "nobody".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!unlock.cleared);

    // Bad numbers are named and count nothing.
    let bad = api::AuthBucket {
        max_attempts: 0,
        window_ms: 0,
        lockout_ms: 8 * 24 * 3_600_000,
    };
    let err = c
        .check_auth_attempt(declared("pairing_code", "u", &bad))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "declared.max_attempts: must be 1..1000000; declared.window_ms: must be \
         1..604800000 (7 days); declared.lockout_ms: must be 0..604800000 (7 days)"
    );
    let err = c
        .check_auth_attempt(declared("pairing code", "u", &three))
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "endpoint: endpoint names are 1..64 letters, digits, '_', '-' or '.'"
    );
    let r = c
        .check_auth_attempt(declared("pairing_code", "u", &three))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.remaining, 2, "the refused calls counted nothing");

    // Declared endpoints the file does not name are bounded per authority process.
    for i in 1..64 {
        let r = c
            .check_auth_attempt(declared(&format!("endpoint-{i}"), "u", &three))
            .await;
        assert!(r.is_ok(), "declared endpoint {} of 64: {r:?}", i + 1);
    }
    let err = c
        .check_auth_attempt(declared("endpoint-64", "u", &three))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("name it in auth.buckets"), "{err:?}");
    assert!(
        c.check_auth_attempt(declared("pairing_code", "x", &three))
            .await
            .is_ok(),
        "an endpoint declared before still works"
    );
}
