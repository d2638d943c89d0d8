//! The gRPC services `admission.v1.Admission` and `admission.v1.Operator`. Handlers validate
//! at the [`edge`], call one store operation, and convert the answer back.

pub mod edge;
pub mod framing;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::api;
use crate::auth::AuthVerdict;
use crate::gates::Gates;
use crate::ledger::{StepState, micros_to_usd};
use crate::scheduler::{Refusal, SubmitError, TicketState, TicketView};
use crate::security;
use crate::store::{Store, TicketId, TicketWatch};
use edge::{ApiError, ms32};

/// How often a Wait stream re-reads its ticket's position while nothing else happens to it.
/// Position changes with every admission of the host, so streams coalesce them instead of
/// waking every waiter on every change.
pub const POSITION_REFRESH: Duration = Duration::from_secs(1);

/// The `Admission` service over a store.
pub struct AdmissionService<S> {
    store: Arc<S>,
    gates: Arc<Gates>,
    wait_streams: WaitStreams,
    metrics: Arc<crate::metrics::Metrics>,
    clock: Arc<dyn crate::clock::Clock>,
    /// When (on `clock`, plus one, so 0 is never) a full auth table was last logged.
    table_full_logged: AtomicU64,
}

impl<S> AdmissionService<S> {
    /// `max_wait_streams_per_connection` bounds the Wait streams one connection may hold open
    /// at once, `max_wait_streams` those of every connection together.
    pub fn new(
        store: Arc<S>,
        gates: Arc<Gates>,
        max_wait_streams_per_connection: usize,
        max_wait_streams: usize,
        metrics: Arc<crate::metrics::Metrics>,
        clock: Arc<dyn crate::clock::Clock>,
    ) -> Self {
        AdmissionService {
            store,
            gates,
            metrics,
            clock,
            table_full_logged: AtomicU64::new(0),
            wait_streams: WaitStreams {
                max_per_connection: max_wait_streams_per_connection,
                max: max_wait_streams,
                open: Arc::default(),
            },
        }
    }
}

/// Open Wait streams per connection (keyed by the peer's address) and in all, capped so that
/// neither one client nor many can hold unbounded server memory in streams.
struct WaitStreams {
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
    /// Count a new stream of the connection from `peer`.
    ///
    /// Fails with TOO_MANY_STREAMS when the connection already holds `max_per_connection`, or
    /// every connection together `max`.
    fn open(&self, peer: Option<SocketAddr>) -> Result<StreamSlot, ApiError> {
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
struct StreamSlot {
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

/// The `Operator` service over a store.
pub struct OperatorService<S> {
    store: Arc<S>,
    gates: Arc<Gates>,
}

impl<S> OperatorService<S> {
    pub fn new(store: Arc<S>, gates: Arc<Gates>) -> Self {
        OperatorService { store, gates }
    }
}

type WaitStream = Pin<Box<dyn Stream<Item = Result<api::WaitEvent, Status>> + Send>>;

#[tonic::async_trait]
impl<S: Store> api::admission_server::Admission for AdmissionService<S> {
    async fn submit(
        &self,
        request: Request<api::SubmitRequest>,
    ) -> Result<Response<api::SubmitResponse>, Status> {
        let (_, ext, req) = request.into_parts();
        let (host_id, args) = edge::submit_args(req)?;
        record("host_id", &host_id);
        record("subject", &args.subject);
        security::caller(&ext)?.act_for(&host_id)?;
        if self.gates.draining.load(Ordering::Relaxed) {
            self.metrics.decision("Submit", "refused", "DRAINING");
            return Err(ApiError::Refused(Refusal::Draining).into());
        }
        if self.gates.authority_memory_full.load(Ordering::Relaxed) {
            self.store.count_rejection(&host_id).await?;
            self.metrics
                .decision("Submit", "refused", "MEMORY_PRESSURE");
            return Err(ApiError::Refused(Refusal::MemoryPressure).into());
        }
        let (id, view) = self.store.submit(&host_id, args).await?.map_err(|e| {
            if let SubmitError::Refused(r) = &e {
                record("decision", &edge::refusal_reason(*r));
                self.metrics
                    .decision("Submit", "refused", edge::refusal_reason(*r));
            }
            ApiError::from(e)
        })?;
        record("decision", &format_args!("{:?}", view.state));
        self.metrics.decision(
            "Submit",
            if view.state == TicketState::Queued {
                "queued"
            } else {
                "admitted"
            },
            "",
        );
        Ok(Response::new(api::SubmitResponse {
            ticket_id: id.to_string(),
            state: api::TicketState::from(view.state) as i32,
            position: view.position,
            // The lease left, from the limits of record (on a shared store they may come
            // from another replica's file).
            lease_ttl_ms: ms32(view.lease_remaining_ms),
            grant: view.grant,
        }))
    }

    type WaitStream = WaitStream;

    async fn wait(
        &self,
        request: Request<api::WaitRequest>,
    ) -> Result<Response<WaitStream>, Status> {
        let raw = &request.get_ref().ticket_id;
        let id =
            edge::ticket_id(raw, "ticket_id")?.ok_or_else(|| ApiError::NotFound(raw.clone()))?;
        security::caller(request.extensions())?.act_for(&id.host_id)?;
        let stream_slot = self.wait_streams.open(request.remote_addr())?;
        // Subscribe before the first read, so a change between the two is not missed.
        let watch = self.store.watch(&id);
        let view = self
            .store
            .ticket(&id)
            .await?
            .ok_or_else(|| ApiError::NotFound(id.to_string()))?;
        let (tx, rx) = mpsc::channel(4);
        // Keep the lease alive at a third of the shorter of this replica's lease and the one
        // the ticket has (the limits of record may be another replica's).
        let lease_ttl_ms = match view.lease_remaining_ms {
            0 => self.store.limits(&id.host_id).lease_ttl_ms,
            left => left.min(self.store.limits(&id.host_id).lease_ttl_ms),
        };
        let store = self.store.clone();
        let closing = self.gates.closing();
        tokio::spawn(async move {
            follow(store, id, watch, view, tx, lease_ttl_ms, closing).await;
            drop(stream_slot);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn renew(
        &self,
        request: Request<api::RenewRequest>,
    ) -> Result<Response<api::RenewResponse>, Status> {
        let (_, ext, req) = request.into_parts();
        let (ids, rss_mb) = edge::renew_args(&req)?;
        let caller = security::caller(&ext)?;
        for id in ids.iter().flatten() {
            caller.act_for(&id.host_id)?;
        }
        let known: Vec<TicketId> = ids.iter().flatten().cloned().collect();
        let mut views = self.store.renew(&known, rss_mb).await?.into_iter();
        // Ids never issued are answered EXPIRED in their place, without the store.
        let views = ids
            .iter()
            .map(|id| id.as_ref().and_then(|_| views.next().flatten()));
        let tickets = req
            .ticket_ids
            .into_iter()
            .zip(views)
            .map(|(ticket_id, view)| {
                let (state, lease) = match view {
                    Some(v) => (v.state, v.lease_remaining_ms),
                    None => (TicketState::Expired, 0),
                };
                api::RenewedTicket {
                    ticket_id,
                    state: api::TicketState::from(state) as i32,
                    lease_ttl_ms: ms32(lease),
                }
            })
            .collect();
        Ok(Response::new(api::RenewResponse { tickets }))
    }

    async fn release(
        &self,
        request: Request<api::ReleaseRequest>,
    ) -> Result<Response<api::ReleaseResponse>, Status> {
        let (_, ext, req) = request.into_parts();
        let unknown = || {
            Response::new(api::ReleaseResponse {
                previous_state: api::TicketState::Expired as i32,
                ticket_id: String::new(),
            })
        };
        let (id, previous) = match edge::release_target(&req)? {
            edge::ReleaseTarget::Ticket(None) => {
                // Never issued: as for a ticket long forgotten.
                return Ok(unknown());
            }
            edge::ReleaseTarget::Ticket(Some(id)) => {
                security::caller(&ext)?.act_for(&id.host_id)?;
                let previous = self.store.release(&id).await?;
                (id, previous)
            }
            edge::ReleaseTarget::Run { host_id, run_id } => {
                security::caller(&ext)?.act_for(host_id)?;
                match self.store.release_run(host_id, run_id).await? {
                    Some((id, previous)) => (id, Some(previous)),
                    None => return Ok(unknown()),
                }
            }
        };
        let Some(previous) = previous else {
            return Ok(unknown());
        };
        // The id as given when there was one (it parsed, so it is the id's own spelling).
        let ticket_id = if req.ticket_id.is_empty() {
            id.to_string()
        } else {
            req.ticket_id
        };
        Ok(Response::new(api::ReleaseResponse {
            previous_state: api::TicketState::from(previous) as i32,
            ticket_id,
        }))
    }

    async fn park(
        &self,
        request: Request<api::ParkRequest>,
    ) -> Result<Response<api::ParkResponse>, Status> {
        let raw = &request.get_ref().ticket_id;
        let id =
            edge::ticket_id(raw, "ticket_id")?.ok_or_else(|| ApiError::NotFound(raw.clone()))?;
        security::caller(request.extensions())?.act_for(&id.host_id)?;
        let v = self
            .store
            .park(&id)
            .await?
            .ok_or_else(|| ApiError::NotFound(id.to_string()))?
            .map_err(|state| ApiError::WrongState {
                state: state_name(state),
                rule: "only an admitted ticket can be parked",
            })?;
        Ok(Response::new(api::ParkResponse {
            state: api::TicketState::from(v.state) as i32,
            lease_ttl_ms: ms32(v.lease_remaining_ms),
        }))
    }

    async fn unpark(
        &self,
        request: Request<api::UnparkRequest>,
    ) -> Result<Response<api::UnparkResponse>, Status> {
        let raw = &request.get_ref().ticket_id;
        let id =
            edge::ticket_id(raw, "ticket_id")?.ok_or_else(|| ApiError::NotFound(raw.clone()))?;
        security::caller(request.extensions())?.act_for(&id.host_id)?;
        let v = self
            .store
            .unpark(&id)
            .await?
            .ok_or_else(|| ApiError::NotFound(id.to_string()))?
            .map_err(|state| ApiError::WrongState {
                state: state_name(state),
                rule: "it has ended; Submit a new ticket",
            })?;
        Ok(Response::new(api::UnparkResponse {
            state: api::TicketState::from(v.state) as i32,
            position: v.position,
            grant: v.grant,
            lease_ttl_ms: ms32(v.lease_remaining_ms),
        }))
    }

    async fn authorize(
        &self,
        request: Request<api::AuthorizeRequest>,
    ) -> Result<Response<api::AuthorizeResponse>, Status> {
        let (_, ext, req) = request.into_parts();
        let (host_id, args) = edge::authorize_args(req)?;
        record("host_id", &host_id);
        record("subject", &args.subject);
        security::caller(&ext)?.act_for(&host_id)?;
        let answer = self.store.authorize(&host_id, args).await??;
        record(
            "decision",
            &format_args!(
                "{:?} {}",
                answer.decision,
                answer.reason.map_or("", |r| r.code())
            ),
        );
        self.metrics.decision(
            "Authorize",
            match answer.decision {
                crate::ledger::Decision::Allow => "allow",
                crate::ledger::Decision::Deny => "deny",
                crate::ledger::Decision::Unknown => "unknown",
            },
            answer.reason.map_or("", |r| r.code()),
        );
        Ok(Response::new(answer.into()))
    }

    async fn settle(
        &self,
        request: Request<api::SettleRequest>,
    ) -> Result<Response<api::SettleResponse>, Status> {
        let req = request.get_ref();
        let (step, usage) = edge::settle_args(req)?;
        security::caller(request.extensions())?.act_for(&req.host_id)?;
        let replay = self
            .store
            .settle(&req.host_id, &req.run_id, step, usage)
            .await??;
        Ok(Response::new(api::SettleResponse { replay }))
    }

    async fn check_auth_attempt(
        &self,
        request: Request<api::AuthAttemptRequest>,
    ) -> Result<Response<api::AuthAttemptResponse>, Status> {
        let req = request.get_ref();
        let rule = edge::auth_key(self.store.auth_policy(), &req.endpoint, &req.identity)?;
        security::caller(request.extensions())?.use_auth_buckets()?;
        if req.peek {
            let decision = self
                .store
                .auth_peek(&req.endpoint, &req.identity, rule)
                .await?;
            record("decision", &format_args!("peek {:?}", decision.verdict));
            return Ok(Response::new(decision.into()));
        }
        let decision = self
            .store
            .auth_attempt(&req.endpoint, &req.identity, rule)
            .await?;
        record("decision", &format_args!("{:?}", decision.verdict));
        self.metrics.auth_attempt(
            &req.endpoint,
            match decision.verdict {
                AuthVerdict::Allowed => "allowed",
                AuthVerdict::LockedOut => "locked_out",
                AuthVerdict::AttemptsExhausted => "attempts_exhausted",
                AuthVerdict::KeyTableFull => "key_table_full",
            },
        );
        if decision.verdict == AuthVerdict::KeyTableFull {
            self.warn_table_full(&req.endpoint);
        }
        Ok(Response::new(decision.into()))
    }

    async fn reset_auth_attempts(
        &self,
        request: Request<api::AuthResetRequest>,
    ) -> Result<Response<api::AuthResetResponse>, Status> {
        let req = request.get_ref();
        edge::auth_key(self.store.auth_policy(), &req.endpoint, &req.identity)?;
        security::caller(request.extensions())?.use_auth_buckets()?;
        let cleared = self.store.auth_reset(&req.endpoint, &req.identity).await?;
        Ok(Response::new(api::AuthResetResponse {
            cleared: cleared.existed,
        }))
    }

    async fn get_stats(
        &self,
        request: Request<api::GetStatsRequest>,
    ) -> Result<Response<api::Stats>, Status> {
        let host_id = &request.get_ref().host_id;
        edge::id(host_id, "host_id")?;
        security::caller(request.extensions())?.read_host(host_id)?;
        let s = self.store.stats(host_id).await?;
        let ledger = self.store.ledger_stats(host_id).await?;
        // The limits the host is scheduled under: on a shared store, the limits of record.
        let limits = &s.limits;
        Ok(Response::new(api::Stats {
            total: limits.total,
            queue_total: limits.queue_total,
            in_flight: s.in_flight,
            queued: s.queued,
            admitted: s.counters.admitted,
            rejected: s.counters.rejected,
            shed: s.counters.shed,
            cancelled: s.counters.cancelled,
            expired: s.counters.expired,
            parked: s.parked,
            max_rss_mb: limits.memory.max_rss_mb,
            subjects: s
                .subjects
                .into_iter()
                .map(|r| api::SubjectStats {
                    subject: r.name,
                    in_flight: r.in_flight,
                    queued: r.queued,
                    cap: r.cap,
                })
                .collect(),
            accounts: s
                .accounts
                .into_iter()
                .map(|r| api::AccountStats {
                    account_id: r.name,
                    in_flight: r.in_flight,
                    queued: r.queued,
                    cap: r.cap,
                })
                .collect(),
            released: s.counters.released,
            reported_rss_mb: s.reported_rss_mb,
            per_subject: limits.per_subject,
            queue_per_subject: limits.queue_per_subject,
            queue_hard_total: limits.queue_hard_total,
            draining: self.gates.draining.load(Ordering::Relaxed),
            reservations_open: ledger.open,
            reservations_uncertain: ledger.uncertain,
            authorize_allowed: ledger.allowed,
            authorize_denied: ledger.denied,
            authorize_deferred: ledger.deferred,
            settled: ledger.settled,
        }))
    }
}

/// A ticket state's name in messages: the wire enum's, without its prefix.
fn state_name(s: TicketState) -> &'static str {
    let name = api::TicketState::from(s).as_str_name();
    name.strip_prefix("TICKET_STATE_").unwrap_or(name)
}

/// Record a field of the current RPC's span (see `server::serve`).
fn record(field: &'static str, value: &dyn std::fmt::Display) {
    tracing::Span::current().record(field, tracing::field::display(value));
}

/// The `limit` of a listing: 0 means the maximum.
fn list_limit(limit: u32) -> Result<usize, ApiError> {
    match limit {
        0 => Ok(edge::MAX_LIST as usize),
        n if n > edge::MAX_LIST => Err(ApiError::invalid(
            "limit",
            format!("must be <= {}", edge::MAX_LIST),
        )),
        n => Ok(n as usize),
    }
}

impl<S> AdmissionService<S> {
    /// Say, at most once a minute, that the local auth table is refusing new keys of
    /// `endpoint`: the operator should raise auth.local_max_keys or look for a flood.
    fn warn_table_full(&self, endpoint: &str) {
        let now = self.clock.now_ms() + 1;
        let last = self.table_full_logged.load(Ordering::Relaxed);
        if (last == 0 || now >= last + 60_000)
            && self
                .table_full_logged
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                endpoint,
                "auth bucket table is full of live keys for this endpoint: its new identities \
                 are refused until keys expire, other endpoints are not affected (raise \
                 auth.local_max_keys, a bound per endpoint, if this is not a flood)"
            );
        }
    }
}

/// Feed one Wait stream: the current state at once, then every state change, position changes
/// at most every [`POSITION_REFRESH`]; renew the queued ticket's lease while the stream is open;
/// end after the first event that is not QUEUED, or when the client goes away.
async fn follow<S: Store>(
    store: Arc<S>,
    id: TicketId,
    mut watch: S::Watch,
    first: TicketView,
    tx: mpsc::Sender<Result<api::WaitEvent, Status>>,
    lease_ttl_ms: u64,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let mut last = first;
    if tx.send(Ok(edge::wait_event(&id, &last))).await.is_err() {
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
    while last.state == TicketState::Queued {
        tokio::select! {
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
            Ok(None) => TicketView {
                key: id.key,
                state: TicketState::Expired,
                position: 0,
                grant: 0,
                lease_remaining_ms: 0,
            },
            Err(e) => {
                let _ = tx.send(Err(ApiError::from(e).into())).await;
                return;
            }
        };
        if next.state != last.state || next.position != last.position {
            if tx.send(Ok(edge::wait_event(&id, &next))).await.is_err() {
                return;
            }
            last = next;
        }
    }
}

#[tonic::async_trait]
impl<S: Store> api::operator_server::Operator for OperatorService<S> {
    async fn list_tickets(
        &self,
        request: Request<api::ListTicketsRequest>,
    ) -> Result<Response<api::ListTicketsResponse>, Status> {
        let req = request.get_ref();
        edge::id(&req.host_id, "host_id")?;
        let limit = list_limit(req.limit)?;
        let (list, truncated) = self.store.list(&req.host_id, limit).await?;
        let tickets = list
            .into_iter()
            .map(|t| api::TicketInfo {
                ticket_id: TicketId {
                    host_id: req.host_id.clone(),
                    key: t.key,
                }
                .to_string(),
                state: api::TicketState::from(t.state) as i32,
                subject: t.subject,
                account_id: t.account_id.unwrap_or_default(),
                run_id: t.run_id,
                instance_id: t.instance_id,
                grant: t.grant,
                lease_remaining_ms: ms32(t.lease_remaining_ms),
            })
            .collect();
        Ok(Response::new(api::ListTicketsResponse {
            tickets,
            truncated,
        }))
    }

    async fn drain(
        &self,
        _request: Request<api::DrainRequest>,
    ) -> Result<Response<api::DrainResponse>, Status> {
        let started = self.gates.start_drain();
        Ok(Response::new(api::DrainResponse { started }))
    }

    async fn list_reservations(
        &self,
        request: Request<api::ListReservationsRequest>,
    ) -> Result<Response<api::ListReservationsResponse>, Status> {
        let req = request.get_ref();
        edge::id(&req.host_id, "host_id")?;
        let limit = list_limit(req.limit)?;
        let (list, truncated) = self.store.reservations(&req.host_id, limit).await?;
        let reservations = list
            .into_iter()
            .map(|r| api::ReservationInfo {
                run_id: r.run_id,
                step: r.step,
                subject: r.subject,
                account_id: r.account_id.unwrap_or_default(),
                model: r.model,
                state: match r.state {
                    StepState::Uncertain => api::ReservationState::Uncertain,
                    _ => api::ReservationState::Reserved,
                } as i32,
                reserved_tokens: r.reserved_tokens,
                reserved_cost_usd: micros_to_usd(r.reserved_cost),
                age_ms: r.age_ms,
            })
            .collect();
        Ok(Response::new(api::ListReservationsResponse {
            reservations,
            truncated,
        }))
    }

    async fn resolve_reservation(
        &self,
        request: Request<api::ResolveReservationRequest>,
    ) -> Result<Response<api::ResolveReservationResponse>, Status> {
        let req = request.get_ref();
        let (step, resolution) = edge::resolve_args(req)?;
        self.store
            .resolve(&req.host_id, &req.run_id, step, resolution)
            .await??;
        tracing::info!(
            host_id = %req.host_id,
            run_id = %req.run_id,
            step,
            ?resolution,
            "uncertain reservation resolved by an operator"
        );
        Ok(Response::new(api::ResolveReservationResponse {}))
    }

    async fn unlock_auth(
        &self,
        request: Request<api::UnlockAuthRequest>,
    ) -> Result<Response<api::UnlockAuthResponse>, Status> {
        let req = request.get_ref();
        edge::auth_key(self.store.auth_policy(), &req.endpoint, &req.identity)?;
        let cleared = self.store.auth_reset(&req.endpoint, &req.identity).await?;
        tracing::info!(
            endpoint = %req.endpoint,
            identity = %req.identity,
            was_locked = cleared.was_locked,
            "auth bucket unlocked by an operator"
        );
        Ok(Response::new(api::UnlockAuthResponse {
            was_locked: cleared.was_locked,
            cleared: cleared.existed,
        }))
    }
}
