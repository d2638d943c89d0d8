//! The core's public types: keys and states, a Submit's arguments and refusals, what a ticket
//! and a host look like to callers (views, counters, stats). Data only, no rules.

use super::*;

/// Hashes a [`TicketKey`] by its low 64 bits. Keys are 128 random bits drawn by the store, never
/// chosen by a caller, so they need no keyed hash against collision floods; SipHash on every
/// ticket lookup would be pure cost.
#[derive(Default)]
pub struct TicketKeyHasher(u64);

impl Hasher for TicketKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only reached for keys hashed as bytes; fold them in.
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

/// A map keyed by ticket, hashed with [`TicketKeyHasher`].
pub type TicketMap<V> = HashMap<TicketKey, V, BuildHasherDefault<TicketKeyHasher>>;

/// Milliseconds on the store's clock (monotonic for the memory store, Redis `TIME` for Redis).
pub type Millis = u64;

/// The random part of a ticket id; the host is implied by the `HostState` that holds it.
pub type TicketKey = u128;

/// Where a ticket is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TicketState {
    Queued,
    Admitted,
    Released,
    Cancelled,
    Shed,
    Expired,
    Parked,
}

impl TicketState {
    /// Queued, admitted and parked tickets hold a lease; the rest are remembered only for
    /// idempotent retries.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            TicketState::Queued | TicketState::Admitted | TicketState::Parked
        )
    }
}

/// Whether a Submit may queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SubmitMode {
    #[default]
    Queue,
    /// Admit now or refuse with `Busy`; never queue.
    Try,
}

/// A Submit, already validated at the edge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitArgs {
    pub instance_id: String,
    pub subject: String,
    /// `None` = unbound (no account cap applies).
    pub account_id: Option<String>,
    pub run_id: String,
    pub mode: SubmitMode,
    pub rss_mb: Option<u32>,
    /// 1 (highest) ..= 5 (lowest); the edge turns "unset" into [`DEFAULT_PRIORITY`].
    pub priority: u8,
    /// The run's earlier ticket lapsed before the run started: if that ticket ended EXPIRED,
    /// a new one is made under the same run_id (see [`HostState::submit`]).
    pub resubmit_expired: bool,
}

/// A refusal that the caller should retry later. A normal outcome, not an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Saturated and no queue configured, or TRY mode while saturated.
    Busy,
    /// A queue bound is reached and the overflow policy cannot make room.
    QueueFull,
    /// The replica's reported memory (or the authority's own) is at the hard limit.
    MemoryPressure,
    /// The authority is draining.
    Draining,
}

impl Refusal {
    /// Its name: the ErrorInfo reason callers see, and the code the Redis scripts answer.
    /// Part of the public contract.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::Busy => "BUSY",
            Refusal::QueueFull => "QUEUE_FULL",
            Refusal::MemoryPressure => "MEMORY_PRESSURE",
            Refusal::Draining => "DRAINING",
        }
    }
}

/// What enforce mode would have done with a Submit that shadow mode admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShadowDecision {
    /// It would have waited in the queue.
    Queued,
    /// It would have been refused.
    Refused(Refusal),
}

impl ShadowDecision {
    /// Every decision, in the order of [`Counters::shadow`].
    pub const ALL: [ShadowDecision; 4] = [
        ShadowDecision::Queued,
        ShadowDecision::Refused(Refusal::Busy),
        ShadowDecision::Refused(Refusal::QueueFull),
        ShadowDecision::Refused(Refusal::MemoryPressure),
    ];

    /// `QUEUED` or the refusal's code: `SubmitResponse.shadow_reason` and the metric's reason.
    pub fn code(self) -> &'static str {
        match self {
            ShadowDecision::Queued => "QUEUED",
            ShadowDecision::Refused(r) => r.code(),
        }
    }

    /// Its place in [`Counters::shadow`].
    pub fn index(self) -> usize {
        ShadowDecision::ALL
            .iter()
            .position(|d| *d == self)
            .expect("every decision is listed")
    }

    pub fn from_code(code: &str) -> Option<Self> {
        ShadowDecision::ALL.into_iter().find(|d| d.code() == code)
    }
}

/// Why a Submit was not answered with a ticket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitError {
    Refused(Refusal),
    /// Refused while the host is in a learning window after its shared store lost its state
    /// (only the Redis store answers it): `left_ms` of the window remain.
    Learning {
        refusal: Refusal,
        left_ms: u64,
    },
    /// The run_id already names a ticket for another subject or account.
    RunIdConflict {
        field: &'static str,
    },
}

/// A ticket as callers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketView {
    pub key: TicketKey,
    pub state: TicketState,
    /// 0-based place in the dispatch order while queued, else 0.
    pub position: u32,
    /// Fencing number of its admission, 0 while queued.
    pub grant: u64,
    /// Lease left from now; 0 for ended tickets.
    pub lease_remaining_ms: u64,
    /// While queued, the expected wait from now (see [`eta_ms`]); 0 = unknown or not queued.
    pub eta_ms: u64,
    /// Set only in the answer to a Submit that shadow mode admitted but enforce would not have.
    pub shadow: Option<ShadowDecision>,
    /// While queued, what holds it.
    pub blocked_by: Option<Blocker>,
}

/// Cumulative counters of one host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Tickets created (each Submit that was not a repeat and was not refused).
    pub submitted: u64,
    pub admitted: u64,
    pub rejected: u64,
    pub released: u64,
    pub cancelled: u64,
    pub shed: u64,
    pub expired: u64,
    /// How long tickets that waited in the queue waited before their admission.
    pub queue_wait: WaitHistogram,
    /// Shadow mode's decisions by [`ShadowDecision::index`]: what enforce would have done.
    pub shadow: [u64; 4],
    /// The host's mean slot hold in ms (admission to release, park or expiry), a moving
    /// average of 1/16 weight (see [`next_hold_avg`]); 0 until a slot was freed.
    pub hold_avg_ms: u64,
    /// Releases of admitted tickets by the outcome they reported, by [`Outcome::index`].
    pub outcomes: [u64; 4],
    /// The latencies those releases reported (ms), summed, and how many did.
    pub latency_sum_ms: u64,
    pub latency_count: u64,
    /// Tickets re-registered by their holders ([`HostState::reclaim`]).
    pub reclaimed: u64,
}

/// What a Release says about the run's call to the model provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub outcome: Outcome,
    pub latency_ms: Option<u32>,
}

/// Accounts whose adaptive cap a host remembers away from its start at most: past it, the
/// outcomes of other accounts leave their caps at `max` (so invented account ids cannot grow
/// the host without bound).
pub const MAX_ADAPTIVE_ACCOUNTS: usize = 10_000;

/// Upper bounds (ms) of the queue-wait histogram's buckets; a last bucket takes the rest.
pub const QUEUE_WAIT_BOUNDS_MS: [u64; 10] = [
    10, 50, 100, 500, 1_000, 5_000, 10_000, 30_000, 60_000, 300_000,
];

/// A histogram of waits: counts per bucket of [`QUEUE_WAIT_BOUNDS_MS`] (not cumulative; the
/// last counts waits above every bound) and the sum in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitHistogram {
    pub buckets: [u64; 11],
    pub sum_ms: u64,
}

impl WaitHistogram {
    pub fn observe(&mut self, waited_ms: u64) {
        let i = QUEUE_WAIT_BOUNDS_MS
            .iter()
            .position(|b| waited_ms <= *b)
            .unwrap_or(QUEUE_WAIT_BOUNDS_MS.len());
        self.buckets[i] += 1;
        self.sum_ms += waited_ms;
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// A per-subject or per-account row of [`HostStats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRow {
    pub name: String,
    pub in_flight: u32,
    pub queued: u32,
    pub cap: u32,
    /// An account whose cap adapts to the outcomes releases report.
    pub adaptive: bool,
}

/// A snapshot of one host's gauges and counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostStats {
    pub in_flight: u32,
    pub queued: u32,
    pub parked: u32,
    pub counters: Counters,
    /// Highest fresh rss report from a replica, 0 if none.
    pub reported_rss_mb: u32,
    pub subjects: Vec<UsageRow>,
    pub accounts: Vec<UsageRow>,
    /// The limits the host was scheduled under (on a shared store, the installation's limits
    /// of record, which may come from another replica's file).
    pub limits: Limits,
    /// While the host is in a learning window after its shared store lost its state, the ms
    /// left of it (no new Submit is admitted meanwhile); 0 otherwise. The core never opens
    /// one: only the Redis store detects a loss.
    pub learning_left_ms: u64,
}
