//! A short version of the load generator's soak (`loadgen --soak 600`): sustained
//! Submit+Release cycles with fresh run ids on the real binary. Once `max_retained` ended
//! tickets are remembered, memory must level off however long the load lasts; on a data dir,
//! so must the dir (its log is cut back at every snapshot).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use admission_authority::api;
use common::{Server, rss_kib, submit_req};

type Client =
    admission_authority::api::admission_client::AdmissionClient<tonic::transport::Channel>;

/// `cycles` Submit+Release cycles from one task per client, each with a run id never used
/// before. The same clients (connections) serve every phase, so only the tickets change.
async fn cycles(clients: &[Client], next: &Arc<AtomicU64>, cycles: u64) {
    let end = next.load(Ordering::Relaxed) + cycles;
    let mut tasks = Vec::new();
    for c in clients {
        let mut c = c.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    return;
                }
                let r = c
                    .submit(submit_req(
                        "h",
                        &format!("s{}", i % 50),
                        &format!("run-{i}"),
                    ))
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
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_levels_off_under_sustained_cycles_with_fresh_run_ids() {
    const MAX_RETAINED: u64 = 1_000;
    let server = Server::start_with_config(
        "soak",
        &format!(
            "scheduling: {{ total: 1000, per_subject: 1000, max_retained: {MAX_RETAINED} }}\n"
        ),
        &[],
    );
    let next = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..32 {
        clients.push(server.client().await);
    }
    // Warm up past the bound, so every later ended ticket replaces an earlier one.
    cycles(&clients, &next, 8 * MAX_RETAINED).await;
    let first = rss_kib(server.pid());
    cycles(&clients, &next, 20 * MAX_RETAINED).await;
    let end = rss_kib(server.pid());
    // Kept for the whole 10-minute retention, the 20,000 ended tickets would hold ~8 MiB
    // (~390 bytes each before they were compacted); bounded, they hold nothing more.
    assert!(
        end as f64 <= first as f64 * 1.25,
        "RSS grew from {first} KiB to {end} KiB over {} more cycles",
        20 * MAX_RETAINED
    );
    // The oldest runs were forgotten early: a repeat of run-0 is a new ticket.
    let mut c = server.client().await;
    let s = common::stats(&mut c, "h").await;
    assert_eq!((s.in_flight, s.released), (0, 28 * MAX_RETAINED));
    let again = c
        .submit(submit_req("h", "s0", "run-0"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(common::state_of(again.state), api::TicketState::Admitted);
    eprintln!("soak: RSS {first} KiB after the warm-up, {end} KiB at the end");
}

/// The largest size `dir`'s files reached while `work` ran (sampled every 10 ms).
async fn peak_dir_bytes(dir: &std::path::Path, work: impl std::future::Future<Output = ()>) -> u64 {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (dir, done) = (dir.to_path_buf(), done.clone());
        tokio::spawn(async move {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                let size: u64 = std::fs::read_dir(&dir)
                    .unwrap()
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum();
                peak = peak.max(size);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            peak
        })
    };
    work.await;
    done.store(true, Ordering::Relaxed);
    sampler.await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_the_data_dir_level_off_under_sustained_cycles() {
    const MAX_RETAINED: u64 = 1_000;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("soak-data-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Snapshots at a small size, so that a short run goes through many of them.
    let server = Server::start_with_config(
        "soak-durable",
        &format!(
            "scheduling: {{ total: 1000, per_subject: 1000, max_retained: {MAX_RETAINED} }}\n\
             store: {{ embedded: {{ snapshot_after: 64KiB }} }}\n"
        ),
        &["--data-dir", dir.to_str().unwrap()],
    );
    let next = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..32 {
        clients.push(server.client().await);
    }
    cycles(&clients, &next, 8 * MAX_RETAINED).await;
    let first_disk = peak_dir_bytes(&dir, cycles(&clients, &next, 4 * MAX_RETAINED)).await;
    let first = rss_kib(server.pid());
    cycles(&clients, &next, 16 * MAX_RETAINED).await;
    let end_disk = peak_dir_bytes(&dir, cycles(&clients, &next, 4 * MAX_RETAINED)).await;
    let end = rss_kib(server.pid());
    // The ended tickets are bounded by the test above; here RSS guards against what the data
    // dir adds (buffers, records kept after their write). Its allocator noise with the log's
    // threads reaches ±8 MiB between runs, hence a wider margin than above; the ten-minute
    // soak in the load generator is the measure that counts.
    assert!(
        end as f64 <= first as f64 * 1.5,
        "RSS grew from {first} KiB to {end} KiB"
    );
    // Unbounded, the log of 20,000 more cycles would hold about 2 MiB more (~8× the first
    // peak). Bounded, the peak is a snapshot, the one before it and a log of about
    // `snapshot_after`; how far the log runs past that while a snapshot is being written
    // depends on how busy the machine is, hence the margin.
    assert!(
        end_disk <= first_disk * 2,
        "the data dir's peak grew from {first_disk} to {end_disk} bytes"
    );
    let logs = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".aal"))
        .count();
    assert!(
        logs <= 3,
        "{logs} log segments: old ones are removed after each snapshot"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "soak on a data dir: RSS {first} KiB after the warm-up, {end} KiB at the end; \
         dir peak {first_disk} bytes, then {end_disk} bytes"
    );
}
