//! Every change the embedded store makes, as data: one operation of the pure core with its
//! inputs. The store applies an operation by calling [`HostOp::apply`] (or its ledger and auth
//! twins), and with a data dir also writes it to the log, so that a restart replays exactly the
//! same calls through the same core. The core is deterministic given its inputs (`now`, the
//! ticket key drawn for a Submit, the limits and policy in force), and each of those is in the
//! record or in an earlier one. What these look like on disk is [`super::format`]'s.

use std::borrow::Cow;

use crate::auth::{AuthCleared, AuthDecision, AuthTable, BucketRule};
use crate::ledger::{
    Authorization, AuthorizeArgs, Ledger, LedgerError, Resolution, ResourcePolicy, Usage,
};
use crate::ratelimit::{CounterTable, Hit};
use crate::scheduler::{
    HeldArgs, HostState, LimitsRecord, Millis, ReclaimRefusal, Reclaimed, Report, SubmitArgs,
    SubmitError, TicketKey, TicketState, TicketView,
};

/// A host's scheduling state as the store keeps it: the core's state, the limits in force,
/// and the sequence number of the last logged operation applied to it.
#[derive(Debug)]
pub(super) struct HostCore {
    pub(super) state: HostState,
    pub(super) limits: LimitsRecord,
    pub(super) seq: u64,
}

/// One change of a host's scheduling state.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum HostOp {
    /// The host appeared, under these limits (always its first record).
    Create(LimitsRecord),
    Submit {
        args: SubmitArgs,
        key: TicketKey,
    },
    Renew {
        key: TicketKey,
        rss_mb: Option<u32>,
    },
    Release {
        key: TicketKey,
        report: Report,
    },
    ReleaseRun {
        run_id: String,
        report: Report,
    },
    Park(TicketKey),
    Unpark(TicketKey),
    /// Expiry, forgetting and aging that a read or the sweep found due.
    Housekeeping,
    CountRejection,
    /// New limits in force (SetLimits, ResetLimits, a reload or a restart with another file).
    Limits(LimitsRecord),
    /// The process started again on this state (see [`HostState::restored`]).
    Restarted,
    /// A holder re-registered a ticket (see [`HostState::reclaim`]).
    Reclaim {
        held: HeldArgs,
        key: TicketKey,
    },
}

/// What a [`HostOp`] answers.
pub(super) enum HostOut {
    Submitted(Result<TicketView, SubmitError>),
    Ticket(Option<TicketView>),
    Released(Option<TicketState>),
    ReleasedRun(Option<(TicketKey, TicketState)>),
    Parked(Option<Result<TicketView, TicketState>>),
    Reclaimed(Result<Reclaimed, ReclaimRefusal>),
    Done,
}

impl HostOp {
    /// Apply to `core` at `now`; admissions take grants of at least `grant_floor`.
    pub(super) fn apply(self, core: &mut HostCore, now: Millis, grant_floor: u64) -> HostOut {
        let HostCore { state, limits, .. } = core;
        state.set_grant_floor(grant_floor);
        let l = &limits.limits;
        match self {
            HostOp::Create(record) => {
                *limits = record;
                HostOut::Done
            }
            HostOp::Submit { args, key } => HostOut::Submitted(state.submit(l, args, key, now)),
            HostOp::Renew { key, rss_mb } => HostOut::Ticket(state.renew(l, key, rss_mb, now)),
            HostOp::Release { key, report } => {
                HostOut::Released(state.release_reporting(l, key, report, now))
            }
            HostOp::ReleaseRun { run_id, report } => {
                HostOut::ReleasedRun(state.release_run(l, &run_id, report, now))
            }
            HostOp::Park(key) => HostOut::Parked(state.park(l, key, now)),
            HostOp::Unpark(key) => HostOut::Parked(state.unpark(l, key, now)),
            HostOp::Housekeeping => {
                state.housekeeping(l, now);
                HostOut::Done
            }
            HostOp::CountRejection => {
                state.count_rejection();
                HostOut::Done
            }
            HostOp::Limits(record) => {
                *limits = record;
                state.limits_changed(&limits.limits, now);
                HostOut::Done
            }
            HostOp::Restarted => {
                state.restored(l, now);
                HostOut::Done
            }
            HostOp::Reclaim { held, key } => HostOut::Reclaimed(state.reclaim(l, held, key, now)),
        }
    }
}

/// One change of a host's ledger.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LedgerOp {
    Authorize(AuthorizeArgs),
    Settle {
        run_id: String,
        step: u32,
        usage: Usage,
    },
    Resolve {
        run_id: String,
        step: u32,
        resolution: Resolution,
    },
    Housekeeping,
}

pub(super) enum LedgerOut {
    Authorized(Result<Authorization, LedgerError>),
    Settled(Result<bool, LedgerError>),
    Resolved(Result<(), LedgerError>),
    Done,
}

impl LedgerOp {
    pub(super) fn apply(
        self,
        ledger: &mut Ledger,
        policy: &ResourcePolicy,
        now: Millis,
    ) -> LedgerOut {
        match self {
            LedgerOp::Authorize(args) => LedgerOut::Authorized(ledger.authorize(policy, args, now)),
            LedgerOp::Settle {
                run_id,
                step,
                usage,
            } => LedgerOut::Settled(ledger.settle(policy, &run_id, step, usage, now)),
            LedgerOp::Resolve {
                run_id,
                step,
                resolution,
            } => LedgerOut::Resolved(ledger.resolve(policy, &run_id, step, resolution, now)),
            LedgerOp::Housekeeping => {
                ledger.housekeeping(policy, now);
                LedgerOut::Done
            }
        }
    }
}

/// One change of the auth buckets.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AuthOp {
    Attempt {
        endpoint: String,
        identity: String,
        rule: BucketRule,
    },
    Reset {
        endpoint: String,
        identity: String,
    },
    Prune,
    /// The bound on keys per endpoint changed (a restart with another `auth.local_max_keys`).
    MaxKeys(usize),
}

pub(super) enum AuthOut {
    Decided(AuthDecision),
    Cleared(AuthCleared),
    Done,
}

impl AuthOp {
    pub(super) fn apply(self, table: &mut AuthTable, now: Millis) -> AuthOut {
        match self {
            AuthOp::Attempt {
                endpoint,
                identity,
                rule,
            } => AuthOut::Decided(table.attempt(&endpoint, &identity, rule, now)),
            AuthOp::Reset { endpoint, identity } => {
                AuthOut::Cleared(table.reset(&endpoint, &identity, now))
            }
            AuthOp::Prune => {
                table.prune(now);
                AuthOut::Done
            }
            AuthOp::MaxKeys(n) => {
                table.set_max_keys(n);
                AuthOut::Done
            }
        }
    }
}

/// One change of the rate limit counters. Each carries its time on the windows' clock (ms
/// since the Unix epoch), so a replay counts in the windows the call counted in.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RateLimitOp {
    Hit {
        domain: String,
        max_counters: u64,
        hits: Vec<Hit>,
        epoch_ms: u64,
    },
    /// Counters whose window ended are dropped.
    Prune { epoch_ms: u64 },
    /// Each hit's `addend` subtracted from its counter (Envoy's `hits_subtrahend`).
    Subtract {
        domain: String,
        hits: Vec<Hit>,
        epoch_ms: u64,
    },
}

pub(super) enum RateLimitOut {
    Counted(Vec<Option<u64>>),
    Done,
}

impl RateLimitOp {
    pub(super) fn apply(self, table: &mut CounterTable) -> RateLimitOut {
        match self {
            RateLimitOp::Hit {
                domain,
                max_counters,
                hits,
                epoch_ms,
            } => RateLimitOut::Counted(table.hit(&domain, max_counters, &hits, epoch_ms)),
            RateLimitOp::Prune { epoch_ms } => {
                table.prune(epoch_ms);
                RateLimitOut::Done
            }
            RateLimitOp::Subtract {
                domain,
                hits,
                epoch_ms,
            } => RateLimitOut::Counted(table.subtract(&domain, &hits, epoch_ms)),
        }
    }
}

/// A record of the log. `seq` is the part's own sequence number (a host's scheduling state, a
/// host's ledger, the auth buckets, or the rate limit counters): a replay skips what a
/// snapshot already holds.
#[derive(Debug, PartialEq)]
pub(crate) enum Record<'a> {
    /// The resource policy of the ledger records that follow (the process's configuration).
    Policy(Cow<'a, ResourcePolicy>),
    Host {
        host: Cow<'a, str>,
        seq: u64,
        now: Millis,
        op: Cow<'a, HostOp>,
    },
    Ledger {
        host: Cow<'a, str>,
        seq: u64,
        now: Millis,
        op: Cow<'a, LedgerOp>,
    },
    Auth {
        seq: u64,
        now: Millis,
        op: Cow<'a, AuthOp>,
    },
    RateLimit {
        seq: u64,
        now: Millis,
        op: Cow<'a, RateLimitOp>,
    },
}
