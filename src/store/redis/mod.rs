//! The Redis store: several authority replicas share one Redis and behave as one authority.
//!
//! Every operation is one Lua script from [`scripts`] on keys from [`keys`]; Rust only builds
//! arguments and reads answers. Connections are multiplexed: the store keeps `pool_size` of
//! them in slots and clones one per call (no checkout, no round trip). A slot is filled from a
//! bb8 pool, which checks a connection with PING before handing it out and reconnects; a slot
//! whose connection failed is emptied, so the next call through it gets a checked one.
//!
//! Failure: auth buckets fall back to a local [`AuthTable`] while Redis is unreachable
//! (`degraded`, a log line, Redis skipped for [`AUTH_SKIP_MS`]); a lockout earned locally is
//! checked before every call and outlives Redis' recovery. Nothing fails open.
//!
//! Tickets live in [`tickets`]: the scheduling rules run in Lua, and a ticket's change is
//! published so a Wait stream on any replica wakes at once.

pub mod keys;
pub mod scripts;
mod tickets;

pub use tickets::RedisWatch;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bb8_redis::RedisConnectionManager;
use redis::aio::MultiplexedConnection;

use super::{AuthStore, LedgerResult, LedgerStore, Policy, StoreError};
use crate::auth::{AuthCleared, AuthDecision, AuthPolicy, AuthTable, AuthVerdict, BucketRule};
use crate::clock::Clock;
use crate::ledger::{
    Authorization, AuthorizeArgs, Coverage, Decision, LedgerError, LedgerStats, Reason,
    ReservationInfo, Resolution, StepState, UnknownUsage, Usage,
};
use keys::Keys;

/// How long auth calls skip Redis after it failed, so an outage cannot stall every call.
pub const AUTH_SKIP_MS: u64 = 5_000;
/// Longest wait for a connection or an answer before Redis counts as unreachable.
const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// The oldest Redis the scripts run on: `SET ... NX GET` came in 7.0.
const MIN_REDIS_VERSION: (u32, u32) = (7, 0);

/// Whether the `INFO server` answer names a Redis the scripts run on; the error says which
/// Redis it is and what is needed.
fn check_version(info: &str) -> Result<(), String> {
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map(str::trim)
        .ok_or("redis: INFO server names no redis_version")?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if found < MIN_REDIS_VERSION {
        let (major, minor) = MIN_REDIS_VERSION;
        return Err(format!(
            "redis {version}: the store needs Redis {major}.{minor} or newer"
        ));
    }
    Ok(())
}

/// `url` parsed, with Nagle's algorithm off ([`tcp_settings`]).
fn connection_info(url: &str) -> Result<redis::ConnectionInfo, StoreError> {
    let info = redis::IntoConnectionInfo::into_connection_info(url)
        .map_err(|e| StoreError::Config(format!("redis url {}: {e}", redis_address(url))))?;
    Ok(info.set_tcp_settings(tcp_settings()))
}

/// `redis <host:port>` of a Redis URL, for messages: never the password it may hold.
pub fn redis_address(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hostport = rest.split(['/', '?']).next().unwrap_or(rest);
    format!("redis {hostport}")
}

/// What went wrong with a Redis call, in words an operator acts on.
fn cause(e: &redis::RedisError) -> String {
    if e.is_connection_refusal() {
        "connection refused".into()
    } else if e.is_timeout() {
        "timed out".into()
    } else if e.kind() == redis::ErrorKind::AuthenticationFailed
        || e.code().is_some_and(|c| c == "NOAUTH" || c == "WRONGPASS")
    {
        format!("authentication failed ({e})")
    } else {
        e.to_string()
    }
}

/// A failed call as a [`StoreError`]: `sent` says whether the command may have reached Redis.
/// An error reply from Redis (the command ran) is a protocol error; a connection that broke
/// or went quiet after the command was sent leaves its outcome unknown.
fn classify(addr: &str, e: &redis::RedisError, sent: bool) -> StoreError {
    let what = format!("{addr}: {}", cause(e));
    if matches!(e.kind(), redis::ErrorKind::Server(_)) {
        StoreError::Protocol(what)
    } else if !sent || e.is_connection_refusal() {
        StoreError::Unreachable(what)
    } else {
        StoreError::OutcomeUnknown(what)
    }
}

/// Keeps the last error of the connections the pool tried to open, so that a pool that gave up
/// waiting says why (bb8 itself only says it timed out).
#[derive(Debug, Clone, Default)]
struct LastConnectError(Arc<Mutex<Option<String>>>);

impl bb8::ErrorSink<redis::RedisError> for LastConnectError {
    fn sink(&self, e: redis::RedisError) {
        *self.0.lock().expect("sink lock") = Some(cause(&e));
    }
    fn boxed_clone(&self) -> Box<dyn bb8::ErrorSink<redis::RedisError>> {
        Box::new(self.clone())
    }
}

/// Nagle's algorithm off: calls share a connection, and with it on a small write can wait
/// for the answer to the one before.
fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// A connection for one call: multiplexed to one Redis, or to a Redis Cluster (which routes
/// each script to the node that serves its first key's slot).
#[derive(Clone)]
enum Conn {
    Single(MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

pub struct RedisStore {
    pool: bb8::Pool<RedisConnectionManager>,
    /// `redis <host:port>`, for messages (never the password).
    addr: String,
    /// Why the pool last failed to open a connection.
    last_connect_error: LastConnectError,
    /// Calls that failed, for `admission_store_errors_total`.
    errors: AtomicU64,
    /// Set for a Redis Cluster: then connections come from here and `pool` is not used.
    cluster: Option<redis::cluster::ClusterClient>,
    cluster_conn: Mutex<Option<redis::cluster_async::ClusterConnection>>,
    /// Multiplexed connections in use, taken round robin; `None` until (re)filled from `pool`.
    slots: Vec<Mutex<Option<MultiplexedConnection>>>,
    next_slot: AtomicU64,
    keys: Keys,
    policy: Policy,
    /// The replica's own clock: only for the local fallback and the skip window.
    clock: Arc<dyn Clock>,
    /// The fallback buckets. A `std` mutex: nothing asynchronous happens while it is held.
    local_auth: Mutex<AuthTable>,
    /// Until when (on `clock`) auth calls go straight to the local buckets.
    skip_redis_until: AtomicU64,
    /// The time every script sees, in ms; 0 (outside tests) = Redis `TIME`.
    frozen_now_ms: AtomicU64,
    auth_attempt: redis::Script,
    auth_reset: redis::Script,
    auth_peek: redis::Script,
    authorize: redis::Script,
    settle: redis::Script,
    resolve: redis::Script,
    open_reservations: redis::Script,
    /// Hosts this replica has registered in the `hosts` set (for the sweep), so the set is
    /// written once per host and replica, not once per call.
    registered_hosts: Mutex<std::collections::HashSet<String>>,
    submit: redis::Script,
    park: redis::Script,
    unpark: redis::Script,
    renew: redis::Script,
    release: redis::Script,
    ticket: redis::Script,
    stats: redis::Script,
    list: redis::Script,
    /// Each host's limits as the scripts read them, computed once.
    default_limits_args: (String, String),
    limits_args: std::collections::HashMap<String, (String, String)>,
    url: String,
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
        let addr = redis_address(url);
        let manager = RedisConnectionManager::new(connection_info(url)?)
            .map_err(|e| StoreError::Config(format!("redis url {addr}: {e}")))?;
        let last_connect_error = LastConnectError::default();
        // This replica's limits are newer than those of every replica started before it: the
        // wall clock in µs at start orders them (see scripts::TICKET_CORE, one set of limits).
        let version = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let default_limits_args = tickets::limits_args(&policy.limits.default, version);
        let limits_args = policy
            .limits
            .hosts
            .iter()
            .map(|(h, l)| (h.clone(), tickets::limits_args(l, version)))
            .collect();
        let pool = bb8::Pool::builder()
            .max_size(pool_size.max(1))
            .connection_timeout(REDIS_TIMEOUT)
            .error_sink(Box::new(last_connect_error.clone()))
            .build_unchecked(manager);
        Ok(RedisStore {
            pool,
            addr,
            last_connect_error,
            errors: AtomicU64::new(0),
            cluster: None,
            cluster_conn: Mutex::new(None),
            slots: (0..pool_size.max(1)).map(|_| Mutex::new(None)).collect(),
            next_slot: AtomicU64::new(0),
            keys: Keys::new(prefix),
            local_auth: Mutex::new(AuthTable::new(policy.auth.local_max_keys)),
            policy,
            clock,
            skip_redis_until: AtomicU64::new(0),
            frozen_now_ms: AtomicU64::new(0),
            auth_attempt: redis::Script::new(scripts::AUTH_ATTEMPT),
            auth_reset: redis::Script::new(scripts::AUTH_RESET),
            auth_peek: redis::Script::new(scripts::AUTH_PEEK),
            authorize: redis::Script::new(&scripts::authorize()),
            settle: redis::Script::new(&scripts::settle()),
            resolve: redis::Script::new(&scripts::resolve()),
            open_reservations: redis::Script::new(&scripts::open_reservations()),
            registered_hosts: Mutex::default(),
            submit: redis::Script::new(&scripts::submit()),
            park: redis::Script::new(&scripts::park()),
            unpark: redis::Script::new(&scripts::unpark()),
            renew: redis::Script::new(&scripts::renew()),
            release: redis::Script::new(&scripts::release()),
            ticket: redis::Script::new(&scripts::ticket()),
            stats: redis::Script::new(&scripts::stats()),
            list: redis::Script::new(&scripts::list()),
            default_limits_args,
            limits_args,
            url: url.to_string(),
            watchers: Arc::default(),
            listener: std::sync::OnceLock::new(),
            listening: tokio::sync::watch::Sender::new(false),
        })
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
        let first = nodes
            .first()
            .ok_or_else(|| StoreError::Config("redis cluster: no node given".into()))?;
        let client = redis::cluster::ClusterClient::builder(nodes.to_vec())
            .tcp_settings(tcp_settings())
            .build()
            .map_err(|e| StoreError::Config(format!("redis cluster: {e}")))?;
        let mut store = RedisStore::new(first, prefix, 1, policy, clock)?;
        store.cluster = Some(client);
        Ok(store)
    }

    /// Freeze the time every script sees at `now_ms` instead of Redis `TIME` (tests only:
    /// lets windows and leases pass without sleeping, and durations come out exact).
    #[doc(hidden)]
    pub fn freeze_time_for_tests(&self, now_ms: u64) {
        self.frozen_now_ms.store(now_ms, Ordering::Relaxed);
    }

    /// The scripts' `now` argument: 0 means Redis `TIME`.
    fn now_arg(&self) -> u64 {
        self.frozen_now_ms.load(Ordering::Relaxed)
    }

    /// A connection from the next slot, filling the slot from the pool if it is empty (or the
    /// cluster connection); true when it was kept from before (and so may have gone stale).
    async fn conn(&self) -> Result<(Conn, bool), StoreError> {
        if let Some(client) = &self.cluster {
            if let Some(c) = self.cluster_conn.lock().expect("cluster lock").clone() {
                return Ok((Conn::Cluster(c), true));
            }
            let c = tokio::time::timeout(REDIS_TIMEOUT, client.get_async_connection())
                .await
                .map_err(|_| {
                    StoreError::Unreachable(format!("{} (cluster): timed out", self.addr))
                })?
                .map_err(|e| classify(&format!("{} (cluster)", self.addr), &e, false))?;
            *self.cluster_conn.lock().expect("cluster lock") = Some(c.clone());
            return Ok((Conn::Cluster(c), false));
        }
        let i = (self.next_slot.fetch_add(1, Ordering::Relaxed) as usize) % self.slots.len();
        if let Some(c) = self.slots[i].lock().expect("slot lock").clone() {
            return Ok((Conn::Single(c), true));
        }
        let mut c = match self.pool.get().await {
            Ok(c) => c.clone(),
            Err(bb8::RunError::User(e)) => return Err(classify(&self.addr, &e, false)),
            Err(bb8::RunError::TimedOut) => {
                let why = self
                    .last_connect_error
                    .0
                    .lock()
                    .expect("sink lock")
                    .clone()
                    .unwrap_or_else(|| "timed out connecting".into());
                return Err(StoreError::Unreachable(format!("{}: {why}", self.addr)));
            }
        };
        // A new connection: make sure the scripts can run there before any call does.
        let info: String = tokio::time::timeout(
            REDIS_TIMEOUT,
            redis::cmd("INFO").arg("server").query_async(&mut c),
        )
        .await
        .map_err(|_| StoreError::Unreachable(format!("{}: no answer to INFO", self.addr)))?
        .map_err(|e| classify(&self.addr, &e, false))?;
        check_version(&info)
            .map_err(|why| StoreError::Unreachable(format!("{}: {why}", self.addr)))?;
        *self.slots[i].lock().expect("slot lock") = Some(c.clone());
        Ok((Conn::Single(c), false))
    }

    /// Run a script with a deadline. A failure empties every slot (connections to a server
    /// that went away all die together), and a call that failed on a kept connection is tried
    /// once more on a checked one, so the first call after Redis restarts does not fail. Every
    /// script is safe to repeat (its idempotency key, or a count the caller accepts twice).
    /// When either try may have been applied, the error says so (OutcomeUnknown), whatever the
    /// other try met.
    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let out = self.try_run(invocation).await;
        if out.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        out
    }

    async fn try_run<T: redis::FromRedisValue>(
        &self,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let mut ambiguous: Option<StoreError> = None;
        loop {
            let (mut conn, kept) = match self.conn().await {
                Ok(c) => c,
                Err(e) => return Err(ambiguous.unwrap_or(e)),
            };
            let err = match tokio::time::timeout(REDIS_TIMEOUT, invocation.invoke_async(&mut conn))
                .await
            {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => classify(&self.addr, &e, true),
                Err(_) => StoreError::OutcomeUnknown(format!(
                    "{}: no answer within {} ms",
                    self.addr,
                    REDIS_TIMEOUT.as_millis()
                )),
            };
            if matches!(err, StoreError::Protocol(_)) {
                // Redis answered: the connection is fine, the answer is not.
                return Err(err);
            }
            for slot in &self.slots {
                *slot.lock().expect("slot lock") = None;
            }
            *self.cluster_conn.lock().expect("cluster lock") = None;
            if err.may_have_applied() && ambiguous.is_none() {
                ambiguous = Some(err.clone());
            }
            if !kept {
                return Err(ambiguous.unwrap_or(err));
            }
        }
    }

    /// A failed command outside the scripts (sent: its outcome is unknown).
    pub(super) fn failed(&self, e: &redis::RedisError) -> StoreError {
        self.errors.fetch_add(1, Ordering::Relaxed);
        classify(&self.addr, e, true)
    }

    /// Calls that failed since the store was made.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// The fallback around the shared buckets: a lockout earned locally is checked
    /// first; Redis decides unless it failed within the last [`AUTH_SKIP_MS`]; otherwise (and
    /// when it fails now) the local table does, `degraded`. `peek` counts nothing.
    async fn auth_decide(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
        peek: bool,
    ) -> Result<AuthDecision, StoreError> {
        let now = self.clock.now_ms();
        let local_lockout = self
            .local_auth
            .lock()
            .expect("auth lock")
            .locked_until(endpoint, identity, now);
        let skipping = now < self.skip_redis_until.load(Ordering::Relaxed);
        if let Some(until) = local_lockout {
            return Ok(AuthDecision {
                verdict: AuthVerdict::LockedOut,
                remaining: 0,
                retry_after_ms: until - now,
                // Decided locally; `degraded` says whether the shared store is being skipped.
                degraded: skipping,
            });
        }
        if !skipping {
            let shared = if peek {
                self.shared_peek(endpoint, identity, rule).await
            } else {
                self.shared_attempt(endpoint, identity, rule).await
            };
            match shared {
                Ok(d) => return Ok(d),
                Err(e) => {
                    tracing::warn!("Redis auth rate limiter unavailable, using local: {e}");
                    self.skip_redis_until
                        .store(now + AUTH_SKIP_MS, Ordering::Relaxed);
                }
            }
        }
        let mut table = self.local_auth.lock().expect("auth lock");
        let mut d = if peek {
            table.peek(endpoint, identity, rule, now)
        } else {
            table.attempt(endpoint, identity, rule, now)
        };
        d.degraded = true;
        Ok(d)
    }

    async fn shared_peek(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> Result<AuthDecision, StoreError> {
        let mut inv = self.auth_peek.prepare_invoke();
        inv.key(self.keys.auth_bucket(endpoint, identity))
            .key(self.keys.auth_lockout(endpoint, identity))
            .arg(self.now_arg());
        let (lockout_left, count, window_left): (u64, u32, u64) = self.run(inv).await?;
        Ok(if lockout_left > 0 {
            AuthDecision {
                verdict: AuthVerdict::LockedOut,
                remaining: 0,
                retry_after_ms: lockout_left,
                degraded: false,
            }
        } else {
            // Times relative to Redis' now: the window ends `window_left` from 0.
            let count = if window_left > 0 { count } else { 0 };
            crate::auth::peek_window(rule, count, window_left, 0)
        })
    }

    async fn shared_attempt(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> Result<AuthDecision, StoreError> {
        let mut inv = self.auth_attempt.prepare_invoke();
        inv.key(self.keys.auth_bucket(endpoint, identity))
            .key(self.keys.auth_lockout(endpoint, identity))
            .arg(rule.max_attempts)
            .arg(rule.window_ms)
            .arg(rule.lockout_ms)
            .arg(self.now_arg());
        let (verdict, remaining, retry_after_ms): (u8, u32, u64) = self.run(inv).await?;
        let verdict = match verdict {
            0 => AuthVerdict::Allowed,
            1 => AuthVerdict::LockedOut,
            2 => AuthVerdict::AttemptsExhausted,
            v => {
                return Err(StoreError::Protocol(format!(
                    "redis: auth script answered verdict {v}"
                )));
            }
        };
        Ok(AuthDecision {
            verdict,
            remaining,
            retry_after_ms,
            degraded: false,
        })
    }
}

impl RedisStore {
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
        let (mut conn, _) = self.conn().await?;
        let added: Result<i64, _> = redis::cmd("SADD")
            .arg(self.keys.hosts())
            .arg(host)
            .query_async(&mut conn)
            .await;
        added.map_err(|e| self.failed(&e))?;
        self.registered_hosts
            .lock()
            .expect("hosts lock")
            .insert(host.to_string());
        Ok(())
    }

    /// Start the listener that wakes this replica's Wait streams, once.
    fn ensure_listener(&self) {
        self.listener.get_or_init(|| {
            tokio::spawn(tickets::listen(
                self.url.clone(),
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
    async fn hosts(&self) -> Result<Vec<String>, StoreError> {
        let (mut conn, _) = self.conn().await?;
        let hosts: Result<Vec<String>, _> = redis::cmd("SMEMBERS")
            .arg(self.keys.hosts())
            .query_async(&mut conn)
            .await;
        hosts.map_err(|e| self.failed(&e))
    }

    /// Housekeeping of a host's ledger, and up to `limit` of its open reservations.
    async fn open_steps(
        &self,
        host: &str,
        limit: usize,
    ) -> Result<(u64, u64, u64, Vec<ReservationInfo>), StoreError> {
        let mut inv = self.open_reservations.prepare_invoke();
        inv.key(self.keys.ledger_reserved(host))
            .key(self.keys.ledger_uncertain(host))
            .arg(self.policy.resources.reservation_ttl_ms)
            .arg(self.keys.ledger_run_prefix(host))
            .arg(limit)
            .arg(self.now_arg());
        let out: Vec<String> = self.run(inv).await?;
        let num = |s: &str| s.parse::<u64>().unwrap_or(0);
        if out.len() < 3 || !(out.len() - 3).is_multiple_of(9) {
            return Err(StoreError::Protocol(
                "redis: malformed reservation listing".into(),
            ));
        }
        let now = num(&out[0]);
        let rows = out[3..]
            .chunks(9)
            .map(|r| ReservationInfo {
                run_id: r[0].clone(),
                step: r[1].parse().unwrap_or(0),
                state: if r[2] == "U" {
                    StepState::Uncertain
                } else {
                    StepState::Reserved
                },
                subject: r[3].clone(),
                account_id: (!r[4].is_empty()).then(|| r[4].clone()),
                model: r[5].clone(),
                reserved_tokens: num(&r[6]),
                reserved_cost: num(&r[7]),
                age_ms: now.saturating_sub(num(&r[8])),
            })
            .collect();
        Ok((now, num(&out[1]), num(&out[2]), rows))
    }
}

fn opt_num(s: &str) -> Option<u64> {
    if s.is_empty() { None } else { s.parse().ok() }
}

fn opt_arg(v: Option<u64>) -> String {
    v.map_or_else(String::new, |n| n.to_string())
}

impl LedgerStore for RedisStore {
    async fn authorize(&self, host_id: &str, args: AuthorizeArgs) -> LedgerResult<Authorization> {
        self.register_host(host_id).await?;
        let policy = &self.policy.resources;
        let budget = policy.effective(&args.subject, args.account_id.as_deref());
        let allowance = args
            .account_id
            .as_deref()
            .and_then(|a| policy.allowances.get(a));
        let window_key = match (&args.account_id, allowance) {
            (Some(a), Some(_)) => format!("{}{a}", self.keys.ledger_window_prefix(host_id)),
            // Any key of the host, so the script's keys stay on one slot.
            _ => self.keys.ledger_stats(host_id),
        };
        let mut inv = self.authorize.prepare_invoke();
        inv.key(format!(
            "{}{}",
            self.keys.ledger_run_prefix(host_id),
            args.run_id
        ))
        .key(window_key)
        .key(self.keys.ledger_reserved(host_id))
        .key(self.keys.ledger_uncertain(host_id))
        .key(self.keys.ledger_stats(host_id))
        .arg(&args.run_id)
        .arg(args.step)
        .arg(&args.subject)
        .arg(args.account_id.as_deref().unwrap_or(""))
        .arg(&args.model)
        .arg(args.requested_output_tokens)
        .arg(args.estimated_input_tokens)
        .arg(args.estimated_cost)
        .arg(opt_arg(budget.max_tokens))
        .arg(opt_arg(budget.max_cost))
        .arg(budget.unknown_usage.map_or("", UnknownUsage::name))
        .arg(opt_arg(allowance.and_then(|a| a.tokens)))
        .arg(opt_arg(allowance.and_then(|a| a.cost)))
        .arg(opt_arg(allowance.map(|a| a.window_ms)))
        .arg(policy.reservation_ttl_ms)
        .arg(policy.run_retention_ms)
        .arg(self.keys.ledger_run_prefix(host_id))
        .arg(self.now_arg());
        let out: Vec<String> = self.run(inv).await?;
        match out.first().map(String::as_str) {
            Some("conflict") => {
                let field = if out.get(1).map(String::as_str) == Some("subject") {
                    "subject"
                } else {
                    "account_id"
                };
                return Ok(Err(LedgerError::RunConflict { field }));
            }
            Some("ok") if out.len() == 7 => {}
            _ => {
                return Err(StoreError::Protocol(format!(
                    "redis: authorize answered {out:?}"
                )));
            }
        }
        // A reply this authority does not understand is an error of its own, never a guess.
        let strange = || StoreError::Protocol(format!("redis: authorize answered {out:?}"));
        let decision = match out[1].as_str() {
            "A" => Decision::Allow,
            "U" => Decision::Unknown,
            "D" => Decision::Deny,
            _ => return Err(strange()),
        };
        let reason = match out[2].as_str() {
            "RESOURCE_LIMIT" => Some(Reason::ResourceLimit),
            "QUOTA_EXHAUSTED" => Some(Reason::QuotaExhausted),
            "RESOURCE_USAGE_UNKNOWN" => Some(Reason::ResourceUsageUnknown),
            "" => None,
            _ => return Err(strange()),
        };
        Ok(Ok(Authorization {
            decision,
            reason,
            granted_output_tokens: out[3].parse().map_err(|_| strange())?,
            remaining_tokens: opt_num(&out[4]),
            remaining_cost: opt_num(&out[5]),
            replay: out[6] == "1",
        }))
    }

    async fn settle(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        usage: Usage,
    ) -> LedgerResult<bool> {
        let policy = &self.policy.resources;
        let coverage = match usage.coverage {
            Coverage::Complete => "C",
            Coverage::Partial => "P",
            Coverage::Unknown => "U",
        };
        let mut inv = self.settle.prepare_invoke();
        inv.key(format!("{}{run_id}", self.keys.ledger_run_prefix(host_id)))
            .key(self.keys.ledger_reserved(host_id))
            .key(self.keys.ledger_uncertain(host_id))
            .key(self.keys.ledger_stats(host_id))
            .arg(run_id)
            .arg(step)
            .arg(usage.input_tokens)
            .arg(usage.output_tokens)
            .arg(usage.cost)
            .arg(coverage)
            .arg(self.keys.ledger_window_prefix(host_id))
            .arg(policy.reservation_ttl_ms)
            .arg(policy.run_retention_ms)
            .arg(self.keys.ledger_run_prefix(host_id))
            .arg(self.now_arg());
        let out: Vec<String> = self.run(inv).await?;
        Ok(match out.first().map(String::as_str) {
            Some("ok") => Ok(false),
            Some("replay") => Ok(true),
            Some("not_authorized") => Err(LedgerError::NotAuthorized),
            Some("conflict") => Err(LedgerError::SettleConflict),
            Some("resolved") => Err(LedgerError::AlreadyResolved),
            _ => {
                return Err(StoreError::Protocol(format!(
                    "redis: settle answered {out:?}"
                )));
            }
        })
    }

    async fn resolve(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        resolution: Resolution,
    ) -> LedgerResult<()> {
        let policy = &self.policy.resources;
        let mut inv = self.resolve.prepare_invoke();
        inv.key(format!("{}{run_id}", self.keys.ledger_run_prefix(host_id)))
            .key(self.keys.ledger_reserved(host_id))
            .key(self.keys.ledger_uncertain(host_id))
            .key(self.keys.ledger_stats(host_id))
            .arg(run_id)
            .arg(step)
            .arg(match resolution {
                Resolution::Consumed => "X",
                Resolution::Released => "Y",
            })
            .arg(self.keys.ledger_window_prefix(host_id))
            .arg(policy.reservation_ttl_ms)
            .arg(policy.run_retention_ms)
            .arg(self.keys.ledger_run_prefix(host_id))
            .arg(self.now_arg());
        let out: Vec<String> = self.run(inv).await?;
        Ok(match out.first().map(String::as_str) {
            Some("ok") => Ok(()),
            Some("no_such") => Err(LedgerError::NoSuchReservation),
            Some("not_uncertain") => Err(LedgerError::NotUncertain {
                state: crate::ledger::state_name(match out.get(1).map(String::as_str) {
                    Some("R") => StepState::Reserved,
                    Some("X") => StepState::Resolved(Resolution::Consumed),
                    Some("Y") => StepState::Resolved(Resolution::Released),
                    Some("C") => StepState::Closed,
                    _ => StepState::Settled(Usage {
                        input_tokens: 0,
                        output_tokens: 0,
                        cost: 0,
                        coverage: Coverage::Complete,
                    }),
                }),
            }),
            _ => {
                return Err(StoreError::Protocol(format!(
                    "redis: resolve answered {out:?}"
                )));
            }
        })
    }

    async fn reservations(
        &self,
        host_id: &str,
        limit: usize,
    ) -> Result<(Vec<ReservationInfo>, bool), StoreError> {
        if limit == 0 {
            return Ok((Vec::new(), false));
        }
        let (_, _, _, mut rows) = self.open_steps(host_id, limit).await?;
        let more = rows.len() > limit;
        rows.truncate(limit);
        Ok((rows, more))
    }

    async fn ledger_stats(&self, host_id: &str) -> Result<LedgerStats, StoreError> {
        let (_, uncertain, reserved, _) = self.open_steps(host_id, 0).await?;
        let (mut conn, _) = self.conn().await?;
        let counters: Result<std::collections::HashMap<String, u64>, _> = redis::cmd("HGETALL")
            .arg(self.keys.ledger_stats(host_id))
            .query_async(&mut conn)
            .await;
        let c = counters.map_err(|e| self.failed(&e))?;
        let get = |k: &str| c.get(k).copied().unwrap_or(0);
        Ok(LedgerStats {
            open: uncertain + reserved,
            uncertain,
            allowed: get("allowed"),
            denied: get("denied"),
            deferred: get("deferred"),
            settled: get("settled"),
        })
    }

    async fn sweep_ledger(&self) -> Result<(), StoreError> {
        for host in self.hosts().await? {
            self.open_steps(&host, 0).await?;
        }
        Ok(())
    }
}

impl AuthStore for RedisStore {
    fn auth_policy(&self) -> &AuthPolicy {
        &self.policy.auth
    }

    async fn auth_attempt(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> Result<AuthDecision, StoreError> {
        self.auth_decide(endpoint, identity, rule, false).await
    }

    async fn auth_peek(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> Result<AuthDecision, StoreError> {
        self.auth_decide(endpoint, identity, rule, true).await
    }

    async fn auth_reset(&self, endpoint: &str, identity: &str) -> Result<AuthCleared, StoreError> {
        let now = self.clock.now_ms();
        let local = self
            .local_auth
            .lock()
            .expect("auth lock")
            .reset(endpoint, identity, now);
        let mut inv = self.auth_reset.prepare_invoke();
        inv.key(self.keys.auth_bucket(endpoint, identity))
            .key(self.keys.auth_lockout(endpoint, identity))
            .arg(self.now_arg());
        let (existed, was_locked): (u8, u8) = self.run(inv).await?;
        Ok(AuthCleared {
            existed: existed == 1 || local.existed,
            was_locked: was_locked == 1 || local.was_locked,
        })
    }

    fn auth_degraded(&self) -> bool {
        self.clock.now_ms() < self.skip_redis_until.load(Ordering::Relaxed)
    }

    async fn sweep_auth(&self) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        self.local_auth.lock().expect("auth lock").prune(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::check_version;

    #[test]
    fn redis_older_than_7_0_is_refused_by_name() {
        assert_eq!(
            check_version("# Server\r\nredis_version:7.0.15\r\n"),
            Ok(())
        );
        assert_eq!(
            check_version("redis_version:7.2.4\nredis_mode:standalone"),
            Ok(())
        );
        assert_eq!(check_version("redis_version:8.0.0"), Ok(()));
        assert_eq!(
            check_version("redis_version:6.2.14\r\n"),
            Err("redis 6.2.14: the store needs Redis 7.0 or newer".to_string())
        );
        assert!(check_version("# Server\r\nredis_mode:standalone").is_err());
    }
}
