//! Keys against real servers, in memory and on Redis (the test command's redis-server): each
//! policy over gRPC, a superseded waiter told at once on its Wait stream (the state and the
//! newer ticket), supersede_running seen by the holder's next Renew, debounce with short real
//! durations, KEY_BUSY naming the holder, a supersede racing an admission (exactly one
//! outcome), bad input refused naming the field, and a flood of distinct keys that leaves
//! nothing behind.

mod common;

use std::time::Duration;

use admission_authority::api;
use admission_authority::api::admission_client::AdmissionClient;
use common::{Server, config_file, follow, release, rss_kib, state_of, stats, submit_req};
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic_types::StatusExt;

const SCHEDULING: &str =
    "scheduling: { total: 2, per_subject: 2, lease_ttl: 3s, queue: { total: 200000 } }\n";

/// A server on the embedded store, or on Redis under a prefix of its own (`<name>-redis`), with
/// its admin endpoint on `admin`.
fn server(name: &str, redis: bool, admin: u16) -> Server {
    let name = if redis {
        format!("{name}-redis")
    } else {
        name.to_string()
    };
    let store = if redis {
        let url = std::env::var("ADMISSION_TEST_REDIS_URL")
            .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
        format!(
            "store:\n  redis: {{ url: \"{url}\", prefix: \"keys-{name}-{}:\" }}\n",
            std::process::id()
        )
    } else {
        String::new()
    };
    let config = config_file(&format!("keys-{name}"), &format!("{SCHEDULING}{store}"));
    let admin = format!("127.0.0.1:{admin}");
    Server::start(&[
        "--config",
        config.to_str().unwrap(),
        "--admin-listen",
        &admin,
    ])
}

fn keyed(run: &str, key: &str, policy: api::KeyPolicy) -> api::SubmitRequest {
    api::SubmitRequest {
        key: key.into(),
        key_policy: policy as i32,
        ..submit_req("h", "alice", run)
    }
}

async fn submit(c: &mut AdmissionClient<Channel>, req: api::SubmitRequest) -> api::SubmitResponse {
    c.submit(req).await.unwrap().into_inner()
}

/// The last event of a Wait stream (it ends after the first state that is not QUEUED).
async fn last_event(c: &mut AdmissionClient<Channel>, id: &str) -> api::WaitEvent {
    let mut stream = follow(c, id).await;
    let mut last = None;
    while let Some(Ok(e)) = stream.next().await {
        let done = state_of(e.state) != api::TicketState::Queued;
        last = Some(e);
        if done {
            break;
        }
    }
    last.expect("an event")
}

async fn every_policy(redis: bool) {
    let admin = common::free_port();
    let s = server("policies", redis, admin);
    let mut c = s.client().await;
    use api::KeyPolicy as P;
    use api::TicketState as S;

    // SERIAL: one admitted per key, the rest in order, BLOCKER_KEY; another key runs beside.
    let a = submit(&mut c, keyed("s1", "serial", P::Serial)).await;
    let b = submit(&mut c, keyed("s2", "serial", P::Serial)).await;
    let other = submit(&mut c, keyed("o1", "other", P::Serial)).await;
    assert_eq!(state_of(a.state), S::Admitted);
    assert_eq!(state_of(other.state), S::Admitted);
    assert_eq!(
        (state_of(b.state), b.blocked_by),
        (S::Queued, api::Blocker::Key as i32)
    );
    // ListTickets shows the key, its policy and why the waiter waits.
    let listed = s
        .operator()
        .await
        .list_tickets(api::ListTicketsRequest {
            host_id: "h".into(),
            limit: 100,
        })
        .await
        .unwrap()
        .into_inner()
        .tickets;
    let row = listed.iter().find(|t| t.ticket_id == b.ticket_id).unwrap();
    assert_eq!(
        (row.key.as_str(), row.key_policy, row.blocked_by),
        ("serial", P::Serial as i32, api::Blocker::Key as i32)
    );
    release(&mut c, &a.ticket_id).await;
    let waited = last_event(&mut c, &b.ticket_id).await;
    assert_eq!(
        state_of(waited.state),
        S::Admitted,
        "the key's next in line"
    );
    release(&mut c, &b.ticket_id).await;
    release(&mut c, &other.ticket_id).await;

    // KEEP_NEWEST: a waiter's stream ends SUPERSEDED at once, naming the newer ticket.
    let holder = submit(&mut c, submit_req("h", "bob", "fill-1")).await;
    let holder2 = submit(&mut c, submit_req("h", "bob", "fill-2")).await;
    let first = submit(&mut c, keyed("m1", "conv", P::KeepNewest)).await;
    assert_eq!(state_of(first.state), S::Queued);
    let mut stream = follow(&mut c, &first.ticket_id).await;
    assert_eq!(
        state_of(stream.next().await.unwrap().unwrap().state),
        S::Queued
    );
    let newer = submit(&mut c, keyed("m2", "conv", P::KeepNewest)).await;
    let told = tokio::time::timeout(Duration::from_secs(2), stream.next())
        .await
        .expect("told at once")
        .unwrap()
        .unwrap();
    assert_eq!(
        (state_of(told.state), told.superseded_by.as_str()),
        (S::Superseded, newer.ticket_id.as_str())
    );
    assert!(stream.next().await.is_none(), "the stream ends with it");
    // A repeat of the superseded run answers the same.
    let again = submit(&mut c, keyed("m1", "conv", P::KeepNewest)).await;
    assert_eq!(
        (state_of(again.state), again.superseded_by.as_str()),
        (S::Superseded, newer.ticket_id.as_str())
    );

    // SERIAL_KEEP_NEWEST with supersede_running: the holder's next Renew names the newest.
    release(&mut c, &holder2.ticket_id).await;
    release(&mut c, &holder.ticket_id).await;
    release(&mut c, &newer.ticket_id).await;
    let run1 = submit(&mut c, keyed("c1", "chat", P::SerialKeepNewest)).await;
    assert_eq!(state_of(run1.state), S::Admitted);
    let mut req = keyed("c2", "chat", P::SerialKeepNewest);
    req.supersede_running = true;
    let run2 = submit(&mut c, req).await;
    assert_eq!(state_of(run2.state), S::Queued);
    let renewed = c
        .renew(api::RenewRequest {
            ticket_ids: vec![run1.ticket_id.clone()],
            rss_mb: None,
        })
        .await
        .unwrap()
        .into_inner()
        .tickets
        .remove(0);
    assert_eq!(
        (state_of(renewed.state), renewed.superseded_by.as_str()),
        (S::Admitted, run2.ticket_id.as_str()),
        "still running, told to stop"
    );
    // A Wait on the holder says so too.
    let on_wait = last_event(&mut c, &run1.ticket_id).await;
    assert_eq!(on_wait.superseded_by, run2.ticket_id);
    release(&mut c, &run1.ticket_id).await;
    assert_eq!(
        state_of(last_event(&mut c, &run2.ticket_id).await.state),
        S::Admitted
    );
    release(&mut c, &run2.ticket_id).await;

    // REJECT_NEW: refused as BUSY is, reason KEY_BUSY, naming the holder.
    let solo = submit(&mut c, keyed("r1", "solo", P::RejectNew)).await;
    let busy = c
        .submit(keyed("r2", "solo", P::RejectNew))
        .await
        .unwrap_err();
    assert_eq!(busy.code(), tonic::Code::ResourceExhausted);
    let info = busy.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "KEY_BUSY");
    assert_eq!(info.metadata.get("holder"), Some(&solo.ticket_id));
    assert!(
        busy.message().contains(&solo.ticket_id),
        "{}",
        busy.message()
    );
    assert!(busy.get_details_retry_info().is_some());
    // Another policy for a live key: FAILED_PRECONDITION naming both.
    let conflict = c.submit(keyed("r3", "solo", P::Serial)).await.unwrap_err();
    assert_eq!(conflict.code(), tonic::Code::FailedPrecondition);
    assert!(
        conflict.message().contains("KEY_POLICY_REJECT_NEW")
            && conflict.message().contains("KEY_POLICY_SERIAL"),
        "{}",
        conflict.message()
    );
    release(&mut c, &solo.ticket_id).await;

    let st = stats(&mut c, "h").await;
    assert_eq!((st.superseded, st.key_refused), (1, 1), "{st:?}");
    let (code, metrics) = common::http_get(admin, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("admission_tickets_total{host_id=\"h\",outcome=\"superseded\"} 1")
            && metrics.contains("admission_tickets_total{host_id=\"h\",outcome=\"key_refused\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn every_policy_in_memory() {
    every_policy(false).await;
}

#[tokio::test]
async fn every_policy_on_redis() {
    every_policy(true).await;
}

/// Host `h`'s live tickets, as an operator lists them.
async fn live_tickets(
    ops: &mut api::operator_client::OperatorClient<Channel>,
) -> Vec<api::TicketInfo> {
    ops.list_tickets(api::ListTicketsRequest {
        host_id: "h".into(),
        limit: 100,
    })
    .await
    .unwrap()
    .into_inner()
    .tickets
}

/// The newest message wins by when it was first sent: m0 holds a serial-keep-newest key, m1
/// waits and its ticket lapses (no Wait stream, no renewal), m2 queues, then m1 is submitted
/// again with `resubmit_expired`. m1's new ticket is superseded at once by m2, and m2 runs
/// after m0. (Before, m1's new ticket superseded m2: the older message ran.)
async fn resubmission(redis: bool) {
    let s = server("resubmit", redis, common::free_port());
    let mut c = s.client().await;
    let mut ops = s.operator().await;
    use api::KeyPolicy as P;
    use api::TicketState as S;
    let m0 = submit(&mut c, keyed("m0", "conv", P::SerialKeepNewest)).await;
    let m1 = submit(&mut c, keyed("m1", "conv", P::SerialKeepNewest)).await;
    assert_eq!(
        (state_of(m0.state), state_of(m1.state)),
        (S::Admitted, S::Queued)
    );
    // m0 is renewed while m1's lease (3 s) runs out.
    common::eventually("m1's ticket lapsed", Duration::from_secs(10), || {
        let (mut c, mut ops, m0) = (c.clone(), ops.clone(), m0.ticket_id.clone());
        let m1 = m1.ticket_id.clone();
        async move {
            c.renew(api::RenewRequest {
                ticket_ids: vec![m0],
                rss_mb: None,
            })
            .await
            .unwrap();
            let live = live_tickets(&mut ops).await;
            live.iter().all(|t| t.ticket_id != m1).then_some(())
        }
    })
    .await;
    let m2 = submit(&mut c, keyed("m2", "conv", P::SerialKeepNewest)).await;
    assert_eq!(state_of(m2.state), S::Queued);
    let mut again = keyed("m1", "conv", P::SerialKeepNewest);
    again.resubmit_expired = true;
    let again = submit(&mut c, again).await;
    assert_eq!(
        (state_of(again.state), again.superseded_by.as_str()),
        (S::Superseded, m2.ticket_id.as_str()),
        "the older message is the one superseded"
    );
    let live = live_tickets(&mut ops).await;
    assert!(live.iter().any(|t| t.ticket_id == m2.ticket_id), "{live:?}");
    release(&mut c, &m0.ticket_id).await;
    assert_eq!(
        state_of(last_event(&mut c, &m2.ticket_id).await.state),
        S::Admitted,
        "the newest runs after the first"
    );
    release(&mut c, &m2.ticket_id).await;
}

#[tokio::test]
async fn a_resubmitted_message_is_superseded_by_a_newer_one_in_memory() {
    resubmission(false).await;
}

#[tokio::test]
async fn a_resubmitted_message_is_superseded_by_a_newer_one_on_redis() {
    resubmission(true).await;
}

/// Debounce across processes: messages 100 ms apart with a 400 ms debounce. Each supersedes
/// the one before; the last is admitted once the key was quiet for the debounce, not before.
async fn debounce(redis: bool) {
    let s = server("debounce", redis, common::free_port());
    let mut c = s.client().await;
    let mut ids = Vec::new();
    let mut since_last = admission_authority::clock::Stopwatch::start();
    for i in 0..4 {
        let mut req = keyed(&format!("d{i}"), "typing", api::KeyPolicy::KeepNewest);
        req.debounce = Some(prost_types::Duration {
            seconds: 0,
            nanos: 400_000_000,
        });
        let r = submit(&mut c, req).await;
        assert_eq!(
            (state_of(r.state), r.blocked_by),
            (api::TicketState::Queued, api::Blocker::Key as i32),
            "a debounced ticket waits, whatever the caps"
        );
        ids.push(r.ticket_id);
        since_last = admission_authority::clock::Stopwatch::start();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let admitted = last_event(&mut c, ids.last().unwrap()).await;
    assert_eq!(state_of(admitted.state), api::TicketState::Admitted);
    assert!(
        since_last.elapsed() >= Duration::from_millis(400),
        "admitted before the key was quiet for the debounce"
    );
    for (i, id) in ids[..3].iter().enumerate() {
        let e = last_event(&mut c, id).await;
        assert_eq!(
            (state_of(e.state), e.superseded_by.as_str()),
            (api::TicketState::Superseded, ids[i + 1].as_str())
        );
    }
}

#[tokio::test]
async fn debounce_admits_the_newest_once_the_key_is_quiet_in_memory() {
    debounce(false).await;
}

#[tokio::test]
async fn debounce_admits_the_newest_once_the_key_is_quiet_on_redis() {
    debounce(true).await;
}

/// A keep-newest Submit racing the release that admits the key's waiter: exactly one outcome
/// for the waiter, ADMITTED or SUPERSEDED, never both, and the caps hold.
async fn supersede_races_admission(redis: bool) {
    let s = server("race", redis, common::free_port());
    let mut c = s.client().await;
    for round in 0..30 {
        let a = submit(&mut c, submit_req("h", "bob", &format!("fill-a-{round}"))).await;
        let b = submit(&mut c, submit_req("h", "bob", &format!("fill-b-{round}"))).await;
        let waiter = submit(
            &mut c,
            keyed(
                &format!("w-{round}"),
                &format!("conv-{round}"),
                api::KeyPolicy::KeepNewest,
            ),
        )
        .await;
        assert_eq!(state_of(waiter.state), api::TicketState::Queued);
        let (mut c2, mut c3) = (c.clone(), c.clone());
        let newer_req = keyed(
            &format!("n-{round}"),
            &format!("conv-{round}"),
            api::KeyPolicy::KeepNewest,
        );
        let (newer, _) = tokio::join!(
            async move { c2.submit(newer_req).await.unwrap().into_inner() },
            release(&mut c3, &a.ticket_id)
        );
        let w = last_event(&mut c, &waiter.ticket_id).await;
        let now = c
            .renew(api::RenewRequest {
                ticket_ids: vec![newer.ticket_id.clone()],
                rss_mb: None,
            })
            .await
            .unwrap()
            .into_inner()
            .tickets
            .remove(0);
        match state_of(w.state) {
            // Admitted first: it runs on, and the newer one waits for a slot.
            api::TicketState::Admitted => {
                assert_eq!(w.superseded_by, "");
                assert_eq!(state_of(now.state), api::TicketState::Queued);
            }
            // Superseded first: the newer one took the freed slot (at once, or when the
            // release came after it).
            api::TicketState::Superseded => {
                assert_eq!(w.superseded_by, newer.ticket_id);
                assert_eq!(state_of(now.state), api::TicketState::Admitted);
            }
            other => panic!("round {round}: {other:?}"),
        }
        assert!(stats(&mut c, "h").await.in_flight <= 2);
        for id in [&b.ticket_id, &waiter.ticket_id, &newer.ticket_id] {
            release(&mut c, id).await;
        }
    }
}

#[tokio::test]
async fn a_supersede_racing_an_admission_has_one_outcome_in_memory() {
    supersede_races_admission(false).await;
}

#[tokio::test]
async fn a_supersede_racing_an_admission_has_one_outcome_on_redis() {
    supersede_races_admission(true).await;
}

/// Bad key arguments are refused naming the field and the rule, and change nothing.
#[tokio::test]
async fn bad_key_arguments_are_refused_naming_the_field() {
    let s = server("bad", false, common::free_port());
    let mut c = s.client().await;
    let cases: Vec<(api::SubmitRequest, &str, &str)> = vec![
        (
            api::SubmitRequest {
                key_policy: api::KeyPolicy::Serial as i32,
                ..submit_req("h", "alice", "b1")
            },
            "key",
            "must be set",
        ),
        (
            keyed("b2", &"k".repeat(129), api::KeyPolicy::Serial),
            "key",
            "128",
        ),
        (
            keyed("b3", "conv\u{7f}", api::KeyPolicy::Serial),
            "key",
            "printable ASCII",
        ),
        (
            api::SubmitRequest {
                supersede_running: true,
                ..keyed("b4", "conv", api::KeyPolicy::Serial)
            },
            "supersede_running",
            "KEY_POLICY_KEEP_NEWEST",
        ),
        (
            api::SubmitRequest {
                debounce: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                mode: api::SubmitMode::Try as i32,
                ..keyed("b5", "conv", api::KeyPolicy::KeepNewest)
            },
            "debounce",
            "SUBMIT_MODE_QUEUE",
        ),
        (
            api::SubmitRequest {
                debounce: Some(prost_types::Duration {
                    seconds: 2,
                    nanos: 0,
                }),
                debounce_max: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                ..keyed("b6", "conv", api::KeyPolicy::KeepNewest)
            },
            "debounce_max",
            "at least debounce",
        ),
        (
            api::SubmitRequest {
                debounce: Some(prost_types::Duration {
                    seconds: 7200,
                    nanos: 0,
                }),
                ..keyed("b7", "conv", api::KeyPolicy::KeepNewest)
            },
            "debounce",
            "at most",
        ),
        (
            api::SubmitRequest {
                key_policy: 9,
                ..keyed("b8", "conv", api::KeyPolicy::KeepNewest)
            },
            "key_policy",
            "unknown value 9",
        ),
    ];
    for (req, field, rule) in cases {
        let e = c.submit(req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{field}: {e:?}");
        let bad = e.get_details_bad_request().expect("BadRequest");
        assert_eq!(bad.field_violations[0].field, field, "{e:?}");
        assert!(e.message().contains(rule), "{field}: {}", e.message());
    }
    let st = stats(&mut c, "h").await;
    assert_eq!((st.admitted, st.rejected), (0, 0), "nothing changed");
}

/// Distinct keys in a flood (a debug build here; the load generator's `--only keys` floods
/// 100,000 and more on a release build).
const FLOOD: usize = 16_000;

/// A flood of distinct keys: every ticket keyed by a key of its own, then released. The
/// authority's memory stays bounded, and nothing of the keys is left behind.
async fn flood_of_keys(redis: bool) {
    let s = server("flood", redis, common::free_port());
    let mut c = s.client().await;
    let before = rss_kib(s.pid());
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let mut c = c.clone();
            tokio::spawn(async move {
                for i in 0..FLOOD / 8 {
                    let r = c
                        .submit(api::SubmitRequest {
                            subject: format!("tenant-{}", i % 50),
                            ..keyed(
                                &format!("f-{w}-{i}"),
                                &format!("conv-{w}-{i}"),
                                api::KeyPolicy::SerialKeepNewest,
                            )
                        })
                        .await
                        .unwrap()
                        .into_inner();
                    c.release(api::ReleaseRequest {
                        ticket_id: r.ticket_id,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let st = stats(&mut c, "h").await;
    assert_eq!(
        (st.in_flight, st.queued, st.admitted + st.cancelled),
        (0, 0, FLOOD as u64),
        "{st:?}"
    );
    let after = rss_kib(s.pid());
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} KiB to {after} KiB over {FLOOD} keys"
    );
    let listed = s
        .operator()
        .await
        .list_tickets(api::ListTicketsRequest {
            host_id: "h".into(),
            limit: 10,
        })
        .await
        .unwrap()
        .into_inner()
        .tickets;
    assert!(listed.is_empty());
    if redis {
        // No key index is left in Redis: only the ended tickets, until their retention.
        let url = std::env::var("ADMISSION_TEST_REDIS_URL").unwrap();
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let prefix = format!("keys-flood-redis-{}:", std::process::id());
        let left: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*:k:*"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(left.is_empty(), "{} key indexes left", left.len());
        let index: i64 = redis::cmd("EVAL")
            .arg("local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('HLEN', k) end return n")
            .arg(0)
            .arg(format!("{prefix}*}}:keys"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(index, 0, "keys still indexed");
    }
}

#[tokio::test]
async fn a_flood_of_distinct_keys_leaves_nothing_behind_in_memory() {
    flood_of_keys(false).await;
}

#[tokio::test]
async fn a_flood_of_distinct_keys_leaves_nothing_behind_on_redis() {
    flood_of_keys(true).await;
}
