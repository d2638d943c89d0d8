//! What the ticket scripts answer, decoded: views, releases, limits of record, stats. A reply
//! of an unexpected shape is a protocol error naming the script, never a guess.

use std::collections::HashMap;

use redis::Value;

use super::codes;
use super::limits_args::*;
use crate::scheduler::{
    Blocker, Counters, HostStats, Limits, LimitsRecord, LimitsSource, Mode, OverflowPolicy,
    TicketKey, TicketState, TicketView, UsageRow, WaitHistogram,
};
use crate::store::StoreError;

/// A stats row as the script answers it: name, in_flight, queued and (accounts) the cap.
type StatsRow = (String, u32, u32, Option<u32>);

/// A reply field as text: a string or an integer; `None` for anything else (never a guess).
pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// A reply field as a count: a non-negative integer, or a string of one.
pub(super) fn int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => text(other)?.parse().ok(),
    }
}

pub(super) fn state(v: &Value) -> Option<TicketState> {
    codes::ticket_state(&text(v)?)
}

pub(super) fn key_of(v: &Value) -> Option<TicketKey> {
    TicketKey::from_str_radix(&text(v)?, 16).ok()
}

/// A release's `{previous state, ticket key}` reply, or nil for an unknown ticket.
pub(super) fn released(reply: Value) -> Result<Option<(TicketKey, TicketState)>, StoreError> {
    match &reply {
        Value::Nil => Ok(None),
        Value::Array(f) if f.len() == 2 => match (key_of(&f[1]), state(&f[0])) {
            (Some(k), Some(s)) => Ok(Some((k, s))),
            _ => Err(StoreError::protocol(format!(
                "redis: release answered {reply:?}"
            ))),
        },
        _ => Err(StoreError::protocol(format!(
            "redis: release answered {reply:?}"
        ))),
    }
}

/// The host's epoch when a Submit answered `{'epoch', seen}` (see `epoch.rs`).
pub(super) fn epoch_reply(reply: &Value) -> Option<String> {
    match reply {
        Value::Array(f) if f.len() == 2 && f.first().and_then(text).as_deref() == Some("epoch") => {
            text(&f[1])
        }
        _ => None,
    }
}

/// A `{state, position, grant, lease, eta, blocker, superseded_by, debounce left}` reply (or
/// nil) as a view.
pub(super) fn view(key: TicketKey, v: &Value) -> Result<Option<TicketView>, StoreError> {
    match v {
        Value::Nil => Ok(None),
        Value::Array(f) if f.len() == 8 => {
            let bad = || StoreError::protocol(format!("redis: malformed ticket view {v:?}"));
            Ok(Some(TicketView {
                key,
                state: state(&f[0]).ok_or_else(bad)?,
                position: int(&f[1])
                    .and_then(|p| u32::try_from(p).ok())
                    .ok_or_else(bad)?,
                grant: int(&f[2]).ok_or_else(bad)?,
                lease_remaining_ms: int(&f[3]).ok_or_else(bad)?,
                eta_ms: int(&f[4]).ok_or_else(bad)?,
                shadow: None,
                superseded_by: match text(&f[6]).ok_or_else(bad)?.as_str() {
                    "" => None,
                    _ => Some(key_of(&f[6]).ok_or_else(bad)?),
                },
                debounce_left_ms: int(&f[7]).ok_or_else(bad)?,
                blocked_by: match text(&f[5]).ok_or_else(bad)?.as_str() {
                    "" => None,
                    code => Some(Blocker::from_code(code).ok_or_else(bad)?),
                },
            }))
        }
        other => Err(StoreError::protocol(format!(
            "redis: malformed ticket view {other:?}"
        ))),
    }
}

/// A limits script's answer: the limits of record, or the revision they moved to.
pub(super) fn limits_record(reply: &Value) -> Result<Result<LimitsRecord, u64>, StoreError> {
    let bad = || StoreError::protocol(format!("redis: limits answered {reply:?}"));
    let Value::Array(f) = reply else {
        return Err(bad());
    };
    match f.first().and_then(text).as_deref() {
        Some("moved") => Ok(Err(f.get(1).and_then(int).ok_or_else(bad)?)),
        Some("ok") if f.len() >= 4 => Ok(Ok(LimitsRecord {
            source: match text(&f[1]).as_deref() {
                Some("operator") => LimitsSource::Operator,
                Some("file") => LimitsSource::File,
                _ => return Err(bad()),
            },
            revision: int(&f[2]).ok_or_else(bad)?,
            limits: limits_of(&f[3..]).ok_or_else(bad)?,
        })),
        _ => Err(bad()),
    }
}

/// A park or unpark answer.
pub(super) fn parked(
    key: TicketKey,
    reply: Value,
) -> Result<Option<Result<TicketView, TicketState>>, StoreError> {
    let malformed = || StoreError::protocol(format!("redis: park answered {reply:?}"));
    let Value::Array(f) = &reply else {
        return match reply {
            Value::Nil => Ok(None),
            _ => Err(malformed()),
        };
    };
    match f.first().and_then(text).as_deref() {
        Some("ok") if f.len() == 9 => Ok(Some(Ok(
            view(key, &Value::Array(f[1..9].to_vec()))?.ok_or_else(malformed)?
        ))),
        Some("state") => Ok(Some(Err(f.get(1).and_then(state).ok_or_else(malformed)?))),
        _ => Err(malformed()),
    }
}

/// The limits of record the stats script answers: the scalars, then the subject and account
/// caps and the weights, each as a count and then name, value pairs, then aging and mode.
/// `None` when malformed.
pub(super) fn limits_of(f: &[Value]) -> Option<Limits> {
    let scalars = text(f.first()?)?;
    let p: Vec<&str> = scalars.split(',').collect();
    if p.len() != 12 {
        return None;
    }
    let num = |i: usize| p[i].parse::<u64>().ok();
    let n32 = |i: usize| p[i].parse::<u32>().ok();
    let mut i = 1;
    let mut caps = || -> Option<HashMap<String, u32>> {
        let count = usize::try_from(int(f.get(i)?)?).ok()?;
        i += 1;
        let mut m = HashMap::new();
        for _ in 0..count {
            m.insert(text(f.get(i)?)?, u32::try_from(int(f.get(i + 1)?)?).ok()?);
            i += 2;
        }
        Some(m)
    };
    let subjects = caps()?;
    let accounts = caps()?;
    let weights = caps()?;
    let priority_aging_ms = int(f.get(i)?)?;
    let mode = Mode::parse(&text(f.get(i + 1)?)?)?;
    let adaptive_default = match text(f.get(i + 2)?)?.as_str() {
        "" => None,
        s => Some(adaptive_of_arg(s)?),
    };
    let count = usize::try_from(int(f.get(i + 3)?)?).ok()?;
    let mut adaptive = HashMap::new();
    for j in 0..count {
        let k = i + 4 + 2 * j;
        adaptive.insert(text(f.get(k)?)?, adaptive_of_arg(&text(f.get(k + 1)?)?)?);
    }
    Some(Limits {
        total: n32(0)?,
        per_subject: n32(1)?,
        per_account: match p[2] {
            "-1" => None,
            s => Some(s.parse().ok()?),
        },
        subjects,
        accounts,
        queue_total: n32(3)?,
        queue_per_subject: n32(4)?,
        queue_hard_total: n32(5)?,
        overflow: OverflowPolicy::parse(p[6])?,
        lease_ttl_ms: num(7)?,
        retention_ms: num(8)?,
        max_retained: n32(9)?,
        memory: crate::scheduler::MemoryLimits {
            max_rss_mb: n32(10)?,
            soft_rss_mb: n32(11)?,
        },
        weights,
        priority_aging_ms,
        mode,
        adaptive,
        adaptive_default,
    })
}

pub(super) fn stats_of(reply: &Value) -> Result<HostStats, StoreError> {
    let Value::Array(f) = reply else {
        return Err(StoreError::protocol("redis: malformed stats"));
    };
    let bad = || StoreError::protocol(format!("redis: malformed stats {reply:?}"));
    let n = |i: usize| f.get(i).and_then(int).ok_or_else(bad);
    let n32 = |i: usize| n(i).and_then(|x| u32::try_from(x).map_err(|_| bad()));
    let counters = Counters {
        submitted: n(3)?,
        admitted: n(4)?,
        rejected: n(5)?,
        released: n(6)?,
        cancelled: n(7)?,
        shed: n(8)?,
        expired: n(9)?,
        queue_wait: WaitHistogram::default(),
        shadow: [0; 4],
        hold_avg_ms: 0,
        outcomes: [0; 4],
        latency_sum_ms: 0,
        latency_count: 0,
        reclaimed: 0,
        ..Counters::default()
    };
    let mut i = 11;
    // Rows of name, in_flight, queued and (with `cap`) the cap in force (-1: none).
    let mut rows = |cap: bool| -> Result<Vec<StatsRow>, StoreError> {
        let count = n(i)? as usize;
        i += 1;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let name = f.get(i).and_then(text).ok_or_else(bad)?;
            let c = if cap {
                let c = f.get(i + 3).and_then(text).ok_or_else(bad)?;
                (c != "-1")
                    .then(|| c.parse::<u32>().map_err(|_| bad()))
                    .transpose()?
            } else {
                None
            };
            out.push((name, n32(i + 1)?, n32(i + 2)?, c));
            i += if cap { 4 } else { 3 };
        }
        out.sort();
        Ok(out)
    };
    let subject_rows = rows(false)?;
    let account_rows = rows(true)?;
    let mut queue_wait = WaitHistogram::default();
    for (j, b) in queue_wait.buckets.iter_mut().enumerate() {
        *b = n(i + j)?;
    }
    i += queue_wait.buckets.len();
    queue_wait.sum_ms = n(i)?;
    let mut shadow = [0; 4];
    for (j, c) in shadow.iter_mut().enumerate() {
        *c = n(i + 1 + j)?;
    }
    let hold_avg_ms = n(i + 5)?;
    let mut outcomes = [0; 4];
    for (j, c) in outcomes.iter_mut().enumerate() {
        *c = n(i + 6 + j)?;
    }
    let (latency_sum_ms, latency_count) = (n(i + 10)?, n(i + 11)?);
    let (reclaimed, learning_left_ms) = (n(i + 12)?, n(i + 13)?);
    let (superseded, key_refused) = (n(i + 14)?, n(i + 15)?);
    let refusals = [n(i + 16)?, n(i + 17)?, n(i + 18)?];
    let limits = limits_of(f.get(i + 19..).ok_or_else(bad)?).ok_or_else(bad)?;
    let subjects = subject_rows
        .into_iter()
        .map(|(name, in_flight, queued, _)| UsageRow {
            cap: limits.subject_cap(&name),
            in_flight,
            queued,
            name,
            adaptive: false,
        })
        .collect();
    let accounts = account_rows
        .into_iter()
        .map(|(name, in_flight, queued, cap)| UsageRow {
            cap: cap.unwrap_or(0),
            in_flight,
            queued,
            adaptive: limits.adaptive_of(&name).is_some(),
            name,
        })
        .collect();
    Ok(HostStats {
        in_flight: n32(0)?,
        queued: n32(1)?,
        parked: n32(2)?,
        counters: Counters {
            queue_wait,
            shadow,
            hold_avg_ms,
            outcomes,
            latency_sum_ms,
            latency_count,
            reclaimed,
            superseded,
            key_refused,
            refusals,
            ..counters
        },
        reported_rss_mb: n32(10)?,
        subjects,
        accounts,
        limits,
        learning_left_ms,
    })
}
