//! The journal's sync thread: it turns written records into durable ones per the sync policy
//! (one fsync for every commit waiting under `always`, one at least every `sync_interval` under
//! `interval`, none under `os`), and after a failed write or fsync retries until the disk takes
//! the records again. With the send gate on it also writes, every `sync_interval`, the records
//! no answer has carried out yet (of calls whose client left, and of housekeeping).

use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use super::dir::segment_name;
use super::{Inner, Journal, SyncPolicy};

impl Journal {
    /// The sync thread: fsync what was written (per policy), retry after failures.
    pub(super) fn sync_loop(&self) {
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
                    inner = self.tick(inner);
                    if inner.written <= inner.synced || inner.failure.is_some() {
                        continue;
                    }
                }
                SyncPolicy::Os if self.gated.load(Ordering::Acquire) => {
                    inner = self.tick(inner);
                    continue;
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
                    // unsynced records again once the disk works (after the write under
                    // way, if any, so that its records go back in order too).
                    inner = self.idle(inner);
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

    /// Wait for `sync_interval` (or a wake-up); then, with the send gate on, write what is
    /// buffered (after a write under way, and outside the lock, as a commit does, so that
    /// appends go on meanwhile), so that no record waits longer than that for an answer to
    /// carry it out.
    fn tick<'a>(&'a self, inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        let (inner, _) = self
            .wake
            .wait_timeout(inner, self.sync_interval)
            .expect("journal lock");
        if !self.gated.load(Ordering::Acquire)
            || inner.stop
            || inner.failure.is_some()
            || inner.buf.is_empty()
        {
            return inner;
        }
        let inner = self.idle(inner);
        if inner.failure.is_some() {
            return inner;
        }
        self.write_out(inner)
    }

    pub(super) fn synced_to(&self, inner: &mut Inner, seq: u64) {
        if seq > inner.synced {
            inner.synced = seq;
            self.progress.send_modify(|p| p.synced = p.synced.max(seq));
        }
    }

    /// After a failure: every 100 ms, try to write what is buffered and fsync it.
    fn recover<'a>(&'a self, inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        let inner = self
            .wake
            .wait_timeout(inner, Duration::from_millis(100))
            .expect("journal lock")
            .0;
        if inner.stop {
            return inner;
        }
        let mut inner = self.idle(inner);
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
}
