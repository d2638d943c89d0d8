//! `Operator/GetHostHistory` against the real server: a burst of admissions and refusals lands
//! in the buckets it happened in, counted by reason, on the embedded store and through two
//! replicas on one redis-server (which answer the same buckets). Buckets are 200 ms here
//! (`history.bucket`), so the tests poll for a few of them.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use admission_authority::api;
use common::{Server, eventually, redis_replicas, release, submit_req};
use tonic::Code;
use tonic::transport::Channel;

const DEADLINE: Duration = Duration::from_secs(15);
const YAML: &str = "history: { bucket: 200ms, keep: 10s }\n\
                    scheduling: { total: 1, per_subject: 1, queue: { total: 1 } }\n";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn history(
    op: &mut api::operator_client::OperatorClient<Channel>,
    host: &str,
) -> api::GetHostHistoryResponse {
    op.get_host_history(api::GetHostHistoryRequest {
        host_id: host.into(),
    })
    .await
    .expect("history")
    .into_inner()
}

/// Totals over every bucket: (admitted, busy, queue full, waited).
fn totals(h: &api::GetHostHistoryResponse) -> (u64, u64, u64, u64) {
    h.buckets.iter().fold((0, 0, 0, 0), |t, b| {
        (
            t.0 + b.admitted,
            t.1 + b.refused_busy,
            t.2 + b.refused_queue_full,
            t.3 + b.waited,
        )
    })
}

/// One holder, sampled at least twice; then a waiter, a BUSY, a QUEUE_FULL and the holder's
/// release (admitting the waiter). Returns the wall-clock span the burst took.
async fn burst(
    server: &Server,
    reader: &mut api::operator_client::OperatorClient<Channel>,
) -> (u64, u64) {
    let mut c = server.client().await;
    let holder = c
        .submit(submit_req("hist", "a", "r0"))
        .await
        .expect("admitted")
        .into_inner();
    eventually("a first bucket", DEADLINE, || {
        let mut reader = reader.clone();
        async move { (!history(&mut reader, "hist").await.buckets.is_empty()).then_some(()) }
    })
    .await;
    let started = now_ms();
    c.submit(submit_req("hist", "a", "r1"))
        .await
        .expect("queued");
    let mut try_mode = submit_req("hist", "a", "r2");
    try_mode.mode = api::SubmitMode::Try as i32;
    let busy = c.submit(try_mode).await.expect_err("busy");
    assert_eq!(busy.code(), Code::ResourceExhausted, "{busy:?}");
    let full = c
        .submit(submit_req("hist", "a", "r3"))
        .await
        .expect_err("full");
    assert_eq!(full.code(), Code::ResourceExhausted, "{full:?}");
    release(&mut c, &holder.ticket_id).await;
    (started, now_ms())
}

/// Checks what the burst left in `h`: exact totals, the gauges after it, and the refusals in
/// a bucket that overlaps the burst.
fn burst_in(h: &api::GetHostHistoryResponse, (started, ended): (u64, u64)) -> Option<()> {
    let last = h.buckets.last()?;
    if totals(h) != (1, 1, 1, 1) || (last.in_flight, last.queued) != (1, 0) {
        return None;
    }
    let refused = h
        .buckets
        .iter()
        .find(|b| b.refused_busy > 0)
        .expect("a bucket with the refusal");
    assert!(
        refused.end_unix_ms >= started && refused.end_unix_ms - refused.span_ms <= ended + 50,
        "the refusal's bucket {refused:?} is not when it happened ({started}..{ended})"
    );
    Some(())
}

#[tokio::test]
async fn a_burst_lands_in_its_buckets_counted_by_reason() {
    let server = Server::start_with_config("history-memory", YAML, &[]);
    let mut op = server.operator().await;
    let unknown = op
        .get_host_history(api::GetHostHistoryRequest {
            host_id: "nobody".into(),
        })
        .await
        .expect_err("no such host");
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    for host in [String::new(), "h".repeat(10_000), "tab\there".into()] {
        let bad = op
            .get_host_history(api::GetHostHistoryRequest { host_id: host })
            .await
            .expect_err("a bad host_id");
        assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
        assert!(bad.message().starts_with("host_id: "), "{bad:?}");
    }

    let span = burst(&server, &mut op).await;
    let h = eventually("the burst in the history", DEADLINE, || {
        let mut op = op.clone();
        async move {
            let h = history(&mut op, "hist").await;
            burst_in(&h, span).map(|_| h)
        }
    })
    .await;
    assert_eq!((h.bucket_ms, h.buckets_kept), (200, 50));
    assert!(h.buckets.iter().all(|b| b.span_ms >= 100), "{h:?}");
    let waited = h.buckets.iter().find(|b| b.waited > 0).unwrap();
    assert!(waited.wait_p95_ms >= waited.wait_p50_ms, "{waited:?}");
}

#[tokio::test]
async fn two_replicas_on_redis_answer_the_same_buckets() {
    let (a, b) = redis_replicas("history-redis", YAML);
    let (mut op_a, op_b) = (a.operator().await, b.operator().await);
    // The burst goes through replica a; replica b reads the history.
    let span = burst(&a, &mut op_a).await;
    eventually("both replicas answer the burst alike", DEADLINE, || {
        let (mut op_a, mut op_b) = (op_a.clone(), op_b.clone());
        async move {
            let (ha, hb) = (
                history(&mut op_a, "hist").await,
                history(&mut op_b, "hist").await,
            );
            (ha == hb).then_some(())?;
            burst_in(&hb, span)
        }
    })
    .await;
}

/// Over an hour of buckets in a few seconds (10 ms buckets, 400 of them): every host answers
/// at most the buckets kept, and only the first `max_hosts` hosts by name have any.
#[tokio::test]
async fn the_history_stays_bounded_in_buckets_and_hosts() {
    let server = Server::start_with_config(
        "history-bounded",
        "history: { bucket: 10ms, keep: 500ms, max_hosts: 10 }\n",
        &[],
    );
    let mut c = server.client().await;
    let hosts: Vec<String> = (0..20).map(|i| format!("h{i:02}")).collect();
    for h in &hosts {
        c.submit(submit_req(h, "a", "r")).await.expect("admitted");
    }
    let mut op = server.operator().await;
    let mut most = 0;
    let started = now_ms();
    // About 4 s: 20 rounds of reads 200 ms apart.
    for _ in 0..20 {
        for h in &hosts[..10] {
            let n = history(&mut op, h).await.buckets.len();
            assert!(n <= 50, "{h} answered {n} buckets, past the 50 kept");
            most = most.max(n);
        }
        for h in &hosts[10..] {
            assert!(
                history(&mut op, h).await.buckets.is_empty(),
                "{h} is past max_hosts"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The kept window moved on: what was sampled in the first seconds is forgotten (however
    // many buckets a loaded machine let the sampler fill).
    let h = history(&mut op, "h00").await;
    let oldest = h.buckets.first().expect("buckets");
    assert!(
        oldest.end_unix_ms - oldest.span_ms > started + 2_000,
        "the oldest bucket kept ended at {} ms, {} ms after the start",
        oldest.end_unix_ms,
        oldest.end_unix_ms.saturating_sub(started)
    );
    assert!(most >= 5, "the sampler filled buckets ({most})");
}
