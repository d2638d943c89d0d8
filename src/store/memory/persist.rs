//! The embedded store on a data dir: opening it (the newest snapshot, then the log replayed
//! through the same operations the store applies), what a restart changes, and the snapshots
//! that keep the dir and the start-up bounded. The bytes on disk are [`crate::store::journal`]'s.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Stopwatch;

use super::format::{self, Piece};
use super::ops::{AuthOp, HostCore, HostOp, Record};
use super::{AuthPart, Host, MemoryStore, RateLimitPart};
use crate::auth::AuthTable;
use crate::clock::Clock;
use crate::ledger::Ledger;
use crate::ratelimit::CounterTable;
use crate::scheduler::{HostState, Millis};
use crate::store::Policy;
use crate::store::journal::{self, DataDir, JournalOptions, OpenError, frame};

/// Where and how the embedded store keeps its state (`store.embedded`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    pub dir: PathBuf,
    pub journal: JournalOptions,
}

/// What opening a data dir found, for the start-up log line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// The dir held no state.
    pub fresh: bool,
    pub hosts: usize,
    /// Queued, admitted and parked tickets brought back.
    pub live_tickets: u64,
    /// Log records replayed after the snapshot.
    pub records: u64,
    /// The dir held files of an older format, and was rewritten in this build's.
    pub rewritten: bool,
    pub took: Duration,
}

/// The store's clock on a data dir: milliseconds since the dir was made, never behind what
/// the state has already seen. Time runs on while the process is down (leases, windows and
/// lockouts see the real downtime), and a wall clock set back cannot move the store back.
struct DirClock {
    inner: Arc<dyn Clock>,
    offset_ms: u64,
    epoch_us: u64,
}

impl Clock for DirClock {
    fn now_ms(&self) -> Millis {
        self.inner.now_ms() + self.offset_ms
    }

    fn origin_epoch_us(&self) -> u64 {
        self.epoch_us
    }
}

fn put(out: &mut Vec<u8>, piece: &Piece) {
    frame(out, |v| format::encode_piece(piece, v)).expect("pieces encode into a Vec");
}

/// What [`MemoryStore::load`] read.
pub(super) struct Loaded {
    /// The state, in memory, under the policy it was given.
    pub(super) store: MemoryStore,
    /// The latest store time any record or snapshot of the dir was written at.
    pub(super) seen_now: Millis,
    /// Some file was of a format older than this build's.
    pub(super) older: bool,
    /// Log records replayed after the snapshot.
    pub(super) records: u64,
}

impl MemoryStore {
    /// A durable store on the data dir of `options`: state from its snapshot and log, every
    /// change logged from now on. Live tickets get at least one lease from now (see
    /// [`crate::scheduler::HostState::restored`]); hosts on the file's limits take this
    /// configuration's.
    ///
    /// Fails when the dir cannot be used: another live process holds it, it is of a newer
    /// format, a snapshot or a record before the log's end is damaged, or a file cannot be
    /// read or written. Each error names the file and the problem.
    pub fn open(
        options: &OpenOptions,
        policy: Policy,
        clock: Arc<dyn Clock>,
    ) -> Result<(MemoryStore, Restored), OpenError> {
        let started = Stopwatch::start();
        let dir = DataDir::open(&options.dir, clock.origin_epoch_us())?;
        let epoch_us = dir.epoch_us;
        let Loaded {
            mut store,
            seen_now,
            older,
            records,
            ..
        } = MemoryStore::load(&dir, &options.dir, policy, clock.clone())?;

        // Store time goes on from the dir's epoch, and never back behind what it has seen.
        let wall = clock.origin_epoch_us().saturating_sub(epoch_us) / 1000;
        let offset_ms = wall.max(seen_now.saturating_sub(clock.now_ms()));
        store.clock = Arc::new(DirClock {
            inner: clock,
            offset_ms,
            epoch_us,
        });
        let fresh = dir.fresh;
        let journal = dir.start(options.journal)?;
        store.journal = Some(journal.clone());

        let _ = store.log_borrowed(&Record::Policy(Cow::Borrowed(&store.policy.resources)));
        let max_keys = store.policy.auth.local_max_keys;
        if store.auth.lock().expect("auth lock").table.max_keys() != max_keys.max(1) {
            let _ = store.apply_auth(AuthOp::MaxKeys(max_keys));
        }
        let mut restored = Restored {
            fresh,
            records,
            ..Restored::default()
        };
        store.follow_file_limits();
        store.restarted();
        for (_, host) in store.all_hosts() {
            let inner = host.inner.lock().expect("host lock");
            let s = inner.core.state.stats(&inner.core.limits.limits, 0);
            restored.live_tickets += u64::from(s.in_flight + s.queued + s.parked);
            restored.hosts += 1;
        }
        journal.flush().map_err(|what| OpenError::Damaged {
            path: options.dir.clone(),
            what,
        })?;
        if older {
            store
                .rewrite(&options.dir, epoch_us)
                .map_err(|what| OpenError::Damaged {
                    path: options.dir.clone(),
                    what: format!("cannot rewrite it in format {}: {what}", journal::FORMAT),
                })?;
            restored.rewritten = true;
        }
        restored.took = started.elapsed();
        Ok((store, restored))
    }

    /// Read a dir's newest snapshot and replay its log into a store in memory (no journal):
    /// the state as the dir holds it, before a restart changes anything.
    ///
    /// Fails when a snapshot piece or a record cannot be read (each error names the file).
    pub(super) fn load(
        dir: &DataDir,
        path: &std::path::Path,
        policy: Policy,
        clock: Arc<dyn Clock>,
    ) -> Result<Loaded, OpenError> {
        let epoch_us = dir.epoch_us;
        let mut store = MemoryStore::new(policy, clock);
        let mut seen_now: Millis = 0;
        let mut ledger_policy = store.policy.resources.clone();
        let grant_floor = |now: Millis| epoch_us + now * 1000;

        // Files of an older format than this build writes: rewritten below, once read.
        let mut older = dir.format < journal::FORMAT;
        if let Some(journal::Snapshot {
            format: version,
            pieces,
        }) = dir.snapshot()?
        {
            older |= version < journal::FORMAT;
            let damaged = |what: String| OpenError::Damaged {
                path: path.to_path_buf(),
                what: format!(
                    "the newest snapshot holds a piece this authority cannot read: {what}"
                ),
            };
            for bytes in pieces {
                match format::decode_piece(version, &bytes).map_err(damaged)? {
                    Piece::Host {
                        id,
                        seq,
                        limits,
                        image,
                    } => {
                        let state = HostState::from_image(*image)
                            .map_err(|e| damaged(format!("host {id:?}: {e}")))?;
                        let host = Host::new(limits.clone(), 0);
                        host.inner.lock().expect("host lock").core =
                            HostCore { state, limits, seq };
                        store
                            .hosts
                            .get_mut()
                            .expect("hosts lock")
                            .insert(id, Arc::new(host));
                    }
                    Piece::Ledger { id, seq, image } => {
                        let ledger = Ledger::from_image(image)
                            .map_err(|e| damaged(format!("ledger of {id:?}: {e}")))?;
                        let hosts = store.hosts.get_mut().expect("hosts lock");
                        let host = hosts
                            .get(&id)
                            .ok_or_else(|| damaged(format!("a ledger of unknown host {id:?}")))?;
                        let mut part = host.ledger.lock().expect("ledger lock");
                        part.ledger = ledger;
                        part.seq = seq;
                    }
                    Piece::Auth { seq, image } => {
                        let table = AuthTable::from_image(image)
                            .map_err(|e| damaged(format!("auth buckets: {e}")))?;
                        *store.auth.get_mut().expect("auth lock") = AuthPart { table, seq };
                    }
                    Piece::End { now, policy } => {
                        seen_now = seen_now.max(now);
                        ledger_policy = policy;
                    }
                    Piece::RateLimits { seq, image } => {
                        *store.rate_limits.get_mut().expect("rate limit lock") = RateLimitPart {
                            table: CounterTable::from_image(image),
                            seq,
                        };
                    }
                }
            }
        }

        let records = dir.replay(|version, bytes| {
            older |= version < journal::FORMAT;
            let record = format::decode_record(version, bytes)?;
            match record {
                Record::Policy(p) => ledger_policy = p.into_owned(),
                Record::Host { host, seq, now, op } => {
                    seen_now = seen_now.max(now);
                    let hosts = store.hosts.get_mut().expect("hosts lock");
                    let op = op.into_owned();
                    if let HostOp::Create(limits) = &op {
                        hosts
                            .entry(host.into_owned())
                            .or_insert_with(|| Arc::new(Host::new(limits.clone(), 0)));
                        return Ok(());
                    }
                    let h = hosts
                        .get(host.as_ref())
                        .ok_or_else(|| format!("a change of host {host:?}, never created"))?;
                    let mut inner = h.inner.lock().expect("host lock");
                    if seq > inner.core.seq {
                        let _ = op.apply(&mut inner.core, now, grant_floor(now));
                        inner.core.seq = seq;
                        inner.core.state.drain_changes(|_, _| {});
                    }
                }
                Record::Ledger { host, seq, now, op } => {
                    seen_now = seen_now.max(now);
                    let hosts = store.hosts.get_mut().expect("hosts lock");
                    let h = hosts.get(host.as_ref()).ok_or_else(|| {
                        format!("a ledger change of host {host:?}, never created")
                    })?;
                    let mut part = h.ledger.lock().expect("ledger lock");
                    if seq > part.seq {
                        let _ = op.into_owned().apply(&mut part.ledger, &ledger_policy, now);
                        part.seq = seq;
                    }
                }
                Record::Auth { seq, now, op } => {
                    seen_now = seen_now.max(now);
                    let part = store.auth.get_mut().expect("auth lock");
                    if seq > part.seq {
                        let _ = op.into_owned().apply(&mut part.table, now);
                        part.seq = seq;
                    }
                }
                Record::RateLimit { seq, now, op } => {
                    seen_now = seen_now.max(now);
                    let part = store.rate_limits.get_mut().expect("rate limit lock");
                    if seq > part.seq {
                        let _ = op.into_owned().apply(&mut part.table);
                        part.seq = seq;
                    }
                }
            }
            Ok(())
        })?;

        Ok(Loaded {
            store,
            seen_now,
            older,
            records,
        })
    }

    /// What a restart does to the state: every live ticket's lease runs at least one
    /// `lease_ttl` from now (see [`crate::scheduler::HostState::restored`]). [`Self::open`]
    /// does it; public so that a test can keep an in-memory twin in step with a restarted
    /// store.
    pub fn restarted(&self) {
        for (host_id, host) in self.all_hosts() {
            let _ = self.apply_host(&host_id, &host, HostOp::Restarted);
        }
    }

    /// Take a snapshot when the log since the last one is long enough: a new segment starts,
    /// every part is written under its own lock (a host is held only while its own state is
    /// encoded), and a thread writes the file and removes what it replaces.
    pub(super) fn snapshot_if_due(&self) {
        let Some(journal) = &self.journal else {
            return;
        };
        if !journal.wants_snapshot() {
            return;
        }
        let n = match journal.rotate() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("no snapshot taken: {e}");
                return;
            }
        };
        let (out, longest, started) = self.encode_snapshot(journal.snapshot_buffer());
        tracing::debug!(
            snapshot = n,
            bytes = out.len(),
            longest_host_hold_us = longest.as_micros() as u64,
            encoding_us = started.elapsed().as_micros() as u64,
            "snapshot encoded; a thread writes it"
        );
        journal.spawn_snapshot(n, out);
    }

    /// Every part's piece, framed, into `out`: a host is held only while its image is taken
    /// (its encoding happens after). Returns the bytes, the longest a host was held, and when
    /// the encoding started.
    fn encode_snapshot(&self, mut out: Vec<u8>) -> (Vec<u8>, Duration, Stopwatch) {
        let started = Stopwatch::start();
        let mut longest = Duration::ZERO;
        for (id, host) in self.all_hosts() {
            let piece = {
                let inner = host.inner.lock().expect("host lock");
                let held = Stopwatch::start();
                let image = inner.core.state.image();
                longest = longest.max(held.elapsed());
                Piece::Host {
                    id: id.clone(),
                    seq: inner.core.seq,
                    limits: inner.core.limits.clone(),
                    image: Box::new(image),
                }
            };
            put(&mut out, &piece);
            let piece = {
                let part = host.ledger.lock().expect("ledger lock");
                Piece::Ledger {
                    id,
                    seq: part.seq,
                    image: part.ledger.image(),
                }
            };
            put(&mut out, &piece);
        }
        let piece = {
            let part = self.auth.lock().expect("auth lock");
            Piece::Auth {
                seq: part.seq,
                image: part.table.image(),
            }
        };
        put(&mut out, &piece);
        let piece = {
            let part = self.rate_limits.lock().expect("rate limit lock");
            Piece::RateLimits {
                seq: part.seq,
                image: part.table.image(),
            }
        };
        put(&mut out, &piece);
        put(
            &mut out,
            &Piece::End {
                now: self.clock.now_ms(),
                policy: self.policy.resources.clone(),
            },
        );
        (out, longest, started)
    }

    /// Rewrite a dir read from an older format in this build's, before serving: a snapshot of
    /// the state (in this format) at a new segment, written and synced on this thread, then
    /// `FORMAT`; the older files go once the snapshot is in place. A crash at any point leaves
    /// a dir that opens (each file names its own format) and is rewritten again.
    fn rewrite(&self, dir: &std::path::Path, epoch_us: u64) -> Result<(), String> {
        let journal = self.journal.as_ref().expect("a store on a data dir");
        let n = journal.rotate()?;
        let (out, _, _) = self.encode_snapshot(journal.snapshot_buffer());
        journal.write_snapshot(n, out)?;
        journal::write_format(dir, epoch_us).map_err(|e| format!("FORMAT: {e}"))?;
        tracing::info!(
            dir = %dir.display(),
            format = journal::FORMAT,
            "data dir rewritten in this build's format"
        );
        Ok(())
    }

    /// Write what the log holds and stop its thread (at shutdown; a store in memory has
    /// nothing to do).
    pub fn close(&self) {
        if let Some(j) = &self.journal {
            j.close();
        }
    }
}
