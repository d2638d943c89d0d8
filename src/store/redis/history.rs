//! Each host's last hour on Redis: one sorted set per host (`<sched prefix>hist`, bucket
//! number -> sample), written by whichever replica samples a bucket first and read by all, so
//! two replicas draw one chart. It expires an hour after its last sample.

use redis::Value;

use super::RedisStore;
use super::replies::text;
use crate::history::{Counts, Sample, Shape};
use crate::store::StoreError;

impl RedisStore {
    pub(super) fn history_key(&self, host_id: &str) -> String {
        format!("{}hist", self.keys.sched(host_id))
    }

    pub(super) async fn record_history_sample(
        &self,
        host_id: &str,
        counts: &Counts,
        shape: &Shape,
    ) -> Result<(), StoreError> {
        let mut inv = self.history_record.prepare_invoke();
        inv.key(self.history_key(host_id))
            .arg(shape.bucket_ms.max(1))
            .arg(shape.buckets)
            .arg(counts.encode())
            .arg(self.now_arg());
        let _: i64 = self.conns.run(inv).await?;
        Ok(())
    }

    pub(super) async fn history_samples(&self, host_id: &str) -> Result<Vec<Sample>, StoreError> {
        let reply: Value = self
            .conns
            .command(
                redis::cmd("ZRANGE")
                    .arg(self.history_key(host_id))
                    .arg(0)
                    .arg(-1),
            )
            .await?;
        let Value::Array(members) = reply else {
            return Err(StoreError::protocol(format!(
                "redis: history answered {reply:?}"
            )));
        };
        members
            .iter()
            .map(|m| {
                text(m)
                    .and_then(|s| Sample::decode(&s))
                    .ok_or_else(|| StoreError::protocol(format!("redis: a history sample {m:?}")))
            })
            .collect()
    }
}
