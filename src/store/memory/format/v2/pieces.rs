//! Format 2's snapshot pieces: each host's tickets (its image: live tickets, remembered ended
//! ones, the rotation, counters, adaptive caps, memory reports) with its limits; each host's
//! ledger; the auth buckets; the rate limit counters; and an end piece with the time and resource policy. Strings
//! borrow from the image when written and from the snapshot's bytes when read.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::keys::{KeysV4, PlacesV5, keys_of, places_of, with_keys_and_places};
use super::{
    AnswerV2, LimitsRecordV2, PolicyV2, StateV2, StepStateV2, Text, text, unit_code, unit_of,
};
use crate::auth::{AuthImage, EndpointImage};
use crate::ledger::{LedgerImage, LedgerStats, RunImage, StepImage};
use crate::ratelimit::CounterImage;
use crate::scheduler::{
    AdaptiveState, Counters, EndedImage, HostImage, LEVELS, TicketImage, WaitHistogram,
};
use crate::store::memory::format::Piece;

/// One piece of a snapshot.
#[derive(Debug, Serialize, Deserialize)]
pub enum PieceV2<'a> {
    /// 0: a host's tickets and the limits it is under; `seq` is the last of its records the
    /// piece holds.
    Host {
        #[serde(borrow)]
        id: Text<'a>,
        seq: u64,
        limits: LimitsRecordV2,
        #[serde(borrow)]
        host: Box<HostV2<'a>>,
    },
    /// 1: a host's ledger (the host's piece comes first).
    Ledger {
        #[serde(borrow)]
        id: Text<'a>,
        seq: u64,
        #[serde(borrow)]
        ledger: LedgerV2<'a>,
    },
    /// 2: the auth buckets.
    Auth {
        seq: u64,
        #[serde(borrow)]
        table: AuthV2<'a>,
    },
    /// 3: the last piece: the store's time and resource policy when it was taken.
    End { now: u64, policy: PolicyV2 },
    /// 4: the rate limit counters: per domain, (counter key, window start s, unit, count).
    RateLimits {
        seq: u64,
        #[serde(borrow)]
        domains: Vec<(Text<'a>, Vec<CounterV2<'a>>)>,
    },
    /// 5 (format 4, which writes every host so): `0 Host` with its tickets' keys.
    HostKeyed {
        #[serde(borrow)]
        id: Text<'a>,
        seq: u64,
        limits: LimitsRecordV2,
        #[serde(borrow)]
        host: Box<HostV2<'a>>,
        #[serde(borrow)]
        keys: KeysV4<'a>,
    },
    /// 6 (format 5 on, which writes every host so): `5 HostKeyed` with the places of its
    /// remembered ended tickets among their keys' (see `keys::places_of`).
    HostPlaced {
        #[serde(borrow)]
        id: Text<'a>,
        seq: u64,
        limits: LimitsRecordV2,
        #[serde(borrow)]
        host: Box<HostV2<'a>>,
        #[serde(borrow)]
        keys: KeysV4<'a>,
        places: PlacesV5,
    },
}

impl PieceV2<'_> {
    /// The first format that has this piece: 5 for a host with its ended tickets' places, 4
    /// for a host with keys, else 2.
    pub fn format(&self) -> u32 {
        match self {
            PieceV2::HostPlaced { .. } => 5,
            PieceV2::HostKeyed { .. } => 4,
            _ => 2,
        }
    }
}

/// A rate limit counter: (key, window start s, unit, count).
pub type CounterV2<'a> = (Text<'a>, u64, u8, u64);

/// A host's tickets.
#[derive(Debug, Serialize, Deserialize)]
pub struct HostV2<'a> {
    #[serde(borrow)]
    pub tickets: Vec<TicketV2<'a>>,
    /// Oldest first.
    #[serde(borrow)]
    pub ended: Vec<EndedV2<'a>>,
    /// One list per priority level (1 first): subjects in round-robin order with their credit.
    #[serde(borrow)]
    pub rotation: Vec<Vec<(Text<'a>, u32)>>,
    pub next_order: i64,
    pub next_front: i64,
    pub grant: u64,
    pub grant_floor: u64,
    pub counters: CountersV2,
    /// (account, cap in thousandths, last cut, knee in thousandths).
    #[serde(borrow)]
    pub adaptive: Vec<(Text<'a>, u64, u64, u64)>,
    /// (instance, rss_mb, reported at).
    #[serde(borrow)]
    pub instances: Vec<(Text<'a>, u32, u64)>,
}

/// A live ticket.
#[derive(Debug, Serialize, Deserialize)]
pub struct TicketV2<'a> {
    pub key: u128,
    #[serde(borrow)]
    pub subject: Text<'a>,
    #[serde(borrow)]
    pub account: Option<Text<'a>>,
    #[serde(borrow)]
    pub instance: Text<'a>,
    #[serde(borrow)]
    pub run_id: Text<'a>,
    pub state: StateV2,
    pub grant: u64,
    pub deadline: u64,
    pub order: i64,
    pub since: u64,
    pub level: u8,
    pub reclaimed: bool,
}

/// An ended ticket still remembered.
#[derive(Debug, Serialize, Deserialize)]
pub struct EndedV2<'a> {
    pub key: u128,
    #[serde(borrow)]
    pub run_id: Text<'a>,
    pub state: StateV2,
    pub grant: u64,
    pub forget_at: u64,
    pub answers_run: bool,
}

/// A host's counters; the arrays are written as lists (the queue-wait histogram's buckets,
/// shadow decisions and release outcomes), their lengths checked when read.
#[derive(Debug, Serialize, Deserialize)]
pub struct CountersV2 {
    pub submitted: u64,
    pub admitted: u64,
    pub rejected: u64,
    pub released: u64,
    pub cancelled: u64,
    pub shed: u64,
    pub expired: u64,
    pub queue_wait_buckets: Vec<u64>,
    pub queue_wait_sum_ms: u64,
    pub shadow: Vec<u64>,
    pub hold_avg_ms: u64,
    pub outcomes: Vec<u64>,
    pub latency_sum_ms: u64,
    pub latency_count: u64,
    pub reclaimed: u64,
}

/// A host's ledger.
#[derive(Debug, Serialize, Deserialize)]
pub struct LedgerV2<'a> {
    #[serde(borrow)]
    pub runs: Vec<RunV2<'a>>,
    /// (account, start, end, used tokens, used cost in micro-dollars).
    #[serde(borrow)]
    pub windows: Vec<(Text<'a>, u64, u64, u64, u64)>,
    /// open, uncertain, allowed, denied, deferred, settled.
    pub stats: [u64; 6],
    pub next_forget: u64,
}

/// One run.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunV2<'a> {
    #[serde(borrow)]
    pub run_id: Text<'a>,
    #[serde(borrow)]
    pub subject: Text<'a>,
    #[serde(borrow)]
    pub account: Option<Text<'a>>,
    pub used_tokens: u64,
    pub used_cost_micros: u64,
    pub partial_steps: u32,
    pub last_touched: u64,
    #[serde(borrow)]
    pub steps: Vec<StepV2<'a>>,
}

/// One decided step.
#[derive(Debug, Serialize, Deserialize)]
pub struct StepV2<'a> {
    pub step: u32,
    pub answer: AnswerV2,
    pub state: StepStateV2,
    #[serde(borrow)]
    pub model: Text<'a>,
    pub reserved_tokens: u64,
    pub reserved_cost_micros: u64,
    pub window: Option<u64>,
    pub decided_at: u64,
    pub deadline: Option<u64>,
}

/// The auth buckets.
#[derive(Debug, Serialize, Deserialize)]
pub struct AuthV2<'a> {
    pub max_keys: u64,
    #[serde(borrow)]
    pub endpoints: Vec<EndpointV2<'a>>,
}

/// One endpoint's keys: (identity, count, window end, lockout end), and its expiry queue.
#[derive(Debug, Serialize, Deserialize)]
pub struct EndpointV2<'a> {
    #[serde(borrow)]
    pub endpoint: Text<'a>,
    #[serde(borrow)]
    pub keys: Vec<(Text<'a>, u32, u64, u64)>,
    #[serde(borrow)]
    pub expiries: Vec<(u64, Text<'a>)>,
}

fn array<const N: usize>(v: Vec<u64>, what: &str) -> Result<[u64; N], String> {
    let n = v.len();
    v.try_into()
        .map_err(|_| format!("{what}: {n} entries, not {N}"))
}

impl<'a> From<&'a Piece> for PieceV2<'a> {
    fn from(p: &'a Piece) -> Self {
        match p {
            Piece::Host {
                id,
                seq,
                limits,
                image,
            } => PieceV2::HostPlaced {
                id: text(id),
                seq: *seq,
                limits: limits.into(),
                host: Box::new((&**image).into()),
                keys: keys_of(image),
                places: places_of(image),
            },
            Piece::Ledger { id, seq, image } => PieceV2::Ledger {
                id: text(id),
                seq: *seq,
                ledger: image.into(),
            },
            Piece::Auth { seq, image } => PieceV2::Auth {
                seq: *seq,
                table: image.into(),
            },
            Piece::End { now, policy } => PieceV2::End {
                now: *now,
                policy: policy.into(),
            },
            Piece::RateLimits { seq, image } => PieceV2::RateLimits {
                seq: *seq,
                domains: image
                    .domains
                    .iter()
                    .map(|(d, counters)| {
                        let counters = counters
                            .iter()
                            .map(|(k, start, unit, count)| {
                                (text(k), *start, unit_code(*unit), *count)
                            })
                            .collect();
                        (text(d), counters)
                    })
                    .collect(),
            },
        }
    }
}

/// A host's piece in the core's terms, with its keys and places when the piece has them.
fn host_piece(
    id: Text<'_>,
    seq: u64,
    limits: LimitsRecordV2,
    host: HostV2<'_>,
    keys: Option<KeysV4<'_>>,
    places: Option<PlacesV5>,
) -> Result<Piece, String> {
    let image = with_keys_and_places(host.try_into()?, keys, places)?;
    let (id, limits) = (id.into_owned(), limits.try_into()?);
    Ok(Piece::Host {
        id,
        seq,
        limits,
        image: Box::new(image),
    })
}

impl TryFrom<PieceV2<'_>> for Piece {
    type Error = String;
    fn try_from(p: PieceV2<'_>) -> Result<Self, String> {
        Ok(match p {
            PieceV2::Host {
                id,
                seq,
                limits,
                host,
            } => host_piece(id, seq, limits, *host, None, None)?,
            PieceV2::HostKeyed {
                id,
                seq,
                limits,
                host,
                keys,
            } => host_piece(id, seq, limits, *host, Some(keys), None)?,
            PieceV2::HostPlaced {
                id,
                seq,
                limits,
                host,
                keys,
                places,
            } => host_piece(id, seq, limits, *host, Some(keys), Some(places))?,
            PieceV2::Ledger { id, seq, ledger } => Piece::Ledger {
                id: id.into_owned(),
                seq,
                image: ledger.try_into()?,
            },
            PieceV2::Auth { seq, table } => Piece::Auth {
                seq,
                image: table.into(),
            },
            PieceV2::End { now, policy } => Piece::End {
                now,
                policy: policy.try_into()?,
            },
            PieceV2::RateLimits { seq, domains } => Piece::RateLimits {
                seq,
                image: CounterImage {
                    domains: domains
                        .into_iter()
                        .map(|(d, counters)| {
                            let counters = counters
                                .into_iter()
                                .map(|(k, start, unit, count)| {
                                    Ok((k.into_owned(), start, unit_of(unit)?, count))
                                })
                                .collect::<Result<_, String>>()?;
                            Ok((d.into_owned(), counters))
                        })
                        .collect::<Result<_, String>>()?,
                },
            },
        })
    }
}

impl<'a> From<&'a HostImage> for HostV2<'a> {
    fn from(h: &'a HostImage) -> Self {
        let c = &h.counters;
        HostV2 {
            tickets: h
                .tickets
                .iter()
                .map(|t| TicketV2 {
                    key: t.key,
                    subject: text(&t.subject),
                    account: t.account.as_deref().map(text),
                    instance: text(&t.instance),
                    run_id: text(&t.run_id),
                    state: t.state.into(),
                    grant: t.grant,
                    deadline: t.deadline,
                    order: t.order,
                    since: t.since,
                    level: t.level,
                    reclaimed: t.reclaimed,
                })
                .collect(),
            ended: h
                .ended
                .iter()
                .map(|e| EndedV2 {
                    key: e.key,
                    run_id: text(&e.run_id),
                    state: e.state.into(),
                    grant: e.grant,
                    forget_at: e.forget_at,
                    answers_run: e.answers_run,
                })
                .collect(),
            rotation: h
                .rotation
                .iter()
                .map(|level| level.iter().map(|(s, c)| (text(s), *c)).collect())
                .collect(),
            next_order: h.next_order,
            next_front: h.next_front,
            grant: h.grant,
            grant_floor: h.grant_floor,
            counters: CountersV2 {
                submitted: c.submitted,
                admitted: c.admitted,
                rejected: c.rejected,
                released: c.released,
                cancelled: c.cancelled,
                shed: c.shed,
                expired: c.expired,
                queue_wait_buckets: c.queue_wait.buckets.to_vec(),
                queue_wait_sum_ms: c.queue_wait.sum_ms,
                shadow: c.shadow.to_vec(),
                hold_avg_ms: c.hold_avg_ms,
                outcomes: c.outcomes.to_vec(),
                latency_sum_ms: c.latency_sum_ms,
                latency_count: c.latency_count,
                reclaimed: c.reclaimed,
            },
            adaptive: h
                .adaptive
                .iter()
                .map(|(a, s)| (text(a), s.cap_milli, s.last_cut, s.knee_milli))
                .collect(),
            instances: h
                .instances
                .iter()
                .map(|(i, rss, at)| (text(i), *rss, *at))
                .collect(),
        }
    }
}

impl TryFrom<HostV2<'_>> for HostImage {
    type Error = String;
    fn try_from(h: HostV2<'_>) -> Result<Self, String> {
        let c = h.counters;
        if h.rotation.len() != LEVELS {
            return Err(format!(
                "{} priority levels, not {LEVELS}",
                h.rotation.len()
            ));
        }
        let mut levels = h.rotation.into_iter().map(|level| {
            level
                .into_iter()
                .map(|(s, credit)| (s.into_owned(), credit))
                .collect()
        });
        Ok(HostImage {
            next_key_seq: 0,
            tickets: h
                .tickets
                .into_iter()
                .map(|t| TicketImage {
                    key: t.key,
                    subject: t.subject.into_owned(),
                    account: t.account.map(Cow::into_owned),
                    instance: t.instance.into_owned(),
                    run_id: t.run_id.into_owned(),
                    state: t.state.into(),
                    grant: t.grant,
                    deadline: t.deadline,
                    order: t.order,
                    since: t.since,
                    level: t.level,
                    reclaimed: t.reclaimed,
                    keyed: None,
                    key_seq: 0,
                    ready_at: 0,
                    burst_since: None,
                    superseded_by: None,
                })
                .collect(),
            ended: h
                .ended
                .into_iter()
                .map(|e| EndedImage {
                    key: e.key,
                    run_id: e.run_id.into_owned(),
                    state: e.state.into(),
                    grant: e.grant,
                    forget_at: e.forget_at,
                    answers_run: e.answers_run,
                    superseded_by: None,
                    key_seq: 0,
                })
                .collect(),
            rotation: std::array::from_fn(|_| levels.next().expect("LEVELS lists")),
            next_order: h.next_order,
            next_front: h.next_front,
            grant: h.grant,
            grant_floor: h.grant_floor,
            counters: Counters {
                submitted: c.submitted,
                admitted: c.admitted,
                rejected: c.rejected,
                released: c.released,
                cancelled: c.cancelled,
                shed: c.shed,
                expired: c.expired,
                queue_wait: WaitHistogram {
                    buckets: array(c.queue_wait_buckets, "queue-wait buckets")?,
                    sum_ms: c.queue_wait_sum_ms,
                },
                shadow: array(c.shadow, "shadow decisions")?,
                hold_avg_ms: c.hold_avg_ms,
                outcomes: array(c.outcomes, "release outcomes")?,
                latency_sum_ms: c.latency_sum_ms,
                latency_count: c.latency_count,
                reclaimed: c.reclaimed,
                ..Counters::default()
            },
            adaptive: h
                .adaptive
                .into_iter()
                .map(|(a, cap_milli, last_cut, knee_milli)| {
                    (
                        a.into_owned(),
                        AdaptiveState {
                            cap_milli,
                            last_cut,
                            knee_milli,
                        },
                    )
                })
                .collect(),
            instances: h
                .instances
                .into_iter()
                .map(|(i, rss, at)| (i.into_owned(), rss, at))
                .collect(),
        })
    }
}

impl<'a> From<&'a LedgerImage> for LedgerV2<'a> {
    fn from(l: &'a LedgerImage) -> Self {
        let s = &l.stats;
        LedgerV2 {
            runs: l
                .runs
                .iter()
                .map(|r| RunV2 {
                    run_id: text(&r.run_id),
                    subject: text(&r.subject),
                    account: r.account.as_deref().map(text),
                    used_tokens: r.used_tokens,
                    used_cost_micros: r.used_cost,
                    partial_steps: r.partial_steps,
                    last_touched: r.last_touched,
                    steps: r
                        .steps
                        .iter()
                        .map(|s| StepV2 {
                            step: s.step,
                            answer: (&s.answer).into(),
                            state: s.state.into(),
                            model: text(&s.model),
                            reserved_tokens: s.reserved_tokens,
                            reserved_cost_micros: s.reserved_cost,
                            window: s.window,
                            decided_at: s.decided_at,
                            deadline: s.deadline,
                        })
                        .collect(),
                })
                .collect(),
            windows: l
                .windows
                .iter()
                .map(|(a, start, end, tokens, cost)| (text(a), *start, *end, *tokens, *cost))
                .collect(),
            stats: [
                s.open,
                s.uncertain,
                s.allowed,
                s.denied,
                s.deferred,
                s.settled,
            ],
            next_forget: l.next_forget,
        }
    }
}

impl TryFrom<LedgerV2<'_>> for LedgerImage {
    type Error = String;
    fn try_from(l: LedgerV2<'_>) -> Result<Self, String> {
        let [open, uncertain, allowed, denied, deferred, settled] = l.stats;
        let mut runs = Vec::with_capacity(l.runs.len());
        for r in l.runs {
            let mut steps = Vec::with_capacity(r.steps.len());
            for s in r.steps {
                steps.push(StepImage {
                    step: s.step,
                    answer: s.answer.try_into()?,
                    state: s.state.try_into()?,
                    model: s.model.into_owned(),
                    reserved_tokens: s.reserved_tokens,
                    reserved_cost: s.reserved_cost_micros,
                    window: s.window,
                    decided_at: s.decided_at,
                    deadline: s.deadline,
                });
            }
            runs.push(RunImage {
                run_id: r.run_id.into_owned(),
                subject: r.subject.into_owned(),
                account: r.account.map(Cow::into_owned),
                used_tokens: r.used_tokens,
                used_cost: r.used_cost_micros,
                partial_steps: r.partial_steps,
                last_touched: r.last_touched,
                steps,
            });
        }
        Ok(LedgerImage {
            runs,
            windows: l
                .windows
                .into_iter()
                .map(|(a, start, end, tokens, cost)| (a.into_owned(), start, end, tokens, cost))
                .collect(),
            stats: LedgerStats {
                open,
                uncertain,
                allowed,
                denied,
                deferred,
                settled,
            },
            next_forget: l.next_forget,
        })
    }
}

impl<'a> From<&'a AuthImage> for AuthV2<'a> {
    fn from(a: &'a AuthImage) -> Self {
        AuthV2 {
            max_keys: a.max_keys as u64,
            endpoints: a
                .endpoints
                .iter()
                .map(|e| EndpointV2 {
                    endpoint: text(&e.endpoint),
                    keys: e
                        .keys
                        .iter()
                        .map(|(id, count, window_end, locked_until)| {
                            (text(id), *count, *window_end, *locked_until)
                        })
                        .collect(),
                    expiries: e.expiries.iter().map(|(at, id)| (*at, text(id))).collect(),
                })
                .collect(),
        }
    }
}

impl From<AuthV2<'_>> for AuthImage {
    fn from(a: AuthV2<'_>) -> Self {
        AuthImage {
            max_keys: usize::try_from(a.max_keys).unwrap_or(usize::MAX),
            endpoints: a
                .endpoints
                .into_iter()
                .map(|e| EndpointImage {
                    endpoint: e.endpoint.into_owned(),
                    keys: e
                        .keys
                        .into_iter()
                        .map(|(id, count, window_end, locked_until)| {
                            (id.into_owned(), count, window_end, locked_until)
                        })
                        .collect(),
                    expiries: e
                        .expiries
                        .into_iter()
                        .map(|(at, id)| (at, id.into_owned()))
                        .collect(),
                })
                .collect(),
        }
    }
}
