//! The limits one host is scheduled under, resolved from configuration.

use std::collections::HashMap;

use super::adaptive::Adaptive;

/// What to do when a Submit must queue and a queue bound is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverflowPolicy {
    /// Refuse the newcomer with QUEUE_FULL.
    Reject,
    /// Evict the oldest waiter of the newcomer's subject when that subject's queue is full,
    /// else the oldest waiter of the subject with the most waiters (a flood never evicts a
    /// quiet tenant); of equally deep subjects, the one whose oldest waiter is oldest.
    ShedOldest,
    /// Keep queueing past `queue_total` up to `queue_hard_total`. The per-subject bound stays
    /// hard, so one subject cannot take the overflow for itself.
    Queue,
}

impl OverflowPolicy {
    pub const NAMES: [&'static str; 3] = ["reject", "shed_oldest", "queue"];

    pub fn name(self) -> &'static str {
        match self {
            OverflowPolicy::Reject => "reject",
            OverflowPolicy::ShedOldest => "shed_oldest",
            OverflowPolicy::Queue => "queue",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "reject" => Some(OverflowPolicy::Reject),
            "shed_oldest" => Some(OverflowPolicy::ShedOldest),
            "queue" => Some(OverflowPolicy::Queue),
            _ => None,
        }
    }
}

/// Whether a host's limits bind or are only reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Caps and queue bounds decide.
    #[default]
    Enforce,
    /// Every Submit is admitted at once; the decision enforce would have made is reported
    /// (a ticket's shadow decision, counters, a metric) and nothing is refused or queued.
    Shadow,
}

impl Mode {
    pub const NAMES: [&'static str; 2] = ["enforce", "shadow"];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "enforce" => Some(Mode::Enforce),
            "shadow" => Some(Mode::Shadow),
            _ => None,
        }
    }
}

/// Priority levels: 1 is the highest, 5 the lowest.
pub const LEVELS: usize = 5;

/// The level of a Submit that names none.
pub const DEFAULT_PRIORITY: u8 = 3;

/// The largest weight a subject may have (the smallest, and the default, is 1).
pub const MAX_WEIGHT: u32 = 1000;

/// Where a host's limits come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitsSource {
    /// The configuration file (on a shared store, the most recently started replica's).
    File,
    /// An operator's SetLimits, until ResetLimits.
    Operator,
}

/// A host's limits in force, with their source and revision (which increases with every
/// change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitsRecord {
    pub limits: Limits,
    pub source: LimitsSource,
    pub revision: u64,
}

/// The per-replica memory ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLimits {
    /// Reports at or above this refuse Submits with MEMORY_PRESSURE; 0 = off.
    pub max_rss_mb: u32,
    /// Reports at or above this (and below max) queue newcomers and hold that replica's
    /// waiters back.
    pub soft_rss_mb: u32,
}

impl MemoryLimits {
    pub const OFF: MemoryLimits = MemoryLimits {
        max_rss_mb: 0,
        soft_rss_mb: 0,
    };

    pub fn from_ratio(max_rss_mb: u32, soft_ratio: f64) -> Self {
        MemoryLimits {
            max_rss_mb,
            soft_rss_mb: (f64::from(max_rss_mb) * soft_ratio).floor() as u32,
        }
    }

    pub fn is_hard(&self, rss_mb: Option<u32>) -> bool {
        self.max_rss_mb > 0 && rss_mb.is_some_and(|r| r >= self.max_rss_mb)
    }

    pub fn is_soft(&self, rss_mb: u32) -> bool {
        self.max_rss_mb > 0 && rss_mb >= self.soft_rss_mb
    }
}

/// Ended tickets a host remembers at most, by default: about 16 MiB of the embedded store's
/// memory per host (an ended ticket keeps only its id, run_id, final state and grant).
pub const DEFAULT_MAX_RETAINED: u32 = 100_000;

/// Caps, queue bounds and timings of one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub total: u32,
    pub per_subject: u32,
    /// `None`: no per-account cap unless `accounts` names the account.
    pub per_account: Option<u32>,
    pub subjects: HashMap<String, u32>,
    pub accounts: HashMap<String, u32>,
    /// Declared queue depth; 0 = no queue (saturation answers BUSY).
    pub queue_total: u32,
    /// Per-subject queue bound; 0 = none.
    pub queue_per_subject: u32,
    /// The bound that `OverflowPolicy::Queue` may grow to.
    pub queue_hard_total: u32,
    pub overflow: OverflowPolicy,
    pub lease_ttl_ms: u64,
    /// How long ended tickets are remembered for idempotent retries.
    pub retention_ms: u64,
    /// Most ended tickets remembered at once; past it the oldest is forgotten early. Bounds
    /// the memory of a host whatever its rate of Submits.
    pub max_retained: u32,
    pub memory: MemoryLimits,
    /// Weights of subjects in the round robin (1..=[`MAX_WEIGHT`]); a subject not named has
    /// weight 1. A subject of weight w is served up to w times in a row when its turn comes.
    pub weights: HashMap<String, u32>,
    /// A waiter queued longer than this is served as priority 1; 0 = off.
    pub priority_aging_ms: u64,
    pub mode: Mode,
    /// Adaptive caps of named accounts (an account in `accounts` has a fixed cap instead).
    pub adaptive: HashMap<String, Adaptive>,
    /// Adaptive caps of every other bound account; `None`: `per_account` applies.
    pub adaptive_default: Option<Adaptive>,
}

impl Limits {
    /// How the cap of `account` adapts, if it does: a fixed cap in `accounts` wins, then the
    /// account's own adaptive settings, then the default ones.
    pub fn adaptive_of(&self, account: &str) -> Option<&Adaptive> {
        if self.accounts.contains_key(account) {
            return None;
        }
        self.adaptive
            .get(account)
            .or(self.adaptive_default.as_ref())
    }

    pub fn weight(&self, subject: &str) -> u32 {
        self.weights.get(subject).copied().unwrap_or(1)
    }

    pub fn shadow(&self) -> bool {
        self.mode == Mode::Shadow
    }

    pub fn subject_cap(&self, subject: &str) -> u32 {
        self.subjects
            .get(subject)
            .copied()
            .unwrap_or(self.per_subject)
    }

    pub fn account_cap(&self, account: &str) -> Option<u32> {
        self.accounts.get(account).copied().or(self.per_account)
    }

    /// Whether any account is capped (per_account, a named account, or an adaptive cap): a
    /// run that names no account would escape those caps, which callers may want to refuse.
    pub fn caps_accounts(&self) -> bool {
        self.per_account.is_some()
            || !self.accounts.is_empty()
            || !self.adaptive.is_empty()
            || self.adaptive_default.is_some()
    }
}

impl Default for Limits {
    /// The built-in defaults: total 32, per_subject 4, no queue, lease 30 s, retention 10 min
    /// (at most [`DEFAULT_MAX_RETAINED`] ended tickets).
    fn default() -> Self {
        Limits {
            total: 32,
            per_subject: 4,
            per_account: None,
            subjects: HashMap::new(),
            accounts: HashMap::new(),
            queue_total: 0,
            queue_per_subject: 0,
            queue_hard_total: 0,
            overflow: OverflowPolicy::Reject,
            lease_ttl_ms: 30_000,
            retention_ms: 600_000,
            max_retained: DEFAULT_MAX_RETAINED,
            memory: MemoryLimits::OFF,
            weights: HashMap::new(),
            priority_aging_ms: 0,
            mode: Mode::Enforce,
            adaptive: HashMap::new(),
            adaptive_default: None,
        }
    }
}

/// Limits for every host: the default, and the hosts that override it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LimitsTable {
    pub default: Limits,
    pub hosts: HashMap<String, Limits>,
}

impl LimitsTable {
    pub fn uniform(limits: Limits) -> Self {
        LimitsTable {
            default: limits,
            hosts: HashMap::new(),
        }
    }

    pub fn for_host(&self, host_id: &str) -> &Limits {
        self.hosts.get(host_id).unwrap_or(&self.default)
    }

    /// The shortest lease of any host, which paces the periodic sweep.
    /// The longest lease of any host.
    pub fn longest_lease_ms(&self) -> u64 {
        self.hosts
            .values()
            .map(|l| l.lease_ttl_ms)
            .chain([self.default.lease_ttl_ms])
            .max()
            .unwrap_or(self.default.lease_ttl_ms)
    }

    pub fn shortest_lease_ms(&self) -> u64 {
        self.hosts
            .values()
            .map(|l| l.lease_ttl_ms)
            .chain([self.default.lease_ttl_ms])
            .min()
            .unwrap_or(self.default.lease_ttl_ms)
    }
}
