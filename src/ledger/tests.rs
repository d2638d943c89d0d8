//! Unit tests of the ledger's arithmetic; the scenarios every store must pass are in
//! `tests/store_conformance.rs`.

use super::*;

fn policy() -> ResourcePolicy {
    ResourcePolicy {
        default: Some(Budget {
            max_tokens: Some(1_000),
            ..Budget::default()
        }),
        ..ResourcePolicy::default()
    }
}

fn args(run: &str, step: u32, requested: u64, input: u64) -> AuthorizeArgs {
    AuthorizeArgs {
        run_id: run.into(),
        step,
        subject: "alice".into(),
        account_id: None,
        model: "m".into(),
        requested_output_tokens: requested,
        estimated_input_tokens: input,
        estimated_cost: 0,
    }
}

fn complete(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cost: 0,
        coverage: Coverage::Complete,
    }
}

#[test]
fn dollars_become_whole_micro_dollars() {
    assert_eq!(usd_to_micros(0.1), Some(100_000));
    assert_eq!(
        usd_to_micros(0.1).unwrap() + usd_to_micros(0.2).unwrap(),
        usd_to_micros(0.3).unwrap()
    );
    assert_eq!(usd_to_micros(0.0000004), Some(0));
    assert_eq!(usd_to_micros(0.0000005), Some(1));
    for bad in [-0.01, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 2e9] {
        assert_eq!(usd_to_micros(bad), None, "{bad}");
    }
    assert_eq!(micros_to_usd(1_500_000), 1.5);
}

#[test]
fn intersecting_budgets_take_the_lowest_caps_and_the_strictest_policy() {
    let mut p = policy();
    p.default.as_mut().unwrap().unknown_usage = UnknownUsage::Allow;
    p.subjects.insert(
        "alice".into(),
        Budget {
            max_tokens: Some(500),
            max_cost: Some(9),
            unknown_usage: UnknownUsage::Defer,
        },
    );
    p.accounts.insert(
        "acct".into(),
        Budget {
            max_tokens: Some(800),
            max_cost: None,
            unknown_usage: UnknownUsage::Allow,
        },
    );
    let e = p.effective("alice", Some("acct"));
    assert_eq!(
        (e.max_tokens, e.max_cost, e.unknown_usage),
        (Some(500), Some(9), Some(UnknownUsage::Defer))
    );
    let e = p.effective("bob", None);
    assert_eq!(
        (e.max_tokens, e.max_cost, e.unknown_usage),
        (Some(1_000), None, Some(UnknownUsage::Allow))
    );
    let none = ResourcePolicy::default().effective("bob", None);
    assert_eq!(none.unknown_usage, None, "no block applies");
}

#[test]
fn settling_refunds_the_unused_part_of_a_reservation() {
    let p = policy();
    let mut l = Ledger::new();
    let a = l.authorize(&p, args("r", 1, 600, 100), 0).unwrap();
    assert_eq!(
        (a.granted_output_tokens, a.remaining_tokens),
        (600, Some(300))
    );
    assert!(!l.settle(&p, "r", 1, complete(100, 50), 1).unwrap());
    let b = l.authorize(&p, args("r", 2, 2_000, 100), 2).unwrap();
    assert_eq!(
        (b.granted_output_tokens, b.remaining_tokens),
        (750, Some(0)),
        "150 used, 100 more input: 750 left for output"
    );
    assert_eq!(l.stats().open, 1);
}

#[test]
fn reservations_turn_uncertain_after_their_ttl_and_runs_are_forgotten_after_retention() {
    let p = ResourcePolicy {
        reservation_ttl_ms: 100,
        run_retention_ms: 1_000,
        ..policy()
    };
    let mut l = Ledger::new();
    l.authorize(&p, args("r", 1, 10, 10), 0).unwrap();
    l.authorize(&p, args("done", 1, 10, 10), 0).unwrap();
    l.settle(&p, "done", 1, complete(1, 1), 0).unwrap();
    l.housekeeping(&p, 99);
    assert_eq!(l.stats().uncertain, 0);
    l.housekeeping(&p, 100);
    assert_eq!((l.stats().open, l.stats().uncertain), (1, 1));
    // Past retention (and the once-a-minute forget pass), the settled run is forgotten; the
    // run holding an uncertain reservation is not.
    l.housekeeping(&p, 61_000);
    assert_eq!(l.run_count(), 1);
    let (open, more) = l.open_reservations(10, 61_000);
    assert!(!more);
    assert_eq!(
        (open[0].run_id.as_str(), open[0].state, open[0].age_ms),
        ("r", StepState::Uncertain, 61_000)
    );
}

#[test]
fn settled_steps_leave_no_deadline_behind() {
    let p = policy();
    let mut l = Ledger::new();
    for i in 0..100 {
        let run = format!("r{i}");
        l.authorize(&p, args(&run, 1, 1, 1), i).unwrap();
        l.settle(&p, &run, 1, complete(1, 1), i).unwrap();
    }
    l.authorize(&p, args("open", 1, 1, 1), 100).unwrap();
    assert_eq!(
        l.deadlines.len(),
        1,
        "only the open reservation waits for its TTL"
    );
}

/// Found by the differential test against the Redis store: with a run's cost budget and its
/// account's token allowance both spent, the per-run cap is the reason, whichever of tokens and
/// cost it limits.
#[test]
fn a_spent_per_run_cap_is_the_reason_before_a_spent_allowance() {
    let policy = ResourcePolicy {
        default: Some(Budget {
            max_cost: Some(500),
            ..Budget::default()
        }),
        allowances: [(
            "acct".to_string(),
            Allowance {
                tokens: Some(200),
                cost: None,
                window_ms: 60_000,
            },
        )]
        .into(),
        ..ResourcePolicy::default()
    };
    let mut ledger = Ledger::new();
    let with_account = |step| AuthorizeArgs {
        account_id: Some("acct".into()),
        ..args("r", step, 1, 0)
    };
    let a = ledger.authorize(&policy, with_account(1), 0).unwrap();
    assert_eq!(a.decision, Decision::Allow);
    let usage = Usage {
        cost: 500,
        ..complete(99, 101)
    };
    ledger.settle(&policy, "r", 1, usage, 1).unwrap();
    let a = ledger.authorize(&policy, with_account(2), 2).unwrap();
    assert_eq!(
        (a.decision, a.reason),
        (Decision::Deny, Some(Reason::ResourceLimit))
    );
}

/// A usage of 2^64 − 1 tokens (what a response can claim) saturates the run's and the
/// window's counts: it never wraps them, so the next request is refused, not admitted.
#[test]
fn a_usage_past_any_count_saturates_and_never_wraps_an_allowance() {
    let policy = ResourcePolicy {
        allowances: [(
            "acct".to_string(),
            Allowance {
                tokens: Some(1_000),
                cost: None,
                window_ms: 60_000,
            },
        )]
        .into(),
        ..ResourcePolicy::default()
    };
    let mut ledger = Ledger::new();
    let with_account = |run: &str| AuthorizeArgs {
        account_id: Some("acct".into()),
        ..args(run, 1, 100, 10)
    };
    for run in ["a", "b"] {
        let a = ledger.authorize(&policy, with_account(run), 0).unwrap();
        assert_eq!(a.decision, Decision::Allow);
    }
    let usage = Usage {
        cost: u64::MAX,
        ..complete(u64::MAX, 1)
    };
    ledger.settle(&policy, "a", 1, usage, 1).unwrap();
    ledger.settle(&policy, "b", 1, complete(1, 1), 1).unwrap();
    let a = ledger.authorize(&policy, with_account("c"), 2).unwrap();
    assert_eq!(
        (a.decision, a.reason),
        (Decision::Deny, Some(Reason::QuotaExhausted))
    );
}
