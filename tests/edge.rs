//! The network edge against the real binary: bad bytes are bad input, a frozen client loses its
//! place, a flood of connections is bounded, and the admin port keeps its own limits.
#![allow(
    clippy::disallowed_types,
    reason = "it times real processes and connections"
)]

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use admission_authority::api;
use bytes::Bytes;
use common::{Raw, Server, eventually, release, stats, submit_req};
use tonic::Code;

async fn raw_call(server: &Server, path: &'static str, body: &[u8]) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static(path);
    if path.path().ends_with("/Wait") {
        return grpc
            .server_streaming(tonic::Request::new(body.to_vec()), path, Raw)
            .await
            .expect_err("bad bytes are refused");
    }
    grpc.unary(tonic::Request::new(body.to_vec()), path, Raw)
        .await
        .expect_err("bad bytes are refused")
}

/// Messages that do not decode as protobuf: invalid UTF-8 in a string, a wrong wire type, a
/// length running past the end. Each answers INVALID_ARGUMENT on every RPC, and nothing changes.
#[tokio::test]
async fn bytes_that_are_not_the_message_are_invalid_argument_and_change_nothing() {
    let server = Server::start(&["--total", "2", "--queue-total", "2"]);
    let garbage: [(&str, &[u8]); 3] = [
        ("invalid UTF-8 in field 1", &[0x0a, 0x02, 0xff, 0xfe]),
        ("field 1 as a varint", &[0x08, 0x01]),
        ("a length past the end", &[0x0a, 0x10, 0x61]),
    ];
    for rpc in [
        "/admission.v1.Admission/Submit",
        "/admission.v1.Admission/Wait",
        "/admission.v1.Admission/Renew",
        "/admission.v1.Admission/Release",
        "/admission.v1.Admission/Authorize",
        "/admission.v1.Admission/CheckAuthAttempt",
        "/admission.v1.Operator/ListTickets",
        "/admission.v1.Operator/GetHostHistory",
        "/admission.v1.Operator/ListEndedTickets",
    ] {
        for (what, bytes) in garbage {
            let status = raw_call(&server, rpc, bytes).await;
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{rpc}, {what}: {status:?}"
            );
            assert!(
                status.message().starts_with("request: "),
                "{rpc}, {what}: {}",
                status.message()
            );
        }
    }
    let mut c = server.client().await;
    // Nothing was counted or admitted on any host the garbage could have named.
    for host in ["", "a", "\u{fffd}"] {
        if let Ok(s) = c
            .get_stats(api::GetStatsRequest {
                host_id: host.into(),
            })
            .await
        {
            let s = s.into_inner();
            assert_eq!((s.admitted, s.rejected, s.in_flight), (0, 0, 0), "{host:?}");
        }
    }
}

/// Send `body` as the raw request body of Submit over a plain HTTP/2 connection (the stream
/// left open unless `end`), and answer the call's `grpc-status` (from the headers of a
/// trailers-only answer, or from the trailers) and how long the answer took. Bounded by 5 s.
async fn raw_submit(server: &Server, body: Vec<u8>, end: bool) -> (Option<String>, Duration) {
    raw_submit_with(server, body, end, &[]).await
}

/// [`raw_submit`] with extra request headers (a `grpc-timeout`).
async fn raw_submit_with(
    server: &Server,
    body: Vec<u8>,
    end: bool,
    headers: &[(&str, &str)],
) -> (Option<String>, Duration) {
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let req = http::Request::post(format!(
        "http://{}/admission.v1.Admission/Submit",
        server.addr
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers");
    let req = headers
        .iter()
        .fold(req, |r, (k, v)| r.header(*k, *v))
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(req, false).unwrap();
    send.send_data(Bytes::from(body), end).unwrap();
    let started = Instant::now();
    let mut response = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("answered within 5 s, not held open")
        .unwrap();
    let took = started.elapsed();
    let mut status = response.headers().get("grpc-status").cloned();
    if status.is_none() {
        let body = response.body_mut();
        while body.data().await.is_some() {}
        status = body
            .trailers()
            .await
            .unwrap()
            .and_then(|t| t.get("grpc-status").cloned());
    }
    drop(send);
    (
        status.and_then(|s| s.to_str().ok().map(str::to_string)),
        took,
    )
}

/// A request body that ends inside a gRPC frame, or carries no message at all, is bad input too.
#[tokio::test]
async fn broken_grpc_framing_is_invalid_argument() {
    let server = Server::start(&[]);
    for (what, body) in [
        ("a frame cut short", vec![0u8, 0, 0, 0, 10, 0x0a]),
        ("no message", vec![]),
    ] {
        let (status, _) = raw_submit(&server, body, true).await;
        assert_eq!(
            status.as_deref(),
            Some("3"),
            "{what}: grpc-status {status:?}"
        );
    }
}

/// A client frozen with SIGSTOP while its Wait stream keeps a queued ticket alive: the server's
/// PINGs go unanswered, it closes the connection, and the ticket expires within
/// lease_ttl + keep-alive interval + keep-alive timeout, instead of being kept for ever.
#[tokio::test]
async fn a_frozen_wait_client_loses_its_queued_ticket() {
    let grpcurl = std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".into());
    let (lease, interval, timeout) = (1_000u64, 500u64, 500u64);
    let server = Server::start_with_config(
        "frozen-client",
        &format!(
            "scheduling: {{ total: 1, per_subject: 1, lease_ttl: {lease}ms, queue: {{ total: 4 }} }}\n\
             grpc: {{ keepalive: {{ interval: {interval}ms, timeout: {timeout}ms }} }}\n"
        ),
        &[],
    );
    let mut c = server.client().await;
    let holder = c
        .submit(submit_req("h", "alice", "hold"))
        .await
        .unwrap()
        .into_inner();
    let waiter = c
        .submit(submit_req("h", "bob", "wait"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        common::state_of(waiter.state),
        api::TicketState::Queued,
        "bob waits behind alice"
    );
    // The holder keeps its slot: this test renews it (and only it) throughout.
    let renewer = {
        let mut c = c.clone();
        let id = holder.ticket_id.clone();
        tokio::spawn(async move {
            loop {
                let _ = c
                    .renew(api::RenewRequest {
                        ticket_ids: vec![id.clone()],
                        rss_mb: None,
                    })
                    .await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let mut follower = Command::new(&grpcurl)
        .args(["-plaintext", "-d"])
        .arg(format!("{{\"ticket_id\": \"{}\"}}", waiter.ticket_id))
        .arg(server.addr.to_string())
        .arg("admission.v1.Admission/Wait")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("grpcurl (scripts/test installs it and sets GRPCURL)");
    let mut first = [0u8; 64];
    let n = follower.stdout.as_mut().unwrap().read(&mut first).unwrap();
    assert!(n > 0, "grpcurl printed the first event");
    // While the follower runs, its stream keeps the queued ticket alive past its lease.
    tokio::time::sleep(Duration::from_millis(3 * lease)).await;
    assert_eq!(stats(&mut c, "h").await.queued, 1, "the stream keeps it");

    let pid = follower.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let stopped = Instant::now();
    eventually(
        "the frozen client's ticket to expire",
        Duration::from_secs(10),
        || async {
            let s = stats(&mut server.client().await, "h").await;
            (s.queued == 0 && s.expired == 1).then_some(())
        },
    )
    .await;
    let took = stopped.elapsed();
    let _ = Command::new("kill").args(["-CONT", &pid]).status();
    let _ = follower.kill();
    let _ = follower.wait();
    renewer.abort();
    let bound = Duration::from_millis(lease + interval + timeout + 500);
    assert!(
        took <= bound,
        "expired after {took:?}, more than lease + interval + timeout ({bound:?})"
    );
    assert_eq!(
        common::state_of(release(&mut c, &holder.ticket_id).await.previous_state),
        api::TicketState::Admitted
    );
}

/// Twice `grpc.max_connections` idle connections: the excess is closed at once and counted, the
/// silent ones are closed after the keep-alive timeout, and a normal client is served.
#[tokio::test]
async fn a_flood_of_idle_connections_is_bounded_and_real_clients_are_served() {
    let admin = common::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let server = Server::start_with_config(
        "flood",
        "grpc: { max_connections: 20, keepalive: { interval: 1s, timeout: 1s } }\n",
        &["--admin-listen", &admin_addr],
    );
    // The client first: it holds one of the 20 places.
    let mut early = server.client().await;
    stats(&mut early, "h").await;
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(std::net::TcpStream::connect(server.addr).unwrap());
    }
    // The excess is closed at once: a read sees the end of the stream (or a reset).
    let mut closed = 0;
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut b = [0u8; 1];
        match s.read(&mut b) {
            Ok(0) => closed += 1,
            Err(e)
                if e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut =>
            {
                closed += 1
            }
            _ => {}
        }
    }
    assert!(
        closed >= 21,
        "{closed} of 40 closed at once, with 20 allowed"
    );
    // The client that was already connected is still served.
    assert_eq!(stats(&mut early, "h").await.in_flight, 0);
    // A new client gets in once the silent connections are dropped.
    eventually("a new client served", Duration::from_secs(5), || async {
        let ch = tonic::transport::Channel::from_shared(server.url())
            .ok()?
            .connect_timeout(Duration::from_millis(500))
            .connect()
            .await
            .ok()?;
        let mut c = api::admission_client::AdmissionClient::new(ch);
        c.submit(submit_req("h", "alice", "after-flood")).await.ok()
    })
    .await;
    let (_, metrics) = common::http_get(admin, "/metrics");
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("admission_grpc_connections_refused_total "))
        .and_then(|n| n.parse().ok())
        .expect("the refused-connections counter");
    assert!(refused >= 20, "{refused} refusals counted");
}

/// The admin port drops a caller that never finishes its headers, and a non-loopback
/// admin_listen needs credentials or --insecure, like the gRPC port.
#[tokio::test]
async fn the_admin_port_times_out_half_sent_requests_and_is_not_exposed_by_accident() {
    use std::io::Write;
    let admin = common::free_port();
    let server = Server::start(&["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let mut half = eventually("the admin port", Duration::from_secs(5), || async {
        std::net::TcpStream::connect(("127.0.0.1", admin)).ok()
    })
    .await;
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    half.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = half.read_to_end(&mut rest);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "a half-sent request held its connection for {took:?}"
    );
    assert_eq!(common::http_get(admin, "/healthz").0, 200);
    drop(server);

    let out = Command::new(common::BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "0.0.0.0:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("admin_listen: 0.0.0.0:0 is not a loopback address"),
        "{stderr}"
    );
}

/// A request whose body stops one byte short holds its buffers only until `grpc.unary_timeout`:
/// the call is then ended with an error status, and the stream's memory is given back.
#[tokio::test]
async fn a_half_sent_request_is_ended_by_the_unary_timeout() {
    let server = Server::start_with_config("half-sent", "grpc: { unary_timeout: 1s }\n", &[]);
    // A frame that announces 1,000 bytes, and 999 of them; the stream stays open.
    let mut body = vec![0u8, 0, 0, 3, 232];
    body.extend(std::iter::repeat_n(b'a', 999));
    let (status, took) = raw_submit(&server, body, false).await;
    assert!(
        status.as_deref().is_some_and(|s| s != "0"),
        "an error status, got {status:?}"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "{took:?}"
    );
}

/// A deadline that runs out on the server is DEADLINE_EXCEEDED (grpc-status 4), what every
/// gRPC caller retries on, whether it is the caller's (`grpc-timeout`) or the server's own
/// bound (`grpc.unary_timeout`); tonic's own timeout answered CANCELLED "Timeout expired".
#[tokio::test]
async fn a_deadline_that_runs_out_on_the_server_is_deadline_exceeded() {
    let server = Server::start_with_config("deadline", "grpc: { unary_timeout: 1s }\n", &[]);
    let mut half = vec![0u8, 0, 0, 3, 232];
    half.extend(std::iter::repeat_n(b'a', 999));
    let (status, took) =
        raw_submit_with(&server, half.clone(), false, &[("grpc-timeout", "300m")]).await;
    assert_eq!(status.as_deref(), Some("4"), "the caller's deadline");
    assert!(took < Duration::from_millis(900), "{took:?}");
    let (status, _) = raw_submit(&server, half, false).await;
    assert_eq!(status.as_deref(), Some("4"), "the server's bound");
}

/// `grpc.max_wait_streams` bounds the Wait streams of every connection together, not only of
/// one: the stream past it is refused with TOO_MANY_STREAMS, whichever connection asks.
#[tokio::test]
async fn open_wait_streams_are_bounded_over_all_connections() {
    let server = Server::start_with_config(
        "wait-cap",
        "scheduling: { total: 1, per_subject: 1, queue: { total: 10 } }\n\
         grpc: { max_wait_streams: 2, max_wait_streams_per_connection: 10 }\n",
        &[],
    );
    let mut c = server.client().await;
    c.submit(submit_req("h", "holder", "hold")).await.unwrap();
    let mut waiters = Vec::new();
    for i in 0..3 {
        let r = c
            .submit(submit_req("h", &format!("w{i}"), &format!("w{i}")))
            .await
            .unwrap()
            .into_inner();
        waiters.push(r.ticket_id);
    }
    // Two streams on two connections fill the bound...
    let mut held = Vec::new();
    for id in &waiters[..2] {
        let mut own = server.client().await;
        held.push(common::follow(&mut own, id).await);
    }
    // ...and a third connection's stream is refused.
    let mut third = server.client().await;
    let refused = third
        .wait(api::WaitRequest {
            ticket_id: waiters[2].clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(
        refused
            .message()
            .contains("TOO_MANY_STREAMS: the authority already has 2"),
        "{}",
        refused.message()
    );
    // A stream that closes gives its place back.
    drop(held.pop());
    eventually("a place to free up", Duration::from_secs(5), || {
        let (mut third, id) = (third.clone(), waiters[2].clone());
        async move { third.wait(api::WaitRequest { ticket_id: id }).await.ok() }
    })
    .await;
}
