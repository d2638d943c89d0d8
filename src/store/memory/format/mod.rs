//! The data dir's format: what the bytes of its log records and snapshot pieces mean. These
//! are the store's own types, converted to and from the core's ([`HostOp`] and its twins for
//! records; [`HostImage`], [`LedgerImage`] and [`AuthImage`] for snapshots), so that changing
//! the core cannot change what is on disk by accident: a change that needs a new field on disk
//! is a new format version, with its conversion, and the versions before it stay readable.
//!
//! Every log segment and snapshot file starts with a magic naming its format version
//! (`AAlog\0\0<v>`, `AAsnap\0<v>`), so a dir whose files are of two versions (one being
//! rewritten, see `persist`) is read file by file; `FORMAT` says the newest version the dir
//! holds. Payloads are postcard: integers as varints (signed ones zigzag), `u128` keys as 16
//! little-endian bytes' varint, strings and lists with their length first, `Option` as 0 or 1
//! then the value, enums as their variant's index then its fields, structs as their fields in
//! order.
//!
//! # Format 5 (written now)
//!
//! Format 4 with the places of ended keyed tickets: every host's snapshot piece is `6
//! HostPlaced { id, seq, limits, host, keys, places }`: `5 HostKeyed` followed by `places` =
//! the remembered ended tickets that had a key, as (ticket key, key_seq), so a run submitted
//! again after its queued ticket lapsed (`resubmit_expired`) takes the place among its key's
//! tickets its run first had after a restart too. Its records and pieces are read with format
//! 2's types ([`v2`]); an older dir is rewritten in format 5 when opened.
//!
//! # Format 4 (read)
//!
//! Format 3 with keys (a Submit's `key` and its policy):
//! * record `1 Host`'s `op` may also be `12 SubmitKeyed { args, key, keyed }`: a Submit that
//!   named a key, `args` and `key` as in `1 Submit`, `keyed` = (key, policy 0 none / 1 keep
//!   newest / 2 serial / 3 serial keep newest / 4 reject new, supersede_running, debounce_ms,
//!   debounce_max_ms); a Submit without a key is still written as `1 Submit`; and `13
//!   ReclaimKeyed { held, key, keyed }`: a Reclaim that named a key, `keyed` = (key, policy);
//! * every host's snapshot piece is `5 HostKeyed { id, seq, limits, host, keys }`: `0 Host`
//!   followed by `keys` = (next_key_seq, superseded, key_refused, keyed tickets as (ticket key,
//!   key, policy, key_seq, ready_at, burst_since?, superseded_by?), superseded ended tickets as
//!   (ticket key, superseded_by));
//! * a ticket's state may be `7 superseded`.
//!
//! Its records and pieces are read with format 2's types ([`v2`]); a file of an older format
//! holding a record or piece only format 4 has is refused. An older dir is rewritten in the
//! newest format when opened, so an older build refuses it from then on, as newer.
//!
//! # Format 3 (read)
//!
//! Format 2 with one more rate limit record: `4 RateLimit`'s `op` may also be `2 Subtract {
//! domain, hits, epoch_ms }` (Envoy's `hits_subtrahend`), `hits` as in `0 Hit`. Its records
//! and pieces are read with format 2's types ([`v2`]); a format 2 file holding a `Subtract`
//! is refused. A format 2 dir is rewritten in format 3 when opened, so a build of format 2
//! refuses it from then on, as newer, instead of misreading a subtraction.
//!
//! # Format 2 (read, and the types format 3 is written with)
//!
//! A **record** ([`v2::records::RecordV2`]) is one of:
//! * `0 Policy(policy)`: the resource policy the ledger records after it were decided under;
//! * `1 Host { host, seq, now, op }`: a change of a host's tickets, applied at store time `now`
//!   (ms), the `seq`-th of that host's; `op` is `0 Create(limits)`, `1 Submit { args, key }`
//!   with `args` = (instance_id, subject, account_id?, run_id, mode 0 queue / 1 try, rss_mb?,
//!   priority, resubmit_expired), `2 Renew { key, rss_mb? }`, `3 Release { key, report }` with `report` =
//!   (outcome 0 unspecified / 1 ok / 2 rate limited / 3 overloaded / 4 failed, latency_ms?),
//!   `4 ReleaseRun { run_id, report }`, `5 Park(key)`, `6 Unpark(key)`, `7 Housekeeping`,
//!   `8 CountRejection`, `9 Limits(limits)`, `10 Restarted`, `11 Reclaim { held, key }` with
//!   `held` = (instance_id, subject, account_id?, run_id, grant, priority);
//! * `2 Ledger { host, seq, now, op }`: `op` is `0 Authorize(run_id, step, subject, account_id?,
//!   model, requested_output_tokens, estimated_input_tokens, estimated_cost_micros)`,
//!   `1 Settle { run_id, step, usage }` with `usage` = (input_tokens, output_tokens,
//!   cost_micros, coverage 0 complete / 1 partial / 2 unknown), `2 Resolve { run_id, step,
//!   resolution 0 consumed / 1 released }`, `3 Housekeeping`;
//! * `3 Auth { seq, now, op }`: `op` is `0 Attempt { endpoint, identity, rule }` with `rule` =
//!   (max_attempts, window_ms, lockout_ms), `1 Reset { endpoint, identity }`, `2 Prune`,
//!   `3 MaxKeys(n)`;
//! * `4 RateLimit { seq, now, op }`: `op` is `0 Hit { domain, max_counters, hits, epoch_ms }`
//!   with `hits` as (counter key, unit, hits) list and unit 0 second / 1 minute / 2 hour / 3
//!   day / 4 week / 5 month / 6 year, or `1 Prune { epoch_ms }` (times in ms since the Unix
//!   epoch, the windows' clock).
//!
//! `limits` ([`v2::LimitsRecordV2`]) is: total, per_subject, per_account?, subjects (name, cap)
//! list, accounts (id, cap) list, queue_total, queue_per_subject, queue_hard_total, overflow
//! (0 reject / 1 shed_oldest / 2 queue), lease_ttl_ms, retention_ms, max_retained, max_rss_mb,
//! soft_rss_mb, weights (name, weight) list, priority_aging_ms, mode (0 enforce / 1 shadow),
//! adaptive (account, (min, max, decrease_pm, increase, cooldown_ms)) list, adaptive_default?,
//! source (0 file / 1 operator), revision. `policy` ([`v2::PolicyV2`]) is: default budget?,
//! subjects' and accounts' budgets as (name, budget) lists with budget = (max_tokens?,
//! max_cost_micros?, unknown_usage 0 reject / 1 allow / 2 defer), allowances as (account,
//! (tokens?, cost_micros?, window_ms)) list, reservation_ttl_ms, run_retention_ms.
//!
//! A **snapshot piece** ([`v2::pieces::PieceV2`]) is one of:
//! * `0 Host { id, seq, limits, host }`: `host` = (tickets, ended, rotation, next_order,
//!   next_front, grant, grant_floor, counters, adaptive, instances): tickets as (key, subject,
//!   account?, instance, run_id, state, grant, deadline, order, since, level, reclaimed) with
//!   state 0 queued / 1 admitted / 2 released / 3 cancelled / 4 shed / 5 expired / 6 parked;
//!   ended tickets oldest first as (key, run_id, state, grant, forget_at, answers_run); the
//!   rotation as five lists (priority 1 first) of (subject, credit); counters as (submitted,
//!   admitted, rejected, released, cancelled, shed, expired, queue-wait buckets list,
//!   queue-wait sum ms, shadow list, hold_avg_ms, outcomes list, latency_sum_ms,
//!   latency_count, reclaimed); adaptive as (account, cap_milli, last_cut, knee_milli) list;
//!   instances as (instance, rss_mb, at) list;
//! * `1 Ledger { id, seq, ledger }`: `ledger` = (runs, windows, stats, next_forget); runs as
//!   (run_id, subject, account?, used_tokens, used_cost_micros, partial_steps, last_touched,
//!   steps) with steps as (step, answer, state, model, reserved_tokens, reserved_cost_micros,
//!   window?, decided_at, deadline?); answer = (decision 0 allow / 1 deny / 2 unknown, reason?
//!   0 resource limit / 1 quota exhausted / 2 usage unknown, granted_output_tokens,
//!   remaining_tokens?, remaining_cost_micros?, replay); state `0 Reserved`, `1 Uncertain`,
//!   `2 Settled(usage)`, `3 Resolved(resolution)`, `4 Closed`; windows as (account, start, end,
//!   used_tokens, used_cost_micros); stats as six counts (open, uncertain, allowed, denied,
//!   deferred, settled);
//! * `2 Auth { seq, table }`: `table` = (max_keys, endpoints), each endpoint (name, keys as
//!   (identity, count, window_end, locked_until), expiries as (at, identity));
//! * `3 End { now, policy }`: the last piece;
//! * `4 RateLimits { seq, domains }`: per domain (name, counters as (key, window start s, unit,
//!   count)), before the end piece.
//!
//! # Format 1 (read only)
//!
//! The core's in-memory types of the build before this one, as postcard wrote them
//! ([`v1`] keeps a frozen copy of each); read into the same images, then rewritten.

use crate::auth::AuthImage;
use crate::ledger::{LedgerImage, ResourcePolicy};
use crate::ratelimit::CounterImage;
use crate::scheduler::{HostImage, LimitsRecord, Millis};

#[cfg(doc)]
use super::ops::HostOp;
use super::ops::Record;

pub mod v1;
pub mod v2;

#[cfg(test)]
mod tests;

// The journal names files with the format this module writes, and refuses what it cannot read.
const _: () =
    assert!(crate::store::journal::FORMAT == 5 && crate::store::journal::OLDEST_FORMAT == 1);

/// A snapshot piece in the core's terms.
#[derive(Debug, PartialEq)]
pub enum Piece {
    Host {
        id: String,
        /// The last of the host's records the piece holds.
        seq: u64,
        limits: LimitsRecord,
        image: Box<HostImage>,
    },
    Ledger {
        id: String,
        seq: u64,
        image: LedgerImage,
    },
    Auth {
        seq: u64,
        image: AuthImage,
    },
    End {
        now: Millis,
        policy: ResourcePolicy,
    },
    RateLimits {
        seq: u64,
        image: CounterImage,
    },
}

/// Append a record's encoding (this build's format) to `out`.
///
/// Fails only when postcard cannot write into the vector (it cannot).
pub fn encode_record(record: &Record<'_>, out: &mut Vec<u8>) -> Result<(), postcard::Error> {
    postcard::to_io(&v2::records::RecordV2::from(record), out).map(|_| ())
}

/// Decode one record of format `version`.
///
/// Fails when the bytes are not a record of that format.
pub fn decode_record(version: u32, bytes: &[u8]) -> Result<Record<'static>, String> {
    let bad = |e: postcard::Error| format!("not a record of format {version}: {e}");
    match version {
        1 => Ok(postcard::from_bytes::<v1::RecordV1>(bytes)
            .map_err(bad)?
            .into()),
        2..=5 => {
            let record = postcard::from_bytes::<v2::records::RecordV2>(bytes).map_err(bad)?;
            if record.format() > version {
                return Err(format!(
                    "a record of format {version} that only format {} has",
                    record.format()
                ));
            }
            record
                .try_into()
                .map_err(|e| format!("a record of format {version} with {e}"))
        }
        v => Err(format!("records of format {v} are not read by this build")),
    }
}

/// Append a snapshot piece's encoding (this build's format) to `out`.
///
/// Fails only when postcard cannot write into the vector (it cannot).
pub fn encode_piece(piece: &Piece, out: &mut Vec<u8>) -> Result<(), postcard::Error> {
    postcard::to_io(&v2::pieces::PieceV2::from(piece), out).map(|_| ())
}

/// Decode one snapshot piece of format `version`.
///
/// Fails when the bytes are not a piece of that format.
pub fn decode_piece(version: u32, bytes: &[u8]) -> Result<Piece, String> {
    let bad = |e: postcard::Error| format!("not a snapshot piece of format {version}: {e}");
    match version {
        1 => postcard::from_bytes::<v1::PieceV1>(bytes)
            .map_err(bad)?
            .try_into()
            .map_err(|e| format!("a piece of format 1 with {e}")),
        2..=5 => {
            let piece = postcard::from_bytes::<v2::pieces::PieceV2>(bytes).map_err(bad)?;
            if piece.format() > version {
                return Err(format!(
                    "a piece of format {version} that only format {} has",
                    piece.format()
                ));
            }
            piece
                .try_into()
                .map_err(|e| format!("a piece of format {version} with {e}"))
        }
        v => Err(format!(
            "snapshots of format {v} are not read by this build"
        )),
    }
}
