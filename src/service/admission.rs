//! The `admission.v1.Admission` service: tickets, reservations and auth buckets for gateways.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::edge;
use super::replies;
use super::status::ApiError;
use super::wait::{WaitStreams, follow};
use super::{record, state_name};
use crate::api;
use crate::auth::{AuthDecision, AuthVerdict, BucketRule, BucketSource, MAX_DECLARED_BUCKETS};
use crate::gates::Gates;
use crate::scheduler::{Refusal, SubmitError, TicketState};
use crate::security;
use crate::store::{Store, TicketId};

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
            wait_streams: WaitStreams::new(max_wait_streams_per_connection, max_wait_streams),
        }
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
            match &e {
                SubmitError::Refused(r) | SubmitError::Learning { refusal: r, .. } => {
                    record("decision", &r.code());
                    self.metrics.decision("Submit", "refused", r.code());
                }
                SubmitError::KeyBusy { .. } => {
                    record("decision", &"KEY_BUSY");
                    self.metrics.decision("Submit", "refused", "KEY_BUSY");
                }
                _ => {}
            }
            crate::service::status::submit_error(&host_id, e)
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
        Ok(Response::new((id, view).into()))
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
            0 => self.store.file_limits(&id.host_id).lease_ttl_ms,
            left => left.min(self.store.file_limits(&id.host_id).lease_ttl_ms),
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
            .map(|(ticket_id, view)| replies::renewed(ticket_id, view))
            .collect();
        Ok(Response::new(api::RenewResponse { tickets }))
    }

    async fn release(
        &self,
        request: Request<api::ReleaseRequest>,
    ) -> Result<Response<api::ReleaseResponse>, Status> {
        let (_, ext, req) = request.into_parts();
        let report = edge::release_report(&req)?;
        let caller = security::caller(&ext)?;
        let (id, previous) = match edge::release_target(&req)? {
            // Never issued: as for a ticket long forgotten.
            edge::ReleaseTarget::Ticket(None) => return Ok(Response::new(replies::released(None))),
            edge::ReleaseTarget::Ticket(Some(id)) => {
                caller.release_for(&id.host_id)?;
                let previous = self.store.release(&id, report).await?;
                (id, previous)
            }
            edge::ReleaseTarget::Run { host_id, run_id } => {
                caller.release_for(host_id)?;
                match self.store.release_run(host_id, run_id, report).await? {
                    Some((id, previous)) => (id, Some(previous)),
                    None => return Ok(Response::new(replies::released(None))),
                }
            }
        };
        if let (Some(operator), Some(state)) = (caller.operator_name(), previous) {
            tracing::info!(%id, operator, previous = ?state, "ticket released by an operator");
        }
        // The id as given when there was one (it parsed, so it is the id's own spelling).
        let ticket_id = if req.ticket_id.is_empty() {
            id.to_string()
        } else {
            req.ticket_id
        };
        Ok(Response::new(replies::released(
            previous.map(|p| (ticket_id, p)),
        )))
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
        Ok(Response::new(v.into()))
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
        Ok(Response::new(v.into()))
    }

    async fn reclaim(
        &self,
        request: Request<api::ReclaimRequest>,
    ) -> Result<Response<api::ReclaimResponse>, Status> {
        let (_, ext, req) = request.into_parts();
        let (id, held) = edge::reclaim_args(req).inspect_err(|_| {
            self.metrics.reclaim_refused("INVALID_ARGUMENT");
        })?;
        record("host_id", &id.host_id);
        record("subject", &held.subject);
        security::caller(&ext)?
            .act_for(&id.host_id)
            .inspect_err(|_| self.metrics.reclaim_refused("PERMISSION_DENIED"))?;
        let run_id = held.run_id.clone();
        match self.store.reclaim(&id, held).await? {
            Ok(r) => {
                if r.reclaimed {
                    tracing::info!(ticket = %id, run_id, grant = r.view.grant, "ticket reclaimed by its holder");
                }
                Ok(Response::new(replies::reclaimed(r)))
            }
            Err(refusal) => {
                record("decision", &refusal.code());
                self.metrics.reclaim_refused(refusal.code());
                Err(ApiError::ReclaimRefused(refusal).into())
            }
        }
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
        let rule = self.auth_bucket(&req.endpoint, &req.identity, req.declared.as_ref())?;
        security::caller(request.extensions())?.use_auth_buckets()?;
        let answer = |decision: AuthDecision| api::AuthAttemptResponse {
            bucket: Some(replies::auth_bucket(rule)),
            ..decision.into()
        };
        if req.peek {
            let decision = self
                .store
                .auth_peek(&req.endpoint, &req.identity, rule)
                .await?;
            record("decision", &format_args!("peek {:?}", decision.verdict));
            return Ok(Response::new(answer(decision)));
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
        Ok(Response::new(answer(decision)))
    }

    async fn reset_auth_attempts(
        &self,
        request: Request<api::AuthResetRequest>,
    ) -> Result<Response<api::AuthResetResponse>, Status> {
        let req = request.get_ref();
        self.auth_bucket(&req.endpoint, &req.identity, req.declared.as_ref())?;
        security::caller(request.extensions())?.use_auth_buckets()?;
        let cleared = self.store.auth_reset(&req.endpoint, &req.identity).await?;
        Ok(Response::new(cleared.into()))
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
        let draining = self.gates.draining.load(Ordering::Relaxed);
        let losses = (self.store.state_losses(), self.store.last_state_loss_ms());
        Ok(Response::new(replies::stats(s, ledger, draining, losses)))
    }
}

impl<S: Store> AdmissionService<S> {
    /// The bucket deciding (endpoint, identity): the operator's, the caller's declared one, or
    /// the built-in one. A declared endpoint the configuration does not name takes one of the
    /// process's `MAX_DECLARED_BUCKETS` places.
    fn auth_bucket(
        &self,
        endpoint: &str,
        identity: &str,
        declared: Option<&api::AuthBucket>,
    ) -> Result<BucketRule, ApiError> {
        let policy = self.store.auth_policy();
        let (rule, source) = edge::auth_key(policy, endpoint, identity, declared)?;
        if source == BucketSource::Declared
            && policy.bucket(endpoint).is_none()
            && !self.gates.declare_bucket(endpoint, MAX_DECLARED_BUCKETS)
        {
            return Err(ApiError::TooManyDeclaredBuckets(endpoint.to_string()));
        }
        Ok(rule)
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
