//! The Redis store: several authority replicas share one Redis and behave as one authority.
//!
//! Every operation is one Lua script from [`scripts`] on keys from [`keys`] (a host's
//! concurrent Submits and Releases share one call: [`coalesce`]); Rust only builds arguments and
//! reads answers, with the codes of [`codes`]. The Rust core is the
//! specification: `tests/differential.rs` runs random operations on this store and on the
//! embedded one and compares every answer.
//!
//! - [`connection`]: multiplexed connections, checked before use, failures classified;
//! - [`tickets`]: the scheduler's tickets, and Wait wake-ups across replicas (pub/sub);
//! - [`coalesce`]: a host's concurrent Submits and Releases in one script call;
//! - [`ledger`]: reservations of model steps;
//! - [`auth`]: auth buckets, with a local fallback that never fails open;
//! - [`layout`]: the layout's version and the replicas that may share a prefix.

mod acks;
mod auth;
mod auth_batch;
mod coalesce;
mod codes;
mod connection;
mod epoch;
mod history;
pub mod keys;
mod lanes;
pub mod layout;
mod ledger;
mod limits_args;
mod rate_limit_batch;
mod rate_limits;
mod recent;
mod replies;
pub mod scripts;
pub mod source;
mod tickets;

pub use auth::AUTH_SKIP_MS;
pub use connection::redis_address;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Policy, StoreError};
use crate::auth::AuthTable;
use crate::clock::Clock;
use crate::pause::PauseWatch;
use connection::Connections;
use keys::Keys;

pub struct RedisStore {
    conns: Arc<Connections>,
    keys: Keys,
    policy: Policy,
    /// The replica's own clock: only for the local fallback and the skip window.
    clock: Arc<dyn Clock>,
    /// The fallback buckets. A `std` mutex: nothing asynchronous happens while it is held.
    local_auth: Mutex<AuthTable>,
    /// Until when (on `clock`) auth calls go straight to the local buckets.
    skip_redis_until: AtomicU64,
    /// True from an auth call Redis failed until Redis answers again (an auth call, or the
    /// sweep's look): `admission_auth_fallback_active`.
    auth_fallback: std::sync::atomic::AtomicBool,
    /// The time every script sees, in ms; 0 (outside tests) = Redis `TIME`.
    frozen_now_ms: AtomicU64,
    /// This replica in the prefix's registry of replicas and their layouts.
    registration: layout::Registration,
    /// Whether this process already found no layout 0 limits on the prefix: the look is a SCAN
    /// of the whole keyspace, made once, not at every sweep turn of a replica that runs alone.
    layout_0_checked: std::sync::atomic::AtomicBool,
    /// Why this replica may not use the prefix (a live replica it cannot run beside, or
    /// layout 0's limits left), when it found so after it started: changes are refused.
    incompatible: Mutex<Option<String>>,
    /// A replica of a layout before keys is live on the prefix (see [`layout::KEYS_LAYOUT`]).
    keys_refused_by_layout: std::sync::atomic::AtomicBool,
    auth_batcher: Arc<auth_batch::AuthBatcher>,
    auth_reset: redis::Script,
    auth_peek: redis::Script,
    authorize: redis::Script,
    settle: redis::Script,
    resolve: redis::Script,
    open_reservations: redis::Script,
    rate_limit_batcher: Arc<rate_limit_batch::RateLimitBatcher>,
    rate_limit_counters: redis::Script,
    rate_limit_sweep: redis::Script,
    /// Hosts this replica has registered in the `hosts` set (for the sweep), so the set is
    /// written once per host and replica, not once per call.
    registered_hosts: Mutex<std::collections::HashSet<String>>,
    /// The store's state epoch as this replica knows it, and the losses it detected.
    epoch: epoch::Epoch,
    /// This process's pauses ([`crate::pause`]), and for each host the count at which this
    /// replica last gave its live tickets a lease from then (before its next script).
    pauses: Arc<PauseWatch>,
    resumed: Mutex<std::collections::HashMap<String, u64>>,
    submit: Arc<redis::Script>,
    park: redis::Script,
    unpark: redis::Script,
    reclaim: redis::Script,
    renew: redis::Script,
    /// Concurrent Submits and Releases of a host, in one call.
    coalescer: Arc<coalesce::Coalescer>,
    ticket: redis::Script,
    stats: redis::Script,
    history_record: redis::Script,
    list: redis::Script,
    limits: redis::Script,
    /// Each host's limits as the scripts read them, computed once.
    /// This replica's file limits, and as the scripts read them; replaced on reload.
    file_limits: std::sync::RwLock<Arc<limits_args::FileLimits>>,
    /// This replica's Wait streams, woken by the change listener.
    watchers: Arc<tickets::Watchers>,
    listener: std::sync::OnceLock<tokio::task::JoinHandle<()>>,
    /// True while the change listener is subscribed.
    listening: tokio::sync::watch::Sender<bool>,
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        if let Some(l) = self.listener.get() {
            l.abort();
        }
    }
}

impl RedisStore {
    /// A store on the Redis at `url` with keys under `prefix`, using at most `pool_size`
    /// connections. Nothing is connected yet: calls fail closed until Redis answers.
    ///
    /// Fails when `url` is not a Redis URL.
    pub fn new(
        url: &str,
        prefix: &str,
        pool_size: u32,
        policy: Policy,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let conns = Connections::new(url, pool_size)?;
        Ok(Self::with_connections(conns, prefix, policy, clock))
    }

    fn with_connections(
        conns: Connections,
        prefix: &str,
        policy: Policy,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let file_limits = limits_args::FileLimits::new(policy.limits.clone(), clock.as_ref());
        let conns = Arc::new(conns);
        let submit = Arc::new(redis::Script::new(&scripts::submit()));
        let release = Arc::new(redis::Script::new(&scripts::release()));
        let auth_batcher = Arc::new(auth_batch::AuthBatcher::new(conns.clone()));
        let rate_limit_batcher = Arc::new(rate_limit_batch::RateLimitBatcher::new(conns.clone()));
        RedisStore {
            coalescer: Arc::new(coalesce::Coalescer::new(
                conns.clone(),
                submit.clone(),
                release,
            )),
            conns,
            keys: Keys::new(prefix),
            local_auth: Mutex::new(AuthTable::new(policy.auth.local_max_keys)),
            policy,
            clock: clock.clone(),
            skip_redis_until: AtomicU64::new(0),
            auth_fallback: std::sync::atomic::AtomicBool::new(false),
            frozen_now_ms: AtomicU64::new(0),
            registration: layout::Registration::new(),
            layout_0_checked: std::sync::atomic::AtomicBool::new(false),
            incompatible: Mutex::new(None),
            keys_refused_by_layout: std::sync::atomic::AtomicBool::new(false),
            auth_batcher,
            auth_reset: redis::Script::new(&scripts::auth_reset()),
            auth_peek: redis::Script::new(&scripts::auth_peek()),
            authorize: redis::Script::new(&scripts::authorize()),
            settle: redis::Script::new(&scripts::settle()),
            resolve: redis::Script::new(&scripts::resolve()),
            open_reservations: redis::Script::new(&scripts::open_reservations()),
            rate_limit_batcher,
            rate_limit_counters: redis::Script::new(&scripts::rate_limit_counters()),
            rate_limit_sweep: redis::Script::new(&scripts::rate_limit_sweep()),
            registered_hosts: Mutex::default(),
            epoch: epoch::Epoch::new(clock.clone()),
            pauses: Arc::new(PauseWatch::new(clock.clone())),
            resumed: Mutex::default(),
            submit,
            park: redis::Script::new(&scripts::park()),
            unpark: redis::Script::new(&scripts::unpark()),
            reclaim: redis::Script::new(&scripts::reclaim()),
            renew: redis::Script::new(&scripts::renew()),
            ticket: redis::Script::new(&scripts::ticket()),
            stats: redis::Script::new(&scripts::stats()),
            history_record: redis::Script::new(&scripts::history_record()),
            list: redis::Script::new(&scripts::list()),
            limits: redis::Script::new(&scripts::limits()),
            file_limits: std::sync::RwLock::new(Arc::new(file_limits)),
            watchers: Arc::default(),
            listener: std::sync::OnceLock::new(),
            listening: tokio::sync::watch::Sender::new(false),
        }
    }

    /// A store on the primary that the sentinels of `sentinel` name for its master set, found
    /// again at every new connection (so a failover is followed), with `url`'s credentials,
    /// database and TLS; otherwise as [`RedisStore::new`].
    pub fn new_sentinel(
        url: &str,
        sentinel: &source::SentinelSettings,
        prefix: &str,
        pool_size: u32,
        policy: Policy,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let conns = Connections::sentinel(url, sentinel, pool_size)?;
        Ok(Self::with_connections(conns, prefix, policy, clock))
    }

    /// Answer each decision only once `replicas` Redis replicas hold it, failing it as an
    /// unknown outcome when they do not confirm within `timeout` (`store.redis.replicas_acked`,
    /// `store.redis.replication_timeout`; see `acks`). Not for a Redis Cluster.
    pub fn confirm_replication(&self, replicas: u32, timeout: Duration) -> Result<(), StoreError> {
        if replicas > 0 {
            self.conns
                .confirm_replication(self.keys.acks(), replicas, timeout);
        }
        Ok(())
    }

    /// A store on the Redis Cluster that `nodes` (any of its nodes; one is enough) belong to.
    /// Every decision touches one slot (keys share a hash tag), so each script runs on one
    /// node. Nothing is connected yet.
    ///
    /// Fails when a node is not a Redis URL.
    pub fn new_cluster(
        nodes: &[&str],
        prefix: &str,
        policy: Policy,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let conns = Connections::cluster(nodes)?;
        Ok(Self::with_connections(conns, prefix, policy, clock))
    }

    /// Freeze the time every script sees at `now_ms` instead of Redis `TIME` (tests only:
    /// lets windows and leases pass without sleeping, and durations come out exact).
    #[doc(hidden)]
    pub fn freeze_time_for_tests(&self, now_ms: u64) {
        self.frozen_now_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Register this replica on the prefix, or renew its registration, and check that every
    /// live replica there may run beside it (see [`layout`]). The server calls it before it
    /// says it is listening, the sweep at every turn.
    ///
    /// Fails with [`StoreError::Incompatible`] (saying why and what to do) when a live replica
    /// of a layout this version may not run beside shares the prefix, or layout 0's limits are
    /// left on it; with the connection's error when Redis cannot be reached.
    pub async fn join(&self) -> Result<(), StoreError> {
        let registry = self.keys.replicas();
        let joined = self
            .registration
            .join(&self.conns, registry.clone(), self.now_arg())
            .await?;
        if let layout::Joined::Ok { oldest, .. } = joined {
            self.note_oldest(oldest);
        }
        let refused = match joined {
            layout::Joined::Refused(why) => Some(why),
            layout::Joined::Ok { first: true, .. }
                if !self
                    .layout_0_checked
                    .load(std::sync::atomic::Ordering::Relaxed) =>
            {
                match layout::layout_0_limits(&self.conns, self.keys.prefix()).await? {
                    Some(key) => {
                        self.registration.leave(&self.conns, registry).await;
                        Some(format!(
                            "this prefix still holds operator limits in the Redis layout of \
                             versions before December 2026 ({key}), which this version no \
                             longer reads: run the December 2026 release on the prefix once \
                             and set each such host's limits again (SetLimits, or ResetLimits to \
                             drop them), or delete those keys after noting their limits"
                        ))
                    }
                    None => {
                        self.layout_0_checked
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        None
                    }
                }
            }
            layout::Joined::Ok { .. } => None,
        };
        let mut incompatible = self.incompatible.lock().expect("layout lock");
        match refused {
            Some(why) => {
                if incompatible.as_deref() != Some(why.as_str()) {
                    tracing::error!("{why}");
                }
                *incompatible = Some(why.clone());
                Err(StoreError::Incompatible { what: why })
            }
            None => {
                *incompatible = None;
                Ok(())
            }
        }
    }

    /// Leave the prefix's registry (at shutdown).
    pub async fn leave(&self) {
        self.registration
            .leave(&self.conns, self.keys.replicas())
            .await;
    }

    /// Refuse a change while this replica may not use the prefix (see [`Self::join`]).
    /// Remember the oldest layout live beside this replica (keys wait for every replica to
    /// decide them).
    fn note_oldest(&self, oldest: Option<u32>) {
        self.keys_refused_by_layout.store(
            oldest.is_some_and(|l| l < layout::KEYS_LAYOUT),
            Ordering::Relaxed,
        );
    }

    /// Whether a Submit with a key must be refused: a replica of a layout before keys is live
    /// on the prefix.
    pub(super) fn keys_refused_by_layout(&self) -> bool {
        self.keys_refused_by_layout.load(Ordering::Relaxed)
    }

    fn refuse_if_incompatible(&self) -> Result<(), StoreError> {
        match &*self.incompatible.lock().expect("layout lock") {
            Some(why) => Err(StoreError::Incompatible { what: why.clone() }),
            None => Ok(()),
        }
    }

    /// The scripts' `now` argument: 0 means Redis `TIME`.
    fn now_arg(&self) -> u64 {
        self.frozen_now_ms.load(Ordering::Relaxed)
    }

    /// Add `host` to the hosts the sweep visits, once per replica.
    async fn register_host(&self, host: &str) -> Result<(), StoreError> {
        if self
            .registered_hosts
            .lock()
            .expect("hosts lock")
            .contains(host)
        {
            return Ok(());
        }
        let _: i64 = self
            .conns
            .command(redis::cmd("SADD").arg(self.keys.hosts()).arg(host))
            .await?;
        self.registered_hosts
            .lock()
            .expect("hosts lock")
            .insert(host.to_string());
        Ok(())
    }

    /// A Submit found `host` of another state epoch than this replica's (`seen`, empty for
    /// none): learn the store's epoch and say how the host begins under it (see
    /// [`epoch::Epoch::learn`]). A loss forgets which hosts were registered for the sweep
    /// (their set went with the rest).
    async fn learn_epoch(
        &self,
        host: &str,
        seen: &str,
        started: u64,
    ) -> Result<String, StoreError> {
        let before = self.epoch.detected();
        let init = self
            .epoch
            .learn(&self.conns, &self.keys, self.now_arg(), host, seen, started)
            .await?;
        if self.epoch.detected() != before {
            self.registered_hosts.lock().expect("hosts lock").clear();
            self.register_host(host).await?;
        }
        Ok(init)
    }

    /// The sweep's look at the store's epoch (a loss is noticed without a Submit).
    async fn check_epoch(&self) -> Result<(), StoreError> {
        if self
            .epoch
            .check(&self.conns, &self.keys, self.now_arg())
            .await?
        {
            self.registered_hosts.lock().expect("hosts lock").clear();
        }
        Ok(())
    }

    /// Start the listener that wakes this replica's Wait streams, once.
    fn ensure_listener(&self) {
        self.listener.get_or_init(|| {
            tokio::spawn(tickets::listen(
                self.conns.source(),
                self.conns.addr().to_string(),
                self.keys.clone(),
                self.watchers.clone(),
                self.listening.clone(),
            ))
        });
    }

    /// Start the listener and wait (at most a second) until it is subscribed, so a change made
    /// after this returns reaches this replica's Wait streams. Past the second, Wait streams
    /// still see every change through their periodic re-check.
    async fn listener_ready(&self) {
        self.ensure_listener();
        let mut rx = self.listening.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(1), rx.wait_for(|on| *on)).await;
    }

    /// Every host with state, from the `hosts` set.
    /// `host_id` is listed in the configuration file, or this replica registered it.
    fn configured_or_registered(&self, host_id: &str) -> bool {
        let file = self.file_limits.read().expect("limits lock").clone();
        file.table.hosts.contains_key(host_id)
            || self
                .registered_hosts
                .lock()
                .expect("hosts lock")
                .contains(host_id)
    }

    async fn hosts(&self) -> Result<Vec<String>, StoreError> {
        self.conns
            .command(redis::cmd("SMEMBERS").arg(self.keys.hosts()))
            .await
    }
}
