//! Scheduling rules on the pure core, with time moved by hand.

use super::*;

/// One host under test: its state, limits and a hand-driven clock.
struct Host {
    state: HostState,
    limits: Limits,
    now: Millis,
    next_key: TicketKey,
}

fn limits(total: u32, per_subject: u32, queue_total: u32, queue_per_subject: u32) -> Limits {
    Limits {
        total,
        per_subject,
        queue_total,
        queue_per_subject,
        queue_hard_total: queue_total * 4,
        ..Limits::default()
    }
}

impl Host {
    fn new(limits: Limits) -> Self {
        Host {
            state: HostState::new(),
            limits,
            now: 1_000,
            next_key: 1,
        }
    }

    fn submit_with(
        &mut self,
        subject: &str,
        account: Option<&str>,
        run: &str,
        mode: SubmitMode,
        rss_mb: Option<u32>,
    ) -> Result<TicketView, SubmitError> {
        let args = SubmitArgs {
            instance_id: "replica-1".into(),
            subject: subject.into(),
            account_id: account.map(str::to_string),
            run_id: run.into(),
            mode,
            rss_mb,
            priority: DEFAULT_PRIORITY,
            resubmit_expired: false,
            keyed: None,
        };
        self.submit_args(args)
    }

    fn submit_args(&mut self, args: SubmitArgs) -> Result<TicketView, SubmitError> {
        let key = self.next_key;
        self.next_key += 1;
        let out = self.state.submit(&self.limits, args, key, self.now);
        self.audit();
        out
    }

    fn submit(&mut self, subject: &str, run: &str) -> Result<TicketView, SubmitError> {
        self.submit_with(subject, None, run, SubmitMode::Queue, None)
    }

    fn ok(&mut self, subject: &str, run: &str) -> TicketView {
        self.submit(subject, run).expect("submit")
    }

    fn release(&mut self, key: TicketKey) -> Option<TicketState> {
        let out = self.state.release(&self.limits, key, self.now);
        self.audit();
        out
    }

    fn state(&self, key: TicketKey) -> TicketState {
        self.state.state_of(key).expect("known ticket")
    }

    fn advance(&mut self, ms: Millis) {
        self.now += ms;
        self.state.housekeeping(&self.limits, self.now);
        self.audit();
    }

    fn audit(&self) {
        if let Err(e) = self.state.audit(&self.limits, self.now) {
            panic!("audit failed: {e}");
        }
    }

    fn stats(&self) -> HostStats {
        self.state.stats(&self.limits, self.now)
    }

    /// The run_ids admitted by the last operation, in order.
    fn admitted_by(&mut self, runs: &[(TicketKey, &str)]) -> Vec<String> {
        let changed = self.state.take_changes();
        changed
            .iter()
            .filter(|k| self.state.state_of(**k) == Some(TicketState::Admitted))
            .filter_map(|k| {
                runs.iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, r)| r.to_string())
            })
            .collect()
    }
}

#[test]
fn round_robin_admits_subjects_in_turn() {
    // total 1, per_subject 1, queue 12/8: alice holds; a1 a2 a3 (alice) and b1 b2 (bob) queue.
    let mut h = Host::new(limits(1, 1, 12, 8));
    let holder = h.ok("alice", "hold");
    assert_eq!(holder.state, TicketState::Admitted);
    let mut runs = Vec::new();
    for (subject, run) in [
        ("alice", "a1"),
        ("alice", "a2"),
        ("alice", "a3"),
        ("bob", "b1"),
        ("bob", "b2"),
    ] {
        let v = h.ok(subject, run);
        assert_eq!(v.state, TicketState::Queued, "{run}");
        runs.push((v.key, run));
    }
    h.state.take_changes();
    let mut order = Vec::new();
    let mut current = holder.key;
    for _ in 0..5 {
        assert_eq!(h.release(current), Some(TicketState::Admitted));
        let admitted = h.admitted_by(&runs);
        assert_eq!(admitted.len(), 1, "one release admits one waiter");
        order.push(admitted[0].clone());
        current = runs.iter().find(|(_, r)| *r == admitted[0]).unwrap().0;
    }
    assert_eq!(order, ["a1", "b1", "a2", "b2", "a3"]);
}

#[test]
fn positions_follow_the_round_robin_dispatch_order() {
    let mut h = Host::new(limits(1, 1, 12, 8));
    h.ok("alice", "hold");
    let a1 = h.ok("alice", "a1");
    let a2 = h.ok("alice", "a2");
    let b1 = h.ok("bob", "b1");
    let a3 = h.ok("alice", "a3");
    let b2 = h.ok("bob", "b2");
    let pos = |h: &Host, k| h.state.view(&h.limits, k, h.now).unwrap().position;
    // Dispatch order a1, b1, a2, b2, a3.
    assert_eq!(
        [a1.key, b1.key, a2.key, b2.key, a3.key].map(|k| pos(&h, k)),
        [0, 1, 2, 3, 4]
    );
    assert_eq!(b2.position, 3, "Submit answers with the position too");
}

#[test]
fn a_full_account_queues_while_another_account_of_the_subject_runs() {
    // total 3, per_subject 2, per_account 1.
    let mut h = Host::new(Limits {
        per_account: Some(1),
        ..limits(3, 2, 10, 0)
    });
    let first = h
        .submit_with("alice", Some("acct-1"), "r1", SubmitMode::Queue, None)
        .unwrap();
    assert_eq!(first.state, TicketState::Admitted);
    let blocked = h
        .submit_with("alice", Some("acct-1"), "r2", SubmitMode::Queue, None)
        .unwrap();
    assert_eq!(blocked.state, TicketState::Queued, "acct-1 is full");
    let other = h
        .submit_with("alice", Some("acct-2"), "r3", SubmitMode::Queue, None)
        .unwrap();
    assert_eq!(other.state, TicketState::Admitted, "acct-2 has room");
    // The blocked ticket runs once its account frees up, even though it is not at the head
    // of any other order.
    h.release(first.key);
    assert_eq!(h.state(blocked.key), TicketState::Admitted);
}

#[test]
fn dispatch_skips_a_blocked_account_for_another_accounts_work() {
    let mut h = Host::new(Limits {
        per_account: Some(1),
        ..limits(2, 2, 10, 0)
    });
    let hold_a = h
        .submit_with("s0", Some("acct-a"), "h1", SubmitMode::Queue, None)
        .unwrap();
    let hold_b = h
        .submit_with("s0", Some("acct-b"), "h2", SubmitMode::Queue, None)
        .unwrap();
    assert_eq!(
        (hold_a.state, hold_b.state),
        (TicketState::Admitted, TicketState::Admitted)
    );
    // alice's oldest waiter is on acct-a (full), her second on acct-c.
    let on_a = h
        .submit_with("alice", Some("acct-a"), "a1", SubmitMode::Queue, None)
        .unwrap();
    let on_c = h
        .submit_with("alice", Some("acct-c"), "a2", SubmitMode::Queue, None)
        .unwrap();
    assert_eq!(
        (on_a.state, on_c.state),
        (TicketState::Queued, TicketState::Queued)
    );
    h.release(hold_b.key);
    assert_eq!(
        h.state(on_c.key),
        TicketState::Admitted,
        "skips the blocked account"
    );
    assert_eq!(h.state(on_a.key), TicketState::Queued);
}

#[test]
fn total_one_without_a_queue_answers_busy() {
    let mut h = Host::new(limits(1, 1, 0, 0));
    assert_eq!(h.ok("alice", "r1").state, TicketState::Admitted);
    assert_eq!(
        h.submit("bob", "r2"),
        Err(SubmitError::Refused(Refusal::Busy))
    );
    assert_eq!(h.stats().counters.rejected, 1);
    assert_eq!(h.stats().queued, 0);
}

#[test]
fn reject_policy_answers_queue_full_at_the_declared_depth() {
    // Cap 2, queue 1, reject.
    let mut h = Host::new(limits(2, 2, 1, 0));
    let states: Vec<_> = (0..4)
        .map(|i| h.submit("alice", &format!("r{i}")).map(|v| v.state))
        .collect();
    assert_eq!(
        states,
        [
            Ok(TicketState::Admitted),
            Ok(TicketState::Admitted),
            Ok(TicketState::Queued),
            Err(SubmitError::Refused(Refusal::QueueFull)),
        ]
    );
    assert_eq!(h.stats().counters.rejected, 1);
}

#[test]
fn try_mode_never_queues() {
    let mut h = Host::new(limits(1, 1, 10, 0));
    h.ok("alice", "r1");
    assert_eq!(
        h.submit_with("bob", None, "r2", SubmitMode::Try, None),
        Err(SubmitError::Refused(Refusal::Busy))
    );
    assert_eq!(h.stats().queued, 0);
    assert_eq!(
        h.submit_with("carol", None, "r3", SubmitMode::Try, None)
            .map(|v| v.state)
            .unwrap_err(),
        SubmitError::Refused(Refusal::Busy)
    );
}

#[test]
fn shed_oldest_evicts_the_oldest_waiter_and_queues_the_newcomer() {
    let mut h = Host::new(Limits {
        overflow: OverflowPolicy::ShedOldest,
        ..limits(1, 1, 2, 0)
    });
    h.ok("alice", "hold");
    let w1 = h.ok("bob", "w1");
    let w2 = h.ok("bob", "w2");
    let newcomer = h.ok("bob", "w3");
    assert_eq!(newcomer.state, TicketState::Queued);
    assert_eq!(h.state(w1.key), TicketState::Shed, "the oldest waiter goes");
    assert_eq!(h.state(w2.key), TicketState::Queued);
    let s = h.stats();
    assert_eq!((s.counters.shed, s.counters.rejected, s.queued), (1, 0, 2));
}

#[test]
fn shed_oldest_never_evicts_a_quiet_tenant_for_a_flood() {
    let mut h = Host::new(Limits {
        overflow: OverflowPolicy::ShedOldest,
        ..limits(1, 1, 4, 0)
    });
    h.ok("holder", "hold");
    let quiet = h.ok("quiet", "q1"); // oldest waiter of all
    let floods: Vec<_> = (0..3).map(|i| h.ok("flood", &format!("f{i}"))).collect();
    // The queue is full (4). A newcomer from a third subject sheds from the deepest queue.
    let newcomer = h.ok("third", "t1");
    assert_eq!(newcomer.state, TicketState::Queued);
    assert_eq!(
        h.state(quiet.key),
        TicketState::Queued,
        "the quiet tenant keeps its place"
    );
    assert_eq!(h.state(floods[0].key), TicketState::Shed);
    // The flood itself keeps shedding its own oldest waiters, never the quiet one.
    for i in 3..10 {
        h.ok("flood", &format!("f{i}"));
        assert_eq!(h.state(quiet.key), TicketState::Queued);
    }
}

#[test]
fn shed_oldest_with_a_full_subject_queue_sheds_within_that_subject() {
    let mut h = Host::new(Limits {
        overflow: OverflowPolicy::ShedOldest,
        ..limits(1, 1, 10, 2)
    });
    h.ok("holder", "hold");
    let other = h.ok("other", "o1");
    let a1 = h.ok("alice", "a1");
    h.ok("alice", "a2");
    let a3 = h.ok("alice", "a3");
    assert_eq!(a3.state, TicketState::Queued);
    assert_eq!(h.state(a1.key), TicketState::Shed);
    assert_eq!(h.state(other.key), TicketState::Queued);
}

#[test]
fn queue_policy_grows_past_the_declared_depth_up_to_the_hard_bound() {
    let mut h = Host::new(Limits {
        overflow: OverflowPolicy::Queue,
        queue_hard_total: 3,
        ..limits(1, 1, 1, 0)
    });
    h.ok("holder", "hold");
    for i in 0..3 {
        assert_eq!(h.ok("s", &format!("r{i}")).state, TicketState::Queued);
    }
    assert_eq!(
        h.submit("s", "r3"),
        Err(SubmitError::Refused(Refusal::QueueFull))
    );
}

#[test]
fn per_subject_queue_bound_rejects_under_reject() {
    let mut h = Host::new(limits(1, 1, 10, 1));
    h.ok("holder", "hold");
    h.ok("alice", "a1");
    assert_eq!(
        h.submit("alice", "a2"),
        Err(SubmitError::Refused(Refusal::QueueFull))
    );
    assert_eq!(
        h.ok("bob", "b1").state,
        TicketState::Queued,
        "other subjects still queue"
    );
}

#[test]
fn repeated_run_id_returns_the_same_ticket_and_takes_no_second_slot() {
    let mut h = Host::new(limits(2, 2, 0, 0));
    let first = h.ok("alice", "run-1");
    let again = h.ok("alice", "run-1");
    assert_eq!(first.key, again.key);
    assert_eq!(h.stats().in_flight, 1);
    assert_eq!(h.stats().counters.submitted, 1);
    assert_eq!(
        h.submit("bob", "run-1"),
        Err(SubmitError::RunIdConflict { field: "subject" })
    );
    assert_eq!(
        h.submit_with("alice", Some("acct"), "run-1", SubmitMode::Queue, None),
        Err(SubmitError::RunIdConflict {
            field: "account_id"
        })
    );
    // After release the repeat answers with the terminal state, until retention ends.
    h.release(first.key);
    let late = h.ok("alice", "run-1");
    assert_eq!((late.key, late.state), (first.key, TicketState::Released));
    h.advance(h.limits.retention_ms);
    let fresh = h.ok("alice", "run-1");
    assert_ne!(
        fresh.key, first.key,
        "forgotten after retention: a new ticket"
    );
    assert_eq!(fresh.state, TicketState::Admitted);
}

#[test]
fn an_unrenewed_admitted_ticket_expires_and_its_slot_goes_to_the_next_waiter() {
    let mut h = Host::new(Limits {
        lease_ttl_ms: 300,
        ..limits(1, 1, 5, 0)
    });
    let holder = h.ok("alice", "hold");
    let waiter = h.ok("bob", "wait");
    h.advance(200);
    // The waiter keeps itself alive (as an open Wait stream does); the holder does not renew.
    h.state.renew(&h.limits, waiter.key, None, h.now);
    h.advance(100);
    assert_eq!(h.state(holder.key), TicketState::Expired);
    assert_eq!(h.state(waiter.key), TicketState::Admitted);
    let s = h.stats();
    assert_eq!((s.counters.expired, s.in_flight), (1, 1));
}

#[test]
fn renew_keeps_a_ticket_alive_past_its_first_lease() {
    let mut h = Host::new(Limits {
        lease_ttl_ms: 300,
        ..limits(1, 1, 0, 0)
    });
    let t = h.ok("alice", "r1");
    for _ in 0..5 {
        h.advance(250);
        let v = h.state.renew(&h.limits, t.key, None, h.now).unwrap();
        assert_eq!(
            (v.state, v.lease_remaining_ms),
            (TicketState::Admitted, 300)
        );
    }
    h.advance(300);
    assert_eq!(h.state(t.key), TicketState::Expired);
    assert_eq!(
        h.state
            .renew(&h.limits, t.key, None, h.now)
            .map(|v| v.state),
        Some(TicketState::Expired),
        "renewing an ended ticket reports its end and revives nothing"
    );
}

#[test]
fn a_queued_ticket_without_keepalive_expires() {
    let mut h = Host::new(Limits {
        lease_ttl_ms: 300,
        ..limits(1, 1, 5, 0)
    });
    let holder = h.ok("alice", "hold");
    let waiter = h.ok("bob", "wait");
    h.advance(250);
    h.state.renew(&h.limits, holder.key, None, h.now);
    h.advance(50);
    assert_eq!(h.state(waiter.key), TicketState::Expired);
    assert_eq!(h.stats().queued, 0);
}

#[test]
fn release_is_idempotent_and_cancels_queued_tickets() {
    let mut h = Host::new(limits(1, 1, 5, 0));
    let holder = h.ok("alice", "hold");
    let waiter = h.ok("bob", "wait");
    assert_eq!(h.release(waiter.key), Some(TicketState::Queued));
    assert_eq!(h.state(waiter.key), TicketState::Cancelled);
    assert_eq!(
        h.release(waiter.key),
        Some(TicketState::Cancelled),
        "twice is fine"
    );
    assert_eq!(h.release(holder.key), Some(TicketState::Admitted));
    assert_eq!(h.release(holder.key), Some(TicketState::Released));
    assert_eq!(h.release(0xdead), None);
    let s = h.stats();
    assert_eq!(
        (s.counters.cancelled, s.counters.released, s.in_flight),
        (1, 1, 0)
    );
}

#[test]
fn grants_increase_with_every_admission() {
    let mut h = Host::new(limits(1, 1, 5, 0));
    let a = h.ok("alice", "a");
    let b = h.ok("bob", "b");
    assert_eq!(b.grant, 0, "no grant while queued");
    h.release(a.key);
    let b_now = h.state.view(&h.limits, b.key, h.now).unwrap();
    assert!(b_now.grant > a.grant);
    h.release(b.key);
    let c = h.ok("carol", "c");
    assert!(c.grant > b_now.grant);
}

#[test]
fn memory_ladder_refuses_at_max_and_holds_back_at_soft() {
    let mut h = Host::new(Limits {
        memory: MemoryLimits::from_ratio(1000, 0.9),
        ..limits(4, 4, 10, 0)
    });
    assert_eq!(
        h.submit_with("alice", None, "r1", SubmitMode::Queue, Some(1000)),
        Err(SubmitError::Refused(Refusal::MemoryPressure))
    );
    assert_eq!(h.stats().counters.rejected, 1);
    // Soft: the newcomer queues although slots are free.
    let soft = h
        .submit_with("alice", None, "r2", SubmitMode::Queue, Some(950))
        .unwrap();
    assert_eq!(soft.state, TicketState::Queued);
    assert_eq!(h.stats().in_flight, 0);
    assert_eq!(h.stats().reported_rss_mb, 950);
    // TRY cannot queue: BUSY.
    assert_eq!(
        h.submit_with("alice", None, "r3", SubmitMode::Try, Some(950)),
        Err(SubmitError::Refused(Refusal::Busy))
    );
    // A report below soft lets the held-back waiter run.
    let v = h
        .state
        .renew(&h.limits, soft.key, Some(500), h.now)
        .unwrap();
    assert_eq!(v.state, TicketState::Admitted);
    // Unknown rss has no effect.
    let unknown = h
        .submit_with("bob", None, "r4", SubmitMode::Queue, None)
        .unwrap();
    assert_eq!(unknown.state, TicketState::Admitted);
}

#[test]
fn subject_and_account_overrides_replace_the_defaults() {
    let mut h = Host::new(Limits {
        subjects: [("review-worker".to_string(), 1)].into(),
        accounts: [("account-one".to_string(), 1)].into(),
        ..limits(10, 4, 0, 0)
    });
    h.ok("review-worker", "r1");
    assert_eq!(
        h.submit("review-worker", "r2"),
        Err(SubmitError::Refused(Refusal::Busy))
    );
    h.submit_with("alice", Some("account-one"), "r3", SubmitMode::Queue, None)
        .unwrap();
    assert_eq!(
        h.submit_with("bob", Some("account-one"), "r4", SubmitMode::Queue, None),
        Err(SubmitError::Refused(Refusal::Busy))
    );
    assert_eq!(h.ok("alice", "r5").state, TicketState::Admitted);
}

#[test]
fn refused_one_off_subjects_leave_nothing_behind() {
    let mut h = Host::new(limits(1, 1, 0, 0));
    h.ok("holder", "hold");
    for i in 0..100 {
        let _ = h.submit(&format!("s{i}"), &format!("r{i}"));
    }
    assert_eq!(h.state.subjects.len(), 1);
    assert_eq!(h.state.accounts.len(), 0);
}

#[test]
fn rotation_stays_bounded_when_waiters_leave_without_dispatch() {
    let mut h = Host::new(limits(1, 1, 1_000, 0));
    h.ok("holder", "hold");
    for i in 0..500 {
        let v = h.ok(&format!("s{i}"), &format!("r{i}"));
        h.release(v.key);
    }
    assert!(
        h.state.levels[DEFAULT_PRIORITY as usize - 1].rotation.len() <= 16,
        "stale entries are compacted"
    );
}

#[test]
fn positions_beyond_the_exact_limit_are_the_earlier_rounds() {
    let mut h = Host::new(limits(1, 1, 100_000, 0));
    h.ok("holder", "hold");
    let n = EXACT_POSITION_SUBJECTS + 10;
    for i in 0..n {
        h.ok(&format!("s{i}"), &format!("a{i}"));
    }
    // Every subject has one waiter; a second waiter of the first subject comes after all of
    // round 0 (n waiters) and, counted exactly, nothing more.
    let second = h.ok("s0", "b0");
    assert_eq!(second.position, n as u32);
    // A first waiter far down the rotation: exact would be its rotation rank; the bound is 0.
    let late = h.ok("newcomer", "c0");
    assert_eq!(late.position, 0, "a lower bound once the rotation is large");
}

#[test]
fn ended_tickets_are_bounded_per_host_and_forgotten_oldest_first() {
    let mut h = Host::new(Limits {
        max_retained: 10,
        ..limits(4, 4, 0, 0)
    });
    let mut keys = Vec::new();
    for i in 0..1_000 {
        let v = h.ok("alice", &format!("run-{i}"));
        h.release(v.key);
        keys.push(v.key);
        assert!(
            h.state.retained() < 10 + RETAIN_SLACK,
            "at most max_retained + RETAIN_SLACK remembered, got {}",
            h.state.retained()
        );
        h.state.audit(&h.limits, h.now).unwrap();
    }
    // The newest are remembered, the oldest forgotten.
    assert_eq!(
        h.state.view(&h.limits, keys[999], h.now).map(|v| v.state),
        Some(TicketState::Released)
    );
    assert_eq!(h.state.view(&h.limits, keys[0], h.now), None);
    assert_ne!(
        h.ok("alice", "run-0").key,
        keys[0],
        "a forgotten run_id is new"
    );
}

#[test]
fn grants_take_the_floor_and_always_increase() {
    let mut h = Host::new(limits(4, 4, 0, 0));
    let a = h.ok("alice", "r1");
    h.state.set_grant_floor(5_000_000);
    let b = h.ok("alice", "r2");
    let c = h.ok("alice", "r3");
    assert_eq!((b.grant, c.grant), (5_000_000, 5_000_001));
    assert!(a.grant < b.grant);
    // A floor that went back (a clock step) never makes a grant go back.
    h.state.set_grant_floor(10);
    assert_eq!(h.ok("alice", "r4").grant, 5_000_002);
}

impl Host {
    fn prio(&mut self, subject: &str, run: &str, priority: u8) -> TicketView {
        self.submit_args(SubmitArgs {
            instance_id: "replica-1".into(),
            subject: subject.into(),
            account_id: None,
            run_id: run.into(),
            mode: SubmitMode::Queue,
            rss_mb: None,
            priority,
            resubmit_expired: false,
            keyed: None,
        })
        .expect("submit")
    }

    /// Release `current` and return the one ticket that took its slot.
    fn handover(&mut self, current: TicketKey) -> TicketKey {
        self.state.take_changes();
        self.release(current);
        let admitted: Vec<TicketKey> = self
            .state
            .take_changes()
            .into_iter()
            .filter(|k| self.state.state_of(*k) == Some(TicketState::Admitted))
            .collect();
        assert_eq!(admitted.len(), 1, "one release admits one waiter");
        admitted[0]
    }
}

#[test]
fn a_free_slot_goes_to_the_highest_priority_then_round_robin_within_it() {
    let mut h = Host::new(limits(1, 1, 20, 0));
    let holder = h.ok("holder", "hold");
    let low = h.prio("alice", "low", 5);
    let mid_a = h.prio("alice", "mid-a", 3);
    let mid_b = h.prio("bob", "mid-b", 3);
    let high = h.prio("carol", "high", 1);
    assert_eq!(
        [&high, &mid_a, &mid_b, &low].map(|v| h
            .state
            .view(&h.limits, v.key, h.now)
            .unwrap()
            .position),
        [0, 1, 2, 3],
        "positions count every waiter of a higher level first"
    );
    let mut order = Vec::new();
    let mut current = holder.key;
    for _ in 0..4 {
        current = h.handover(current);
        order.push(current);
    }
    assert_eq!(order, [high.key, mid_a.key, mid_b.key, low.key]);
}

#[test]
fn a_lower_level_takes_a_slot_a_blocked_higher_level_cannot_use() {
    // alice is at her cap, so her priority-1 waiter cannot take the free slot; bob's
    // priority-5 ticket can, and does.
    let mut h = Host::new(limits(2, 1, 20, 0));
    h.ok("alice", "hold");
    let waiting = h.prio("alice", "urgent", 1);
    assert_eq!(waiting.state, TicketState::Queued);
    let bob = h.prio("bob", "batch", 5);
    assert_eq!(bob.state, TicketState::Admitted);
}

#[test]
fn weights_serve_a_subject_that_many_times_in_a_row() {
    let mut l = limits(1, 1, 50, 0);
    l.weights.insert("alice".into(), 3);
    let mut h = Host::new(l);
    let holder = h.ok("holder", "hold");
    let mut subject_of = HashMap::new();
    for i in 0..6 {
        subject_of.insert(h.ok("alice", &format!("a{i}")).key, 'a');
        subject_of.insert(h.ok("bob", &format!("b{i}")).key, 'b');
    }
    let mut current = holder.key;
    let mut order = String::new();
    for _ in 0..8 {
        current = h.handover(current);
        order.push(subject_of[&current]);
    }
    assert_eq!(order, "aaabaaab");
}

#[test]
fn aging_serves_an_old_waiter_as_priority_one() {
    let mut l = limits(1, 1, 50, 0);
    l.priority_aging_ms = 1_000;
    let mut h = Host::new(l);
    let holder = h.ok("holder", "hold");
    let old = h.prio("batch", "old", 5);
    h.advance(600);
    let fresh = h.prio("alice", "fresh", 1);
    h.advance(300);
    // Not yet aged: a priority-1 waiter goes first.
    assert_eq!(h.state.view(&h.limits, old.key, h.now).unwrap().position, 1);
    h.advance(100);
    // Aged: served as priority 1, and older than the fresh one in the round robin (its lane
    // joined the rotation after alice's, so alice goes first, then it).
    let listed = h.state.list(&h.limits, 10, h.now).0;
    let info = listed.iter().find(|t| t.key == old.key).unwrap();
    assert_eq!(info.priority, 1, "listed as served at priority 1");
    let first = h.handover(holder.key);
    assert_eq!(first, fresh.key);
    assert_eq!(h.handover(first), old.key);
}

#[test]
fn without_aging_a_low_priority_waiter_waits_behind_every_higher_one() {
    let mut h = Host::new(limits(1, 1, 50, 0));
    let holder = h.ok("holder", "hold");
    let old = h.prio("batch", "old", 5);
    h.advance(10_000);
    h.prio("alice", "fresh", 1);
    assert_ne!(h.handover(holder.key), old.key);
}

#[test]
fn shed_oldest_sheds_the_lowest_level_and_never_above_the_newcomer() {
    let mut l = limits(1, 1, 2, 0);
    l.overflow = OverflowPolicy::ShedOldest;
    let mut h = Host::new(l);
    h.ok("holder", "hold");
    let high = h.prio("alice", "high", 1);
    let low = h.prio("bob", "low", 4);
    // A priority-2 newcomer sheds the priority-4 waiter, though alice's queue is as deep.
    let v = h.prio("carol", "new", 2);
    assert_eq!(v.state, TicketState::Queued);
    assert_eq!(h.state(low.key), TicketState::Shed);
    assert_eq!(h.state(high.key), TicketState::Queued);
    // A priority-5 newcomer finds only higher levels queued: refused, nothing shed.
    let refused = h.submit_args(SubmitArgs {
        instance_id: "replica-1".into(),
        subject: "dave".into(),
        account_id: None,
        run_id: "lowest".into(),
        mode: SubmitMode::Queue,
        rss_mb: None,
        priority: 5,
        resubmit_expired: false,
        keyed: None,
    });
    assert_eq!(refused, Err(SubmitError::Refused(Refusal::QueueFull)));
    assert_eq!(h.stats().counters.shed, 1);
}

#[test]
fn shadow_mode_admits_everything_and_says_what_enforce_would_have_done() {
    let mut l = limits(1, 1, 1, 0);
    l.mode = Mode::Shadow;
    let mut h = Host::new(l);
    let first = h.ok("alice", "r1");
    assert_eq!((first.state, first.shadow), (TicketState::Admitted, None));
    let second = h.ok("bob", "r2");
    assert_eq!(second.state, TicketState::Admitted);
    assert_eq!(second.shadow, Some(ShadowDecision::Queued));
    // One over the total already "waits" in enforce's queue of 1: the next would not fit.
    let third = h.ok("carol", "r3");
    assert_eq!(
        third.shadow,
        Some(ShadowDecision::Refused(Refusal::QueueFull))
    );
    let tried = h
        .submit_with("dave", None, "r4", SubmitMode::Try, None)
        .unwrap();
    assert_eq!(tried.shadow, Some(ShadowDecision::Refused(Refusal::Busy)));
    let s = h.stats();
    assert_eq!(s.in_flight, 4);
    assert_eq!((s.counters.rejected, s.queued), (0, 0));
    assert_eq!(s.counters.shadow, [1, 1, 1, 0]);
}

#[test]
fn the_wait_estimate_follows_measured_holds_and_position() {
    let mut h = Host::new(limits(2, 2, 20, 0));
    let a = h.ok("alice", "a");
    let b = h.ok("bob", "b");
    let w = h.ok("carol", "w");
    assert_eq!(w.eta_ms, 0, "unknown before any slot was freed");
    h.advance(400);
    h.release(a.key);
    assert_eq!(h.stats().counters.hold_avg_ms, 400);
    // carol took alice's slot; the next waiters are 0 and 1 in line for 2 slots of 400 ms.
    let x = h.ok("dave", "x");
    let y = h.ok("erin", "y");
    assert_eq!((x.position, x.eta_ms), (0, 100));
    assert_eq!((y.position, y.eta_ms), (1, 300));
    h.advance(800);
    h.release(b.key);
    assert_eq!(h.stats().counters.hold_avg_ms, (15 * 400 + 1200) / 16);
    assert_eq!(eta_ms(400, 3, 4, 0, 4), 350);
    assert_eq!(
        eta_ms(400, 0, 4, 3, 1),
        1400,
        "a subject's own cap can be the slower pace"
    );
}

#[test]
fn learned_caps_are_remembered_for_at_most_max_adaptive_accounts() {
    let mut l = limits(100, 100, 0, 0);
    l.adaptive_default = Some(Adaptive::up_to(2));
    let mut h = Host::new(l);
    for i in 0..=MAX_ADAPTIVE_ACCOUNTS {
        let account = format!("acct-{i}");
        let v = h
            .submit_with(
                "alice",
                Some(&account),
                &format!("r{i}"),
                SubmitMode::Queue,
                None,
            )
            .unwrap();
        let limited = Report {
            outcome: Outcome::RateLimited,
            latency_ms: None,
        };
        h.state.release_reporting(&h.limits, v.key, limited, h.now);
    }
    assert_eq!(h.state.adaptive.len(), MAX_ADAPTIVE_ACCOUNTS);
    assert_eq!(
        h.state.account_cap(&h.limits, "acct-0"),
        Some(1),
        "cut from 2"
    );
    let last = format!("acct-{MAX_ADAPTIVE_ACCOUNTS}");
    assert_eq!(
        h.state.account_cap(&h.limits, &last),
        Some(2),
        "past the bound, an account stays at max"
    );
}

fn held(subject: &str, run: &str, grant: u64) -> HeldArgs {
    HeldArgs {
        instance_id: "replica-1".into(),
        subject: subject.into(),
        account_id: None,
        run_id: run.into(),
        grant,
        priority: DEFAULT_PRIORITY,
        key: None,
    }
}

#[test]
fn a_reclaimed_ticket_counts_above_the_caps_and_keeps_its_grant() {
    let mut h = Host::new(limits(1, 1, 10, 10));
    let a = h.ok("alice", "r1");
    // A host that lost its state (a fresh one here) learns of a holder with a high grant.
    let key = 99;
    let r = h
        .state
        .reclaim(&h.limits, held("alice", "lost", 5_000), key, h.now)
        .expect("reclaimed");
    h.audit();
    assert!(r.reclaimed);
    assert_eq!((r.view.state, r.view.grant), (TicketState::Admitted, 5_000));
    assert_eq!(r.view.lease_remaining_ms, h.limits.lease_ttl_ms);
    // Two admitted against a total of 1: both runs are running.
    let s = h.stats();
    assert_eq!(
        (s.in_flight, s.counters.reclaimed, s.counters.submitted),
        (2, 1, 1)
    );
    // Newcomers wait until the host is under its cap again; later grants stay above.
    let bob = h.ok("bob", "r2");
    assert_eq!(bob.state, TicketState::Queued);
    h.release(a.key);
    assert_eq!(h.state(bob.key), TicketState::Queued);
    h.release(key);
    let b = h.state.view(&h.limits, bob.key, h.now).unwrap();
    assert_eq!(b.state, TicketState::Admitted);
    assert!(b.grant > 5_000, "grant {} after a reclaimed 5000", b.grant);
}

#[test]
fn a_reclaim_of_a_ticket_still_held_renews_it() {
    let mut h = Host::new(limits(2, 2, 10, 10));
    let a = h.ok("alice", "r1");
    h.advance(10_000);
    let r = h
        .state
        .reclaim(&h.limits, held("alice", "r1", a.grant), a.key, h.now)
        .unwrap();
    assert!(!r.reclaimed);
    assert_eq!(r.view.lease_remaining_ms, h.limits.lease_ttl_ms);
    assert_eq!(h.stats().in_flight, 1);
    // The same id for another run is refused.
    assert_eq!(
        h.state
            .reclaim(&h.limits, held("alice", "other", a.grant), a.key, h.now),
        Err(ReclaimRefusal::OtherRun)
    );
}

#[test]
fn an_ended_run_never_comes_back_but_an_expired_holder_does() {
    let mut h = Host::new(limits(1, 1, 10, 10));
    let a = h.ok("alice", "r1");
    h.release(a.key);
    assert_eq!(
        h.state
            .reclaim(&h.limits, held("alice", "r1", a.grant), a.key, h.now),
        Err(ReclaimRefusal::Ended(TicketState::Released))
    );
    // A holder cut off past its lease: its ticket expired, a newcomer took the slot.
    let b = h.ok("bob", "r2");
    h.advance(h.limits.lease_ttl_ms + 1);
    assert_eq!(h.ok("carol", "r3").state, TicketState::Admitted);
    assert_eq!(h.state(b.key), TicketState::Expired);
    // Another grant is not its admission: refused.
    assert_eq!(
        h.state
            .reclaim(&h.limits, held("bob", "r2", b.grant + 1), b.key, h.now),
        Err(ReclaimRefusal::Ended(TicketState::Expired))
    );
    let r = h
        .state
        .reclaim(&h.limits, held("bob", "r2", b.grant), b.key, h.now)
        .unwrap();
    h.audit();
    assert!(r.reclaimed);
    assert_eq!(h.stats().in_flight, 2);
    // Its run is its own again: a repeat Submit answers it, and it ends as any ticket does.
    assert_eq!(h.ok("bob", "r2").key, b.key);
    h.release(b.key);
    assert_eq!(h.stats().in_flight, 1);
    // A run_id another ticket holds is refused.
    assert_eq!(
        h.state
            .reclaim(&h.limits, held("carol", "r3", 7), 1234, h.now),
        Err(ReclaimRefusal::RunIdTaken)
    );
}

#[test]
fn each_waiter_says_what_holds_it() {
    // total 3, per_subject 1, per_account 1: the shape the console showed wrong.
    let mut h = Host::new(Limits {
        per_account: Some(1),
        memory: MemoryLimits::from_ratio(1000, 0.9),
        ..limits(3, 1, 10, 0)
    });
    let by = |h: &Host, key| h.state.view(&h.limits, key, h.now).unwrap().blocked_by;
    let a = h.ok("alice", "a1");
    assert_eq!(a.blocked_by, None, "admitted: nothing holds it");
    // alice at her cap, the host not at its total.
    let subject = h.ok("alice", "a2");
    assert_eq!(subject.blocked_by, Some(Blocker::Subject));
    // acct-1 at its cap.
    h.submit_with("bob", Some("acct-1"), "b1", SubmitMode::Queue, None)
        .unwrap();
    let account = h
        .submit_with("carol", Some("acct-1"), "c1", SubmitMode::Queue, None)
        .unwrap();
    assert_eq!(account.blocked_by, Some(Blocker::Account));
    // The host at its total: every waiter whose own caps have room waits for the full host,
    // wherever it stands in line (alice's a2 and carol's c1 are ahead of dave in the rotation,
    // erin and the others behind him).
    h.ok("zed", "z1");
    assert_eq!(h.stats().in_flight, 3);
    let waiters: Vec<_> = ["dave", "erin", "fay", "gus"]
        .into_iter()
        .map(|s| h.ok(s, &format!("{s}-1")).key)
        .collect();
    for key in &waiters {
        assert_eq!(by(&h, *key), Some(Blocker::Total));
    }
    assert_eq!(by(&h, subject.key), Some(Blocker::Subject));
    assert_eq!(by(&h, account.key), Some(Blocker::Account));
    h.release(subject.key);
    h.release(account.key);
    for key in &waiters {
        assert_eq!(by(&h, *key), Some(Blocker::Total));
    }
    // A replica at the soft memory limit holds its own waiters back.
    let held = h
        .submit_with("frank", None, "f1", SubmitMode::Queue, Some(950))
        .unwrap();
    assert_eq!(held.blocked_by, Some(Blocker::Memory));
    // A listing says the same.
    let listed: Vec<_> = h
        .state
        .list(&h.limits, 100, h.now)
        .0
        .into_iter()
        .filter(|t| t.state == TicketState::Queued)
        .map(|t| (t.key, t.blocked_by))
        .collect();
    for (key, b) in listed {
        assert_eq!(b, by(&h, key));
    }
}

#[test]
fn a_run_whose_ticket_lapsed_before_it_started_asks_again_under_its_run_id() {
    let mut h = Host::new(Limits {
        lease_ttl_ms: 1_000,
        ..limits(1, 1, 5, 0)
    });
    let args = |run: &str, resubmit: bool| SubmitArgs {
        instance_id: "replica-1".into(),
        subject: "alice".into(),
        account_id: None,
        run_id: run.into(),
        mode: SubmitMode::Queue,
        rss_mb: None,
        priority: DEFAULT_PRIORITY,
        resubmit_expired: resubmit,
        keyed: None,
    };
    let lapsed = h.submit_args(args("r1", false)).unwrap();
    assert_eq!(lapsed.state, TicketState::Admitted);
    // Its admission never reached the run: the lease runs out unrenewed.
    h.now += 1_001;
    h.state.housekeeping(&h.limits, h.now);
    assert_eq!(h.state(lapsed.key), TicketState::Expired);
    // A plain repeat answers the expired ticket; a resubmit makes a new one for the run.
    assert_eq!(h.submit_args(args("r1", false)).unwrap().key, lapsed.key);
    let again = h.submit_args(args("r1", true)).unwrap();
    assert_ne!(again.key, lapsed.key);
    assert_eq!(again.state, TicketState::Admitted);
    // From then on the run is the new ticket, whatever a repeat says.
    assert_eq!(h.submit_args(args("r1", false)).unwrap().key, again.key);
    assert_eq!(h.submit_args(args("r1", true)).unwrap().key, again.key);
    // A run whose ticket ended otherwise is answered as it ended.
    h.release(again.key);
    let released = h.submit_args(args("r1", true)).unwrap();
    assert_eq!(
        (released.key, released.state),
        (again.key, TicketState::Released)
    );
    // A resubmit that is refused leaves the run with its expired ticket.
    let other = h.ok("bob", "b1");
    let r2 = h.submit_args(args("r2", false)).unwrap();
    assert_eq!(r2.state, TicketState::Queued);
    h.now += 600;
    h.state.renew(&h.limits, other.key, None, h.now).unwrap();
    h.now += 401;
    h.state.housekeeping(&h.limits, h.now);
    assert_eq!(h.state(r2.key), TicketState::Expired);
    let mut try_again = args("r2", true);
    try_again.mode = SubmitMode::Try;
    assert!(
        h.submit_args(try_again).is_err(),
        "busy: bob holds the slot"
    );
    assert_eq!(h.submit_args(args("r2", false)).unwrap().key, r2.key);
}

#[test]
fn recent_endings_name_who_ended_how_newest_first_and_stay_bounded() {
    let mut h = Host::new(Limits {
        lease_ttl_ms: 1_000,
        ..limits(1, 1, 1, 0)
    });
    let held = h.ok("alice", "run-held");
    h.ok("bob", "run-waits");
    let busy = h.submit_with("carol", Some("acct"), "run-busy", SubmitMode::Try, None);
    assert_eq!(busy, Err(SubmitError::Refused(Refusal::Busy)));
    assert_eq!(
        h.submit("dave", "run-full"),
        Err(SubmitError::Refused(Refusal::QueueFull))
    );
    h.release(held.key);
    h.now += 5_000; // the waiter, admitted at the release, expires
    h.state.housekeeping(&h.limits, h.now);
    let endings = h.state.recent_endings(10);
    let seen: Vec<_> = endings
        .iter()
        .map(|e| (e.ended_as, &*e.run_id, &*e.subject, e.account.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (
                EndedAs::Ticket(TicketState::Expired),
                "run-waits",
                "bob",
                None
            ),
            (
                EndedAs::Ticket(TicketState::Released),
                "run-held",
                "alice",
                None
            ),
            (EndedAs::Refused("QUEUE_FULL"), "run-full", "dave", None),
            (EndedAs::Refused("BUSY"), "run-busy", "carol", Some("acct")),
        ]
    );
    assert_eq!(h.state.recent_endings(10)[1].key, Some(held.key));
    assert_eq!(
        h.state.recent_endings(10)[2].key,
        None,
        "a refusal has no ticket"
    );
    // Bounded: a long run of endings keeps the newest RECENT_ENDINGS.
    for i in 0..RECENT_ENDINGS + 50 {
        let v = h.ok("erin", &format!("run-{i}"));
        h.release(v.key);
    }
    let all = h.state.recent_endings(usize::MAX);
    assert_eq!(all.len(), RECENT_ENDINGS);
    assert_eq!(&*all[0].run_id, format!("run-{}", RECENT_ENDINGS + 49));
}
