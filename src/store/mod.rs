//! The store seam: everything the service asks of shared state, one atomic operation per method.
//!
//! A store decides with the pure [`crate::scheduler`] rules; the embedded [`memory::MemoryStore`]
//! runs them under a per-host lock, and a Redis store runs the same rules in Lua scripts. The
//! conformance suite in `tests/store_conformance.rs` is written against this trait once and run
//! against every store.

pub mod journal;
pub mod memory;
pub mod redis;
mod timed;

pub use timed::{Recorder, StoreOp, Timed};

use std::fmt;
use std::future::Future;

use crate::auth::{AuthCleared, AuthDecision, AuthPolicy, BucketRule};
use crate::history;
use crate::ledger::{
    Authorization, AuthorizeArgs, LedgerError, LedgerStats, ReservationInfo, Resolution,
    ResourcePolicy, Usage,
};
use crate::ratelimit::{CounterInfo, Hit};
use crate::scheduler::{
    Ending, HeldArgs, HostStats, Limits, LimitsRecord, LimitsTable, ReclaimRefusal, Reclaimed,
    Report, SubmitArgs, SubmitError, TicketInfo, TicketKey, TicketState, TicketView,
};

/// Everything a store enforces, resolved from configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policy {
    /// Scheduling limits per host.
    pub limits: LimitsTable,
    /// Auth buckets, installation-wide.
    pub auth: AuthPolicy,
    /// Per-run budgets and account allowances, applied on every host.
    pub resources: ResourcePolicy,
}

impl From<LimitsTable> for Policy {
    /// Scheduling limits with the default auth buckets and no budgets.
    fn from(limits: LimitsTable) -> Self {
        Policy {
            limits,
            ..Policy::default()
        }
    }
}

/// A ledger call's answer: the store's failure outside, the caller's mistake inside.
pub type LedgerResult<T> = Result<Result<T, LedgerError>, StoreError>;

/// What a [`StoreError`] was caused by, kept for logs and error chains.
pub type ErrorSource = std::sync::Arc<dyn std::error::Error + Send + Sync>;

/// Why the shared store failed a call, and so whether the call may have been applied there.
/// Tickets and reservations fail closed on any of them; the edge tells the caller which
/// (`STORE_UNAVAILABLE`: not applied, retry freely; `OUTCOME_UNKNOWN`: may have been applied,
/// retry with the same idempotency key). `what` names the store and says what happened in an
/// operator's words; `source` is the client library's own error when there is one.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached (connection refused, no answer while connecting,
    /// authentication): nothing was sent, nothing was applied.
    #[error("store unavailable: {what}")]
    Unreachable {
        what: String,
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store runs a version this authority cannot work with: nothing was applied.
    #[error("store unavailable: {what}")]
    Incompatible { what: String },
    /// The call was sent and no answer came in time: it may have been applied.
    #[error("store outcome unknown: {what}")]
    Timeout { what: String },
    /// The call was sent and the connection broke before the answer: it may have been applied.
    #[error("store outcome unknown: {what}")]
    ConnectionLost {
        what: String,
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store answered something this authority does not understand (an error reply, a
    /// malformed answer): it may have been applied.
    #[error("store answered unexpectedly: {what}")]
    Protocol {
        what: String,
        #[source]
        source: Option<ErrorSource>,
    },
    /// The embedded store's data dir does not take writes (a full disk, a failing device):
    /// the change was refused before it was applied.
    #[error("store unavailable: {what}")]
    WriteRefused { what: String },
    /// The change was applied, but writing its record to the data dir failed: it stands,
    /// and reaches the disk once the disk takes writes again (so it may be there after a
    /// restart, or not).
    #[error("store outcome unknown: {what}")]
    WriteFailed { what: String },
    /// The store's settings cannot work (a URL that is not one).
    #[error("store settings: {what}")]
    Config {
        what: String,
        #[source]
        source: Option<ErrorSource>,
    },
}

impl StoreError {
    /// Whether the call may have been applied despite the error.
    pub fn may_have_applied(&self) -> bool {
        matches!(
            self,
            StoreError::Timeout { .. }
                | StoreError::ConnectionLost { .. }
                | StoreError::WriteFailed { .. }
                | StoreError::Protocol { .. }
        )
    }

    /// An answer this authority does not understand, without a library error behind it.
    pub fn protocol(what: impl Into<String>) -> Self {
        StoreError::Protocol {
            what: what.into(),
            source: None,
        }
    }
}

/// A ticket's public id: `<host_id>.<32 lowercase hex digits>`. The host travels inside the id so
/// that Renew, Release and Wait (which carry only the id) reach the right host's state in one
/// step, and so that a ticket can be checked against the caller's host without a lookup.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TicketId {
    pub host_id: String,
    pub key: TicketKey,
}

impl TicketId {
    /// Parse a ticket id; `None` when it is not of the form `<host>.<32 hex digits>`.
    pub fn parse(s: &str) -> Option<TicketId> {
        let (host, hex) = s.rsplit_once('.')?;
        if host.is_empty() || hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if hex.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        Some(TicketId {
            host_id: host.to_string(),
            key: u128::from_str_radix(hex, 16).ok()?,
        })
    }

    /// A fresh id on `host_id` with a [`TicketId::random_key`].
    pub fn random(host_id: &str) -> TicketId {
        TicketId {
            host_id: host_id.to_string(),
            key: Self::random_key(),
        }
    }

    /// 128 random bits from the operating system's random source (read 4 KiB at a time per
    /// thread, so a Submit does not pay a system call).
    pub fn random_key() -> TicketKey {
        thread_local! {
            static POOL: std::cell::RefCell<([u8; 4096], usize)> =
                const { std::cell::RefCell::new(([0; 4096], 4096)) };
        }
        POOL.with_borrow_mut(|(buf, used)| {
            if *used + 16 > buf.len() {
                getrandom::fill(buf).expect("the operating system's random source works");
                *used = 0;
            }
            let mut bytes = [0u8; 16];
            bytes.copy_from_slice(&buf[*used..*used + 16]);
            // Never hand the same bytes out twice.
            buf[*used..*used + 16].fill(0);
            *used += 16;
            u128::from_le_bytes(bytes)
        })
    }
}

impl fmt::Display for TicketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:032x}", self.host_id, self.key)
    }
}

/// Resolves for a Wait stream when its ticket may have changed (spurious wake-ups allowed).
pub trait TicketWatch: Send + 'static {
    fn changed(&mut self) -> impl Future<Output = ()> + Send;
}

/// A Wait stream's subscription to one ticket, on either store: a receiver its store signals
/// on every change of the ticket's host (in memory) or of the ticket (Redis, from the other
/// replicas' notices). Once the sender is gone nothing wakes it again.
pub struct ChangeWatch {
    rx: Option<tokio::sync::watch::Receiver<()>>,
}

impl ChangeWatch {
    pub fn new(rx: tokio::sync::watch::Receiver<()>) -> Self {
        ChangeWatch { rx: Some(rx) }
    }

    /// A watch that never fires (a ticket no store holds).
    pub fn never() -> Self {
        ChangeWatch { rx: None }
    }
}

impl TicketWatch for ChangeWatch {
    async fn changed(&mut self) {
        match &mut self.rx {
            Some(rx) => {
                if rx.changed().await.is_err() {
                    // The sender is gone (the host or ticket was dropped).
                    self.rx = None;
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

/// The scheduler's tickets. Each method is one atomic operation: no caller ever reads, decides
/// and writes in separate steps.
pub trait TicketStore: Send + Sync + 'static {
    type Watch: TicketWatch;

    /// The limits this replica's configuration file gives a host (an operator's SetLimits, or
    /// on a shared store another replica's file, may be in force instead: [`Self::get_limits`]).
    fn file_limits(&self, host_id: &str) -> Limits;

    /// The configuration file changed (SIGHUP): its limits replace the file's limits of every
    /// host that is not under an operator's, from the host's next decision.
    fn reload_file_limits(&self, limits: LimitsTable);

    /// The limits a host is decided with now, their source and revision.
    fn get_limits(
        &self,
        host_id: &str,
    ) -> impl Future<Output = Result<LimitsRecord, StoreError>> + Send;

    /// Put an operator's `limits` in force for a host, if its revision is still
    /// `expected_revision` (0: any); otherwise `Err` with the revision it is at. Waiters that
    /// fit under raised caps are admitted at once.
    fn set_limits(
        &self,
        host_id: &str,
        limits: Limits,
        expected_revision: u64,
    ) -> impl Future<Output = Result<Result<LimitsRecord, u64>, StoreError>> + Send;

    /// Return a host to the file's limits (nothing changes when it uses them), with the same
    /// revision check as [`Self::set_limits`].
    fn reset_limits(
        &self,
        host_id: &str,
        expected_revision: u64,
    ) -> impl Future<Output = Result<Result<LimitsRecord, u64>, StoreError>> + Send;

    /// Admit, queue or refuse a new ticket; a repeated run_id answers with its existing ticket.
    fn submit(
        &self,
        host_id: &str,
        args: SubmitArgs,
    ) -> impl Future<Output = Result<Result<(TicketId, TicketView), SubmitError>, StoreError>> + Send;

    /// Extend leases; `None` for each id the store does not know.
    fn renew(
        &self,
        ids: &[TicketId],
        rss_mb: Option<u32>,
    ) -> impl Future<Output = Result<Vec<Option<TicketView>>, StoreError>> + Send;

    /// Release or withdraw, with what the run reports about its provider call (see
    /// [`HostState::release_reporting`](crate::scheduler::HostState::release_reporting)); the
    /// state before the call, `None` if unknown.
    fn release(
        &self,
        id: &TicketId,
        report: Report,
    ) -> impl Future<Output = Result<Option<TicketState>, StoreError>> + Send;

    /// Release or withdraw the ticket Submit made for `(host_id, run_id)`: its id and the state
    /// before the call, `None` if the run has no ticket.
    fn release_run(
        &self,
        host_id: &str,
        run_id: &str,
        report: Report,
    ) -> impl Future<Output = Result<Option<(TicketId, TicketState)>, StoreError>> + Send;

    /// Park an admitted ticket (parking a parked one changes nothing): the ticket after it,
    /// `None` if unknown, or the state that forbids it.
    fn park(
        &self,
        id: &TicketId,
    ) -> impl Future<Output = Result<Option<Result<TicketView, TicketState>>, StoreError>> + Send;

    /// Ask for a slot again for a parked ticket (admitted or queued ones stay as they are):
    /// the ticket after it, `None` if unknown, or the state that forbids it (it ended).
    fn unpark(
        &self,
        id: &TicketId,
    ) -> impl Future<Output = Result<Option<Result<TicketView, TicketState>>, StoreError>> + Send;

    /// Re-register a ticket its holder still runs (see
    /// [`HostState::reclaim`](crate::scheduler::HostState::reclaim)): the ticket after the call,
    /// or why it was refused.
    fn reclaim(
        &self,
        id: &TicketId,
        held: HeldArgs,
    ) -> impl Future<Output = Result<Result<Reclaimed, ReclaimRefusal>, StoreError>> + Send;

    /// Losses of the shared store's state (each opens a learning window, see
    /// [`HostStats::learning_left_ms`]): the installation's count, which outlives the losses
    /// and the replicas that saw them; 0 for a store that cannot lose its state under a
    /// running process.
    fn state_losses(&self) -> u64 {
        0
    }

    /// When the last of [`Self::state_losses`] was detected, in ms since the Unix epoch; 0 for
    /// none.
    fn last_state_loss_ms(&self) -> u64 {
        0
    }

    /// Read one ticket.
    fn ticket(
        &self,
        id: &TicketId,
    ) -> impl Future<Output = Result<Option<TicketView>, StoreError>> + Send;

    /// Subscribe to changes of one ticket. Subscribe before reading, so no change is missed.
    fn watch(&self, id: &TicketId) -> Self::Watch;

    /// Expire due leases and forget old tickets on every host.
    fn sweep_tickets(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Gauges and counters of a host.
    fn stats(&self, host_id: &str) -> impl Future<Output = Result<HostStats, StoreError>> + Send;

    /// Live tickets of a host, at most `limit`; true when there were more.
    fn list(
        &self,
        host_id: &str,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<TicketInfo>, bool), StoreError>> + Send;

    /// Keep `counts` as the host's history sample of the bucket the store's clock is in now,
    /// unless that bucket has one (on Redis, the first replica's), and forget samples older
    /// than `shape` keeps.
    fn record_history(
        &self,
        host_id: &str,
        counts: &history::Counts,
        shape: &history::Shape,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The host's history samples, oldest first.
    fn history(
        &self,
        host_id: &str,
    ) -> impl Future<Output = Result<Vec<history::Sample>, StoreError>> + Send;

    /// The host's newest endings, newest first, at most `limit` (see
    /// [`crate::scheduler::Ending`]), each `at` in ms since the Unix epoch on the store's clock.
    fn recent_endings(
        &self,
        host_id: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Ending>, StoreError>> + Send;

    /// Count a Submit refused before it reached the store (the authority's own memory).
    fn count_rejection(&self, host_id: &str)
    -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Admitted tickets whose state ends with this process: a draining authority waits for
    /// them. 0 for a shared store, whose tickets other replicas keep serving.
    fn in_flight_here(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// What this store is, for `admission_store_info{kind}`: `memory`, `data_dir` or `redis`.
    fn kind(&self) -> &'static str;

    /// True for a store other replicas share (its tickets outlive this process, so a drain
    /// does not wait for them).
    fn shared(&self) -> bool {
        false
    }

    /// The hosts with state, for metrics.
    fn host_ids(&self) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Whether `host_id` is a host: the store holds state for it (a ticket, a reservation or a
    /// limits change named it), or the configuration file lists it under `hosts:`. An
    /// operator's read of any other host answers `NOT_FOUND` and creates nothing.
    fn knows_host(&self, host_id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Calls to the shared store that failed since the process started (for metrics); 0 for a
    /// store that cannot fail.
    fn store_errors(&self) -> u64 {
        0
    }

    /// Why the store cannot take changes now, for `/readyz` (the data dir does not take
    /// writes); `Ok` when it can, as far as this process knows without asking.
    fn readiness(&self) -> Result<(), String> {
        Ok(())
    }

    /// What `/readyz` adds while the store is ready but not as usual (a learning window after
    /// a state loss); `None` when nothing.
    fn readiness_note(&self) -> Option<String> {
        None
    }

    /// Make what the store buffers durable before the process exits.
    fn flush(&self) {}

    /// Turn on the send gate of a store that has one (a data dir under `interval` or `os`):
    /// from then on a change's answer is made before its record is written, and the caller
    /// must pass every byte it sends through one of the gates returned (see
    /// [`journal::SendGate`]). Call it once, before serving.
    fn send_gates(&self) -> Option<journal::SendGates> {
        None
    }
}

/// The resource ledger: reservations of model steps against budgets and allowances.
pub trait LedgerStore: Send + Sync + 'static {
    /// Decide one model step of a run on `host_id`: allow with a reservation, deny, or defer.
    fn authorize(
        &self,
        host_id: &str,
        args: AuthorizeArgs,
    ) -> impl Future<Output = LedgerResult<Authorization>> + Send;

    /// Record what a step used; `true` when it repeats an earlier identical Settle.
    fn settle(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        usage: Usage,
    ) -> impl Future<Output = LedgerResult<bool>> + Send;

    /// An operator's resolution of an uncertain reservation.
    fn resolve(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        resolution: Resolution,
    ) -> impl Future<Output = LedgerResult<()>> + Send;

    /// Reservations a host still holds (uncertain first, then oldest), at most `limit`; true
    /// when there were more.
    fn reservations(
        &self,
        host_id: &str,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<ReservationInfo>, bool), StoreError>> + Send;

    /// Gauges and counters of a host's ledger.
    fn ledger_stats(
        &self,
        host_id: &str,
    ) -> impl Future<Output = Result<LedgerStats, StoreError>> + Send;

    /// Mark reservations past their TTL uncertain and forget idle runs, on every host.
    fn sweep_ledger(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Auth buckets, installation-wide.
pub trait AuthStore: Send + Sync + 'static {
    /// The auth buckets this store enforces.
    fn auth_policy(&self) -> &AuthPolicy;

    /// Count one attempt of `identity` against `endpoint`'s bucket, whose rule is `rule`.
    /// Never fails: a store that cannot reach its shared state decides with a local bucket
    /// (`degraded`), and never fails open.
    fn auth_attempt(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> impl Future<Output = Result<AuthDecision, StoreError>> + Send;

    /// What an attempt would meet now, counting nothing ([`crate::auth::AuthTable::peek`]).
    /// Like `auth_attempt`, it falls back to the local bucket when the shared one is unreachable.
    fn auth_peek(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> impl Future<Output = Result<AuthDecision, StoreError>> + Send;

    /// Clear the bucket and any lockout of `(endpoint, identity)`.
    fn auth_reset(
        &self,
        endpoint: &str,
        identity: &str,
    ) -> impl Future<Output = Result<AuthCleared, StoreError>> + Send;

    /// Drop local buckets whose window and lockout have ended.
    fn sweep_auth(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// True while attempts are decided by a local fallback because the shared store is
    /// unreachable.
    fn auth_degraded(&self) -> bool {
        false
    }
}

/// What a store answers for one `ShouldRateLimit`'s hits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitCounts {
    /// The store's time of the count, in ms since the Unix epoch (the windows' clock).
    pub now_ms: u64,
    /// Each hit's count after it, in order; `None` when it needed a new counter and its
    /// domain already holds `max_counters` live ones (nothing counted).
    pub counts: Vec<Option<u64>>,
}

/// The counters of Envoy's rate limit service, installation-wide: fixed windows aligned to the
/// Unix epoch on the store's clock (Redis' `TIME` on Redis), so every replica counts in the
/// same windows.
pub trait RateLimitStore: Send + Sync + 'static {
    /// Count `hits` in `domain`, in order, as one atomic operation (see
    /// [`crate::ratelimit::CounterTable::hit`]).
    fn rate_limit_hits(
        &self,
        domain: &str,
        max_counters: u64,
        hits: &[Hit],
    ) -> impl Future<Output = Result<RateLimitCounts, StoreError>> + Send;

    /// Subtract each hit's `addend` from its counter in `domain` (Envoy's `hits_subtrahend`),
    /// as one atomic operation (see [`crate::ratelimit::CounterTable::subtract`]): only from a
    /// counter of the current window, never below zero; a subtraction makes no counter.
    fn rate_limit_subtract(
        &self,
        domain: &str,
        hits: &[Hit],
    ) -> impl Future<Output = Result<RateLimitCounts, StoreError>> + Send;

    /// The live counters of `domains` with the highest counts, highest first, at most `limit`
    /// (on Redis, of the first 10,000 live counters of each domain).
    fn rate_limit_counters(
        &self,
        domains: &[String],
        limit: usize,
    ) -> impl Future<Output = Result<Vec<CounterInfo>, StoreError>> + Send;

    /// Drop the counters of `domains` whose window ended (Redis expires them by itself; its
    /// sweep drops them from each domain's tally of live counters).
    fn sweep_rate_limits(
        &self,
        domains: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The hosts `store` has state for, or why it cannot be used now (as `/readyz` says it): its
/// own readiness first, then whether it answers.
pub async fn hosts_or_problem<S: Store>(store: &S) -> Result<Vec<String>, String> {
    store.readiness()?;
    store.host_ids().await.map_err(|e| e.to_string())
}

/// The authority's whole shared state: tickets, reservations, auth buckets and rate limit
/// counters. Every store the server runs on implements all four parts.
pub trait Store: TicketStore + LedgerStore + AuthStore + RateLimitStore {
    /// The periodic sweep of the first three parts (the rate limit counters are swept with
    /// the configured domains, by the server).
    fn sweep(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        async {
            self.sweep_tickets().await?;
            self.sweep_ledger().await?;
            self.sweep_auth().await
        }
    }
}

impl<T: TicketStore + LedgerStore + AuthStore + RateLimitStore> Store for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticket_ids_round_trip_and_reject_malformed() {
        let id = TicketId::random("host.with.dots");
        let text = id.to_string();
        assert_eq!(TicketId::parse(&text), Some(id));
        for bad in [
            "",
            "nohex",
            ".0123456789abcdef0123456789abcdef",
            "h.0123456789abcdef0123456789abcde",
            "h.0123456789abcdef0123456789abcdeg",
            "h.0123456789ABCDEF0123456789abcdef",
        ] {
            assert_eq!(TicketId::parse(bad), None, "{bad:?}");
        }
    }
}
