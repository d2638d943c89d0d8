//! Auth attempts in batches: attempts that arrive while others are on their way to Redis wait
//! for a sender, then go together in one script call (`lua/auth_batch_body.lua`) that applies
//! each as the single script would and answers each.
//!
//! An attempt costs Redis little work (three commands); most of what it costs both sides is
//! the call around it: the command, its parsing and its reply on each side, a wake-up per
//! answer. One call for many attempts pays that once. Nothing waits on purpose: a lone attempt
//! goes at once with the single script; only attempts that arrive while a call is already in
//! flight are grouped, so batches grow with the load and latency does not.
//!
//! Attempts on different buckets do not interact, and attempts on one bucket that are in
//! flight at the same time were concurrent calls, with no order of their own to keep: so all
//! attempts share one lane ([`super::lanes`]), one call in flight at a time, which measured
//! best (two or four at once were no faster, with a longer p99; docs/benchmark.md). On a
//! Redis Cluster, where each bucket hashes to a
//! slot of its own and one script may touch only one slot, every attempt goes alone.
//!
//! The calls run on tasks of their own, so a caller that vanishes mid-call (a client gone)
//! leaves the other attempts of its batch, and its own, applied and answered as if it had
//! stayed.

use std::sync::Arc;

use redis::Value;
use tokio::sync::oneshot;

use super::connection::Connections;
use super::lanes::Lanes;
use crate::auth::BucketRule;
use crate::store::StoreError;

/// At most this many attempts in one call.
const MAX_BATCH: usize = 64;

/// The one lane of every attempt: attempts on different buckets do not interact.
const LANE: &str = "";

/// What the attempt script answers: verdict code, attempts remaining, retry after (ms).
pub(super) type Answer = (u8, u32, u64);

/// One attempt and where its answer goes.
struct Attempt {
    bucket: String,
    lockout: String,
    rule: BucketRule,
    now: u64,
    answer: oneshot::Sender<Result<Answer, StoreError>>,
}

/// The auth batcher of one store.
pub(super) struct AuthBatcher {
    conns: Arc<Connections>,
    single: redis::Script,
    batch: redis::Script,
    /// The attempts that arrived while a call was in flight.
    lanes: Lanes<Attempt>,
}

impl AuthBatcher {
    pub(super) fn new(conns: Arc<Connections>) -> Self {
        AuthBatcher {
            conns,
            single: redis::Script::new(&super::scripts::auth_attempt()),
            batch: redis::Script::new(&super::scripts::auth_batch()),
            lanes: Lanes::default(),
        }
    }

    /// Attempts sent in batches of two or more, and how many such batches (the tests read
    /// them).
    pub(super) fn batched(&self) -> (u64, u64) {
        self.lanes.batched()
    }

    /// One attempt against the bucket at `bucket` (its lockout at `lockout`), at `now` (0 =
    /// Redis TIME); answered as the single script answers it.
    pub(super) async fn attempt(
        self: &Arc<Self>,
        bucket: String,
        lockout: String,
        rule: BucketRule,
        now: u64,
    ) -> Result<Answer, StoreError> {
        if self.conns.is_cluster() {
            return self.alone(&bucket, &lockout, rule, now).await;
        }
        let (answer, rx) = oneshot::channel();
        let attempt = Attempt {
            bucket,
            lockout,
            rule,
            now,
            answer,
        };
        if self.lanes.push(LANE, attempt) {
            tokio::spawn(self.clone().lead());
        }
        rx.await.unwrap_or_else(|_| {
            Err(StoreError::protocol(
                "redis: the call carrying this auth attempt ended without an answer",
            ))
        })
    }

    /// Send what waits, a batch at a time, until nothing does.
    async fn lead(self: Arc<Self>) {
        let mut sender = self.lanes.sender(LANE);
        while let Some(batch) = sender.next(MAX_BATCH, |_, _| true) {
            if let Err(e) = self.send(batch).await {
                // Redis failed the call (unreachable, no answer): the attempts waiting behind
                // it get that error at once (none was sent), rather than a batch at a time
                // each waiting out its own timeout; the callers fall back at once.
                for a in sender.take_all() {
                    let _ = a.answer.send(Err(e.clone()));
                }
            }
        }
    }

    /// Apply `batch` and answer every attempt in it; the error when Redis failed the call
    /// (not when it answered what the script never does).
    async fn send(&self, mut batch: Vec<Attempt>) -> Result<(), StoreError> {
        if batch.len() == 1 {
            let a = batch.pop().expect("one attempt");
            let out = self.alone(&a.bucket, &a.lockout, a.rule, a.now).await;
            let failed = match &out {
                Err(e) if !matches!(e, StoreError::Protocol { .. }) => Err(e.clone()),
                _ => Ok(()),
            };
            let _ = a.answer.send(out);
            return failed;
        }
        let mut inv = self.batch.prepare_invoke();
        for a in &batch {
            inv.key(&a.bucket).key(&a.lockout);
        }
        for a in &batch {
            inv.arg(a.rule.max_attempts)
                .arg(a.rule.window_ms)
                .arg(a.rule.lockout_ms)
                .arg(a.now);
        }
        self.lanes.sent_together(batch.len());
        let reply: Result<Value, StoreError> = self.conns.run(inv).await;
        let answers = match reply {
            Ok(Value::Array(answers)) if answers.len() == batch.len() => answers,
            Ok(other) => {
                let e = StoreError::protocol(format!("redis: auth batch answered {other:?}"));
                for a in batch {
                    let _ = a.answer.send(Err(e.clone()));
                }
                return Ok(());
            }
            Err(e) => {
                for a in batch {
                    let _ = a.answer.send(Err(e.clone()));
                }
                return Err(e);
            }
        };
        for (a, v) in batch.into_iter().zip(answers) {
            let out = redis::from_redis_value_ref::<Answer>(&v).map_err(|e| {
                StoreError::protocol(format!("redis: auth batch answered {v:?}: {e}"))
            });
            let _ = a.answer.send(out);
        }
        Ok(())
    }

    /// One attempt with the single script.
    async fn alone(
        &self,
        bucket: &str,
        lockout: &str,
        rule: BucketRule,
        now: u64,
    ) -> Result<Answer, StoreError> {
        let mut inv = self.single.prepare_invoke();
        inv.key(bucket)
            .key(lockout)
            .arg(rule.max_attempts)
            .arg(rule.window_ms)
            .arg(rule.lockout_ms)
            .arg(now);
        self.conns.run(inv).await
    }
}
