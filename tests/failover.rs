//! A Redis failover with real processes: a primary, a replica whose link to it runs through a
//! relay this test owns (cut, so that the replica lags), and one endpoint (another relay) that
//! two authority replicas use, flipped to the promoted replica as a managed Redis's endpoint
//! is. Holders renew as the clients do (Renew, and Reclaim when the store answers EXPIRED);
//! newcomers Submit. Checked from the clients' side:
//!
//! - with `replicas_acked: 1`, an admission the replica does not hold is never acknowledged
//!   (OUTCOME_UNKNOWN, and the client's retry by run id finds it, or not), so after the
//!   failover every acknowledged holder still holds and no more runs hold than the cap;
//! - without it, the admissions the replica missed are lost, and the first lost holder's
//!   renewal shows it: the loss is counted and the host's learning window opens at once, so
//!   no newcomer takes a slot a lost holder still runs in;
//! - a replica that had caught up: nothing is lost, nothing counted, nothing refused;
//! - the same through Redis Sentinel (three sentinels that promote the replica themselves):
//!   the authorities find the new primary through them and go on.
#![allow(
    clippy::disallowed_types,
    reason = "it polls real processes with deadlines"
)]

mod common;

use std::time::Duration;

use admission_authority::api::{self, admission_client::AdmissionClient};
use common::relay::Relay;
use common::{RedisServer, Server, config_file, eventually, free_port, state_of, stats};
use tonic::transport::Channel;
use tonic_types::StatusExt;

/// A primary, a replica of it through `link`, and the `endpoint` the authorities use.
struct Topology {
    primary: RedisServer,
    link: Relay,
    replica: RedisServer,
    endpoint: Relay,
}

impl Topology {
    async fn start() -> Topology {
        let primary = RedisServer::start(free_port());
        let link = Relay::start(primary.port);
        let replica = RedisServer::start_with(
            free_port(),
            &["--replicaof", "127.0.0.1", &link.port.to_string()],
        );
        let endpoint = Relay::start(primary.port);
        let t = Topology {
            primary,
            link,
            replica,
            endpoint,
        };
        eventually("the replica in sync", Duration::from_secs(20), || async {
            let info: String = cmd(t.replica.port, &["INFO", "replication"]).await.ok()?;
            info.contains("master_link_status:up").then_some(())
        })
        .await;
        t
    }

    /// Wait until the replica holds every write the primary has.
    async fn caught_up(&self) {
        let mut c = conn(self.primary.port).await;
        let n: i64 = redis::pipe()
            .cmd("INCR")
            .arg("failover-test:sync")
            .ignore()
            .cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query_async::<(i64,)>(&mut c)
            .await
            .unwrap()
            .0;
        assert_eq!(n, 1, "the replica confirmed");
    }

    /// The primary killed, the replica promoted, the endpoint pointed at it.
    async fn fail_over(&mut self) {
        self.primary.stop();
        let _: String = cmd(self.replica.port, &["REPLICAOF", "NO", "ONE"])
            .await
            .unwrap();
        self.endpoint.point(self.replica.port);
    }
}

/// Three sentinels watching `primary` as master set `main` (down after 1 s, failover timeout
/// 3 s), each its own redis-sentinel process, killed when dropped.
struct Sentinels {
    children: Vec<std::process::Child>,
    ports: Vec<u16>,
}

impl Sentinels {
    fn start(primary: u16) -> Sentinels {
        let mut s = Sentinels {
            children: Vec::new(),
            ports: Vec::new(),
        };
        for _ in 0..3 {
            let port = free_port();
            let dir =
                std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sentinel-{port}"));
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("sentinel.conf");
            std::fs::write(
                &file,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor main 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds main 1000\n\
                     sentinel failover-timeout main 3000\n",
                    dir.display()
                ),
            )
            .unwrap();
            let child = std::process::Command::new("redis-sentinel")
                .arg(&file)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("redis-sentinel on PATH (scripts/test installs it)");
            s.children.push(child);
            s.ports.push(port);
        }
        s
    }

    /// The port of the primary the sentinels name now.
    async fn primary(&self) -> Option<u16> {
        let addr: Vec<String> = cmd(
            self.ports[0],
            &["SENTINEL", "get-master-addr-by-name", "main"],
        )
        .await
        .ok()?;
        addr.get(1)?.parse().ok()
    }

    fn nodes(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("\"127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn conn(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/0"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn cmd<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))?;
    let mut c = client.get_multiplexed_async_connection().await?;
    let mut command = redis::cmd(args[0]);
    for a in &args[1..] {
        command.arg(*a);
    }
    command.query_async(&mut c).await
}

/// An authority on the endpoint: host `h`, total 4, lease 3 s; its name's part before `-` is
/// the prefix, shared by the replicas of one installation.
fn authority(name: &str, endpoint: u16, acked: u32) -> Server {
    authority_on(
        name,
        &format!("url: \"redis://127.0.0.1:{endpoint}/0\""),
        acked,
    )
}

/// [`authority`] through the sentinels.
fn authority_via_sentinels(name: &str, sentinels: &Sentinels, acked: u32) -> Server {
    let sentinel = format!(
        "url: \"redis://main/0\"\n    sentinel: {{ master: main, nodes: [{}] }}",
        sentinels.nodes()
    );
    authority_on(name, &sentinel, acked)
}

/// An authority on Redis found by `found` (the lines of `store.redis` that say where).
fn authority_on(name: &str, found: &str, acked: u32) -> Server {
    let prefix = name.split('-').next().unwrap();
    let config = config_file(
        &format!("failover-{name}"),
        &format!(
            "hosts:\n  h:\n    scheduling: {{ total: 4, per_subject: 4, lease_ttl: 3s, queue: {{ total: 50 }} }}\n\
             store:\n  redis:\n    {found}\n    prefix: \"fo-{prefix}:\"\n\
             \x20   replicas_acked: {acked}\n    replication_timeout: 300ms\n"
        ),
    );
    Server::start(&["--config", config.to_str().unwrap()])
}

/// A run holding a slot, as its client knows it.
#[derive(Clone, Debug)]
struct Holder {
    run: String,
    ticket: String,
    grant: u64,
}

fn submit_req(run: &str) -> api::SubmitRequest {
    common::submit_req("h", &format!("s-{run}"), run)
}

async fn admit(c: &mut AdmissionClient<Channel>, run: &str) -> Holder {
    let r = c.submit(submit_req(run)).await.unwrap().into_inner();
    assert_eq!(state_of(r.state), api::TicketState::Admitted, "{run}");
    Holder {
        run: run.into(),
        ticket: r.ticket_id,
        grant: r.grant,
    }
}

/// A holder's renewal as the clients make it: Renew, and Reclaim when the store no longer
/// knows the ticket. The state it holds after; retried while the store cannot answer.
async fn renew(c: &mut AdmissionClient<Channel>, h: &Holder) -> api::TicketState {
    eventually("a renewal answered", Duration::from_secs(20), || {
        let mut c = c.clone();
        let h = h.clone();
        async move {
            let r = c
                .renew(api::RenewRequest {
                    ticket_ids: vec![h.ticket.clone()],
                    rss_mb: None,
                })
                .await
                .ok()?
                .into_inner();
            let state = state_of(r.tickets.first()?.state);
            if state != api::TicketState::Expired {
                return Some(state);
            }
            let back = c
                .reclaim(api::ReclaimRequest {
                    ticket_id: h.ticket.clone(),
                    host_id: "h".into(),
                    run_id: h.run.clone(),
                    subject: format!("s-{}", h.run),
                    instance_id: "gateway".into(),
                    grant: h.grant,
                    priority: 3,
                    ..Default::default()
                })
                .await
                .ok()?
                .into_inner();
            Some(state_of(back.state))
        }
    })
    .await
}

/// With `replicas_acked: 1` an admission the replica does not hold is never acknowledged, so a
/// failover loses none that a client was told of.
#[tokio::test]
async fn with_replicas_acked_no_acknowledged_admission_is_lost() {
    let mut t = Topology::start().await;
    let (a1, a2) = (
        authority("acked-1", t.endpoint.port, 1),
        authority("acked-2", t.endpoint.port, 1),
    );
    let (mut c1, mut c2) = (a1.client().await, a2.client().await);
    let holders = [admit(&mut c1, "h1").await, admit(&mut c1, "h2").await];
    // The replica's link cut: an admission now is not acknowledged, and says its outcome is
    // unknown.
    t.link.cut();
    for run in ["h3", "h4"] {
        let e = c1.submit(submit_req(run)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        assert_eq!(
            e.get_details_error_info().map(|i| i.reason),
            Some("OUTCOME_UNKNOWN".to_string()),
            "{e:?}"
        );
    }
    t.fail_over().await;
    // The promoted replica confirms decisions once a replica of its own runs (Sentinel
    // reconfigures the others; here a new one joins): until then nothing is decided.
    let _joined = RedisServer::start_with(
        free_port(),
        &["--replicaof", "127.0.0.1", &t.replica.port.to_string()],
    );
    // Every acknowledged holder still holds its slot, without re-registering.
    for h in &holders {
        assert_eq!(renew(&mut c2, h).await, api::TicketState::Admitted);
    }
    // The runs whose outcome was unknown retry by run id: each is admitted once, under a
    // grant above every grant handed out before the failover (none repeated, none back).
    let before = holders.iter().map(|h| h.grant).max().unwrap();
    for run in ["h3", "h4"] {
        let r = eventually("the retry answered", Duration::from_secs(10), || {
            let mut c = c2.clone();
            async move { c.submit(submit_req(run)).await.ok() }
        })
        .await
        .into_inner();
        assert_eq!(state_of(r.state), api::TicketState::Admitted, "{run}");
        assert!(r.grant > before, "{run}: grant {} after {before}", r.grant);
    }
    // Newcomers wait: never more runs held than the cap.
    for run in ["n1", "n2"] {
        let r = c2.submit(submit_req(run)).await.unwrap().into_inner();
        assert_eq!(state_of(r.state), api::TicketState::Queued, "{run}");
    }
    let s = stats(&mut c2, "h").await;
    assert_eq!((s.in_flight, s.queued, s.state_losses), (4, 2, 0), "{s:?}");
}

/// Without `replicas_acked`, the admissions the replica missed are lost in the failover. The
/// first lost holder's renewal is the evidence: the loss is counted and the learning window
/// opens at once, so newcomers wait instead of taking the slots the other lost holder still
/// runs in (before, one was admitted: 5 runs held against a cap of 4).
#[tokio::test]
async fn a_rollback_is_detected_at_the_first_lost_holders_renewal() {
    let mut t = Topology::start().await;
    let (a1, a2) = (
        authority("rollback-1", t.endpoint.port, 0),
        authority("rollback-2", t.endpoint.port, 0),
    );
    let (mut c1, mut c2) = (a1.client().await, a2.client().await);
    let kept = [admit(&mut c1, "h1").await, admit(&mut c1, "h2").await];
    t.caught_up().await;
    t.link.cut();
    let lost = [admit(&mut c1, "h3").await, admit(&mut c1, "h4").await];
    t.fail_over().await;
    let flipped = std::time::Instant::now();
    for h in &kept {
        assert_eq!(renew(&mut c2, h).await, api::TicketState::Admitted);
    }
    eprintln!(
        "the first renewals after the flip took {:?}",
        flipped.elapsed()
    );
    // The first lost holder re-registers: the store had no trace of its ticket.
    assert_eq!(renew(&mut c2, &lost[0]).await, api::TicketState::Admitted);
    let s = stats(&mut c2, "h").await;
    assert_eq!((s.in_flight, s.state_losses), (3, 1), "{s:?}");
    // A newcomer now waits, though a slot looks free, while the other lost holder comes back.
    let n = c1.submit(submit_req("n1")).await.unwrap().into_inner();
    assert_eq!(state_of(n.state), api::TicketState::Queued);
    assert_eq!(renew(&mut c2, &lost[1]).await, api::TicketState::Admitted);
    let s = stats(&mut c2, "h").await;
    assert_eq!((s.in_flight, s.queued), (4, 1), "{s:?}");
}

/// The control: a replica that had caught up. No loss is counted, every holder keeps its slot
/// without re-registering, and newcomers are admitted as slots free.
#[tokio::test]
async fn a_failover_to_a_replica_that_caught_up_loses_nothing() {
    let mut t = Topology::start().await;
    let a = authority("control", t.endpoint.port, 0);
    let mut c = a.client().await;
    let holders = [admit(&mut c, "h1").await, admit(&mut c, "h2").await];
    t.caught_up().await;
    t.fail_over().await;
    for h in &holders {
        assert_eq!(renew(&mut c, h).await, api::TicketState::Admitted);
    }
    let n = c.submit(submit_req("n1")).await.unwrap().into_inner();
    assert_eq!(state_of(n.state), api::TicketState::Admitted);
    let s = stats(&mut c, "h").await;
    assert_eq!(
        (s.in_flight, s.state_losses, s.reclaimed),
        (3, 0, 0),
        "{s:?}"
    );
}

/// Through Redis Sentinel: two authorities find the primary through three sentinels; the
/// replica lags (its link cut) when two more holders are admitted; the primary is killed and
/// the sentinels promote the replica. The authorities follow the promotion by themselves (a
/// broken connection asks the sentinels again), the kept holders keep their slots, the first
/// lost holder's renewal opens the learning window, and newcomers wait.
#[tokio::test]
async fn through_sentinel_the_promoted_replica_is_found_and_a_rollback_detected() {
    let t = Topology::start().await;
    let sentinels = Sentinels::start(t.primary.port);
    eventually(
        "the sentinels watch the primary",
        Duration::from_secs(20),
        || async {
            let replicas: Vec<redis::Value> =
                cmd(sentinels.ports[2], &["SENTINEL", "replicas", "main"])
                    .await
                    .ok()?;
            (sentinels.primary().await == Some(t.primary.port) && !replicas.is_empty())
                .then_some(())
        },
    )
    .await;
    let (a1, a2) = (
        authority_via_sentinels("sentinel-1", &sentinels, 0),
        authority_via_sentinels("sentinel-2", &sentinels, 0),
    );
    let (mut c1, mut c2) = (a1.client().await, a2.client().await);
    let kept = [admit(&mut c1, "h1").await, admit(&mut c1, "h2").await];
    t.caught_up().await;
    t.link.cut();
    let lost = [admit(&mut c1, "h3").await, admit(&mut c1, "h4").await];
    let Topology {
        mut primary,
        replica,
        ..
    } = t;
    primary.stop();
    eventually(
        "the sentinels promote the replica",
        Duration::from_secs(30),
        || async { (sentinels.primary().await == Some(replica.port)).then_some(()) },
    )
    .await;
    for h in &kept {
        assert_eq!(renew(&mut c2, h).await, api::TicketState::Admitted);
    }
    assert_eq!(renew(&mut c2, &lost[0]).await, api::TicketState::Admitted);
    let n = c1.submit(submit_req("n1")).await.unwrap().into_inner();
    assert_eq!(state_of(n.state), api::TicketState::Queued);
    assert_eq!(renew(&mut c1, &lost[1]).await, api::TicketState::Admitted);
    let s = stats(&mut c2, "h").await;
    assert_eq!((s.in_flight, s.queued, s.state_losses), (4, 1, 1), "{s:?}");
}

/// A primary demoted under open connections, as a managed Redis's endpoint moves while its
/// clients' connections stay where they were: the old primary, now a replica of the promoted
/// one, answers READONLY. The first call that meets it replaces the connection and goes on at
/// once: no UNAVAILABLE, no replica failing until a restart (before, READONLY was an answer
/// the connection was kept for, and every decision failed).
#[tokio::test]
async fn a_demoted_primarys_connections_are_replaced_at_once() {
    let t = Topology::start().await;
    let a = authority("demoted", t.endpoint.port, 0);
    let mut c = a.client().await;
    let h1 = admit(&mut c, "h1").await;
    t.caught_up().await;
    let _: String = cmd(t.replica.port, &["REPLICAOF", "NO", "ONE"])
        .await
        .unwrap();
    let _: String = cmd(
        t.primary.port,
        &["REPLICAOF", "127.0.0.1", &t.replica.port.to_string()],
    )
    .await
    .unwrap();
    t.endpoint.point_new(t.replica.port);
    let started = std::time::Instant::now();
    admit(&mut c, "h2").await;
    eprintln!(
        "the first Submit after the demotion took {:?}",
        started.elapsed()
    );
    assert_eq!(
        state_of(
            c.renew(api::RenewRequest {
                ticket_ids: vec![h1.ticket],
                rss_mb: None,
            })
            .await
            .unwrap()
            .into_inner()
            .tickets[0]
                .state
        ),
        api::TicketState::Admitted
    );
    let s = stats(&mut c, "h").await;
    assert_eq!((s.in_flight, s.state_losses), (2, 0), "{s:?}");
}

/// Through Redis Sentinel with `replicas_acked: 1`: two replicas, one of them lagging (its link
/// cut). An admission is acknowledged only once a replica holds it, the sentinels promote the
/// replica with the most data, which holds every acknowledged admission, and after the
/// failover every holder still holds and no more runs hold than the cap.
#[tokio::test]
async fn through_sentinel_with_replicas_acked_nothing_acknowledged_is_lost() {
    let t = Topology::start().await;
    // A second replica, straight from the primary: it confirms while the first lags.
    let direct = RedisServer::start_with(
        free_port(),
        &["--replicaof", "127.0.0.1", &t.primary.port.to_string()],
    );
    eventually(
        "the second replica in sync",
        Duration::from_secs(20),
        || async {
            let info: String = cmd(direct.port, &["INFO", "replication"]).await.ok()?;
            info.contains("master_link_status:up").then_some(())
        },
    )
    .await;
    let sentinels = Sentinels::start(t.primary.port);
    eventually(
        "the sentinels see both replicas",
        Duration::from_secs(20),
        || async {
            let replicas: Vec<redis::Value> =
                cmd(sentinels.ports[2], &["SENTINEL", "replicas", "main"])
                    .await
                    .ok()?;
            (replicas.len() == 2).then_some(())
        },
    )
    .await;
    let a = authority_via_sentinels("sacked-1", &sentinels, 1);
    let mut c = a.client().await;
    let mut holders = vec![admit(&mut c, "h1").await];
    t.link.cut();
    holders.push(admit(&mut c, "h2").await);
    holders.push(admit(&mut c, "h3").await);
    let Topology {
        mut primary,
        replica: lagging,
        ..
    } = t;
    primary.stop();
    eventually(
        "the sentinels promote the replica that holds the most",
        Duration::from_secs(30),
        || async { (sentinels.primary().await == Some(direct.port)).then_some(()) },
    )
    .await;
    // The lagging replica is made to follow the new primary (by the sentinels, in time; here
    // at once, so the new primary has a replica to confirm with).
    let _: String = cmd(
        lagging.port,
        &["REPLICAOF", "127.0.0.1", &direct.port.to_string()],
    )
    .await
    .unwrap();
    for h in &holders {
        assert_eq!(renew(&mut c, h).await, api::TicketState::Admitted);
    }
    let n = eventually("a newcomer answered", Duration::from_secs(20), || {
        let mut c = c.clone();
        async move { c.submit(submit_req("n1")).await.ok() }
    })
    .await
    .into_inner();
    assert_eq!(state_of(n.state), api::TicketState::Admitted);
    let n2 = c.submit(submit_req("n2")).await.unwrap().into_inner();
    assert_eq!(
        state_of(n2.state),
        api::TicketState::Queued,
        "the cap of 4 holds"
    );
    // (A holder whose 3 s lease ran out during the election re-registers with its ticket
    // remembered: that is no loss.)
    let s = stats(&mut c, "h").await;
    assert_eq!((s.in_flight, s.queued, s.state_losses), (4, 1, 0), "{s:?}");
}
