//! Upgrades lose nothing: data dirs kept in the repository, one per format version this
//! authority has written (`tests/fixtures/data-dir/v<N>/`), each holding every kind of state,
//! open with every build and hold exactly what was written.
//!
//! [`write_every_kind_of_state`] is how each fixture was made: it runs against the store of the
//! build that wrote it, on a manual clock (so times and grants are the same every run; ticket
//! ids are random, so tickets are found by run id). When a new format version lands, its
//! fixture is the dir `a_dir_written_now_holds_every_item` leaves in
//! `target/tmp/upgrade-fresh/`, copied to `tests/fixtures/data-dir/v<N>/` without its `LOCK`;
//! the old ones stay.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use admission_authority::auth::{AuthPolicy, AuthVerdict, BucketRule};
use admission_authority::clock::ManualClock;
use admission_authority::ledger::{
    Allowance, AuthorizeArgs, Budget, Coverage, Decision, ResourcePolicy, StepState, UnknownUsage,
    Usage,
};
use admission_authority::ratelimit::{Hit, Unit};
use admission_authority::scheduler::{
    Adaptive, Blocker, HeldArgs, KeyArgs, KeyPolicy, Limits, LimitsSource, LimitsTable,
    MemoryLimits, Outcome, Report, SubmitArgs, SubmitError, SubmitMode, TicketState,
};
use admission_authority::store::journal::{JournalOptions, SyncPolicy};
use admission_authority::store::memory::{MemoryStore, OpenOptions};
use admission_authority::store::{
    AuthStore, LedgerStore, Policy, RateLimitStore, Store, TicketId, TicketStore,
};

/// The store time the fixture's state was written at (ms): the manual clock's start.
const T0: u64 = 1_000_000;
const HOST: &str = "shop";
const OPS_HOST: &str = "ops-host";
/// The host of the keyed tickets (from format 4's fixture on).
const CHAT_HOST: &str = "chat";

fn limits() -> Limits {
    Limits {
        total: 2,
        per_subject: 2,
        queue_total: 10,
        queue_hard_total: 10,
        lease_ttl_ms: 3_600_000,
        retention_ms: 3_600_000,
        memory: MemoryLimits::from_ratio(4096, 0.9),
        adaptive: [("provider".to_string(), Adaptive::up_to(4))].into(),
        ..Limits::default()
    }
}

fn policy() -> Policy {
    let mut auth = AuthPolicy::default();
    auth.buckets
        .insert("login".into(), BucketRule::new(2, 3_600_000, 3_600_000));
    Policy {
        limits: LimitsTable::uniform(limits()),
        auth,
        resources: ResourcePolicy {
            default: Some(Budget {
                max_tokens: Some(100_000),
                max_cost: None,
                unknown_usage: UnknownUsage::Reject,
            }),
            allowances: [(
                "acct".to_string(),
                Allowance {
                    tokens: Some(50_000),
                    cost: None,
                    window_ms: 86_400_000,
                },
            )]
            .into(),
            reservation_ttl_ms: 60_000,
            ..ResourcePolicy::default()
        },
    }
}

fn open(dir: &Path, clock: &ManualClock, snapshot_after_bytes: u64) -> MemoryStore {
    let options = OpenOptions {
        dir: dir.to_path_buf(),
        journal: JournalOptions {
            sync: SyncPolicy::Always,
            sync_interval: Duration::from_millis(10),
            snapshot_after_bytes,
        },
    };
    MemoryStore::open(&options, policy(), Arc::new(clock.clone()))
        .expect("the data dir opens")
        .0
}

fn submit(subject: &str, account: Option<&str>, run: &str, priority: u8) -> SubmitArgs {
    SubmitArgs {
        instance_id: "replica-1".into(),
        subject: subject.into(),
        account_id: account.map(str::to_string),
        run_id: run.into(),
        mode: SubmitMode::Queue,
        rss_mb: Some(1000),
        priority,
        resubmit_expired: false,
        keyed: None,
    }
}

fn authorize(run: &str, step: u32, account: Option<&str>, tokens: u64) -> AuthorizeArgs {
    AuthorizeArgs {
        run_id: run.into(),
        step,
        subject: "alice".into(),
        account_id: account.map(str::to_string),
        model: "model-x".into(),
        requested_output_tokens: tokens,
        estimated_input_tokens: 100,
        estimated_cost: 0,
    }
}

async fn ok(store: &MemoryStore, args: SubmitArgs) -> TicketId {
    ok_on(store, HOST, args).await
}

async fn ok_on(store: &MemoryStore, host: &str, args: SubmitArgs) -> TicketId {
    store.submit(host, args).await.unwrap().unwrap().0
}

/// A Submit of `run` on `CHAT_HOST` with a key.
fn keyed(
    run: &str,
    key: &str,
    policy: KeyPolicy,
    supersede_running: bool,
    debounce_ms: u64,
) -> SubmitArgs {
    SubmitArgs {
        keyed: Some(KeyArgs {
            key: key.into(),
            policy,
            supersede_running,
            debounce_ms,
            debounce_max_ms: debounce_ms * 2,
        }),
        ..submit("quinn", None, run, 3)
    }
}

/// Every kind of state the data dir keeps, written in two process lifetimes (the first ends
/// with a snapshot, so a fixture has both a snapshot and log records after it).
async fn write_every_kind_of_state(dir: &Path) {
    let clock = ManualClock::new(T0);
    // First lifetime: a snapshot after every few records.
    let store = open(dir, &clock, 256);
    // Retained ended tickets: one released, one cancelled.
    let done = ok(&store, submit("zed", None, "run-released", 3)).await;
    store.release(&done, Report::default()).await.unwrap();
    // An adaptive account's cap cut by a 429 (4 → 2).
    let provider = ok(&store, submit("pia", Some("provider"), "run-provider", 3)).await;
    store
        .release(
            &provider,
            Report {
                outcome: Outcome::RateLimited,
                latency_ms: Some(250),
            },
        )
        .await
        .unwrap();
    // Two admitted, then one parked (its slot lent out, then taken by carol).
    ok(&store, submit("alice", None, "run-admitted", 3)).await;
    let parked = ok(&store, submit("bob", None, "run-parked", 3)).await;
    store.park(&parked).await.unwrap().unwrap().unwrap();
    ok(&store, submit("carol", None, "run-carol", 3)).await;
    clock.advance(1_000);
    // Queued at three priorities; one withdrawn (cancelled, retained).
    ok(&store, submit("dave", None, "run-queued-p1", 1)).await;
    ok(&store, submit("erin", None, "run-queued-p5", 5)).await;
    ok(&store, submit("fay", None, "run-queued-p3", 3)).await;
    let withdrawn = ok(&store, submit("gus", None, "run-cancelled", 3)).await;
    store.release(&withdrawn, Report::default()).await.unwrap();
    // Operator limits on another host, changed twice.
    let first = store
        .set_limits(
            OPS_HOST,
            Limits {
                total: 7,
                ..limits()
            },
            0,
        )
        .await
        .unwrap()
        .unwrap();
    store
        .set_limits(
            OPS_HOST,
            Limits {
                total: 9,
                ..limits()
            },
            first.revision,
        )
        .await
        .unwrap()
        .unwrap();
    // Keys (from format 4's fixture on), in the snapshot: a serial keep-newest key whose
    // holder runs, whose first waiter a newer one superseded (telling the holder).
    ok_on(
        &store,
        CHAT_HOST,
        keyed(
            "run-key-holder",
            "k1",
            KeyPolicy::SerialKeepNewest,
            false,
            0,
        ),
    )
    .await;
    ok_on(
        &store,
        CHAT_HOST,
        keyed("run-key-first", "k1", KeyPolicy::SerialKeepNewest, false, 0),
    )
    .await;
    ok_on(
        &store,
        CHAT_HOST,
        keyed("run-key-newest", "k1", KeyPolicy::SerialKeepNewest, true, 0),
    )
    .await;
    // The sweep takes the snapshot that is due; closing waits for it to be written.
    store.sweep().await.unwrap();
    store.close();
    drop(store);

    // Second lifetime: everything goes to the log (no snapshot is due).
    clock.advance(1_000);
    let store = open(dir, &clock, 64 << 20);
    // Reservations: one to become uncertain, one open, one settled; an allowance window.
    store
        .authorize(HOST, authorize("run-uncertain", 1, None, 500))
        .await
        .unwrap()
        .unwrap();
    clock.advance(61_000);
    store
        .authorize(HOST, authorize("run-open", 1, Some("acct"), 700))
        .await
        .unwrap()
        .unwrap();
    store
        .authorize(HOST, authorize("run-settled", 1, None, 300))
        .await
        .unwrap()
        .unwrap();
    store
        .settle(
            HOST,
            "run-settled",
            1,
            Usage {
                input_tokens: 120,
                output_tokens: 80,
                cost: 0,
                coverage: Coverage::Complete,
            },
        )
        .await
        .unwrap()
        .unwrap();
    // Auth: a bucket with attempts counted, and a lockout.
    let login = policy().auth.buckets["login"];
    store
        .auth_attempt("login", "counted@example.com", login)
        .await
        .unwrap();
    for _ in 0..3 {
        store
            .auth_attempt("login", "locked@example.com", login)
            .await
            .unwrap();
    }
    // A holder re-registers a ticket the store never had (it counts above the caps).
    store
        .reclaim(
            &TicketId {
                host_id: HOST.into(),
                key: 0x5eed,
            },
            HeldArgs {
                instance_id: "replica-2".into(),
                subject: "hank".into(),
                account_id: None,
                run_id: "run-reclaimed".into(),
                grant: 42,
                priority: 3,
                key: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
    // Envoy's rate limit counters (from format 2's fixture on): a count, and a charge past
    // its limit, in day windows of the dir's clock.
    for _ in 0..3 {
        store
            .rate_limit_hits("ai-gateway", 10, &[rate_hit("tenant=acme|day", 1)])
            .await
            .unwrap();
    }
    store
        .rate_limit_hits("ai-gateway", 10, &[rate_hit("tokens=acme|day", 130)])
        .await
        .unwrap();
    // Keys in the log: a debounced keep-newest key, its first ticket superseded; a
    // reject-new key's holder, and a Submit it refused.
    ok_on(
        &store,
        CHAT_HOST,
        keyed(
            "run-debounced-1",
            "k2",
            KeyPolicy::KeepNewest,
            false,
            600_000,
        ),
    )
    .await;
    ok_on(
        &store,
        CHAT_HOST,
        keyed(
            "run-debounced-2",
            "k2",
            KeyPolicy::KeepNewest,
            false,
            600_000,
        ),
    )
    .await;
    ok_on(
        &store,
        CHAT_HOST,
        keyed("run-solo", "k3", KeyPolicy::RejectNew, false, 0),
    )
    .await;
    let busy = store
        .submit(
            CHAT_HOST,
            keyed("run-solo-2", "k3", KeyPolicy::RejectNew, false, 0),
        )
        .await
        .unwrap();
    assert!(matches!(busy, Err(SubmitError::KeyBusy { .. })), "{busy:?}");
    // A subtraction (from format 3's fixture on): an estimate charged, then taken back.
    store
        .rate_limit_hits("ai-gateway", 10, &[rate_hit("tokens=acme|day", 40)])
        .await
        .unwrap();
    store
        .rate_limit_subtract("ai-gateway", &[rate_hit("tokens=acme|day", 40)])
        .await
        .unwrap();
    store.close();
}

fn rate_hit(key: &str, addend: u64) -> Hit {
    Hit {
        key: key.into(),
        unit: Unit::Day,
        addend,
    }
}

/// Open `dir` (a copy: opening rewrites an old dir) and check every item
/// [`write_every_kind_of_state`] wrote (the rate limit counters only where the fixture's
/// build wrote them: `rate_limits`; its subtraction, which leaves the same counts, is in the
/// dirs of format 3 on).
async fn check_every_item(dir: &Path, rate_limits: bool, keys: bool) {
    // The fixture's store time goes on from where it stopped.
    let clock = ManualClock::new(0);
    let store = open(dir, &clock, 64 << 20);
    let stats = store.stats(HOST).await.unwrap();
    assert_eq!(
        (stats.in_flight, stats.queued, stats.parked),
        (3, 3, 1),
        "alice and carol admitted, hank reclaimed; dave, erin, fay queued; bob parked"
    );
    let c = &stats.counters;
    assert_eq!(
        (
            c.submitted,
            c.admitted,
            c.released,
            c.cancelled,
            c.reclaimed
        ),
        (9, 5, 2, 1, 1),
        "{c:?}"
    );
    assert_eq!(
        c.outcomes[Outcome::RateLimited.index().unwrap()],
        1,
        "the provider's 429, reported"
    );
    let (list, _) = store.list(HOST, 100).await.unwrap();
    let by_run = |run: &str| {
        list.iter()
            .find(|t| t.run_id == run)
            .unwrap_or_else(|| panic!("{run} is live: {list:?}"))
    };
    assert_eq!(by_run("run-admitted").state, TicketState::Admitted);
    assert_eq!(by_run("run-carol").state, TicketState::Admitted);
    assert_eq!(by_run("run-parked").state, TicketState::Parked);
    assert_eq!(by_run("run-reclaimed").state, TicketState::Admitted);
    assert_eq!(by_run("run-reclaimed").grant, 42);
    for (run, priority) in [
        ("run-queued-p1", 1),
        ("run-queued-p5", 5),
        ("run-queued-p3", 3),
    ] {
        let t = by_run(run);
        assert_eq!(
            (t.state, t.priority),
            (TicketState::Queued, priority),
            "{run}"
        );
    }
    // Dispatch order kept: priority 1, then 3, then 5.
    assert_eq!(
        [
            by_run("run-queued-p1").place,
            by_run("run-queued-p3").place,
            by_run("run-queued-p5").place
        ],
        [1, 2, 3]
    );
    // Grants: each admission's, from the manual clock's µs (the grant floor).
    assert!(by_run("run-admitted").grant >= T0 * 1000, "{list:?}");
    assert!(by_run("run-carol").grant > by_run("run-admitted").grant);
    // Retained ended tickets answer a repeated Submit with their final state.
    for (run, state) in [
        ("run-released", TicketState::Released),
        ("run-provider", TicketState::Released),
        ("run-cancelled", TicketState::Cancelled),
    ] {
        let (_, view) = store
            .submit(HOST, submit("zed", None, run, 3))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(view.state, state, "{run}");
    }
    // The adaptive cap cut by the 429.
    let provider = stats
        .accounts
        .iter()
        .find(|r| r.name == "provider")
        .expect("the adaptive account");
    assert_eq!(provider.cap, 2, "{provider:?}");
    // Operator limits with their revision.
    let record = store.get_limits(OPS_HOST).await.unwrap();
    assert_eq!(
        (record.limits.total, record.source, record.revision),
        (9, LimitsSource::Operator, 3),
        "created at 1, then two SetLimits"
    );
    // Reservations: uncertain, open; settled.
    let (reservations, _) = store.reservations(HOST, 100).await.unwrap();
    let state_of = |run: &str| {
        reservations
            .iter()
            .find(|r| r.run_id == run)
            .map(|r| r.state)
    };
    assert_eq!(state_of("run-uncertain"), Some(StepState::Uncertain));
    assert_eq!(state_of("run-open"), Some(StepState::Reserved));
    assert_eq!(state_of("run-settled"), None, "settled: no longer held");
    let ledger = store.ledger_stats(HOST).await.unwrap();
    assert_eq!((ledger.open, ledger.uncertain, ledger.settled), (2, 1, 1));
    // A replay answers the first decision; the allowance window holds what was reserved.
    let again = store
        .authorize(HOST, authorize("run-open", 1, Some("acct"), 700))
        .await
        .unwrap()
        .unwrap();
    assert!(again.replay && again.decision == Decision::Allow);
    let next = store
        .authorize(HOST, authorize("run-open-2", 1, Some("acct"), 49_500))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        next.granted_output_tokens,
        50_000 - 800 - 100,
        "the window already holds run-open's 800 tokens"
    );
    // Auth: the counted bucket has one attempt left; the lockout holds.
    let login = policy().auth.buckets["login"];
    let counted = store
        .auth_peek("login", "counted@example.com", login)
        .await
        .unwrap();
    assert_eq!(
        (counted.verdict, counted.remaining),
        (AuthVerdict::Allowed, 1)
    );
    let locked = store
        .auth_peek("login", "locked@example.com", login)
        .await
        .unwrap();
    assert_eq!(locked.verdict, AuthVerdict::LockedOut);
    // Rate limit counters: looks see the counts, and the hottest list holds both.
    let looks = store
        .rate_limit_hits(
            "ai-gateway",
            10,
            &[
                rate_hit("tenant=acme|day", 0),
                rate_hit("tokens=acme|day", 0),
            ],
        )
        .await
        .unwrap()
        .counts;
    let hottest: Vec<(String, u64)> = store
        .rate_limit_counters(&["ai-gateway".to_string()], 10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.key, c.count))
        .collect();
    if rate_limits {
        assert_eq!(looks, vec![Some(3), Some(130)]);
        assert_eq!(
            hottest,
            vec![
                ("tokens=acme|day".into(), 130),
                ("tenant=acme|day".into(), 3)
            ]
        );
    } else {
        assert_eq!(looks, vec![Some(0), Some(0)], "written before rate limits");
        assert!(hottest.is_empty());
    }
    if keys {
        check_keys(&store).await;
    }
    store.close();
}

/// The keyed tickets of `CHAT_HOST`, as [`write_every_kind_of_state`] left them.
async fn check_keys(store: &MemoryStore) {
    let (list, _) = store.list(CHAT_HOST, 100).await.unwrap();
    let by_run = |run: &str| {
        list.iter()
            .find(|t| t.run_id == run)
            .unwrap_or_else(|| panic!("{run} is live: {list:?}"))
    };
    let holder = by_run("run-key-holder");
    let newest = by_run("run-key-newest");
    assert_eq!(holder.state, TicketState::Admitted);
    assert_eq!(
        holder.keyed,
        Some(("k1".into(), KeyPolicy::SerialKeepNewest))
    );
    assert_eq!(
        holder.superseded_by,
        Some(newest.key),
        "told by supersede_running"
    );
    assert_eq!(
        (newest.state, newest.blocked_by),
        (TicketState::Queued, Some(Blocker::Key))
    );
    let debounced = by_run("run-debounced-2");
    assert_eq!(debounced.blocked_by, Some(Blocker::Key));
    assert!(debounced.debounce_left_ms > 0, "{debounced:?}");
    assert_eq!(
        by_run("run-solo").keyed,
        Some(("k3".into(), KeyPolicy::RejectNew))
    );
    // Superseded tickets answer their end and who ended them.
    for (run, key, policy, by) in [
        (
            "run-key-first",
            "k1",
            KeyPolicy::SerialKeepNewest,
            newest.key,
        ),
        (
            "run-debounced-1",
            "k2",
            KeyPolicy::KeepNewest,
            debounced.key,
        ),
    ] {
        let (_, view) = store
            .submit(CHAT_HOST, keyed(run, key, policy, false, 0))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (view.state, view.superseded_by),
            (TicketState::Superseded, Some(by)),
            "{run}"
        );
    }
    let c = store.stats(CHAT_HOST).await.unwrap().counters;
    assert_eq!((c.superseded, c.key_refused), (2, 1), "{c:?}");
    // The reject-new key still refuses, naming its holder.
    let busy = store
        .submit(
            CHAT_HOST,
            keyed("run-solo-3", "k3", KeyPolicy::RejectNew, false, 0),
        )
        .await
        .unwrap();
    assert_eq!(
        busy.err(),
        Some(SubmitError::KeyBusy {
            holder: by_run("run-solo").key
        })
    );
}

fn fixture(version: u32) -> PathBuf {
    fixture_named(&format!("v{version}"))
}

fn fixture_named(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/data-dir")
        .join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[tokio::test]
async fn a_dir_written_now_holds_every_item() {
    let dir = scratch("upgrade-fresh");
    write_every_kind_of_state(&dir).await;
    assert_eq!(formats(&dir).0, "format 5");
    let copy = scratch("upgrade-fresh-opened");
    copy_dir(&dir, &copy);
    check_every_item(&copy, true, true).await;
}

/// What `dir` holds now: its FORMAT line, and each log segment's and snapshot's format (the
/// last byte of its 8-byte magic).
fn formats(dir: &Path) -> (String, Vec<(String, u8)>) {
    let format = std::fs::read_to_string(dir.join("FORMAT"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("format "))
        .unwrap()
        .to_string();
    let mut files: Vec<(String, u8)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.ends_with(".aal") || name.ends_with(".aas")
        })
        // A segment made by a process killed before its header was written has none.
        .filter_map(|e| {
            let bytes = std::fs::read(e.path()).unwrap();
            Some((e.file_name().to_string_lossy().to_string(), *bytes.get(7)?))
        })
        .collect();
    files.sort();
    (format, files)
}

/// The dir of format 1 (written by the build before the data dir had a format of its own)
/// opens, every item is as written, and it has been rewritten in format 5: a second opening
/// reads only format 5 and finds the same.
#[tokio::test]
async fn the_format_1_fixture_opens_with_every_item_and_is_rewritten() {
    let dir = scratch("upgrade-v1");
    copy_dir(&fixture(1), &dir);
    assert_eq!(formats(&dir).0, "format 1");
    check_every_item(&dir, false, false).await;
    let (format, files) = formats(&dir);
    assert_eq!(format, "format 5");
    assert!(files.iter().all(|(_, v)| *v == 5), "{files:?}");
    assert!(files.iter().any(|(f, _)| f.ends_with(".aas")), "{files:?}");
    // The check's own calls (repeated Submits, Authorizes) are in the new log; what it wrote
    // itself is checked again after a restart in format 5.
    let clock = ManualClock::new(0);
    let store = open(&dir, &clock, 64 << 20);
    let stats = store.stats(HOST).await.unwrap();
    assert_eq!((stats.in_flight, stats.queued, stats.parked), (3, 3, 1));
    store.close();
}

/// The dir of format 2 as the last build of format 2 wrote it (with rate limit counters)
/// opens with every item, and is rewritten in format 5: a build of format 2 refuses it from
/// then on as newer, rather than misread a subtraction.
#[tokio::test]
async fn the_format_2_fixture_opens_with_every_item_and_is_rewritten() {
    let dir = scratch("upgrade-v2");
    copy_dir(&fixture(2), &dir);
    assert_eq!(formats(&dir).0, "format 2");
    check_every_item(&dir, true, false).await;
    let (format, files) = formats(&dir);
    assert_eq!(format, "format 5");
    assert!(files.iter().all(|(_, v)| *v == 5), "{files:?}");
}

/// The dir of format 3 as the last build of format 3 wrote it (with a rate limit subtraction
/// in its log) opens with every item, and is rewritten in format 5.
#[tokio::test]
async fn the_format_3_fixture_opens_with_every_item() {
    let dir = scratch("upgrade-v3");
    copy_dir(&fixture(3), &dir);
    assert_eq!(formats(&dir).0, "format 3");
    check_every_item(&dir, true, false).await;
    let (format, files) = formats(&dir);
    assert_eq!(format, "format 5");
    assert!(files.iter().all(|(_, v)| *v == 5), "{files:?}");
}

/// The dir of format 4 as the last build of format 4 wrote it (with keyed tickets in its
/// snapshot and its log) opens with every item, and is rewritten in format 5.
#[tokio::test]
async fn the_format_4_fixture_opens_with_every_item() {
    let dir = scratch("upgrade-v4");
    copy_dir(&fixture(4), &dir);
    assert_eq!(formats(&dir).0, "format 4");
    check_every_item(&dir, true, true).await;
    let (format, files) = formats(&dir);
    assert_eq!(format, "format 5");
    assert!(files.iter().all(|(_, v)| *v == 5), "{files:?}");
}

/// The dir of format 5 as it is written now (its snapshot with the places of ended keyed
/// tickets) opens with every item.
#[tokio::test]
async fn the_format_5_fixture_opens_with_every_item() {
    let dir = scratch("upgrade-v5");
    copy_dir(&fixture(5), &dir);
    assert_eq!(formats(&dir).0, "format 5");
    check_every_item(&dir, true, true).await;
}

/// A dir of format 2 kept from the build that introduced the format, before rate limit counters
/// were journaled in it (record 4 and snapshot piece 4, added to format 2 before it was
/// released): it opens with every item, and without counters.
#[tokio::test]
async fn a_format_2_dir_written_before_rate_limits_opens_with_every_item() {
    let dir = scratch("upgrade-v2-before-rate-limits");
    copy_dir(&fixture_named("v2-before-rate-limits"), &dir);
    assert_eq!(formats(&dir).0, "format 2");
    check_every_item(&dir, false, false).await;
    assert_eq!(formats(&dir).0, "format 5");
}

/// A crash at any point of the rewrite of a format 1 dir leaves one that opens with every
/// item. Opening the fixture (segments up to 3) starts segment 4 for its own records, then the
/// rewrite starts segment 5, writes snapshot 5, then FORMAT, then removes what snapshot 5
/// replaces. Each state a SIGKILL can leave on the way is made here and opened.
#[tokio::test]
async fn a_rewrite_cut_short_at_any_step_leaves_a_dir_that_opens() {
    // The finished rewrite, to take its snapshot from.
    let done = scratch("upgrade-rewritten");
    copy_dir(&fixture(1), &done);
    let clock = ManualClock::new(0);
    open(&done, &clock, 64 << 20).close();
    let name = |kind: &str, n: u64| match kind {
        "log" => format!("log-{n:016}.aal"),
        _ => format!("snapshot-{n:016}.aas"),
    };
    let snapshot_bytes = std::fs::read(done.join(name("snapshot", 5))).unwrap();
    let header = b"AAlog\0\0\x04";
    let cut = |d: &Path, step: usize| {
        std::fs::write(d.join(name("log", 4)), header).unwrap();
        if step >= 1 {
            std::fs::write(d.join(name("log", 5)), header).unwrap();
        }
        if step == 2 {
            let tmp = d.join(format!("{}.tmp", name("snapshot", 5)));
            std::fs::write(tmp, &snapshot_bytes[..snapshot_bytes.len() / 2]).unwrap();
        }
        if step >= 3 {
            std::fs::write(d.join(name("snapshot", 5)), &snapshot_bytes).unwrap();
        }
        if step >= 4 {
            std::fs::copy(done.join("FORMAT"), d.join("FORMAT")).unwrap();
        }
    };
    for (step, what) in [
        "its own segment begun, nothing written to it",
        "the new segment made",
        "the snapshot half written",
        "the snapshot in place, FORMAT still 1",
        "FORMAT 4, the replaced files not yet removed",
    ]
    .into_iter()
    .enumerate()
    {
        let dir = scratch(&format!("upgrade-cut-{step}"));
        copy_dir(&fixture(1), &dir);
        cut(&dir, step);
        eprintln!("cut short: {what}");
        check_every_item(&dir, false, false).await;
        assert_eq!(formats(&dir).0, "format 5", "{what}");
    }
}

/// A dir of a newer format than this build reads is refused, naming both versions.
#[test]
fn a_dir_of_a_newer_format_is_refused_naming_both_versions() {
    let dir = scratch("upgrade-newer");
    copy_dir(&fixture(3), &dir);
    std::fs::write(
        dir.join("FORMAT"),
        "admission-authority data dir\nformat 6\nepoch_us 0\n",
    )
    .unwrap();
    let options = OpenOptions {
        dir: dir.clone(),
        journal: JournalOptions {
            sync: SyncPolicy::Always,
            sync_interval: Duration::from_millis(10),
            snapshot_after_bytes: 64 << 20,
        },
    };
    let err = MemoryStore::open(&options, policy(), Arc::new(ManualClock::new(0)))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("format 6") && err.contains("formats 1 to 5") && err.contains("FORMAT"),
        "{err}"
    );
    // A file of a newer format is refused the same way, even under a FORMAT this build reads.
    copy_dir(&fixture(3), &dir);
    let segment = formats(&dir)
        .1
        .into_iter()
        .find(|(f, _)| f.ends_with(".aal") && std::fs::metadata(dir.join(f)).unwrap().len() > 8)
        .unwrap()
        .0;
    let mut bytes = std::fs::read(dir.join(&segment)).unwrap();
    bytes[7] = 6;
    std::fs::write(dir.join(&segment), bytes).unwrap();
    let err = MemoryStore::open(&options, policy(), Arc::new(ManualClock::new(0)))
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains(&segment) && err.contains("format 6") && err.contains("newer"),
        "{err}"
    );
}

const BIN: &str = env!("CARGO_BIN_EXE_admission-authority");

/// [`policy`] as a configuration file, for the real binary: on the fixture's own limits, a
/// start changes nothing but the leases (a start on other limits would dispatch waiters).
fn fixture_config() -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("upgrade-fixture.yaml");
    std::fs::write(
        &path,
        "scheduling:\n  total: 2\n  per_subject: 2\n  queue: { total: 10, hard_total: 10 }\n  \
         lease_ttl: 1h\n  retention: 1h\n  accounts:\n    provider: { adaptive: { max: 4 } }\n\
         memory: { max_rss_mb: 4096, soft_ratio: 0.9 }\n\
         resources:\n  default: { max_tokens: 100000, unknown_usage: reject }\n  \
         reservation_ttl: 60s\n\
         allowances:\n  acct: { tokens: 50000, window: 24h }\n\
         auth:\n  buckets:\n    login: { max_attempts: 2, window: 1h, lockout: 1h }\n",
    )
    .unwrap();
    path
}

/// A child process, SIGKILLed when dropped (a failed assertion leaves no server behind).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `serve` on `dir` with the fixture's configuration, stdout piped.
fn serve_on(dir: &Path) -> std::process::Child {
    std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(fixture_config())
        .arg("--data-dir")
        .arg(dir)
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// `data-dir inspect` on `dir`: its exit status and stdout.
fn inspect(dir: &Path, json: bool) -> (bool, String) {
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["data-dir", "inspect"]).arg(dir);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Every file of `dir` with its bytes.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().to_string(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn data_dir_inspect_prints_each_count_and_changes_nothing() {
    for version in [3, 2, 1] {
        let dir = scratch(&format!("upgrade-inspect-v{version}"));
        copy_dir(&fixture(version), &dir);
        let before = contents(&dir);
        let (ok, text) = inspect(&dir, false);
        assert!(ok, "{text}");
        for line in [
            format!("format {version} (this build writes format 5)"),
            "in use: no".to_string(),
            "hosts: 2".to_string(),
            "shop: admitted 3, queued 3, parked 1, retained 3; reservations open 2 (uncertain \
             1), steps settled 1; limits revision 1 (file), total 2"
                .to_string(),
            "ops-host: admitted 0, queued 0, parked 0, retained 0; reservations open 0 \
             (uncertain 0), steps settled 0; limits revision 3 (operator), total 9"
                .to_string(),
            "auth: 2 keys (login 2), 1 locked out as of the last change".to_string(),
            if version == 3 {
                "18 log records after the snapshot"
            } else if version == 2 {
                "16 log records after the snapshot"
            } else {
                "12 log records after the snapshot"
            }
            .to_string(),
            if version >= 2 {
                "rate limit counters: 2 (ai-gateway 2)"
            } else {
                "rate limit counters: 0\n"
            }
            .to_string(),
        ] {
            assert!(text.contains(&line), "v{version}: no {line:?} in\n{text}");
        }
        assert_eq!(
            text.contains("older: serving from it rewrites it"),
            version < 5,
            "{text}"
        );
        let (ok, json) = inspect(&dir, true);
        assert!(ok, "{json}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["format"], version);
        let shop = &v["hosts"][1];
        assert_eq!(
            (
                &shop["host_id"],
                &shop["admitted"],
                &shop["queued"],
                &shop["parked"],
                &shop["retained"]
            ),
            (&"shop".into(), &3.into(), &3.into(), &1.into(), &3.into())
        );
        assert_eq!(v["auth"]["locked_out"], 1);
        assert_eq!(contents(&dir), before, "inspect changed v{version}'s dir");
    }
    let (ok, text) = inspect(&scratch("upgrade-inspect-nothing"), false);
    assert!(!ok && text.contains("FORMAT"), "{text}");
}

/// The server serving from a dir holds its lock; inspect still reads it, says so, and the
/// server goes on.
#[test]
fn data_dir_inspect_beside_a_running_server() {
    let dir = scratch("upgrade-inspect-live");
    copy_dir(&fixture(2), &dir);
    let mut server = Killed(serve_on(&dir));
    let server = &mut server.0;
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("listening on "), "{line}");
    let (ok, text) = inspect(&dir, false);
    assert!(ok, "{text}");
    assert!(text.contains("in use: yes"), "{text}");
    // (Its ended tickets and reservations have aged by now: the fixture's clock began at 0.)
    assert!(
        text.contains("shop: admitted 3, queued 3, parked 1"),
        "{text}"
    );
    assert!(
        server.try_wait().unwrap().is_none(),
        "the server still runs"
    );
    server.kill().unwrap();
    server.wait().unwrap();
    let (ok, text) = inspect(&dir, false);
    assert!(ok && text.contains("in use: no"), "{text}");
}

/// The real binary SIGKILLed at moments from 3 to 11 ms after its start (where it opens and
/// rewrites the dir on this machine), each time on a fresh copy of the format 1 fixture:
/// whenever it was killed before it listened, the dir still holds what the fixture holds, and
/// opens. Where the kills land is up to the machine; every step of the rewrite is cut short
/// for certain by `a_rewrite_cut_short_at_any_step_leaves_a_dir_that_opens`.
#[test]
fn a_server_killed_while_it_rewrites_an_old_dir_leaves_one_that_opens() {
    use std::os::unix::process::ExitStatusExt;
    let counts = |dir: &Path| {
        let (ok, json) = inspect(dir, true);
        assert!(ok, "{json}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let hosts: Vec<_> = v["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                let n = |k: &str| h[k].as_u64().unwrap();
                (
                    h["host_id"].as_str().unwrap().to_string(),
                    [
                        n("admitted"),
                        n("queued"),
                        n("parked"),
                        n("retained"),
                        n("reservations_open"),
                        n("limits_revision"),
                    ],
                )
            })
            .collect();
        (hosts, v["auth"]["keys"].clone())
    };
    let expected = counts(&fixture(1));
    let (mut before, mut rewritten) = (0, 0);
    for i in 0..40u64 {
        let dir = scratch("upgrade-killed");
        copy_dir(&fixture(1), &dir);
        let mut server = serve_on(&dir);
        std::thread::sleep(Duration::from_micros(3_000 + i * 200));
        server.kill().unwrap();
        let status = server.wait().unwrap();
        let mut out = String::new();
        std::io::Read::read_to_string(server.stdout.as_mut().unwrap(), &mut out).unwrap();
        if status.signal() != Some(9) || out.contains("listening on") {
            continue; // it served: what it changed since is not the rewrite's
        }
        before += 1;
        if formats(&dir).0 == "format 5" {
            rewritten += 1;
        }
        assert_eq!(
            counts(&dir),
            expected,
            "killed after {} µs",
            3_000 + i * 200
        );
        // And it serves again: opened, its live tickets are all there. (Item by item is
        // checked on dirs the manual clock wrote: this binary's wall clock has aged the rest.)
        let store = open(&dir, &ManualClock::new(0), 64 << 20);
        let stats = store.stats(HOST).await_blocking().unwrap();
        assert_eq!((stats.in_flight, stats.queued, stats.parked), (3, 3, 1));
        store.close();
        assert_eq!(formats(&dir).0, "format 5");
    }
    assert!(before > 0, "no kill landed before the server listened");
    eprintln!("{before} kills before listening, {rewritten} of them after FORMAT was rewritten");
}

/// Run a future to its end on a runtime of its own (for a plain test).
trait Blocking: std::future::Future + Sized {
    fn await_blocking(self) -> Self::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(self)
    }
}

impl<F: std::future::Future> Blocking for F {}
