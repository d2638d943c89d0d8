//! Envoy's rate limit service on the real binary, over gRPC with the generated Envoy client:
//! limits in envoyproxy/ratelimit's format hold and answer as upstream answers; a look counts
//! nothing and a charge past the limit makes the next look over it; credentials name the
//! domains an Envoy may ask about; bad requests change nothing; a flood of tenant values stops
//! at max_counters; counts survive a kill -9 on the data dir, are shared by two replicas on
//! Redis, and a stopped Redis answers UNAVAILABLE; SIGHUP reloads config_dir's files.
//!
//! Counting tests use day windows, so a run never straddles a window's end in practice (the
//! windows themselves are tested with an injected clock in the store conformance suite).
#![allow(
    clippy::disallowed_types,
    reason = "it polls real processes with deadlines"
)]

mod common;

use std::time::Duration;

use admission_authority::api::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry, rate_limit_descriptor::RateLimitOverride,
};
use admission_authority::api::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse, rate_limit_response::Code,
    rate_limit_service_client::RateLimitServiceClient,
};
use common::{RedisServer, Server, config_file, eventually, free_port, http_get};
use tonic::transport::Channel;

const DOMAIN: &str = "ai-gateway";

fn descriptor(pairs: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: pairs
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: DOMAIN.into(),
        descriptors,
        hits_addend: 0,
        hits_subtrahend: 0,
    }
}

async fn client(server: &Server) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::new(server.channel().await)
}

async fn ask(c: &mut RateLimitServiceClient<Channel>, req: RateLimitRequest) -> RateLimitResponse {
    c.should_rate_limit(req)
        .await
        .expect("answered")
        .into_inner()
}

async fn tenant(c: &mut RateLimitServiceClient<Channel>, t: &str) -> Code {
    ask(c, request(vec![descriptor(&[("tenant", t)])]))
        .await
        .overall_code()
}

const TENANT_3_PER_DAY: &str = "rate_limits:
  response_headers: true
  domains:
    - domain: ai-gateway
      descriptors:
        - key: tenant
          rate_limit: { unit: day, requests_per_unit: 3 }
        - key: tenant
          value: vip
          rate_limit: { unlimited: true }
        - key: tokens
          rate_limit: { unit: day, requests_per_unit: 100, name: tokens }
";

#[tokio::test]
async fn a_limit_holds_and_answers_as_envoyproxy_ratelimit_does() {
    let server = Server::start_with_config("rl-basic", TENANT_3_PER_DAY, &[]);
    let mut c = client(&server).await;
    for i in 0..3 {
        let r = ask(&mut c, request(vec![descriptor(&[("tenant", "acme")])])).await;
        assert_eq!(r.overall_code(), Code::Ok, "hit {i}");
        let s = &r.statuses[0];
        let limit = s.current_limit.as_ref().expect("a limit applies");
        assert_eq!((limit.requests_per_unit, limit.unit), (3, 4), "3 per DAY");
        assert_eq!(s.limit_remaining, 2 - i);
        let reset = s.duration_until_reset.expect("a reset").seconds;
        assert!((1..=86_400).contains(&reset), "{reset}");
        let headers: Vec<(&str, &str)> = r
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        assert_eq!(headers[0], ("x-ratelimit-limit", "3"));
        assert_eq!(headers[1].1, (2 - i).to_string());
        assert_eq!(headers[2].0, "x-ratelimit-reset");
    }
    let r = ask(&mut c, request(vec![descriptor(&[("tenant", "acme")])])).await;
    assert_eq!(r.overall_code(), Code::OverLimit);
    assert_eq!(r.statuses[0].code(), Code::OverLimit);
    // Another tenant has its own count; the unlimited one is never counted.
    assert_eq!(tenant(&mut c, "other").await, Code::Ok);
    for _ in 0..5 {
        let r = ask(&mut c, request(vec![descriptor(&[("tenant", "vip")])])).await;
        assert_eq!(r.overall_code(), Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
        assert!(r.statuses[0].current_limit.is_none());
    }
    // One descriptor over its limit makes the request over it; every status is answered.
    let r = ask(
        &mut c,
        request(vec![
            descriptor(&[("tenant", "fresh")]),
            descriptor(&[("tenant", "acme")]),
            descriptor(&[("user", "nobody")]),
        ]),
    )
    .await;
    assert_eq!(r.overall_code(), Code::OverLimit);
    let codes: Vec<Code> = r.statuses.iter().map(|s| s.code()).collect();
    assert_eq!(codes, [Code::Ok, Code::OverLimit, Code::Ok]);
    assert!(
        r.statuses[2].current_limit.is_none(),
        "no rule matches user"
    );
    // A domain that is not configured answers OK, as upstream does.
    let mut other = request(vec![descriptor(&[("tenant", "acme")])]);
    other.domain = "not-configured".into();
    assert_eq!(ask(&mut c, other).await.overall_code(), Code::Ok);
}

#[tokio::test]
async fn a_look_counts_nothing_and_a_charge_past_the_limit_makes_the_next_look_over_it() {
    // Envoy AI Gateway's token budget: look with hits_addend 0 at request time, charge the
    // tokens at stream end.
    let server = Server::start_with_config("rl-tokens", TENANT_3_PER_DAY, &[]);
    let mut c = client(&server).await;
    let tokens = |addend: u64| {
        let mut d = descriptor(&[("tokens", "acme")]);
        d.hits_addend = Some(addend);
        request(vec![d])
    };
    for _ in 0..3 {
        let r = ask(&mut c, tokens(0)).await;
        assert_eq!(r.overall_code(), Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining, 100, "a look counts nothing");
    }
    let r = ask(&mut c, tokens(60)).await;
    assert_eq!(
        (r.overall_code(), r.statuses[0].limit_remaining),
        (Code::Ok, 40)
    );
    // The stream used more than was left: the charge counts anyway, past the limit.
    assert_eq!(
        ask(&mut c, tokens(70)).await.overall_code(),
        Code::OverLimit
    );
    let look = ask(&mut c, tokens(0)).await;
    assert_eq!(look.overall_code(), Code::OverLimit, "130 of 100 used");
    assert_eq!(
        look.statuses[0].current_limit.as_ref().unwrap().name,
        "tokens"
    );
    // The request's hits_addend counts for each descriptor without its own (0 means 1).
    let mut r = request(vec![descriptor(&[("tenant", "bulk")])]);
    r.hits_addend = 3;
    assert_eq!(ask(&mut c, r).await.statuses[0].limit_remaining, 0);
    assert_eq!(tenant(&mut c, "bulk").await, Code::OverLimit);
}

/// `hits_subtrahend` (Envoy's negative hits) takes hits back from the current window, never
/// below zero, answers OK even over the limit, and survives a restart on the data dir; a
/// request may not both add and take back.
#[tokio::test]
async fn hits_subtrahend_takes_hits_back_never_below_zero() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rl-subtract-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let args = ["--data-dir", dir.to_str().unwrap()];
    let server = Server::start_with_config("rl-subtract", TENANT_3_PER_DAY, &args);
    let mut c = client(&server).await;
    let tokens = |addend: u64, subtrahend: u32| {
        let mut d = descriptor(&[("tokens", "acme")]);
        d.hits_addend = (subtrahend == 0).then_some(addend);
        let mut r = request(vec![d]);
        r.hits_subtrahend = subtrahend;
        r
    };
    assert_eq!(
        ask(&mut c, tokens(130, 0)).await.overall_code(),
        Code::OverLimit
    );
    let back = ask(&mut c, tokens(0, 50)).await;
    assert_eq!(
        (
            back.overall_code(),
            back.statuses[0].code(),
            back.statuses[0].limit_remaining
        ),
        (Code::Ok, Code::Ok, 20),
        "130 - 50 = 80 of 100"
    );
    assert_eq!(
        back.statuses[0].current_limit.as_ref().unwrap().name,
        "tokens",
        "the limit is reported"
    );
    assert_eq!(
        ask(&mut c, tokens(0, 0)).await.statuses[0].limit_remaining,
        20
    );
    // Both adding and taking back: refused, nothing changes.
    let mut both = tokens(0, 5);
    both.hits_addend = 2;
    let status = c.should_rate_limit(both).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().starts_with("hits_subtrahend: "),
        "{status:?}"
    );
    let mut with_own = tokens(0, 5);
    with_own.descriptors[0].hits_addend = Some(1);
    let status = c.should_rate_limit(with_own).await.unwrap_err();
    assert!(
        status.message().contains("descriptors[0].hits_addend"),
        "{status:?}"
    );
    // Restarted on its data dir: the subtraction was kept, and one past zero stops at zero.
    drop(server);
    let server = Server::start_with_config("rl-subtract", TENANT_3_PER_DAY, &args);
    let mut c = client(&server).await;
    assert_eq!(
        ask(&mut c, tokens(0, 0)).await.statuses[0].limit_remaining,
        20
    );
    assert_eq!(
        ask(&mut c, tokens(0, 500)).await.statuses[0].limit_remaining,
        100
    );
    assert_eq!(
        ask(&mut c, tokens(60, 0)).await.statuses[0].limit_remaining,
        40
    );
}

#[tokio::test]
async fn bad_requests_name_the_field_and_count_nothing() {
    let server = Server::start_with_config("rl-bad", TENANT_3_PER_DAY, &[]);
    let mut c = client(&server).await;
    let mut no_domain = request(vec![descriptor(&[("tenant", "a")])]);
    no_domain.domain.clear();
    let mut unknown_unit = descriptor(&[("tenant", "a")]);
    unknown_unit.limit = Some(RateLimitOverride {
        requests_per_unit: 5,
        unit: 0,
    });
    let cases = [
        (no_domain, "domain: must not be empty"),
        (request(vec![]), "descriptors: at least one is required"),
        (
            request(vec![descriptor(&[("tenant", "a")]), descriptor(&[])]),
            "descriptors[1].entries: at least one entry is required",
        ),
        (
            request(vec![descriptor(&[("tenant", "a"), ("", "x")])]),
            "descriptors[0].entries[1].key: must not be empty",
        ),
        (
            request(vec![unknown_unit]),
            "descriptors[0].limit.unit: must be one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR",
        ),
    ];
    for (req, message) in cases {
        let status = c.should_rate_limit(req).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), message);
    }
    // Tenant "a" was named in every refused request and counted in none.
    let r = ask(&mut c, request(vec![descriptor(&[("tenant", "a")])])).await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
}

#[tokio::test]
async fn an_envoy_is_admitted_by_a_credential_naming_its_domain() {
    let yaml = format!(
        "{TENANT_3_PER_DAY}credentials:
  - {{ name: envoy-edge, role: gateway, domains: [ai-gateway], token_env: RL_TEST_ENVOY_TOKEN }}
  - {{ name: gw-one, role: gateway, host_ids: [one], token_env: RL_TEST_GATEWAY_TOKEN }}
  - {{ name: ops, role: operator, token_env: RL_TEST_OPS_TOKEN }}
"
    );
    let path = config_file("rl-credentials", &yaml);
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .env("RL_TEST_ENVOY_TOKEN", "envoy-secret")
        .env("RL_TEST_GATEWAY_TOKEN", "gateway-secret")
        .env("RL_TEST_OPS_TOKEN", "ops-secret")
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped());
    let server = Server::from_command(cmd);
    let channel = server.channel().await;
    let call = |token: Option<&'static str>, domain: &'static str| {
        let channel = channel.clone();
        async move {
            let mut req = tonic::Request::new(RateLimitRequest {
                domain: domain.into(),
                descriptors: vec![descriptor(&[("tenant", "t")])],
                hits_addend: 0,
                hits_subtrahend: 0,
            });
            if let Some(t) = token {
                req.metadata_mut()
                    .insert("authorization", format!("Bearer {t}").parse().unwrap());
            }
            RateLimitServiceClient::new(channel)
                .should_rate_limit(req)
                .await
                .map(|r| r.into_inner().overall_code())
                .map_err(|s| (s.code(), s.message().to_string()))
        }
    };
    let (code, _) = call(None, DOMAIN).await.unwrap_err();
    assert_eq!(code, tonic::Code::Unauthenticated, "never open by accident");
    assert_eq!(call(Some("envoy-secret"), DOMAIN).await, Ok(Code::Ok));
    let (code, message) = call(Some("envoy-secret"), "other").await.unwrap_err();
    assert_eq!(code, tonic::Code::PermissionDenied);
    assert!(message.contains("\"other\""), "{message}");
    for token in ["gateway-secret", "ops-secret"] {
        let (code, _) = call(Some(token), DOMAIN).await.unwrap_err();
        assert_eq!(code, tonic::Code::PermissionDenied, "{token}");
    }
    // The refused calls counted nothing: two more pass, the third is over.
    assert_eq!(call(Some("envoy-secret"), DOMAIN).await, Ok(Code::Ok));
    assert_eq!(call(Some("envoy-secret"), DOMAIN).await, Ok(Code::Ok));
    assert_eq!(
        call(Some("envoy-secret"), DOMAIN).await,
        Ok(Code::OverLimit)
    );
}

#[tokio::test]
async fn a_flood_of_tenant_values_stops_at_max_counters_and_is_counted() {
    let admin = free_port();
    let yaml = format!(
        "admin_listen: 127.0.0.1:{admin}
rate_limits:
  max_counters: 100
  domains:
    - domain: ai-gateway
      descriptors:
        - key: tenant
          rate_limit: {{ unit: day, requests_per_unit: 1000 }}
"
    );
    let server = Server::start_with_config("rl-flood", &yaml, &[]);
    let mut c = client(&server).await;
    let mut over = 0;
    for i in 0..150 {
        if tenant(&mut c, &format!("t{i}")).await == Code::OverLimit {
            over += 1;
            assert!(i >= 100, "tenant {i} refused before the domain was full");
        }
    }
    assert_eq!(over, 50);
    // The tenants it holds keep counting.
    let r = ask(&mut c, request(vec![descriptor(&[("tenant", "t7")])])).await;
    assert_eq!(r.statuses[0].limit_remaining, 998);
    let (_, metrics) = http_get(admin, "/metrics");
    let line = |name: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "{name}{{domain=\"ai-gateway\",descriptor=\"tenant\"}}"
                ))
            })
            .unwrap_or_else(|| panic!("{name} in /metrics"))
            .rsplit_once(' ')
            .unwrap()
            .1
            .to_string()
    };
    assert_eq!(line("admission_ratelimit_hits_total"), "151");
    assert_eq!(line("admission_ratelimit_counter_refused_total"), "50");
    assert_eq!(line("admission_ratelimit_over_limit_total"), "50");
    assert!(
        !metrics.contains("t99"),
        "a runtime value never becomes a label"
    );
}

#[tokio::test]
async fn counts_survive_a_kill_on_the_data_dir() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rl-data-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = config_file("rl-durable", TENANT_3_PER_DAY);
    let args = [
        "--config",
        path.to_str().unwrap(),
        "--data-dir",
        dir.to_str().unwrap(),
    ];
    {
        let server = Server::start(&args);
        let mut c = client(&server).await;
        assert_eq!(tenant(&mut c, "acme").await, Code::Ok);
        assert_eq!(tenant(&mut c, "acme").await, Code::Ok);
        let status = std::process::Command::new("kill")
            .args(["-9", &server.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let server = Server::start(&args);
    let mut c = client(&server).await;
    assert_eq!(tenant(&mut c, "acme").await, Code::Ok, "the third");
    assert_eq!(tenant(&mut c, "acme").await, Code::OverLimit);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn sighup_reloads_the_files_of_config_dir() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("rl-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = |n: u32| {
        format!(
            "domain: ai-gateway\ndescriptors:\n  - key: tenant\n    rate_limit:\n      unit: day\n      requests_per_unit: {n}\n"
        )
    };
    std::fs::write(dir.join("ai.yaml"), file(1)).unwrap();
    let yaml = format!("rate_limits:\n  config_dir: {}\n", dir.display());
    let server = Server::start_with_config("rl-reload", &yaml, &[]);
    let mut c = client(&server).await;
    assert_eq!(tenant(&mut c, "acme").await, Code::Ok);
    assert_eq!(tenant(&mut c, "acme").await, Code::OverLimit);
    // A broken file changes nothing; a good one is in force after the next SIGHUP.
    std::fs::write(dir.join("ai.yaml"), "domain: ai-gateway\ndescriptors: [ {").unwrap();
    let hup = || {
        std::process::Command::new("kill")
            .args(["-HUP", &server.pid().to_string()])
            .status()
            .unwrap()
    };
    assert!(hup().success());
    std::fs::write(dir.join("ai.yaml"), file(5)).unwrap();
    assert!(hup().success());
    eventually("the reloaded limit", Duration::from_secs(10), || {
        let mut c = c.clone();
        async move {
            let r = ask(
                &mut c,
                request(vec![descriptor(&[("tenant", "reload-probe")])]),
            )
            .await;
            (r.statuses[0].current_limit.as_ref()?.requests_per_unit == 5).then_some(())
        }
    })
    .await;
    // The count went on under the new limit: 2 so far, 3 more pass.
    for _ in 0..3 {
        assert_eq!(tenant(&mut c, "acme").await, Code::Ok);
    }
    assert_eq!(tenant(&mut c, "acme").await, Code::OverLimit);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two replicas on one Redis (the test command's) count once.
#[tokio::test]
async fn two_replicas_on_redis_share_one_count() {
    let url = std::env::var("ADMISSION_TEST_REDIS_URL")
        .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
    let yaml = format!(
        "{TENANT_3_PER_DAY}store:\n  redis: {{ url: \"{url}\", prefix: \"rl-shared-{}:\" }}\n",
        std::process::id()
    );
    let a = Server::start_with_config("rl-redis-a", &yaml, &[]);
    let b = Server::start_with_config("rl-redis-b", &yaml, &[]);
    let (mut ca, mut cb) = (client(&a).await, client(&b).await);
    assert_eq!(tenant(&mut ca, "acme").await, Code::Ok);
    assert_eq!(tenant(&mut cb, "acme").await, Code::Ok);
    assert_eq!(tenant(&mut ca, "acme").await, Code::Ok);
    assert_eq!(tenant(&mut cb, "acme").await, Code::OverLimit);
    assert_eq!(tenant(&mut ca, "acme").await, Code::OverLimit);
}

/// A Redis that stops answers UNAVAILABLE: never OK uncounted. Its return counts again.
#[tokio::test]
async fn a_stopped_redis_answers_unavailable_never_ok() {
    let port = free_port();
    let mut redis = RedisServer::start(port);
    let yaml = format!(
        "{TENANT_3_PER_DAY}store:\n  redis: {{ url: \"{}\", prefix: \"rl-down:\" }}\n",
        redis.url()
    );
    let server = Server::start_with_config("rl-redis-down", &yaml, &[]);
    let mut c = client(&server).await;
    assert_eq!(tenant(&mut c, "acme").await, Code::Ok);
    redis.stop();
    for _ in 0..3 {
        let status = c
            .should_rate_limit(request(vec![descriptor(&[("tenant", "acme")])]))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    }
    // Unmatched descriptors need no count: still answered while Redis is down.
    let r = ask(&mut c, request(vec![descriptor(&[("user", "u")])])).await;
    assert_eq!(r.overall_code(), Code::Ok);
    let _redis = RedisServer::start(port);
    eventually("Redis counting again", Duration::from_secs(15), || {
        let mut c = c.clone();
        async move {
            c.should_rate_limit(request(vec![descriptor(&[("tenant", "acme")])]))
                .await
                .ok()
        }
    })
    .await;
}

#[tokio::test]
async fn get_rate_limits_shows_the_rules_and_the_hottest_counters() {
    let server = Server::start_with_config("rl-operator", TENANT_3_PER_DAY, &[]);
    let mut c = client(&server).await;
    for _ in 0..3 {
        tenant(&mut c, "acme").await;
    }
    tenant(&mut c, "beta").await;
    let mut op = server.operator().await;
    let r = op
        .get_rate_limits(admission_authority::api::GetRateLimitsRequest {
            domain: String::new(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.domains.len(), 1);
    let d = &r.domains[0];
    assert_eq!(
        (d.domain.as_str(), d.source.as_str()),
        (DOMAIN, "rate_limits.domains[0]")
    );
    let rules: Vec<(String, u32, String, bool, String)> = d
        .rules
        .iter()
        .map(|x| {
            (
                x.descriptor.clone(),
                x.requests_per_unit,
                x.unit.clone(),
                x.unlimited,
                x.name.clone(),
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("tenant".into(), 3, "day".into(), false, String::new()),
            ("tenant_vip".into(), 0, String::new(), true, String::new()),
            ("tokens".into(), 100, "day".into(), false, "tokens".into()),
        ]
    );
    let hot: Vec<(String, u64)> = r.hottest.iter().map(|c| (c.key.clone(), c.count)).collect();
    assert_eq!(
        hot,
        [("tenant=acme|day".into(), 3), ("tenant=beta|day".into(), 1)]
    );
    assert_eq!(r.hottest[0].unit, "day");
    assert_eq!(
        r.hottest[0].window_start % 86_400,
        0,
        "a day starts at 00:00 UTC"
    );
    assert_eq!((r.max_counters, r.response_headers), (100_000, true));
    let missing = op
        .get_rate_limits(admission_authority::api::GetRateLimitsRequest {
            domain: "nope".into(),
            limit: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(
        missing.message().contains("\"nope\""),
        "{}",
        missing.message()
    );
    let too_many = op
        .get_rate_limits(admission_authority::api::GetRateLimitsRequest {
            domain: String::new(),
            limit: 1001,
        })
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), tonic::Code::InvalidArgument);
}

/// Many concurrent requests on two Redis store instances (two replicas): the hits answered OK
/// never add up to more than the limit, and every hit is counted once.
mod concurrent_on_redis {
    use std::sync::Arc;

    use admission_authority::clock::SystemClock;
    use admission_authority::ratelimit::{self, Code, Descriptor, Request};
    use admission_authority::store::redis::RedisStore;
    use admission_authority::store::{Policy, RateLimitStore};
    use proptest::prelude::*;

    fn rules(limit: u32) -> ratelimit::Rules {
        let mut root = ratelimit::rules::Level::default();
        root.insert(ratelimit::rules::Node {
            key: "tenant".into(),
            rule: Some(ratelimit::Rule {
                limit: Some(ratelimit::Limit {
                    requests_per_unit: limit,
                    unit: ratelimit::Unit::Day,
                }),
                path: "tenant".into(),
                ..ratelimit::Rule::default()
            }),
            ..ratelimit::rules::Node::default()
        })
        .unwrap();
        let mut r = ratelimit::Rules::default();
        r.insert(ratelimit::DomainRules {
            domain: "d".into(),
            root,
            source: "test".into(),
        })
        .unwrap();
        r
    }

    async fn run(limit: u32, addends: Vec<u32>) -> Result<(), TestCaseError> {
        static CASE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let url = std::env::var("ADMISSION_TEST_REDIS_URL")
            .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
        let n = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = format!("rl-prop-{}-{n}:", std::process::id());
        let replica = || {
            Arc::new(
                RedisStore::new(
                    &url,
                    &prefix,
                    2,
                    Policy::default(),
                    Arc::new(SystemClock::new()),
                )
                .unwrap(),
            )
        };
        let stores = [replica(), replica()];
        let rules = Arc::new(rules(limit));
        let mut tasks = Vec::new();
        for (i, addend) in addends.iter().copied().enumerate() {
            let (store, rules) = (stores[i % 2].clone(), rules.clone());
            tasks.push(tokio::spawn(async move {
                let req = Request {
                    domain: "d".into(),
                    descriptors: vec![Descriptor {
                        entries: vec![("tenant".into(), "t".into())],
                        ..Descriptor::default()
                    }],
                    hits_addend: addend,
                    hits_subtrahend: 0,
                };
                let plan = ratelimit::plan(&rules, &req);
                let counted = store.rate_limit_hits("d", 10, &plan.hits).await.unwrap();
                let answer = plan.answer(&counted.counts, counted.now_ms / 1000, 0.8, false);
                (answer.overall == Code::Ok).then_some(u64::from(addend.max(1)))
            }));
        }
        let mut passed = 0;
        for t in tasks {
            passed += t.await.unwrap().unwrap_or(0);
        }
        prop_assert!(
            passed <= u64::from(limit),
            "{passed} hits passed a limit of {limit}"
        );
        let total: u64 = addends.iter().map(|a| u64::from((*a).max(1))).sum();
        let look = stores[0]
            .rate_limit_hits(
                "d",
                10,
                &[ratelimit::Hit {
                    key: "tenant=t|day".into(),
                    unit: ratelimit::Unit::Day,
                    addend: 0,
                }],
            )
            .await
            .unwrap();
        prop_assert_eq!(look.counts, vec![Some(total)], "every hit counted once");
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn a_limit_is_never_exceeded_by_concurrent_calls(
            limit in 1u32..40,
            addends in proptest::collection::vec(0u32..4, 1..120),
        ) {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
                .block_on(run(limit, addends))?;
        }
    }
}
