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
//! flight at the same time were concurrent calls, with no order of their own to keep (so
//! [`SENDERS`] calls may be in flight at once). On a Redis Cluster, where each bucket hashes to a
//! slot of its own and one script may touch only one slot, every attempt goes alone.
//!
//! The calls run on tasks of their own, so a caller that vanishes mid-call (a client gone)
//! leaves the other attempts of its batch, and its own, applied and answered as if it had
//! stayed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use redis::Value;
use tokio::sync::oneshot;

use super::connection::Connections;
use crate::auth::BucketRule;
use crate::store::StoreError;

/// At most this many attempts in one call.
const MAX_BATCH: usize = 64;

/// Calls in flight at once. One measured best at 64 attempts in flight (2 and 4 no better,
/// and a longer p99; docs/benchmark.md); more may be, since attempts keep no order.
const SENDERS: usize = 1;

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

/// The attempts waiting to be sent, and how many calls are in flight.
#[derive(Default)]
struct Queue {
    waiting: Vec<Attempt>,
    senders: usize,
}

/// The auth batcher of one store.
pub(super) struct AuthBatcher {
    conns: Arc<Connections>,
    single: redis::Script,
    batch: redis::Script,
    queue: Mutex<Queue>,
    /// Attempts sent in batches of two or more, and those batches.
    batched_ops: AtomicU64,
    batches: AtomicU64,
}

impl AuthBatcher {
    pub(super) fn new(conns: Arc<Connections>) -> Self {
        AuthBatcher {
            conns,
            single: redis::Script::new(&super::scripts::auth_attempt()),
            batch: redis::Script::new(&super::scripts::auth_batch()),
            queue: Mutex::default(),
            batched_ops: AtomicU64::new(0),
            batches: AtomicU64::new(0),
        }
    }

    /// Attempts sent in batches of two or more, and how many such batches (the tests read
    /// them).
    pub(super) fn batched(&self) -> (u64, u64) {
        (
            self.batched_ops.load(Ordering::Relaxed),
            self.batches.load(Ordering::Relaxed),
        )
    }

    /// The queue. Nothing in this module panics while holding it, and should anything do so,
    /// what it holds is still whole: a poisoned lock is taken as it is.
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        let lead = {
            let mut q = self.queue();
            q.waiting.push(Attempt {
                bucket,
                lockout,
                rule,
                now,
                answer,
            });
            let lead = q.senders < SENDERS;
            if lead {
                q.senders += 1;
            }
            lead
        };
        if lead {
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
        // Should this task end any other way than below (a panic), it is not counted as in
        // flight any more; the attempts it carried are answered with an error (their answer
        // channels close).
        struct Leave<'a>(&'a AuthBatcher, bool);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.queue().senders -= 1;
                }
            }
        }
        let mut guard = Leave(&self, false);
        loop {
            let batch: Vec<Attempt> = {
                let mut q = self.queue();
                if q.waiting.is_empty() {
                    q.senders -= 1;
                    guard.1 = true;
                    return;
                }
                let n = q.waiting.len().min(MAX_BATCH);
                q.waiting.drain(..n).collect()
            };
            if let Err(e) = self.send(batch).await {
                // Redis failed the call (unreachable, no answer): the attempts waiting behind
                // it get that error at once (none was sent), rather than a batch at a time
                // each waiting out its own timeout; the callers fall back at once.
                let waiting: Vec<Attempt> = self.queue().waiting.drain(..).collect();
                for a in waiting {
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
        self.batched_ops
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
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
