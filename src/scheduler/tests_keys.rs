//! Keys on the pure core, with time moved by hand: each policy, supersede_running, debounce
//! and debounce_max, and the refusals that end nothing.

use super::*;

struct Host {
    state: HostState,
    limits: Limits,
    now: Millis,
    next_key: TicketKey,
}

impl Host {
    fn new(total: u32, queue_total: u32) -> Self {
        Host {
            state: HostState::new(),
            limits: Limits {
                total,
                per_subject: total,
                queue_total,
                queue_hard_total: queue_total * 4,
                ..Limits::default()
            },
            now: 1_000,
            next_key: 1,
        }
    }

    fn args(run: &str, keyed: Option<KeyArgs>) -> SubmitArgs {
        SubmitArgs {
            instance_id: "replica-1".into(),
            subject: "alice".into(),
            account_id: None,
            run_id: run.into(),
            mode: SubmitMode::Queue,
            rss_mb: None,
            priority: DEFAULT_PRIORITY,
            resubmit_expired: false,
            keyed,
        }
    }

    fn submit(&mut self, args: SubmitArgs) -> Result<TicketView, SubmitError> {
        let key = self.next_key;
        self.next_key += 1;
        let out = self.state.submit(&self.limits, args, key, self.now);
        self.audit();
        out
    }

    fn keyed(&mut self, run: &str, key: &str, policy: KeyPolicy) -> TicketView {
        self.submit(Self::args(run, Some(key_args(key, policy))))
            .expect("submit")
    }

    fn plain(&mut self, run: &str) -> TicketView {
        self.submit(Self::args(run, None)).expect("submit")
    }

    fn release(&mut self, key: TicketKey) {
        self.state.release(&self.limits, key, self.now);
        self.audit();
    }

    fn advance(&mut self, ms: u64) {
        self.now += ms;
        self.state.housekeeping(&self.limits, self.now);
        self.audit();
    }

    fn view(&self, key: TicketKey) -> TicketView {
        self.state.view(&self.limits, key, self.now).expect("known")
    }

    fn audit(&self) {
        if let Err(e) = self.state.audit(&self.limits, self.now) {
            panic!("audit: {e}");
        }
    }
}

fn key_args(key: &str, policy: KeyPolicy) -> KeyArgs {
    KeyArgs {
        key: key.into(),
        policy,
        supersede_running: false,
        debounce_ms: 0,
        debounce_max_ms: 0,
    }
}

#[test]
fn keep_newest_supersedes_the_keys_waiters_naming_the_newer_ticket() {
    let mut h = Host::new(1, 10);
    let holder = h.plain("busy");
    let a = h.keyed("m1", "conv", KeyPolicy::KeepNewest);
    let other = h.keyed("o1", "other", KeyPolicy::KeepNewest);
    assert_eq!(a.state, TicketState::Queued);
    let b = h.keyed("m2", "conv", KeyPolicy::KeepNewest);
    assert_eq!(b.state, TicketState::Queued);
    let old = h.view(a.key);
    assert_eq!(old.state, TicketState::Superseded);
    assert_eq!(old.superseded_by, Some(b.key));
    // Another key's waiter is untouched; the newer one waits where the host's queue puts it.
    assert_eq!(h.view(other.key).state, TicketState::Queued);
    assert_eq!(h.view(b.key).position, 1);
    assert_eq!(h.state.stats(&h.limits, h.now).counters.superseded, 1);
    // A repeat of the superseded run answers its end and who ended it.
    let again = h.submit(Host::args(
        "m1",
        Some(key_args("conv", KeyPolicy::KeepNewest)),
    ));
    assert_eq!(again.unwrap().superseded_by, Some(b.key));
    h.release(holder.key);
    assert_eq!(h.view(other.key).state, TicketState::Admitted);
}

#[test]
fn keep_newest_leaves_admitted_tickets_running_and_tells_them_with_supersede_running() {
    let mut h = Host::new(2, 10);
    let a = h.keyed("m1", "conv", KeyPolicy::KeepNewest);
    assert_eq!(a.state, TicketState::Admitted);
    let b = h.keyed("m2", "conv", KeyPolicy::KeepNewest);
    assert_eq!(b.state, TicketState::Admitted);
    assert_eq!(h.view(a.key).superseded_by, None);
    let mut args = key_args("conv", KeyPolicy::KeepNewest);
    args.supersede_running = true;
    let c = h.submit(Host::args("m3", Some(args))).unwrap();
    // The host is full: c waits; both holders are told, and keep their slots.
    assert_eq!(c.state, TicketState::Queued);
    let renewed = h.state.renew(&h.limits, a.key, None, h.now).unwrap();
    assert_eq!(renewed.state, TicketState::Admitted);
    assert_eq!(renewed.superseded_by, Some(c.key));
    assert_eq!(h.view(b.key).superseded_by, Some(c.key));
    assert_eq!(h.state.in_flight(), 2);
    h.release(a.key);
    assert_eq!(h.view(c.key).state, TicketState::Admitted);
    assert_eq!(h.view(c.key).superseded_by, None);
}

#[test]
fn serial_admits_one_per_key_and_the_rest_in_order() {
    let mut h = Host::new(5, 10);
    let a = h.keyed("m1", "conv", KeyPolicy::Serial);
    let b = h.keyed("m2", "conv", KeyPolicy::Serial);
    let c = h.keyed("m3", "conv", KeyPolicy::Serial);
    let other = h.keyed("o1", "other", KeyPolicy::Serial);
    assert_eq!(a.state, TicketState::Admitted);
    assert_eq!(other.state, TicketState::Admitted);
    for t in [&b, &c] {
        assert_eq!(t.state, TicketState::Queued);
        assert_eq!(t.blocked_by, Some(Blocker::Key));
    }
    h.release(a.key);
    assert_eq!(h.view(b.key).state, TicketState::Admitted);
    assert_eq!(h.view(c.key).blocked_by, Some(Blocker::Key));
    // Parked, the holder still holds its key.
    h.state.park(&h.limits, b.key, h.now).unwrap().unwrap();
    h.audit();
    assert_eq!(h.view(c.key).state, TicketState::Queued);
    h.state.unpark(&h.limits, b.key, h.now).unwrap().unwrap();
    h.audit();
    assert_eq!(h.view(b.key).state, TicketState::Admitted);
    // An expired holder frees its key.
    h.advance(h.limits.lease_ttl_ms);
    assert_eq!(h.view(b.key).state, TicketState::Expired);
}

#[test]
fn serial_keep_newest_runs_one_and_keeps_only_the_newest_waiting() {
    let mut h = Host::new(5, 10);
    let a = h.keyed("m1", "conv", KeyPolicy::SerialKeepNewest);
    let b = h.keyed("m2", "conv", KeyPolicy::SerialKeepNewest);
    let c = h.keyed("m3", "conv", KeyPolicy::SerialKeepNewest);
    assert_eq!(a.state, TicketState::Admitted);
    assert_eq!(h.view(b.key).state, TicketState::Superseded);
    assert_eq!(h.view(b.key).superseded_by, Some(c.key));
    assert_eq!(c.blocked_by, Some(Blocker::Key));
    h.release(a.key);
    assert_eq!(h.view(c.key).state, TicketState::Admitted);
}

#[test]
fn reject_new_refuses_while_the_key_lives_and_names_its_holder() {
    let mut h = Host::new(5, 10);
    let a = h.keyed("m1", "conv", KeyPolicy::RejectNew);
    let refused = h.submit(Host::args(
        "m2",
        Some(key_args("conv", KeyPolicy::RejectNew)),
    ));
    assert_eq!(refused, Err(SubmitError::KeyBusy { holder: a.key }));
    let c = h.state.stats(&h.limits, h.now).counters;
    assert_eq!((c.key_refused, c.rejected, c.submitted), (1, 1, 1));
    // The refused run may come back once the key is free.
    h.release(a.key);
    assert_eq!(
        h.keyed("m2", "conv", KeyPolicy::RejectNew).state,
        TicketState::Admitted
    );
}

#[test]
fn a_key_keeps_the_policy_of_its_first_live_ticket() {
    let mut h = Host::new(5, 10);
    let a = h.keyed("m1", "conv", KeyPolicy::Serial);
    let other = h.submit(Host::args(
        "m2",
        Some(key_args("conv", KeyPolicy::KeepNewest)),
    ));
    assert_eq!(
        other,
        Err(SubmitError::KeyPolicyConflict {
            live: KeyPolicy::Serial,
            asked: KeyPolicy::KeepNewest
        })
    );
    assert_eq!(h.state.stats(&h.limits, h.now).counters.submitted, 1);
    h.release(a.key);
    // Once its tickets ended, the key is forgotten and takes any policy.
    h.keyed("m3", "conv", KeyPolicy::KeepNewest);
    assert!(h.state.keys.len() == 1);
}

#[test]
fn a_refused_newer_ticket_supersedes_nothing() {
    // One slot, a queue of one, reject on overflow: the key's waiter is superseded only when
    // the newer ticket gets its place.
    let mut h = Host::new(1, 1);
    h.plain("busy");
    let a = h.keyed("m1", "conv", KeyPolicy::KeepNewest);
    assert_eq!(a.state, TicketState::Queued);
    // The newer one takes the waiter's place in the full queue.
    let b = h.keyed("m2", "conv", KeyPolicy::KeepNewest);
    assert_eq!(b.state, TicketState::Queued);
    assert_eq!(h.view(a.key).state, TicketState::Superseded);
    // A TRY Submit that cannot be admitted is refused and ends nothing.
    let mut args = Host::args("m3", Some(key_args("conv", KeyPolicy::KeepNewest)));
    args.mode = SubmitMode::Try;
    assert_eq!(h.submit(args), Err(SubmitError::Refused(Refusal::Busy)));
    assert_eq!(h.view(b.key).state, TicketState::Queued);
}

#[test]
fn debounce_admits_the_newest_once_the_key_is_quiet() {
    let mut h = Host::new(5, 10);
    let debounced = |run: &str, h: &mut Host| {
        let mut k = key_args("conv", KeyPolicy::KeepNewest);
        k.debounce_ms = 300;
        h.submit(Host::args(run, Some(k))).unwrap()
    };
    let a = debounced("m1", &mut h);
    assert_eq!(a.state, TicketState::Queued);
    assert_eq!(a.blocked_by, Some(Blocker::Key));
    h.advance(200);
    let b = debounced("m2", &mut h);
    assert_eq!(h.view(a.key).state, TicketState::Superseded);
    h.advance(299);
    assert_eq!(h.view(b.key).state, TicketState::Queued);
    h.advance(1);
    assert_eq!(h.view(b.key).state, TicketState::Admitted);
}

#[test]
fn debounce_max_bounds_the_delay_from_the_bursts_first_ticket() {
    let mut h = Host::new(5, 10);
    let mut last = None;
    // A message every 200 ms, debounce 300 ms, at most 700 ms after the first.
    for i in 0..5 {
        let mut k = key_args("conv", KeyPolicy::KeepNewest);
        k.debounce_ms = 300;
        k.debounce_max_ms = 700;
        let t = h.submit(Host::args(&format!("m{i}"), Some(k))).unwrap();
        last = Some(t.key);
        if i == 3 {
            // Submitted at +600: ready at +700, not +900.
            break;
        }
        h.advance(200);
    }
    let last = last.unwrap();
    h.advance(99);
    assert_eq!(h.view(last).state, TicketState::Queued);
    h.advance(1);
    assert_eq!(h.view(last).state, TicketState::Admitted);
}

#[test]
fn a_flood_of_distinct_keys_leaves_nothing_behind() {
    let mut h = Host::new(1_000_000, 0);
    let mut keys = Vec::new();
    for i in 0..10_000 {
        keys.push(
            h.state
                .submit(
                    &h.limits,
                    Host::args(
                        &format!("r{i}"),
                        Some(key_args(&format!("k{i}"), KeyPolicy::SerialKeepNewest)),
                    ),
                    i + 1,
                    h.now,
                )
                .unwrap()
                .key,
        );
    }
    assert_eq!(h.state.keys.len(), 10_000);
    for k in keys {
        h.state.release(&h.limits, k, h.now);
    }
    h.audit();
    assert!(h.state.keys.is_empty());
}

#[test]
fn the_image_keeps_keys_debounce_and_who_superseded_whom() {
    let mut h = Host::new(1, 10);
    let a = h.keyed("m1", "conv", KeyPolicy::SerialKeepNewest);
    let b = h.keyed("m2", "conv", KeyPolicy::SerialKeepNewest);
    let mut k = key_args("conv", KeyPolicy::SerialKeepNewest);
    k.supersede_running = true;
    k.debounce_ms = 500;
    let c = h.submit(Host::args("m3", Some(k))).unwrap();
    let image = h.state.image();
    let restored = HostState::from_image(image.clone()).unwrap();
    assert_eq!(restored.image(), image);
    restored.audit(&h.limits, h.now).unwrap();
    h.state = restored;
    assert_eq!(h.view(b.key).superseded_by, Some(c.key));
    assert_eq!(h.view(a.key).superseded_by, Some(c.key));
    h.release(a.key);
    assert_eq!(h.view(c.key).blocked_by, Some(Blocker::Key));
    h.advance(500);
    assert_eq!(h.view(c.key).state, TicketState::Admitted);
}

#[test]
fn a_reclaimed_ticket_holds_its_key_again() {
    let mut h = Host::new(5, 10);
    let held = HeldArgs {
        instance_id: "replica-1".into(),
        subject: "alice".into(),
        account_id: None,
        run_id: "lost-run".into(),
        grant: 7,
        priority: DEFAULT_PRIORITY,
        key: Some(("conv".into(), KeyPolicy::Serial)),
    };
    let back = h.state.reclaim(&h.limits, held, 99, h.now).unwrap();
    assert!(back.reclaimed);
    h.audit();
    // The run that runs holds its conversation: a new message of it waits.
    let next = h.keyed("m2", "conv", KeyPolicy::Serial);
    assert_eq!(
        (next.state, next.blocked_by),
        (TicketState::Queued, Some(Blocker::Key))
    );
    h.release(99);
    assert_eq!(h.view(next.key).state, TicketState::Admitted);
}

/// m0 holds a key, m1 waits and its ticket lapses (its gateway lost the connection), m2
/// (newer) queues, then m1 is submitted again (`resubmit_expired`): it takes the place m1
/// first had. Keep-newest: m1's new ticket is the one superseded, at once, by m2 (before, it
/// superseded m2: the older message ran). Serial: m1 runs before m2, in its first place.
#[test]
fn a_resubmitted_run_takes_the_place_it_was_first_sent_in() {
    for policy in [
        KeyPolicy::SerialKeepNewest,
        KeyPolicy::KeepNewest,
        KeyPolicy::Serial,
    ] {
        let mut h = Host::new(1, 10);
        let lease = h.limits.lease_ttl_ms;
        let m0 = h.keyed("m0", "conv", policy);
        assert_eq!(m0.state, TicketState::Admitted);
        let m1 = h.keyed("m1", "conv", policy);
        assert_eq!(m1.state, TicketState::Queued);
        h.advance(lease / 2);
        h.state.renew(&h.limits, 1, None, h.now).unwrap();
        h.advance(lease / 2 + 1);
        assert_eq!(h.view(2).state, TicketState::Expired, "{policy:?}");
        assert_eq!(h.view(1).state, TicketState::Admitted);
        let m2 = h.keyed("m2", "conv", policy);
        assert_eq!(m2.state, TicketState::Queued);
        let again = h
            .submit(SubmitArgs {
                resubmit_expired: true,
                ..Host::args("m1", Some(key_args("conv", policy)))
            })
            .unwrap();
        if policy.keeps_newest() {
            assert_eq!(
                (again.state, again.superseded_by),
                (TicketState::Superseded, Some(3)),
                "{policy:?}: the older message is superseded by the newer"
            );
            assert_eq!(h.view(3).state, TicketState::Queued, "{policy:?}");
            // Asked again, it answers the same.
            let repeat = h
                .submit(SubmitArgs {
                    resubmit_expired: true,
                    ..Host::args("m1", Some(key_args("conv", policy)))
                })
                .unwrap();
            assert_eq!(repeat.state, TicketState::Superseded);
        } else {
            assert_eq!(again.state, TicketState::Queued);
            h.release(1);
            assert_eq!(h.view(4).state, TicketState::Admitted, "m1 first");
            assert_eq!(h.view(3).state, TicketState::Queued);
        }
    }
}
