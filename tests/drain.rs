//! Graceful drain: SIGTERM (or the Drain RPC) stops admitting, health turns NOT_SERVING,
//! admitted tickets finish, and the process exits 0 (at the latest when the grace ends).

mod common;

use std::time::Duration;

use admission_authority::api::{self, TicketState};
use common::{Server, eventually, follow, release, state_of, submit_req};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tonic_types::StatusExt;

const DEADLINE: Duration = Duration::from_secs(10);

fn sigterm(server: &Server) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

async fn health(server: &Server, service: &str) -> ServingStatus {
    let mut h = HealthClient::new(server.channel().await);
    let r = h
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner();
    ServingStatus::try_from(r.status).unwrap()
}

#[tokio::test]
async fn sigterm_drains_lets_holders_finish_and_exits_zero() {
    let mut server = Server::start(&["--total", "1", "--queue-total", "4", "--drain-grace", "30s"]);
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
    let mut stream = follow(&mut c, &waiter.ticket_id).await;
    assert_eq!(
        state_of(stream.next().await.unwrap().unwrap().state),
        TicketState::Queued
    );
    assert_eq!(health(&server, "").await, ServingStatus::Serving);

    sigterm(&server);
    // Probe with TRY submits, which never queue: BUSY until the drain starts, DRAINING after.
    let refused = eventually("new Submits to get DRAINING", DEADLINE, || {
        let mut c = c.clone();
        async move {
            let probe = api::SubmitRequest {
                mode: api::SubmitMode::Try as i32,
                ..submit_req("h", "carol", "late")
            };
            let e = c.submit(probe).await.err()?;
            (e.get_details_error_info()?.reason == "DRAINING").then_some(e)
        }
    })
    .await;
    assert_eq!(refused.code(), Code::ResourceExhausted);
    for service in ["", "admission.v1.Admission", "admission.v1.Operator"] {
        assert_eq!(
            health(&server, service).await,
            ServingStatus::NotServing,
            "{service:?}"
        );
    }
    // Admitted work goes on: the holder renews, releases, and the waiter gets its slot.
    let renewed = c
        .renew(api::RenewRequest {
            ticket_ids: vec![holder.ticket_id.clone()],
            rss_mb: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(renewed.tickets[0].state), TicketState::Admitted);
    assert!(
        server.try_wait().is_none(),
        "still running while a ticket is admitted"
    );
    release(&mut c, &holder.ticket_id).await;
    let admitted = stream.next().await.unwrap().unwrap();
    assert_eq!(state_of(admitted.state), TicketState::Admitted);
    assert!(server.try_wait().is_none(), "the waiter now holds the slot");
    release(&mut c, &waiter.ticket_id).await;

    let exit = eventually(
        "the process to exit once nothing is admitted",
        DEADLINE,
        || {
            let done = server.try_wait();
            async move { done }
        },
    )
    .await;
    assert!(exit.success(), "exit status {exit:?}");
}

#[tokio::test]
async fn the_grace_bounds_the_drain_and_open_wait_streams_end_unavailable() {
    let mut server = Server::start(&[
        "--total",
        "1",
        "--queue-total",
        "4",
        "--drain-grace",
        "300ms",
    ]);
    let mut c = server.client().await;
    c.submit(submit_req("h", "alice", "hold")).await.unwrap();
    let waiter = c
        .submit(submit_req("h", "bob", "wait"))
        .await
        .unwrap()
        .into_inner();
    let mut stream = follow(&mut c, &waiter.ticket_id).await;
    stream.next().await.unwrap().unwrap();
    sigterm(&server);
    let end = tokio::time::timeout(DEADLINE, stream.next())
        .await
        .expect("the stream ends when the process stops")
        .expect("an error status");
    assert_eq!(end.unwrap_err().code(), Code::Unavailable);
    let exit = eventually("the process to exit after the grace", DEADLINE, || {
        let done = server.try_wait();
        async move { done }
    })
    .await;
    assert!(exit.success(), "exit status {exit:?}");
}

#[tokio::test]
async fn the_drain_rpc_turns_health_not_serving() {
    let server = Server::start(&[]);
    assert_eq!(
        health(&server, "admission.v1.Admission").await,
        ServingStatus::Serving
    );
    server
        .operator()
        .await
        .drain(api::DrainRequest {})
        .await
        .unwrap();
    let status = eventually("health to follow the drain", DEADLINE, || {
        let server = &server;
        async move {
            let s = health(server, "admission.v1.Admission").await;
            (s == ServingStatus::NotServing).then_some(s)
        }
    })
    .await;
    assert_eq!(status, ServingStatus::NotServing);
}

/// Stderr of a server that has exited.
fn stderr_of(server: &mut Server) -> String {
    let mut out = String::new();
    std::io::Read::read_to_string(&mut server.take_stderr().unwrap(), &mut out).unwrap();
    out
}

#[tokio::test]
async fn the_log_says_what_a_drain_waits_for() {
    // The embedded store: the drain waits for this process's admitted tickets, and says so.
    let mut server = Server::spawn(
        &["--total", "1", "--drain-grace", "300ms"],
        "info",
        std::process::Stdio::piped(),
    );
    let mut c = server.client().await;
    c.submit(submit_req("h", "alice", "hold")).await.unwrap();
    sigterm(&server);
    eventually("the process to exit after the grace", DEADLINE, || {
        let done = server.try_wait();
        async move { done }
    })
    .await;
    let log = stderr_of(&mut server);
    assert!(
        log.contains("waiting for 1 admitted ticket(s) to be released"),
        "{log}"
    );
    assert!(!log.contains("no admitted ticket left"), "{log}");

    // On Redis (down, here) the tickets are not this process's to wait for, nor to count.
    let dead = common::free_port();
    let mut server = Server::spawn(
        &["--redis-url", &format!("redis://127.0.0.1:{dead}/0")],
        "info",
        std::process::Stdio::piped(),
    );
    // At once after `listening on`: an early SIGTERM drains too.
    sigterm(&server);
    eventually("the process to exit at once", DEADLINE, || {
        let done = server.try_wait();
        async move { done }
    })
    .await;
    let log = stderr_of(&mut server);
    assert!(log.contains("live in the shared store"), "{log}");
    assert!(!log.contains("no admitted ticket left"), "{log}");
}
