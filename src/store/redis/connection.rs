//! The Redis store's connections: multiplexed, kept in slots, checked before first use, and
//! every failure turned into a [`StoreError`] that says whether the call may have been applied.
//!
//! The store keeps `pool_size` connections in slots and clones one per call (no checkout, no
//! round trip). A slot is filled from a bb8 pool, which checks a connection with PING before
//! handing it out and reconnects; a new connection is asked its Redis version before any script
//! runs on it. A failure empties every slot, so the next call gets a checked connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::source::{Manager, SentinelSettings, Source};

use crate::store::StoreError;

/// Longest wait for a connection or an answer before Redis counts as unreachable.
pub(super) const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

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
    let info =
        redis::IntoConnectionInfo::into_connection_info(url).map_err(|e| StoreError::Config {
            what: format!("redis url {}: {e}", redis_address(url)),
            source: Some(Arc::new(e)),
        })?;
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
pub(super) fn cause(e: &redis::RedisError) -> String {
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

/// A failed call as a [`StoreError`] keeping the library's error: `sent` says whether the
/// command may have reached Redis. An error reply from Redis (the command ran) is a protocol
/// error; a connection that broke after the command was sent leaves its outcome unknown.
fn classify(addr: &str, e: redis::RedisError, sent: bool) -> StoreError {
    let what = format!("{addr}: {}", cause(&e));
    // A write to a connection the peer had closed (a Redis stopped cleanly) fails with a
    // broken pipe: the command never left, so it was not applied.
    // A demoted primary (a failover happened behind the address) answers READONLY, and one
    // still loading its data LOADING, before running anything: nothing was applied, and the
    // connection must be replaced, not kept.
    // A primary that `min-replicas-to-write` stops answers NOREPLICAS, also before running
    // anything.
    let demoted = e
        .code()
        .is_some_and(|c| matches!(c, "READONLY" | "LOADING" | "MASTERDOWN" | "NOREPLICAS"));
    let (answered, refused) = (
        matches!(e.kind(), redis::ErrorKind::Server(_)) && !demoted,
        e.is_connection_refusal() || is_broken_pipe(&e) || demoted,
    );
    let source = Some(Arc::new(e) as crate::store::ErrorSource);
    if answered {
        StoreError::Protocol { what, source }
    } else if !sent || refused {
        StoreError::Unreachable { what, source }
    } else {
        StoreError::ConnectionLost { what, source }
    }
}

/// Whether `e` is a write that failed on a connection the peer closed.
fn is_broken_pipe(e: &redis::RedisError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        source = s.source();
    }
    e.to_string().to_ascii_lowercase().contains("broken pipe")
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
pub(super) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// A connection for one call: multiplexed to one Redis, or to a Redis Cluster (which routes
/// each script to the node that serves its first key's slot).
#[derive(Clone)]
pub(super) enum Conn {
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

/// The connections of one store, to one Redis or one Redis Cluster.
pub(super) struct Connections {
    pool: bb8::Pool<Manager>,
    /// Where new connections go (the URL's Redis, or the primary the sentinels name).
    source: Arc<Source>,
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
    /// Set with `store.redis.replicas_acked`: every script's answer waits for the replicas.
    acks: std::sync::OnceLock<Arc<super::acks::Acks>>,
    /// Times Redis stopped answering (a call failed unanswered after one that succeeded): a
    /// failover, a restart, a stall. Nobody could renew a lease meanwhile.
    outages: AtomicU64,
    /// The last call was answered.
    answering: std::sync::atomic::AtomicBool,
}

impl Connections {
    /// Up to `pool_size` connections to the Redis at `url`; none is opened yet.
    pub(super) fn new(url: &str, pool_size: u32) -> Result<Self, StoreError> {
        let addr = redis_address(url);
        let source = Source::url(connection_info(url)?).map_err(|e| StoreError::Config {
            what: format!("redis url {addr}: {e}"),
            source: Some(Arc::new(e)),
        })?;
        Ok(Self::from_source(source, addr, pool_size))
    }

    /// Up to `pool_size` connections to the primary the sentinels of `sentinel` name, with
    /// `url`'s credentials, database and TLS; none is opened yet.
    pub(super) fn sentinel(
        url: &str,
        sentinel: &SentinelSettings,
        pool_size: u32,
    ) -> Result<Self, StoreError> {
        let addr = format!(
            "redis master {:?} (sentinels {})",
            sentinel.master,
            sentinel.nodes.join(", ")
        );
        let source =
            Source::sentinel(&connection_info(url)?, sentinel).map_err(|e| StoreError::Config {
                what: format!("{addr}: {e}"),
                source: Some(Arc::new(e)),
            })?;
        Ok(Self::from_source(source, addr, pool_size))
    }

    fn from_source(source: Source, addr: String, pool_size: u32) -> Self {
        let source = Arc::new(source);
        let last_connect_error = LastConnectError::default();
        let pool = bb8::Pool::builder()
            .max_size(pool_size.max(1))
            .connection_timeout(REDIS_TIMEOUT)
            .error_sink(Box::new(last_connect_error.clone()))
            .build_unchecked(Manager(source.clone()));
        Connections {
            pool,
            source,
            addr,
            last_connect_error,
            errors: AtomicU64::new(0),
            cluster: None,
            cluster_conn: Mutex::new(None),
            slots: (0..pool_size.max(1)).map(|_| Mutex::new(None)).collect(),
            next_slot: AtomicU64::new(0),
            acks: std::sync::OnceLock::new(),
            outages: AtomicU64::new(0),
            answering: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Times Redis stopped answering since the store was made (see `outages`).
    pub(super) fn outages(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    /// Answer every script only once `replicas` replicas of the primary hold it (within
    /// `timeout`; see [`super::acks`]); its confirmations write `key`.
    pub(super) fn confirm_replication(&self, key: String, replicas: u32, timeout: Duration) {
        let acks = super::acks::Acks::new(
            self.source.clone(),
            self.addr.clone(),
            key,
            replicas,
            timeout,
        );
        let _ = self.acks.set(Arc::new(acks));
    }

    /// Connections to the Redis Cluster that `nodes` belong to; none is opened yet.
    pub(super) fn cluster(nodes: &[&str]) -> Result<Self, StoreError> {
        let first = nodes.first().ok_or_else(|| StoreError::Config {
            what: "redis cluster: no node given".into(),
            source: None,
        })?;
        let client = redis::cluster::ClusterClient::builder(nodes.to_vec())
            .tcp_settings(tcp_settings())
            .build()
            .map_err(|e| StoreError::Config {
                what: format!("redis cluster: {e}"),
                source: Some(Arc::new(e)),
            })?;
        let mut c = Connections::new(first, 1)?;
        c.cluster = Some(client);
        Ok(c)
    }

    /// Where new connections go.
    pub(super) fn source(&self) -> Arc<Source> {
        self.source.clone()
    }

    /// `redis <host:port>` (or the master set and its sentinels), for messages.
    pub(super) fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether these are connections to a Redis Cluster (a script may then touch one slot).
    pub(super) fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// A connection from the next slot, filling the slot from the pool if it is empty (or the
    /// cluster connection); true when it was kept from before (and so may have gone stale).
    pub(super) async fn conn(&self) -> Result<(Conn, bool), StoreError> {
        if let Some(client) = &self.cluster {
            if let Some(c) = self.cluster_conn.lock().expect("cluster lock").clone() {
                return Ok((Conn::Cluster(c), true));
            }
            let what = format!("{} (cluster)", self.addr);
            let c = tokio::time::timeout(REDIS_TIMEOUT, client.get_async_connection())
                .await
                .map_err(|_| StoreError::Unreachable {
                    what: format!("{what}: timed out"),
                    source: None,
                })?
                .map_err(|e| classify(&what, e, false))?;
            *self.cluster_conn.lock().expect("cluster lock") = Some(c.clone());
            return Ok((Conn::Cluster(c), false));
        }
        let i = (self.next_slot.fetch_add(1, Ordering::Relaxed) as usize) % self.slots.len();
        if let Some(c) = self.slots[i].lock().expect("slot lock").clone() {
            return Ok((Conn::Single(c), true));
        }
        let mut c = match self.pool.get().await {
            Ok(c) => c.clone(),
            Err(bb8::RunError::User(e)) => return Err(classify(&self.addr, e, false)),
            Err(bb8::RunError::TimedOut) => {
                let why = self
                    .last_connect_error
                    .0
                    .lock()
                    .expect("sink lock")
                    .clone()
                    .unwrap_or_else(|| "timed out connecting".into());
                return Err(StoreError::Unreachable {
                    what: format!("{}: {why}", self.addr),
                    source: None,
                });
            }
        };
        // A new connection: make sure the scripts can run there before any call does.
        let info: String = tokio::time::timeout(
            REDIS_TIMEOUT,
            redis::cmd("INFO").arg("server").query_async(&mut c),
        )
        .await
        .map_err(|_| StoreError::Unreachable {
            what: format!("{}: no answer to INFO", self.addr),
            source: None,
        })?
        .map_err(|e| classify(&self.addr, e, false))?;
        check_version(&info).map_err(|why| StoreError::Incompatible {
            what: format!("{}: {why}", self.addr),
        })?;
        *self.slots[i].lock().expect("slot lock") = Some(c.clone());
        Ok((Conn::Single(c), false))
    }

    /// Run a script with a deadline. A failure empties every slot (connections to a server
    /// that went away all die together), and a call that failed on a kept connection is tried
    /// once more on a checked one, so the first call after Redis restarts does not fail. Every
    /// script is safe to repeat (its idempotency key, or a count the caller accepts twice).
    /// When either try may have been applied, the error says so, whatever the other try met.
    pub(super) async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let mut out = self.try_run(invocation).await;
        if out.is_ok()
            && let Some(acks) = self.acks.get()
            && let Err(e) = acks.confirm().await
        {
            out = Err(e);
        }
        match &out {
            Ok(_) => self.answering.store(true, Ordering::Relaxed),
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                let unanswered = matches!(
                    e,
                    StoreError::Unreachable { .. }
                        | StoreError::Timeout { .. }
                        | StoreError::ConnectionLost { .. }
                );
                if unanswered && self.answering.swap(false, Ordering::Relaxed) {
                    self.outages.fetch_add(1, Ordering::Relaxed);
                }
            }
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
                Ok(Err(e)) => classify(&self.addr, e, true),
                Err(_) => StoreError::Timeout {
                    what: format!(
                        "{}: no answer within {} ms",
                        self.addr,
                        REDIS_TIMEOUT.as_millis()
                    ),
                },
            };
            if matches!(err, StoreError::Protocol { .. }) {
                // Redis answered: the connection is fine, the answer is not.
                return Err(err);
            }
            self.forget();
            if err.may_have_applied() && ambiguous.is_none() {
                ambiguous = Some(err.clone());
            }
            if !kept {
                return Err(ambiguous.unwrap_or(err));
            }
        }
    }

    /// Empty every slot: the next call opens a checked connection.
    fn forget(&self) {
        for slot in &self.slots {
            *slot.lock().expect("slot lock") = None;
        }
        *self.cluster_conn.lock().expect("cluster lock") = None;
    }

    /// One command outside the scripts (its outcome is unknown if it fails after being sent).
    pub(super) async fn command<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, StoreError> {
        let (mut conn, _) = self.conn().await?;
        cmd.query_async(&mut conn).await.map_err(|e| {
            self.errors.fetch_add(1, Ordering::Relaxed);
            classify(&self.addr, e, true)
        })
    }

    /// Several commands sent at once, applied together (`MULTI`/`EXEC`).
    pub(super) async fn transaction<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        let (mut conn, _) = self.conn().await?;
        pipe.query_async(&mut conn).await.map_err(|e| {
            self.errors.fetch_add(1, Ordering::Relaxed);
            classify(&self.addr, e, true)
        })
    }

    /// Calls that failed since the store was made.
    pub(super) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn failures_keep_their_source_and_say_whether_they_may_have_applied() {
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let e = classify("redis x", refused, true);
        assert!(matches!(e, StoreError::Unreachable { .. }), "{e:?}");
        assert!(std::error::Error::source(&e).is_some());
        let reset =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let e = classify("redis x", reset, true);
        assert!(matches!(e, StoreError::ConnectionLost { .. }), "{e:?}");
        assert!(e.may_have_applied());
        // A write the closed connection refused never reached Redis.
        let pipe = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        let e = classify("redis x", pipe, true);
        assert!(matches!(e, StoreError::Unreachable { .. }), "{e:?}");
        assert!(!e.may_have_applied());
    }
}
