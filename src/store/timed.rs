//! [`Timed`]: any store, with the latency of every call it answers handed by operation to a
//! [`Recorder`] (the server's metrics: `admission_store_call_duration_seconds`). The server
//! wraps its store in it once; everything else forwards unchanged. The store names its own
//! operations ([`StoreOp`]) and knows nothing of what records them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{
    AuthStore, LedgerResult, LedgerStore, RateLimitCounts, RateLimitStore, StoreError, TicketId,
    TicketStore, journal,
};
use crate::auth::{AuthCleared, AuthDecision, AuthPolicy, BucketRule};
use crate::clock::Stopwatch;
use crate::history;
use crate::ledger::{
    Authorization, AuthorizeArgs, LedgerStats, ReservationInfo, Resolution, Usage,
};
use crate::ratelimit::{CounterInfo, Hit};
use crate::scheduler::{
    Ending, HeldArgs, HostStats, Limits, LimitsRecord, LimitsTable, ReclaimRefusal, Reclaimed,
    Report, SubmitArgs, SubmitError, TicketInfo, TicketState, TicketView,
};

/// The calls the service makes to its store: one per [`crate::store::Store`] method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum StoreOp {
    GetLimits,
    SetLimits,
    ResetLimits,
    Submit,
    Renew,
    Release,
    ReleaseRun,
    Park,
    Unpark,
    Reclaim,
    Ticket,
    SweepTickets,
    Stats,
    RecordHistory,
    History,
    RecentEndings,
    List,
    CountRejection,
    InFlightHere,
    HostIds,
    Authorize,
    Settle,
    Resolve,
    Reservations,
    LedgerStats,
    SweepLedger,
    AuthAttempt,
    AuthPeek,
    AuthReset,
    SweepAuth,
    RateLimitHits,
    RateLimitSubtract,
    RateLimitCounters,
    SweepRateLimits,
}

impl StoreOp {
    pub const ALL: [StoreOp; 34] = [
        StoreOp::GetLimits,
        StoreOp::SetLimits,
        StoreOp::ResetLimits,
        StoreOp::Submit,
        StoreOp::Renew,
        StoreOp::Release,
        StoreOp::ReleaseRun,
        StoreOp::Park,
        StoreOp::Unpark,
        StoreOp::Reclaim,
        StoreOp::Ticket,
        StoreOp::SweepTickets,
        StoreOp::Stats,
        StoreOp::RecordHistory,
        StoreOp::History,
        StoreOp::RecentEndings,
        StoreOp::List,
        StoreOp::CountRejection,
        StoreOp::InFlightHere,
        StoreOp::HostIds,
        StoreOp::Authorize,
        StoreOp::Settle,
        StoreOp::Resolve,
        StoreOp::Reservations,
        StoreOp::LedgerStats,
        StoreOp::SweepLedger,
        StoreOp::AuthAttempt,
        StoreOp::AuthPeek,
        StoreOp::AuthReset,
        StoreOp::SweepAuth,
        StoreOp::RateLimitHits,
        StoreOp::RateLimitSubtract,
        StoreOp::RateLimitCounters,
        StoreOp::SweepRateLimits,
    ];

    /// The `operation` label.
    pub fn name(self) -> &'static str {
        match self {
            StoreOp::GetLimits => "get_limits",
            StoreOp::SetLimits => "set_limits",
            StoreOp::ResetLimits => "reset_limits",
            StoreOp::Submit => "submit",
            StoreOp::Renew => "renew",
            StoreOp::Release => "release",
            StoreOp::ReleaseRun => "release_run",
            StoreOp::Park => "park",
            StoreOp::Unpark => "unpark",
            StoreOp::Reclaim => "reclaim",
            StoreOp::Ticket => "ticket",
            StoreOp::SweepTickets => "sweep_tickets",
            StoreOp::Stats => "stats",
            StoreOp::RecordHistory => "record_history",
            StoreOp::History => "history",
            StoreOp::RecentEndings => "recent_endings",
            StoreOp::List => "list",
            StoreOp::CountRejection => "count_rejection",
            StoreOp::InFlightHere => "in_flight_here",
            StoreOp::HostIds => "host_ids",
            StoreOp::Authorize => "authorize",
            StoreOp::Settle => "settle",
            StoreOp::Resolve => "resolve",
            StoreOp::Reservations => "reservations",
            StoreOp::LedgerStats => "ledger_stats",
            StoreOp::SweepLedger => "sweep_ledger",
            StoreOp::AuthAttempt => "auth_attempt",
            StoreOp::AuthPeek => "auth_peek",
            StoreOp::AuthReset => "auth_reset",
            StoreOp::SweepAuth => "sweep_auth",
            StoreOp::RateLimitHits => "rate_limit_hits",
            StoreOp::RateLimitSubtract => "rate_limit_subtract",
            StoreOp::RateLimitCounters => "rate_limit_counters",
            StoreOp::SweepRateLimits => "sweep_rate_limits",
        }
    }
}

/// What is told how long each store call took.
pub trait Recorder: Send + Sync + 'static {
    /// `op` answered after `took`; `ok` is false when the store failed.
    fn observe(&self, op: StoreOp, ok: bool, took: Duration);
}

/// A store whose calls are timed; see the module documentation.
pub struct Timed<S> {
    inner: Arc<S>,
    latency: Arc<dyn Recorder>,
}

impl<S> Timed<S> {
    pub fn new(inner: Arc<S>, latency: Arc<dyn Recorder>) -> Self {
        Timed { inner, latency }
    }

    /// The store it wraps.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// `call`, timed as `op`; a `StoreError` counts as `error`.
    async fn timed<T>(
        &self,
        op: StoreOp,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let watch = Stopwatch::start();
        let out = call.await;
        self.latency.observe(op, out.is_ok(), watch.elapsed());
        out
    }
}

impl<S: TicketStore> TicketStore for Timed<S> {
    type Watch = S::Watch;

    fn file_limits(&self, host_id: &str) -> Limits {
        self.inner.file_limits(host_id)
    }

    fn reload_file_limits(&self, limits: LimitsTable) {
        self.inner.reload_file_limits(limits)
    }

    fn get_limits(
        &self,
        host_id: &str,
    ) -> impl Future<Output = Result<LimitsRecord, StoreError>> + Send {
        self.timed(StoreOp::GetLimits, self.inner.get_limits(host_id))
    }

    fn set_limits(
        &self,
        host_id: &str,
        limits: Limits,
        expected_revision: u64,
    ) -> impl Future<Output = Result<Result<LimitsRecord, u64>, StoreError>> + Send {
        let call = self.inner.set_limits(host_id, limits, expected_revision);
        self.timed(StoreOp::SetLimits, call)
    }

    fn reset_limits(
        &self,
        host_id: &str,
        expected_revision: u64,
    ) -> impl Future<Output = Result<Result<LimitsRecord, u64>, StoreError>> + Send {
        let call = self.inner.reset_limits(host_id, expected_revision);
        self.timed(StoreOp::ResetLimits, call)
    }

    fn submit(
        &self,
        host_id: &str,
        args: SubmitArgs,
    ) -> impl Future<Output = Result<Result<(TicketId, TicketView), SubmitError>, StoreError>> + Send
    {
        self.timed(StoreOp::Submit, self.inner.submit(host_id, args))
    }

    fn renew(
        &self,
        ids: &[TicketId],
        rss_mb: Option<u32>,
    ) -> impl Future<Output = Result<Vec<Option<TicketView>>, StoreError>> + Send {
        self.timed(StoreOp::Renew, self.inner.renew(ids, rss_mb))
    }

    fn release(
        &self,
        id: &TicketId,
        report: Report,
    ) -> impl Future<Output = Result<Option<TicketState>, StoreError>> + Send {
        self.timed(StoreOp::Release, self.inner.release(id, report))
    }

    fn release_run(
        &self,
        host_id: &str,
        run_id: &str,
        report: Report,
    ) -> impl Future<Output = Result<Option<(TicketId, TicketState)>, StoreError>> + Send {
        let call = self.inner.release_run(host_id, run_id, report);
        self.timed(StoreOp::ReleaseRun, call)
    }

    fn park(
        &self,
        id: &TicketId,
    ) -> impl Future<Output = Result<Option<Result<TicketView, TicketState>>, StoreError>> + Send
    {
        self.timed(StoreOp::Park, self.inner.park(id))
    }

    fn unpark(
        &self,
        id: &TicketId,
    ) -> impl Future<Output = Result<Option<Result<TicketView, TicketState>>, StoreError>> + Send
    {
        self.timed(StoreOp::Unpark, self.inner.unpark(id))
    }

    fn reclaim(
        &self,
        id: &TicketId,
        held: HeldArgs,
    ) -> impl Future<Output = Result<Result<Reclaimed, ReclaimRefusal>, StoreError>> + Send {
        self.timed(StoreOp::Reclaim, self.inner.reclaim(id, held))
    }

    fn state_losses(&self) -> u64 {
        self.inner.state_losses()
    }

    fn last_state_loss_ms(&self) -> u64 {
        self.inner.last_state_loss_ms()
    }

    fn ticket(
        &self,
        id: &TicketId,
    ) -> impl Future<Output = Result<Option<TicketView>, StoreError>> + Send {
        self.timed(StoreOp::Ticket, self.inner.ticket(id))
    }

    fn watch(&self, id: &TicketId) -> Self::Watch {
        self.inner.watch(id)
    }

    fn sweep_tickets(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.timed(StoreOp::SweepTickets, self.inner.sweep_tickets())
    }

    fn stats(&self, host_id: &str) -> impl Future<Output = Result<HostStats, StoreError>> + Send {
        self.timed(StoreOp::Stats, self.inner.stats(host_id))
    }

    fn record_history(
        &self,
        host_id: &str,
        counts: &history::Counts,
        shape: &history::Shape,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.timed(
            StoreOp::RecordHistory,
            self.inner.record_history(host_id, counts, shape),
        )
    }

    fn history(
        &self,
        host_id: &str,
    ) -> impl Future<Output = Result<Vec<history::Sample>, StoreError>> + Send {
        self.timed(StoreOp::History, self.inner.history(host_id))
    }

    fn recent_endings(
        &self,
        host_id: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Ending>, StoreError>> + Send {
        self.timed(
            StoreOp::RecentEndings,
            self.inner.recent_endings(host_id, limit),
        )
    }

    fn list(
        &self,
        host_id: &str,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<TicketInfo>, bool), StoreError>> + Send {
        self.timed(StoreOp::List, self.inner.list(host_id, limit))
    }

    fn count_rejection(
        &self,
        host_id: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.timed(StoreOp::CountRejection, self.inner.count_rejection(host_id))
    }

    fn in_flight_here(&self) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.timed(StoreOp::InFlightHere, self.inner.in_flight_here())
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn shared(&self) -> bool {
        self.inner.shared()
    }

    fn host_ids(&self) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        self.timed(StoreOp::HostIds, self.inner.host_ids())
    }

    fn knows_host(&self, host_id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.timed(StoreOp::HostIds, self.inner.knows_host(host_id))
    }

    fn store_errors(&self) -> u64 {
        self.inner.store_errors()
    }

    fn readiness(&self) -> Result<(), String> {
        self.inner.readiness()
    }

    fn readiness_note(&self) -> Option<String> {
        self.inner.readiness_note()
    }

    fn flush(&self) {
        self.inner.flush()
    }

    fn send_gates(&self) -> Option<journal::SendGates> {
        self.inner.send_gates()
    }
}

impl<S: LedgerStore> LedgerStore for Timed<S> {
    fn authorize(
        &self,
        host_id: &str,
        args: AuthorizeArgs,
    ) -> impl Future<Output = LedgerResult<Authorization>> + Send {
        self.timed(StoreOp::Authorize, self.inner.authorize(host_id, args))
    }

    fn settle(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        usage: Usage,
    ) -> impl Future<Output = LedgerResult<bool>> + Send {
        let call = self.inner.settle(host_id, run_id, step, usage);
        self.timed(StoreOp::Settle, call)
    }

    fn resolve(
        &self,
        host_id: &str,
        run_id: &str,
        step: u32,
        resolution: Resolution,
    ) -> impl Future<Output = LedgerResult<()>> + Send {
        let call = self.inner.resolve(host_id, run_id, step, resolution);
        self.timed(StoreOp::Resolve, call)
    }

    fn reservations(
        &self,
        host_id: &str,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<ReservationInfo>, bool), StoreError>> + Send {
        let call = self.inner.reservations(host_id, limit);
        self.timed(StoreOp::Reservations, call)
    }

    fn ledger_stats(
        &self,
        host_id: &str,
    ) -> impl Future<Output = Result<LedgerStats, StoreError>> + Send {
        self.timed(StoreOp::LedgerStats, self.inner.ledger_stats(host_id))
    }

    fn sweep_ledger(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.timed(StoreOp::SweepLedger, self.inner.sweep_ledger())
    }
}

impl<S: AuthStore> AuthStore for Timed<S> {
    fn auth_policy(&self) -> &AuthPolicy {
        self.inner.auth_policy()
    }

    fn auth_attempt(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> impl Future<Output = Result<AuthDecision, StoreError>> + Send {
        let call = self.inner.auth_attempt(endpoint, identity, rule);
        self.timed(StoreOp::AuthAttempt, call)
    }

    fn auth_peek(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
    ) -> impl Future<Output = Result<AuthDecision, StoreError>> + Send {
        let call = self.inner.auth_peek(endpoint, identity, rule);
        self.timed(StoreOp::AuthPeek, call)
    }

    fn auth_reset(
        &self,
        endpoint: &str,
        identity: &str,
    ) -> impl Future<Output = Result<AuthCleared, StoreError>> + Send {
        self.timed(
            StoreOp::AuthReset,
            self.inner.auth_reset(endpoint, identity),
        )
    }

    fn sweep_auth(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.timed(StoreOp::SweepAuth, self.inner.sweep_auth())
    }

    fn auth_degraded(&self) -> bool {
        self.inner.auth_degraded()
    }
}

impl<S: RateLimitStore> RateLimitStore for Timed<S> {
    fn rate_limit_hits(
        &self,
        domain: &str,
        max_counters: u64,
        hits: &[Hit],
    ) -> impl Future<Output = Result<RateLimitCounts, StoreError>> + Send {
        let call = self.inner.rate_limit_hits(domain, max_counters, hits);
        self.timed(StoreOp::RateLimitHits, call)
    }

    fn rate_limit_subtract(
        &self,
        domain: &str,
        hits: &[Hit],
    ) -> impl Future<Output = Result<RateLimitCounts, StoreError>> + Send {
        let call = self.inner.rate_limit_subtract(domain, hits);
        self.timed(StoreOp::RateLimitSubtract, call)
    }

    fn rate_limit_counters(
        &self,
        domains: &[String],
        limit: usize,
    ) -> impl Future<Output = Result<Vec<CounterInfo>, StoreError>> + Send {
        let call = self.inner.rate_limit_counters(domains, limit);
        self.timed(StoreOp::RateLimitCounters, call)
    }

    fn sweep_rate_limits(
        &self,
        domains: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let call = self.inner.sweep_rate_limits(domains);
        self.timed(StoreOp::SweepRateLimits, call)
    }
}
