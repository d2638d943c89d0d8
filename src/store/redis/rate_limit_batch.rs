//! ShouldRateLimits in batches: the requests of one domain that arrive while a call for that
//! domain is on its way to Redis wait for it, then go together in one script call
//! (`lua/rate_limit_batch_body.lua`) that applies each, all its hits at once, as the single
//! script would, and answers each.
//!
//! As for auth attempts (see [`super::auth_batch`]), what a request costs is mostly the call
//! around its few commands, which one call for many pays once. Requests in flight together
//! were concurrent, with no order of their own to keep, and each is still applied whole
//! (a script runs atomically), so each request's hits count together and every count is
//! exact. A lone request goes at once with the single script. Every key of a domain shares its
//! hash tag, so a batch runs on one slot of a Redis Cluster too.
//!
//! The calls run on tasks of their own, so a caller that vanishes mid-call leaves the other
//! requests of its batch, and its own, applied and answered as if it had stayed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use redis::Value;
use tokio::sync::oneshot;

use super::connection::Connections;
use crate::store::StoreError;

/// At most this many requests in one call.
const MAX_BATCH: usize = 64;

/// One request: its domain's tally, its counters with each hit's unit (seconds) and hits, the
/// domain's max live counters, now (0 = Redis TIME), and where its answer goes (now ms, then
/// the count after each hit).
pub(super) struct Request {
    pub(super) tally: String,
    pub(super) hits: Vec<(String, u64, u64)>,
    pub(super) max: u64,
    pub(super) now: u64,
}

struct Waiting {
    request: Request,
    answer: oneshot::Sender<Result<Vec<i64>, StoreError>>,
}

/// A domain's requests waiting to be sent, and whether a call for it is in flight.
#[derive(Default)]
struct Lane {
    waiting: Vec<Waiting>,
}

/// The rate limit batcher of one store.
pub(super) struct RateLimitBatcher {
    conns: Arc<Connections>,
    single: redis::Script,
    batch: redis::Script,
    /// The domains with a call in flight, and what arrived for each meanwhile.
    lanes: Mutex<HashMap<String, Lane>>,
    /// Requests sent in batches of two or more, and those batches.
    batched_ops: AtomicU64,
    batches: AtomicU64,
}

impl RateLimitBatcher {
    pub(super) fn new(conns: Arc<Connections>) -> Self {
        RateLimitBatcher {
            conns,
            single: redis::Script::new(&super::scripts::rate_limit_hits()),
            batch: redis::Script::new(&super::scripts::rate_limit_batch()),
            lanes: Mutex::default(),
            batched_ops: AtomicU64::new(0),
            batches: AtomicU64::new(0),
        }
    }

    /// Requests sent in batches of two or more, and how many such batches (the tests read
    /// them).
    pub(super) fn batched(&self) -> (u64, u64) {
        (
            self.batched_ops.load(Ordering::Relaxed),
            self.batches.load(Ordering::Relaxed),
        )
    }

    /// The lanes. Nothing in this module panics while holding them, and should anything do
    /// so, what the map holds is still whole: a poisoned lock is taken as it is.
    fn lanes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Lane>> {
        self.lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Apply `request`'s hits on its domain (its tally names the lane); answered as the single
    /// script answers it.
    pub(super) async fn hits(self: &Arc<Self>, request: Request) -> Result<Vec<i64>, StoreError> {
        let (answer, rx) = oneshot::channel();
        let lane = request.tally.clone();
        let lead = {
            let mut lanes = self.lanes();
            let lead = !lanes.contains_key(&lane);
            lanes
                .entry(lane.clone())
                .or_default()
                .waiting
                .push(Waiting { request, answer });
            lead
        };
        if lead {
            tokio::spawn(self.clone().lead(lane));
        }
        rx.await.unwrap_or_else(|_| {
            Err(StoreError::protocol(
                "redis: the call carrying this request ended without an answer",
            ))
        })
    }

    /// Send what waits for `lane`, a batch at a time, until nothing does.
    async fn lead(self: Arc<Self>, lane: String) {
        // Should this task end any other way than below (a panic), the lane is not left with a
        // sender that is gone: its entry goes, and the requests waiting there are answered
        // with an error (their answer channels close).
        struct Forget<'a>(&'a RateLimitBatcher, &'a str, bool);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                if !self.2 {
                    self.0.lanes().remove(self.1);
                }
            }
        }
        let mut guard = Forget(&self, &lane, false);
        loop {
            let batch: Vec<Waiting> = {
                let mut lanes = self.lanes();
                let Some(queue) = lanes.get_mut(&lane) else {
                    guard.2 = true;
                    return;
                };
                if queue.waiting.is_empty() {
                    lanes.remove(&lane);
                    guard.2 = true;
                    return;
                }
                // One batch has one max (a reload may change it): a request under another
                // starts the next.
                let max = queue.waiting[0].request.max;
                let n = queue
                    .waiting
                    .iter()
                    .take(MAX_BATCH)
                    .take_while(|w| w.request.max == max)
                    .count();
                queue.waiting.drain(..n).collect()
            };
            if let Err(e) = self.send(batch).await {
                // Redis failed the call (unreachable, no answer): the requests waiting behind
                // it get that error at once (none was sent), rather than a batch at a time
                // each waiting out its own timeout.
                let waiting: Vec<Waiting> = self
                    .lanes()
                    .get_mut(&lane)
                    .map(|q| q.waiting.drain(..).collect())
                    .unwrap_or_default();
                for w in waiting {
                    let _ = w.answer.send(Err(e.clone()));
                }
            }
        }
    }

    /// Apply `batch` (one domain, one max) and answer every request in it; the error when
    /// Redis failed the call (not when it answered what the script never does).
    async fn send(&self, mut batch: Vec<Waiting>) -> Result<(), StoreError> {
        if batch.len() == 1 {
            let w = batch.pop().expect("one request");
            let out = self.alone(&w.request).await;
            let failed = match &out {
                Err(e) if !matches!(e, StoreError::Protocol { .. }) => Err(e.clone()),
                _ => Ok(()),
            };
            let _ = w.answer.send(out);
            return failed;
        }
        let mut inv = self.batch.prepare_invoke();
        inv.key(&batch[0].request.tally)
            .arg(batch[0].request.max)
            .arg(batch.len());
        for w in &batch {
            inv.arg(w.request.now).arg(w.request.hits.len());
            for (key, unit, addend) in &w.request.hits {
                inv.key(key).arg(unit).arg(addend);
            }
        }
        self.batched_ops
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        let answers = match self.conns.run::<Value>(inv).await {
            Ok(Value::Array(answers)) if answers.len() == batch.len() => answers,
            Ok(other) => {
                let e = StoreError::protocol(format!("redis: rate limit batch answered {other:?}"));
                for w in batch {
                    let _ = w.answer.send(Err(e.clone()));
                }
                return Ok(());
            }
            Err(e) => {
                for w in batch {
                    let _ = w.answer.send(Err(e.clone()));
                }
                return Err(e);
            }
        };
        for (w, v) in batch.into_iter().zip(answers) {
            let out = redis::from_redis_value_ref::<Vec<i64>>(&v).map_err(|e| {
                StoreError::protocol(format!("redis: rate limit batch answered {v:?}: {e}"))
            });
            let _ = w.answer.send(out);
        }
        Ok(())
    }

    /// One request with the single script.
    async fn alone(&self, r: &Request) -> Result<Vec<i64>, StoreError> {
        let mut inv = self.single.prepare_invoke();
        inv.key(&r.tally).arg(r.max);
        for (key, unit, addend) in &r.hits {
            inv.key(key).arg(unit).arg(addend);
        }
        inv.arg(r.now);
        self.conns.run(inv).await
    }
}
