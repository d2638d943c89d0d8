//! The state epoch: how a running replica notices that the shared store lost its state under
//! it (a Redis emptied by mistake, restarted empty, or failed over to a replica that had not
//! seen the last writes), so that the runs still holding slots are not forgotten.
//!
//! The store keeps one epoch, `{prefix}epoch` = `<id>|<lost>`: a random id drawn by the first
//! replica that found none, and, when a running replica drew it because the one it knew had
//! vanished, when that loss was detected (the scripts' ms; 0 otherwise). Each host's counters
//! carry the id they began under (`ep`). A Submit passes the id its replica knows; a host of
//! another epoch, or of none, answers `epoch` and changes nothing, and the replica reads the
//! store's epoch ([`Epoch::learn`]):
//!
//! - another id than the one it knew, or none at all (it then draws one, lost now): the state
//!   was lost. Logged once, counted (`admission_state_loss_total`, `Stats.state_losses`),
//!   noted in `/readyz`; the replica knows the new epoch from then on;
//! - the same id, for a host this replica has served under it: that host's keys alone were
//!   lost (a Redis Cluster shard failed over, keys deleted by hand): the same, for that host;
//! - the same id for a host it never served: a new host.
//!
//! The host then begins under the store's epoch; when that epoch began with a loss, so does the
//! host's learning window (`lu`, see `lua/submit_body.lua`): until one lease plus the clients'
//! renew interval after the loss, no Submit is admitted, so that holders (whose Renew now
//! answers EXPIRED) re-register with Reclaim before newcomers take their slots. The sweep also
//! reads the store's epoch, so a loss is noticed on a replica that takes no Submits.
//! A replica that starts after the loss cannot tell it from a first start: like the embedded
//! store without a data dir, it opens no window.
//!
//! **The count of losses survives them.** Each replica counts what it detects, but a count
//! kept only in the replica dies with it, and one kept only in the store dies with the store's
//! state. So the installation's count lives in `{prefix}losses` = `<count>|<when the last was,
//! ms>`, and every replica carries it across a loss: the one that draws the new epoch writes
//! the count it knew plus one (a count the store lost comes back from the replicas that knew
//! it), the others learn it at their next look (every sweep). A host whose keys vanished
//! alone is counted once however many replicas notice it (`{prefix}lost:<host>`, set if
//! absent for a while).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::StoreError;
use super::connection::Connections;
use super::keys::Keys;
use crate::clock::Clock;
use crate::scheduler::Millis;

/// The store's epoch as a replica knows it.
#[derive(Clone, Debug, Default)]
struct Known {
    /// Empty until first read.
    id: String,
    /// When the loss that began it was detected (scripts' ms); 0 = none.
    lost: u64,
}

/// Read the store's epoch, drawing it when there is none. KEYS[1] the epoch key, ARGV[1] an id
/// to draw, ARGV[2] '1' when drawing it means a loss (the caller knew another), ARGV[3] now
/// (0 = Redis TIME). Returns `<id>|<lost ms>`, and `|drawn` after it when this call drew it.
const READ: &str = r"
local v = redis.call('GET', KEYS[1])
if v then return v end
local now = tonumber(ARGV[3])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
v = ARGV[1] .. '|' .. (ARGV[2] == '1' and string.format('%d', now) or '0')
redis.call('SET', KEYS[1], v)
return v .. '|drawn'
";

/// The installation's count of losses, carried across them. KEYS[1] `{prefix}losses`, ARGV[1]
/// the count the caller knows and ARGV[2] when its last was (ms), ARGV[3] '1' to count one
/// more now, ARGV[4] now (0 = Redis TIME). The record becomes the larger of the two counts
/// (plus the new one); returns it, `<count>|<last ms>`.
const LOSSES: &str = r"
local v = redis.call('GET', KEYS[1])
local count, at = 0, 0
if v then
  local c, a = string.match(v, '^(%d+)|(%d+)$')
  count, at = tonumber(c) or 0, tonumber(a) or 0
end
if tonumber(ARGV[1]) > count then count, at = tonumber(ARGV[1]), tonumber(ARGV[2]) end
if ARGV[3] == '1' then
  local now = tonumber(ARGV[4])
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  count, at = count + 1, now
end
local out = string.format('%d|%d', count, at)
if out ~= v then redis.call('SET', KEYS[1], out) end
return out
";

/// How long a host whose keys vanished is remembered as counted (`{prefix}lost:<host>`).
const VANISHED_COUNTED_MS: u64 = 60_000;

/// How long the Submits that raced the one that found a host's keys gone still begin it with a
/// window of their own (a script that finds the host begun already ignores it).
const VANISHED_FOR_MS: Millis = 10_000;

/// One replica's view of the store's epoch, and the losses it detected.
pub(super) struct Epoch {
    known: Mutex<Known>,
    /// Hosts this replica served under the epoch it knows, and since when (a [`Self::tick`]).
    served: Mutex<HashMap<String, u64>>,
    /// The order of Submits and services here: "served before this Submit began" is a
    /// comparison of ticks, exact whatever the clock's resolution (or a test's frozen clock).
    ticks: AtomicU64,
    /// Hosts whose keys vanished alone, and when that was noticed: the concurrent Submits that
    /// found it too begin the host with the same window, and the loss is counted once.
    vanished: Mutex<HashMap<String, Millis>>,
    losses: AtomicU64,
    /// When the last loss was detected here, for `/readyz`.
    last_loss: Mutex<Option<Millis>>,
    /// The installation's count of losses and when the last was (the scripts' ms), as last
    /// read from or written to `{prefix}losses`.
    installation: Mutex<(u64, u64)>,
    read: redis::Script,
    count: redis::Script,
    /// The replica's clock (the store's): every "when" above is read from it.
    clock: Arc<dyn Clock>,
}

impl Epoch {
    pub(super) fn new(clock: Arc<dyn Clock>) -> Self {
        Epoch {
            clock,
            known: Mutex::default(),
            served: Mutex::default(),
            ticks: AtomicU64::new(1),
            vanished: Mutex::default(),
            losses: AtomicU64::new(0),
            last_loss: Mutex::new(None),
            installation: Mutex::new((0, 0)),
            read: redis::Script::new(READ),
            count: redis::Script::new(LOSSES),
        }
    }

    /// The epoch id a Submit passes.
    pub(super) fn id(&self) -> String {
        self.known.lock().expect("epoch lock").id.clone()
    }

    /// Losses this replica detected since the process started.
    pub(super) fn detected(&self) -> u64 {
        self.losses.load(Ordering::Relaxed)
    }

    /// The installation's losses, as this replica knows them (`{prefix}losses`, never fewer
    /// than it detected itself), and when the last was (the scripts' ms; 0 = none).
    pub(super) fn installation(&self) -> (u64, u64) {
        let (count, at) = *self.installation.lock().expect("epoch lock");
        (count.max(self.detected()), at)
    }

    /// Read `{prefix}losses`, counting one more loss first when `more`; what it holds is the
    /// installation's count from then on. A count this replica knew and the store lost is
    /// written back.
    async fn carry(
        &self,
        conns: &Connections,
        keys: &Keys,
        now_arg: u64,
        more: bool,
    ) -> Result<(), StoreError> {
        let (count, at) = *self.installation.lock().expect("epoch lock");
        let mut inv = self.count.prepare_invoke();
        inv.key(keys.losses())
            .arg(count)
            .arg(at)
            .arg(if more { "1" } else { "0" })
            .arg(now_arg);
        let record: String = conns.run(inv).await?;
        let parsed = record
            .split_once('|')
            .and_then(|(c, a)| Some((c.parse::<u64>().ok()?, a.parse::<u64>().ok()?)))
            .ok_or_else(|| StoreError::protocol(format!("redis: losses are {record:?}")))?;
        let mut known = self.installation.lock().expect("epoch lock");
        if parsed.0 >= known.0 {
            *known = parsed;
        }
        Ok(())
    }

    /// The next tick: a Submit takes one when it begins, a host when it is first served.
    pub(super) fn tick(&self) -> u64 {
        self.ticks.fetch_add(1, Ordering::Relaxed)
    }

    /// A successful Submit for `host` under the epoch this replica knows.
    pub(super) fn served(&self, host: &str) {
        let mut served = self.served.lock().expect("epoch lock");
        if !served.contains_key(host) {
            served.insert(host.to_string(), self.tick());
        }
    }

    /// While a loss detected here is less than `window` old: how long ago it was.
    pub(super) fn recent_loss(&self, window: Duration) -> Option<Duration> {
        let at = (*self.last_loss.lock().expect("epoch lock"))?;
        let ago = Duration::from_millis(self.clock.now_ms().saturating_sub(at));
        (ago < window).then_some(ago)
    }

    /// Read the store's epoch (drawing one if there is none). True when it is another than the
    /// one this replica knew: a loss, counted and logged, and the new one known from then on.
    pub(super) async fn check(
        &self,
        conns: &Connections,
        keys: &Keys,
        now_arg: u64,
    ) -> Result<bool, StoreError> {
        let before = self.known.lock().expect("epoch lock").clone();
        let mut inv = self.read.prepare_invoke();
        inv.key(keys.epoch())
            .arg(format!("{:032x}", super::super::TicketId::random_key()))
            .arg(if before.id.is_empty() { "0" } else { "1" })
            .arg(now_arg);
        let record: String = conns.run(inv).await?;
        let (record, drawn) = match record.strip_suffix("|drawn") {
            Some(r) => (r.to_string(), true),
            None => (record, false),
        };
        let (id, lost) = record
            .split_once('|')
            .and_then(|(id, lost)| Some((id.to_string(), lost.parse().ok()?)))
            .ok_or_else(|| StoreError::protocol(format!("redis: epoch is {record:?}")))?;
        let changed = {
            // A concurrent call may have learnt it first: the loss is counted once.
            let mut known = self.known.lock().expect("epoch lock");
            let changed = id != known.id;
            if changed {
                *known = Known { id, lost };
            }
            changed
        };
        // The replica that drew the epoch after a loss counts it for the installation; every
        // look (each sweep's) learns the count, and writes back one the store lost.
        let loss = changed && !before.id.is_empty();
        self.carry(conns, keys, now_arg, loss && drawn).await?;
        if !changed {
            return Ok(false);
        }
        self.served.lock().expect("epoch lock").clear();
        if !loss {
            return Ok(false);
        }
        self.count_loss(
            "the store's state epoch changed: Redis was emptied, restarted empty or failed over",
        );
        Ok(true)
    }

    /// A Submit that began at tick `started` found `host` of another epoch than this replica's, or
    /// of none (`seen` empty): learn the store's epoch and say how the host begins under it
    /// (the script's ARGV[14]). A host without an epoch that this replica had served under it
    /// before the Submit began lost its keys alone (a Submit that raced the host's first one
    /// finds none too, but began before the host was served).
    pub(super) async fn learn(
        &self,
        conns: &Connections,
        keys: &Keys,
        now_arg: u64,
        host: &str,
        seen: &str,
        started: u64,
    ) -> Result<String, StoreError> {
        let changed = self.check(conns, keys, now_arg).await?;
        let known = self.known.lock().expect("epoch lock").clone();
        if changed || !seen.is_empty() {
            return Ok(known.lost.to_string());
        }
        let first = {
            let mut served = self.served.lock().expect("epoch lock");
            let lost = served.get(host).is_some_and(|at| *at < started);
            if lost {
                served.remove(host);
            }
            lost
        };
        let now = self.clock.now_ms();
        let seen_vanished = {
            let mut vanished = self.vanished.lock().expect("epoch lock");
            vanished.retain(|_, at| now.saturating_sub(*at) < VANISHED_FOR_MS);
            if first {
                vanished.insert(host.to_string(), now);
            }
            vanished.contains_key(host)
        };
        if first {
            self.count_loss(&format!(
                "host {host:?} lost its scheduling state in the store (its keys vanished)"
            ));
            // Counted for the installation once, whichever replicas notice it.
            let first_here: Option<String> = conns
                .command(
                    redis::cmd("SET")
                        .arg(keys.lost_host(host))
                        .arg("1")
                        .arg("NX")
                        .arg("PX")
                        .arg(VANISHED_COUNTED_MS),
                )
                .await?;
            self.carry(conns, keys, now_arg, first_here.is_some())
                .await?;
            return Ok("now".into());
        }
        if seen_vanished {
            return Ok("now".into());
        }
        Ok(known.lost.to_string())
    }

    /// A Reclaim on `host` showed that the host's state went back (a rollback: see
    /// `lua/reclaim_body.lua`), and the script opened its learning window: count the loss
    /// here and for the installation, and say so.
    pub(super) async fn rolled_back(
        &self,
        conns: &Connections,
        keys: &Keys,
        now_arg: u64,
        host: &str,
    ) -> Result<(), StoreError> {
        self.count_loss(&format!(
            "host {host:?} went back in the store: a holder re-registered a ticket issued \
             here that the store no longer has (a failover to a replica that missed the last \
             writes, or a restore of an older copy)"
        ));
        self.carry(conns, keys, now_arg, true).await
    }

    fn count_loss(&self, what: &str) {
        self.losses.fetch_add(1, Ordering::Relaxed);
        *self.last_loss.lock().expect("epoch lock") = Some(self.clock.now_ms());
        tracing::warn!(
            "state loss detected: {what}; for one lease plus a renew interval no new run is \
             admitted while the runs still holding slots re-register (Reclaim)"
        );
    }
}
