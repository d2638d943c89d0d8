//! The invariant audit: every count the host keeps recomputed from its tickets and compared
//! (the property and differential tests call it after every operation). Reads; changes nothing.

use super::*;

impl HostState {
    /// Recompute every derived count from the tickets and compare, and check that no cap is
    /// exceeded and no waiter that fits is left queued; `Err` names the first violation. For
    /// tests and debugging; O(n).
    pub fn audit(&self, limits: &Limits, now: Millis) -> Result<(), String> {
        let mut in_flight = 0u32;
        let mut queued = 0u32;
        let mut parked = 0u32;
        let mut subj: HashMap<&str, (u32, u32)> = HashMap::new();
        let mut acct: HashMap<&str, (u32, u32)> = HashMap::new();
        // Reclaimed tickets count against the caps but may exceed them: the caps bind the rest.
        let mut reclaimed = 0u32;
        let mut reclaimed_of: HashMap<&str, u32> = HashMap::new();
        let mut reclaimed_acct: HashMap<&str, u32> = HashMap::new();
        for (key, t) in &self.tickets {
            let s = subj.entry(&t.subject).or_default();
            let a = t.account.as_deref().map(|a| acct.entry(a).or_default());
            match t.state {
                TicketState::Admitted => {
                    if t.reclaimed {
                        reclaimed += 1;
                        *reclaimed_of.entry(&t.subject).or_default() += 1;
                        if let Some(a) = t.account.as_deref() {
                            *reclaimed_acct.entry(a).or_default() += 1;
                        }
                    }
                    in_flight += 1;
                    s.0 += 1;
                    if let Some(a) = a {
                        a.0 += 1;
                    }
                }
                TicketState::Queued => {
                    queued += 1;
                    s.1 += 1;
                    if let Some(a) = a {
                        a.1 += 1;
                    }
                    let in_queue = self
                        .subjects
                        .get(&*t.subject)
                        .and_then(|s| s.lanes[t.level as usize].queue.get(&t.order));
                    if in_queue != Some(key) {
                        return Err(format!(
                            "queued ticket {key:x} missing from its subject queue"
                        ));
                    }
                }
                TicketState::Parked => parked += 1,
                _ => {}
            }
            if !t.state.is_live() || !self.leases.contains(&(t.deadline, *key)) {
                return Err(format!("lease index out of step for {key:x}"));
            }
        }
        if self.leases.len() != self.tickets.len() {
            return Err("a lease of no live ticket".into());
        }
        if self.retained.len() != self.ended.len() || self.runs.len() < self.tickets.len() {
            return Err("ended tickets and their index out of step".into());
        }
        if (in_flight, queued, parked) != (self.in_flight, self.queued, self.parked) {
            return Err(format!(
                "gauges ({}, {}, {}) != recomputed ({in_flight}, {queued}, {parked})",
                self.in_flight, self.queued, self.parked
            ));
        }
        // Shadow mode admits over the caps.
        let enforce = !limits.shadow();
        let over = |name: &str| reclaimed_of.get(name).copied().unwrap_or(0);
        if enforce && in_flight - reclaimed > limits.total {
            return Err(format!("in_flight {in_flight} over total {}", limits.total));
        }
        for (name, s) in &self.subjects {
            let (f, q) = subj.get(&**name).copied().unwrap_or_default();
            if (s.in_flight, s.queued()) != (f, q) {
                return Err(format!("subject {name}: counts out of step"));
            }
            if enforce && f - over(name) > limits.subject_cap(name) {
                return Err(format!("subject {name}: in_flight {f} over its cap"));
            }
            for (l, lane) in s.lanes.iter().enumerate() {
                let q = lane.queue.len() as u32;
                if q > 0 && lane.entry == 0 {
                    return Err(format!("subject {name}: queued but not in the rotation"));
                }
                let head = lane.queue.first_key_value().map_or(0, |(o, _)| *o);
                let indexed = self.levels[l]
                    .by_depth
                    .contains(&(q, Reverse(head), name.clone()));
                if (q > 0) != indexed {
                    return Err(format!("subject {name}: depth index out of step"));
                }
            }
        }
        for (name, a) in &self.accounts {
            let (f, q) = acct.get(&**name).copied().unwrap_or_default();
            if (a.in_flight, a.queued) != (f, q) {
                return Err(format!("account {name}: counts out of step"));
            }
            if let Some(cap) = self.account_cap(limits, name)
                && enforce
                && f - reclaimed_acct.get(&**name).copied().unwrap_or(0) > cap
            {
                return Err(format!("account {name}: in_flight {f} over its cap"));
            }
        }
        for (l, level) in self.levels.iter().enumerate() {
            let mut depth_counts: Vec<u32> = Vec::new();
            let mut queued = 0;
            for s in self.subjects.values() {
                let len = s.lanes[l].queue.len();
                queued += len as u32;
                for d in 0..len {
                    if depth_counts.len() <= d {
                        depth_counts.push(0);
                    }
                    depth_counts[d] += 1;
                }
            }
            if depth_counts != level.depth_counts || queued != level.queued {
                return Err(format!(
                    "level {l}: depth_counts {:?} != {depth_counts:?} or queued out of step",
                    level.depth_counts
                ));
            }
            let live = level
                .rotation
                .iter()
                .filter(|(name, generation)| {
                    self.subjects.get(&**name).is_some_and(|s| {
                        s.lanes[l].entry == *generation && !s.lanes[l].queue.is_empty()
                    })
                })
                .count();
            if live != level.rotation_live {
                return Err(format!(
                    "level {l}: rotation_live {} != {live}",
                    level.rotation_live
                ));
            }
        }
        for (key, t) in &self.tickets {
            let aging = self.aging.get(&(t.since, t.order)) == Some(key);
            if aging != (t.state == TicketState::Queued && t.level > 0) {
                return Err(format!("aging index out of step for {key:x}"));
            }
        }
        let c = self.counters;
        let ended = c.released + c.cancelled + c.shed + c.expired + c.superseded;
        if c.submitted + c.reclaimed != ended + u64::from(in_flight + queued + parked) {
            return Err(format!(
                "submitted {} + reclaimed {} != ended {ended} + live {}",
                c.submitted,
                c.reclaimed,
                in_flight + queued + parked
            ));
        }
        if c.admitted + c.reclaimed < u64::from(in_flight) + c.released {
            return Err("fewer admissions than admitted and released tickets".into());
        }
        self.audit_keys()?;
        for name in self.subjects.keys() {
            if let Some(key) = self.first_fitting(limits, name, now) {
                return Err(format!("waiter {key:x} of {name} fits but is still queued"));
            }
        }
        Ok(())
    }
}

impl HostState {
    /// The key index recomputed from the tickets: every keyed live ticket indexed under its
    /// key once, the key's holders counted, a serial key held at most once, no key without
    /// tickets, and the debounce index holding only queued tickets.
    fn audit_keys(&self) -> Result<(), String> {
        let mut seen: HashMap<&str, (usize, u32)> = HashMap::new();
        for (key, t) in &self.tickets {
            let Some(name) = &t.keyed else { continue };
            let ks = self
                .keys
                .get(name)
                .ok_or_else(|| format!("ticket {key:x}: key {name:?} not indexed"))?;
            if ks.tickets.get(&t.key_seq) != Some(key) {
                return Err(format!("ticket {key:x}: out of place in key {name:?}"));
            }
            let e = seen.entry(name).or_default();
            e.0 += 1;
            if matches!(t.state, TicketState::Admitted | TicketState::Parked) {
                e.1 += 1;
            }
        }
        for (name, ks) in &self.keys {
            let (n, held) = seen.get(&**name).copied().unwrap_or_default();
            if (n, held) != (ks.tickets.len(), ks.held) {
                return Err(format!(
                    "key {name:?}: ({n}, {held}) live and held, index says ({}, {})",
                    ks.tickets.len(),
                    ks.held
                ));
            }
            let reclaimed = ks.tickets.values().any(|k| self.tickets[k].reclaimed);
            if ks.policy.is_serial() && ks.held > 1 && !reclaimed {
                return Err(format!("serial key {name:?} held {} times", ks.held));
            }
        }
        for (_, key) in &self.debouncing {
            if self.tickets.get(key).map(|t| t.state) != Some(TicketState::Queued) {
                return Err(format!("debounced {key:x} is not queued"));
            }
        }
        Ok(())
    }
}
