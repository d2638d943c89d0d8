//! Any state goes through the format and comes back the same: random operation sequences on a
//! host, its ledger and the auth buckets are imaged, encoded as snapshot pieces, decoded and
//! rebuilt; the rebuilt state images the same, and decides the next operations the same.

use proptest::prelude::*;

use super::{Piece, decode_piece, encode_piece};
use crate::auth::{AuthTable, BucketRule};
use crate::ledger::{AuthorizeArgs, Coverage, Ledger, ResourcePolicy, Usage};
use crate::scheduler::{
    Adaptive, HostState, Limits, LimitsRecord, LimitsSource, Outcome, OverflowPolicy, Report,
    SubmitArgs, SubmitMode,
};

#[derive(Clone, Debug)]
enum Op {
    Submit {
        subject: u8,
        account: u8,
        priority: u8,
        /// 0: no key; else a key (of three), a policy and a debounce drawn from it.
        keyed: u8,
    },
    Release {
        pick: u8,
        outcome: u8,
    },
    Park(u8),
    Unpark(u8),
    Renew(u8),
    Advance(u16),
    Authorize {
        run: u8,
        step: u8,
        tokens: u16,
    },
    Settle {
        run: u8,
        step: u8,
        tokens: u16,
    },
    Attempt {
        identity: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..5u8, 0..3u8, 0..6u8, any::<u8>()).prop_map(|(subject, account, priority, keyed)| Op::Submit {
            subject,
            account,
            priority,
            keyed,
        }),
        2 => (any::<u8>(), 0..5u8).prop_map(|(pick, outcome)| Op::Release { pick, outcome }),
        1 => any::<u8>().prop_map(Op::Park),
        1 => any::<u8>().prop_map(Op::Unpark),
        1 => any::<u8>().prop_map(Op::Renew),
        1 => (0..3000u16).prop_map(Op::Advance),
        1 => (0..4u8, 1..4u8, 1..2000u16).prop_map(|(run, step, tokens)| Op::Authorize {
            run,
            step,
            tokens
        }),
        1 => (0..4u8, 1..4u8, 0..2000u16).prop_map(|(run, step, tokens)| Op::Settle {
            run,
            step,
            tokens
        }),
        1 => (0..6u8).prop_map(|identity| Op::Attempt { identity }),
    ]
}

fn limits() -> Limits {
    Limits {
        total: 3,
        per_subject: 2,
        per_account: Some(2),
        queue_total: 6,
        queue_per_subject: 3,
        queue_hard_total: 6,
        overflow: OverflowPolicy::ShedOldest,
        lease_ttl_ms: 5_000,
        retention_ms: 8_000,
        max_retained: 40,
        priority_aging_ms: 4_000,
        weights: [("s1".to_string(), 3)].into(),
        adaptive: [("a1".to_string(), Adaptive::up_to(2))].into(),
        ..Limits::default()
    }
}

struct World {
    host: HostState,
    ledger: Ledger,
    auth: AuthTable,
    now: u64,
    next_key: u128,
    keys: Vec<u128>,
}

impl World {
    fn apply(&mut self, limits: &Limits, policy: &ResourcePolicy, op: &Op) -> String {
        let pick = |keys: &[u128], i: u8| keys.get(usize::from(i) % keys.len().max(1)).copied();
        let out = match op.clone() {
            Op::Submit {
                subject,
                account,
                priority,
                keyed,
            } => {
                let keyed = (keyed > 0).then(|| {
                    let policy = crate::scheduler::KeyPolicy::ALL[usize::from(keyed / 3) % 5];
                    let debounce = if policy.keeps_newest() {
                        u64::from(keyed % 4) * 100
                    } else {
                        0
                    };
                    crate::scheduler::KeyArgs {
                        key: format!("k{}", keyed % 3),
                        policy,
                        supersede_running: policy.keeps_newest() && keyed % 2 == 0,
                        debounce_ms: debounce,
                        debounce_max_ms: debounce * 2,
                    }
                });
                let key = self.next_key;
                self.next_key += 1;
                self.keys.push(key);
                let args = SubmitArgs {
                    instance_id: format!("i{}", subject % 2),
                    subject: format!("s{subject}"),
                    account_id: (account > 0).then(|| format!("a{account}")),
                    run_id: format!("r{key}"),
                    mode: SubmitMode::Queue,
                    rss_mb: Some(100),
                    priority,
                    resubmit_expired: false,
                    keyed,
                };
                format!("{:?}", self.host.submit(limits, args, key, self.now))
            }
            Op::Release { pick: i, outcome } => {
                let outcome = [
                    Outcome::Unspecified,
                    Outcome::Ok,
                    Outcome::RateLimited,
                    Outcome::Overloaded,
                    Outcome::Failed,
                ][usize::from(outcome)];
                let report = Report {
                    outcome,
                    latency_ms: Some(10),
                };
                pick(&self.keys, i).map_or(String::new(), |k| {
                    format!(
                        "{:?}",
                        self.host.release_reporting(limits, k, report, self.now)
                    )
                })
            }
            Op::Park(i) => pick(&self.keys, i).map_or(String::new(), |k| {
                format!("{:?}", self.host.park(limits, k, self.now))
            }),
            Op::Unpark(i) => pick(&self.keys, i).map_or(String::new(), |k| {
                format!("{:?}", self.host.unpark(limits, k, self.now))
            }),
            Op::Renew(i) => pick(&self.keys, i).map_or(String::new(), |k| {
                format!("{:?}", self.host.renew(limits, k, Some(100), self.now))
            }),
            Op::Advance(ms) => {
                self.now += u64::from(ms);
                self.host.housekeeping(limits, self.now);
                self.ledger.housekeeping(policy, self.now);
                self.auth.prune(self.now);
                String::new()
            }
            Op::Authorize { run, step, tokens } => {
                let args = AuthorizeArgs {
                    run_id: format!("run{run}"),
                    step: u32::from(step),
                    subject: "s".into(),
                    account_id: Some("acct".into()),
                    model: "m".into(),
                    requested_output_tokens: u64::from(tokens),
                    estimated_input_tokens: 10,
                    estimated_cost: 0,
                };
                format!("{:?}", self.ledger.authorize(policy, args, self.now))
            }
            Op::Settle { run, step, tokens } => {
                let usage = Usage {
                    input_tokens: 10,
                    output_tokens: u64::from(tokens),
                    cost: 0,
                    coverage: if tokens % 7 == 0 {
                        Coverage::Partial
                    } else {
                        Coverage::Complete
                    },
                };
                let r = self.ledger.settle(
                    policy,
                    &format!("run{run}"),
                    u32::from(step),
                    usage,
                    self.now,
                );
                format!("{r:?}")
            }
            Op::Attempt { identity } => {
                let rule = BucketRule::new(2, 3_000, 2_000);
                format!(
                    "{:?}",
                    self.auth
                        .attempt("login", &format!("id{identity}"), rule, self.now)
                )
            }
        };
        self.host.take_changes();
        out
    }

    /// Every part through snapshot pieces of the current format and back.
    fn through_the_format(&self, limits: &LimitsRecord) -> World {
        let pieces = [
            Piece::Host {
                id: "h".into(),
                seq: 7,
                limits: limits.clone(),
                image: Box::new(self.host.image()),
            },
            Piece::Ledger {
                id: "h".into(),
                seq: 8,
                image: self.ledger.image(),
            },
            Piece::Auth {
                seq: 9,
                image: self.auth.image(),
            },
        ];
        let mut back = pieces.into_iter().map(|piece| {
            let mut bytes = Vec::new();
            encode_piece(&piece, &mut bytes).unwrap();
            let decoded = decode_piece(crate::store::journal::FORMAT, &bytes).unwrap();
            assert_eq!(decoded, piece, "a piece comes back as it went");
            decoded
        });
        let (Some(Piece::Host { image: h, .. }), Some(Piece::Ledger { image: l, .. })) =
            (back.next(), back.next())
        else {
            panic!("host and ledger pieces");
        };
        let Some(Piece::Auth { image: a, .. }) = back.next() else {
            panic!("auth piece");
        };
        World {
            host: HostState::from_image(*h).unwrap(),
            ledger: Ledger::from_image(l).unwrap(),
            auth: AuthTable::from_image(a).unwrap(),
            now: self.now,
            next_key: self.next_key,
            keys: self.keys.clone(),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_state_comes_back_through_the_format_and_decides_alike(
        before in proptest::collection::vec(op(), 0..80),
        after in proptest::collection::vec(op(), 0..40),
    ) {
        let limits = limits();
        let record = LimitsRecord {
            limits: limits.clone(),
            source: LimitsSource::Operator,
            revision: 3,
        };
        let policy = ResourcePolicy {
            reservation_ttl_ms: 2_000,
            allowances: [(
                "acct".to_string(),
                crate::ledger::Allowance { tokens: Some(5_000), cost: None, window_ms: 20_000 },
            )]
            .into(),
            ..ResourcePolicy::default()
        };
        let mut world = World {
            host: HostState::new(),
            ledger: Ledger::new(),
            auth: AuthTable::new(4),
            now: 1_000,
            next_key: 1,
            keys: Vec::new(),
        };
        for op in &before {
            world.apply(&limits, &policy, op);
        }
        let mut twin = world.through_the_format(&record);
        prop_assert_eq!(twin.host.image(), world.host.image());
        prop_assert_eq!(twin.ledger.image(), world.ledger.image());
        prop_assert_eq!(twin.auth.image(), world.auth.image());
        twin.host.audit(&limits, twin.now).map_err(TestCaseError::fail)?;
        for op in &after {
            let a = world.apply(&limits, &policy, op);
            let b = twin.apply(&limits, &policy, op);
            prop_assert_eq!(a, b, "after {:?}", op);
        }
        prop_assert_eq!(twin.host.image(), world.host.image());
    }
}
