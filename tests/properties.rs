//! Property tests of the scheduling core over random operation sequences across several hosts,
//! subjects and accounts: no cap is ever exceeded, counters add up, no waiter that fits is left
//! queued, every ticket ends exactly once, and round robin lets no queued subject wait longer
//! than one rotation.

use std::collections::HashMap;

use admission_authority::scheduler::{
    HostState, KeyArgs, KeyPolicy, Limits, OverflowPolicy, SubmitArgs, SubmitMode, TicketKey,
    TicketState,
};
use proptest::prelude::*;

#[path = "common/strategies.rs"]
mod strategies;

const HOSTS: usize = 2;
const SUBJECTS: [&str; 4] = ["alice", "bob", "carol", "dave"];
const ACCOUNTS: [Option<&str>; 3] = [None, Some("acct-1"), Some("acct-2")];
const KEYS: [&str; 3] = ["conv-1", "conv-2", "conv-3"];

#[derive(Clone, Debug)]
enum Op {
    Submit {
        host: usize,
        subject: usize,
        account: usize,
        try_mode: bool,
        rss_mb: Option<u32>,
        /// (key, policy in `KeyPolicy::ALL`, supersede_running, debounce ms).
        keyed: Option<(usize, usize, bool, u64)>,
    },
    /// Release (or cancel) the n-th ticket ever made on the host, modulo their number.
    Release {
        host: usize,
        pick: usize,
    },
    Renew {
        host: usize,
        pick: usize,
        rss_mb: Option<u32>,
    },
    Advance {
        ms: u64,
    },
    Park {
        host: usize,
        pick: usize,
    },
    Unpark {
        host: usize,
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let rss = prop_oneof![Just(None), (0u32..1200).prop_map(Some)];
    let keyed = prop_oneof![
        Just(None),
        (
            0..KEYS.len(),
            0..KeyPolicy::ALL.len(),
            any::<bool>(),
            prop_oneof![Just(0u64), 1u64..500]
        )
            .prop_map(Some),
    ];
    prop_oneof![
        4 => (0..HOSTS, 0..SUBJECTS.len(), 0..ACCOUNTS.len(), any::<bool>(), rss.clone(), keyed)
            .prop_map(|(host, subject, account, try_mode, rss_mb, keyed)| Op::Submit { host, subject, account, try_mode, rss_mb, keyed }),
        3 => (0..HOSTS, any::<usize>()).prop_map(|(host, pick)| Op::Release { host, pick }),
        2 => (0..HOSTS, any::<usize>(), rss).prop_map(|(host, pick, rss_mb)| Op::Renew { host, pick, rss_mb }),
        1 => (1u64..400).prop_map(|ms| Op::Advance { ms }),
        1 => (0..HOSTS, any::<usize>()).prop_map(|(host, pick)| Op::Park { host, pick }),
        1 => (0..HOSTS, any::<usize>()).prop_map(|(host, pick)| Op::Unpark { host, pick }),
    ]
}

fn limits() -> impl Strategy<Value = Limits> {
    strategies::base_limits(500, 800).prop_map(|l| Limits {
        subjects: [("dave".to_string(), 1)].into(),
        ..l
    })
}

fn is_terminal(s: TicketState) -> bool {
    !s.is_live()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_over_random_operations(
        limits in proptest::collection::vec(limits(), HOSTS),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut hosts: Vec<HostState> = (0..HOSTS).map(|_| HostState::new()).collect();
        let mut made: Vec<Vec<TicketKey>> = vec![Vec::new(); HOSTS];
        // The terminal state each ticket was first seen in.
        let mut ended: HashMap<(usize, TicketKey), TicketState> = HashMap::new();
        let mut now = 1_000u64;
        let mut next_key: TicketKey = 1;
        let mut run = 0u64;

        for op in ops {
            match op {
                Op::Submit { host, subject, account, try_mode, rss_mb, keyed } => {
                    run += 1;
                    // What the edge lets through: supersede_running and debounce only with a
                    // keep-newest policy, debounce only queued.
                    let keyed = keyed.map(|(k, p, supersede, debounce)| {
                        let policy = KeyPolicy::ALL[p];
                        KeyArgs {
                            key: KEYS[k].to_string(),
                            policy,
                            supersede_running: supersede && policy.keeps_newest(),
                            debounce_ms: if policy.keeps_newest() && !try_mode { debounce } else { 0 },
                            debounce_max_ms: if policy.keeps_newest() && !try_mode { debounce * 2 } else { 0 },
                        }
                    });
                    let args = SubmitArgs {
                        instance_id: format!("replica-{}", run % 2),
                        subject: SUBJECTS[subject].to_string(),
                        account_id: ACCOUNTS[account].map(str::to_string),
                        run_id: format!("run-{run}"),
                        mode: if try_mode { SubmitMode::Try } else { SubmitMode::Queue },
                        rss_mb,
                        priority: 3,
                        resubmit_expired: false,
                        keyed,
                    };
                    let key = next_key;
                    next_key += 1;
                    if let Ok(v) = hosts[host].submit(&limits[host], args, key, now) {
                        prop_assert_eq!(v.key, key);
                        prop_assert!(matches!(v.state, TicketState::Admitted | TicketState::Queued));
                        made[host].push(key);
                    }
                }
                Op::Release { host, pick } => {
                    if !made[host].is_empty() {
                        let key = made[host][pick % made[host].len()];
                        hosts[host].release(&limits[host], key, now);
                    }
                }
                Op::Renew { host, pick, rss_mb } => {
                    if !made[host].is_empty() {
                        let key = made[host][pick % made[host].len()];
                        hosts[host].renew(&limits[host], key, rss_mb, now);
                    }
                }
                Op::Park { host, pick } => {
                    if !made[host].is_empty() {
                        let key = made[host][pick % made[host].len()];
                        if let Some(Ok(v)) = hosts[host].park(&limits[host], key, now) {
                            prop_assert_eq!(v.state, TicketState::Parked);
                        }
                    }
                }
                Op::Unpark { host, pick } => {
                    if !made[host].is_empty() {
                        let key = made[host][pick % made[host].len()];
                        if let Some(Ok(v)) = hosts[host].unpark(&limits[host], key, now) {
                            prop_assert!(matches!(v.state, TicketState::Admitted | TicketState::Queued));
                        }
                    }
                }
                Op::Advance { ms } => {
                    now += ms;
                    for (h, state) in hosts.iter_mut().enumerate() {
                        state.housekeeping(&limits[h], now);
                    }
                }
            }
            for h in 0..HOSTS {
                hosts[h].take_changes();
                if let Err(e) = hosts[h].audit(&limits[h], now) {
                    return Err(TestCaseError::fail(format!("host {h}: {e}")));
                }
                // What a data dir writes down brings back the same host.
                let image = hosts[h].image();
                let back = HostState::from_image(image.clone()).map_err(TestCaseError::fail)?;
                prop_assert_eq!(back.image(), image);
                for key in &made[h] {
                    let state = hosts[h].state_of(*key);
                    match (ended.get(&(h, *key)), state) {
                        (Some(first), Some(s)) => prop_assert_eq!(*first, s, "a ticket ends exactly once"),
                        (Some(_), None) => {} // forgotten after retention
                        (None, Some(s)) if is_terminal(s) => { ended.insert((h, *key), s); }
                        (None, Some(_)) => {}
                        (None, None) => prop_assert!(false, "a live ticket vanished"),
                    }
                }
            }
        }
    }

    /// total 1, per_subject 1, everyone queued, released one at a time: between two admissions
    /// of the same subject, every subject that stayed queued in between is admitted.
    #[test]
    fn no_queued_subject_waits_longer_than_one_rotation(
        subjects in proptest::collection::vec(0..SUBJECTS.len() - 1, 1..40),
    ) {
        let limits = Limits {
            total: 1,
            per_subject: 1,
            queue_total: 100,
            queue_hard_total: 100,
            ..Limits::default()
        };
        let mut host = HostState::new();
        let now = 1_000;
        let args = |subject: &str, run: usize| SubmitArgs {
            instance_id: "replica".into(),
            subject: subject.into(),
            account_id: None,
            run_id: format!("run-{run}"),
            mode: SubmitMode::Queue,
            rss_mb: None,
            priority: 3,
            resubmit_expired: false,
            keyed: None,
        };
        let holder = host.submit(&limits, args("holder", 0), 0, now).unwrap();
        let mut subject_of = HashMap::new();
        for (i, s) in subjects.iter().enumerate() {
            let key = (i + 1) as TicketKey;
            host.submit(&limits, args(SUBJECTS[*s], i + 1), key, now).unwrap();
            subject_of.insert(key, *s);
        }
        host.take_changes();
        let mut remaining: HashMap<usize, usize> = HashMap::new();
        for s in &subjects {
            *remaining.entry(*s).or_default() += 1;
        }
        // For each subject: the subjects admitted since its last admission.
        let mut seen_since: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut current = holder.key;
        for _ in 0..subjects.len() {
            host.release(&limits, current, now);
            let admitted: Vec<TicketKey> = host
                .take_changes()
                .into_iter()
                .filter(|k| host.state_of(*k) == Some(TicketState::Admitted))
                .collect();
            prop_assert_eq!(admitted.len(), 1);
            current = admitted[0];
            let s = subject_of[&current];
            if let Some(between) = seen_since.get(&s) {
                for (other, left) in &remaining {
                    if *other != s && *left > 0 {
                        prop_assert!(
                            between.contains(other),
                            "subject {} admitted twice while {} kept waiting", s, other
                        );
                    }
                }
            }
            *remaining.get_mut(&s).unwrap() -= 1;
            for (other, list) in seen_since.iter_mut() {
                if *other != s {
                    list.push(s);
                }
            }
            seen_since.insert(s, Vec::new());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Priorities, aging and weights

/// A waiter's subject, when it joined, and (once aged) the admissions since and their bound.
type Waiter = (usize, u64, Option<(usize, usize)>);

/// A Submit of `subject` at `priority` on one host.
fn prio_args(subject: &str, account: Option<&str>, run: usize, priority: u8) -> SubmitArgs {
    SubmitArgs {
        instance_id: "replica".into(),
        subject: subject.into(),
        account_id: account.map(str::to_string),
        run_id: format!("run-{run}"),
        mode: SubmitMode::Queue,
        rss_mb: None,
        priority,
        resubmit_expired: false,
        keyed: None,
    }
}

#[derive(Clone, Debug)]
enum PrioOp {
    Submit {
        subject: usize,
        account: usize,
        priority: u8,
    },
    Release {
        pick: usize,
    },
    Park {
        pick: usize,
    },
    Unpark {
        pick: usize,
    },
    Advance {
        ms: u64,
    },
}

fn prio_op() -> impl Strategy<Value = PrioOp> {
    prop_oneof![
        5 => (0..SUBJECTS.len(), 0..ACCOUNTS.len(), 1u8..=5)
            .prop_map(|(subject, account, priority)| PrioOp::Submit { subject, account, priority }),
        3 => any::<usize>().prop_map(|pick| PrioOp::Release { pick }),
        1 => any::<usize>().prop_map(|pick| PrioOp::Park { pick }),
        1 => any::<usize>().prop_map(|pick| PrioOp::Unpark { pick }),
        1 => (1u64..300).prop_map(|ms| PrioOp::Advance { ms }),
    ]
}

fn prio_limits() -> impl Strategy<Value = Limits> {
    (
        1u32..5,
        1u32..3,
        prop_oneof![Just(None), (1u32..3).prop_map(Some)],
        1u32..8,
        prop_oneof![
            Just(OverflowPolicy::Reject),
            Just(OverflowPolicy::ShedOldest),
            Just(OverflowPolicy::Queue)
        ],
        proptest::collection::hash_map(0..SUBJECTS.len(), 1u32..5, 0..3),
        prop_oneof![Just(0u64), 200u64..2_000],
    )
        .prop_map(
            |(total, per_subject, per_account, queue_total, overflow, weights, aging)| Limits {
                total,
                per_subject,
                per_account,
                subjects: [("dave".to_string(), 1)].into(),
                queue_total,
                queue_hard_total: queue_total * 2,
                overflow,
                lease_ttl_ms: 1_000,
                retention_ms: 800,
                weights: weights
                    .into_iter()
                    .map(|(s, w)| (SUBJECTS[s].to_string(), w))
                    .collect(),
                priority_aging_ms: aging,
                ..Limits::default()
            },
        )
}

/// Whether queued ticket `w` would fit if the admission of `t` were undone.
fn would_fit_without(
    limits: &Limits,
    live: &[admission_authority::scheduler::TicketInfo],
    w: &admission_authority::scheduler::TicketInfo,
    t: &admission_authority::scheduler::TicketInfo,
) -> bool {
    let admitted = |f: &dyn Fn(&admission_authority::scheduler::TicketInfo) -> bool| {
        live.iter()
            .filter(|x| x.state == TicketState::Admitted && x.key != t.key && f(x))
            .count() as u32
    };
    let total_ok = admitted(&|_| true) < limits.total;
    let subject_ok = admitted(&|x| x.subject == w.subject) < limits.subject_cap(&w.subject);
    let account_ok = match w.account_id.as_deref().and_then(|a| limits.account_cap(a)) {
        Some(cap) => admitted(&|x| x.account_id == w.account_id) < cap,
        None => true,
    };
    total_ok && subject_ok && account_ok
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// With priorities, weights and aging in play: no cap is ever exceeded (the audit), and no
    /// ticket is admitted while a waiter of a higher level (as served: aged waiters count as 1)
    /// would have fit in its place.
    #[test]
    fn no_waiter_is_passed_over_by_a_lower_level(
        limits in prio_limits(),
        ops in proptest::collection::vec(prio_op(), 1..150),
    ) {
        let mut host = HostState::new();
        let mut made: Vec<TicketKey> = Vec::new();
        let mut now = 1_000u64;
        for (i, op) in ops.into_iter().enumerate() {
            let before: HashMap<TicketKey, TicketState> = host
                .list(&limits, 10_000, now).0.into_iter().map(|t| (t.key, t.state)).collect();
            match op {
                PrioOp::Submit { subject, account, priority } => {
                    let key = (i + 1) as TicketKey;
                    let args = prio_args(SUBJECTS[subject], ACCOUNTS[account], i, priority);
                    if host.submit(&limits, args, key, now).is_ok() {
                        made.push(key);
                    }
                }
                PrioOp::Release { pick } if !made.is_empty() => {
                    host.release(&limits, made[pick % made.len()], now);
                }
                PrioOp::Park { pick } if !made.is_empty() => {
                    host.park(&limits, made[pick % made.len()], now);
                }
                PrioOp::Unpark { pick } if !made.is_empty() => {
                    host.unpark(&limits, made[pick % made.len()], now);
                }
                PrioOp::Advance { ms } => {
                    now += ms;
                    host.housekeeping(&limits, now);
                }
                _ => {}
            }
            host.take_changes();
            if let Err(e) = host.audit(&limits, now) {
                return Err(TestCaseError::fail(format!("op {i}: {e}")));
            }
            let (live, _) = host.list(&limits, 10_000, now);
            for t in live.iter().filter(|t| {
                t.state == TicketState::Admitted && before.get(&t.key) != Some(&TicketState::Admitted)
            }) {
                for w in live.iter().filter(|w| w.state == TicketState::Queued && w.priority < t.priority) {
                    prop_assert!(
                        !would_fit_without(&limits, &live, w, t),
                        "op {}: {:?} (priority {}) admitted while {:?} (priority {}) fit",
                        i, t.run_id, t.priority, w.run_id, w.priority
                    );
                }
            }
        }
    }

    /// total 1, per_subject 1, a flood of priority-1 work on every subject: a waiter of a
    /// lower priority, once older than the aging bound, is admitted within one rotation of
    /// the subjects for every waiter of its own subject ahead of it (and its own turn).
    #[test]
    fn aging_bounds_every_wait_under_a_flood_of_higher_priorities(
        arrivals in proptest::collection::vec((0..SUBJECTS.len(), 1u8..=5, 1u64..150), 20..120),
    ) {
        const AGING: u64 = 500;
        let limits = Limits {
            total: 1,
            per_subject: 1,
            queue_total: 10_000,
            queue_hard_total: 10_000,
            priority_aging_ms: AGING,
            lease_ttl_ms: 3_600_000,
            ..Limits::default()
        };
        let mut host = HostState::new();
        let mut now = 1_000u64;
        let holder = host.submit(&limits, prio_args("holder", None, 0, 1), 0, now).unwrap();
        let mut current = holder.key;
        // Per waiter: subject, when it joined, and (once aged) the admissions since and the
        // bound on them.
        let mut waiting: HashMap<TicketKey, Waiter> = HashMap::new();
        let mut next = 1u128;
        for (subject, priority, dt) in arrivals {
            // A flood: a fresh priority-1 waiter on another subject with every arrival.
            for (s, p) in [(subject, priority), ((subject + 1) % SUBJECTS.len(), 1)] {
                let key = next;
                next += 1;
                host.submit(&limits, prio_args(SUBJECTS[s], None, key as usize, p), key, now).unwrap();
                waiting.insert(key, (s, now, None));
            }
            now += dt;
            host.housekeeping(&limits, now);
            // Waiters that just aged: the bound is one rotation per waiter of their subject
            // ahead of them, and one for their own turn.
            let keys: Vec<TicketKey> = waiting.keys().copied().collect();
            for k in keys {
                let (s, since, aged) = waiting[&k];
                if aged.is_none() && now >= since + AGING {
                    let ahead = waiting.values().filter(|(s2, t2, _)| *s2 == s && *t2 < since).count()
                        + waiting.iter().filter(|(k2, (s2, t2, _))| *s2 == s && *t2 == since && **k2 < k).count();
                    waiting.get_mut(&k).unwrap().2 = Some((0, (ahead + 1) * SUBJECTS.len()));
                }
            }
            host.take_changes();
            host.release(&limits, current, now);
            let admitted: Vec<TicketKey> = host
                .take_changes()
                .into_iter()
                .filter(|k| host.state_of(*k) == Some(TicketState::Admitted))
                .collect();
            prop_assert_eq!(admitted.len(), 1);
            current = admitted[0];
            waiting.remove(&current);
            for (k, (_, _, aged)) in waiting.iter_mut() {
                if let Some((n, bound)) = aged {
                    *n += 1;
                    prop_assert!(*n < *bound, "waiter {} still waits after {} admissions since it aged", k, n);
                }
            }
        }
    }

    /// Every subject backlogged, weights 1..5: admissions over 1,000 slots are proportional to
    /// weight (Jain's fairness index of admissions ÷ weight at least 0.95).
    #[test]
    fn backlogged_subjects_are_served_in_proportion_to_weight(
        weights in proptest::collection::vec(1u32..=5, 2..=SUBJECTS.len()),
        total in 1u32..4,
        picks in proptest::collection::vec(any::<usize>(), 1_000),
    ) {
        let limits = Limits {
            total,
            per_subject: total,
            queue_total: 10_000,
            queue_hard_total: 10_000,
            lease_ttl_ms: 3_600_000,
            weights: weights.iter().enumerate().map(|(i, w)| (SUBJECTS[i].to_string(), *w)).collect(),
            ..Limits::default()
        };
        let mut host = HostState::new();
        let now = 1_000u64;
        let mut subject_of: HashMap<TicketKey, usize> = HashMap::new();
        let mut next = 1u128;
        let mut holding: Vec<TicketKey> = Vec::new();
        let refill = |host: &mut HostState, subject_of: &mut HashMap<TicketKey, usize>, next: &mut u128| {
            for (s, _) in weights.iter().enumerate() {
                let queued = host.stats(&limits, now).subjects.iter()
                    .find(|r| r.name == SUBJECTS[s]).map_or(0, |r| r.queued);
                for _ in queued..6 {
                    let key = *next;
                    *next += 1;
                    host.submit(&limits, prio_args(SUBJECTS[s], None, key as usize, 3), key, now).unwrap();
                    subject_of.insert(key, s);
                }
            }
        };
        refill(&mut host, &mut subject_of, &mut next);
        holding.extend(subject_of.keys().copied().filter(|k| host.state_of(*k) == Some(TicketState::Admitted)));
        host.take_changes();
        let mut admissions = vec![0u64; weights.len()];
        for pick in picks {
            let k = holding.swap_remove(pick % holding.len());
            host.release(&limits, k, now);
            refill(&mut host, &mut subject_of, &mut next);
            for k in host.take_changes() {
                if host.state_of(k) == Some(TicketState::Admitted) {
                    admissions[subject_of[&k]] += 1;
                    holding.push(k);
                }
            }
        }
        let x: Vec<f64> = admissions.iter().zip(&weights).map(|(a, w)| *a as f64 / f64::from(*w)).collect();
        let sum: f64 = x.iter().sum();
        let squares: f64 = x.iter().map(|v| v * v).sum();
        let jain = sum * sum / (x.len() as f64 * squares);
        prop_assert!(jain >= 0.95, "Jain's index {} for admissions {:?} with weights {:?}", jain, admissions, weights);
    }
}
