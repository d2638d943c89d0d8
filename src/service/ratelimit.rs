//! Envoy's rate limit service, `envoy.service.ratelimit.v3.RateLimitService`, on the gRPC port
//! beside Admission and Operator: each `ShouldRateLimit` is checked here, decided by
//! [`crate::ratelimit`] and counted by the store in one atomic operation.
//!
//! Who may call: with credentials configured, a gateway credential whose `domains` name the
//! request's domain. Envoy sends one as a bearer token through its gRPC service's
//! `initial_metadata`, or presents a client certificate a credential names (mTLS).
//! A store failure answers UNAVAILABLE, never OK uncounted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::{Request, Response, Status};

use super::status::ApiError;
use crate::api::envoy::config::core::v3::HeaderValue;
use crate::api::envoy::extensions::common::ratelimit::v3 as common;
use crate::api::envoy::service::ratelimit::v3::{
    self as rls, RateLimitRequest, RateLimitResponse, rate_limit_response as response,
};
use crate::api::envoy::r#type::v3::RateLimitUnit;
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::ratelimit::{self, Answer, Code, Limit, LiveRateLimits, Unit};
use crate::security;
use crate::store::Store;

/// How often, at most, a domain at its `max_counters` is logged.
const FULL_LOG_EVERY_MS: u64 = 60_000;

/// The service over a store.
pub struct RateLimitService<S> {
    store: Arc<S>,
    limits: Arc<LiveRateLimits>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    /// When (on `clock`, plus one) a full domain was last logged.
    full_logged: AtomicU64,
}

impl<S> RateLimitService<S> {
    pub fn new(
        store: Arc<S>,
        limits: Arc<LiveRateLimits>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        RateLimitService {
            store,
            limits,
            metrics,
            clock,
            full_logged: AtomicU64::new(0),
        }
    }
}

#[tonic::async_trait]
impl<S: Store> rls::rate_limit_service_server::RateLimitService for RateLimitService<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let (_, ext, req) = request.into_parts();
        let req = request_of(req)?;
        super::record("domain", &req.domain);
        security::caller(&ext)?
            .rate_limit(&req.domain)
            .map_err(ApiError::from)?;
        let policy = self.limits.get();
        let plan = ratelimit::plan(&policy.rules, &req);
        let (now_s, counts) = if plan.hits.is_empty() {
            (0, Vec::new())
        } else if plan.subtract {
            let c = self
                .store
                .rate_limit_subtract(&req.domain, &plan.hits)
                .await?;
            (c.now_ms / 1000, c.counts)
        } else {
            let c = self
                .store
                .rate_limit_hits(&req.domain, policy.max_counters, &plan.hits)
                .await?;
            (c.now_ms / 1000, c.counts)
        };
        let answer = plan.answer(
            &counts,
            now_s,
            policy.near_limit_ratio,
            policy.response_headers,
        );
        self.metrics.rate_limits.record(&req.domain, &answer);
        if answer.tallies.iter().any(|t| t.refused) {
            self.log_full(&req.domain, policy.max_counters);
        }
        Ok(Response::new(response_of(answer)))
    }
}

impl<S> RateLimitService<S> {
    fn log_full(&self, domain: &str, max: u64) {
        let now = self.clock.now_ms() + 1;
        let last = self.full_logged.load(Ordering::Relaxed);
        if (last == 0 || now >= last + FULL_LOG_EVERY_MS)
            && self
                .full_logged
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                domain,
                max_counters = max,
                "rate limit domain holds its max_counters live counters: descriptors that need \
                 a new counter are answered OVER_LIMIT uncounted until windows end (raise \
                 rate_limits.max_counters if this is real traffic)"
            );
        }
    }
}

/// A request, checked: a domain, at least one descriptor, each with at least one entry, every
/// entry with a key, and an override's unit known.
fn request_of(req: RateLimitRequest) -> Result<ratelimit::Request, ApiError> {
    if req.domain.is_empty() {
        return Err(ApiError::invalid("domain", "must not be empty"));
    }
    if req.descriptors.is_empty() {
        return Err(ApiError::invalid("descriptors", "at least one is required"));
    }
    let mut descriptors = Vec::with_capacity(req.descriptors.len());
    for (i, d) in req.descriptors.into_iter().enumerate() {
        descriptors.push(descriptor_of(d, i)?);
    }
    if req.hits_subtrahend > 0 {
        if req.hits_addend > 0 {
            return Err(ApiError::invalid(
                "hits_subtrahend",
                "a request that takes hits back cannot also add them (hits_addend is set)",
            ));
        }
        if let Some(i) = descriptors.iter().position(|d| d.hits_addend.is_some()) {
            return Err(ApiError::invalid(
                "hits_subtrahend",
                format!(
                    "a request that takes hits back cannot also add them \
                     (descriptors[{i}].hits_addend is set)"
                ),
            ));
        }
    }
    Ok(ratelimit::Request {
        domain: req.domain,
        descriptors,
        hits_addend: req.hits_addend,
        hits_subtrahend: req.hits_subtrahend,
    })
}

fn descriptor_of(
    d: common::RateLimitDescriptor,
    i: usize,
) -> Result<ratelimit::Descriptor, ApiError> {
    if d.entries.is_empty() {
        return Err(ApiError::invalid(
            format!("descriptors[{i}].entries"),
            "at least one entry is required",
        ));
    }
    let mut entries = Vec::with_capacity(d.entries.len());
    for (j, e) in d.entries.into_iter().enumerate() {
        if e.key.is_empty() {
            return Err(ApiError::invalid(
                format!("descriptors[{i}].entries[{j}].key"),
                "must not be empty",
            ));
        }
        entries.push((e.key, e.value));
    }
    let limit = match d.limit {
        None => None,
        Some(l) => {
            let unit = match RateLimitUnit::try_from(l.unit) {
                Ok(RateLimitUnit::Second) => Unit::Second,
                Ok(RateLimitUnit::Minute) => Unit::Minute,
                Ok(RateLimitUnit::Hour) => Unit::Hour,
                Ok(RateLimitUnit::Day) => Unit::Day,
                Ok(RateLimitUnit::Month) => Unit::Month,
                Ok(RateLimitUnit::Year) => Unit::Year,
                Ok(RateLimitUnit::Unknown) | Err(_) => {
                    return Err(ApiError::invalid(
                        format!("descriptors[{i}].limit.unit"),
                        "must be one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR",
                    ));
                }
            };
            Some(Limit {
                requests_per_unit: l.requests_per_unit,
                unit,
            })
        }
    };
    Ok(ratelimit::Descriptor {
        entries,
        limit,
        hits_addend: d.hits_addend,
    })
}

fn code_of(c: Code) -> i32 {
    match c {
        Code::Ok => response::Code::Ok as i32,
        Code::OverLimit => response::Code::OverLimit as i32,
    }
}

fn unit_of(u: Unit) -> i32 {
    let u = match u {
        Unit::Second => response::rate_limit::Unit::Second,
        Unit::Minute => response::rate_limit::Unit::Minute,
        Unit::Hour => response::rate_limit::Unit::Hour,
        Unit::Day => response::rate_limit::Unit::Day,
        Unit::Week => response::rate_limit::Unit::Week,
        Unit::Month => response::rate_limit::Unit::Month,
        Unit::Year => response::rate_limit::Unit::Year,
    };
    u as i32
}

fn response_of(a: Answer) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: code_of(a.overall),
        statuses: a
            .statuses
            .into_iter()
            .map(|s| response::DescriptorStatus {
                code: code_of(s.code),
                current_limit: s.limit.map(|(l, name)| response::RateLimit {
                    name,
                    requests_per_unit: l.requests_per_unit,
                    unit: unit_of(l.unit),
                }),
                limit_remaining: s.remaining,
                duration_until_reset: s.reset_s.map(|secs| prost_types::Duration {
                    seconds: secs as i64,
                    nanos: 0,
                }),
            })
            .collect(),
        response_headers_to_add: a
            .headers
            .into_iter()
            .map(|(key, value)| HeaderValue {
                key: key.to_string(),
                value,
                raw_value: Vec::new(),
            })
            .collect(),
        request_headers_to_add: Vec::new(),
        raw_body: Vec::new(),
    }
}
