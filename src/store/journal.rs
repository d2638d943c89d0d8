//! The data dir of the durable embedded store: a write-ahead log of the core's operations, and
//! snapshots that bound it. This module knows bytes, files and fsync; what a record means is
//! [`super::memory`]'s business.
//!
//! Layout of a data dir:
//! * `LOCK`: held (`flock`) by the one process that serves from the dir;
//! * `FORMAT`: the format number and the dir's epoch (the wall clock, in µs, at store time 0);
//! * `log-<n>.aal`: log segments, numbered upwards; every process start opens a new one;
//! * `snapshot-<n>.aas`: the state as it was when segment `n` began (records of segments `>= n`
//!   that the snapshot already holds are recognised by their sequence numbers and skipped).
//!
//! Every record and snapshot piece is framed as `[len: u32 LE][crc32: u32 LE][payload]`.
//! Appends go to a buffer under one mutex; the first caller to commit writes everything
//! buffered (group write), so an answer leaves only after its record reached the kernel: a
//! process crash loses nothing acknowledged under any sync policy. The sync thread turns
//! written bytes into durable ones: under `always` each commit waits for an fsync that covers
//! it (concurrent commits share one: group commit); under `interval` at least every
//! `sync_interval`; under `os` when the kernel decides.
//!
//! A failed write or fsync (a full disk) puts the journal in a failed state: new changes are
//! refused before they are applied, the records caught in the failure stay buffered (their
//! callers were told the outcome is unknown), and the sync thread retries until the disk takes
//! them again.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::StoreError;

/// The data dir's format; a dir of a larger one was written by a newer authority.
pub const FORMAT: u32 = 1;
const LOG_MAGIC: &[u8; 8] = b"AAlog\0\0\x01";
const SNAPSHOT_MAGIC: &[u8; 8] = b"AAsnap\0\x01";
/// No record or snapshot piece is this large; a length above it is damage, not data.
const MAX_FRAME: usize = 1 << 30;
/// A snapshot is taken once the log since the last one holds this many bytes, or as many as
/// the last snapshot if that is more (so writing snapshots costs at most as much as the log).
pub const SNAPSHOT_AFTER_BYTES: u64 = 8 << 20;

/// How a journal writes: the sync policy, and when to take a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalOptions {
    pub sync: SyncPolicy,
    pub sync_interval: Duration,
    /// See [`SNAPSHOT_AFTER_BYTES`] (tests take snapshots far more often).
    pub snapshot_after_bytes: u64,
}

/// When written records are made durable (`store.embedded.sync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// fsync before the answer leaves; concurrent changes share one fsync.
    Always,
    /// fsync at least every `sync_interval`.
    #[default]
    Interval,
    /// Never fsync in the write path; the kernel writes back when it decides.
    Os,
}

impl SyncPolicy {
    pub const NAMES: [&'static str; 3] = ["always", "interval", "os"];

    pub fn name(self) -> &'static str {
        match self {
            SyncPolicy::Always => "always",
            SyncPolicy::Interval => "interval",
            SyncPolicy::Os => "os",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "always" => Some(SyncPolicy::Always),
            "interval" => Some(SyncPolicy::Interval),
            "os" => Some(SyncPolicy::Os),
            _ => None,
        }
    }
}

/// Why a data dir cannot be served from. Each names the file and the problem.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("data dir {path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error(
        "data dir {0}: in use by another live process (it holds {0}/LOCK); stop it, or give this one another --data-dir"
    )]
    Locked(PathBuf),
    #[error("{path}: {what}")]
    Damaged { path: PathBuf, what: String },
}

/// Append a framed payload that `write` puts at the end of `out`.
pub fn frame<E>(
    out: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    write(out)?;
    let len = (out.len() - start - 8) as u32;
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// A frame that does not check out, and whether it is only a torn tail (what a crash in the
/// middle of a write leaves: a record cut short at the end of the file, or zeros after it).
struct BadFrame {
    at: usize,
    why: String,
    torn: bool,
}

/// Hand every frame of `buf` to `each` (with its offset); stop at the first bad one.
fn frames(buf: &[u8], mut each: impl FnMut(usize, &[u8])) -> Result<(), BadFrame> {
    let mut at = 0;
    while at < buf.len() {
        let rest = &buf[at..];
        if rest.iter().all(|b| *b == 0) {
            return Err(BadFrame {
                at,
                why: format!("{} zero bytes after the last record", rest.len()),
                torn: true,
            });
        }
        if rest.len() < 8 {
            return Err(BadFrame {
                at,
                why: "a record header cut short".into(),
                torn: true,
            });
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        if len > MAX_FRAME {
            return Err(BadFrame {
                at,
                why: format!("a record length of {len} bytes"),
                torn: false,
            });
        }
        if rest.len() < 8 + len {
            return Err(BadFrame {
                at,
                why: format!("a record of {len} bytes cut short at {}", rest.len() - 8),
                torn: true,
            });
        }
        let payload = &rest[8..8 + len];
        if crc32fast::hash(payload) != crc {
            return Err(BadFrame {
                at,
                why: "a record whose checksum does not match".into(),
                // A last record that fails its checksum was being written when the machine
                // stopped; one with records after it was damaged later.
                torn: rest.len() == 8 + len,
            });
        }
        each(at, payload);
        at += 8 + len;
    }
    Ok(())
}

/// An opened, locked data dir, before serving: read its snapshot, replay its log, then
/// [`DataDir::start`] the journal.
pub struct DataDir {
    path: PathBuf,
    lock: File,
    /// The wall clock (µs since the Unix epoch) at the store's time 0.
    pub epoch_us: u64,
    /// True when the dir held no state before (made now, or empty).
    pub fresh: bool,
    snapshot: Option<u64>,
    segments: Vec<u64>,
}

impl DataDir {
    /// Open (or make) the data dir at `path` and take its lock. A new dir's epoch is
    /// `epoch_us`.
    ///
    /// Fails when the dir cannot be made or read, another live process holds it, or its
    /// `FORMAT` is unreadable or newer than this authority's.
    pub fn open(path: &Path, epoch_us: u64) -> Result<DataDir, OpenError> {
        let io = |what: &'static str| {
            let path = path.to_path_buf();
            move |source| OpenError::Io { path, what, source }
        };
        if !path.exists() {
            // Readable by the service alone: it holds auth identities as callers sent them.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(io("cannot make it"))?;
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.join("LOCK"))
            .map_err(io("cannot open its LOCK file"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(OpenError::Locked(path.to_path_buf()));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io("cannot lock it")(e)),
        }
        let mut snapshot = None;
        let mut segments = Vec::new();
        for entry in std::fs::read_dir(path).map_err(io("cannot list it"))? {
            let name = entry.map_err(io("cannot list it"))?.file_name();
            let name = name.to_string_lossy();
            if let Some(n) = numbered(&name, "snapshot-", ".aas") {
                snapshot = snapshot.max(Some(n));
            } else if let Some(n) = numbered(&name, "log-", ".aal") {
                segments.push(n);
            }
        }
        segments.sort_unstable();
        let format_path = path.join("FORMAT");
        let fresh = snapshot.is_none() && segments.is_empty();
        let epoch_us = match std::fs::read_to_string(&format_path) {
            Ok(text) => parse_format(&text).map_err(|what| OpenError::Damaged {
                path: format_path.clone(),
                what,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && fresh => {
                write_synced(
                    path,
                    "FORMAT",
                    format!("admission-authority data dir\nformat {FORMAT}\nepoch_us {epoch_us}\n")
                        .as_bytes(),
                )
                .map_err(io("cannot write FORMAT"))?;
                epoch_us
            }
            Err(e) => {
                return Err(OpenError::Io {
                    path: format_path,
                    what: "cannot read it (the dir holds a log but no FORMAT)",
                    source: e,
                });
            }
        };
        Ok(DataDir {
            path: path.to_path_buf(),
            lock,
            epoch_us,
            fresh,
            snapshot,
            segments,
        })
    }

    /// The newest snapshot's pieces, each checked; `None` when there is none.
    ///
    /// Fails when it cannot be read or a piece is damaged (a snapshot is written whole and
    /// renamed into place, so any damage is damage).
    pub fn snapshot(&self) -> Result<Option<Vec<Vec<u8>>>, OpenError> {
        let Some(n) = self.snapshot else {
            return Ok(None);
        };
        let path = self.path.join(snapshot_name(n));
        let bytes = std::fs::read(&path).map_err(|source| OpenError::Io {
            path: path.clone(),
            what: "cannot read it",
            source,
        })?;
        let damaged = |what: String| OpenError::Damaged {
            path: path.clone(),
            what,
        };
        let body = bytes
            .strip_prefix(SNAPSHOT_MAGIC.as_slice())
            .ok_or_else(|| damaged("not a snapshot of this format".into()))?;
        let mut pieces = Vec::new();
        frames(body, |_, p| pieces.push(p.to_vec())).map_err(|bad| {
            damaged(format!(
                "damaged at byte {}: {}",
                bad.at + SNAPSHOT_MAGIC.len(),
                bad.why
            ))
        })?;
        Ok(Some(pieces))
    }

    /// Hand every record of the log since the newest snapshot to `each`, oldest first. A torn
    /// last record of the last segment is cut off (and logged); any other damage fails.
    ///
    /// Fails when a segment cannot be read, is not a log of this format, or is damaged before
    /// its end; or when `each` fails (a record this authority cannot decode).
    pub fn replay(
        &self,
        mut each: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<u64, OpenError> {
        let from = self.snapshot.unwrap_or(1);
        let mut count = 0;
        let segments: Vec<u64> = self
            .segments
            .iter()
            .copied()
            .filter(|n| *n >= from)
            .collect();
        // The snapshot holds everything before segment `from`, and every segment from it on
        // must be there: a gap (a dir copied file by file from a running process, a file
        // removed by hand) would silently lose the changes it held.
        for (i, n) in segments.iter().enumerate() {
            let expected = from + i as u64;
            if *n != expected {
                return Err(OpenError::Damaged {
                    path: self.path.join(segment_name(expected)),
                    what: format!(
                        "missing: the log goes on in {} but this segment, which {}, is not there",
                        segment_name(*n),
                        if self.snapshot.is_some() {
                            "the newest snapshot needs"
                        } else {
                            "a dir without a snapshot starts with"
                        }
                    ),
                });
            }
        }
        for (i, n) in segments.iter().enumerate() {
            let path = self.path.join(segment_name(*n));
            let bytes = std::fs::read(&path).map_err(|source| OpenError::Io {
                path: path.clone(),
                what: "cannot read it",
                source,
            })?;
            let damaged = |what: String| OpenError::Damaged {
                path: path.clone(),
                what,
            };
            let last = i + 1 == segments.len();
            if bytes.len() < LOG_MAGIC.len() && LOG_MAGIC.starts_with(&bytes) {
                // Made by a process that stopped before its header was written: no records.
                continue;
            }
            let body = bytes
                .strip_prefix(LOG_MAGIC.as_slice())
                .ok_or_else(|| damaged("not a log of this format".into()))?;
            let mut failed = None;
            let result = frames(body, |at, payload| {
                if failed.is_none() {
                    match each(payload) {
                        Ok(()) => count += 1,
                        Err(e) => failed = Some((at, e)),
                    }
                }
            });
            if let Some((at, e)) = failed {
                return Err(damaged(format!(
                    "record at byte {}: {e}",
                    at + LOG_MAGIC.len()
                )));
            }
            if let Err(bad) = result {
                let offset = bad.at + LOG_MAGIC.len();
                if !(bad.torn && last) {
                    return Err(damaged(format!(
                        "damaged at byte {offset}: {}{}",
                        bad.why,
                        if last {
                            ""
                        } else {
                            " (not the last segment, so not a torn write)"
                        }
                    )));
                }
                tracing::warn!(
                    file = %path.display(),
                    at = offset,
                    "dropping a torn last record ({}): the write it belonged to was never \
                     acknowledged",
                    bad.why
                );
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_len(offset as u64).and_then(|()| f.sync_all()));
                f.map_err(|source| OpenError::Io {
                    path: path.clone(),
                    what: "cannot cut its torn last record off",
                    source,
                })?;
            }
        }
        Ok(count)
    }

    /// Begin serving: a new log segment for this process, and the sync thread.
    ///
    /// Fails when the segment cannot be made.
    pub fn start(self, options: JournalOptions) -> Result<Arc<Journal>, OpenError> {
        let n = self
            .segments
            .last()
            .copied()
            .max(self.snapshot)
            .map_or(1, |n| n + 1);
        let file = new_segment(&self.path, n).map_err(|source| OpenError::Io {
            path: self.path.join(segment_name(n)),
            what: "cannot make a log segment",
            source,
        })?;
        let snapshot_bytes = self
            .snapshot
            .and_then(|s| std::fs::metadata(self.path.join(snapshot_name(s))).ok())
            .map_or(0, |m| m.len());
        let journal = Arc::new(Journal {
            path: self.path,
            lock: self.lock,
            thread: Mutex::new(None),
            snapshot_thread: Mutex::new(None),
            sync: options.sync,
            sync_interval: options.sync_interval,
            snapshot_after_bytes: options.snapshot_after_bytes,
            failed: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            recoveries: AtomicU64::new(0),
            written: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                file: Arc::new(file),
                segment: n,
                file_len: LOG_MAGIC.len() as u64,
                buf: Vec::new(),
                unsynced: Vec::new(),
                unsynced_from: LOG_MAGIC.len() as u64,
                appended: 0,
                written: 0,
                synced: 0,
                failure: None,
                log_bytes: 0,
                snapshot_bytes,
                snapshotting: false,
                stop: false,
            }),
            wake: Condvar::new(),
            progress: watch::channel(Progress::default()).0,
        });
        let j = journal.clone();
        let thread = std::thread::Builder::new()
            .name("journal-sync".into())
            .spawn(move || j.sync_loop())
            .map_err(|source| OpenError::Io {
                path: journal.path.clone(),
                what: "cannot start the sync thread",
                source,
            })?;
        *journal.thread.lock().expect("thread lock") = Some(thread);
        Ok(journal)
    }
}

fn numbered(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?
        .strip_suffix(suffix)?
        .parse()
        .ok()
}

fn segment_name(n: u64) -> String {
    format!("log-{n:016}.aal")
}

fn snapshot_name(n: u64) -> String {
    format!("snapshot-{n:016}.aas")
}

fn parse_format(text: &str) -> Result<u64, String> {
    let mut format = None;
    let mut epoch = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("format ") {
            format = v.trim().parse::<u32>().ok();
        } else if let Some(v) = line.strip_prefix("epoch_us ") {
            epoch = v.trim().parse::<u64>().ok();
        }
    }
    match (format, epoch) {
        (Some(f), _) if f > FORMAT => Err(format!(
            "format {f} was written by a newer admission-authority (this one reads format \
             {FORMAT}); run the newer version, or move the dir away to start empty"
        )),
        (Some(_), Some(e)) => Ok(e),
        _ => Err("not a FORMAT file of an admission-authority data dir".into()),
    }
}

/// Write `name` in `dir` whole: a temporary file, fsync, rename, fsync of the dir.
fn write_synced(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}

fn new_segment(dir: &Path, n: u64) -> std::io::Result<File> {
    let mut f = OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(dir.join(segment_name(n)))?;
    f.write_all(LOG_MAGIC)?;
    f.sync_all()?;
    File::open(dir)?.sync_all()?;
    Ok(f)
}

/// How far the log is durable, for the commits that wait on it.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    /// Every record up to this sequence number is on disk.
    synced: u64,
    /// Failures so far: a commit waiting through one is answered with it.
    failures: u64,
}

struct Inner {
    file: Arc<File>,
    segment: u64,
    /// Bytes of the segment that hold whole written records.
    file_len: u64,
    /// Appended records not yet written.
    buf: Vec<u8>,
    /// Written records not yet known to be on disk (not kept under `os`), so that they can be
    /// written again after a failed fsync.
    unsynced: Vec<u8>,
    /// Where `unsynced` starts in the segment (`unsynced_from + unsynced.len() == file_len`
    /// under `always` and `interval`).
    unsynced_from: u64,
    /// Sequence numbers: the last appended, written, and synced record.
    appended: u64,
    written: u64,
    synced: u64,
    failure: Option<String>,
    /// Bytes of log written since the last snapshot began, and that snapshot's size.
    log_bytes: u64,
    snapshot_bytes: u64,
    snapshotting: bool,
    stop: bool,
}

/// The write-ahead log of a serving process.
pub struct Journal {
    path: PathBuf,
    /// Held until [`Journal::close`] (or the end of the process).
    lock: File,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    sync: SyncPolicy,
    sync_interval: Duration,
    snapshot_after_bytes: u64,
    snapshot_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// True while writes fail: new changes are refused before they are applied.
    failed: AtomicBool,
    errors: AtomicU64,
    /// Times the journal recovered from a failure.
    recoveries: AtomicU64,
    /// `Inner::written`, readable without the lock.
    written: AtomicU64,
    inner: Mutex<Inner>,
    /// Wakes the sync thread (a commit under `always`, a failure to retry, a stop).
    wake: Condvar,
    progress: watch::Sender<Progress>,
}

/// A record's place in the log, to commit once the locks that ordered it are released.
#[must_use = "an appended record must be committed before its answer leaves"]
pub struct Pending(u64);

impl Journal {
    /// The store error for a change refused because writes fail, or `None` when they work.
    pub fn refusal(&self) -> Option<StoreError> {
        if !self.failed.load(Ordering::Relaxed) {
            return None;
        }
        let why = self.inner.lock().expect("journal lock").failure.clone();
        Some(StoreError::WriteRefused {
            what: format!(
                "data dir {}: {}",
                self.path.display(),
                why.unwrap_or_else(|| "writes fail".into())
            ),
        })
    }

    /// Why the journal cannot write, while it cannot: for `/readyz`.
    pub fn health(&self) -> Result<(), String> {
        match self.refusal() {
            None => Ok(()),
            Some(e) => Err(e.to_string()),
        }
    }

    /// Writes and fsyncs that failed since the process started.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Times the journal took writes again after a failure (the store then gives live tickets
    /// a lease from then: nobody could renew while it failed).
    pub fn recoveries(&self) -> u64 {
        self.recoveries.load(Ordering::Acquire)
    }

    /// Append a record that `write` encodes (framed here). Call it under the lock that
    /// ordered the change, then [`Journal::commit`] after releasing it.
    pub fn append<E>(
        &self,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<Pending, E> {
        let mut inner = self.inner.lock().expect("journal lock");
        frame(&mut inner.buf, write)?;
        inner.appended += 1;
        Ok(Pending(inner.appended))
    }

    /// Return once the record is written (and, under `always`, on disk).
    ///
    /// Fails with [`StoreError::WriteFailed`] when writing it, or the fsync that should cover
    /// it, failed: the change stands in memory and is written once the disk takes it again.
    pub async fn commit(&self, pending: Pending) -> Result<(), StoreError> {
        let seq = pending.0;
        let failures_before = self.progress.borrow().failures;
        // Let the calls that are ready on this worker append theirs first: one write then
        // carries them all (at 64 in flight this halves the writes; alone, it costs a yield).
        if self.written.load(Ordering::Acquire) < seq {
            tokio::task::yield_now().await;
        }
        {
            let mut inner = self.inner.lock().expect("journal lock");
            if inner.written < seq && inner.failure.is_none() {
                self.write_buffered(&mut inner);
            }
            if inner.written < seq {
                return Err(self.write_failed(&inner));
            }
            if self.sync != SyncPolicy::Always || inner.synced >= seq {
                return Ok(());
            }
            self.wake.notify_one();
        }
        let mut rx = self.progress.subscribe();
        let p = *rx
            .wait_for(|p| p.synced >= seq || p.failures != failures_before)
            .await
            .expect("the journal outlives its commits");
        if p.synced >= seq {
            Ok(())
        } else {
            Err(self.write_failed(&self.inner.lock().expect("journal lock")))
        }
    }

    fn write_failed(&self, inner: &Inner) -> StoreError {
        StoreError::WriteFailed {
            what: format!(
                "data dir {}: {}",
                self.path.display(),
                inner.failure.as_deref().unwrap_or("the write failed")
            ),
        }
    }

    /// Write the buffer at the end of the segment; on failure keep it and fail the journal.
    fn write_buffered(&self, inner: &mut Inner) {
        if inner.buf.is_empty() {
            inner.written = inner.appended;
            self.written.store(inner.written, Ordering::Release);
            return;
        }
        match inner.file.write_all_at(&inner.buf, inner.file_len) {
            Ok(()) => {
                let n = inner.buf.len() as u64;
                inner.file_len += n;
                inner.log_bytes += n;
                if self.sync != SyncPolicy::Os {
                    let Inner { buf, unsynced, .. } = inner;
                    unsynced.extend_from_slice(buf);
                } else {
                    inner.synced = inner.appended;
                }
                inner.buf.clear();
                inner.written = inner.appended;
                self.written.store(inner.written, Ordering::Release);
            }
            Err(e) => self.fail(
                inner,
                format!("cannot write {}: {e}", segment_name(inner.segment)),
            ),
        }
    }

    fn fail(&self, inner: &mut Inner, why: String) {
        // What a failed write left half-written goes; the records stay in the buffer.
        let _ = inner.file.set_len(inner.file_len);
        if inner.failure.is_none() {
            tracing::error!(
                dir = %self.path.display(),
                "{why}: refusing changes (UNAVAILABLE, STORE_UNAVAILABLE) until the disk \
                 takes writes again"
            );
        }
        inner.failure = Some(why);
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.failed.store(true, Ordering::Relaxed);
        self.progress.send_modify(|p| p.failures += 1);
        self.wake.notify_one();
    }

    /// The sync thread: fsync what was written (per policy), retry after failures.
    fn sync_loop(&self) {
        let mut inner = self.inner.lock().expect("journal lock");
        loop {
            if inner.stop {
                return;
            }
            if inner.failure.is_some() {
                inner = self.recover(inner);
                continue;
            }
            let due = inner.written > inner.synced;
            match self.sync {
                SyncPolicy::Always if !due => {
                    inner = self.wake.wait(inner).expect("journal lock");
                    continue;
                }
                SyncPolicy::Always => {}
                SyncPolicy::Interval => {
                    inner = self
                        .wake
                        .wait_timeout(inner, self.sync_interval)
                        .expect("journal lock")
                        .0;
                    if inner.written <= inner.synced || inner.failure.is_some() {
                        continue;
                    }
                }
                SyncPolicy::Os => {
                    inner = self.wake.wait(inner).expect("journal lock");
                    continue;
                }
            }
            let (file, seq, upto) = (inner.file.clone(), inner.written, inner.file_len);
            drop(inner);
            let result = file.sync_data();
            inner = self.inner.lock().expect("journal lock");
            match result {
                // The segment may have been rotated meanwhile: its records were synced then.
                Ok(()) if Arc::ptr_eq(&file, &inner.file) => {
                    // Only what was written before the fsync began is on disk; a flush meanwhile
                    // may have synced (and dropped) some of it already.
                    let n = upto.saturating_sub(inner.unsynced_from) as usize;
                    let n = n.min(inner.unsynced.len());
                    inner.unsynced.drain(..n);
                    inner.unsynced_from += n as u64;
                    self.synced_to(&mut inner, seq);
                }
                Ok(()) => self.synced_to(&mut inner, seq),
                Err(e) => {
                    // After a failed fsync the kernel may have dropped the pages: write the
                    // unsynced records again once the disk works.
                    let Inner { buf, unsynced, .. } = &mut *inner;
                    let total = unsynced.len() as u64;
                    let mut again = std::mem::take(unsynced);
                    again.append(buf);
                    *buf = again;
                    inner.file_len -= total;
                    inner.unsynced_from = inner.file_len;
                    inner.written = inner.synced;
                    self.written.store(inner.written, Ordering::Release);
                    let why = format!("cannot fsync {}: {e}", segment_name(inner.segment));
                    self.fail(&mut inner, why);
                }
            }
        }
    }

    fn synced_to(&self, inner: &mut Inner, seq: u64) {
        if seq > inner.synced {
            inner.synced = seq;
            self.progress.send_modify(|p| p.synced = p.synced.max(seq));
        }
    }

    /// After a failure: every 100 ms, try to write what is buffered and fsync it.
    fn recover<'a>(
        &'a self,
        inner: std::sync::MutexGuard<'a, Inner>,
    ) -> std::sync::MutexGuard<'a, Inner> {
        let mut inner = self
            .wake
            .wait_timeout(inner, Duration::from_millis(100))
            .expect("journal lock")
            .0;
        if inner.stop {
            return inner;
        }
        let _ = inner.file.set_len(inner.file_len);
        let result = inner
            .file
            .write_all_at(&inner.buf, inner.file_len)
            .and_then(|()| inner.file.sync_data());
        match result {
            Ok(()) => {
                let n = inner.buf.len() as u64;
                inner.file_len += n;
                inner.log_bytes += n;
                inner.buf.clear();
                inner.unsynced.clear();
                inner.unsynced_from = inner.file_len;
                inner.written = inner.appended;
                self.written.store(inner.written, Ordering::Release);
                let seq = inner.appended;
                self.synced_to(&mut inner, seq);
                inner.failure = None;
                self.recoveries.fetch_add(1, Ordering::Release);
                self.failed.store(false, Ordering::Relaxed);
                tracing::info!(dir = %self.path.display(), "data dir takes writes again");
            }
            Err(e) => {
                let why = format!("cannot write {}: {e}", segment_name(inner.segment));
                if inner.failure.as_deref() != Some(why.as_str()) {
                    tracing::error!(dir = %self.path.display(), "{why}");
                    inner.failure = Some(why);
                }
            }
        }
        inner
    }

    /// True when the log since the last snapshot is long enough for a new one and none is
    /// being taken (the caller then takes it: [`Journal::rotate`], then
    /// [`Journal::write_snapshot`]).
    pub fn wants_snapshot(&self) -> bool {
        let inner = self.inner.lock().expect("journal lock");
        !inner.snapshotting
            && inner.failure.is_none()
            && inner.log_bytes >= self.snapshot_after_bytes.max(inner.snapshot_bytes)
    }

    /// Start a new segment for the records that follow; returns its number, which names the
    /// snapshot about to be taken. Everything before it is written and synced first.
    ///
    /// Fails (and changes nothing) when the old segment cannot be synced or the new one made.
    pub fn rotate(&self) -> Result<u64, String> {
        let mut inner = self.inner.lock().expect("journal lock");
        self.write_buffered(&mut inner);
        if let Some(f) = &inner.failure {
            return Err(f.clone());
        }
        inner.file.sync_data().map_err(|e| e.to_string())?;
        let n = inner.segment + 1;
        let file = new_segment(&self.path, n).map_err(|e| format!("{}: {e}", segment_name(n)))?;
        inner.unsynced.clear();
        inner.unsynced_from = inner.file_len;
        let seq = inner.written;
        self.synced_to(&mut inner, seq);
        inner.file = Arc::new(file);
        inner.segment = n;
        inner.file_len = LOG_MAGIC.len() as u64;
        inner.unsynced_from = inner.file_len;
        inner.log_bytes = 0;
        inner.snapshotting = true;
        Ok(n)
    }

    /// Write snapshot `n` (its pieces, each framed) on a thread of its own: see
    /// [`Journal::write_snapshot`].
    pub fn spawn_snapshot(self: &Arc<Self>, n: u64, pieces: Vec<u8>) {
        let j = self.clone();
        let spawned = std::thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || j.write_snapshot(n, &pieces));
        match spawned {
            Ok(t) => {
                if let Some(done) = self.snapshot_thread.lock().expect("thread lock").replace(t) {
                    let _ = done.join();
                }
            }
            Err(e) => {
                self.inner.lock().expect("journal lock").snapshotting = false;
                tracing::warn!("no snapshot written: cannot start its thread: {e}");
            }
        }
    }

    /// Write snapshot `n` (its pieces, each framed) whole, then drop the segments and
    /// snapshots it replaces. Runs on the caller's thread: call it off the async runtime.
    /// A failure is logged and leaves the older files, which still recover the same state.
    pub fn write_snapshot(&self, n: u64, pieces: &[u8]) {
        let mut bytes = Vec::with_capacity(SNAPSHOT_MAGIC.len() + pieces.len());
        bytes.extend_from_slice(SNAPSHOT_MAGIC);
        bytes.extend_from_slice(pieces);
        let result = write_synced(&self.path, &snapshot_name(n), &bytes);
        let mut inner = self.inner.lock().expect("journal lock");
        inner.snapshotting = false;
        match result {
            Ok(()) => {
                inner.snapshot_bytes = bytes.len() as u64;
                drop(inner);
                self.remove_older_than(n);
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(dir = %self.path.display(), "cannot write {}: {e}; keeping the log", snapshot_name(n));
            }
        }
    }

    fn remove_older_than(&self, n: u64) {
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let old = numbered(&name, "log-", ".aal")
                .or_else(|| numbered(&name, "snapshot-", ".aas"))
                .is_some_and(|m| m < n);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Write and fsync what is buffered, now (at start-up, before serving).
    ///
    /// Fails when the write or the fsync fails.
    pub fn flush(&self) -> Result<(), String> {
        let mut inner = self.inner.lock().expect("journal lock");
        self.write_buffered(&mut inner);
        if let Some(f) = &inner.failure {
            return Err(f.clone());
        }
        inner
            .file
            .sync_data()
            .map_err(|e| format!("cannot fsync {}: {e}", segment_name(inner.segment)))?;
        inner.unsynced.clear();
        inner.unsynced_from = inner.file_len;
        let seq = inner.written;
        self.synced_to(&mut inner, seq);
        Ok(())
    }

    /// Write and fsync what is buffered, stop the sync thread and give the dir's lock back
    /// (at shutdown). Nothing may be appended after it.
    pub fn close(&self) {
        {
            let mut inner = self.inner.lock().expect("journal lock");
            self.write_buffered(&mut inner);
            if inner.failure.is_none() {
                let _ = inner.file.sync_data();
            }
            inner.stop = true;
            self.wake.notify_all();
        }
        for thread in [&self.thread, &self.snapshot_thread] {
            if let Some(t) = thread.lock().expect("thread lock").take() {
                let _ = t.join();
            }
        }
        let _ = self.lock.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            frame::<()>(&mut out, |v| {
                v.extend_from_slice(p);
                Ok(())
            })
            .unwrap();
        }
        out
    }

    fn read(buf: &[u8]) -> (Vec<Vec<u8>>, Option<(usize, bool)>) {
        let mut got = Vec::new();
        let bad = frames(buf, |_, p| got.push(p.to_vec())).err();
        (got, bad.map(|b| (b.at, b.torn)))
    }

    #[test]
    fn frames_round_trip() {
        let buf = framed(&[b"one", b"", b"three"]);
        let (got, bad) = read(&buf);
        assert_eq!(got, vec![b"one".to_vec(), vec![], b"three".to_vec()]);
        assert!(bad.is_none());
    }

    #[test]
    fn a_record_cut_short_at_the_end_is_torn() {
        let buf = framed(&[b"one", b"two"]);
        for cut in 1..11 {
            let (got, bad) = read(&buf[..buf.len() - cut]);
            assert_eq!(got, vec![b"one".to_vec()], "cut {cut}");
            assert_eq!(bad, Some((11, true)), "cut {cut}");
        }
        let mut zeros = buf.clone();
        zeros.extend_from_slice(&[0; 100]);
        assert_eq!(read(&zeros).1, Some((buf.len(), true)));
    }

    #[test]
    fn damage_before_the_end_is_not_torn() {
        let mut buf = framed(&[b"one", b"two", b"three"]);
        buf[9] ^= 0xff; // inside "one"'s payload
        let (got, bad) = read(&buf);
        assert!(got.is_empty());
        assert_eq!(bad, Some((0, false)));
        let mut last = framed(&[b"one", b"two"]);
        let n = last.len();
        last[n - 1] ^= 0xff; // the last record's payload: a torn write of it
        assert_eq!(read(&last).1, Some((11, true)));
    }

    #[test]
    fn format_files_of_newer_authorities_are_refused() {
        assert_eq!(parse_format("format 1\nepoch_us 42\n"), Ok(42));
        assert!(
            parse_format("format 2\nepoch_us 42\n")
                .unwrap_err()
                .contains("newer")
        );
        assert!(parse_format("hello").is_err());
    }
}
