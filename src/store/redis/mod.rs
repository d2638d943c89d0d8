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
//! This version holds the auth buckets; tickets and reservations follow, and only then can the
//! server run on it.

pub mod keys;
pub mod scripts;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bb8_redis::RedisConnectionManager;
use redis::aio::MultiplexedConnection;

use super::{AuthStore, Policy, StoreError};
use crate::auth::{AuthCleared, AuthDecision, AuthPolicy, AuthTable, AuthVerdict, BucketRule};
use crate::clock::Clock;
use keys::Keys;

/// How long auth calls skip Redis after it failed, so an outage cannot stall every call.
pub const AUTH_SKIP_MS: u64 = 5_000;
/// Longest wait for a connection or an answer before Redis counts as unreachable.
const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

pub struct RedisStore {
    pool: bb8::Pool<RedisConnectionManager>,
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
        let manager = RedisConnectionManager::new(url)
            .map_err(|e| StoreError(format!("redis url {url:?}: {e}")))?;
        let pool = bb8::Pool::builder()
            .max_size(pool_size.max(1))
            .connection_timeout(REDIS_TIMEOUT)
            .build_unchecked(manager);
        Ok(RedisStore {
            pool,
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
        })
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

    /// A connection from the next slot, filling the slot from the pool if it is empty; true
    /// when it was already in the slot (and so may have gone stale since).
    async fn conn(&self) -> Result<(MultiplexedConnection, bool), StoreError> {
        let i = (self.next_slot.fetch_add(1, Ordering::Relaxed) as usize) % self.slots.len();
        if let Some(c) = self.slots[i].lock().expect("slot lock").clone() {
            return Ok((c, true));
        }
        let c = self
            .pool
            .get()
            .await
            .map_err(|e| StoreError(format!("redis: {e}")))?
            .clone();
        *self.slots[i].lock().expect("slot lock") = Some(c.clone());
        Ok((c, false))
    }

    /// Run a script with a deadline; any failure is the store being unreachable. A failure
    /// empties every slot (connections to a server that went away all die together), and a
    /// call that failed on a kept connection is tried once more on a checked one, so the first
    /// call after Redis restarts does not fail.
    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        loop {
            let (mut conn, kept) = self.conn().await?;
            let err = match tokio::time::timeout(REDIS_TIMEOUT, invocation.invoke_async(&mut conn))
                .await
            {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => format!("redis: {e}"),
                Err(_) => format!("redis: no answer within {} ms", REDIS_TIMEOUT.as_millis()),
            };
            for slot in &self.slots {
                *slot.lock().expect("slot lock") = None;
            }
            if !kept {
                return Err(StoreError(err));
            }
        }
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
                return Err(StoreError(format!(
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
        let now = self.clock.now_ms();
        let local_lockout = self
            .local_auth
            .lock()
            .expect("auth lock")
            .locked_until(endpoint, identity, now);
        if let Some(until) = local_lockout {
            return Ok(AuthDecision {
                verdict: AuthVerdict::LockedOut,
                remaining: 0,
                retry_after_ms: until - now,
                degraded: false,
            });
        }
        if now >= self.skip_redis_until.load(Ordering::Relaxed) {
            match self.shared_attempt(endpoint, identity, rule).await {
                Ok(d) => return Ok(d),
                Err(e) => {
                    tracing::warn!("Redis auth rate limiter unavailable, using local: {e}");
                    self.skip_redis_until
                        .store(now + AUTH_SKIP_MS, Ordering::Relaxed);
                }
            }
        }
        let mut d = self
            .local_auth
            .lock()
            .expect("auth lock")
            .attempt(endpoint, identity, rule, now);
        d.degraded = true;
        Ok(d)
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

    async fn sweep_auth(&self) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        self.local_auth.lock().expect("auth lock").prune(now);
        Ok(())
    }
}
