//! Two authority processes on one redis-server behave as one authority: caps and round robin
//! across replicas, a Wait on one replica woken by a Release on the other, one auth budget,
//! one allowance, a replica killed with -9, a holder that dies. The redis-server is the test
//! command's (`ADMISSION_TEST_REDIS_URL`); each test uses a key prefix of its own.

mod common;

use std::process::Stdio;
use std::time::Duration;

use admission_authority::api;
use common::{
    Server, config_file, eventually, follow, redis_replicas as replicas, release, state_of, stats,
    submit_req,
};
use tokio_stream::StreamExt;

const DEADLINE: Duration = Duration::from_secs(10);

/// Follow a Wait stream until it says ADMITTED (within the deadline).
async fn until_admitted(mut stream: tonic::Streaming<api::WaitEvent>) -> api::WaitEvent {
    tokio::time::timeout(DEADLINE, async {
        while let Some(e) = stream.next().await {
            let e = e.expect("a wait event");
            if state_of(e.state) == api::TicketState::Admitted {
                return e;
            }
        }
        panic!("the stream ended without an admission");
    })
    .await
    .expect("admitted within the deadline")
}

#[tokio::test]
async fn caps_and_round_robin_hold_across_replicas() {
    let (a, b) = replicas(
        "rep-caps",
        "scheduling: { total: 1, per_subject: 1, queue: { total: 10 } }\n",
    );
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let holder = ca
        .submit(submit_req("h", "alice", "hold"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(holder.state), api::TicketState::Admitted);
    // Waiters through both replicas: a1, a2 (alice) and b1 (bob).
    let mut waiters = Vec::new();
    for (on_b, subject, run) in [
        (true, "alice", "a1"),
        (false, "alice", "a2"),
        (true, "bob", "b1"),
    ] {
        let c = if on_b { &mut cb } else { &mut ca };
        let r = c
            .submit(submit_req("h", subject, run))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            state_of(r.state),
            api::TicketState::Queued,
            "{run}: one slot in total"
        );
        waiters.push((run, r.ticket_id));
    }
    // Releases alternate between the replicas; admissions follow the rotation a1, b1, a2.
    let mut current = holder.ticket_id;
    let mut order = Vec::new();
    for i in 0..3 {
        let c = if i % 2 == 0 { &mut cb } else { &mut ca };
        release(c, &current).await;
        let s = stats(c, "h").await;
        assert_eq!(s.in_flight, 1, "never more than the cap");
        let mut admitted = None;
        for (run, id) in &waiters {
            let r = ca
                .renew(api::RenewRequest {
                    ticket_ids: vec![id.clone()],
                    rss_mb: None,
                })
                .await
                .unwrap()
                .into_inner();
            if state_of(r.tickets[0].state) == api::TicketState::Admitted && !order.contains(run) {
                admitted = Some((*run, id.clone()));
            }
        }
        let (run, id) = admitted.expect("one waiter admitted");
        order.push(run);
        current = id;
    }
    assert_eq!(order, ["a1", "b1", "a2"]);
}

#[tokio::test]
async fn a_wait_stream_on_one_replica_is_woken_by_a_release_on_the_other() {
    let (a, b) = replicas(
        "rep-wait",
        "scheduling: { total: 1, queue: { total: 10 } }\n",
    );
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let holder = cb
        .submit(submit_req("h", "alice", "hold"))
        .await
        .unwrap()
        .into_inner();
    let waiter = ca
        .submit(submit_req("h", "bob", "wait"))
        .await
        .unwrap()
        .into_inner();
    let mut stream = follow(&mut ca, &waiter.ticket_id).await;
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(state_of(first.state), api::TicketState::Queued);
    release(&mut cb, &holder.ticket_id).await;
    let next = tokio::time::timeout(DEADLINE, stream.next())
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
    assert_eq!(state_of(next.state), api::TicketState::Admitted);
    assert!(next.grant > 0);
}

#[tokio::test]
async fn auth_attempts_through_both_replicas_share_one_budget() {
    let (a, b) = replicas("rep-auth", "");
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let mut allowed = 0;
    for i in 0..10 {
        let c = if i % 2 == 0 { &mut ca } else { &mut cb };
        let r = c
            .check_auth_attempt(api::AuthAttemptRequest {
                endpoint: "magic_link".into(),
                identity: "mallory@example.com".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!r.degraded);
        if r.allowed {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 5, "5 for the installation, not 5 per replica");
}

#[tokio::test]
async fn replicas_racing_for_one_allowance_never_grant_more_than_it_holds() {
    let (a, b) = replicas(
        "rep-allowance",
        "allowances:\n  shared: { tokens: 5000, window: 1h }\n",
    );
    let (ca, cb) = (a.client().await, b.client().await);
    let mut tasks = Vec::new();
    for i in 0..100 {
        let mut c = if i % 2 == 0 { ca.clone() } else { cb.clone() };
        tasks.push(tokio::spawn(async move {
            c.authorize(api::AuthorizeRequest {
                host_id: "h".into(),
                run_id: format!("run-{i}"),
                step: 1,
                subject: format!("user-{i}"),
                account_id: "shared".into(),
                model: String::new(),
                requested_output_tokens: 300,
                estimated_input_tokens: 0,
                estimated_cost_usd: 0.0,
            })
            .await
            .unwrap()
            .into_inner()
            .granted_output_tokens
        }));
    }
    let mut granted = 0;
    for t in tasks {
        granted += t.await.unwrap();
    }
    assert_eq!(granted, 5000, "the whole allowance and not a token more");
}

#[tokio::test]
async fn killing_one_replica_loses_nothing_and_the_other_serves_its_tickets() {
    let (mut a, b) = replicas(
        "rep-kill",
        "scheduling: { total: 2, queue: { total: 10 } }\n",
    );
    let mut ca = a.client().await;
    let held = ca
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    let also = ca
        .submit(submit_req("h", "bob", "r2"))
        .await
        .unwrap()
        .into_inner();
    let queued = ca
        .submit(submit_req("h", "carol", "r3"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(queued.state), api::TicketState::Queued);
    let status = std::process::Command::new("kill")
        .args(["-9", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    eventually("replica A to die", DEADLINE, || {
        let gone = a.try_wait().is_some();
        async move { gone.then_some(()) }
    })
    .await;
    // The client reconnects to B: its tickets are there, in the same states, not doubled.
    let mut cb = b.client().await;
    let s = stats(&mut cb, "h").await;
    assert_eq!((s.in_flight, s.queued), (2, 1));
    let r = cb
        .renew(api::RenewRequest {
            ticket_ids: vec![held.ticket_id.clone(), queued.ticket_id.clone()],
            rss_mb: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(r.tickets[0].state), api::TicketState::Admitted);
    assert_eq!(state_of(r.tickets[1].state), api::TicketState::Queued);
    let again = cb
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        again.ticket_id, held.ticket_id,
        "a retry through B finds the same ticket"
    );
    release(&mut cb, &also.ticket_id).await;
    let admitted = until_admitted(follow(&mut cb, &queued.ticket_id).await).await;
    assert!(admitted.grant > held.grant);
}

#[tokio::test]
async fn a_holder_that_stops_renewing_loses_its_slot_on_every_replica() {
    let (a, b) = replicas(
        "rep-lease",
        "scheduling: { total: 1, queue: { total: 10 }, lease_ttl: 300ms }\n",
    );
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let holder = ca
        .submit(submit_req("h", "alice", "hold"))
        .await
        .unwrap()
        .into_inner();
    let waiter = cb
        .submit(submit_req("h", "bob", "wait"))
        .await
        .unwrap()
        .into_inner();
    // Bob's Wait stream (on B) keeps his queued ticket alive; alice never renews.
    let admitted = until_admitted(follow(&mut cb, &waiter.ticket_id).await).await;
    assert!(admitted.grant > holder.grant);
    for c in [&mut ca, &mut cb] {
        let r = c
            .renew(api::RenewRequest {
                ticket_ids: vec![holder.ticket_id.clone()],
                rss_mb: None,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(state_of(r.tickets[0].state), api::TicketState::Expired);
        assert_eq!(stats(c, "h").await.expired, 1);
    }
}

/// Replicas started with different files never enforce different limits for a host at the same
/// time: the most recently started replica's limits are in force on every replica, from its
/// first call for the host.
#[tokio::test]
async fn replicas_with_different_files_enforce_one_set_of_limits() {
    let url = std::env::var("ADMISSION_TEST_REDIS_URL")
        .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
    let prefix = format!("rep-limits-{}:", std::process::id());
    let start = |total: &str| {
        let config = config_file(
            &format!("rep-limits-{total}"),
            &format!("store:\n  redis: {{ url: \"{url}\", prefix: \"{prefix}\" }}\n"),
        );
        Server::spawn(
            &[
                "--config",
                config.to_str().unwrap(),
                "--total",
                total,
                "--per-subject",
                "10",
            ],
            "warn",
            Stdio::inherit(),
        )
    };
    let old = start("1");
    let mut co = old.client().await;
    co.submit(submit_req("h", "alice", "r1")).await.unwrap();
    let busy = co.submit(submit_req("h", "alice", "r2")).await.unwrap_err();
    assert_eq!(
        busy.code(),
        tonic::Code::ResourceExhausted,
        "total 1 is in force"
    );

    // A replica started later with another file: its limits are in force, on both replicas.
    let new = start("5");
    let mut cn = new.client().await;
    cn.submit(submit_req("h", "alice", "r3")).await.unwrap();
    co.submit(submit_req("h", "alice", "r4")).await.unwrap();
    for c in [&mut co, &mut cn] {
        let s = stats(c, "h").await;
        assert_eq!(
            (s.total, s.in_flight),
            (5, 3),
            "one set of limits on every replica"
        );
    }
    for run in ["r5", "r6"] {
        co.submit(submit_req("h", "alice", run)).await.unwrap();
    }
    let full = co.submit(submit_req("h", "alice", "r7")).await.unwrap_err();
    assert_eq!(
        full.code(),
        tonic::Code::ResourceExhausted,
        "total 5 on the old replica too"
    );
    assert_eq!(stats(&mut cn, "h").await.in_flight, 5);
}

#[tokio::test]
async fn an_operators_limits_govern_every_replica_and_outlive_them_until_reset() {
    let url = std::env::var("ADMISSION_TEST_REDIS_URL")
        .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
    let prefix = format!("rep-live-{}:", std::process::id());
    let start = |total: &str| {
        let config = config_file(
            &format!("rep-live-{total}"),
            &format!(
                "scheduling: {{ per_subject: 10, queue: {{ total: 10 }} }}\n\
                 store:\n  redis: {{ url: \"{url}\", prefix: \"{prefix}\" }}\n"
            ),
        );
        Server::spawn(
            &["--config", config.to_str().unwrap(), "--total", total],
            "warn",
            Stdio::inherit(),
        )
    };
    let get = |host: &str| api::GetLimitsRequest {
        host_id: host.into(),
        ..Default::default()
    };
    let (a, b) = (start("1"), start("1"));
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let (mut oa, mut ob) = (a.operator().await, b.operator().await);
    let holder = ca.submit(submit_req("h", "alice", "r1")).await.unwrap();
    let waiter = cb.submit(submit_req("h", "bob", "r2")).await.unwrap();
    assert_eq!(state_of(waiter.get_ref().state), api::TicketState::Queued);
    let before = ob.get_limits(get("h")).await.unwrap().into_inner();
    assert_eq!(before.source(), api::LimitsSource::File);
    let mut limits = before.limits.clone().unwrap();
    assert_eq!(limits.total, 1);

    // Raised through A: B's waiter is admitted at once, and B decides with the new limits.
    limits.total = 2;
    let set = oa
        .set_limits(api::SetLimitsRequest {
            host_id: "h".into(),
            limits: Some(limits.clone()),
            expected_revision: before.revision,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            set.source(),
            set.revision,
            set.limits.as_ref().unwrap().total
        ),
        (api::LimitsSource::Operator, before.revision + 1, 2)
    );
    let s = stats(&mut cb, "h").await;
    assert_eq!((s.total, s.in_flight, s.queued), (2, 2, 0), "{s:?}");
    let seen = ob.get_limits(get("h")).await.unwrap().into_inner();
    assert_eq!((seen.source(), seen.revision), (set.source(), set.revision));

    // A stale revision changes nothing; a bad cap is named by its field and changes nothing.
    let stale = ob
        .set_limits(api::SetLimitsRequest {
            host_id: "h".into(),
            limits: Some(limits.clone()),
            expected_revision: before.revision,
        })
        .await
        .unwrap_err();
    assert_eq!(stale.code(), tonic::Code::FailedPrecondition, "{stale:?}");
    limits.total = 0;
    let bad = ob
        .set_limits(api::SetLimitsRequest {
            host_id: "h".into(),
            limits: Some(limits.clone()),
            expected_revision: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().starts_with("limits.total: "), "{bad:?}");
    assert_eq!(ob.get_limits(get("h")).await.unwrap().into_inner(), seen);

    // Lowering revokes nothing: both keep their slots, a new Submit queues.
    limits.total = 1;
    oa.set_limits(api::SetLimitsRequest {
        host_id: "h".into(),
        limits: Some(limits),
        expected_revision: 0,
    })
    .await
    .unwrap();
    let third = ca.submit(submit_req("h", "carol", "r3")).await.unwrap();
    assert_eq!(state_of(third.get_ref().state), api::TicketState::Queued);
    assert_eq!(stats(&mut ca, "h").await.in_flight, 2);
    release(&mut ca, &holder.get_ref().ticket_id).await;

    // Both replicas stop; one started with another file still decides with the operator's.
    drop((ca, cb, oa, ob));
    drop(a);
    drop(b);
    let c = start("7");
    let mut oc = c.operator().await;
    let kept = oc.get_limits(get("h")).await.unwrap().into_inner();
    assert_eq!(
        (kept.source(), kept.limits.as_ref().unwrap().total),
        (api::LimitsSource::Operator, 1)
    );
    // ResetLimits returns the host to the file: this replica's.
    let reset = oc
        .reset_limits(api::ResetLimitsRequest {
            host_id: "h".into(),
            expected_revision: kept.revision,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (reset.source(), reset.limits.as_ref().unwrap().total),
        (api::LimitsSource::File, 7)
    );
    assert!(reset.revision > kept.revision);
}

#[tokio::test]
async fn a_replica_reloaded_with_sighup_puts_its_file_in_force_on_every_replica() {
    let url = std::env::var("ADMISSION_TEST_REDIS_URL")
        .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
    let yaml = |total: u32| {
        format!(
            "hosts:\n  h:\n    scheduling: {{ total: {total} }}\n\
             store:\n  redis: {{ url: \"{url}\", prefix: \"rep-hup-{}:\" }}\n",
            std::process::id()
        )
    };
    let path = config_file("rep-hup", &yaml(1));
    let start = || {
        Server::spawn(
            &["--config", path.to_str().unwrap()],
            "warn",
            Stdio::inherit(),
        )
    };
    let (a, b) = (start(), start());
    let (oa, mut ob) = (a.operator().await, b.operator().await);
    let get = || api::GetLimitsRequest {
        host_id: "h".into(),
        ..Default::default()
    };
    assert_eq!(
        ob.get_limits(get())
            .await
            .unwrap()
            .into_inner()
            .limits
            .unwrap()
            .total,
        1
    );
    std::fs::write(&path, yaml(3)).unwrap();
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    eventually("A decides with its reloaded file", DEADLINE, || {
        let mut oa = oa.clone();
        async move {
            let l = oa.get_limits(get()).await.unwrap().into_inner();
            (l.limits.unwrap().total == 3).then_some(())
        }
    })
    .await;
    let seen = ob.get_limits(get()).await.unwrap().into_inner();
    assert_eq!(
        (seen.source(), seen.limits.unwrap().total),
        (api::LimitsSource::File, 3),
        "one set of limits: B decides with A's reloaded file"
    );
}

/// As on the embedded store (tests/server.rs): a read of an unknown host makes no host and no
/// key, on Redis too.
#[tokio::test]
async fn reads_of_an_unknown_host_answer_not_found_and_make_nothing() {
    let url = std::env::var("ADMISSION_TEST_REDIS_URL").expect("ADMISSION_TEST_REDIS_URL");
    let admin = common::free_port();
    let config = config_file(
        "unknown-host",
        &format!(
            "admin_listen: 127.0.0.1:{admin}\nhosts:\n  listed:\n    scheduling: {{ total: 3 }}\n\
             store:\n  redis: {{ url: \"{url}\", prefix: \"unknown-host-{}:\" }}\n",
            std::process::id()
        ),
    );
    let server = Server::spawn(
        &["--config", config.to_str().unwrap()],
        "warn",
        Stdio::inherit(),
    );
    common::reads_of_an_unknown_host_make_nothing(&server, admin, "listed").await;
}
