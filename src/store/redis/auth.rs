//! Auth buckets on Redis: the [`AuthStore`] part of [`RedisStore`], and its local fallback.
//!
//! While Redis is unreachable, attempts are decided by a local [`crate::auth::AuthTable`]
//! (`degraded`, a log line, Redis skipped for [`AUTH_SKIP_MS`]); a lockout earned locally is
//! checked before every call and outlives Redis' recovery. Nothing fails open.

use std::sync::atomic::Ordering;

use super::{RedisStore, codes};
use crate::auth::{AuthCleared, AuthDecision, AuthPolicy, AuthVerdict, BucketRule};
use crate::store::{AuthStore, StoreError};

/// How long auth calls skip Redis after it failed, so an outage cannot stall every call.
pub const AUTH_SKIP_MS: u64 = 5_000;

impl RedisStore {
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
                Ok(d) => {
                    self.auth_fallback.store(false, Ordering::Relaxed);
                    return Ok(d);
                }
                Err(e) => {
                    tracing::warn!("Redis auth rate limiter unavailable, using local: {e}");
                    self.skip_redis_until
                        .store(now + AUTH_SKIP_MS, Ordering::Relaxed);
                    self.auth_fallback.store(true, Ordering::Relaxed);
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
        let (lockout_left, count, window_left): (u64, u32, u64) = self.conns.run(inv).await?;
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
        let (verdict, remaining, retry_after_ms) = self
            .auth_batcher
            .attempt(
                self.keys.auth_bucket(endpoint, identity),
                self.keys.auth_lockout(endpoint, identity),
                rule,
                self.now_arg(),
            )
            .await?;
        let verdict = codes::auth_verdict(verdict).ok_or_else(|| {
            StoreError::protocol(format!("redis: auth script answered verdict {verdict}"))
        })?;
        Ok(AuthDecision {
            verdict,
            remaining,
            retry_after_ms,
            degraded: false,
        })
    }
}

impl RedisStore {
    /// Auth attempts sent in batches of two or more, and how many such batches, since the
    /// store was made.
    pub fn auth_batched_counts(&self) -> (u64, u64) {
        self.auth_batcher.batched()
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
        let (existed, was_locked): (u8, u8) = self.conns.run(inv).await?;
        Ok(AuthCleared {
            existed: existed == 1 || local.existed,
            was_locked: was_locked == 1 || local.was_locked,
        })
    }

    /// From a failed auth call until Redis answers again, not only during the skip window:
    /// while Redis stays down the next auth call falls back again.
    fn auth_degraded(&self) -> bool {
        self.auth_fallback.load(Ordering::Relaxed)
    }

    async fn sweep_auth(&self) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        self.local_auth.lock().expect("auth lock").prune(now);
        // The sweep reaches here only when Redis answered its ticket calls: check it is back.
        if self.auth_fallback.load(Ordering::Relaxed) {
            let _: String = self.conns.command(&redis::cmd("PING")).await?;
            self.auth_fallback.store(false, Ordering::Relaxed);
        }
        Ok(())
    }
}
