//! The admin endpoint: `/metrics` after a known sequence of RPCs, `/healthz`, `/readyz`.

mod common;

use admission_authority::api;
use common::{Server, free_port, http_get as get, release, submit_req};

#[tokio::test]
async fn metrics_count_a_known_sequence_of_rpcs() {
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let server = Server::start(&[
        "--total",
        "1",
        "--queue-total",
        "1",
        "--admin-listen",
        &admin,
    ]);
    let mut c = server.client().await;
    // One admitted, one queued, one QUEUE_FULL, one BUSY (TRY); then the holder leaves.
    let holder = c
        .submit(submit_req("h", "alice", "r1"))
        .await
        .unwrap()
        .into_inner();
    c.submit(submit_req("h", "bob", "r2")).await.unwrap();
    c.submit(submit_req("h", "carol", "r3")).await.unwrap_err();
    let mut try_req = submit_req("h", "dave", "r4");
    try_req.mode = api::SubmitMode::Try as i32;
    c.submit(try_req).await.unwrap_err();
    release(&mut c, &holder.ticket_id).await;
    for _ in 0..6 {
        c.check_auth_attempt(api::AuthAttemptRequest {
            endpoint: "magic_link".into(),
            identity: "mallory@example.com".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    c.authorize(api::AuthorizeRequest {
        host_id: "h".into(),
        run_id: "run".into(),
        step: 1,
        subject: "alice".into(),
        account_id: String::new(),
        model: String::new(),
        requested_output_tokens: 10,
        estimated_input_tokens: 0,
        estimated_cost_usd: 0.0,
    })
    .await
    .unwrap();

    let (status, body) = get(port, "/metrics");
    assert_eq!(status, 200);
    for line in [
        "admission_decisions_total{rpc=\"Submit\",decision=\"admitted\",reason=\"\"} 1",
        "admission_decisions_total{rpc=\"Submit\",decision=\"queued\",reason=\"\"} 1",
        "admission_decisions_total{rpc=\"Submit\",decision=\"refused\",reason=\"QUEUE_FULL\"} 1",
        "admission_decisions_total{rpc=\"Submit\",decision=\"refused\",reason=\"BUSY\"} 1",
        "admission_decisions_total{rpc=\"Authorize\",decision=\"allow\",reason=\"\"} 1",
        "admission_auth_attempts_total{endpoint=\"magic_link\",outcome=\"allowed\"} 5",
        "admission_auth_attempts_total{endpoint=\"magic_link\",outcome=\"locked_out\"} 1",
        "admission_tickets_in_flight{host_id=\"h\"} 1",
        "admission_queue_wait_seconds_count{host_id=\"h\"} 1",
        "admission_queue_wait_seconds_bucket{host_id=\"h\",le=\"+Inf\"} 1",
        "admission_tickets_queued{host_id=\"h\"} 0",
        "admission_tickets_total{host_id=\"h\",outcome=\"admitted\"} 2",
        "admission_tickets_total{host_id=\"h\",outcome=\"rejected\"} 2",
        "admission_tickets_total{host_id=\"h\",outcome=\"released\"} 1",
        "admission_reservations_open{host_id=\"h\"} 1",
        "admission_store_errors_total 0",
        "admission_auth_fallback_active 0",
        "admission_draining 0",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing {line:?} in\n{body}"
        );
    }
    assert!(
        !body.contains("mallory") && !body.contains("alice"),
        "no identity or subject labels"
    );
    assert_eq!(get(port, "/healthz").0, 200);
    assert_eq!(get(port, "/readyz").0, 200);
    server
        .operator()
        .await
        .drain(api::DrainRequest {})
        .await
        .unwrap();
    assert_eq!(get(port, "/readyz").0, 503, "draining is not ready");
    assert_eq!(get(port, "/healthz").0, 200);
    assert_eq!(get(port, "/nope").0, 404);
}

/// Per-host series stay bounded however many host ids callers invent: the first
/// `metrics.max_hosts` by name get their own, the rest are summed under `_other`.
#[tokio::test]
async fn per_host_series_are_bounded_by_metrics_max_hosts() {
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let server = Server::start_with_config(
        "max-hosts",
        "metrics: { max_hosts: 2 }\n",
        &["--admin-listen", &admin],
    );
    let mut c = server.client().await;
    for host in ["h1", "h2", "h3", "h4", "h5"] {
        c.submit(submit_req(host, "alice", "r1")).await.unwrap();
    }
    let body = common::eventually(
        "the admin port",
        std::time::Duration::from_secs(5),
        || async {
            let (status, body) = get(port, "/metrics");
            (status == 200).then_some(body)
        },
    )
    .await;
    for line in [
        "admission_tickets_in_flight{host_id=\"h1\"} 1",
        "admission_tickets_in_flight{host_id=\"h2\"} 1",
        "admission_tickets_in_flight{host_id=\"_other\"} 3",
        "admission_tickets_total{host_id=\"_other\",outcome=\"admitted\"} 3",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "missing {line:?} in\n{body}"
        );
    }
    assert!(!body.contains("host_id=\"h3\""), "{body}");
}
