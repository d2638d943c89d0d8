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

/// A rotation refused while writes fail leaves no segment behind, so the next one, once
/// the disk works again, can make that segment.
#[test]
fn a_refused_rotation_leaves_no_segment_behind() {
    let path = dir("rotate");
    let journal = started(&path, SyncPolicy::Interval);
    // Without the sync thread nothing recovers behind the test's back.
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
    journal.fail(
        &mut journal.inner.lock().unwrap(),
        "the disk is full".into(),
    );
    assert_eq!(journal.rotate(), Err("the disk is full".to_string()));
    assert!(
        !path.join(segment_name(2)).exists(),
        "segment 2 was left behind"
    );
    {
        let mut inner = journal.inner.lock().unwrap();
        inner.failure = None;
        journal.failed.store(false, Ordering::Relaxed);
    }
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
        journal.write_snapshot(n, pieces);
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
/// whichever commit's write carried them (under every policy).
#[test]
fn concurrent_commits_write_every_record_once_in_order() {
    for sync in [SyncPolicy::Always, SyncPolicy::Interval, SyncPolicy::Os] {
        let path = dir(sync.name());
        let journal = started(&path, sync);
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
            .replay(|p| {
                let t = u32::from_le_bytes(p[0..4].try_into().unwrap()) as usize;
                let i = u32::from_le_bytes(p[4..8].try_into().unwrap());
                if i != next[t] {
                    return Err(format!("task {t}: record {i} where {} was due", next[t]));
                }
                next[t] += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(count, u64::from(TASKS * EACH), "{}", sync.name());
        assert!(next.iter().all(|n| *n == EACH), "{next:?}");
        let _ = std::fs::remove_dir_all(&path);
    }
}
