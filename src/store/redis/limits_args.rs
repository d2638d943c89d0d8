//! What the ticket scripts are given: a host's limits (the file's, computed once per file),
//! a release's report and adaptive bounds as ARGV strings, and ticket keys in hex.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::scheduler::{Adaptive, Limits, LimitsTable, Mode, Outcome, Report, TicketKey};

/// This replica's file limits, and each host's as the scripts read them (computed once per
/// file, not per call).
pub(super) struct FileLimits {
    pub table: LimitsTable,
    default: (String, String),
    hosts: HashMap<String, (String, String)>,
}

impl FileLimits {
    /// The file's limits, versioned by the time now: newer than those of every replica
    /// started (or reloaded) before (see lua/ticket_core.lua, one set of limits).
    pub(super) fn new(table: LimitsTable, clock: &dyn crate::clock::Clock) -> Self {
        let version = clock.origin_epoch_us() + clock.now_ms() * 1_000;
        FileLimits {
            default: limits_args(&table.default, version),
            hosts: table
                .hosts
                .iter()
                .map(|(h, l)| (h.clone(), limits_args(l, version)))
                .collect(),
            table,
        }
    }

    pub(super) fn args(&self, host: &str) -> &(String, String) {
        self.hosts.get(host).unwrap_or(&self.default)
    }
}

/// The limits of a host as the scripts read them: `version,` then the scalars, and the
/// per-subject and per-account caps as JSON (`""` when there are none; names are printable
/// ASCII). `version` orders the limits of replicas sharing the store (the newest are in force).
pub(super) fn limits_args(l: &Limits, version: u64) -> (String, String) {
    let (scalars, maps) = limits_parts(l);
    (format!("{version},{scalars}"), maps)
}

/// A host's limits as the scripts store them: the scalars, and the caps as JSON.
pub(super) fn limits_parts(l: &Limits) -> (String, String) {
    // A JSON object of names (printable ASCII, escaped) to values written by `value`.
    fn object<V>(m: &HashMap<String, V>, value: impl Fn(&V) -> String) -> String {
        let mut out = String::from("{");
        for (i, (k, v)) in m.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let k = k.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = write!(out, "\"{k}\":{}", value(v));
        }
        out.push('}');
        out
    }
    let map = |m: &HashMap<String, u32>| object(m, u32::to_string);
    let scalars = format!(
        "{},{},{},{},{},{},{},{},{},{},{},{}",
        l.total,
        l.per_subject,
        l.per_account.map_or(-1, i64::from),
        l.queue_total,
        l.queue_per_subject,
        l.queue_hard_total,
        l.overflow.name(),
        l.lease_ttl_ms,
        l.retention_ms,
        l.max_retained,
        l.memory.max_rss_mb,
        l.memory.soft_rss_mb,
    );
    let defaults = l.weights.is_empty()
        && l.priority_aging_ms == 0
        && l.mode == Mode::Enforce
        && l.adaptive.is_empty()
        && l.adaptive_default.is_none();
    let maps = if l.subjects.is_empty() && l.accounts.is_empty() && defaults {
        String::new()
    } else {
        let mut m = format!(
            "{{\"subjects\":{},\"accounts\":{}",
            map(&l.subjects),
            map(&l.accounts)
        );
        if !l.weights.is_empty() {
            let _ = write!(m, ",\"weights\":{}", map(&l.weights));
        }
        if l.priority_aging_ms > 0 {
            let _ = write!(m, ",\"aging\":{}", l.priority_aging_ms);
        }
        if l.mode != Mode::Enforce {
            let _ = write!(m, ",\"mode\":\"{}\"", l.mode.name());
        }
        if let Some(a) = &l.adaptive_default {
            let _ = write!(m, ",\"adaptive\":\"{}\"", adaptive_arg(a));
        }
        if !l.adaptive.is_empty() {
            let accounts = object(&l.adaptive, |a| format!("\"{}\"", adaptive_arg(a)));
            let _ = write!(m, ",\"adaptiveAccounts\":{accounts}");
        }
        m.push('}');
        m
    };
    (scalars, maps)
}

/// A release's report as the scripts read it: the outcome's name ('' when unspecified) and the
/// latency ('' when not reported).
pub(super) fn report_args(r: Report) -> (String, String) {
    let outcome = match r.outcome {
        Outcome::Unspecified => String::new(),
        o => o.name().to_string(),
    };
    (
        outcome,
        r.latency_ms.map_or_else(String::new, |l| l.to_string()),
    )
}

/// An adaptive cap's settings as the scripts read them: `min,max,decrease‰,increase,cooldown`.
pub(super) fn adaptive_arg(a: &Adaptive) -> String {
    format!(
        "{},{},{},{},{}",
        a.min, a.max, a.decrease_pm, a.increase, a.cooldown_ms
    )
}

pub(super) fn adaptive_of_arg(s: &str) -> Option<Adaptive> {
    let p: Vec<&str> = s.split(',').collect();
    if p.len() != 5 {
        return None;
    }
    Some(Adaptive {
        min: p[0].parse().ok()?,
        max: p[1].parse().ok()?,
        decrease_pm: p[2].parse().ok()?,
        increase: p[3].parse().ok()?,
        cooldown_ms: p[4].parse().ok()?,
    })
}

pub(super) fn hex(key: TicketKey) -> String {
    format!("{key:032x}")
}
