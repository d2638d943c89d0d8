//! Rate limit counters on Redis: the [`RateLimitStore`] part of [`RedisStore`]. One script
//! counts every hit of a ShouldRateLimit on its domain's keys at once (one hash tag per domain,
//! so the script runs on one slot; concurrent requests of a domain share a call, see
//! [`super::rate_limit_batch`]), on Redis' clock, so every replica counts in the same
//! windows. A failed call is an error, never a count skipped: the service answers
//! UNAVAILABLE.

use super::{RedisStore, rate_limit_batch};
use crate::ratelimit::{CounterInfo, Hit, Unit};
use crate::store::{RateLimitCounts, RateLimitStore, StoreError};

/// Live counters read per domain for the hottest list.
const HOTTEST_SAMPLE: usize = 10_000;

impl RedisStore {
    /// `hits` with their counts changed by `signed` (negative: subtracted), in one script.
    async fn rate_limit_call(
        &self,
        domain: &str,
        max_counters: u64,
        hits: &[Hit],
        signed: impl Iterator<Item = i64>,
    ) -> Result<RateLimitCounts, StoreError> {
        self.refuse_if_incompatible()?;
        let prefix = self.keys.rate_limit_counter_prefix(domain);
        let request = rate_limit_batch::Request {
            tally: self.keys.rate_limit_live(domain),
            hits: hits
                .iter()
                .zip(signed)
                .map(|(h, n)| (format!("{prefix}{}", h.key), h.unit.seconds(), n))
                .collect(),
            max: max_counters,
            now: self.now_arg(),
        };
        let answer = self.rate_limit_batcher.hits(request).await?;
        if answer.len() != hits.len() + 1 {
            return Err(StoreError::protocol(format!(
                "redis: the rate limit script answered {} values for {} hits",
                answer.len(),
                hits.len()
            )));
        }
        Ok(RateLimitCounts {
            now_ms: answer[0].max(0) as u64,
            counts: answer[1..].iter().map(|&c| u64::try_from(c).ok()).collect(),
        })
    }
}

impl RateLimitStore for RedisStore {
    async fn rate_limit_hits(
        &self,
        domain: &str,
        max_counters: u64,
        hits: &[Hit],
    ) -> Result<RateLimitCounts, StoreError> {
        let signed = hits
            .iter()
            .map(|h| i64::try_from(h.addend).unwrap_or(i64::MAX));
        self.rate_limit_call(domain, max_counters, hits, signed)
            .await
    }

    async fn rate_limit_subtract(
        &self,
        domain: &str,
        hits: &[Hit],
    ) -> Result<RateLimitCounts, StoreError> {
        // A subtraction makes no counter, so the bound on live ones never applies.
        let signed = hits
            .iter()
            .map(|h| i64::try_from(h.addend).map_or(i64::MIN + 1, |a| -a));
        self.rate_limit_call(domain, u64::MAX, hits, signed).await
    }

    async fn rate_limit_counters(
        &self,
        domains: &[String],
        limit: usize,
    ) -> Result<Vec<CounterInfo>, StoreError> {
        let mut out = Vec::new();
        for domain in domains {
            let prefix = self.keys.rate_limit_counter_prefix(domain);
            let mut inv = self.rate_limit_counters.prepare_invoke();
            inv.key(self.keys.rate_limit_live(domain))
                .arg(HOTTEST_SAMPLE)
                .arg(self.now_arg());
            let flat: Vec<redis::Value> = self.conns.run(inv).await?;
            for triple in flat.chunks(3) {
                let [k, start, count] = triple else {
                    return Err(StoreError::protocol(
                        "redis: the rate limit counters script answered a partial row",
                    ));
                };
                let key: String = redis::from_redis_value_ref(k)
                    .map_err(|e| StoreError::protocol(format!("redis: counter key: {e}")))?;
                let key = key.strip_prefix(&prefix).unwrap_or(&key).to_string();
                let unit = key
                    .rsplit_once('|')
                    .and_then(|(_, u)| Unit::parse(u))
                    .unwrap_or(Unit::Second);
                let number = |v: &redis::Value| -> Result<u64, StoreError> {
                    redis::from_redis_value_ref(v)
                        .map_err(|e| StoreError::protocol(format!("redis: counter value: {e}")))
                };
                out.push(CounterInfo {
                    domain: domain.clone(),
                    key,
                    unit,
                    window_start: number(start)?,
                    count: number(count)?,
                });
            }
        }
        // Highest first; ties in (domain, key) order, the same on every store.
        out.sort_by(|a, b| (b.count, &a.domain, &a.key).cmp(&(a.count, &b.domain, &b.key)));
        out.truncate(limit);
        Ok(out)
    }

    async fn sweep_rate_limits(&self, domains: &[String]) -> Result<(), StoreError> {
        for domain in domains {
            let mut inv = self.rate_limit_sweep.prepare_invoke();
            inv.key(self.keys.rate_limit_live(domain))
                .arg(self.now_arg());
            let _: u64 = self.conns.run(inv).await?;
        }
        Ok(())
    }
}

impl RedisStore {
    /// ShouldRateLimits sent in batches of two or more, and how many such batches, since the
    /// store was made.
    pub fn rate_limit_batched_counts(&self) -> (u64, u64) {
        self.rate_limit_batcher.batched()
    }
}
