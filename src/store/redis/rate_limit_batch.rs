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

use std::sync::Arc;

use tokio::sync::oneshot;

use super::connection::Connections;
use super::lanes::Lanes;
use crate::store::StoreError;

/// At most this many requests in one call.
const MAX_BATCH: usize = 64;

/// One request: its domain's tally, its counters with each hit's unit (seconds) and hits
/// (negative: subtracted), the domain's max live counters, and now (0 = Redis TIME). Answered
/// with now (ms), then the count after each hit.
pub(super) struct Request {
    pub(super) tally: String,
    pub(super) hits: Vec<(String, u64, i64)>,
    pub(super) max: u64,
    pub(super) now: u64,
}

struct Waiting {
    request: Request,
    answer: oneshot::Sender<Result<Vec<i64>, StoreError>>,
}

/// The rate limit batcher of one store.
pub(super) struct RateLimitBatcher {
    conns: Arc<Connections>,
    single: redis::Script,
    batch: redis::Script,
    /// The domains with a call in flight (their tallies), and what arrived for each meanwhile.
    lanes: Lanes<Waiting>,
}

impl RateLimitBatcher {
    pub(super) fn new(conns: Arc<Connections>) -> Self {
        RateLimitBatcher {
            conns,
            single: redis::Script::new(&super::scripts::rate_limit_hits()),
            batch: redis::Script::new(&super::scripts::rate_limit_batch()),
            lanes: Lanes::default(),
        }
    }

    /// Requests sent in batches of two or more, and how many such batches (the tests read
    /// them).
    pub(super) fn batched(&self) -> (u64, u64) {
        self.lanes.batched()
    }

    /// Apply `request`'s hits on its domain (its tally names the lane); answered as the single
    /// script answers it.
    pub(super) async fn hits(self: &Arc<Self>, request: Request) -> Result<Vec<i64>, StoreError> {
        let (answer, rx) = oneshot::channel();
        let lane = request.tally.clone();
        if self.lanes.push(&lane, Waiting { request, answer }) {
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
        let mut sender = self.lanes.sender(&lane);
        // One batch has one max (a reload may change it): a request under another starts the
        // next.
        while let Some(batch) = sender.next(MAX_BATCH, |a, b| a.request.max == b.request.max) {
            if let Err(e) = self.send(batch).await {
                // Redis failed the call (unreachable, no answer): the requests waiting behind
                // it get that error at once (none was sent), rather than a batch at a time
                // each waiting out its own timeout.
                for w in sender.take_all() {
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
        self.lanes.sent_together(batch.len());
        // One flat answer: each request's now, then its counts, request after request.
        let expected: usize = batch.iter().map(|w| 1 + w.request.hits.len()).sum();
        let flat = match self.conns.run::<Vec<i64>>(inv).await {
            Ok(flat) if flat.len() == expected => flat,
            Ok(flat) => {
                let e = StoreError::protocol(format!(
                    "redis: rate limit batch answered {} values for {expected}",
                    flat.len()
                ));
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
        let mut rest = flat.as_slice();
        for w in batch {
            let (mine, after) = rest.split_at(1 + w.request.hits.len());
            rest = after;
            let _ = w.answer.send(Ok(mine.to_vec()));
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
