//! An authority paused (SIGSTOP) for longer than its lease ends no ticket whose holder or
//! waiter kept its part: the waiters' Wait streams stayed open and the holder kept sending
//! Renews the whole time, so on SIGCONT the leases count from the resume, as after a restart.
//! In memory, on a data dir, and on Redis (the test command's redis-server).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use admission_authority::api;
use common::{Server, config_file, eventually, follow, release, state_of, stats, submit_req};
use tokio_stream::StreamExt;

const LEASE_MS: u64 = 1_500;
const PAUSE: Duration = Duration::from_millis(3_500);
const WAITERS: [&str; 4] = ["bob", "carol", "dave", "erin"];

fn signal(pid: u32, sig: &str) {
    assert!(
        Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

async fn paused_authority_ends_no_ticket(server: Server) {
    let mut c = server.client().await;
    let holder = c
        .submit(submit_req("h", "alice", "hold"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state_of(holder.state), api::TicketState::Admitted);

    // The holder renews every third of its lease with a 1 s deadline, as the clients do,
    // and counts the renewals answered ADMITTED.
    let renewed = Arc::new(AtomicU64::new(0));
    let renewer = {
        let (mut c, id, renewed) = (c.clone(), holder.ticket_id.clone(), renewed.clone());
        tokio::spawn(async move {
            loop {
                let call = c.renew(api::RenewRequest {
                    ticket_ids: vec![id.clone()],
                    rss_mb: None,
                });
                if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(1), call).await {
                    let state = state_of(r.into_inner().tickets[0].state);
                    assert_eq!(
                        state,
                        api::TicketState::Admitted,
                        "the holder keeps its slot"
                    );
                    renewed.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(LEASE_MS / 3)).await;
            }
        })
    };

    // Waiters with their Wait streams open the whole time; each keeps every state it hears.
    let mut followers = Vec::new();
    for w in WAITERS {
        let r = c
            .submit(submit_req("h", w, &format!("run-{w}")))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(state_of(r.state), api::TicketState::Queued, "{w} waits");
        let mut stream = follow(&mut c, &r.ticket_id).await;
        followers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(Ok(e)) = stream.next().await {
                seen.push(state_of(e.state));
                if seen.last() != Some(&api::TicketState::Queued) {
                    break;
                }
            }
            seen
        }));
    }

    signal(server.pid(), "-STOP");
    tokio::time::sleep(PAUSE).await;
    signal(server.pid(), "-CONT");

    // The renewals that sat in the paused process, and two after them, answer ADMITTED.
    let before = renewed.load(Ordering::SeqCst);
    eventually(
        "the holder's renewals answer again",
        Duration::from_secs(10),
        || {
            let renewed = renewed.clone();
            async move { (renewed.load(Ordering::SeqCst) >= before + 3).then_some(()) }
        },
    )
    .await;
    let s = stats(&mut c, "h").await;
    assert_eq!(
        (s.expired, s.in_flight, s.queued),
        (0, 1, WAITERS.len() as u32),
        "after a {PAUSE:?} pause with {LEASE_MS} ms leases nothing expired: {s:?}"
    );
    // The queue still works: the holder's release admits the first waiter.
    renewer.abort();
    release(&mut c, &holder.ticket_id).await;
    let first = followers.remove(0).await.unwrap();
    assert_eq!(
        first.last(),
        Some(&api::TicketState::Admitted),
        "bob is admitted next: {first:?}"
    );
    for f in followers {
        f.abort();
    }
    assert_eq!(stats(&mut c, "h").await.expired, 0);
}

fn scheduling() -> String {
    format!(
        "scheduling: {{ total: 1, per_subject: 1, lease_ttl: {LEASE_MS}ms, queue: {{ total: 10 }} }}\n"
    )
}

#[tokio::test]
async fn a_paused_authority_in_memory_ends_no_ticket() {
    let server = Server::start_with_config("pause-memory", &scheduling(), &[]);
    paused_authority_ends_no_ticket(server).await;
}

#[tokio::test]
async fn a_paused_authority_on_a_data_dir_ends_no_ticket() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("pause-data-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let server = Server::start_with_config(
        "pause-data-dir",
        &scheduling(),
        &["--data-dir", dir.to_str().unwrap()],
    );
    paused_authority_ends_no_ticket(server).await;
}

#[tokio::test]
async fn a_paused_replica_on_redis_ends_no_ticket() {
    let url = std::env::var("ADMISSION_TEST_REDIS_URL")
        .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
    let config = config_file(
        "pause-redis",
        &format!(
            "{}store:\n  redis: {{ url: \"{url}\", prefix: \"pause-{}:\" }}\n",
            scheduling(),
            std::process::id()
        ),
    );
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    paused_authority_ends_no_ticket(server).await;
}
