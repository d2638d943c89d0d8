//! The rate limit service's counts, as envoyproxy/ratelimit reports them per domain and
//! configured descriptor: hits, over limit, near limit, within limit, shadow mode; and the
//! hits refused a new counter (the domain held its `max_counters`), and requests of domains
//! that are not configured.
//!
//! Labels stay bounded: a descriptor is the configured rule's path (`tenant`, `tenant_acme`,
//! `tenant.model`), never a runtime value, and the domains are configured ones; a limit Envoy
//! sets on a descriptor is labelled with the descriptor's keys. Past
//! [`MAX_RATE_LIMIT_SERIES`] series, new ones are counted under `descriptor="_other"`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ratelimit::Answer;

/// Most (domain, descriptor) series.
pub const MAX_RATE_LIMIT_SERIES: usize = 10_000;
const OTHER: &str = "_other";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    total: u64,
    over_limit: u64,
    near_limit: u64,
    within_limit: u64,
    shadow_mode: u64,
    refused: u64,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct RateLimitMetrics {
    /// domain → descriptor → counts.
    series: Mutex<HashMap<String, HashMap<String, Counts>>>,
    unknown_domain: AtomicU64,
}

impl RateLimitMetrics {
    /// Count one answered request of `domain`.
    pub fn record(&self, domain: &str, answer: &Answer) {
        if answer.unknown_domain {
            self.unknown_domain.fetch_add(1, Ordering::Relaxed);
        }
        if answer.tallies.is_empty() {
            return;
        }
        let mut series = self.series.lock().expect("metrics lock");
        let total: usize = series.values().map(HashMap::len).sum();
        if !series.contains_key(domain) {
            series.insert(domain.to_string(), HashMap::new());
        }
        let by_descriptor = series.get_mut(domain).expect("just made");
        for t in &answer.tallies {
            let c = match by_descriptor.get_mut(t.descriptor.as_str()) {
                Some(c) => c,
                None => {
                    let label = if total >= MAX_RATE_LIMIT_SERIES {
                        OTHER
                    } else {
                        t.descriptor.as_str()
                    };
                    by_descriptor.entry(label.to_string()).or_default()
                }
            };
            c.total += t.total;
            c.over_limit += t.over_limit;
            c.near_limit += t.near_limit;
            c.within_limit += t.within_limit;
            c.shadow_mode += t.shadow_mode;
            c.refused += u64::from(t.refused) * t.total;
        }
    }

    /// The exposition of every series.
    pub fn write(&self, out: &mut String) {
        let series = self.series.lock().expect("metrics lock");
        let mut rows: Vec<(&String, &String, &Counts)> = series
            .iter()
            .flat_map(|(d, m)| m.iter().map(move |(k, c)| (d, k, c)))
            .collect();
        rows.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        type Family = (&'static str, &'static str, fn(&Counts) -> u64);
        let families: [Family; 6] = [
            (
                "admission_ratelimit_hits_total",
                "Hits counted by the rate limit service (upstream's total_hits)",
                |c| c.total,
            ),
            (
                "admission_ratelimit_over_limit_total",
                "Hits over their limit, shadow mode included",
                |c| c.over_limit,
            ),
            (
                "admission_ratelimit_near_limit_total",
                "Hits past near_limit_ratio of their limit and not over it",
                |c| c.near_limit,
            ),
            (
                "admission_ratelimit_within_limit_total",
                "Hits within their limit",
                |c| c.within_limit,
            ),
            (
                "admission_ratelimit_shadow_mode_total",
                "Hits over a shadow-mode limit, answered OK",
                |c| c.shadow_mode,
            ),
            (
                "admission_ratelimit_counter_refused_total",
                "Hits answered OVER_LIMIT uncounted: the domain held max_counters live counters",
                |c| c.refused,
            ),
        ];
        for (name, help, get) in families {
            let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} counter");
            for (domain, descriptor, c) in &rows {
                let _ = writeln!(
                    out,
                    "{name}{{domain=\"{}\",descriptor=\"{}\"}} {}",
                    super::escape(domain),
                    super::escape(descriptor),
                    get(c)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP admission_ratelimit_unknown_domain_total ShouldRateLimit requests of a domain \
             that is not configured (answered OK).\n# TYPE admission_ratelimit_unknown_domain_total \
             counter\nadmission_ratelimit_unknown_domain_total {}",
            self.unknown_domain.load(Ordering::Relaxed)
        );
    }
}
