//! What a host's resource limits are: budgets per run, allowances per account, the policy that
//! picks the ones a run is held to, and money in whole micro-dollars. Data and lookups; the
//! ledger's rules are in the parent module.

use std::collections::HashMap;

use crate::scheduler::Millis;

/// Millionths of a US dollar.
pub type Micros = u64;

/// Largest cost accepted anywhere: a billion dollars. Anything above is a unit mistake.
pub const MAX_USD: f64 = 1e9;

/// Dollars → micro-dollars, rounded to the nearest; `None` unless finite and in 0..=MAX_USD.
pub fn usd_to_micros(usd: f64) -> Option<Micros> {
    (usd.is_finite() && (0.0..=MAX_USD).contains(&usd)).then(|| (usd * 1e6).round() as Micros)
}

/// Micro-dollars → dollars.
pub fn micros_to_usd(m: Micros) -> f64 {
    m as f64 / 1e6
}

/// What to do when a run's usage is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum UnknownUsage {
    /// Continue with the known part. (Ordered weakest first: intersecting budgets take the
    /// strictest policy.)
    Allow,
    /// Answer UNKNOWN and leave the call to the gateway's own policy.
    Defer,
    /// Deny with RESOURCE_USAGE_UNKNOWN.
    Reject,
}

impl UnknownUsage {
    pub const NAMES: [&'static str; 3] = ["reject", "allow", "defer"];

    pub fn name(self) -> &'static str {
        match self {
            UnknownUsage::Reject => "reject",
            UnknownUsage::Allow => "allow",
            UnknownUsage::Defer => "defer",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "reject" => Some(UnknownUsage::Reject),
            "allow" => Some(UnknownUsage::Allow),
            "defer" => Some(UnknownUsage::Defer),
            _ => None,
        }
    }
}

/// A per-run budget block (`resources.default`, `.subjects.<s>`, `.accounts.<a>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Most tokens (input + output) one run may use.
    pub max_tokens: Option<u64>,
    /// Most cost one run may incur.
    pub max_cost: Option<Micros>,
    pub unknown_usage: UnknownUsage,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_tokens: None,
            max_cost: None,
            unknown_usage: UnknownUsage::Reject,
        }
    }
}

/// An account's allowance per window (`allowances.<account_id>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allowance {
    pub tokens: Option<u64>,
    pub cost: Option<Micros>,
    /// The window opens at the first reservation after the previous one ended.
    pub window_ms: Millis,
}

/// Budgets and allowances, resolved from configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourcePolicy {
    /// Applies to every run when configured.
    pub default: Option<Budget>,
    pub subjects: HashMap<String, Budget>,
    pub accounts: HashMap<String, Budget>,
    pub allowances: HashMap<String, Allowance>,
    /// How long a reservation may stay unsettled before it is marked uncertain.
    pub reservation_ttl_ms: Millis,
    /// How long a run with nothing unsettled is remembered after its last call (replays and its
    /// per-run usage live that long).
    pub run_retention_ms: Millis,
}

impl Default for ResourcePolicy {
    fn default() -> Self {
        ResourcePolicy {
            default: None,
            subjects: HashMap::new(),
            accounts: HashMap::new(),
            allowances: HashMap::new(),
            reservation_ttl_ms: 3_600_000,
            run_retention_ms: 24 * 3_600_000,
        }
    }
}

/// The budgets that apply to one run, intersected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effective {
    pub max_tokens: Option<u64>,
    pub max_cost: Option<Micros>,
    /// `None` when no block applies: then unknown usage does not stop a run.
    pub unknown_usage: Option<UnknownUsage>,
}

impl ResourcePolicy {
    /// The per-run budget of a run of `subject` spending `account`: every block that applies,
    /// intersected (configuration only; no state).
    pub fn effective(&self, subject: &str, account: Option<&str>) -> Effective {
        let blocks = [
            self.default.as_ref(),
            self.subjects.get(subject),
            account.and_then(|a| self.accounts.get(a)),
        ];
        let mut e = Effective {
            max_tokens: None,
            max_cost: None,
            unknown_usage: None,
        };
        for b in blocks.into_iter().flatten() {
            e.max_tokens = min_opt(e.max_tokens, b.max_tokens);
            e.max_cost = min_opt(e.max_cost, b.max_cost);
            e.unknown_usage = e.unknown_usage.max(Some(b.unknown_usage));
        }
        e
    }
}

pub(super) fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}
