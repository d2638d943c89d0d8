//! The send gate: under `interval` and `os`, a served change's record is written where its
//! answer leaves the process, not in the call.
//!
//! Once the server turns it on ([`Journal::gate_sends`]), a commit under those policies
//! returns at once, and every connection the server serves holds a [`SendGate`]: before any of
//! its bytes go to the kernel, everything appended to the journal so far is written (one
//! `pwrite` for all the records appended meanwhile, by every connection). An answer is made
//! after its change's record was appended, so it still leaves only after that record reached
//! the kernel: a process crash loses nothing acknowledged, as before. What changes is how many
//! writes it takes: the answers a connection sends together (see `net::Outbound`) need one
//! write of the log before them, where each call used to make its own.
//!
//! When the disk fails, the records caught in the failure stay buffered and their answers
//! must not leave: a connection that may carry one (one accepted before the failure) is closed
//! instead, so its callers see UNAVAILABLE with the outcome unknown, as after a restart.
//! Connections accepted after the failure carry on: their changes are refused before they are
//! applied (STORE_UNAVAILABLE), and their reads and probes answer.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Journal, SyncPolicy};

/// The store-wide switch: hands a [`SendGate`] to each connection accepted.
#[derive(Clone)]
pub struct SendGates(Arc<Journal>);

/// A connection's gate (see the module's documentation).
pub struct SendGate {
    journal: Arc<Journal>,
    /// Records appended before the connection was accepted: none of its calls made them.
    floor: u64,
}

impl Journal {
    /// Turn the send gate on: from now on a commit under `interval` or `os` does not write its
    /// record, and the caller must pass every byte it sends through a [`SendGate`]. `None`
    /// under `always`, where a commit waits for its fsync anyway.
    pub fn gate_sends(self: &Arc<Self>) -> Option<SendGates> {
        if self.sync == SyncPolicy::Always {
            return None;
        }
        self.gated.store(true, Ordering::Release);
        // Under `os` the sync thread may already sleep until a wake that never comes (it writes
        // nothing by itself without the gate): wake it, so that it starts its rounds.
        let _guard = self.inner.lock().expect("journal lock");
        self.wake.notify_all();
        Some(SendGates(self.clone()))
    }

    /// Write every record appended so far, for a connection accepted when `floor` records
    /// were; waits for a write under way.
    ///
    /// Fails when the journal fails and that connection may carry an answer to a record that
    /// is not written (it must then be closed).
    fn write_for_send(&self, floor: u64) -> io::Result<()> {
        let mut inner = self.idle(self.inner.lock().expect("journal lock"));
        if inner.failure.is_none() && inner.written < inner.appended {
            inner = self.write_out(inner);
        }
        match &inner.failure {
            Some(why) if floor < inner.failure_mark => Err(io::Error::other(format!(
                "data dir {}: {why}: closing the connection, whose answers may not be written",
                self.path.display()
            ))),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Debug for SendGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendGate")
            .field("floor", &self.floor)
            .finish()
    }
}

impl SendGates {
    /// The gate of a connection accepted now.
    pub fn connection(&self) -> SendGate {
        SendGate {
            journal: self.0.clone(),
            floor: self.0.appended.load(Ordering::Acquire),
        }
    }
}

impl SendGate {
    /// True while a record appended is not written yet (bytes must wait for [`Self::ready`]).
    pub fn has_unwritten(&self) -> bool {
        let j = &self.journal;
        j.written.load(Ordering::Acquire) < j.appended.load(Ordering::Acquire)
    }

    /// Records appended to the log so far.
    pub fn appended(&self) -> u64 {
        self.journal.appended.load(Ordering::Acquire)
    }

    /// Make sure the connection's next bytes answer nothing whose record is not written: at
    /// once when every record appended is written, else after writing them.
    ///
    /// Fails when they cannot be written and the connection may carry an answer to one.
    pub fn ready(&self) -> io::Result<()> {
        if !self.has_unwritten() {
            return Ok(());
        }
        self.journal.write_for_send(self.floor)
    }
}
