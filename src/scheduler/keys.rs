//! Keys: a Submit's `key` (a conversation, a document) and its [`KeyPolicy`]. This room keeps
//! the index of each key's live tickets, answers whether a key lets a ticket in (a new one, or
//! a waiter in dispatch), supersedes a key's queued tickets, tells its holders, and runs the
//! debounce clock. Touches only the key index, the debounce index and the tickets' key fields;
//! ending a superseded ticket goes through `retention` like any other end.
//!
//! The rules, the same on every store:
//! * the policy of a key is that of its first live ticket: a Submit asking another is refused
//!   (`KeyPolicyConflict`), and so is any Submit of a `RejectNew` key with a live ticket
//!   (`KeyBusy`, naming its oldest live ticket);
//! * a keep-newest ticket that is accepted (admitted or queued) ends every queued ticket of its
//!   key SUPERSEDED, naming itself; one that is refused ends nothing;
//! * a serial key's holder is its admitted or parked ticket; a waiter of a serial key is
//!   dispatched only when the key has no holder and it is the key's oldest live ticket;
//! * a debounced ticket is not dispatched before its `ready_at`: `debounce` after its Submit,
//!   but no later than `debounce_max` after the first ticket of its burst (the chain of queued
//!   tickets that superseded each other);
//! * a key's tickets are ordered by when their runs were first sent: a run submitted again
//!   after its queued ticket lapsed (`resubmit_expired`) takes the place its lapsed ticket
//!   had, so under keep-newest it never supersedes a ticket sent after it — it is the one
//!   superseded, at once, by the key's newest live ticket — and a serial key runs it in its
//!   first place.

use super::*;

/// What a new ticket's key asks before it is placed (see [`HostState::key_plan`]).
#[derive(Default)]
pub(super) struct KeyPlan {
    /// Its place among the key's tickets when its run had one (a resubmission), else 0 (the
    /// next).
    pub(super) place: u64,
    /// A live ticket of its key sent after its run first was, the newest (keep-newest): it
    /// supersedes the new ticket at once.
    pub(super) superseded_by: Option<TicketKey>,
    /// The key's queued tickets it supersedes once it is accepted, oldest first.
    pub(super) waiters: Vec<TicketKey>,
    /// Debounced: when its burst began and when it may be dispatched.
    debounce: Option<(Millis, Millis)>,
    /// It waits on its key, whatever the caps: a serial key held, or a debounce not run out.
    pub(super) waits: bool,
}

/// The live tickets of one key of a host.
#[derive(Debug)]
pub(super) struct KeyState {
    pub(super) policy: KeyPolicy,
    /// Live tickets by the order their Submits came in (`Ticket::key_seq`).
    pub(super) tickets: BTreeMap<u64, TicketKey>,
    /// Its admitted and parked tickets.
    pub(super) held: u32,
}

impl HostState {
    /// Whether the key of a Submit lets it in at all: the policy must match the key's live
    /// tickets', and a `RejectNew` key must have none. Counts a busy key's refusal.
    pub(super) fn key_gate(&mut self, keyed: &KeyArgs) -> Result<(), SubmitError> {
        let Some(ks) = self.keys.get(keyed.key.as_str()) else {
            return Ok(());
        };
        if ks.policy != keyed.policy {
            return Err(SubmitError::KeyPolicyConflict {
                live: ks.policy,
                asked: keyed.policy,
            });
        }
        if ks.policy == KeyPolicy::RejectNew
            && let Some(&holder) = ks.tickets.values().next()
        {
            self.counters.rejected += 1;
            self.counters.key_refused += 1;
            return Err(SubmitError::KeyBusy { holder });
        }
        Ok(())
    }

    /// What a new ticket of this key asks before it is placed (at `place`, its run's first,
    /// or 0 for the next): a newer ticket that supersedes it, or the waiters it supersedes, its
    /// debounce, and whether it waits on its key.
    pub(super) fn key_plan(&self, keyed: &KeyArgs, place: u64, now: Millis) -> KeyPlan {
        let ks = self.keys.get(keyed.key.as_str());
        if place > 0 && keyed.policy.keeps_newest() {
            let newer = ks.and_then(|ks| ks.tickets.range(place + 1..).next_back());
            if let Some((_, &newest)) = newer {
                return KeyPlan {
                    place,
                    superseded_by: Some(newest),
                    ..KeyPlan::default()
                };
            }
        }
        let waiters = self.key_waiters(keyed, place);
        let debounce = (keyed.debounce_ms > 0).then(|| {
            let since = self.burst_of(&waiters).unwrap_or(now);
            (since, debounce_ready_at(keyed, since, now))
        });
        let waits = debounce.is_some_and(|(_, ready)| ready > now) || self.key_holds_new(keyed);
        KeyPlan {
            place,
            superseded_by: None,
            waiters,
            debounce,
            waits,
        }
    }

    /// A Submit whose run was sent before a live ticket of its key (`by`, the newest):
    /// its ticket `key` ends SUPERSEDED at once, at the run's first `place`, taking nothing.
    pub(super) fn superseded_at_submit(
        &mut self,
        limits: &Limits,
        args: SubmitArgs,
        key: TicketKey,
        by: TicketKey,
        place: u64,
        now: Millis,
    ) -> TicketView {
        self.counters.submitted += 1;
        self.counters.superseded += 1;
        let run_id: Arc<str> = Arc::from(args.run_id);
        self.runs.insert(run_id.clone(), key);
        let ended = Ended {
            state: TicketState::Superseded,
            grant: 0,
            superseded_by: Some(by),
            key_seq: place,
        };
        self.note_ending(recent::Ending {
            key: Some(key),
            ended_as: recent::EndedAs::Ticket(TicketState::Superseded),
            run_id: run_id.clone(),
            subject: Arc::from(args.subject),
            account: args.account_id.map(Arc::from),
            instance: Arc::from(args.instance_id),
            keyed: args.keyed.map(|k| Arc::from(k.key)),
            superseded_by: Some(by),
            at: now,
        });
        self.remember(limits, key, ended, run_id, now);
        self.view(limits, key, now).expect("just remembered")
    }

    /// A new keyed ticket was inserted under `key`: tell the key's holders (supersede_running)
    /// and start its debounce.
    pub(super) fn key_placed(
        &mut self,
        keyed: &KeyArgs,
        plan: &KeyPlan,
        key: TicketKey,
        now: Millis,
    ) {
        if keyed.supersede_running {
            self.tell_holders(&keyed.key, key);
        }
        if let Some((since, ready)) = plan.debounce {
            let t = self.tickets.get_mut(&key).expect("just inserted");
            t.burst_since = Some(since);
            t.ready_at = ready;
            if ready > now {
                self.debouncing.insert((ready, key));
            }
        }
    }

    /// Whether a new ticket of this key must wait on its key, whatever the caps: a serial key
    /// with a holder (or, without keep-newest, with waiters ahead). (Its debounce is the
    /// caller's.)
    fn key_holds_new(&self, keyed: &KeyArgs) -> bool {
        let Some(ks) = self.keys.get(keyed.key.as_str()) else {
            return false;
        };
        match ks.policy {
            KeyPolicy::Serial => !ks.tickets.is_empty(),
            KeyPolicy::SerialKeepNewest => ks.held > 0,
            _ => false,
        }
    }

    /// The queued tickets a new keep-newest ticket of this key supersedes, oldest first: those
    /// sent before it (before `place` when it has one).
    fn key_waiters(&self, keyed: &KeyArgs, place: u64) -> Vec<TicketKey> {
        if !keyed.policy.keeps_newest() {
            return Vec::new();
        }
        let before = if place > 0 { place } else { u64::MAX };
        self.keys
            .get(keyed.key.as_str())
            .map_or_else(Vec::new, |ks| {
                ks.tickets
                    .range(..before)
                    .map(|(_, k)| k)
                    .filter(|k| self.tickets[*k].state == TicketState::Queued)
                    .copied()
                    .collect()
            })
    }

    /// The earliest burst start among debounced `waiters` (for `debounce_max`), if any.
    fn burst_of(&self, waiters: &[TicketKey]) -> Option<Millis> {
        waiters
            .iter()
            .filter_map(|k| self.tickets[k].burst_since)
            .min()
    }

    /// Whether the queue has room for one more ticket of `subject` once `waiters` (queued
    /// tickets the newcomer supersedes) have left it, with no shedding.
    pub(super) fn room_after(&self, limits: &Limits, subject: &str, waiters: &[TicketKey]) -> bool {
        let of_subject = waiters
            .iter()
            .filter(|k| *self.tickets[*k].subject == *subject)
            .count() as u32;
        let depth = self.subjects.get(subject).map_or(0, SubjectState::queued) - of_subject;
        let subject_full = limits.queue_per_subject > 0 && depth >= limits.queue_per_subject;
        let total_full = self.queued - waiters.len() as u32 >= limits.queue_total;
        !subject_full && !total_full
    }

    /// End each of `waiters` still queued SUPERSEDED by ticket `by`.
    pub(super) fn supersede(
        &mut self,
        limits: &Limits,
        waiters: &[TicketKey],
        by: TicketKey,
        now: Millis,
    ) {
        for &key in waiters {
            let Some(t) = self.tickets.get_mut(&key) else {
                continue;
            };
            if t.state != TicketState::Queued {
                continue;
            }
            t.superseded_by = Some(by);
            self.end(limits, key, TicketState::Superseded, now);
            self.counters.superseded += 1;
        }
    }

    /// Tell the key's admitted and parked tickets that `by` supersedes them (they stop on
    /// their own; their slots stay counted until they release or lapse).
    fn tell_holders(&mut self, key: &str, by: TicketKey) {
        let Some(ks) = self.keys.get(key) else {
            return;
        };
        for k in ks.tickets.values() {
            let t = self.tickets.get_mut(k).expect("indexed tickets are live");
            if matches!(t.state, TicketState::Admitted | TicketState::Parked) {
                t.superseded_by = Some(by);
                self.changes.push(*k);
            }
        }
    }

    /// Index a new ticket under its key at `place` (its run's first; 0: the next), the
    /// ticket inserted, its state still to set.
    pub(super) fn key_join(&mut self, keyed: &KeyArgs, key: TicketKey, place: u64) {
        let seq = if place > 0 {
            place
        } else {
            self.next_key_seq += 1;
            self.next_key_seq
        };
        let name = match self.keys.get_key_value(keyed.key.as_str()) {
            Some((k, _)) => k.clone(),
            None => {
                let k: Arc<str> = Arc::from(keyed.key.as_str());
                self.keys.insert(
                    k.clone(),
                    KeyState {
                        policy: keyed.policy,
                        tickets: BTreeMap::new(),
                        held: 0,
                    },
                );
                k
            }
        };
        self.keys
            .get_mut(&name)
            .expect("just found")
            .tickets
            .insert(seq, key);
        let t = self.tickets.get_mut(&key).expect("inserted");
        t.keyed = Some(name);
        t.key_seq = seq;
    }

    /// A ticket of a key leaves the live ones (it ended): forget the key with its last ticket.
    pub(super) fn key_leave(&mut self, name: &Arc<str>, seq: u64, held: bool) {
        let ks = self
            .keys
            .get_mut(name)
            .expect("a keyed ticket's key is indexed");
        ks.tickets.remove(&seq);
        if held {
            ks.held -= 1;
        }
        if ks.tickets.is_empty() {
            self.keys.remove(name);
        }
    }

    /// A keyed ticket became a holder (admitted from the queue or afresh) or stopped being one
    /// (an unparked ticket that queues again).
    pub(super) fn key_hold(&mut self, key: TicketKey, hold: bool) {
        let Some(name) = self.tickets.get(&key).and_then(|t| t.keyed.clone()) else {
            return;
        };
        let ks = self.keys.get_mut(&name).expect("indexed");
        if hold {
            ks.held += 1;
        } else {
            ks.held -= 1;
        }
    }

    /// Whether queued ticket `t`'s key lets it be dispatched at `now`.
    pub(super) fn key_ready(&self, t: &Ticket, now: Millis) -> bool {
        key_ready(&self.keys, t, now)
    }

    /// A debounced waiter's `ready_at` came: it may be dispatched, and its Wait stream hears
    /// what holds it now. Returns whether any came.
    pub(super) fn debounce_due(&mut self, now: Millis) -> bool {
        let mut any = false;
        while let Some(&(at, key)) = self.debouncing.first() {
            if at > now {
                break;
            }
            self.debouncing.pop_first();
            self.changes.push(key);
            any = true;
        }
        any
    }
}

/// [`HostState::key_ready`] over the key index alone, for dispatch's split borrows.
pub(super) fn key_ready(keys: &HashMap<Arc<str>, KeyState>, t: &Ticket, now: Millis) -> bool {
    let Some(name) = &t.keyed else {
        return true;
    };
    if t.ready_at > now {
        return false;
    }
    let ks = &keys[name];
    !ks.policy.is_serial() || (ks.held == 0 && ks.tickets.keys().next() == Some(&t.key_seq))
}

/// When a new debounced ticket submitted at `now` becomes ready, given the start of its burst.
fn debounce_ready_at(keyed: &KeyArgs, burst_since: Millis, now: Millis) -> Millis {
    let ready = now + keyed.debounce_ms;
    if keyed.debounce_max_ms == 0 {
        ready
    } else {
        ready.min(burst_since + keyed.debounce_max_ms).max(now)
    }
}
