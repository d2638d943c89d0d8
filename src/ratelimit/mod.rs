//! Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`),
//! decided as envoyproxy/ratelimit decides it, on counts the store keeps exactly and shares.
//!
//! Pure and without I/O, like the scheduler: every call takes the time it decides at.
//!
//! * [`rules`]: the configured domains in envoyproxy/ratelimit's file format, as a tree per
//!   domain, and which rule a request's descriptor meets (the most specific match: an exact
//!   `key`/`value`, then a wildcard value, then the `key` alone; a rule applies only at the
//!   descriptor's last entry);
//! * [`decide`]: one request into the counters to hit, and their counts into the answer
//!   (codes, `DescriptorStatus` fields, the `x-ratelimit-*` headers) and the hits each
//!   configured descriptor's metrics count;
//! * [`counters`]: the bounded table of live counters the embedded store keeps.
//!
//! The semantics, as envoyproxy/ratelimit's:
//!
//! * windows are fixed and aligned to the Unix epoch: a window of a unit of `d` seconds starts
//!   at `now - now % d` (a month is 30 days, a year 365, a week 7, as upstream counts them), and
//!   resets `d - now % d` seconds from now;
//! * a descriptor counts `hits_addend` hits: its own when it sets one (an explicit 0 only looks),
//!   else the request's, where 0 means 1. Hits over the limit still count;
//! * a descriptor is over its limit when its count after the hits is above `requests_per_unit`;
//!   the request is `OVER_LIMIT` when any descriptor is (quota-mode descriptors: when all of
//!   them are), `OK` otherwise. Shadow-mode rules count and are counted as over the limit in
//!   metrics, but answer `OK`;
//! * `unlimited` rules answer `OK` with `limit_remaining` 4294967295 and count nothing; a rule
//!   whose `name` another matched rule `replaces` is not applied; a descriptor's own `limit`
//!   (set by Envoy's route configuration) wins over the configuration, in a known domain;
//! * a descriptor that meets no rule, or a domain that is not configured, answers `OK` with no
//!   `current_limit`, as upstream does (the metrics count the unknown domain).
//!
//! Beyond upstream: the count is exact (one atomic store operation per request, across its
//! descriptors) and bounded: each domain keeps at most `max_counters` live counters, and a
//! descriptor that would need one more is answered `OVER_LIMIT` without being counted (as auth
//! buckets refuse new identities when full). Counters whose window ended are dropped.

pub mod counters;
pub mod decide;
pub mod rules;

pub use counters::{CounterImage, CounterInfo, CounterTable, Hit};
pub use decide::{Answer, Code, Descriptor, Plan, Request, Status, Tally, plan};
pub use rules::{DomainRules, Limit, Rule, Rules, Unit};

/// Live counters per domain unless `rate_limits.max_counters` says otherwise: about 22 MiB of
/// memory for a domain flooded to its bound (measured by `loadgen --only ratelimit`).
pub const DEFAULT_MAX_COUNTERS: u64 = 100_000;

/// The share of a limit past which hits are counted as near it, unless
/// `rate_limits.near_limit_ratio` says otherwise (upstream's `NEAR_LIMIT_RATIO`).
pub const DEFAULT_NEAR_LIMIT_RATIO: f64 = 0.8;

/// The `limit_remaining` of an unlimited descriptor, as upstream answers it.
pub const UNLIMITED_REMAINING: u32 = u32::MAX;

/// Everything the rate limit service is configured with (`rate_limits`).
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimitPolicy {
    pub rules: Rules,
    /// Live counters per domain.
    pub max_counters: u64,
    pub near_limit_ratio: f64,
    /// Answer the `x-ratelimit-limit`, `-remaining` and `-reset` headers (upstream's
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`).
    pub response_headers: bool,
}

impl Default for RateLimitPolicy {
    fn default() -> Self {
        RateLimitPolicy {
            rules: Rules::default(),
            max_counters: DEFAULT_MAX_COUNTERS,
            near_limit_ratio: DEFAULT_NEAR_LIMIT_RATIO,
            response_headers: false,
        }
    }
}

/// The rate limits in force, replaced whole when the configuration is reloaded: a request
/// decides with the policy it read first, from start to end.
#[derive(Debug, Default)]
pub struct LiveRateLimits(std::sync::RwLock<std::sync::Arc<RateLimitPolicy>>);

impl LiveRateLimits {
    pub fn new(policy: RateLimitPolicy) -> Self {
        LiveRateLimits(std::sync::RwLock::new(std::sync::Arc::new(policy)))
    }

    pub fn get(&self) -> std::sync::Arc<RateLimitPolicy> {
        self.0.read().expect("rate limits lock").clone()
    }

    pub fn set(&self, policy: RateLimitPolicy) {
        *self.0.write().expect("rate limits lock") = std::sync::Arc::new(policy);
    }
}
