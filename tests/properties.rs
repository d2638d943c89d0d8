//! Property tests of the scheduling core over random operation sequences across several hosts,
//! subjects and accounts: no cap is ever exceeded, counters add up, no waiter that fits is left
//! queued, every ticket ends exactly once, and round robin lets no queued subject wait longer
//! than one rotation.

use std::collections::HashMap;

use admission_authority::scheduler::{
    HostState, Limits, MemoryLimits, OverflowPolicy, SubmitArgs, SubmitMode, TicketKey, TicketState,
};
use proptest::prelude::*;

const HOSTS: usize = 2;
const SUBJECTS: [&str; 4] = ["alice", "bob", "carol", "dave"];
const ACCOUNTS: [Option<&str>; 3] = [None, Some("acct-1"), Some("acct-2")];

#[derive(Clone, Debug)]
enum Op {
    Submit {
        host: usize,
        subject: usize,
        account: usize,
        try_mode: bool,
        rss_mb: Option<u32>,
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
    prop_oneof![
        4 => (0..HOSTS, 0..SUBJECTS.len(), 0..ACCOUNTS.len(), any::<bool>(), rss.clone())
            .prop_map(|(host, subject, account, try_mode, rss_mb)| Op::Submit { host, subject, account, try_mode, rss_mb }),
        3 => (0..HOSTS, any::<usize>()).prop_map(|(host, pick)| Op::Release { host, pick }),
        2 => (0..HOSTS, any::<usize>(), rss).prop_map(|(host, pick, rss_mb)| Op::Renew { host, pick, rss_mb }),
        1 => (1u64..400).prop_map(|ms| Op::Advance { ms }),
        1 => (0..HOSTS, any::<usize>()).prop_map(|(host, pick)| Op::Park { host, pick }),
        1 => (0..HOSTS, any::<usize>()).prop_map(|(host, pick)| Op::Unpark { host, pick }),
    ]
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        1u32..5,
        1u32..3,
        prop_oneof![Just(None), (1u32..3).prop_map(Some)],
        0u32..6,
        0u32..3,
        prop_oneof![
            Just(OverflowPolicy::Reject),
            Just(OverflowPolicy::ShedOldest),
            Just(OverflowPolicy::Queue)
        ],
        any::<bool>(),
        // 1 forgets ended tickets early, 32 at a time (scheduler::RETAIN_SLACK).
        prop_oneof![Just(1u32), Just(100_000)],
    )
        .prop_map(
            |(
                total,
                per_subject,
                per_account,
                queue_total,
                queue_per_subject,
                overflow,
                memory,
                max_retained,
            )| {
                Limits {
                    total,
                    per_subject,
                    per_account,
                    subjects: [("dave".to_string(), 1)].into(),
                    accounts: HashMap::new(),
                    queue_total,
                    queue_per_subject,
                    queue_hard_total: queue_total * 2,
                    overflow,
                    lease_ttl_ms: 500,
                    retention_ms: 800,
                    max_retained,
                    memory: if memory {
                        MemoryLimits::from_ratio(1000, 0.9)
                    } else {
                        MemoryLimits::OFF
                    },
                }
            },
        )
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
                Op::Submit { host, subject, account, try_mode, rss_mb } => {
                    run += 1;
                    let args = SubmitArgs {
                        instance_id: format!("replica-{}", run % 2),
                        subject: SUBJECTS[subject].to_string(),
                        account_id: ACCOUNTS[account].map(str::to_string),
                        run_id: format!("run-{run}"),
                        mode: if try_mode { SubmitMode::Try } else { SubmitMode::Queue },
                        rss_mb,
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
