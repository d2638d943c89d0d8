//! A host's state as plain data ([`HostImage`]): what a store writes down to bring the host
//! back (the embedded store's data dir), holding only what cannot be recomputed. The derived
//! indexes (leases, aging, lanes, depth counts, counts per subject and account) are rebuilt
//! from the tickets by [`HostState::from_image`], which gives a host that decides exactly as
//! the one imaged: the rotation keeps its live entries in order with their credit (stale
//! entries are skipped wherever they are met, so dropping them changes nothing).
//!
//! The image is the core's; the bytes on disk are the store's own format, converted to and
//! from it (`store::memory::format`).

use super::*;

/// One host's state, as [`HostState::image`] gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostImage {
    /// Live tickets (queued, admitted, parked), in no particular order.
    pub tickets: Vec<TicketImage>,
    /// Ended tickets still remembered, oldest first (the order they are forgotten in).
    pub ended: Vec<EndedImage>,
    /// Per priority level (index 0 = priority 1), the subjects with waiters in round-robin
    /// order, head first, each with its credit (admissions in a row in its current turn).
    pub rotation: [Vec<(String, u32)>; LEVELS],
    pub next_order: i64,
    pub next_front: i64,
    /// The last grant handed out.
    pub grant: u64,
    pub grant_floor: u64,
    pub counters: Counters,
    /// Adaptive caps away from their start, by account.
    pub adaptive: Vec<(String, AdaptiveState)>,
    /// The latest memory report of each replica: (instance, rss_mb, when).
    pub instances: Vec<(String, u32, Millis)>,
    /// The last `key_seq` handed out.
    pub next_key_seq: u64,
}

/// A live ticket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TicketImage {
    pub key: TicketKey,
    pub subject: String,
    pub account: Option<String>,
    pub instance: String,
    pub run_id: String,
    /// Queued, Admitted or Parked.
    pub state: TicketState,
    pub grant: u64,
    /// Lease deadline.
    pub deadline: Millis,
    /// Place in its subject's lane while queued (smaller = earlier).
    pub order: i64,
    /// When it entered its state.
    pub since: Millis,
    /// Priority level index (0 = priority 1).
    pub level: u8,
    /// Re-registered by its holder (counted apart by the audit).
    pub reclaimed: bool,
    /// Its key and the key's policy (the key's tickets all carry the same).
    pub keyed: Option<(String, KeyPolicy)>,
    /// Its place among its key's tickets (the order of their Submits).
    pub key_seq: u64,
    /// Debounced: not dispatched before this (0 otherwise).
    pub ready_at: Millis,
    /// Debounced: when the first ticket of its burst came.
    pub burst_since: Option<Millis>,
    /// A newer ticket of its key that supersedes it.
    pub superseded_by: Option<TicketKey>,
}

/// An ended ticket still remembered for idempotent retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedImage {
    pub key: TicketKey,
    pub run_id: String,
    pub state: TicketState,
    pub grant: u64,
    /// When it may be forgotten.
    pub forget_at: Millis,
    /// Whether a Submit of `run_id` answers this ticket (false only when the run id came to
    /// name another ticket since).
    pub answers_run: bool,
    /// SUPERSEDED: the ticket that ended it.
    pub superseded_by: Option<TicketKey>,
    /// A keyed ticket's place among its key's (0 without a key).
    pub key_seq: u64,
}

impl HostState {
    /// The host as plain data; see the module documentation.
    pub fn image(&self) -> HostImage {
        let mut tickets: Vec<TicketImage> = self
            .tickets
            .iter()
            .map(|(key, t)| TicketImage {
                key: *key,
                subject: t.subject.to_string(),
                account: t.account.as_deref().map(str::to_string),
                instance: t.instance.to_string(),
                run_id: t.run_id.to_string(),
                state: t.state,
                grant: t.grant,
                deadline: t.deadline,
                order: t.order,
                since: t.since,
                level: t.level,
                reclaimed: t.reclaimed,
                keyed: t
                    .keyed
                    .as_ref()
                    .map(|k| (k.to_string(), self.keys[k].policy)),
                key_seq: t.key_seq,
                ready_at: t.ready_at,
                burst_since: t.burst_since,
                superseded_by: t.superseded_by,
            })
            .collect();
        // A stable order, so that one state always makes the same image.
        tickets.sort_by_key(|t| t.key);
        let ended = self
            .retained
            .iter()
            .filter_map(|(forget_at, key, run_id)| {
                let e = self.ended.get(key)?;
                Some(EndedImage {
                    key: *key,
                    run_id: run_id.to_string(),
                    state: e.state,
                    grant: e.grant,
                    forget_at: *forget_at,
                    answers_run: self.runs.get(run_id) == Some(key),
                    superseded_by: e.superseded_by,
                    key_seq: e.key_seq,
                })
            })
            .collect();
        let rotation = std::array::from_fn(|l| {
            self.levels[l]
                .rotation
                .iter()
                .filter_map(|(name, generation)| {
                    let lane = &self.subjects.get(name)?.lanes[l];
                    (lane.entry == *generation && !lane.queue.is_empty())
                        .then(|| (name.to_string(), lane.credit))
                })
                .collect()
        });
        let mut adaptive: Vec<_> = self
            .adaptive
            .iter()
            .map(|(a, s)| (a.to_string(), *s))
            .collect();
        adaptive.sort_by(|a, b| a.0.cmp(&b.0));
        let mut instances: Vec<_> = self
            .instances
            .iter()
            .map(|(i, r)| (i.to_string(), r.rss_mb, r.at))
            .collect();
        instances.sort();
        HostImage {
            tickets,
            ended,
            rotation,
            next_order: self.next_order,
            next_front: self.next_front,
            grant: self.grant,
            grant_floor: self.grant_floor,
            counters: self.counters,
            adaptive,
            instances,
            next_key_seq: self.next_key_seq,
        }
    }

    /// The host an image describes, every index rebuilt.
    ///
    /// Fails when the image contradicts itself (a ticket in a state a live ticket cannot have,
    /// a level out of range, a key used twice, a waiter missing from its level's rotation).
    pub fn from_image(image: HostImage) -> Result<HostState, String> {
        let mut h = HostState {
            next_order: image.next_order,
            next_front: image.next_front,
            grant: image.grant,
            grant_floor: image.grant_floor,
            counters: image.counters,
            next_key_seq: image.next_key_seq,
            ..HostState::default()
        };
        let mut names: HashMap<Arc<str>, ()> = HashMap::new();
        let mut name = |s: String| -> Arc<str> {
            match names.get_key_value(s.as_str()) {
                Some((k, _)) => k.clone(),
                None => {
                    let k: Arc<str> = Arc::from(s);
                    names.insert(k.clone(), ());
                    k
                }
            }
        };
        // Queued tickets join their lanes in their order, so each lane is rebuilt as it was;
        // the rotation's order is set afterwards from the image.
        let mut tickets = image.tickets;
        tickets.sort_by_key(|t| (t.state != TicketState::Queued, t.order));
        for t in tickets {
            if usize::from(t.level) >= LEVELS {
                return Err(format!(
                    "ticket {:x}: level {} out of range",
                    t.key, t.level
                ));
            }
            if !t.state.is_live() {
                return Err(format!("ticket {:x}: live in state {:?}", t.key, t.state));
            }
            let subject = name(t.subject);
            let account = t.account.map(&mut name);
            let run_id = name(t.run_id);
            if h.runs.insert(run_id.clone(), t.key).is_some() {
                return Err(format!("run id {run_id:?} names two live tickets"));
            }
            let keyed = match t.keyed {
                Some((k, policy)) => {
                    let k = name(k);
                    let ks = h.keys.entry(k.clone()).or_insert_with(|| keys::KeyState {
                        policy,
                        tickets: BTreeMap::new(),
                        held: 0,
                    });
                    if ks.policy != policy || ks.tickets.insert(t.key_seq, t.key).is_some() {
                        return Err(format!("ticket {:x}: out of place in key {k:?}", t.key));
                    }
                    if matches!(t.state, TicketState::Admitted | TicketState::Parked) {
                        ks.held += 1;
                    }
                    if t.state == TicketState::Queued && t.burst_since.is_some() {
                        h.debouncing.insert((t.ready_at, t.key));
                    }
                    Some(k)
                }
                None => None,
            };
            let ticket = Ticket {
                subject: subject.clone(),
                account: account.clone(),
                instance: name(t.instance),
                run_id,
                state: t.state,
                grant: t.grant,
                deadline: t.deadline,
                order: t.order,
                since: t.since,
                level: t.level,
                reclaimed: t.reclaimed,
                keyed,
                key_seq: t.key_seq,
                ready_at: t.ready_at,
                burst_since: t.burst_since,
                superseded_by: t.superseded_by,
            };
            if h.tickets.insert(t.key, ticket).is_some() {
                return Err(format!("ticket {:x} appears twice", t.key));
            }
            h.leases.insert((t.deadline, t.key));
            match t.state {
                TicketState::Admitted => {
                    h.in_flight += 1;
                    h.subjects.entry(subject).or_default().in_flight += 1;
                    if let Some(a) = account {
                        h.accounts.entry(a).or_default().in_flight += 1;
                    }
                }
                TicketState::Queued => {
                    h.queued += 1;
                    h.subjects.entry(subject.clone()).or_default();
                    if let Some(a) = account {
                        h.accounts.entry(a).or_default().queued += 1;
                    }
                    if t.level > 0 {
                        h.aging.insert((t.since, t.order), t.key);
                    }
                    h.enter_lane(subject, usize::from(t.level), t.order, t.key);
                }
                _ => h.parked += 1,
            }
        }
        // The rotation as imaged: every lane with waiters in it once, in order, with its credit.
        for (l, order) in image.rotation.into_iter().enumerate() {
            let mut rotation = VecDeque::with_capacity(order.len());
            for (subject, credit) in order {
                let Some(key) = h
                    .subjects
                    .get_key_value(subject.as_str())
                    .map(|(k, _)| k.clone())
                else {
                    return Err(format!("rotation of level {l}: {subject:?} has no waiters"));
                };
                let lane = &mut h.subjects.get_mut(&key).expect("just found").lanes[l];
                if lane.queue.is_empty() || rotation.iter().any(|(n, _)| *n == key) {
                    return Err(format!("rotation of level {l}: {subject:?} out of place"));
                }
                lane.credit = credit;
                rotation.push_back((key, lane.entry));
            }
            if rotation.len() != h.levels[l].rotation_live {
                return Err(format!(
                    "rotation of level {l}: a subject with waiters is missing"
                ));
            }
            h.levels[l].rotation = rotation;
        }
        for e in image.ended {
            let run_id = name(e.run_id);
            if e.state.is_live() {
                return Err(format!("ended ticket {:x} in state {:?}", e.key, e.state));
            }
            if h.tickets.contains_key(&e.key)
                || h.ended
                    .insert(
                        e.key,
                        Ended {
                            state: e.state,
                            grant: e.grant,
                            superseded_by: e.superseded_by,
                            key_seq: e.key_seq,
                        },
                    )
                    .is_some()
            {
                return Err(format!("ticket {:x} appears twice", e.key));
            }
            if e.answers_run {
                h.runs.insert(run_id.clone(), e.key);
            }
            h.retained.push_back((e.forget_at, e.key, run_id));
        }
        h.adaptive = image
            .adaptive
            .into_iter()
            .map(|(a, s)| (name(a), s))
            .collect();
        h.instances = image
            .instances
            .into_iter()
            .map(|(i, rss_mb, at)| (name(i), RssReport { rss_mb, at }))
            .collect();
        Ok(h)
    }
}
