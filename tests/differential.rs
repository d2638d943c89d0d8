//! The Rust core is the specification; the Redis store's Lua is an optimised engine checked
//! against it. Random operation sequences run on the embedded store and on a Redis store side
//! by side, with the same frozen clock, and every answer and every counter must be the same:
//! tickets (several hosts with their own limits, subject and account overrides, replays and
//! run_id conflicts, release by run, Park/Unpark, leases running out, early forgetting, an
//! operator's SetLimits and ResetLimits with current and stale revisions, priorities with and
//! without aging, weights, shadow mode, wait estimates, releases reporting outcomes and
//! adaptive account caps), the
//! ledger (budgets, allowances, replays, settle conflicts, uncertain reservations and their
//! resolution, forgotten runs) and the auth buckets (attempts, lockouts, peeks, resets).
//!
//! Redis expires keys (windows, retained tickets, idle runs) by its own clock, not the frozen
//! one the scripts decide with, so every duration here is seconds long, far longer than a
//! sequence takes to run, and time advances in steps of the same size: a key never expires in
//! Redis before the frozen clock says its time is up. (Found by a long run: 100 ms allowance
//! windows expired under a slow sequence and Redis opened a fresh one the embedded store had
//! not.)
//!
//! `ADMISSION_DIFFERENTIAL_CASES=N` runs N sequences of each kind instead of the default (run
//! tens of thousands before a change to the rules lands: `scripts/test` runs the default).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use admission_authority::auth::{AuthPolicy, BucketRule};
use admission_authority::clock::{Clock, ManualClock};
use admission_authority::ledger::{
    Allowance, AuthorizeArgs, Budget, Coverage, Resolution, ResourcePolicy, UnknownUsage, Usage,
};
use admission_authority::scheduler::{
    Adaptive, Blocker, HeldArgs, KeyArgs, KeyPolicy, Limits, LimitsTable, Mode, Outcome,
    ReclaimRefusal, Reclaimed, Report, ShadowDecision, SubmitArgs, SubmitError, SubmitMode,
    TicketView,
};
use admission_authority::store::journal::{JournalOptions, SyncPolicy};
use admission_authority::store::memory::{MemoryStore, OpenOptions};
use admission_authority::store::redis::RedisStore;
use admission_authority::store::{
    AuthStore, LedgerStore, Policy, Store, StoreError, TicketId, TicketStore,
};
use proptest::prelude::*;

#[path = "common/strategies.rs"]
mod strategies;

const HOSTS: [&str; 3] = ["h0", "h1", "h.2"];
const SUBJECTS: [&str; 4] = ["alice", "bob", "carol", "dave"];
const KEYS: [&str; 3] = ["conv-1", "conv-2", "conv-3"];
const ACCOUNTS: [Option<&str>; 3] = [None, Some("acct-1"), Some("acct-2")];

/// Sequences of each kind: `ADMISSION_DIFFERENTIAL_CASES`, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("ADMISSION_DIFFERENTIAL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(default_cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(default_cases),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The engine checked against the embedded store: the Redis store, or the embedded store on
/// a data dir, which also restarts at random points (as after a crash: the journal stopped,
/// the dir opened again by a new store).
trait Twin: Sized {
    type S: Store;
    fn build(policy: &Policy, clock: &ManualClock) -> Self;
    fn store(&self) -> &Self::S;
    /// The process's pauses, as the store sees them.
    fn pauses(&self) -> Arc<admission_authority::pause::PauseWatch>;
    /// The clock moved to `now`.
    fn moved(&self, _now: u64) {}
    /// Stop and start again on what the store kept; false when it keeps nothing.
    fn restarted(&mut self, _policy: &Policy, _clock: &ManualClock) -> bool {
        false
    }
    /// Whether its refusals by reason and its newest endings outlive a restart (a data dir
    /// keeps neither: they are for operators, and start again with the process).
    const KEEPS_RECENT: bool = true;
}

impl Twin for RedisStore {
    type S = RedisStore;
    /// Keys under a prefix of their own, the scripts' time frozen to the clock.
    fn build(policy: &Policy, clock: &ManualClock) -> Self {
        static CASE: AtomicU64 = AtomicU64::new(0);
        let url = std::env::var("ADMISSION_TEST_REDIS_URL")
            .expect("ADMISSION_TEST_REDIS_URL (scripts/test starts a redis-server)");
        let n = CASE.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("diff-{}-{n}:", std::process::id());
        let redis =
            RedisStore::new(&url, &prefix, 2, policy.clone(), Arc::new(clock.clone())).unwrap();
        redis.freeze_time_for_tests(clock.now_ms());
        redis
    }
    fn store(&self) -> &RedisStore {
        self
    }
    fn pauses(&self) -> Arc<admission_authority::pause::PauseWatch> {
        RedisStore::pauses(self)
    }
    fn moved(&self, now: u64) {
        self.freeze_time_for_tests(now);
    }
}

/// The embedded store on a data dir of its own, with `sync: always`.
struct Durable {
    store: MemoryStore,
    dir: std::path::PathBuf,
}

fn open_durable(dir: &std::path::Path, policy: &Policy, clock: &ManualClock) -> MemoryStore {
    let options = OpenOptions {
        dir: dir.to_path_buf(),
        journal: JournalOptions {
            sync: SyncPolicy::Always,
            sync_interval: std::time::Duration::from_millis(10),
            // A snapshot every few records: replays start from snapshots all the time.
            snapshot_after_bytes: 1024,
        },
    };
    MemoryStore::open(&options, policy.clone(), Arc::new(clock.clone()))
        .expect("the data dir opens")
        .0
}

impl Twin for Durable {
    type S = MemoryStore;
    fn build(policy: &Policy, clock: &ManualClock) -> Self {
        static CASE: AtomicU64 = AtomicU64::new(0);
        let n = CASE.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("aa-diff-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Durable {
            store: open_durable(&dir, policy, clock),
            dir,
        }
    }
    fn store(&self) -> &MemoryStore {
        &self.store
    }
    fn pauses(&self) -> Arc<admission_authority::pause::PauseWatch> {
        self.store.pauses()
    }
    fn restarted(&mut self, policy: &Policy, clock: &ManualClock) -> bool {
        self.store.close();
        self.store = open_durable(&self.dir, policy, clock);
        true
    }
    const KEEPS_RECENT: bool = false;
}

impl Drop for Durable {
    fn drop(&mut self) {
        self.store.close();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The two stores under one policy and one clock.
struct Pair<T> {
    memory: MemoryStore,
    other: T,
    clock: ManualClock,
    policy: Policy,
}

impl<T: Twin> Pair<T> {
    fn new(policy: Policy) -> Pair<T> {
        // Eleven days in: a lost ticket's grant (below the clock's floor) is then older than
        // any retention, as a ticket from before a loss is, not the evidence of a rollback
        // the Redis store acts on (`lua/reclaim_body.lua`).
        let clock = ManualClock::new(1_000_000_000);
        let memory = MemoryStore::new(policy.clone(), Arc::new(clock.clone()));
        let other = T::build(&policy, &clock);
        Pair {
            memory,
            other,
            clock,
            policy,
        }
    }

    /// Let `ms` pass and run the periodic sweep of every part on both stores.
    async fn advance(&self, ms: u64) -> Result<(), StoreError> {
        self.clock.advance(ms);
        self.other.moved(self.clock.now_ms());
        self.memory.sweep().await?;
        self.other.store().sweep().await
    }

    /// The process stops for `ms` and goes on: both stores see one pause (their watches, on
    /// the shared clock, find no beat for that long), then beat again as a heartbeat would.
    fn pause(&self, ms: u64) {
        let (a, b) = (self.memory.pauses(), self.other.pauses());
        for w in [&a, &b] {
            w.arm(1);
        }
        self.clock.advance(ms);
        self.other.moved(self.clock.now_ms());
        let now = self.clock.now_ms();
        for w in [&a, &b] {
            w.look_at(now);
            // No pause from now on but the next op's: leases are what the ops do to them.
            w.arm(u64::MAX);
        }
    }

    /// Restart the twin when it keeps its state, and give the embedded store what a restart
    /// gives (every live ticket one lease from now).
    fn restart(&mut self) {
        if self.other.restarted(&self.policy, &self.clock) {
            self.memory.restarted();
        }
    }
}

fn run_async<F: std::future::Future<Output = Result<(), TestCaseError>>>(
    f: F,
) -> Result<(), TestCaseError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn rss() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![3 => Just(None), 1 => (0u32..1200).prop_map(Some)]
}

// ---------------------------------------------------------------------------------------------
// Tickets

#[derive(Clone, Debug)]
enum TicketOp {
    Submit {
        host: usize,
        subject: usize,
        account: usize,
        try_mode: bool,
        rss_mb: Option<u32>,
        priority: u8,
        /// (key, policy in `KeyPolicy::ALL`, supersede_running, debounce ms).
        keyed: Option<(usize, usize, bool, u64)>,
    },
    /// Submit an earlier run again, as it was or with another subject or account; with
    /// `resubmit`, as a client whose ticket lapsed before its run started does.
    Replay {
        pick: usize,
        subject: Option<usize>,
        account: Option<usize>,
        resubmit: bool,
    },
    /// Release with a report of the run's provider call (outcome, latency).
    Release(usize, Report),
    ReleaseRun(usize, Report),
    Renew(usize, Option<u32>),
    Park(usize),
    Unpark(usize),
    Advance(u64),
    /// The authority stops (SIGSTOP) for this long and goes on.
    Pause(u64),
    /// An operator's SetLimits on a host, at its current revision or at a stale one.
    SetLimits {
        host: usize,
        limits: Box<Limits>,
        stale: bool,
    },
    ResetLimits {
        host: usize,
        stale: bool,
    },
    /// The twin stops and starts again on what it kept (a no-op for Redis).
    Restart,
    /// A holder re-registers a ticket: one made earlier with the grant it holds (or another:
    /// `wrong_grant`), or, with `lost`, one neither store ever saw (as after a loss).
    Reclaim {
        pick: usize,
        lost: Option<(usize, usize)>,
        wrong_grant: bool,
    },
}

fn ticket_op() -> impl Strategy<Value = TicketOp> {
    prop_oneof![
        5 => (0..HOSTS.len(), 0..SUBJECTS.len(), 0..ACCOUNTS.len(), any::<bool>(), rss(),
              prop_oneof![2 => Just(3u8), 3 => 1u8..=5],
              prop::option::weighted(0.5, (0..KEYS.len(), 0..KeyPolicy::ALL.len(), any::<bool>(),
                  prop_oneof![Just(0u64), 1u64..3_000])))
            .prop_map(|(host, subject, account, try_mode, rss_mb, priority, keyed)| TicketOp::Submit {
                host, subject, account, try_mode, rss_mb, priority, keyed
            }),
        1 => (any::<usize>(), prop::option::weighted(0.3, 0..SUBJECTS.len()),
              prop::option::weighted(0.3, 0..ACCOUNTS.len()), prop::bool::weighted(0.5))
            .prop_map(|(pick, subject, account, resubmit)| TicketOp::Replay {
                pick, subject, account, resubmit
            }),
        2 => (any::<usize>(), report()).prop_map(|(p, r)| TicketOp::Release(p, r)),
        1 => (any::<usize>(), report()).prop_map(|(p, r)| TicketOp::ReleaseRun(p, r)),
        2 => (any::<usize>(), rss()).prop_map(|(p, r)| TicketOp::Renew(p, r)),
        1 => any::<usize>().prop_map(TicketOp::Park),
        1 => any::<usize>().prop_map(TicketOp::Unpark),
        1 => (1u64..4_000).prop_map(TicketOp::Advance),
        1 => (0..HOSTS.len(), limits(), prop::bool::weighted(0.2))
            .prop_map(|(host, limits, stale)| TicketOp::SetLimits { host, limits: Box::new(limits), stale }),
        1 => (0..HOSTS.len(), prop::bool::weighted(0.2))
            .prop_map(|(host, stale)| TicketOp::ResetLimits { host, stale }),
        1 => Just(TicketOp::Restart),
        1 => (2u64..4_000).prop_map(TicketOp::Pause),
        1 => (any::<usize>(), prop::option::weighted(0.4, (0..HOSTS.len(), 0..SUBJECTS.len())),
              prop::bool::weighted(0.2))
            .prop_map(|(pick, lost, wrong_grant)| TicketOp::Reclaim { pick, lost, wrong_grant }),
    ]
}

fn report() -> impl Strategy<Value = Report> {
    (
        prop_oneof![
            1 => Just(Outcome::Unspecified),
            3 => Just(Outcome::Ok),
            2 => Just(Outcome::RateLimited),
            1 => Just(Outcome::Overloaded),
            1 => Just(Outcome::Failed),
        ],
        prop::option::of(0u32..5_000),
    )
        .prop_map(|(outcome, latency_ms)| Report {
            outcome,
            latency_ms,
        })
}

fn adaptive() -> impl Strategy<Value = Adaptive> {
    (
        1u32..3,
        0u32..4,
        300u32..900,
        1u32..3,
        prop_oneof![Just(0u64), 2_000u64..9_000],
    )
        .prop_map(
            |(min, extra, decrease_pm, increase, cooldown_ms)| Adaptive {
                min,
                max: min + extra,
                decrease_pm,
                increase,
                cooldown_ms,
            },
        )
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        strategies::base_limits(5_000, 8_000),
        // Subject and account overrides, sometimes above the default cap, sometimes below.
        (0u32..4, prop::option::of(0u32..3)),
        // Weights (alice, bob), priority aging (off, or a few advances long), shadow mode.
        (
            prop::option::of(1u32..4),
            prop::option::of(1u32..3),
            prop_oneof![2 => Just(0u64), 1 => 3_000u64..12_000],
            prop::bool::weighted(0.15),
        ),
        // Adaptive caps: acct-2's own, and a default for the other accounts.
        (prop::option::of(adaptive()), prop::option::of(adaptive())),
    )
        .prop_map(
            |(
                base,
                (dave, acct1),
                (alice_w, bob_w, priority_aging_ms, shadow),
                (acct2, default_adaptive),
            )| Limits {
                subjects: [("dave".to_string(), dave)].into(),
                accounts: acct1
                    .map(|c| ("acct-1".to_string(), c))
                    .into_iter()
                    .collect(),
                weights: [("alice", alice_w), ("bob", bob_w)]
                    .into_iter()
                    .filter_map(|(s, w)| Some((s.to_string(), w?)))
                    .collect(),
                priority_aging_ms,
                mode: if shadow { Mode::Shadow } else { Mode::Enforce },
                adaptive: acct2
                    .map(|a| ("acct-2".to_string(), a))
                    .into_iter()
                    .collect(),
                adaptive_default: default_adaptive,
                ..base
            },
        )
}

/// The parts of a view both stores must agree on (the key is each store's own).
#[allow(clippy::type_complexity)]
fn view(
    v: &TicketView,
) -> (
    String,
    u32,
    u64,
    u64,
    u64,
    Option<ShadowDecision>,
    Option<Blocker>,
    bool,
    u64,
) {
    (
        format!("{:?}", v.state),
        v.position,
        v.grant,
        v.lease_remaining_ms,
        v.eta_ms,
        v.shadow,
        v.blocked_by,
        v.superseded_by.is_some(),
        v.debounce_left_ms,
    )
}

/// One ticket made on both stores.
struct Made {
    memory: TicketId,
    redis: TicketId,
    host: usize,
    args: SubmitArgs,
}

async fn tickets_alike<T: Twin>(
    default: Limits,
    h1: Limits,
    ops: Vec<TicketOp>,
) -> Result<(), TestCaseError> {
    let table = LimitsTable {
        default,
        hosts: [("h1".to_string(), h1)].into(),
    };
    let mut pair = Pair::<T>::new(table.into());
    let mut made: Vec<Made> = Vec::new();
    let mut runs: Vec<(usize, SubmitArgs)> = Vec::new();
    let pick = |made: &Vec<Made>, p: usize| (!made.is_empty()).then(|| p % made.len());
    for (i, op) in ops.into_iter().enumerate() {
        let (m, r) = (&pair.memory, pair.other.store());
        let submit = match op {
            TicketOp::Submit {
                host,
                subject,
                account,
                try_mode,
                rss_mb,
                priority,
                keyed,
            } => Some((
                host,
                SubmitArgs {
                    instance_id: format!("replica-{}", i % 2),
                    subject: SUBJECTS[subject].into(),
                    account_id: ACCOUNTS[account].map(str::to_string),
                    run_id: format!("run-{i}"),
                    mode: if try_mode {
                        SubmitMode::Try
                    } else {
                        SubmitMode::Queue
                    },
                    rss_mb,
                    priority,
                    resubmit_expired: false,
                    // What the edge lets through: supersede_running and debounce only with a
                    // keep-newest policy, debounce only queued.
                    keyed: keyed.map(|(k, p, supersede, debounce)| {
                        let policy = KeyPolicy::ALL[p];
                        let debounce = if policy.keeps_newest() && !try_mode {
                            debounce
                        } else {
                            0
                        };
                        KeyArgs {
                            key: KEYS[k].into(),
                            policy,
                            supersede_running: supersede && policy.keeps_newest(),
                            debounce_ms: debounce,
                            debounce_max_ms: debounce * 3 / 2,
                        }
                    }),
                },
            )),
            TicketOp::Replay {
                pick,
                subject,
                account,
                resubmit,
            } if !runs.is_empty() => {
                let (host, mut args) = runs[pick % runs.len()].clone();
                args.resubmit_expired = resubmit;
                if let Some(s) = subject {
                    args.subject = SUBJECTS[s].into();
                }
                if let Some(a) = account {
                    args.account_id = ACCOUNTS[a].map(str::to_string);
                }
                Some((host, args))
            }
            _ => None,
        };
        if let Some((host, args)) = submit {
            runs.push((host, args.clone()));
            let a = m.submit(HOSTS[host], args.clone()).await.unwrap();
            let b = r.submit(HOSTS[host], args.clone()).await.unwrap();
            match (a, b) {
                (Ok((mi, mv)), Ok((ri, rv))) => {
                    prop_assert_eq!(view(&mv), view(&rv), "op {}: submit", i);
                    let known = made.iter().position(|t| t.memory == mi);
                    let known_r = made.iter().position(|t| t.redis == ri);
                    prop_assert_eq!(known, known_r, "op {}: submit found another ticket", i);
                    if known.is_none() {
                        made.push(Made {
                            memory: mi,
                            redis: ri,
                            host,
                            args,
                        });
                    }
                }
                (a, b) => {
                    // A busy key's holder, by its place among the tickets made.
                    let norm = |e: Option<SubmitError>, redis: bool| match e {
                        Some(SubmitError::KeyBusy { holder }) => Err(made.iter().position(|t| {
                            let id = if redis { &t.redis } else { &t.memory };
                            id.key == holder
                        })),
                        e => Ok(e),
                    };
                    prop_assert_eq!(
                        norm(a.err(), false),
                        norm(b.err(), true),
                        "op {}: submit",
                        i
                    )
                }
            }
        }
        match op {
            TicketOp::Release(p, report) => {
                if let Some(p) = pick(&made, p) {
                    let t = &made[p];
                    let a = m.release(&t.memory, report).await.unwrap();
                    let b = r.release(&t.redis, report).await.unwrap();
                    prop_assert_eq!(a, b, "op {}: release", i);
                }
            }
            TicketOp::ReleaseRun(p, report) => {
                if let Some(p) = pick(&made, p) {
                    let t = &made[p];
                    let host = HOSTS[t.host];
                    let a = m.release_run(host, &t.args.run_id, report).await.unwrap();
                    let b = r.release_run(host, &t.args.run_id, report).await.unwrap();
                    prop_assert_eq!(a.as_ref().map(|(_, s)| *s), b.as_ref().map(|(_, s)| *s));
                    prop_assert_eq!(
                        a.map(|(id, _)| id == t.memory),
                        b.map(|(id, _)| id == t.redis)
                    );
                }
            }
            TicketOp::Renew(p, rss_mb) => {
                if let Some(p) = pick(&made, p) {
                    let t = &made[p];
                    let a = m
                        .renew(std::slice::from_ref(&t.memory), rss_mb)
                        .await
                        .unwrap();
                    let b = r
                        .renew(std::slice::from_ref(&t.redis), rss_mb)
                        .await
                        .unwrap();
                    prop_assert_eq!(
                        a[0].as_ref().map(view),
                        b[0].as_ref().map(view),
                        "op {}: renew",
                        i
                    );
                }
            }
            TicketOp::Park(p) | TicketOp::Unpark(p) => {
                if let Some(p) = pick(&made, p) {
                    let t = &made[p];
                    let (a, b) = if matches!(op, TicketOp::Park(_)) {
                        (
                            m.park(&t.memory).await.unwrap(),
                            r.park(&t.redis).await.unwrap(),
                        )
                    } else {
                        (
                            m.unpark(&t.memory).await.unwrap(),
                            r.unpark(&t.redis).await.unwrap(),
                        )
                    };
                    let strip = |v: Option<Result<TicketView, _>>| v.map(|r| r.map(|v| view(&v)));
                    prop_assert_eq!(strip(a), strip(b), "op {}: {:?}", i, op);
                }
            }
            TicketOp::Advance(ms) => pair.advance(ms).await.unwrap(),
            TicketOp::Restart => pair.restart(),
            TicketOp::Pause(ms) => pair.pause(ms),
            TicketOp::SetLimits {
                host,
                ref limits,
                stale,
            } => {
                let at = m.get_limits(HOSTS[host]).await.unwrap().revision;
                let expected = if stale { at.saturating_sub(1) } else { at };
                let a = m
                    .set_limits(HOSTS[host], (**limits).clone(), expected)
                    .await
                    .unwrap();
                let b = r
                    .set_limits(HOSTS[host], (**limits).clone(), expected)
                    .await
                    .unwrap();
                prop_assert_eq!(a, b, "op {}: set limits", i);
            }
            TicketOp::ResetLimits { host, stale } => {
                let at = m.get_limits(HOSTS[host]).await.unwrap().revision;
                let expected = if stale { at.saturating_sub(1) } else { 0 };
                let a = m.reset_limits(HOSTS[host], expected).await.unwrap();
                let b = r.reset_limits(HOSTS[host], expected).await.unwrap();
                prop_assert_eq!(a, b, "op {}: reset limits", i);
            }
            TicketOp::Reclaim {
                pick: p,
                lost,
                wrong_grant,
            } => {
                let target = match lost {
                    Some((host, subject)) => {
                        let args = SubmitArgs {
                            instance_id: "replica-0".into(),
                            subject: SUBJECTS[subject].into(),
                            account_id: None,
                            run_id: format!("lost-{i}"),
                            mode: SubmitMode::Queue,
                            rss_mb: None,
                            priority: 3,
                            resubmit_expired: false,
                            keyed: None,
                        };
                        let (memory, redis) =
                            (TicketId::random(HOSTS[host]), TicketId::random(HOSTS[host]));
                        // A grant from before the loss: below the clock's floor.
                        Some((memory, redis, host, args, 1_000 + i as u64))
                    }
                    None => pick(&made, p).map(|p| {
                        let t = &made[p];
                        (t.memory.clone(), t.redis.clone(), t.host, t.args.clone(), 0)
                    }),
                };
                if let Some((mi, ri, host, args, lost_grant)) = target {
                    let held_grant = match lost_grant {
                        0 => m.ticket(&mi).await.unwrap().map_or(0, |v| v.grant),
                        g => g,
                    };
                    let held = HeldArgs {
                        instance_id: args.instance_id.clone(),
                        subject: args.subject.clone(),
                        account_id: args.account_id.clone(),
                        run_id: args.run_id.clone(),
                        grant: held_grant.max(1) + u64::from(wrong_grant),
                        priority: args.priority,
                        key: args.keyed.as_ref().map(|k| (k.key.clone(), k.policy)),
                    };
                    let a = m.reclaim(&mi, held.clone()).await.unwrap();
                    let b = r.reclaim(&ri, held).await.unwrap();
                    let strip = |x: Result<Reclaimed, ReclaimRefusal>| {
                        x.map(|r| (view(&r.view), r.reclaimed))
                    };
                    prop_assert_eq!(strip(a), strip(b), "op {}: reclaim", i);
                    if lost.is_some() {
                        made.push(Made {
                            memory: mi,
                            redis: ri,
                            host,
                            args,
                        });
                    }
                }
            }
            TicketOp::Submit { .. } | TicketOp::Replay { .. } => {}
        }
        let (m, r) = (&pair.memory, pair.other.store());

        for host in HOSTS {
            let (a, b) = (
                m.get_limits(host).await.unwrap(),
                r.get_limits(host).await.unwrap(),
            );
            prop_assert_eq!(a, b, "op {}: limits of {}", i, host);
            let (mut a, mut b) = (m.stats(host).await.unwrap(), r.stats(host).await.unwrap());
            if !T::KEEPS_RECENT {
                (a.counters.refusals, b.counters.refusals) = ([0; 3], [0; 3]);
            }
            prop_assert_eq!(a, b, "op {}: stats of {}", i, host);
            let index = |key, redis: bool| {
                made.iter().position(|t| {
                    let id = if redis { &t.redis } else { &t.memory };
                    id.key == key && id.host_id == host
                })
            };
            let (a, more_a) = m.list(host, 1000).await.unwrap();
            let (b, more_b) = r.list(host, 1000).await.unwrap();
            prop_assert_eq!(more_a, more_b);
            let strip = |list: Vec<admission_authority::scheduler::TicketInfo>, redis: bool| {
                let mut rows: Vec<_> = list
                    .into_iter()
                    .map(|t| {
                        (
                            index(t.key, redis),
                            format!("{:?}", t.state),
                            t.grant,
                            t.lease_remaining_ms,
                            t.run_id,
                            t.instance_id,
                            t.priority,
                            t.blocked_by,
                            t.keyed,
                            t.superseded_by.map(|k| index(k, redis)),
                            t.debounce_left_ms,
                        )
                    })
                    .collect();
                rows.sort();
                rows
            };
            prop_assert_eq!(
                strip(a, false),
                strip(b, true),
                "op {}: list of {}",
                i,
                host
            );
            if T::KEEPS_RECENT {
                let ended = |list: Vec<admission_authority::scheduler::Ending>, redis: bool| {
                    list.into_iter()
                        .map(|e| {
                            (
                                e.key.map(|k| index(k, redis)),
                                e.ended_as,
                                e.run_id,
                                e.subject,
                                e.account,
                                e.instance,
                                e.keyed,
                                e.superseded_by.map(|k| index(k, redis)),
                                e.at,
                            )
                        })
                        .collect::<Vec<_>>()
                };
                // Newest first; endings of one moment (leases that ran out together) in
                // whichever order the store met them, which follows its ticket ids.
                let by_time = |mut v: Vec<_>| {
                    v.sort_by(|a: &(_, _, _, _, _, _, _, _, u64), b| {
                        b.8.cmp(&a.8)
                            .then_with(|| format!("{a:?}").cmp(&format!("{b:?}")))
                    });
                    v
                };
                let a = m.recent_endings(host, 1000).await.unwrap();
                let b = r.recent_endings(host, 1000).await.unwrap();
                prop_assert_eq!(
                    by_time(ended(a, false)),
                    by_time(ended(b, true)),
                    "op {}: recent endings of {}",
                    i,
                    host
                );
            }
        }
        for (j, t) in made.iter().enumerate() {
            let a = m.ticket(&t.memory).await.unwrap();
            let b = r.ticket(&t.redis).await.unwrap();
            prop_assert_eq!(
                a.as_ref().map(view),
                b.as_ref().map(view),
                "op {}: ticket {}",
                i,
                j
            );
            // Who superseded it, by its place among the tickets made.
            let by = |v: &Option<TicketView>, redis: bool| {
                v.as_ref().and_then(|v| v.superseded_by).map(|k| {
                    made.iter().position(|t| {
                        let id = if redis { &t.redis } else { &t.memory };
                        id.key == k
                    })
                })
            };
            prop_assert_eq!(
                by(&a, false),
                by(&b, true),
                "op {}: superseded_by of {}",
                i,
                j
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(100))]

    #[test]
    fn tickets_answer_alike_on_both_stores(
        default in limits(),
        h1 in limits(),
        ops in proptest::collection::vec(ticket_op(), 1..80),
    ) {
        run_async(tickets_alike::<RedisStore>(default.clone(), h1.clone(), ops.clone()))?;
        run_async(tickets_alike::<Durable>(default, h1, ops))?;
    }
}

// ---------------------------------------------------------------------------------------------
// The ledger

#[derive(Clone, Debug)]
enum LedgerOp {
    Authorize {
        host: usize,
        run: usize,
        step: u32,
        /// Another subject or account than the run's own (a conflict, unless it is its first call).
        stray: Option<(usize, usize)>,
        output: u64,
        input: u64,
        cost: u64,
    },
    Settle {
        host: usize,
        run: usize,
        step: u32,
        input: u64,
        output: u64,
        cost: u64,
        coverage: u8,
    },
    Resolve {
        host: usize,
        run: usize,
        step: u32,
        consumed: bool,
    },
    Advance(u64),
    Restart,
}

const RUNS: usize = 5;

fn ledger_op() -> impl Strategy<Value = LedgerOp> {
    let host = 0..2usize;
    prop_oneof![
        5 => (host.clone(), 0..RUNS, 1u32..5,
              prop::option::weighted(0.1, (0..SUBJECTS.len(), 0..ACCOUNTS.len())),
              1u64..400, 0u64..300, prop_oneof![Just(0u64), 1u64..3_000])
            .prop_map(|(host, run, step, stray, output, input, cost)| LedgerOp::Authorize {
                host, run, step, stray, output, input, cost
            }),
        4 => (host.clone(), 0..RUNS, 1u32..5, 0u64..300, 0u64..400, 0u64..3_000, 0u8..3)
            .prop_map(|(host, run, step, input, output, cost, coverage)| LedgerOp::Settle {
                host, run, step, input, output, cost, coverage
            }),
        1 => (host, 0..RUNS, 1u32..5, any::<bool>())
            .prop_map(|(host, run, step, consumed)| LedgerOp::Resolve { host, run, step, consumed }),
        1 => (1u64..5_000).prop_map(LedgerOp::Advance),
        1 => Just(LedgerOp::Restart),
    ]
}

fn budget() -> impl Strategy<Value = Budget> {
    (
        prop::option::of(100u64..2_000),
        prop::option::of(500u64..10_000),
        prop_oneof![
            Just(UnknownUsage::Reject),
            Just(UnknownUsage::Allow),
            Just(UnknownUsage::Defer)
        ],
    )
        .prop_map(|(max_tokens, max_cost, unknown_usage)| Budget {
            max_tokens,
            max_cost,
            unknown_usage,
        })
}

fn resource_policy() -> impl Strategy<Value = ResourcePolicy> {
    (
        prop::option::of(budget()),
        prop::option::of(budget()),
        prop::option::of(budget()),
        prop::option::of((
            prop::option::of(200u64..3_000),
            prop::option::of(1_000u64..20_000),
            1_000u64..20_000,
        )),
    )
        .prop_map(|(default, bob, acct1, allowance)| ResourcePolicy {
            default,
            subjects: bob.map(|b| ("bob".to_string(), b)).into_iter().collect(),
            accounts: acct1
                .map(|b| ("acct-1".to_string(), b))
                .into_iter()
                .collect(),
            allowances: allowance
                .map(|(tokens, cost, window_ms)| {
                    (
                        "acct-1".to_string(),
                        Allowance {
                            tokens,
                            cost,
                            window_ms,
                        },
                    )
                })
                .into_iter()
                .collect(),
            reservation_ttl_ms: 4_000,
            run_retention_ms: 15_000,
        })
}

async fn ledger_alike<T: Twin>(
    resources: ResourcePolicy,
    ops: Vec<LedgerOp>,
) -> Result<(), TestCaseError> {
    let mut pair = Pair::<T>::new(Policy {
        resources,
        ..Policy::default()
    });
    // Run k belongs to subject k % 4 and account k % 3.
    let owner = |run: usize| (run % SUBJECTS.len(), run % ACCOUNTS.len());
    for (i, op) in ops.into_iter().enumerate() {
        let (m, r) = (&pair.memory, pair.other.store());
        match op {
            LedgerOp::Authorize {
                host,
                run,
                step,
                stray,
                output,
                input,
                cost,
            } => {
                let (s, a) = stray.unwrap_or(owner(run));
                let args = AuthorizeArgs {
                    run_id: format!("run-{run}"),
                    step,
                    subject: SUBJECTS[s].into(),
                    account_id: ACCOUNTS[a].map(str::to_string),
                    model: format!("model-{}", step % 2),
                    requested_output_tokens: output,
                    estimated_input_tokens: input,
                    estimated_cost: cost,
                };
                let a = m.authorize(HOSTS[host], args.clone()).await.unwrap();
                let b = r.authorize(HOSTS[host], args).await.unwrap();
                prop_assert_eq!(a, b, "op {}: authorize", i);
            }
            LedgerOp::Settle {
                host,
                run,
                step,
                input,
                output,
                cost,
                coverage,
            } => {
                let usage = Usage {
                    input_tokens: input,
                    output_tokens: output,
                    cost,
                    coverage: [Coverage::Complete, Coverage::Partial, Coverage::Unknown]
                        [coverage as usize],
                };
                let run_id = format!("run-{run}");
                let a = m.settle(HOSTS[host], &run_id, step, usage).await.unwrap();
                let b = r.settle(HOSTS[host], &run_id, step, usage).await.unwrap();
                prop_assert_eq!(a, b, "op {}: settle", i);
            }
            LedgerOp::Resolve {
                host,
                run,
                step,
                consumed,
            } => {
                let resolution = if consumed {
                    Resolution::Consumed
                } else {
                    Resolution::Released
                };
                let run_id = format!("run-{run}");
                let a = m
                    .resolve(HOSTS[host], &run_id, step, resolution)
                    .await
                    .unwrap();
                let b = r
                    .resolve(HOSTS[host], &run_id, step, resolution)
                    .await
                    .unwrap();
                prop_assert_eq!(a, b, "op {}: resolve", i);
            }
            LedgerOp::Advance(ms) => pair.advance(ms).await.unwrap(),
            LedgerOp::Restart => pair.restart(),
        }
        let (m, r) = (&pair.memory, pair.other.store());
        for host in &HOSTS[..2] {
            let a = m.ledger_stats(host).await.unwrap();
            let b = r.ledger_stats(host).await.unwrap();
            prop_assert_eq!(a, b, "op {}: ledger stats of {}", i, host);
            let a = m.reservations(host, 100).await.unwrap();
            let b = r.reservations(host, 100).await.unwrap();
            prop_assert_eq!(a, b, "op {}: reservations of {}", i, host);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(100))]

    #[test]
    fn the_ledger_answers_alike_on_both_stores(
        resources in resource_policy(),
        ops in proptest::collection::vec(ledger_op(), 1..80),
    ) {
        run_async(ledger_alike::<RedisStore>(resources.clone(), ops.clone()))?;
        run_async(ledger_alike::<Durable>(resources, ops))?;
    }
}

// ---------------------------------------------------------------------------------------------
// Auth buckets

#[derive(Clone, Debug)]
enum AuthOp {
    Attempt(usize, usize),
    Peek(usize, usize),
    Reset(usize, usize),
    Advance(u64),
    Restart,
}

const ENDPOINTS: [&str; 2] = ["login", "custom"];
const IDENTITIES: [&str; 3] = ["ip:10.0.0.1", "user:ann", "ip:::1"];

fn auth_op() -> impl Strategy<Value = AuthOp> {
    let key = (0..ENDPOINTS.len(), 0..IDENTITIES.len());
    prop_oneof![
        6 => key.clone().prop_map(|(e, k)| AuthOp::Attempt(e, k)),
        2 => key.clone().prop_map(|(e, k)| AuthOp::Peek(e, k)),
        1 => key.prop_map(|(e, k)| AuthOp::Reset(e, k)),
        2 => (1u64..6_000).prop_map(AuthOp::Advance),
        1 => Just(AuthOp::Restart),
    ]
}

fn rule() -> impl Strategy<Value = BucketRule> {
    (
        1u32..5,
        1_000u64..10_000,
        prop_oneof![Just(0u64), 500u64..15_000],
    )
        .prop_map(|(max_attempts, window_ms, lockout_ms)| BucketRule {
            max_attempts,
            window_ms,
            lockout_ms,
        })
}

async fn auth_alike<T: Twin>(
    rules: [BucketRule; 2],
    ops: Vec<AuthOp>,
) -> Result<(), TestCaseError> {
    let buckets: BTreeMap<String, BucketRule> = ENDPOINTS
        .iter()
        .zip(rules)
        .map(|(e, r)| (e.to_string(), r))
        .collect();
    let mut pair = Pair::<T>::new(Policy {
        auth: AuthPolicy {
            buckets,
            ..AuthPolicy::default()
        },
        ..Policy::default()
    });
    for (i, op) in ops.into_iter().enumerate() {
        let (m, r) = (&pair.memory, pair.other.store());
        match op {
            AuthOp::Attempt(e, k) | AuthOp::Peek(e, k) => {
                let peek = matches!(op, AuthOp::Peek(..));
                let (endpoint, identity, rule) = (ENDPOINTS[e], IDENTITIES[k], rules[e]);
                let (a, b) = if peek {
                    (
                        m.auth_peek(endpoint, identity, rule).await.unwrap(),
                        r.auth_peek(endpoint, identity, rule).await.unwrap(),
                    )
                } else {
                    (
                        m.auth_attempt(endpoint, identity, rule).await.unwrap(),
                        r.auth_attempt(endpoint, identity, rule).await.unwrap(),
                    )
                };
                prop_assert_eq!(a, b, "op {}: {:?}", i, op);
            }
            AuthOp::Reset(e, k) => {
                let a = m.auth_reset(ENDPOINTS[e], IDENTITIES[k]).await.unwrap();
                let b = r.auth_reset(ENDPOINTS[e], IDENTITIES[k]).await.unwrap();
                prop_assert_eq!(a, b, "op {}: reset", i);
            }
            AuthOp::Advance(ms) => pair.advance(ms).await.unwrap(),
            AuthOp::Restart => pair.restart(),
        }
    }
    let r = pair.other.store();
    prop_assert!(!r.auth_degraded(), "Redis was reachable throughout");
    Ok(())
}

proptest! {
    #![proptest_config(config(100))]

    #[test]
    fn auth_buckets_answer_alike_on_both_stores(
        rules in [rule(), rule()],
        ops in proptest::collection::vec(auth_op(), 1..80),
    ) {
        run_async(auth_alike::<RedisStore>(rules, ops.clone()))?;
        run_async(auth_alike::<Durable>(rules, ops))?;
    }
}

// ---------------------------------------------------------------------------------------------
// Rate limit counters (Envoy's rate limit service)

#[derive(Clone, Debug)]
enum RateOp {
    /// One request's hits on a domain: (counter, unit, hits) each, under a bound of `max`
    /// live counters.
    Hits(usize, u64, Vec<(usize, usize, u64)>),
    /// One request's hits taken back on a domain (Envoy's `hits_subtrahend`).
    Subtract(usize, Vec<(usize, usize, u64)>),
    Counters,
    /// Whole seconds, so no counter's Redis TTL is ever shorter than a second (see above).
    Advance(u64),
    Restart,
}

const RATE_DOMAINS: [&str; 2] = ["api", "ai-gateway"];
const COUNTERS: [&str; 4] = ["tenant=a", "tenant=b", "tenant=a,model=m", "path=%2F"];
const UNITS: [admission_authority::ratelimit::Unit; 3] = [
    admission_authority::ratelimit::Unit::Second,
    admission_authority::ratelimit::Unit::Minute,
    admission_authority::ratelimit::Unit::Hour,
];

fn rate_op() -> impl Strategy<Value = RateOp> {
    let hit = (
        0..COUNTERS.len(),
        0..UNITS.len(),
        prop_oneof![1 => Just(0u64), 4 => 1u64..4],
    );
    prop_oneof![
        8 => (0..RATE_DOMAINS.len(), 1u64..5, proptest::collection::vec(hit.clone(), 1..4))
            .prop_map(|(d, max, hits)| RateOp::Hits(d, max, hits)),
        3 => (0..RATE_DOMAINS.len(), proptest::collection::vec(hit, 1..4))
            .prop_map(|(d, hits)| RateOp::Subtract(d, hits)),
        1 => Just(RateOp::Counters),
        2 => (1u64..90).prop_map(RateOp::Advance),
        1 => Just(RateOp::Restart),
    ]
}

/// (counter, unit, hits) as the stores' hits.
fn rate_hits(hits: &[(usize, usize, u64)]) -> Vec<admission_authority::ratelimit::Hit> {
    hits.iter()
        .map(|&(c, u, addend)| admission_authority::ratelimit::Hit {
            key: format!("{}|{}", COUNTERS[c], UNITS[u].name()),
            unit: UNITS[u],
            addend,
        })
        .collect()
}

async fn rate_limits_alike<T: Twin>(ops: Vec<RateOp>) -> Result<(), TestCaseError> {
    use admission_authority::store::RateLimitStore;
    let mut pair = Pair::<T>::new(Policy::default());
    let domains: Vec<String> = RATE_DOMAINS.iter().map(|d| d.to_string()).collect();
    for (i, op) in ops.into_iter().enumerate() {
        let (m, r) = (&pair.memory, pair.other.store());
        match &op {
            RateOp::Subtract(d, hits) => {
                let hits = rate_hits(hits);
                let a = m.rate_limit_subtract(RATE_DOMAINS[*d], &hits).await;
                let b = r.rate_limit_subtract(RATE_DOMAINS[*d], &hits).await;
                prop_assert_eq!(a.unwrap(), b.unwrap(), "op {}: {:?}", i, op);
            }
            RateOp::Hits(d, max, hits) => {
                let hits = rate_hits(hits);
                let a = m
                    .rate_limit_hits(RATE_DOMAINS[*d], *max, &hits)
                    .await
                    .unwrap();
                let b = r
                    .rate_limit_hits(RATE_DOMAINS[*d], *max, &hits)
                    .await
                    .unwrap();
                prop_assert_eq!(a, b, "op {}: {:?}", i, op);
            }
            RateOp::Counters => {
                let a = m.rate_limit_counters(&domains, 100).await.unwrap();
                let b = r.rate_limit_counters(&domains, 100).await.unwrap();
                prop_assert_eq!(a, b, "op {}: counters", i);
            }
            RateOp::Advance(s) => {
                pair.advance(s * 1000).await.unwrap();
                pair.memory.sweep_rate_limits(&domains).await.unwrap();
                pair.other
                    .store()
                    .sweep_rate_limits(&domains)
                    .await
                    .unwrap();
            }
            RateOp::Restart => pair.restart(),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(60))]

    #[test]
    fn rate_limit_counters_answer_alike_on_every_store(
        ops in proptest::collection::vec(rate_op(), 1..60),
    ) {
        run_async(rate_limits_alike::<RedisStore>(ops.clone()))?;
        run_async(rate_limits_alike::<Durable>(ops))?;
    }
}
