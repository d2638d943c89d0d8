//! Holders re-register (Reclaim): a ticket whose run still runs but that this host no longer
//! knows comes back admitted under its own grant. Owns the Reclaim types and
//! [`HostState::reclaim`]; touches the ticket table, the counts and the grant counter the way
//! an admission does.

use std::sync::Arc;

use super::{
    HostState, KeyArgs, KeyPolicy, Limits, Millis, SubmitArgs, SubmitMode, TicketKey, TicketState,
    TicketView,
};

/// A ticket its holder re-registers (Reclaim), already validated at the edge: what its
/// Submit said, and the grant of its admission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldArgs {
    pub instance_id: String,
    pub subject: String,
    /// `None` = unbound.
    pub account_id: Option<String>,
    pub run_id: String,
    /// The grant of its admission (> 0).
    pub grant: u64,
    /// 1 (highest) ..= 5.
    pub priority: u8,
    /// Its Submit's key and the key's policy: it comes back holding its key.
    pub key: Option<(String, KeyPolicy)>,
}

/// Why a Reclaim was refused. Nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReclaimRefusal {
    /// The ticket ended for good (released, cancelled, shed, or expired while it was queued, or
    /// expired holding another grant): an ended run never comes back.
    Ended(TicketState),
    /// Another ticket holds the run_id.
    RunIdTaken,
    /// The ticket the authority holds under that id was submitted for another run.
    OtherRun,
}

impl ReclaimRefusal {
    /// The ErrorInfo reason callers see, the metric's label and the code the Redis scripts
    /// answer. Part of the public contract.
    pub fn code(self) -> &'static str {
        match self {
            ReclaimRefusal::Ended(_) => "TICKET_ENDED",
            ReclaimRefusal::RunIdTaken => "RUN_ID_TAKEN",
            ReclaimRefusal::OtherRun => "TICKET_MISMATCH",
        }
    }
}

/// A Reclaim's answer: the ticket after the call, and whether it was re-created (false: the
/// authority still held it, and renewed it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reclaimed {
    pub view: TicketView,
    pub reclaimed: bool,
}

impl HostState {
    /// Re-register `key`, which its holder still runs but this host no longer knows (its store
    /// lost it, or its lease ran out while the holder was cut off): it comes back ADMITTED
    /// under `held.grant` with a fresh lease and counts against every cap at once, above them
    /// if need be (its run is running); later grants stay above it. A ticket still live is
    /// renewed and answered as it is. An ended ticket comes back only when it expired holding
    /// that very grant; any other ended ticket, a run_id that names another ticket, or a live
    /// ticket of another run is refused, and nothing changes.
    pub fn reclaim(
        &mut self,
        limits: &Limits,
        held: HeldArgs,
        key: TicketKey,
        now: Millis,
    ) -> Result<Reclaimed, ReclaimRefusal> {
        self.housekeeping(limits, now);
        if let Some(t) = self.tickets.get(&key) {
            if *t.run_id != *held.run_id {
                return Err(ReclaimRefusal::OtherRun);
            }
            let view = self.renew(limits, key, None, now).expect("live");
            return Ok(Reclaimed {
                view,
                reclaimed: false,
            });
        }
        if self
            .runs
            .get(held.run_id.as_str())
            .is_some_and(|k| *k != key)
        {
            return Err(ReclaimRefusal::RunIdTaken);
        }
        if let Some(e) = self.ended.get(&key) {
            if e.state != TicketState::Expired || e.grant == 0 || e.grant != held.grant {
                return Err(ReclaimRefusal::Ended(e.state));
            }
            // Back to life: no longer remembered as ended (its place in `retained` must not
            // forget it later).
            self.ended.remove(&key);
            if let Some(i) = self.retained.iter().position(|(_, k, _)| *k == key) {
                self.retained.remove(i);
            }
        }
        let instance: Arc<str> = Arc::from(held.instance_id.as_str());
        let grant = held.grant;
        let args = SubmitArgs {
            instance_id: held.instance_id,
            subject: held.subject,
            account_id: held.account_id,
            run_id: held.run_id,
            mode: SubmitMode::Queue,
            rss_mb: None,
            priority: held.priority,
            resubmit_expired: false,
            keyed: held.key.map(|(key, policy)| KeyArgs {
                key,
                policy,
                supersede_running: false,
                debounce_ms: 0,
                debounce_max_ms: 0,
            }),
        };
        self.insert_ticket(args, instance, key, 0);
        self.counters.submitted -= 1;
        self.counters.reclaimed += 1;
        let t = self.tickets.get_mut(&key).expect("just inserted");
        t.state = TicketState::Admitted;
        t.reclaimed = true;
        t.grant = grant;
        t.since = now;
        t.deadline = now + limits.lease_ttl_ms;
        self.leases.insert((t.deadline, key));
        self.grant = self.grant.max(grant);
        self.in_flight += 1;
        self.subjects
            .get_mut(&t.subject)
            .expect("interned")
            .in_flight += 1;
        if let Some(a) = &t.account {
            self.accounts.get_mut(a).expect("interned").in_flight += 1;
        }
        // It holds its key again (above a serial key's one holder if need be, as above the caps).
        self.key_hold(key, true);
        self.changes.push(key);
        Ok(Reclaimed {
            view: self.view(limits, key, now).expect("just inserted"),
            reclaimed: true,
        })
    }
}
