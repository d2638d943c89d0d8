//! Format 2's log records: one change of a host's tickets, of a host's ledger, or of the auth
//! buckets, with the time it was applied at and its part's sequence number; and the resource
//! policy in force for the ledger records after it. Strings borrow from the store's record
//! when written and from the log's bytes when read.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{
    LimitsRecordV2, PolicyV2, ReportV2, RuleV2, Text, UsageV2, key_policy_code, key_policy_of,
    resolution, resolution_of, submit_mode, submit_mode_of, text, unit_code, unit_of,
};
use crate::ledger::AuthorizeArgs;
use crate::ratelimit::Hit;
use crate::scheduler::{HeldArgs, KeyArgs, SubmitArgs};
use crate::store::memory::ops::{AuthOp, HostOp, LedgerOp, RateLimitOp, Record};

/// One record of the log.
#[derive(Debug, Serialize, Deserialize)]
pub enum RecordV2<'a> {
    /// 0: the resource policy of the ledger records that follow.
    Policy(PolicyV2),
    /// 1: a change of host `host`'s tickets.
    Host {
        #[serde(borrow)]
        host: Text<'a>,
        seq: u64,
        now: u64,
        #[serde(borrow)]
        op: HostOpV2<'a>,
    },
    /// 2: a change of host `host`'s ledger.
    Ledger {
        #[serde(borrow)]
        host: Text<'a>,
        seq: u64,
        now: u64,
        #[serde(borrow)]
        op: LedgerOpV2<'a>,
    },
    /// 3: a change of the auth buckets.
    Auth {
        seq: u64,
        now: u64,
        #[serde(borrow)]
        op: AuthOpV2<'a>,
    },
    /// 4: a change of the rate limit counters.
    RateLimit {
        seq: u64,
        now: u64,
        #[serde(borrow)]
        op: RateLimitOpV2<'a>,
    },
}

impl RecordV2<'_> {
    /// The first format that has this record: 3 for a rate limit subtraction, 4 for a keyed
    /// Submit, else 2.
    pub fn format(&self) -> u32 {
        match self {
            RecordV2::RateLimit {
                op: RateLimitOpV2::Subtract { .. },
                ..
            } => 3,
            RecordV2::Host {
                op: HostOpV2::SubmitKeyed { .. } | HostOpV2::ReclaimKeyed { .. },
                ..
            } => 4,
            _ => 2,
        }
    }
}

/// A change of the rate limit counters (`RateLimitOp`); times in ms since the Unix epoch.
#[derive(Debug, Serialize, Deserialize)]
pub enum RateLimitOpV2<'a> {
    /// 0: one request's hits, each (counter key, unit, hits).
    Hit {
        #[serde(borrow)]
        domain: Text<'a>,
        max_counters: u64,
        #[serde(borrow)]
        hits: Vec<(Text<'a>, u8, u64)>,
        epoch_ms: u64,
    },
    /// 1: counters whose window ended are dropped.
    Prune { epoch_ms: u64 },
    /// 2 (format 3 on): each hit's count subtracted from its counter, as (counter key, unit,
    /// count).
    Subtract {
        #[serde(borrow)]
        domain: Text<'a>,
        #[serde(borrow)]
        hits: Vec<(Text<'a>, u8, u64)>,
        epoch_ms: u64,
    },
}

/// A change of a host's tickets (`HostOp`), variant by variant.
#[derive(Debug, Serialize, Deserialize)]
pub enum HostOpV2<'a> {
    /// 0: the host appeared under these limits.
    Create(LimitsRecordV2),
    /// 1: a Submit, under ticket key `key`.
    Submit {
        #[serde(borrow)]
        args: SubmitV2<'a>,
        key: u128,
    },
    /// 2
    Renew { key: u128, rss_mb: Option<u32> },
    /// 3
    Release { key: u128, report: ReportV2 },
    /// 4
    ReleaseRun {
        #[serde(borrow)]
        run_id: Text<'a>,
        report: ReportV2,
    },
    /// 5
    Park(u128),
    /// 6
    Unpark(u128),
    /// 7: expiry, forgetting and aging found due.
    Housekeeping,
    /// 8: a Submit refused before the store.
    CountRejection,
    /// 9: new limits in force.
    Limits(LimitsRecordV2),
    /// 10: the process started again on this state.
    Restarted,
    /// 11: a holder re-registered a ticket under `key`.
    Reclaim {
        #[serde(borrow)]
        held: HeldV2<'a>,
        key: u128,
    },
    /// 12 (format 4 on): a Submit that named a key, under ticket key `key`.
    SubmitKeyed {
        #[serde(borrow)]
        args: SubmitV2<'a>,
        key: u128,
        #[serde(borrow)]
        keyed: KeyedV4<'a>,
    },
    /// 13 (format 4 on): a holder re-registered a keyed ticket under `key`, with its key and
    /// the key's policy.
    ReclaimKeyed {
        #[serde(borrow)]
        held: HeldV2<'a>,
        key: u128,
        #[serde(borrow)]
        keyed: (Text<'a>, u8),
    },
}

/// A Submit's key: (key, policy 0 none / 1 keep newest / 2 serial / 3 serial keep newest /
/// 4 reject new, supersede_running, debounce_ms, debounce_max_ms).
#[derive(Debug, Serialize, Deserialize)]
pub struct KeyedV4<'a> {
    #[serde(borrow)]
    pub key: Text<'a>,
    pub policy: u8,
    pub supersede_running: bool,
    pub debounce_ms: u64,
    pub debounce_max_ms: u64,
}

/// A Submit's arguments; `mode` 0 queue, 1 try.
#[derive(Debug, Serialize, Deserialize)]
pub struct SubmitV2<'a> {
    #[serde(borrow)]
    pub instance_id: Text<'a>,
    #[serde(borrow)]
    pub subject: Text<'a>,
    #[serde(borrow)]
    pub account_id: Option<Text<'a>>,
    #[serde(borrow)]
    pub run_id: Text<'a>,
    pub mode: u8,
    pub rss_mb: Option<u32>,
    pub priority: u8,
    /// The run's earlier ticket lapsed before the run started (see `SubmitArgs`).
    pub resubmit_expired: bool,
}

/// What a holder's Reclaim says it runs.
#[derive(Debug, Serialize, Deserialize)]
pub struct HeldV2<'a> {
    #[serde(borrow)]
    pub instance_id: Text<'a>,
    #[serde(borrow)]
    pub subject: Text<'a>,
    #[serde(borrow)]
    pub account_id: Option<Text<'a>>,
    #[serde(borrow)]
    pub run_id: Text<'a>,
    pub grant: u64,
    pub priority: u8,
}

/// A change of a host's ledger (`LedgerOp`).
#[derive(Debug, Serialize, Deserialize)]
pub enum LedgerOpV2<'a> {
    /// 0
    Authorize(#[serde(borrow)] AuthorizeV2<'a>),
    /// 1
    Settle {
        #[serde(borrow)]
        run_id: Text<'a>,
        step: u32,
        usage: UsageV2,
    },
    /// 2: resolution 0 consumed, 1 released.
    Resolve {
        #[serde(borrow)]
        run_id: Text<'a>,
        step: u32,
        resolution: u8,
    },
    /// 3
    Housekeeping,
}

/// Authorize's arguments.
#[derive(Debug, Serialize, Deserialize)]
pub struct AuthorizeV2<'a> {
    #[serde(borrow)]
    pub run_id: Text<'a>,
    pub step: u32,
    #[serde(borrow)]
    pub subject: Text<'a>,
    #[serde(borrow)]
    pub account_id: Option<Text<'a>>,
    #[serde(borrow)]
    pub model: Text<'a>,
    pub requested_output_tokens: u64,
    pub estimated_input_tokens: u64,
    pub estimated_cost_micros: u64,
}

/// A change of the auth buckets (`AuthOp`).
#[derive(Debug, Serialize, Deserialize)]
pub enum AuthOpV2<'a> {
    /// 0
    Attempt {
        #[serde(borrow)]
        endpoint: Text<'a>,
        #[serde(borrow)]
        identity: Text<'a>,
        rule: RuleV2,
    },
    /// 1
    Reset {
        #[serde(borrow)]
        endpoint: Text<'a>,
        #[serde(borrow)]
        identity: Text<'a>,
    },
    /// 2
    Prune,
    /// 3: the bound on keys per endpoint changed.
    MaxKeys(u64),
}

fn opt(s: &Option<String>) -> Option<Text<'_>> {
    s.as_deref().map(text)
}

fn owned(s: Option<Text<'_>>) -> Option<String> {
    s.map(Cow::into_owned)
}

impl<'a> From<&'a Record<'_>> for RecordV2<'a> {
    fn from(r: &'a Record<'_>) -> Self {
        match r {
            Record::Policy(p) => RecordV2::Policy(PolicyV2::from(&**p)),
            Record::Host { host, seq, now, op } => RecordV2::Host {
                host: text(host),
                seq: *seq,
                now: *now,
                op: HostOpV2::from(&**op),
            },
            Record::Ledger { host, seq, now, op } => RecordV2::Ledger {
                host: text(host),
                seq: *seq,
                now: *now,
                op: LedgerOpV2::from(&**op),
            },
            Record::Auth { seq, now, op } => RecordV2::Auth {
                seq: *seq,
                now: *now,
                op: AuthOpV2::from(&**op),
            },
            Record::RateLimit { seq, now, op } => RecordV2::RateLimit {
                seq: *seq,
                now: *now,
                op: RateLimitOpV2::from(&**op),
            },
        }
    }
}

impl TryFrom<RecordV2<'_>> for Record<'static> {
    type Error = String;
    fn try_from(r: RecordV2<'_>) -> Result<Self, String> {
        Ok(match r {
            RecordV2::Policy(p) => Record::Policy(Cow::Owned(p.try_into()?)),
            RecordV2::Host { host, seq, now, op } => Record::Host {
                host: Cow::Owned(host.into_owned()),
                seq,
                now,
                op: Cow::Owned(op.try_into()?),
            },
            RecordV2::Ledger { host, seq, now, op } => Record::Ledger {
                host: Cow::Owned(host.into_owned()),
                seq,
                now,
                op: Cow::Owned(op.try_into()?),
            },
            RecordV2::Auth { seq, now, op } => Record::Auth {
                seq,
                now,
                op: Cow::Owned(op.into()),
            },
            RecordV2::RateLimit { seq, now, op } => Record::RateLimit {
                seq,
                now,
                op: Cow::Owned(op.try_into()?),
            },
        })
    }
}

impl<'a> From<&'a HostOp> for HostOpV2<'a> {
    fn from(op: &'a HostOp) -> Self {
        match op {
            HostOp::Create(l) => HostOpV2::Create(l.into()),
            HostOp::Submit { args, key } => {
                let v2 = SubmitV2 {
                    instance_id: text(&args.instance_id),
                    subject: text(&args.subject),
                    account_id: opt(&args.account_id),
                    run_id: text(&args.run_id),
                    mode: submit_mode(args.mode),
                    rss_mb: args.rss_mb,
                    priority: args.priority,
                    resubmit_expired: args.resubmit_expired,
                };
                match &args.keyed {
                    None => HostOpV2::Submit {
                        args: v2,
                        key: *key,
                    },
                    Some(k) => HostOpV2::SubmitKeyed {
                        args: v2,
                        key: *key,
                        keyed: KeyedV4 {
                            key: text(&k.key),
                            policy: key_policy_code(k.policy),
                            supersede_running: k.supersede_running,
                            debounce_ms: k.debounce_ms,
                            debounce_max_ms: k.debounce_max_ms,
                        },
                    },
                }
            }
            HostOp::Renew { key, rss_mb } => HostOpV2::Renew {
                key: *key,
                rss_mb: *rss_mb,
            },
            HostOp::Release { key, report } => HostOpV2::Release {
                key: *key,
                report: (*report).into(),
            },
            HostOp::ReleaseRun { run_id, report } => HostOpV2::ReleaseRun {
                run_id: text(run_id),
                report: (*report).into(),
            },
            HostOp::Park(key) => HostOpV2::Park(*key),
            HostOp::Unpark(key) => HostOpV2::Unpark(*key),
            HostOp::Housekeeping => HostOpV2::Housekeeping,
            HostOp::CountRejection => HostOpV2::CountRejection,
            HostOp::Limits(l) => HostOpV2::Limits(l.into()),
            HostOp::Restarted => HostOpV2::Restarted,
            HostOp::Reclaim { held, key } => {
                let v2 = HeldV2 {
                    instance_id: text(&held.instance_id),
                    subject: text(&held.subject),
                    account_id: opt(&held.account_id),
                    run_id: text(&held.run_id),
                    grant: held.grant,
                    priority: held.priority,
                };
                match &held.key {
                    None => HostOpV2::Reclaim {
                        held: v2,
                        key: *key,
                    },
                    Some((name, policy)) => HostOpV2::ReclaimKeyed {
                        held: v2,
                        key: *key,
                        keyed: (text(name), key_policy_code(*policy)),
                    },
                }
            }
        }
    }
}

/// A Reclaim's arguments as the core takes them.
fn held_args(held: HeldV2<'_>, key: Option<(String, crate::scheduler::KeyPolicy)>) -> HeldArgs {
    HeldArgs {
        instance_id: held.instance_id.into_owned(),
        subject: held.subject.into_owned(),
        account_id: owned(held.account_id),
        run_id: held.run_id.into_owned(),
        grant: held.grant,
        priority: held.priority,
        key,
    }
}

/// A Submit's arguments as the core takes them.
fn submit_args(args: SubmitV2<'_>, keyed: Option<KeyArgs>) -> Result<SubmitArgs, String> {
    Ok(SubmitArgs {
        instance_id: args.instance_id.into_owned(),
        subject: args.subject.into_owned(),
        account_id: owned(args.account_id),
        run_id: args.run_id.into_owned(),
        mode: submit_mode_of(args.mode)?,
        rss_mb: args.rss_mb,
        priority: args.priority,
        resubmit_expired: args.resubmit_expired,
        keyed,
    })
}

impl TryFrom<HostOpV2<'_>> for HostOp {
    type Error = String;
    fn try_from(op: HostOpV2<'_>) -> Result<Self, String> {
        Ok(match op {
            HostOpV2::Create(l) => HostOp::Create(l.try_into()?),
            HostOpV2::Submit { args, key } => HostOp::Submit {
                args: submit_args(args, None)?,
                key,
            },
            HostOpV2::SubmitKeyed { args, key, keyed } => HostOp::Submit {
                args: submit_args(
                    args,
                    Some(KeyArgs {
                        key: keyed.key.into_owned(),
                        policy: key_policy_of(keyed.policy)?,
                        supersede_running: keyed.supersede_running,
                        debounce_ms: keyed.debounce_ms,
                        debounce_max_ms: keyed.debounce_max_ms,
                    }),
                )?,
                key,
            },
            HostOpV2::Renew { key, rss_mb } => HostOp::Renew { key, rss_mb },
            HostOpV2::Release { key, report } => HostOp::Release {
                key,
                report: report.try_into()?,
            },
            HostOpV2::ReleaseRun { run_id, report } => HostOp::ReleaseRun {
                run_id: run_id.into_owned(),
                report: report.try_into()?,
            },
            HostOpV2::Park(key) => HostOp::Park(key),
            HostOpV2::Unpark(key) => HostOp::Unpark(key),
            HostOpV2::Housekeeping => HostOp::Housekeeping,
            HostOpV2::CountRejection => HostOp::CountRejection,
            HostOpV2::Limits(l) => HostOp::Limits(l.try_into()?),
            HostOpV2::Restarted => HostOp::Restarted,
            HostOpV2::Reclaim { held, key } => HostOp::Reclaim {
                held: held_args(held, None),
                key,
            },
            HostOpV2::ReclaimKeyed {
                held,
                key,
                keyed: (name, policy),
            } => HostOp::Reclaim {
                held: held_args(held, Some((name.into_owned(), key_policy_of(policy)?))),
                key,
            },
        })
    }
}

impl<'a> From<&'a LedgerOp> for LedgerOpV2<'a> {
    fn from(op: &'a LedgerOp) -> Self {
        match op {
            LedgerOp::Authorize(a) => LedgerOpV2::Authorize(AuthorizeV2 {
                run_id: text(&a.run_id),
                step: a.step,
                subject: text(&a.subject),
                account_id: opt(&a.account_id),
                model: text(&a.model),
                requested_output_tokens: a.requested_output_tokens,
                estimated_input_tokens: a.estimated_input_tokens,
                estimated_cost_micros: a.estimated_cost,
            }),
            LedgerOp::Settle {
                run_id,
                step,
                usage,
            } => LedgerOpV2::Settle {
                run_id: text(run_id),
                step: *step,
                usage: (*usage).into(),
            },
            LedgerOp::Resolve {
                run_id,
                step,
                resolution: r,
            } => LedgerOpV2::Resolve {
                run_id: text(run_id),
                step: *step,
                resolution: resolution(*r),
            },
            LedgerOp::Housekeeping => LedgerOpV2::Housekeeping,
        }
    }
}

impl TryFrom<LedgerOpV2<'_>> for LedgerOp {
    type Error = String;
    fn try_from(op: LedgerOpV2<'_>) -> Result<Self, String> {
        Ok(match op {
            LedgerOpV2::Authorize(a) => LedgerOp::Authorize(AuthorizeArgs {
                run_id: a.run_id.into_owned(),
                step: a.step,
                subject: a.subject.into_owned(),
                account_id: owned(a.account_id),
                model: a.model.into_owned(),
                requested_output_tokens: a.requested_output_tokens,
                estimated_input_tokens: a.estimated_input_tokens,
                estimated_cost: a.estimated_cost_micros,
            }),
            LedgerOpV2::Settle {
                run_id,
                step,
                usage,
            } => LedgerOp::Settle {
                run_id: run_id.into_owned(),
                step,
                usage: usage.try_into()?,
            },
            LedgerOpV2::Resolve {
                run_id,
                step,
                resolution,
            } => LedgerOp::Resolve {
                run_id: run_id.into_owned(),
                step,
                resolution: resolution_of(resolution)?,
            },
            LedgerOpV2::Housekeeping => LedgerOp::Housekeeping,
        })
    }
}

impl<'a> From<&'a AuthOp> for AuthOpV2<'a> {
    fn from(op: &'a AuthOp) -> Self {
        match op {
            AuthOp::Attempt {
                endpoint,
                identity,
                rule,
            } => AuthOpV2::Attempt {
                endpoint: text(endpoint),
                identity: text(identity),
                rule: (*rule).into(),
            },
            AuthOp::Reset { endpoint, identity } => AuthOpV2::Reset {
                endpoint: text(endpoint),
                identity: text(identity),
            },
            AuthOp::Prune => AuthOpV2::Prune,
            AuthOp::MaxKeys(n) => AuthOpV2::MaxKeys(*n as u64),
        }
    }
}

impl From<AuthOpV2<'_>> for AuthOp {
    fn from(op: AuthOpV2<'_>) -> Self {
        match op {
            AuthOpV2::Attempt {
                endpoint,
                identity,
                rule,
            } => AuthOp::Attempt {
                endpoint: endpoint.into_owned(),
                identity: identity.into_owned(),
                rule: rule.into(),
            },
            AuthOpV2::Reset { endpoint, identity } => AuthOp::Reset {
                endpoint: endpoint.into_owned(),
                identity: identity.into_owned(),
            },
            AuthOpV2::Prune => AuthOp::Prune,
            AuthOpV2::MaxKeys(n) => AuthOp::MaxKeys(usize::try_from(n).unwrap_or(usize::MAX)),
        }
    }
}

impl<'a> From<&'a RateLimitOp> for RateLimitOpV2<'a> {
    fn from(op: &'a RateLimitOp) -> Self {
        match op {
            RateLimitOp::Hit {
                domain,
                max_counters,
                hits,
                epoch_ms,
            } => RateLimitOpV2::Hit {
                domain: text(domain),
                max_counters: *max_counters,
                hits: hits
                    .iter()
                    .map(|h| (text(&h.key), unit_code(h.unit), h.addend))
                    .collect(),
                epoch_ms: *epoch_ms,
            },
            RateLimitOp::Prune { epoch_ms } => RateLimitOpV2::Prune {
                epoch_ms: *epoch_ms,
            },
            RateLimitOp::Subtract {
                domain,
                hits,
                epoch_ms,
            } => RateLimitOpV2::Subtract {
                domain: text(domain),
                hits: hits
                    .iter()
                    .map(|h| (text(&h.key), unit_code(h.unit), h.addend))
                    .collect(),
                epoch_ms: *epoch_ms,
            },
        }
    }
}

impl TryFrom<RateLimitOpV2<'_>> for RateLimitOp {
    type Error = String;
    fn try_from(op: RateLimitOpV2<'_>) -> Result<Self, String> {
        Ok(match op {
            RateLimitOpV2::Hit {
                domain,
                max_counters,
                hits,
                epoch_ms,
            } => RateLimitOp::Hit {
                domain: domain.into_owned(),
                max_counters,
                hits: hits_of(hits)?,
                epoch_ms,
            },
            RateLimitOpV2::Prune { epoch_ms } => RateLimitOp::Prune { epoch_ms },
            RateLimitOpV2::Subtract {
                domain,
                hits,
                epoch_ms,
            } => RateLimitOp::Subtract {
                domain: domain.into_owned(),
                hits: hits_of(hits)?,
                epoch_ms,
            },
        })
    }
}

fn hits_of(hits: Vec<(Text<'_>, u8, u64)>) -> Result<Vec<Hit>, String> {
    hits.into_iter()
        .map(|(key, unit, addend)| {
            Ok(Hit {
                key: key.into_owned(),
                unit: unit_of(unit)?,
                addend,
            })
        })
        .collect()
}
