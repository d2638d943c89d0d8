//! `Operator/ListEndedTickets` against the real server: a released ticket, refused Submits
//! with their reasons and a superseded ticket with the one that superseded it, newest first,
//! on the embedded store and through two replicas on one redis-server (either answers).

mod common;

use admission_authority::api;
use common::{Server, redis_replicas, release, submit_req};
use tonic::Code;
use tonic::transport::Channel;

const YAML: &str =
    "scheduling: { total: 1, per_subject: 1, queue: { total: 1 }, lease_ttl: 60s }\n";

async fn ended(
    op: &mut api::operator_client::OperatorClient<Channel>,
    host: &str,
    limit: u32,
) -> Result<Vec<api::EndedTicket>, tonic::Status> {
    op.list_ended_tickets(api::ListEndedTicketsRequest {
        host_id: host.into(),
        limit,
    })
    .await
    .map(|r| r.into_inner().ended)
}

/// On `server`: a holder released, a BUSY and a QUEUE_FULL refusal, and on host `keyed` a
/// keep-newest waiter superseded. Returns (released holder, superseded, superseding) ids.
async fn endings(server: &Server) -> (String, String, String) {
    let mut c = server.client().await;
    let holder = c
        .submit(submit_req("ended", "alice", "run-held"))
        .await
        .unwrap()
        .into_inner();
    c.submit(submit_req("ended", "bob", "run-waits"))
        .await
        .unwrap();
    let mut busy = submit_req("ended", "carol", "run-busy");
    busy.mode = api::SubmitMode::Try as i32;
    busy.account_id = "acct".into();
    c.submit(busy).await.expect_err("busy");
    c.submit(submit_req("ended", "dave", "run-full"))
        .await
        .expect_err("full");
    release(&mut c, &holder.ticket_id).await;
    let keyed = |run: &str| api::SubmitRequest {
        key: "conv-1".into(),
        key_policy: api::KeyPolicy::KeepNewest as i32,
        ..submit_req("keyed", "erin", run)
    };
    c.submit(keyed("k0")).await.unwrap();
    let waiter = c.submit(keyed("k1")).await.unwrap().into_inner();
    let newer = c.submit(keyed("k2")).await.unwrap().into_inner();
    (holder.ticket_id, waiter.ticket_id, newer.ticket_id)
}

async fn check(
    op: &mut api::operator_client::OperatorClient<Channel>,
    (holder, waiter, newer): &(String, String, String),
) {
    let e = ended(op, "ended", 0).await.expect("listed");
    let seen: Vec<_> = e
        .iter()
        .map(|e| {
            (
                e.state,
                e.refusal.as_str(),
                e.run_id.as_str(),
                e.subject.as_str(),
                e.account_id.as_str(),
            )
        })
        .collect();
    let released = api::TicketState::Released as i32;
    assert_eq!(
        seen,
        [
            (released, "", "run-held", "alice", ""),
            (0, "QUEUE_FULL", "run-full", "dave", ""),
            (0, "BUSY", "run-busy", "carol", "acct"),
        ]
    );
    assert_eq!((&e[0].ticket_id, e[1].ticket_id.as_str()), (holder, ""));
    assert_eq!(e[0].instance_id, "replica-1");
    assert!(e[0].ended_unix_ms >= e[1].ended_unix_ms && e[1].ended_unix_ms > 1_700_000_000_000);
    assert_eq!(ended(op, "ended", 1).await.unwrap().len(), 1);
    let k = ended(op, "keyed", 0).await.expect("listed");
    assert_eq!(k.len(), 1, "{k:?}");
    assert_eq!(
        (
            k[0].state,
            &k[0].ticket_id,
            &k[0].superseded_by,
            k[0].key.as_str()
        ),
        (api::TicketState::Superseded as i32, waiter, newer, "conv-1")
    );
    let unknown = ended(op, "nobody", 0).await.expect_err("no such host");
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    for limit in [201, u32::MAX] {
        let too_many = ended(op, "ended", limit).await.expect_err("over the bound");
        assert_eq!(too_many.code(), Code::InvalidArgument);
        assert!(
            too_many.message().contains("limit: must be <= 200"),
            "{too_many:?}"
        );
    }
    for host in ["", &"h".repeat(10_000), "tab\there"] {
        let bad = ended(op, host, 0).await.expect_err("a bad host_id");
        assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
        assert!(bad.message().starts_with("host_id: "), "{bad:?}");
    }
}

#[tokio::test]
async fn endings_name_who_ended_how_on_the_embedded_store() {
    let server = Server::start_with_config("endings-memory", YAML, &[]);
    let ids = endings(&server).await;
    check(&mut server.operator().await, &ids).await;
}

#[tokio::test]
async fn two_replicas_on_redis_list_the_same_endings() {
    let (a, b) = redis_replicas("endings-redis", YAML);
    let ids = endings(&a).await;
    check(&mut a.operator().await, &ids).await;
    check(&mut b.operator().await, &ids).await;
}
