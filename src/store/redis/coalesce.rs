//! Coalescing: the Submits and Releases of one host that arrive while a call for that host is
//! on its way to Redis wait for it, then go together in one script call
//! (`lua/batch_body.lua`), which applies them in arrival order and answers each.
//!
//! Most of what a decision costs Redis is not its commands but the script around them: the
//! call itself, its arguments, the constants, the limits parsed from their text, `TIME`. One
//! call for many decisions pays that once. Nothing waits on purpose: a lone operation goes at
//! once, alone, with its own script; only those that would have queued behind a call in flight
//! anyway are grouped, so batches grow with the load and latency does not.
//!
//! The batch decides each operation by its fast path only (no lease due, nothing queued, room
//! for the ticket; an admitted ticket released). From the first operation whose fast path does
//! not apply, the batch changes nothing more: those operations then run one by one with their
//! own scripts (the full rules), before anything newer of the host. So every answer is one the
//! operations would have had one by one in their order of arrival, on every replica.
//!
//! The calls run on a task of their own, so a caller that vanishes mid-call (a client gone)
//! leaves the others' operations, and its own, applied and answered as if it had stayed.

use std::sync::Arc;

use redis::Value;
use tokio::sync::oneshot;

use super::connection::Connections;
use super::lanes::Lanes;
use crate::store::StoreError;

/// At most this many operations in one call: past it, the answer of the first one would wait
/// on the others' work for longer than the round trip saved.
const MAX_BATCH: usize = 64;

/// The arguments every ticket script of a host takes first: KEYS[1] the host's counters, then
/// ARGV[1..4] its key prefix, the caller's limits, now, and the cap maps.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) prefix: String,
    pub(super) scalars: String,
    pub(super) now: u64,
    pub(super) maps: String,
}

impl Head {
    /// `script` on the host, with `args` from ARGV[5].
    pub(super) fn invocation<'a>(
        &self,
        script: &'a redis::Script,
        args: &[String],
    ) -> redis::ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(format!("{}c", self.prefix))
            .arg(&self.prefix)
            .arg(&self.scalars)
            .arg(self.now)
            .arg(&self.maps);
        for a in args {
            inv.arg(a);
        }
        inv
    }
}

/// Which script an operation is, alone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    /// The Submit script's arguments from ARGV[5] (its first 9 go in a batch).
    Submit,
    /// The Release script's arguments from ARGV[5] (4).
    Release,
}

/// One operation and where its answer goes.
struct Waiting {
    kind: Kind,
    head: Head,
    args: Arc<[String]>,
    answer: oneshot::Sender<Result<Value, StoreError>>,
}

/// The coalescer of one store.
pub(super) struct Coalescer {
    conns: Arc<Connections>,
    batch: redis::Script,
    submit: Arc<redis::Script>,
    release: Arc<redis::Script>,
    /// The hosts with a call in flight (one each: a newer call never overtakes the
    /// operations an older one left to run alone, so arrival order holds; two or four at once
    /// measured about 5 % more cycles a second, see docs/benchmark.md), and what arrived for
    /// each meanwhile.
    hosts: Lanes<Waiting>,
}

impl Coalescer {
    pub(super) fn new(
        conns: Arc<Connections>,
        submit: Arc<redis::Script>,
        release: Arc<redis::Script>,
    ) -> Self {
        Coalescer {
            conns,
            batch: redis::Script::new(&super::scripts::batch()),
            submit,
            release,
            hosts: Lanes::default(),
        }
    }

    /// Operations sent in batches of two or more, and how many such batches (the tests read
    /// them).
    pub(super) fn batched(&self) -> (u64, u64) {
        self.hosts.batched()
    }

    /// Apply one operation on `host`, answered as its own script would answer it.
    pub(super) async fn call(
        self: &Arc<Self>,
        host: &str,
        kind: Kind,
        head: Head,
        args: Arc<[String]>,
    ) -> Result<Value, StoreError> {
        let (answer, rx) = oneshot::channel();
        let op = Waiting {
            kind,
            head,
            args,
            answer,
        };
        if self.hosts.push(host, op) {
            tokio::spawn(self.clone().lead(host.to_string()));
        }
        rx.await.unwrap_or_else(|_| {
            Err(StoreError::protocol(
                "redis: the call carrying this operation ended without an answer",
            ))
        })
    }

    /// Send what waits for `host`, a batch at a time, until nothing does.
    async fn lead(self: Arc<Self>, host: String) {
        let mut sender = self.hosts.sender(&host);
        // One batch has one head: an operation under other limits (a reload) starts the next.
        while let Some(batch) = sender.next(MAX_BATCH, |a, b| a.head == b.head) {
            self.send(batch).await;
        }
    }

    /// Apply `batch` (one head) and answer every operation in it.
    async fn send(&self, mut batch: Vec<Waiting>) {
        if batch.len() == 1 {
            let op = batch.pop().expect("one operation");
            let out = self.alone(&op).await;
            let _ = op.answer.send(out);
            return;
        }
        let mut args = vec![batch.len().to_string()];
        for op in &batch {
            match op.kind {
                Kind::Submit => {
                    args.push("s".into());
                    args.extend(op.args.iter().take(9).cloned());
                }
                Kind::Release => {
                    args.push("r".into());
                    args.extend(op.args.iter().take(4).cloned());
                }
            }
        }
        self.hosts.sent_together(batch.len());
        let reply: Result<Value, StoreError> = self
            .conns
            .run(batch[0].head.invocation(&self.batch, &args))
            .await;
        let answers = match reply {
            Ok(Value::Array(answers)) if answers.len() == batch.len() => answers,
            Ok(other) => {
                let e = StoreError::protocol(format!("redis: batch answered {other:?}"));
                for op in batch {
                    let _ = op.answer.send(Err(e.clone()));
                }
                return;
            }
            Err(e) => {
                for op in batch {
                    let _ = op.answer.send(Err(e.clone()));
                }
                return;
            }
        };
        // The batch stopped at the first operation its fast paths could not decide: that one and
        // the rest run alone, in order.
        let mut rest = Vec::new();
        for (op, answer) in batch.into_iter().zip(answers) {
            if rest.is_empty() && answer != Value::Int(0) {
                let _ = op.answer.send(Ok(answer));
            } else {
                rest.push(op);
            }
        }
        // Once Redis fails one of them (unreachable, no answer), the others are answered with
        // that error at once rather than each waiting out its own timeout in turn.
        let mut failed: Option<StoreError> = None;
        for op in rest {
            let out = match &failed {
                Some(e) => Err(e.clone()),
                None => self.alone(&op).await,
            };
            if let Err(e) = &out
                && !matches!(e, StoreError::Protocol { .. })
            {
                failed = Some(e.clone());
            }
            let _ = op.answer.send(out);
        }
    }

    /// One operation with its own script.
    async fn alone(&self, op: &Waiting) -> Result<Value, StoreError> {
        let script = match op.kind {
            Kind::Submit => &self.submit,
            Kind::Release => &self.release,
        };
        self.conns.run(op.head.invocation(script, &op.args)).await
    }
}
