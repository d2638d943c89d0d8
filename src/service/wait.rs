//! The Wait loop: what feeds one Wait stream, and the caps on how many are open.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tonic::Status;

use super::status::ApiError;
use crate::api;
use crate::scheduler::{TicketState, TicketView};
use crate::store::{Store, TicketId, TicketWatch};

/// How often a Wait stream re-reads its ticket's position while nothing else happens to it.
/// Position changes with every admission of the host, so streams coalesce them instead of
/// waking every waiter on every change.
pub const POSITION_REFRESH: Duration = Duration::from_secs(1);

/// Open Wait streams per connection (keyed by the peer's address) and in all, capped so that
/// neither one client nor many can hold unbounded server memory in streams.
pub(super) struct WaitStreams {
    max_per_connection: usize,
    max: usize,
    open: Arc<Mutex<OpenStreams>>,
}

#[derive(Default)]
struct OpenStreams {
    total: usize,
    per_peer: HashMap<SocketAddr, usize>,
}

impl WaitStreams {
    pub(super) fn new(max_per_connection: usize, max: usize) -> Self {
        WaitStreams {
            max_per_connection,
            max,
            open: Arc::default(),
        }
    }

    /// Count a new stream of the connection from `peer`.
    ///
    /// Fails with TOO_MANY_STREAMS when the connection already holds `max_per_connection`, or
    /// every connection together `max`.
    pub(super) fn open(&self, peer: Option<SocketAddr>) -> Result<StreamSlot, ApiError> {
        let mut open = self.open.lock().expect("wait streams lock");
        if open.total >= self.max {
            return Err(ApiError::TooManyStreams {
                max: self.max,
                scope: "the authority",
            });
        }
        if let Some(addr) = peer {
            let n = open.per_peer.entry(addr).or_insert(0);
            if *n >= self.max_per_connection {
                return Err(ApiError::TooManyStreams {
                    max: self.max_per_connection,
                    scope: "this connection",
                });
            }
            *n += 1;
        }
        open.total += 1;
        Ok(StreamSlot {
            peer,
            open: self.open.clone(),
        })
    }
}

/// One open Wait stream; closing it (dropping this) frees its place.
pub(super) struct StreamSlot {
    peer: Option<SocketAddr>,
    open: Arc<Mutex<OpenStreams>>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().expect("wait streams lock");
        open.total -= 1;
        if let Some(addr) = self.peer
            && let Some(n) = open.per_peer.get_mut(&addr)
        {
            *n -= 1;
            if *n == 0 {
                open.per_peer.remove(&addr);
            }
        }
    }
}

/// An admission about to be reported renews the ticket's lease first, so the waiter holds a
/// full lease from when it hears of it, however late that is (its stream was cut while it was
/// admitted, and it asked again): a run never starts on a lease about to lapse. A failed
/// renewal leaves the view as it was (the event says how much lease is left, and the client
/// renews itself when that is little).
async fn delivered<S: Store>(store: &S, id: &TicketId, view: TicketView) -> TicketView {
    if view.state != TicketState::Admitted {
        return view;
    }
    match store.renew(std::slice::from_ref(id), None).await {
        Ok(mut renewed) => renewed.pop().flatten().unwrap_or(view),
        Err(_) => view,
    }
}

/// Feed one Wait stream: the current state at once, then every state change, position changes
/// at most every [`POSITION_REFRESH`]; renew the queued ticket's lease while the stream is open;
/// end after the first event that is not QUEUED, or when the client goes away.
pub(super) async fn follow<S: Store>(
    store: Arc<S>,
    id: TicketId,
    mut watch: S::Watch,
    first: TicketView,
    tx: mpsc::Sender<Result<api::WaitEvent, Status>>,
    lease_ttl_ms: u64,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let mut last = delivered(&*store, &id, first).await;
    if tx
        .send(Ok(super::replies::wait_event(&id, &last)))
        .await
        .is_err()
    {
        return;
    }
    let keepalive_every = Duration::from_millis((lease_ttl_ms / 3).max(5));
    let mut keepalive = tokio::time::interval_at(
        tokio::time::Instant::now() + keepalive_every,
        keepalive_every,
    );
    keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut refresh = tokio::time::interval_at(
        tokio::time::Instant::now() + POSITION_REFRESH,
        POSITION_REFRESH,
    );
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A debounced waiter looks again the moment its debounce runs out.
    let ready_at = |v: &TicketView| {
        (v.debounce_left_ms > 0)
            .then(|| tokio::time::Instant::now() + Duration::from_millis(v.debounce_left_ms + 1))
    };
    let mut debounced = ready_at(&last);
    while last.state == TicketState::Queued {
        tokio::select! {
            _ = async {
                match debounced {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
            _ = tx.closed() => return,
            _ = closing.changed() => {
                let _ = tx
                    .send(Err(Status::unavailable(
                        "the authority is shutting down: Wait again (on another replica, or after \
                         the restart)",
                    )))
                    .await;
                return;
            }
            _ = watch.changed() => {}
            _ = refresh.tick() => {}
            _ = keepalive.tick() => {
                // A failed keep-alive is not fatal: the lease has two more chances before it
                // runs out, and the next read reports an expiry.
                let _ = store.renew(std::slice::from_ref(&id), None).await;
                continue;
            }
        }
        let next = match store.ticket(&id).await {
            Ok(Some(v)) => v,
            // A queued ticket ends before it is forgotten: one the store no longer knows was
            // lost with the store's state. Its client submits again under its run_id.
            Ok(None) => {
                let _ = tx
                    .send(Err(Status::not_found(format!(
                        "ticket_id: no such ticket: {id} (the store lost it while it was \
                         queued: Submit again with the same run_id)"
                    ))))
                    .await;
                return;
            }
            Err(e) => {
                let _ = tx.send(Err(ApiError::from(e).into())).await;
                return;
            }
        };
        debounced = ready_at(&next);
        if next.state != last.state
            || next.position != last.position
            || next.blocked_by != last.blocked_by
        {
            let next = delivered(&*store, &id, next).await;
            if tx
                .send(Ok(super::replies::wait_event(&id, &next)))
                .await
                .is_err()
            {
                return;
            }
            last = next;
        }
    }
}
