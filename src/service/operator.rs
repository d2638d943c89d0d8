//! The `admission.v1.Operator` service: listings, resolutions, unlocks, drain, and the rate
//! limits and Envoy admission policies in force, for operators.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::edge;
use super::status::ApiError;
use super::{list_limit, replies};
use crate::api;
use crate::gates::Gates;
use crate::history;
use crate::http_admission::LivePolicies;
use crate::ratelimit::LiveRateLimits;
use crate::store::Store;

/// The `Operator` service over a store.
pub struct OperatorService<S> {
    store: Arc<S>,
    gates: Arc<Gates>,
    rate_limits: Arc<LiveRateLimits>,
    http_policies: Arc<LivePolicies>,
    history: history::Shape,
}

impl<S> OperatorService<S> {
    pub fn new(
        store: Arc<S>,
        gates: Arc<Gates>,
        rate_limits: Arc<LiveRateLimits>,
        http_policies: Arc<LivePolicies>,
        history: history::Shape,
    ) -> Self {
        OperatorService {
            store,
            gates,
            rate_limits,
            http_policies,
            history,
        }
    }
}

impl<S: Store> OperatorService<S> {
    /// An operator's reads answer `NOT_FOUND` for a host that is not one (a mistyped URL in
    /// the console), and create nothing: no host, no metric series.
    async fn known(&self, host_id: &str) -> Result<(), Status> {
        if self.store.knows_host(host_id).await? {
            Ok(())
        } else {
            Err(ApiError::NoSuchHost(host_id.to_string()).into())
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
        self.known(&req.host_id).await?;
        let (list, truncated) = self.store.list(&req.host_id, limit).await?;
        let tickets = list
            .into_iter()
            .map(|t| replies::ticket_info(&req.host_id, t))
            .collect();
        Ok(Response::new(api::ListTicketsResponse {
            tickets,
            truncated,
        }))
    }

    async fn list_hosts(
        &self,
        _request: Request<api::ListHostsRequest>,
    ) -> Result<Response<api::ListHostsResponse>, Status> {
        let (host_ids, store_problem) = match crate::store::hosts_or_problem(&*self.store).await {
            Ok(hosts) => (hosts, String::new()),
            Err(problem) => (Vec::new(), problem),
        };
        Ok(Response::new(api::ListHostsResponse {
            host_ids,
            draining: self
                .gates
                .draining
                .load(std::sync::atomic::Ordering::Relaxed),
            store_problem,
            note: self.store.readiness_note().unwrap_or_default(),
        }))
    }

    async fn get_rate_limits(
        &self,
        request: Request<api::GetRateLimitsRequest>,
    ) -> Result<Response<api::GetRateLimitsResponse>, Status> {
        let req = request.into_inner();
        let limit = match req.limit {
            0 => 20,
            n if n > 1000 => return Err(ApiError::invalid("limit", "must be <= 1000").into()),
            n => n as usize,
        };
        let policy = self.rate_limits.get();
        let domains: Vec<&crate::ratelimit::DomainRules> = if req.domain.is_empty() {
            policy.rules.domains().collect()
        } else {
            match policy.rules.domain(&req.domain) {
                Some(d) => vec![d],
                None => return Err(ApiError::UnknownDomain(req.domain).into()),
            }
        };
        let names: Vec<String> = domains.iter().map(|d| d.domain.clone()).collect();
        let hottest = self.store.rate_limit_counters(&names, limit).await?;
        Ok(Response::new(replies::rate_limits(
            &policy.rules,
            &domains,
            hottest,
            policy.max_counters,
            policy.response_headers,
        )))
    }

    async fn list_http_policies(
        &self,
        request: Request<api::ListHttpPoliciesRequest>,
    ) -> Result<Response<api::ListHttpPoliciesResponse>, Status> {
        let host_id = &request.get_ref().host_id;
        if !host_id.is_empty() {
            edge::id(host_id, "host_id")?;
        }
        let policies = self.http_policies.get();
        Ok(Response::new(api::ListHttpPoliciesResponse {
            policies: policies
                .policies
                .values()
                .filter(|p| host_id.is_empty() || &p.host_id == host_id)
                .map(|p| replies::http_policy(p))
                .collect(),
        }))
    }

    async fn get_host_history(
        &self,
        request: Request<api::GetHostHistoryRequest>,
    ) -> Result<Response<api::GetHostHistoryResponse>, Status> {
        let host_id = &request.get_ref().host_id;
        edge::id(host_id, "host_id")?;
        self.known(host_id).await?;
        let samples = self.store.history(host_id).await?;
        let shape = &self.history;
        Ok(Response::new(api::GetHostHistoryResponse {
            bucket_ms: shape.bucket_ms,
            buckets_kept: shape.buckets as u32,
            buckets: history::points(&samples)
                .iter()
                .map(replies::history_bucket)
                .collect(),
        }))
    }

    async fn list_ended_tickets(
        &self,
        request: Request<api::ListEndedTicketsRequest>,
    ) -> Result<Response<api::ListEndedTicketsResponse>, Status> {
        let req = request.get_ref();
        edge::id(&req.host_id, "host_id")?;
        let most = crate::scheduler::RECENT_ENDINGS;
        let limit = match req.limit as usize {
            0 => most,
            n if n > most => {
                return Err(ApiError::invalid("limit", format!("must be <= {most}")).into());
            }
            n => n,
        };
        self.known(&req.host_id).await?;
        let endings = self.store.recent_endings(&req.host_id, limit).await?;
        Ok(Response::new(api::ListEndedTicketsResponse {
            ended: endings
                .iter()
                .map(|e| replies::ended_ticket(&req.host_id, e))
                .collect(),
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
        self.known(&req.host_id).await?;
        let (list, truncated) = self.store.reservations(&req.host_id, limit).await?;
        let reservations = list.into_iter().map(Into::into).collect();
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
        if !self.gates.is_declared(&req.endpoint) {
            edge::auth_key(self.store.auth_policy(), &req.endpoint, &req.identity, None)?;
        }
        edge::id(&req.identity, "identity")?;
        let cleared = self.store.auth_reset(&req.endpoint, &req.identity).await?;
        tracing::info!(
            endpoint = %req.endpoint,
            identity = %req.identity,
            was_locked = cleared.was_locked,
            "auth bucket unlocked by an operator"
        );
        Ok(Response::new(cleared.into()))
    }

    async fn get_limits(
        &self,
        request: Request<api::GetLimitsRequest>,
    ) -> Result<Response<api::GetLimitsResponse>, Status> {
        let req = request.get_ref();
        let host_id = &req.host_id;
        edge::id(host_id, "host_id")?;
        if req.or_defaults && !self.store.knows_host(host_id).await? {
            // What it would start with; nothing is made until a SetLimits or a ticket is.
            return Ok(Response::new(
                crate::scheduler::LimitsRecord {
                    limits: self.store.file_limits(host_id),
                    source: crate::scheduler::LimitsSource::File,
                    revision: 0,
                }
                .into(),
            ));
        }
        self.known(host_id).await?;
        let mut reply: api::GetLimitsResponse = self.store.get_limits(host_id).await?.into();
        reply.adaptive_caps = self
            .store
            .stats(host_id)
            .await?
            .accounts
            .into_iter()
            .filter(|r| r.adaptive)
            .map(|r| (r.name, r.cap))
            .collect();
        Ok(Response::new(reply))
    }

    async fn set_limits(
        &self,
        request: Request<api::SetLimitsRequest>,
    ) -> Result<Response<api::SetLimitsResponse>, Status> {
        let req = request.get_ref();
        edge::id(&req.host_id, "host_id")?;
        let memory = self.store.file_limits(&req.host_id).memory;
        let limits = super::limits_input::operator_limits(req.limits.as_ref(), memory)?;
        let expected = req.expected_revision;
        let record = self
            .store
            .set_limits(&req.host_id, limits, expected)
            .await?
            .map_err(|current| ApiError::RevisionMoved { expected, current })?;
        tracing::info!(
            host_id = %req.host_id,
            revision = record.revision,
            limits = ?record.limits,
            "limits set by an operator"
        );
        Ok(Response::new(record.into()))
    }

    async fn reset_limits(
        &self,
        request: Request<api::ResetLimitsRequest>,
    ) -> Result<Response<api::ResetLimitsResponse>, Status> {
        let req = request.get_ref();
        edge::id(&req.host_id, "host_id")?;
        let expected = req.expected_revision;
        let record = self
            .store
            .reset_limits(&req.host_id, expected)
            .await?
            .map_err(|current| ApiError::RevisionMoved { expected, current })?;
        tracing::info!(
            host_id = %req.host_id,
            revision = record.revision,
            "limits reset to the configuration file by an operator"
        );
        Ok(Response::new(record.into()))
    }
}
