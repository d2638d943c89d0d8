//! The data dir of the durable embedded store: a write-ahead log of the core's operations, and
//! snapshots that bound it. This module knows bytes, files and fsync; what a record means is
//! [`super::memory`]'s business.
//!
//! Layout of a data dir:
//! * `LOCK`: held (`flock`) by the one process that serves from the dir;
//! * `FORMAT`: the format number and the dir's epoch (the wall clock, in µs, at store time 0);
//!   each log segment and snapshot also names its own format in its first 8 bytes, so a dir
//!   caught in the middle of its rewrite from an older format reads file by file;
//! * `log-<n>.aal`: log segments, numbered upwards; every process start opens a new one;
//! * `snapshot-<n>.aas`: the state as it was when segment `n` began (records of segments `>= n`
//!   that the snapshot already holds are recognised by their sequence numbers and skipped).
//!
//! Every record and snapshot piece is framed as `[len: u32 LE][crc32: u32 LE][payload]`.
//! Appends go to a buffer under one mutex; the first caller to commit writes everything
//! buffered (group write), outside the mutex, so that others append meanwhile and the next
//! write carries all of theirs; a caller whose record is in a write under way waits for it.
//! So an answer leaves only after its record reached the kernel: a process crash loses nothing
//! acknowledged under any sync policy. A server turns on the send gate ([`gate`]) so that
//! under `interval` and `os` that write happens where the answers leave the process instead,
//! one for the answers sent together. The sync thread turns
//! written bytes into durable ones: under `always` each commit waits for an fsync that covers
//! it (concurrent commits share one: group commit); under `interval` at least every
//! `sync_interval`; under `os` when the kernel decides.
//!
//! A failed write or fsync (a full disk) puts the journal in a failed state: new changes are
//! refused before they are applied, the records caught in the failure stay buffered (their
//! callers were told the outcome is unknown), and the sync thread retries until the disk takes
//! them again.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::StoreError;

mod dir;
mod gate;
mod sync;

pub use dir::{DataDir, OpenError, Snapshot, frame, write_format};
use dir::{new_segment, numbered, segment_name, snapshot_name, write_synced};
pub use gate::{SendGate, SendGates};

/// The data dir's format, the one this build writes; a dir of a larger one was written by a
/// newer authority. What each format's records and pieces mean is the store's
/// (`store::memory::format`).
pub const FORMAT: u32 = 5;
/// The oldest format this build reads (a dir of it is rewritten in [`FORMAT`] when opened).
pub const OLDEST_FORMAT: u32 = 1;
/// A log segment's first bytes: this prefix, then its format's number as one byte.
const LOG_PREFIX: &[u8; 7] = b"AAlog\0\0";
/// A snapshot's first bytes: this prefix, then its format's number as one byte.
const SNAPSHOT_PREFIX: &[u8; 7] = b"AAsnap\0";
const LOG_MAGIC: &[u8; 8] = &magic(LOG_PREFIX, FORMAT);
const SNAPSHOT_MAGIC: &[u8; 8] = &magic(SNAPSHOT_PREFIX, FORMAT);

const fn magic(prefix: &[u8; 7], format: u32) -> [u8; 8] {
    let mut m = [0u8; 8];
    let mut i = 0;
    while i < 7 {
        m[i] = prefix[i];
        i += 1;
    }
    m[7] = format as u8;
    m
}
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
    /// A write of records is under way outside the lock (it took them out of `buf`): the
    /// segment's length and the sequence numbers move when it is done.
    writing: bool,
    /// Callers outside the async runtime waiting for that write to be done (see `idle`).
    idle_waiters: usize,
    /// A commit waits for that write to be done (see `commit`).
    commit_waiting: bool,
    /// The buffer of the last write, kept for the next one's appends.
    spare: Vec<u8>,
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
    /// The records appended when the last failure began (see [`gate`]).
    failure_mark: u64,
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
    /// The last snapshot's buffer, kept for the next one (see [`Journal::snapshot_buffer`]).
    snapshot_buf: Mutex<Vec<u8>>,
    /// True while writes fail: new changes are refused before they are applied.
    failed: AtomicBool,
    errors: AtomicU64,
    /// Times the journal recovered from a failure.
    recoveries: AtomicU64,
    /// `Inner::written` and `Inner::appended`, readable without the lock.
    written: AtomicU64,
    appended: AtomicU64,
    /// The send gate is on: commits under `interval` and `os` leave the writing to it.
    gated: AtomicBool,
    inner: Mutex<Inner>,
    /// Wakes the sync thread (a commit under `always`, a failure to retry, a stop).
    wake: Condvar,
    /// Wakes commits waiting for a write under way, and the others (`Inner::idle_waiters`).
    write_done: tokio::sync::Notify,
    idle: Condvar,
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
        self.appended.store(inner.appended, Ordering::Release);
        Ok(Pending(inner.appended))
    }

    /// Return once the record is written (and, under `always`, on disk); with the send gate
    /// on, under `interval` and `os`, at once: the gate writes it before the answer leaves.
    ///
    /// Fails with [`StoreError::WriteFailed`] when writing it, or the fsync that should cover
    /// it, failed (with the gate on: when the journal failed before it was written): the
    /// change stands in memory and is written once the disk takes it again.
    pub async fn commit(&self, pending: Pending) -> Result<(), StoreError> {
        let seq = pending.0;
        if self.gated.load(Ordering::Acquire) {
            if self.failed.load(Ordering::Acquire) {
                return Err(self.write_failed(&self.inner.lock().expect("journal lock")));
            }
            return Ok(());
        }
        // Only `always` waits past the write (for the fsync), and fails if one fails meanwhile.
        let failures_before = if self.sync == SyncPolicy::Always {
            self.progress.borrow().failures
        } else {
            0
        };
        // Under `always`, let the calls that are ready on this worker append theirs first: one
        // write and one fsync then carry them all. Under the others a write costs less than
        // the yield (polling the call again): write at once, and the calls that append while
        // that write is under way go in the next.
        if self.sync == SyncPolicy::Always && self.written.load(Ordering::Acquire) < seq {
            tokio::task::yield_now().await;
        }
        loop {
            let done = self.write_done.notified();
            let mut done = std::pin::pin!(done);
            {
                let mut inner = self.inner.lock().expect("journal lock");
                if inner.written < seq && inner.failure.is_none() && !inner.writing {
                    inner = self.write_out(inner);
                }
                if inner.written >= seq {
                    if self.sync != SyncPolicy::Always || inner.synced >= seq {
                        return Ok(());
                    }
                    self.wake.notify_one();
                    break;
                }
                if inner.failure.is_some() {
                    return Err(self.write_failed(&inner));
                }
                // Its record is in the write under way: wait for it (registered before the
                // lock goes, so that its end cannot be missed).
                done.as_mut().enable();
                inner.commit_waiting = true;
            }
            done.await;
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

    /// Write the buffer at the end of the segment, outside the lock (appends go on meanwhile);
    /// see [`Self::wrote`] for what follows.
    fn write_out<'a>(
        &'a self,
        mut inner: std::sync::MutexGuard<'a, Inner>,
    ) -> std::sync::MutexGuard<'a, Inner> {
        let Some((bytes, at, upto)) = self.take_buffered(&mut inner) else {
            return inner;
        };
        inner.writing = true;
        let file = inner.file.clone();
        drop(inner);
        let result = file.write_all_at(&bytes, at);
        let mut inner = self.inner.lock().expect("journal lock");
        inner.writing = false;
        self.wrote(&mut inner, bytes, upto, result);
        if inner.idle_waiters > 0 {
            self.idle.notify_all();
        }
        if std::mem::take(&mut inner.commit_waiting) {
            self.write_done.notify_waiters();
        }
        inner
    }

    /// Wait until no write is under way (before the segment is synced, cut, left or rewound
    /// outside [`Self::write_out`]).
    fn idle<'a>(
        &'a self,
        mut inner: std::sync::MutexGuard<'a, Inner>,
    ) -> std::sync::MutexGuard<'a, Inner> {
        while inner.writing {
            inner.idle_waiters += 1;
            inner = self.idle.wait(inner).expect("journal lock");
            inner.idle_waiters -= 1;
        }
        inner
    }

    /// Write the buffer at the end of the segment under the lock, once no write is under way
    /// (see [`Self::wrote`]).
    fn write_buffered(&self, inner: &mut Inner) {
        if let Some((bytes, at, upto)) = self.take_buffered(inner) {
            let result = inner.file.write_all_at(&bytes, at);
            self.wrote(inner, bytes, upto, result);
        }
    }

    /// The buffered records to write, where they go and the last one's sequence number; `None`
    /// (and everything appended counted as written) when there are none.
    fn take_buffered(&self, inner: &mut Inner) -> Option<(Vec<u8>, u64, u64)> {
        if inner.buf.is_empty() {
            inner.written = inner.appended;
            self.written.store(inner.written, Ordering::Release);
            return None;
        }
        let mut bytes = std::mem::take(&mut inner.spare);
        std::mem::swap(&mut bytes, &mut inner.buf);
        Some((bytes, inner.file_len, inner.appended))
    }

    /// After writing `bytes` (records up to `upto`): count them written, or on failure put
    /// them back in front of the buffer and fail the journal.
    fn wrote(&self, inner: &mut Inner, mut bytes: Vec<u8>, upto: u64, result: std::io::Result<()>) {
        match result {
            Ok(()) => {
                let n = bytes.len() as u64;
                inner.file_len += n;
                inner.log_bytes += n;
                if self.sync != SyncPolicy::Os {
                    inner.unsynced.extend_from_slice(&bytes);
                } else {
                    inner.synced = inner.synced.max(upto);
                }
                inner.written = upto;
                self.written.store(upto, Ordering::Release);
                bytes.clear();
                inner.spare = bytes;
            }
            Err(e) => {
                bytes.extend_from_slice(&inner.buf);
                inner.buf = bytes;
                let why = format!("cannot write {}: {e}", segment_name(inner.segment));
                self.fail(inner, why);
            }
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
        inner.failure_mark = inner.appended;
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.failed.store(true, Ordering::Release);
        self.progress.send_modify(|p| p.failures += 1);
        self.wake.notify_one();
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
        // The new segment is made (and it and the dir synced) before the lock is taken, so
        // that changes wait only for the old segment's fsync.
        let n = self.inner.lock().expect("journal lock").segment + 1;
        let file = new_segment(&self.path, n).map_err(|e| format!("{}: {e}", segment_name(n)))?;
        let mut inner = self.idle(self.inner.lock().expect("journal lock"));
        if inner.segment + 1 != n {
            // Only a rotation moves the segment on, and it would have had to make this same
            // file first: this does not happen, and the journal must not go back if it did.
            return Err(format!("{} was taken meanwhile", segment_name(n)));
        }
        self.write_buffered(&mut inner);
        let ready = match &inner.failure {
            Some(f) => Err(f.clone()),
            None => inner.file.sync_data().map_err(|e| e.to_string()),
        };
        if let Err(e) = ready {
            // Unused and without records (a restart would find it empty), so it can go.
            let _ = std::fs::remove_file(self.path.join(segment_name(n)));
            return Err(e);
        }
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

    /// An empty buffer for the next snapshot's pieces, with room for the last snapshot and a
    /// quarter more. It is the last snapshot's own buffer, kept with its memory: one grown
    /// anew each time, in memory fresh from the kernel, spent most of its encoding time in
    /// page faults and in copies as it grew, while the hosts it encoded waited.
    pub fn snapshot_buffer(&self) -> Vec<u8> {
        let mut buf = std::mem::take(&mut *self.snapshot_buf.lock().expect("buffer lock"));
        buf.clear();
        let last = self.inner.lock().expect("journal lock").snapshot_bytes as usize;
        let had = buf.capacity();
        buf.reserve(last + last / 4);
        if buf.capacity() != had {
            // Touch new memory now, before any host is held: its page faults would otherwise
            // land in the encoding.
            buf.resize(buf.capacity(), 0);
            buf.clear();
        }
        buf
    }

    /// Write snapshot `n` (its pieces, each framed) on a thread of its own: see
    /// [`Journal::write_snapshot`].
    pub fn spawn_snapshot(self: &Arc<Self>, n: u64, pieces: Vec<u8>) {
        let j = self.clone();
        let spawned = std::thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || {
                // A failure is logged (and the older files kept) by write_snapshot itself.
                let _ = j.write_snapshot(n, pieces);
            });
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
    /// snapshots it replaces, and keep the buffer for the next snapshot (unless it is more
    /// than twice what this one needed: state that shrank lets its memory go). Runs on the
    /// caller's thread: call it off the async runtime. A failure is logged and leaves the
    /// older files, which still recover the same state.
    ///
    /// Fails (after logging) when the snapshot cannot be written.
    pub fn write_snapshot(&self, n: u64, mut pieces: Vec<u8>) -> Result<(), String> {
        let result = write_synced(&self.path, &snapshot_name(n), &[SNAPSHOT_MAGIC, &pieces]);
        let len = pieces.len();
        if pieces.capacity() <= 2 * (len + len / 4) {
            pieces.clear();
            *self.snapshot_buf.lock().expect("buffer lock") = pieces;
        }
        let mut inner = self.inner.lock().expect("journal lock");
        inner.snapshotting = false;
        match result {
            Ok(()) => {
                inner.snapshot_bytes = (SNAPSHOT_MAGIC.len() + len) as u64;
                drop(inner);
                self.remove_older_than(n);
                Ok(())
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(dir = %self.path.display(), "cannot write {}: {e}; keeping the log", snapshot_name(n));
                Err(format!("{}: {e}", snapshot_name(n)))
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
        let mut inner = self.idle(self.inner.lock().expect("journal lock"));
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
            let mut inner = self.idle(self.inner.lock().expect("journal lock"));
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

impl DataDir {
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
            lock: self.lock.expect("a dir opened to serve holds its lock"),
            thread: Mutex::new(None),
            snapshot_thread: Mutex::new(None),
            snapshot_buf: Mutex::new(Vec::new()),
            sync: options.sync,
            sync_interval: options.sync_interval,
            snapshot_after_bytes: options.snapshot_after_bytes,
            failed: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            recoveries: AtomicU64::new(0),
            written: AtomicU64::new(0),
            appended: AtomicU64::new(0),
            gated: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                file: Arc::new(file),
                segment: n,
                file_len: LOG_MAGIC.len() as u64,
                buf: Vec::new(),
                writing: false,
                idle_waiters: 0,
                commit_waiting: false,
                spare: Vec::new(),
                unsynced: Vec::new(),
                unsynced_from: LOG_MAGIC.len() as u64,
                appended: 0,
                written: 0,
                synced: 0,
                failure: None,
                failure_mark: 0,
                log_bytes: 0,
                snapshot_bytes,
                snapshotting: false,
                stop: false,
            }),
            wake: Condvar::new(),
            write_done: tokio::sync::Notify::new(),
            idle: Condvar::new(),
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

#[cfg(test)]
mod tests;
