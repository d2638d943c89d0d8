//! The Redis layout's version, and which replicas may share a prefix.
//!
//! The keys, fields and script codes one version uses are its layout, numbered [`LAYOUT`].
//! Each replica registers itself in `{prefix}replicas` (a hash: a random replica id →
//! `<layout>|<oldest layout it runs beside>|<until, ms>`) when it starts and again at every
//! sweep (about once a second), so the registry says which layouts run on the prefix now; an
//! entry not renewed for [`REGISTERED_FOR_MS`] is dropped, and a replica that stops leaves at
//! once. Two replicas may share a prefix when each one's layout is at least the oldest the other
//! runs beside. This version writes layout 3 (layout 2 and keys: a ticket's `key`, `kseq`,
//! `ready`, `burst` and `sby` fields, the host's `keys`, `k:<key>` and `deb`, the counters'
//! `kseq`, `superseded` and `key_refused`, state code `X`) and runs beside layout 2, the
//! release before it: their rules are the same for tickets without a key, and while a replica
//! of layout 2 is live a Submit with a key is refused ([`KEYS_LAYOUT`]). Layout 1 replicas,
//! which did not register, may not share its prefix. A replica that finds a live one it may
//! not run beside refuses to start, naming it (or, finding it later, says so in `/readyz` and
//! refuses changes).
//!
//! Added since, within layout 3 (a layout 2 replica neither writes nor reads them): the
//! counters' `r:BUSY`, `r:QUEUE_FULL` and `r:MEMORY_PRESSURE` (refusals by reason, which a
//! host's history charts; while a layout 2 replica refuses too, its refusals are counted in
//! `rejected` only), each host's `hist` ([`super::history`]) and `recent` (its newest
//! endings, [`super::recent`]; a layout 2 replica's endings are not in it).
//!
//! Layout 0, before December 2026, kept a host's operator limits in a `limits` hash; layout 1
//! read it and moved it into the host's counters when its limits were next written. This
//! version no longer reads it: on a prefix no replica is registered on, it looks for such a
//! hash first, and refuses to start while one is left, saying what to do.

use redis::Value;

use super::StoreError;
use super::connection::Connections;

/// The layout this version writes.
pub const LAYOUT: u32 = 3;
/// The oldest layout whose replicas may share a prefix with this version's.
pub const RUNS_BESIDE: u32 = 2;
/// The first layout whose scripts decide keys: while a replica of an older one is live on the
/// prefix, a Submit with a key is refused (the older scripts would dispatch its ticket as if
/// it had none).
pub const KEYS_LAYOUT: u32 = 3;
/// How long a registration lasts without being renewed.
pub const REGISTERED_FOR_MS: u64 = 30_000;

/// Register (or renew) replica `ARGV[1]` of layout `ARGV[2]`, running beside layouts from
/// `ARGV[3]`, until now + `ARGV[4]` ms; `ARGV[5]` now in ms (0 = Redis TIME). KEYS[1] the
/// registry. Expired entries are dropped. Returns {'ok', was_empty (1/0)}, or {'refused',
/// replica, layout, runs_beside, ms since it registered} for a live replica this one may not
/// run beside (then nothing is written). `{'ok', ...}` also says the oldest layout of the
/// other live replicas ('' none).
const JOIN: &str = r"
local now = tonumber(ARGV[5])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local me, layout, beside, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local all = redis.call('HGETALL', KEYS[1])
local live, oldest = 0, nil
for i = 1, #all, 2 do
  local id, v = all[i], all[i + 1]
  local l, b, u = string.match(v, '^(%d+)|(%d+)|(%d+)$')
  if not u or tonumber(u) < now then
    redis.call('HDEL', KEYS[1], id)
  elseif id ~= me then
    live = live + 1
    if not oldest or tonumber(l) < oldest then oldest = tonumber(l) end
    if tonumber(l) < beside or layout < tonumber(b) then
      return {'refused', id, l, b, tostring(now - (tonumber(u) - ttl))}
    end
  end
end
redis.call('HSET', KEYS[1], me, layout .. '|' .. beside .. '|' .. (now + ttl))
return {'ok', live == 0 and 1 or 0, oldest and tostring(oldest) or ''}
";

/// This replica in the registry.
pub(super) struct Registration {
    id: String,
    join: redis::Script,
}

/// What joining found.
pub(super) enum Joined {
    /// Registered; `first`: no other replica is registered on the prefix; `oldest`: the
    /// oldest layout of the other live replicas.
    Ok { first: bool, oldest: Option<u32> },
    /// A live replica this one may not run beside.
    Refused(String),
}

impl Registration {
    pub(super) fn new() -> Self {
        Registration {
            id: format!("{:032x}", super::super::TicketId::random_key()),
            join: redis::Script::new(JOIN),
        }
    }

    /// Register or renew this replica (see the module documentation).
    ///
    /// Fails when Redis cannot be reached or answers what the script never does.
    pub(super) async fn join(
        &self,
        conns: &Connections,
        registry: String,
        now_arg: u64,
    ) -> Result<Joined, StoreError> {
        let mut inv = self.join.prepare_invoke();
        inv.key(registry)
            .arg(&self.id)
            .arg(LAYOUT)
            .arg(RUNS_BESIDE)
            .arg(REGISTERED_FOR_MS)
            .arg(now_arg);
        let reply: Value = conns.run(inv).await?;
        let bad =
            || StoreError::protocol(format!("redis: the replica registry answered {reply:?}"));
        let Value::Array(f) = &reply else {
            return Err(bad());
        };
        let text = |i: usize| -> Option<String> {
            match f.get(i)? {
                Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
                Value::Int(n) => Some(n.to_string()),
                _ => None,
            }
        };
        match text(0).as_deref() {
            Some("ok") => Ok(Joined::Ok {
                first: text(1).as_deref() == Some("1"),
                oldest: text(2).and_then(|l| l.parse().ok()),
            }),
            Some("refused") => {
                let (id, layout, beside, ago) = (
                    text(1).ok_or_else(bad)?,
                    text(2).ok_or_else(bad)?,
                    text(3).ok_or_else(bad)?,
                    text(4).ok_or_else(bad)?,
                );
                Ok(Joined::Refused(format!(
                    "replica {id} of Redis layout {layout} (which runs beside layouts from \
                     {beside}) renewed its registration {ago} ms ago on this prefix; this \
                     version writes layout {LAYOUT} and runs beside layouts from {RUNS_BESIDE}. \
                     Replicas of these two versions cannot share a prefix: stop the other \
                     replicas first (a stopped one leaves at once, a killed one after {} s), or \
                     start this version on a new prefix",
                    REGISTERED_FOR_MS / 1000
                )))
            }
            _ => Err(bad()),
        }
    }

    /// Leave the registry (at shutdown). Best effort: an entry left behind expires.
    pub(super) async fn leave(&self, conns: &Connections, registry: String) {
        let _: Result<i64, _> = conns
            .command(redis::cmd("HDEL").arg(registry).arg(&self.id))
            .await;
    }
}

/// A key of layout 0's `limits` hashes under `prefix`, if one is left (see the module
/// documentation), found with SCAN.
///
/// Fails when Redis cannot be reached.
pub(super) async fn layout_0_limits(
    conns: &Connections,
    prefix: &str,
) -> Result<Option<String>, StoreError> {
    let pattern = format!("{}sched:*:limits", glob_escape(prefix));
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = conns
            .command(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000),
            )
            .await?;
        if let Some(k) = keys.into_iter().next() {
            return Ok(Some(k));
        }
        if next == 0 {
            return Ok(None);
        }
        cursor = next;
    }
}

/// `s` with the glob characters of SCAN's MATCH escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
