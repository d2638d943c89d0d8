//! The embedded store: every host's [`HostState`] in process memory, each behind its own lock.
//!
//! The locks are `std::sync::Mutex`/`RwLock` and not Tokio's, because nothing asynchronous
//! happens while one is held: an operation is a few map updates. Wait streams are woken through
//! a `watch` channel per watched ticket, fed from the core's list of changed tickets.
//!
//! Auth buckets live in one [`AuthTable`] behind its own lock, apart from every host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;

use super::{
    AuthStore, LedgerResult, LedgerStore, Policy, StoreError, TicketId, TicketStore, TicketWatch,
};
use crate::auth::{AuthCleared, AuthDecision, AuthPolicy, AuthTable, BucketRule};
use crate::clock::Clock;
use crate::ledger::{
    Authorization, AuthorizeArgs, Ledger, LedgerStats, ReservationInfo, Resolution, Usage,
};
use crate::scheduler::{
    HostState, HostStats, Limits, LimitsRecord, LimitsSource, LimitsTable, Report, SubmitArgs,
    SubmitError, TicketInfo, TicketMap, TicketState, TicketView,
};

pub struct MemoryStore {
    clock: Arc<dyn Clock>,
    policy: Policy,
    /// The file's limits (`policy.limits` until a reload).
    file_limits: RwLock<LimitsTable>,
    hosts: RwLock<HashMap<String, Arc<Host>>>,
    auth: Mutex<AuthTable>,
}

struct Host {
    inner: Mutex<HostInner>,
    /// The host's reservations, under a lock of their own: Authorize never waits on Submit.
    ledger: Mutex<Ledger>,
}

struct HostInner {
    state: HostState,
    /// The limits in force: the file's until an operator sets others.
    limits: LimitsRecord,
    /// Senders for tickets that have a Wait stream open (or had, until the next change).
    watchers: TicketMap<watch::Sender<()>>,
}

impl HostInner {
    /// Wake the Wait streams of every ticket the last operation changed.
    fn notify(&mut self) {
        let watchers = &mut self.watchers;
        self.state.drain_changes(|key, state| {
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

/// A Wait stream's subscription to one ticket of the memory store.
pub struct MemoryWatch {
    rx: Option<watch::Receiver<()>>,
}

impl TicketWatch for MemoryWatch {
    async fn changed(&mut self) {
        match &mut self.rx {
            Some(rx) => {
                if rx.changed().await.is_err() {
                    // The sender is gone (the host was dropped); nothing will wake us again.
                    self.rx = None;
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

impl MemoryStore {
    pub fn new(policy: Policy, clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            clock,
            auth: Mutex::new(AuthTable::new(policy.auth.local_max_keys)),
            file_limits: RwLock::new(policy.limits.clone()),
            policy,
            hosts: RwLock::new(HashMap::new()),
        }
    }

    fn host(&self, host_id: &str) -> Arc<Host> {
        if let Some(h) = self.hosts.read().expect("hosts lock").get(host_id) {
            return h.clone();
        }
        self.hosts
            .write()
            .expect("hosts lock")
            .entry(host_id.to_string())
            .or_insert_with(|| {
                Arc::new(Host {
                    inner: Mutex::new(HostInner {
                        state: HostState::new(),
                        limits: LimitsRecord {
                            limits: self.file_limits(host_id),
                            source: LimitsSource::File,
                            revision: 1,
                        },
                        watchers: TicketMap::default(),
                    }),
                    ledger: Mutex::new(Ledger::new()),
                })
            })
            .clone()
    }

    fn existing_host(&self, host_id: &str) -> Option<Arc<Host>> {
        self.hosts.read().expect("hosts lock").get(host_id).cloned()
    }

    /// Run `op` on a host's state under its lock, then wake the Wait streams it affected.
    fn with_host<R>(&self, host: &Host, op: impl FnOnce(&mut HostState, &Limits, u64) -> R) -> R {
        let mut guard = host.inner.lock().expect("host lock");
        let inner = &mut *guard;
        let now = self.clock.now_ms();
        inner
            .state
            .set_grant_floor(self.clock.origin_epoch_us() + now * 1000);
        let out = op(&mut inner.state, &inner.limits.limits, now);
        inner.notify();
        out
    }
}

impl MemoryStore {
    /// Change a host's limits to what `change` makes of the current ones (`None`: no change),
    /// if they are at `expected` (0: any); then admit what fits.
    fn change_limits(
        &self,
        host_id: &str,
        expected: u64,
        change: impl FnOnce(&LimitsRecord) -> Option<(Limits, LimitsSource)>,
    ) -> Result<LimitsRecord, u64> {
        let host = self.host(host_id);
        let mut guard = host.inner.lock().expect("host lock");
        let inner = &mut *guard;
        if expected != 0 && expected != inner.limits.revision {
            return Err(inner.limits.revision);
        }
        if let Some((limits, source)) = change(&inner.limits) {
            inner.limits = LimitsRecord {
                limits,
                source,
                revision: inner.limits.revision + 1,
            };
            let now = self.clock.now_ms();
            inner.state.limits_changed(&inner.limits.limits, now);
            inner.notify();
        }
        Ok(inner.limits.clone())
    }

    fn all_hosts(&self) -> Vec<(String, Arc<Host>)> {
        self.hosts
            .read()
            .expect("hosts lock")
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Run `op` on a host's ledger under its lock.
    fn with_ledger<R>(
        &self,
        host: &Host,
        op: impl FnOnce(&mut Ledger, &crate::ledger::ResourcePolicy, u64) -> R,
    ) -> R {
        let mut ledger = host.ledger.lock().expect("ledger lock");
        op(&mut ledger, &self.policy.resources, self.clock.now_ms())
    }
}

impl TicketStore for MemoryStore {
    type Watch = MemoryWatch;

    fn file_limits(&self, host_id: &str) -> Limits {
        self.file_limits
            .read()
            .expect("limits lock")
            .for_host(host_id)
            .clone()
    }

    fn reload_file_limits(&self, limits: LimitsTable) {
        *self.file_limits.write().expect("limits lock") = limits;
        for (host_id, _) in self.all_hosts() {
            let file = self.file_limits(&host_id);
            let _ = self.change_limits(&host_id, 0, |current| {
                (current.source == LimitsSource::File && current.limits != file)
                    .then_some((file, LimitsSource::File))
            });
        }
    }

    async fn get_limits(&self, host_id: &str) -> Result<LimitsRecord, StoreError> {
        let host = self.host(host_id);
        let inner = host.inner.lock().expect("host lock");
        Ok(inner.limits.clone())
    }

    async fn set_limits(
        &self,
        host_id: &str,
        limits: Limits,
        expected_revision: u64,
    ) -> Result<Result<LimitsRecord, u64>, StoreError> {
        Ok(self.change_limits(host_id, expected_revision, |_| {
            Some((limits, LimitsSource::Operator))
        }))
    }

    async fn reset_limits(
        &self,
        host_id: &str,
        expected_revision: u64,
    ) -> Result<Result<LimitsRecord, u64>, StoreError> {
        let file = self.file_limits(host_id);
        Ok(self.change_limits(host_id, expected_revision, |current| {
            (current.source == LimitsSource::Operator).then_some((file, LimitsSource::File))
        }))
    }

    async fn submit(
        &self,
        host_id: &str,
        args: SubmitArgs,
    ) -> Result<Result<(TicketId, TicketView), SubmitError>, StoreError> {
        let host = self.host(host_id);
        let out = self.with_host(&host, |state, limits, now| {
            let mut key = TicketId::random_key();
            while state.has_ticket(key) {
                key = TicketId::random_key();
            }
            state.submit(limits, args, key, now)
        });
        Ok(out.map(|view| {
            let id = TicketId {
                host_id: host_id.to_string(),
                key: view.key,
            };
            (id, view)
        }))
    }

    async fn renew(
        &self,
        ids: &[TicketId],
        rss_mb: Option<u32>,
    ) -> Result<Vec<Option<TicketView>>, StoreError> {
        Ok(ids
            .iter()
            .map(|id| {
                let host = self.existing_host(&id.host_id)?;
                self.with_host(&host, |state, limits, now| {
                    state.renew(limits, id.key, rss_mb, now)
                })
            })
            .collect())
    }

    async fn release(
        &self,
        id: &TicketId,
        report: Report,
    ) -> Result<Option<TicketState>, StoreError> {
        let Some(host) = self.existing_host(&id.host_id) else {
            return Ok(None);
        };
        Ok(self.with_host(&host, |state, limits, now| {
            state.release_reporting(limits, id.key, report, now)
        }))
    }

    async fn release_run(
        &self,
        host_id: &str,
        run_id: &str,
        report: Report,
    ) -> Result<Option<(TicketId, TicketState)>, StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok(None);
        };
        let found = self.with_host(&host, |state, limits, now| {
            state.release_run(limits, run_id, report, now)
        });
        Ok(found.map(|(key, s)| {
            (
                TicketId {
                    host_id: host_id.to_string(),
                    key,
                },
                s,
            )
        }))
    }

    async fn park(
        &self,
        id: &TicketId,
    ) -> Result<Option<Result<TicketView, TicketState>>, StoreError> {
        let Some(host) = self.existing_host(&id.host_id) else {
            return Ok(None);
        };
        Ok(self.with_host(&host, |state, limits, now| state.park(limits, id.key, now)))
    }

    async fn unpark(
        &self,
        id: &TicketId,
    ) -> Result<Option<Result<TicketView, TicketState>>, StoreError> {
        let Some(host) = self.existing_host(&id.host_id) else {
            return Ok(None);
        };
        Ok(self.with_host(&host, |state, limits, now| {
            state.unpark(limits, id.key, now)
        }))
    }

    async fn ticket(&self, id: &TicketId) -> Result<Option<TicketView>, StoreError> {
        let Some(host) = self.existing_host(&id.host_id) else {
            return Ok(None);
        };
        Ok(self.with_host(&host, |state, limits, now| {
            state.housekeeping(limits, now);
            state.view(limits, id.key, now)
        }))
    }

    fn watch(&self, id: &TicketId) -> MemoryWatch {
        let Some(host) = self.existing_host(&id.host_id) else {
            return MemoryWatch { rx: None };
        };
        let mut inner = host.inner.lock().expect("host lock");
        let rx = inner
            .watchers
            .entry(id.key)
            .or_insert_with(|| watch::channel(()).0)
            .subscribe();
        MemoryWatch { rx: Some(rx) }
    }

    async fn sweep_tickets(&self) -> Result<(), StoreError> {
        for (_, host) in self.all_hosts() {
            self.with_host(&host, |state, limits, now| state.housekeeping(limits, now));
        }
        Ok(())
    }

    async fn stats(&self, host_id: &str) -> Result<HostStats, StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            let limits = self.file_limits(host_id);
            return Ok(HostState::new().stats(&limits, self.clock.now_ms()));
        };
        Ok(self.with_host(&host, |state, limits, now| {
            state.housekeeping(limits, now);
            state.stats(limits, now)
        }))
    }

    async fn list(
        &self,
        host_id: &str,
        limit: usize,
    ) -> Result<(Vec<TicketInfo>, bool), StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok((Vec::new(), false));
        };
        Ok(self.with_host(&host, |state, limits, now| {
            state.housekeeping(limits, now);
            state.list(limit, now)
        }))
    }

    async fn host_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut hosts: Vec<String> = self.all_hosts().into_iter().map(|(h, _)| h).collect();
        hosts.sort();
        Ok(hosts)
    }

    async fn in_flight_here(&self) -> Result<u64, StoreError> {
        Ok(self
            .all_hosts()
            .iter()
            .map(|(_, h)| u64::from(h.inner.lock().expect("host lock").state.in_flight()))
            .sum())
    }

    async fn count_rejection(&self, host_id: &str) -> Result<(), StoreError> {
        let host = self.host(host_id);
        self.with_host(&host, |state, _, _| state.count_rejection());
        Ok(())
    }
}

impl LedgerStore for MemoryStore {
    async fn authorize(&self, host_id: &str, args: AuthorizeArgs) -> LedgerResult<Authorization> {
        let host = self.host(host_id);
        Ok(self.with_ledger(&host, |ledger, policy, now| {
            ledger.authorize(policy, args, now)
        }))
    }

    async fn settle(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        usage: Usage,
    ) -> LedgerResult<bool> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok(Err(crate::ledger::LedgerError::NotAuthorized));
        };
        Ok(self.with_ledger(&host, |ledger, policy, now| {
            ledger.settle(policy, run_id, step, usage, now)
        }))
    }

    async fn resolve(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        resolution: Resolution,
    ) -> LedgerResult<()> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok(Err(crate::ledger::LedgerError::NoSuchReservation));
        };
        Ok(self.with_ledger(&host, |ledger, policy, now| {
            ledger.resolve(policy, run_id, step, resolution, now)
        }))
    }

    async fn reservations(
        &self,
        host_id: &str,
        limit: usize,
    ) -> Result<(Vec<ReservationInfo>, bool), StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok((Vec::new(), false));
        };
        Ok(self.with_ledger(&host, |ledger, policy, now| {
            ledger.housekeeping(policy, now);
            ledger.open_reservations(limit, now)
        }))
    }

    async fn ledger_stats(&self, host_id: &str) -> Result<LedgerStats, StoreError> {
        let Some(host) = self.existing_host(host_id) else {
            return Ok(LedgerStats::default());
        };
        Ok(self.with_ledger(&host, |ledger, policy, now| {
            ledger.housekeeping(policy, now);
            ledger.stats()
        }))
    }

    async fn sweep_ledger(&self) -> Result<(), StoreError> {
        for (_, host) in self.all_hosts() {
            self.with_ledger(&host, |ledger, policy, now| {
                ledger.housekeeping(policy, now)
            });
        }
        Ok(())
    }
}

impl AuthStore for MemoryStore {
    fn auth_policy(&self) -> &AuthPolicy {
        &self.policy.auth
    }

    async fn auth_attempt(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> Result<AuthDecision, StoreError> {
        let mut table = self.auth.lock().expect("auth lock");
        Ok(table.attempt(endpoint, identity, rule, self.clock.now_ms()))
    }

    async fn auth_peek(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> Result<AuthDecision, StoreError> {
        let table = self.auth.lock().expect("auth lock");
        Ok(table.peek(endpoint, identity, rule, self.clock.now_ms()))
    }

    async fn auth_reset(&self, endpoint: &str, identity: &str) -> Result<AuthCleared, StoreError> {
        let mut table = self.auth.lock().expect("auth lock");
        Ok(table.reset(endpoint, identity, self.clock.now_ms()))
    }

    async fn sweep_auth(&self) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        self.auth.lock().expect("auth lock").prune(now);
        Ok(())
    }
}
