//! The embedded store: every host's [`HostState`] in process memory, each behind its own lock;
//! with a data dir, durable too ([`persist`]).
//!
//! The locks are `std::sync::Mutex`/`RwLock` and not Tokio's, because nothing asynchronous
//! happens while one is held: an operation is a few map updates. Wait streams are woken through
//! a `watch` channel per watched ticket, fed from the core's list of changed tickets.
//!
//! Auth buckets live in one [`AuthTable`] behind its own lock, apart from every host; the rate
//! limit counters in one [`CounterTable`] behind another.
//!
//! Every change goes through one of [`ops`]' operations. With a data dir each is appended to
//! the journal under the lock that ordered it, and the answer waits for its commit (after the
//! lock is released, so other calls go on meanwhile). Lock order: `hosts`, then a host's
//! `inner` or `ledger` (never both), or `auth`, or `rate_limits`; the journal's own lock is
//! always the last.

mod format;
mod inspect;
mod ledger_auth;
mod ops;
mod persist;
mod rate_limits;
mod tickets;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;

use self::ops::{
    AuthOp, AuthOut, HostCore, HostOp, HostOut, LedgerOp, LedgerOut, RateLimitOp, RateLimitOut,
    Record,
};
use super::journal::{Journal, Pending};
use super::{Policy, StoreError, TicketStore};
use crate::auth::AuthTable;
use crate::clock::Clock;
use crate::ledger::Ledger;
use crate::pause::PauseWatch;
use crate::ratelimit::CounterTable;
use crate::scheduler::{
    HostState, Limits, LimitsRecord, LimitsSource, LimitsTable, TicketMap, TicketState,
};

pub use inspect::Inspection;
pub use persist::OpenOptions;

pub struct MemoryStore {
    clock: Arc<dyn Clock>,
    policy: Policy,
    /// The file's limits (`policy.limits` until a reload).
    file_limits: RwLock<LimitsTable>,
    hosts: RwLock<HashMap<String, Arc<Host>>>,
    auth: Mutex<AuthPart>,
    rate_limits: Mutex<RateLimitPart>,
    /// The data dir's log; `None` for a store in memory only.
    journal: Option<Arc<Journal>>,
    /// The journal's recoveries this store has answered (see [`Self::writable`]).
    recovered: AtomicU64,
    /// This process's pauses: a host's first change after one gives its live tickets a full
    /// lease from then ([`crate::pause`]). Unarmed unless the server beats it.
    pauses: Arc<PauseWatch>,
    /// Each host's last hour (kept in memory only: it starts again with the process).
    history: Mutex<crate::history::Ring>,
}

struct Host {
    inner: Mutex<HostInner>,
    /// The host's reservations, under a lock of their own: Authorize never waits on Submit.
    ledger: Mutex<LedgerPart>,
}

struct HostInner {
    core: HostCore,
    /// Senders for tickets that have a Wait stream open (or had, until the next change).
    watchers: TicketMap<watch::Sender<()>>,
    /// The process's pauses counted when this host last gave its tickets a lease from then.
    resumed: u64,
}

struct LedgerPart {
    ledger: Ledger,
    /// The last logged operation applied (see [`Record`]).
    seq: u64,
}

struct AuthPart {
    table: AuthTable,
    seq: u64,
}

struct RateLimitPart {
    table: CounterTable,
    seq: u64,
}

impl HostInner {
    /// Wake the Wait streams of every ticket the last operation changed.
    fn notify(&mut self) {
        let watchers = &mut self.watchers;
        self.core.state.drain_changes(|key, state| {
            if let Some(tx) = watchers.get(&key) {
                tx.send_replace(());
                // A receiver sees the value even after the sender is dropped, so an ended
                // ticket's sender can go at once.
                if !state.is_some_and(TicketState::is_live) || tx.receiver_count() == 0 {
                    watchers.remove(&key);
                }
            }
        });
    }
}

/// What a change answered, and its record's place in the log when there is one.
type Applied<T> = (T, Option<Pending>);

impl MemoryStore {
    /// A store in memory only: its state ends with the process.
    pub fn new(policy: Policy, clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            pauses: Arc::new(PauseWatch::new(clock.clone())),
            history: Mutex::default(),
            clock,
            auth: Mutex::new(AuthPart {
                table: AuthTable::new(policy.auth.local_max_keys),
                seq: 0,
            }),
            rate_limits: Mutex::new(RateLimitPart {
                table: CounterTable::new(),
                seq: 0,
            }),
            file_limits: RwLock::new(policy.limits.clone()),
            policy,
            hosts: RwLock::new(HashMap::new()),
            journal: None,
            recovered: AtomicU64::new(0),
        }
    }

    /// The grant floor at store time `now` (see [`HostState::set_grant_floor`]).
    fn grant_floor(&self, now: u64) -> u64 {
        self.clock.origin_epoch_us() + now * 1000
    }

    fn log_borrowed(&self, record: &Record<'_>) -> Option<Pending> {
        self.journal.as_ref().map(|j| {
            j.append(|out| format::encode_record(record, out))
                .expect("records encode into a Vec")
        })
    }

    /// Refuse a change before it is applied while the data dir cannot be written. Once it
    /// takes writes again, every live ticket first gets a lease from now, as after a restart:
    /// nobody could renew while it failed.
    fn writable(&self) -> Result<(), StoreError> {
        let Some(journal) = &self.journal else {
            return Ok(());
        };
        if let Some(e) = journal.refusal() {
            return Err(e);
        }
        let r = journal.recoveries();
        if self.recovered.load(Ordering::Acquire) != r
            && self.recovered.swap(r, Ordering::AcqRel) != r
        {
            self.restarted();
        }
        Ok(())
    }

    /// Wait until a change's record is written (per the sync policy).
    async fn commit<T>(&self, (out, pending): Applied<T>) -> Result<T, StoreError> {
        if let (Some(j), Some(p)) = (&self.journal, pending) {
            j.commit(p).await?;
        }
        Ok(out)
    }

    fn host(&self, host_id: &str) -> Arc<Host> {
        if let Some(h) = self.hosts.read().expect("hosts lock").get(host_id) {
            return h.clone();
        }
        let mut hosts = self.hosts.write().expect("hosts lock");
        if let Some(h) = hosts.get(host_id) {
            return h.clone();
        }
        let limits = LimitsRecord {
            limits: self.file_limits(host_id),
            source: LimitsSource::File,
            revision: 1,
        };
        // Its first record; it needs no commit of its own (the change that made the host
        // commits after it, and the log is written in order).
        let _ = self.log_borrowed(&Record::Host {
            host: Cow::Borrowed(host_id),
            seq: 0,
            now: self.clock.now_ms(),
            op: Cow::Owned(HostOp::Create(limits.clone())),
        });
        let host = Arc::new(Host::new(limits, self.pauses.seen().0));
        hosts.insert(host_id.to_string(), host.clone());
        host
    }

    fn existing_host(&self, host_id: &str) -> Option<Arc<Host>> {
        self.hosts.read().expect("hosts lock").get(host_id).cloned()
    }

    /// Apply `op` to a host under its lock (logged first), then wake the Wait streams it
    /// affected. The host's first change after a pause of this process is a restart of its
    /// leases ([`crate::pause`]): nobody could renew while the process did not run.
    fn apply_host(&self, host_id: &str, host: &Host, op: HostOp) -> Applied<HostOut> {
        let mut guard = host.inner.lock().expect("host lock");
        let inner = &mut *guard;
        let now = self.clock.now_ms();
        let pauses = self.pauses.look_at(now);
        if inner.resumed != pauses {
            inner.resumed = pauses;
            // Its record precedes the op's, whose commit covers both.
            let _ = self.apply_locked(host_id, inner, HostOp::Restarted, now);
        }
        let (out, pending) = self.apply_locked(host_id, inner, op, now);
        inner.notify();
        (out, pending)
    }

    fn apply_locked(
        &self,
        host_id: &str,
        inner: &mut HostInner,
        op: HostOp,
        now: u64,
    ) -> Applied<HostOut> {
        let pending = self.journal.is_some().then(|| {
            inner.core.seq += 1;
            self.log_borrowed(&Record::Host {
                host: Cow::Borrowed(host_id),
                seq: inner.core.seq,
                now,
                op: Cow::Borrowed(&op),
            })
        });
        let out = op.apply(&mut inner.core, now, self.grant_floor(now));
        (out, pending.flatten())
    }

    /// This process's pauses, for the server to beat ([`PauseWatch::start_heartbeat`]).
    pub fn pauses(&self) -> Arc<PauseWatch> {
        self.pauses.clone()
    }

    /// [`Self::apply_host`] and its commit, refused up front while the data dir fails.
    async fn change_host(
        &self,
        host_id: &str,
        host: &Host,
        op: HostOp,
    ) -> Result<HostOut, StoreError> {
        self.writable()?;
        let applied = self.apply_host(host_id, host, op);
        self.commit(applied).await
    }

    /// Read a host's state under its lock, after the housekeeping that is due (a change,
    /// logged like any other).
    async fn read_host<R>(
        &self,
        host_id: &str,
        host: &Host,
        read: impl FnOnce(&HostState, &Limits, u64) -> R,
    ) -> Result<R, StoreError> {
        // Before the lock: after a recovery it gives every host a lease from now.
        let writable = self.writable().is_ok();
        let (out, pending) = {
            let mut guard = host.inner.lock().expect("host lock");
            let now = self.clock.now_ms();
            // A pause not yet applied to the host is applied before the read, as a change
            // would (see `apply_host`).
            let due = guard
                .core
                .state
                .housekeeping_due(&guard.core.limits.limits, now)
                || guard.resumed != self.pauses.look_at(now);
            let pending = if due && writable {
                drop(guard);
                let (_, pending) = self.apply_host(host_id, host, HostOp::Housekeeping);
                guard = host.inner.lock().expect("host lock");
                pending
            } else {
                None
            };
            let now = self.clock.now_ms().max(now);
            let core = &guard.core;
            (read(&core.state, &core.limits.limits, now), pending)
        };
        self.commit((out, pending)).await
    }

    /// Apply `op` to a host's ledger under its lock (logged first).
    fn apply_ledger(&self, host_id: &str, host: &Host, op: LedgerOp) -> Applied<LedgerOut> {
        let mut part = host.ledger.lock().expect("ledger lock");
        let now = self.clock.now_ms();
        let pending = self.journal.is_some().then(|| {
            part.seq += 1;
            self.log_borrowed(&Record::Ledger {
                host: Cow::Borrowed(host_id),
                seq: part.seq,
                now,
                op: Cow::Borrowed(&op),
            })
        });
        let out = op.apply(&mut part.ledger, &self.policy.resources, now);
        (out, pending.flatten())
    }

    async fn change_ledger(
        &self,
        host_id: &str,
        host: &Host,
        op: LedgerOp,
    ) -> Result<LedgerOut, StoreError> {
        self.writable()?;
        let applied = self.apply_ledger(host_id, host, op);
        self.commit(applied).await
    }

    /// Read a host's ledger after the housekeeping that is due.
    async fn read_ledger<R>(
        &self,
        host_id: &str,
        host: &Host,
        read: impl FnOnce(&Ledger, u64) -> R,
    ) -> Result<R, StoreError> {
        let writable = self.writable().is_ok();
        let now = self.clock.now_ms();
        let due = host
            .ledger
            .lock()
            .expect("ledger lock")
            .ledger
            .housekeeping_due(now);
        let pending = if due && writable {
            self.apply_ledger(host_id, host, LedgerOp::Housekeeping).1
        } else {
            None
        };
        let out = {
            let part = host.ledger.lock().expect("ledger lock");
            read(&part.ledger, self.clock.now_ms().max(now))
        };
        self.commit((out, pending)).await
    }

    fn apply_auth(&self, op: AuthOp) -> Applied<AuthOut> {
        let mut part = self.auth.lock().expect("auth lock");
        let now = self.clock.now_ms();
        let pending = self.journal.is_some().then(|| {
            part.seq += 1;
            self.log_borrowed(&Record::Auth {
                seq: part.seq,
                now,
                op: Cow::Borrowed(&op),
            })
        });
        let out = op.apply(&mut part.table, now);
        (out, pending.flatten())
    }

    async fn change_auth(&self, op: AuthOp) -> Result<AuthOut, StoreError> {
        self.writable()?;
        let applied = self.apply_auth(op);
        self.commit(applied).await
    }

    /// The windows' clock: ms since the Unix epoch, on the store's clock.
    fn epoch_ms(&self) -> u64 {
        self.clock.origin_epoch_us() / 1000 + self.clock.now_ms()
    }

    fn apply_rate_limit(&self, op: RateLimitOp) -> Applied<RateLimitOut> {
        let mut part = self.rate_limits.lock().expect("rate limit lock");
        let now = self.clock.now_ms();
        let pending = self.journal.is_some().then(|| {
            part.seq += 1;
            self.log_borrowed(&Record::RateLimit {
                seq: part.seq,
                now,
                op: Cow::Borrowed(&op),
            })
        });
        let out = op.apply(&mut part.table);
        (out, pending.flatten())
    }

    async fn change_rate_limit(&self, op: RateLimitOp) -> Result<RateLimitOut, StoreError> {
        self.writable()?;
        let applied = self.apply_rate_limit(op);
        self.commit(applied).await
    }

    /// Change a host's limits to what `change` makes of the current ones (`None`: no change),
    /// if they are at `expected` (0: any); then admit what fits.
    async fn change_limits(
        &self,
        host_id: &str,
        expected: u64,
        change: impl FnOnce(&LimitsRecord) -> Option<(Limits, LimitsSource)>,
    ) -> Result<Result<LimitsRecord, u64>, StoreError> {
        self.writable()?;
        let host = self.host(host_id);
        let (out, pending) = {
            let guard = host.inner.lock().expect("host lock");
            let current = &guard.core.limits;
            if expected != 0 && expected != current.revision {
                return Ok(Err(current.revision));
            }
            match change(current) {
                None => (current.clone(), None),
                Some((limits, source)) => {
                    let record = LimitsRecord {
                        limits,
                        source,
                        revision: current.revision + 1,
                    };
                    drop(guard);
                    // Applied under the lock taken again: a change between the two is
                    // caught by the revision, which the op moves by exactly one.
                    let (_, pending) =
                        self.apply_host(host_id, &host, HostOp::Limits(record.clone()));
                    (record, pending)
                }
            }
        };
        self.commit((out, pending)).await.map(Ok)
    }

    /// Put the file's limits in force on every host that is on the file's limits and whose
    /// limits differ (a reload, or a restart with another file). Nobody is answered: the
    /// records are written with the next commit (or at shutdown).
    fn follow_file_limits(&self) {
        for (host_id, host) in self.all_hosts() {
            let file = self.file_limits(&host_id);
            let current = host.inner.lock().expect("host lock").core.limits.clone();
            if current.source == LimitsSource::File && current.limits != file {
                let record = LimitsRecord {
                    limits: file,
                    source: LimitsSource::File,
                    revision: current.revision + 1,
                };
                let _ = self.apply_host(&host_id, &host, HostOp::Limits(record));
            }
        }
    }

    fn all_hosts(&self) -> Vec<(String, Arc<Host>)> {
        self.hosts
            .read()
            .expect("hosts lock")
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

impl Host {
    /// A host made after `pauses` pauses of the process (it has no lease to restart for them).
    fn new(limits: LimitsRecord, pauses: u64) -> Host {
        Host {
            inner: Mutex::new(HostInner {
                core: HostCore {
                    state: HostState::new(),
                    limits,
                    seq: 0,
                },
                watchers: TicketMap::default(),
                resumed: pauses,
            }),
            ledger: Mutex::new(LedgerPart {
                ledger: Ledger::new(),
                seq: 0,
            }),
        }
    }
}
