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
    /// Terminal: a newer ticket of its key (a keep-newest policy) took its place in the queue.
    Superseded,
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
    /// The ticket's key and what it asks of the key's other tickets; `None`: no key.
    pub keyed: Option<KeyArgs>,
}

/// A Submit's key (e.g. a conversation id) and its policy, already validated at the edge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyArgs {
    /// 1..=128 bytes of printable ASCII.
    pub key: String,
    pub policy: KeyPolicy,
    /// With a keep-newest policy: the key's admitted (or parked) holders are told that this
    /// ticket supersedes them (`superseded_by`); they keep their slots until they release.
    pub supersede_running: bool,
    /// With a keep-newest policy: not admitted before this long passed without a newer ticket
    /// of the key (0 = off).
    pub debounce_ms: u64,
    /// With `debounce_ms`: admitted at the latest this long after the first ticket of the
    /// key's burst (0 = no bound).
    pub debounce_max_ms: u64,
}

/// What a ticket's key asks of the key's other tickets on its host. The policy of a key is
/// that of its first live ticket; a Submit asking another is refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyPolicy {
    /// The key only labels.
    #[default]
    None,
    /// A new ticket ends the key's queued tickets SUPERSEDED; admitted ones run on.
    KeepNewest,
    /// At most one admitted (or parked) ticket per key; the others wait in order.
    Serial,
    /// Both: one running, at most one waiting, the newest.
    SerialKeepNewest,
    /// A new ticket is refused while the key has a live ticket.
    RejectNew,
}

impl KeyPolicy {
    pub const ALL: [KeyPolicy; 5] = [
        KeyPolicy::None,
        KeyPolicy::KeepNewest,
        KeyPolicy::Serial,
        KeyPolicy::SerialKeepNewest,
        KeyPolicy::RejectNew,
    ];

    /// Its name in the API (`KEY_POLICY_*`), in messages and in the Redis scripts.
    pub fn code(self) -> &'static str {
        match self {
            KeyPolicy::None => "KEY_POLICY_NONE",
            KeyPolicy::KeepNewest => "KEY_POLICY_KEEP_NEWEST",
            KeyPolicy::Serial => "KEY_POLICY_SERIAL",
            KeyPolicy::SerialKeepNewest => "KEY_POLICY_SERIAL_KEEP_NEWEST",
            KeyPolicy::RejectNew => "KEY_POLICY_REJECT_NEW",
        }
    }

    pub fn from_code(code: &str) -> Option<KeyPolicy> {
        KeyPolicy::ALL.into_iter().find(|p| p.code() == code)
    }

    /// A new ticket supersedes the key's queued ones.
    pub fn keeps_newest(self) -> bool {
        matches!(self, KeyPolicy::KeepNewest | KeyPolicy::SerialKeepNewest)
    }

    /// At most one admitted (or parked) ticket per key.
    pub fn is_serial(self) -> bool {
        matches!(self, KeyPolicy::Serial | KeyPolicy::SerialKeepNewest)
    }
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
    /// The refusals a host counts by reason (draining is refused before any host).
    pub const COUNTED: [Refusal; 3] = [Refusal::Busy, Refusal::QueueFull, Refusal::MemoryPressure];

    /// Its place in [`Counters::refusals`]; draining shares memory pressure's, never used.
    pub fn index(self) -> usize {
        match self {
            Refusal::Busy => 0,
            Refusal::QueueFull => 1,
            Refusal::MemoryPressure | Refusal::Draining => 2,
        }
    }

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
    /// `KEY_POLICY_REJECT_NEW`: the key has a live ticket, `holder` (counted in `rejected`
    /// and `key_refused`).
    KeyBusy {
        holder: TicketKey,
    },
    /// The key's live tickets were submitted under policy `live`, this Submit asks `asked`.
    KeyPolicyConflict {
        live: KeyPolicy,
        asked: KeyPolicy,
    },
    /// The store cannot decide what the Submit asks (`field`: why, in `rule`).
    Unsupported {
        field: &'static str,
        rule: &'static str,
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
    /// A SUPERSEDED ticket: the newer ticket of its key that ended it. An admitted or parked
    /// one: the newest ticket of its key submitted with `supersede_running` (it should stop).
    pub superseded_by: Option<TicketKey>,
    /// While queued and debounced, the ms until its debounce runs out (a Wait stream looks
    /// again then); 0 otherwise.
    pub debounce_left_ms: u64,
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
    /// Queued tickets a newer ticket of their key ended (SUPERSEDED).
    pub superseded: u64,
    /// Submits refused because their key was busy (`KEY_POLICY_REJECT_NEW`); also counted in
    /// `rejected`.
    pub key_refused: u64,
    /// The other refusals counted in `rejected`, by [`Refusal::index`]. The data dir does not
    /// keep them: on the embedded store they count from the process's start (the history
    /// that reads them starts there too).
    pub refusals: [u64; 3],
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
