//! The journal's unit tests: rotations, snapshot buffers and concurrent commits.

use super::*;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("journal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A journal serving from a new dir at `path`, syncing every millisecond under `interval`.
fn started(path: &std::path::Path, sync: SyncPolicy) -> Arc<Journal> {
    DataDir::open(path, 0)
        .unwrap()
        .start(JournalOptions {
            sync,
            sync_interval: Duration::from_millis(1),
            snapshot_after_bytes: SNAPSHOT_AFTER_BYTES,
        })
        .unwrap()
}

/// Stop the sync thread, so that nothing writes or recovers behind the test's back.
fn stop_sync_thread(journal: &Journal) {
    journal.inner.lock().unwrap().stop = true;
    journal.wake.notify_all();
    journal
        .thread
        .lock()
        .unwrap()
        .take()
        .unwrap()
        .join()
        .unwrap();
}

fn fail(journal: &Journal) {
    journal.fail(
        &mut journal.inner.lock().unwrap(),
        "the disk is full".into(),
    );
}

/// What a failure leaves, undone as a recovery would.
fn unfail(journal: &Journal) {
    let mut inner = journal.inner.lock().unwrap();
    inner.failure = None;
    journal.failed.store(false, Ordering::Relaxed);
}

fn record(journal: &Journal, n: u32) -> Pending {
    journal
        .append(|out| {
            out.extend_from_slice(&n.to_le_bytes());
            Ok::<(), ()>(())
        })
        .unwrap()
}

/// Bytes of the first segment on disk (the magic, then the records written).
fn segment_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path.join(segment_name(1))).unwrap().len()
}

/// A rotation refused while writes fail leaves no segment behind, so the next one, once
/// the disk works again, can make that segment.
#[test]
fn a_refused_rotation_leaves_no_segment_behind() {
    let path = dir("rotate");
    let journal = started(&path, SyncPolicy::Interval);
    stop_sync_thread(&journal);
    fail(&journal);
    assert_eq!(journal.rotate(), Err("the disk is full".to_string()));
    assert!(
        !path.join(segment_name(2)).exists(),
        "segment 2 was left behind"
    );
    unfail(&journal);
    assert_eq!(journal.rotate(), Ok(2));
    assert!(path.join(segment_name(2)).exists());
    journal.close();
    drop(journal);
    let _ = std::fs::remove_dir_all(&path);
}

/// A snapshot's buffer is kept for the next one, with room for what the last one held,
/// unless it is far larger than that (state that shrank lets its memory go); the file is
/// the magic and the pieces either way.
#[test]
fn the_snapshot_buffer_is_kept_unless_far_too_large() {
    let path = dir("buffer");
    let journal = started(&path, SyncPolicy::Os);
    let snapshot = |pieces: Vec<u8>| {
        let n = journal.rotate().unwrap();
        journal.write_snapshot(n, pieces).unwrap();
        std::fs::read(path.join(snapshot_name(n))).unwrap()
    };
    let mut first = journal.snapshot_buffer();
    first.extend_from_slice(&[7; 10_000]);
    let file = snapshot(first);
    assert_eq!(&file[..SNAPSHOT_MAGIC.len()], SNAPSHOT_MAGIC);
    assert_eq!(&file[SNAPSHOT_MAGIC.len()..], &[7; 10_000][..]);
    let mut next = journal.snapshot_buffer();
    assert!(next.is_empty());
    assert!(
        next.capacity() >= 10_008 + 10_008 / 4,
        "room for the last one and more"
    );
    // From then on one snapshot's memory serves the next.
    let kept = next.as_ptr();
    next.extend_from_slice(&[8; 10_000]);
    assert_eq!(&snapshot(next)[SNAPSHOT_MAGIC.len()..], &[8; 10_000][..]);
    let next = journal.snapshot_buffer();
    assert_eq!(next.as_ptr(), kept, "the last snapshot's buffer comes back");

    let mut small = next;
    small.extend_from_slice(&[1; 10]);
    snapshot(small);
    assert!(
        journal.snapshot_buffer().capacity() < 10_000,
        "a buffer far larger than the snapshot is let go"
    );
    journal.close();
    drop(journal);
    let _ = std::fs::remove_dir_all(&path);
}

/// Records of concurrent commits, each written once and in the order they were appended,
/// whichever commit's (or send gate's) write carried them (under every policy, and with the
/// send gate on where there is one).
#[test]
fn concurrent_commits_write_every_record_once_in_order() {
    let runs = [
        (SyncPolicy::Always, false),
        (SyncPolicy::Interval, false),
        (SyncPolicy::Os, false),
        (SyncPolicy::Interval, true),
        (SyncPolicy::Os, true),
    ];
    for (sync, gated) in runs {
        let path = dir(&format!("{}-{gated}", sync.name()));
        let journal = started(&path, sync);
        let gates = if gated { journal.gate_sends() } else { None };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .unwrap();
        const TASKS: u32 = 16;
        const EACH: u32 = 300;
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for t in 0..TASKS {
                let j = journal.clone();
                let gate = gates.as_ref().map(SendGates::connection);
                tasks.push(tokio::spawn(async move {
                    for i in 0..EACH {
                        let p = j
                            .append(|out| {
                                out.extend_from_slice(&t.to_le_bytes());
                                out.extend_from_slice(&i.to_le_bytes());
                                Ok::<(), ()>(())
                            })
                            .unwrap();
                        j.commit(p).await.unwrap();
                        if let Some(gate) = &gate {
                            gate.ready().unwrap();
                        }
                        assert!(j.written.load(Ordering::Acquire) > 0);
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        journal.close();
        drop(journal);
        let mut next = vec![0u32; TASKS as usize];
        let count = DataDir::open(&path, 0)
            .unwrap()
            .replay(|_, p| {
                let t = u32::from_le_bytes(p[0..4].try_into().unwrap()) as usize;
                let i = u32::from_le_bytes(p[4..8].try_into().unwrap());
                if i != next[t] {
                    return Err(format!("task {t}: record {i} where {} was due", next[t]));
                }
                next[t] += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(count, u64::from(TASKS * EACH), "{} {gated}", sync.name());
        assert!(next.iter().all(|n| *n == EACH), "{next:?}");
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// With the send gate on, a commit under `interval` and `os` writes nothing: a connection's
/// gate writes every record appended before its bytes may go. Under `always` there is no gate.
#[test]
fn with_the_send_gate_on_records_are_written_before_bytes_are_sent() {
    let path = dir("gate-always");
    let journal = started(&path, SyncPolicy::Always);
    assert!(journal.gate_sends().is_none());
    journal.close();
    let _ = std::fs::remove_dir_all(&path);
    for sync in [SyncPolicy::Interval, SyncPolicy::Os] {
        let path = dir(&format!("gate-{}", sync.name()));
        let journal = started(&path, sync);
        stop_sync_thread(&journal);
        let gates = journal.gate_sends().unwrap();
        let gate = gates.connection();
        let empty = segment_len(&path);
        gate.ready().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for n in 0..3 {
            let p = record(&journal, n);
            runtime.block_on(journal.commit(p)).unwrap();
        }
        assert_eq!(segment_len(&path), empty, "{}: a commit wrote", sync.name());
        gate.ready().unwrap();
        // Three records of 4 bytes, each framed with 8.
        assert_eq!(segment_len(&path), empty + 3 * 12, "{}", sync.name());
        journal.close();
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// When the journal fails, a connection accepted before the failure may carry answers to the
/// records caught in it: its gate fails (the connection is closed). One accepted after it
/// carries on, and commits caught in the failure fail. Once the disk works, both pass again
/// and the records caught are written.
#[test]
fn a_failure_closes_only_the_connections_that_may_carry_unwritten_answers() {
    let path = dir("gate-failure");
    let journal = started(&path, SyncPolicy::Interval);
    stop_sync_thread(&journal);
    let gates = journal.gate_sends().unwrap();
    let before = gates.connection();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let p = record(&journal, 1);
    runtime.block_on(journal.commit(p)).unwrap();
    fail(&journal);
    let after = gates.connection();
    assert!(before.ready().is_err(), "an answer could leave unwritten");
    after.ready().unwrap();
    let late = record(&journal, 2);
    assert!(matches!(
        runtime.block_on(journal.commit(late)),
        Err(StoreError::WriteFailed { .. })
    ));
    let empty = segment_len(&path);
    unfail(&journal);
    before.ready().unwrap();
    after.ready().unwrap();
    assert_eq!(segment_len(&path), empty + 2 * 12);
    journal.close();
    let _ = std::fs::remove_dir_all(&path);
}

/// With the send gate on, records no answer carries out (the client left) are written within
/// `sync_interval` by the sync thread, under `interval` and `os`.
#[test]
fn the_sync_thread_writes_what_no_answer_carried_out() {
    for sync in [SyncPolicy::Interval, SyncPolicy::Os] {
        let path = dir(&format!("gate-left-{}", sync.name()));
        let journal = started(&path, sync);
        // The sync thread first, asleep (under `os`) before the gate goes on: it used to sleep
        // through it, and the record was never written.
        std::thread::sleep(Duration::from_millis(20));
        let _gates = journal.gate_sends().unwrap();
        let empty = segment_len(&path);
        let p = record(&journal, 7);
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(journal.commit(p))
            .unwrap();
        let waited = crate::clock::Stopwatch::start();
        while segment_len(&path) == empty {
            assert!(
                waited.elapsed() < Duration::from_secs(10),
                "{}: never written",
                sync.name()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(segment_len(&path), empty + 12);
        journal.close();
        let _ = std::fs::remove_dir_all(&path);
    }
}
