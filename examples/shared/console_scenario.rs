//! The console's cost (`loadgen --only console`): Submit+Release cycles at 64 on one host,
//! alternating rounds without and with a console open on another host that holds 10,000 live
//! tickets, refreshing once a second. The console's refresh is replayed as the page makes it:
//! ListHosts, GetStats, ListTickets (10,000), ListReservations and GetLimits as gRPC-Web calls
//! on the admin port (HTTP/1.1, a connection per call as the worst case of a browser's reuse).
#![allow(clippy::disallowed_types, reason = "the scenario measures wall time")]

use std::time::{Duration, Instant};

use admission_authority::api;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Limits for the scenario: the cycles' host is free, the console's host holds 1,000
/// admitted and 9,000 queued tickets that do not expire while measured.
pub const CONFIG: &str = r#"
scheduling:
  total: 100000
  per_subject: 100000
  queue: { total: 0 }
  lease_ttl: 10m
  retention: 1s
hosts:
  console-big:
    scheduling: { total: 1000, per_subject: 1000, queue: { total: 9000 } }
"#;

/// One gRPC-Web unary call on the admin endpoint at `admin`; the answer's size in bytes.
pub async fn call(admin: &str, path: &str, message: &impl Message) -> usize {
    let body = message.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    let mut s = tokio::net::TcpStream::connect(admin)
        .await
        .expect("the admin endpoint");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {admin}\r\nContent-Type: application/grpc-web+proto\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        frame.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&frame).await.unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{path}: {}",
        String::from_utf8_lossy(&answer[..answer.len().min(200)])
    );
    assert!(
        answer.windows(13).any(|w| w == b"grpc-status:0"),
        "{path} failed: {}",
        String::from_utf8_lossy(&answer[answer.len().saturating_sub(200)..])
    );
    answer.len()
}

/// One refresh of the console's host view of `host`; the bytes it read.
pub async fn refresh(admin: &str, host: &str) -> usize {
    let host_id = host.to_string();
    call(
        admin,
        "/admission.v1.Operator/ListHosts",
        &api::ListHostsRequest {},
    )
    .await
        + call(
            admin,
            "/admission.v1.Admission/GetStats",
            &api::GetStatsRequest {
                host_id: host_id.clone(),
            },
        )
        .await
        + call(
            admin,
            "/admission.v1.Operator/ListTickets",
            &api::ListTicketsRequest {
                host_id: host_id.clone(),
                limit: 10_000,
            },
        )
        .await
        + call(
            admin,
            "/admission.v1.Operator/ListReservations",
            &api::ListReservationsRequest {
                host_id: host_id.clone(),
                limit: 1000,
            },
        )
        .await
        + call(
            admin,
            "/admission.v1.Operator/GetLimits",
            &api::GetLimitsRequest {
                host_id,
                ..Default::default()
            },
        )
        .await
}

/// Refresh once a second until `stop`; (refreshes, mean refresh ms, bytes per refresh).
pub async fn console_open(admin: String, host: &'static str, stop: Duration) -> (u32, f64, usize) {
    let end = Instant::now() + stop;
    let (mut n, mut spent, mut bytes) = (0u32, Duration::ZERO, 0);
    while Instant::now() < end {
        let t = Instant::now();
        bytes = refresh(&admin, host).await;
        spent += t.elapsed();
        n += 1;
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(t.elapsed())).await;
    }
    (n, spent.as_secs_f64() * 1000.0 / f64::from(n.max(1)), bytes)
}
