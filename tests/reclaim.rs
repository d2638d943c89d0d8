//! Holders re-register (Reclaim) through the real binary: after a restart without a data dir,
//! after a lease ran out while the gateway was cut off, and the reclaims that must be refused,
//! each counted on `/metrics`.

mod common;

use std::time::Duration;

use admission_authority::api;
use common::{Server, eventually, free_port, http_get, state_of, stats, submit_req};
use tonic::Code;
use tonic_types::StatusExt;

fn held(ticket: &api::SubmitResponse, subject: &str, run: &str) -> api::ReclaimRequest {
    api::ReclaimRequest {
        ticket_id: ticket.ticket_id.clone(),
        host_id: "h".into(),
        run_id: run.into(),
        subject: subject.into(),
        instance_id: "replica-1".into(),
        grant: ticket.grant,
        ..Default::default()
    }
}

fn reason(s: &tonic::Status) -> String {
    s.get_details_error_info()
        .map(|i| i.reason)
        .unwrap_or_default()
}

#[tokio::test]
async fn holders_reclaim_their_slots_after_a_restart_and_newcomers_wait() {
    let first = Server::start(&["--total", "2", "--queue-total", "4"]);
    let mut c = first.client().await;
    let mut holders = Vec::new();
    for run in ["r1", "r2"] {
        let t = c.submit(submit_req("h", "alice", run)).await.unwrap();
        holders.push((t.into_inner(), run));
    }
    // The authority restarts in memory: it knows nothing of the two running holders.
    drop(first);
    let server = Server::start(&["--total", "2", "--queue-total", "4"]);
    let mut c = server.client().await;
    let renewed = c
        .renew(api::RenewRequest {
            ticket_ids: holders.iter().map(|(t, _)| t.ticket_id.clone()).collect(),
            rss_mb: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        renewed
            .tickets
            .iter()
            .all(|t| state_of(t.state) == api::TicketState::Expired)
    );
    for (t, run) in &holders {
        let r = c.reclaim(held(t, "alice", run)).await.unwrap().into_inner();
        assert_eq!(state_of(r.state), api::TicketState::Admitted);
        assert!(r.reclaimed);
        assert_eq!(r.grant, t.grant, "the grant is kept");
        assert!(r.lease_ttl_ms > 0);
        // A second reclaim (a retry) finds it held: renewed, not counted twice.
        let again = c.reclaim(held(t, "alice", run)).await.unwrap().into_inner();
        assert!(!again.reclaimed);
    }
    let s = stats(&mut c, "h").await;
    assert_eq!((s.in_flight, s.reclaimed), (2, 2));
    // The caps are full: a newcomer waits, a TRY is refused.
    let newcomer = c
        .submit(submit_req("h", "bob", "new"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(newcomer.state), api::TicketState::Queued);
    let mut try_req = submit_req("h", "bob", "try");
    try_req.mode = api::SubmitMode::Try as i32;
    assert_eq!(
        c.submit(try_req).await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    // The holders' Renew and Release work as before; the newcomer's grant is above theirs.
    let renewed = c
        .renew(api::RenewRequest {
            ticket_ids: vec![holders[0].0.ticket_id.clone()],
            rss_mb: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        state_of(renewed.tickets[0].state),
        api::TicketState::Admitted
    );
    common::release(&mut c, &holders[0].0.ticket_id).await;
    let mut stream = common::follow(&mut c, &newcomer.ticket_id).await;
    let admitted = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let e = stream.message().await.unwrap().expect("an event");
            if state_of(e.state) == api::TicketState::Admitted {
                return e;
            }
        }
    })
    .await
    .expect("the newcomer admitted within 10 s");
    assert!(admitted.grant > holders[1].0.grant);
}

#[tokio::test]
async fn a_gateway_cut_off_past_its_lease_is_counted_again_when_it_reclaims() {
    let server = Server::start(&["--total", "1", "--lease-ttl", "300ms"]);
    let mut c = server.client().await;
    let cut_off = c
        .submit(submit_req("h", "alice", "long-run"))
        .await
        .unwrap()
        .into_inner();
    // No Renew: the lease runs out and a newcomer takes the slot.
    let newcomer = eventually(
        "the slot freed by the lapsed lease",
        Duration::from_secs(10),
        || {
            let mut c = c.clone();
            async move {
                let mut req = submit_req("h", "bob", "newcomer");
                req.mode = api::SubmitMode::Try as i32;
                c.submit(req).await.ok().map(|r| r.into_inner())
            }
        },
    )
    .await;
    assert_eq!(state_of(newcomer.state), api::TicketState::Admitted);
    let r = c
        .reclaim(held(&cut_off, "alice", "long-run"))
        .await
        .unwrap()
        .into_inner();
    assert!(r.reclaimed);
    assert_eq!(state_of(r.state), api::TicketState::Admitted);
    // Both run: counted above the cap of 1, and nobody else gets in meanwhile.
    assert_eq!(stats(&mut c, "h").await.in_flight, 2);
}

#[tokio::test]
async fn reclaims_of_ended_or_foreign_tickets_are_refused_and_counted() {
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let server = Server::start(&["--total", "2", "--admin-listen", &admin]);
    let mut c = server.client().await;
    let released = c
        .submit(submit_req("h", "alice", "done"))
        .await
        .unwrap()
        .into_inner();
    common::release(&mut c, &released.ticket_id).await;
    let e = c
        .reclaim(held(&released, "alice", "done"))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), reason(&e).as_str()),
        (Code::FailedPrecondition, "TICKET_ENDED")
    );
    assert!(e.message().contains("RELEASED"), "{}", e.message());

    let live = c
        .submit(submit_req("h", "alice", "taken"))
        .await
        .unwrap()
        .into_inner();
    let mut other = held(&live, "alice", "taken");
    other.ticket_id = format!("h.{:032x}", 12345);
    let e = c.reclaim(other).await.unwrap_err();
    assert_eq!(reason(&e), "RUN_ID_TAKEN");

    // Malformed: each names its field, and nothing changes.
    let mut bad_grant = held(&live, "alice", "taken");
    bad_grant.grant = 0;
    let mut other_host = held(&live, "alice", "taken");
    other_host.host_id = "elsewhere".into();
    let mut no_subject = held(&live, "alice", "taken");
    no_subject.subject = String::new();
    for (req, field) in [
        (bad_grant, "grant"),
        (other_host, "ticket_id"),
        (no_subject, "subject"),
    ] {
        let e = c.reclaim(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().starts_with(field), "{field}: {}", e.message());
    }
    let s = stats(&mut c, "h").await;
    assert_eq!((s.in_flight, s.reclaimed), (1, 0));

    let (_, body) = http_get(port, "/metrics");
    for line in [
        "admission_reclaim_refused_total{reason=\"TICKET_ENDED\"} 1",
        "admission_reclaim_refused_total{reason=\"RUN_ID_TAKEN\"} 1",
        "admission_reclaim_refused_total{reason=\"INVALID_ARGUMENT\"} 3",
        "admission_state_loss_total 0",
    ] {
        assert!(body.contains(line), "{line} in:\n{body}");
    }
}
