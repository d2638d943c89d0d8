//! The embedded store's rate limit counters: each call one [`RateLimitOp`], applied (and on a
//! data dir logged) under the counters' own lock.

use super::MemoryStore;
use super::ops::{RateLimitOp, RateLimitOut};
use crate::ratelimit::{CounterInfo, Hit};
use crate::store::{RateLimitCounts, RateLimitStore, StoreError};

impl RateLimitStore for MemoryStore {
    async fn rate_limit_hits(
        &self,
        domain: &str,
        max_counters: u64,
        hits: &[Hit],
    ) -> Result<RateLimitCounts, StoreError> {
        let epoch_ms = self.epoch_ms();
        let op = RateLimitOp::Hit {
            domain: domain.to_string(),
            max_counters,
            hits: hits.to_vec(),
            epoch_ms,
        };
        let RateLimitOut::Counted(counts) = self.change_rate_limit(op).await? else {
            unreachable!("a hit answers Counted")
        };
        Ok(RateLimitCounts {
            now_ms: epoch_ms,
            counts,
        })
    }

    async fn rate_limit_subtract(
        &self,
        domain: &str,
        hits: &[Hit],
    ) -> Result<RateLimitCounts, StoreError> {
        let epoch_ms = self.epoch_ms();
        let op = RateLimitOp::Subtract {
            domain: domain.to_string(),
            hits: hits.to_vec(),
            epoch_ms,
        };
        let RateLimitOut::Counted(counts) = self.change_rate_limit(op).await? else {
            unreachable!("a subtraction answers Counted")
        };
        Ok(RateLimitCounts {
            now_ms: epoch_ms,
            counts,
        })
    }

    async fn rate_limit_counters(
        &self,
        domains: &[String],
        limit: usize,
    ) -> Result<Vec<CounterInfo>, StoreError> {
        let now = self.epoch_ms();
        let part = self.rate_limits.lock().expect("rate limit lock");
        let mut out: Vec<CounterInfo> = domains
            .iter()
            .flat_map(|d| part.table.hottest(Some(d), limit, now))
            .collect();
        // Highest first; ties in (domain, key) order, the same on every store.
        out.sort_by(|a, b| (b.count, &a.domain, &a.key).cmp(&(a.count, &b.domain, &b.key)));
        out.truncate(limit);
        Ok(out)
    }

    async fn sweep_rate_limits(&self, _domains: &[String]) -> Result<(), StoreError> {
        let epoch_ms = self.epoch_ms();
        let due = self
            .rate_limits
            .lock()
            .expect("rate limit lock")
            .table
            .prune_due(epoch_ms);
        if due && self.writable().is_ok() {
            let applied = self.apply_rate_limit(RateLimitOp::Prune { epoch_ms });
            self.commit(applied).await?;
        }
        Ok(())
    }
}
