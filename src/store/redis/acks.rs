//! Acknowledged means replicated, when asked (`store.redis.replicas_acked`): a decision is
//! answered only once that many Redis replicas hold it, so a failover to any of them loses
//! no decision a caller was told of.
//!
//! Redis's `WAIT n timeout` waits for the replicas to hold every write of the connection that
//! sends it, and blocks that connection meanwhile: sent on the connection the decisions share
//! (pipelined), it would hold every decision queued behind it. So the confirmations go on a
//! connection of their own, in rounds: each round writes one key there (`INCR
//! {prefix}acks`) and then `WAIT`s. Redis runs commands one at a time and replicates them in
//! that order, so that write comes after every decision answered before the round began, and
//! the replicas holding it hold those decisions too. Every decision answered while a round is
//! under way waits for the next one: one `WAIT` confirms all of them together, and the
//! decisions' own connection never waits.
//!
//! Replicas that do not confirm within `store.redis.replication_timeout` fail the round: its
//! decisions stand in the primary, but may be lost with it, so their calls answer
//! `UNAVAILABLE` with `OUTCOME_UNKNOWN` (the clients' retry by `run_id` then finds them).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::sync::oneshot;

use crate::store::StoreError;

/// The confirmations of one store.
pub(super) struct Acks {
    replicas: u32,
    timeout: Duration,
    /// The key each round writes before its `WAIT`.
    key: String,
    /// Where the primary is (it may move: each new connection asks).
    source: Arc<super::source::Source>,
    /// `redis <host:port>`, for messages.
    addr: String,
    waiting: Mutex<Waiting>,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

#[derive(Default)]
struct Waiting {
    /// A round is under way (or about to start): a new waiter joins the next one.
    running: bool,
    next: Vec<oneshot::Sender<Result<(), StoreError>>>,
}

impl Acks {
    pub(super) fn new(
        source: Arc<super::source::Source>,
        addr: String,
        key: String,
        replicas: u32,
        timeout: Duration,
    ) -> Self {
        Acks {
            replicas,
            timeout,
            key,
            source,
            addr,
            waiting: Mutex::default(),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// Wait until `replicas_acked` replicas hold every decision answered before this call.
    pub(super) async fn confirm(self: &Arc<Self>) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut w = self.waiting.lock().expect("acks lock");
            w.next.push(tx);
            !std::mem::replace(&mut w.running, true)
        };
        if start {
            // On a task of its own: a caller that vanishes leaves the round to the others.
            tokio::spawn(self.clone().rounds());
        }
        rx.await.unwrap_or_else(|_| {
            Err(StoreError::Timeout {
                what: format!("{}: the replication confirmation was dropped", self.addr),
            })
        })
    }

    /// Rounds until nobody waits.
    async fn rounds(self: Arc<Self>) {
        loop {
            let waiters = {
                let mut w = self.waiting.lock().expect("acks lock");
                if w.next.is_empty() {
                    w.running = false;
                    return;
                }
                std::mem::take(&mut w.next)
            };
            let out = self.round().await;
            for w in waiters {
                let _ = w.send(out.clone());
            }
        }
    }

    /// One round: a write on the confirmations' connection, then `WAIT`.
    async fn round(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.lock().await;
        let out = self.round_on(&mut conn).await;
        if out.is_err() {
            // The next round opens a new connection (to the primary as it is then).
            *conn = None;
        }
        out
    }

    async fn round_on(&self, conn: &mut Option<MultiplexedConnection>) -> Result<(), StoreError> {
        let unknown = |why: String| StoreError::Timeout {
            what: format!(
                "{}: {why}; the decision may stand, unreplicated (store.redis.replicas_acked: {})",
                self.addr, self.replicas
            ),
        };
        if conn.is_none() {
            // No response timeout of the library's own (half a second): a WAIT takes up to
            // `replication_timeout`, and the round's own deadline bounds it.
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            let open = async {
                self.source
                    .client()
                    .await?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
            };
            let c = tokio::time::timeout(super::connection::REDIS_TIMEOUT, open)
                .await
                .map_err(|_| unknown("no connection for the replication confirmation".into()))?
                .map_err(|e| unknown(super::connection::cause(&e)))?;
            *conn = Some(c);
        }
        let c = conn.as_mut().expect("just set");
        let ms = self.timeout.as_millis() as u64;
        let mut pipe = redis::pipe();
        pipe.cmd("INCR")
            .arg(&self.key)
            .ignore()
            .cmd("WAIT")
            .arg(self.replicas)
            .arg(ms);
        let answer = tokio::time::timeout(
            self.timeout + super::connection::REDIS_TIMEOUT,
            pipe.query_async::<(u32,)>(c),
        )
        .await
        .map_err(|_| unknown(format!("no answer to WAIT within {ms} ms")))?
        .map_err(|e| unknown(super::connection::cause(&e)))?;
        if answer.0 < self.replicas {
            return Err(unknown(format!(
                "{} of {} replicas confirmed within {ms} ms",
                answer.0, self.replicas
            )));
        }
        Ok(())
    }
}
