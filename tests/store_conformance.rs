//! The store conformance suite: scenarios written once against the [`Store`] trait, run against
//! every store through the `conformance!` macro. A store joins by implementing [`Harness`] (how
//! to build it over given limits, and how to move its time) and invoking the macro.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use admission_authority::auth::{AuthPolicy, AuthVerdict, BucketRule};
use admission_authority::clock::{Clock, ManualClock};
use admission_authority::history;
use admission_authority::ledger::{
    Allowance, Authorization, AuthorizeArgs, Budget, Coverage, Decision, LedgerError, Reason,
    Resolution, ResourcePolicy, StepState, UnknownUsage, Usage, usd_to_micros,
};
use admission_authority::ratelimit::{Hit, Unit};
use admission_authority::scheduler::{
    EndedAs, KeyArgs, KeyPolicy, Limits, LimitsTable, Refusal, Report, SubmitArgs, SubmitError,
    SubmitMode, TicketState, TicketView,
};
use admission_authority::store::journal::{JournalOptions, SyncPolicy};
use admission_authority::store::memory::{MemoryStore, OpenOptions};
use admission_authority::store::redis::RedisStore;
use admission_authority::store::{
    AuthStore, LedgerStore, Policy, RateLimitStore, TicketId, TicketStore, TicketWatch,
};

/// A store under test and its clock.
pub trait Harness: Sized + Send + Sync {
    type S: Send + Sync + 'static;
    fn build(policy: impl Into<Policy> + Send) -> impl Future<Output = Self> + Send;
    fn store(&self) -> &Self::S;
    /// Move the store's time forward by `ms`.
    fn advance(&self, ms: u64) -> impl Future<Output = ()> + Send;
}

pub struct Memory {
    store: MemoryStore,
    clock: ManualClock,
}

impl Harness for Memory {
    type S = MemoryStore;
    async fn build(policy: impl Into<Policy> + Send) -> Self {
        let clock = ManualClock::new(1_000);
        Memory {
            store: MemoryStore::new(policy.into(), Arc::new(clock.clone())),
            clock,
        }
    }
    fn store(&self) -> &MemoryStore {
        &self.store
    }
    async fn advance(&self, ms: u64) {
        self.clock.advance(ms);
    }
}

/// The embedded store on a data dir of its own (a fresh one per harness, removed after),
/// writing and fsyncing every change as `sync: always` does.
pub struct Durable {
    store: MemoryStore,
    clock: ManualClock,
    dir: std::path::PathBuf,
}

impl Harness for Durable {
    type S = MemoryStore;
    async fn build(policy: impl Into<Policy> + Send) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("aa-conformance-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let clock = ManualClock::new(1_000);
        let options = OpenOptions {
            dir: dir.clone(),
            journal: JournalOptions {
                sync: SyncPolicy::Always,
                sync_interval: Duration::from_millis(10),
                // A snapshot every few records: replays start from snapshots all the time.
                snapshot_after_bytes: 1024,
            },
        };
        let (store, restored) = MemoryStore::open(&options, policy.into(), Arc::new(clock.clone()))
            .expect("a data dir");
        assert!(restored.fresh);
        Durable { store, clock, dir }
    }
    fn store(&self) -> &MemoryStore {
        &self.store
    }
    async fn advance(&self, ms: u64) {
        self.clock.advance(ms);
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        self.store.close();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Redis store on the test command's redis-server (`ADMISSION_TEST_REDIS_URL`), under a
/// prefix of its own per harness so that tests sharing the server never see each other's keys.
/// The scripts' time is frozen to the harness clock (which the replica's local auth fallback
/// reads too), so time moves only when a scenario advances it.
pub struct Redis {
    store: RedisStore,
    clock: ManualClock,
}

impl Harness for Redis {
    type S = RedisStore;
    async fn build(policy: impl Into<Policy> + Send) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let url = std::env::var("ADMISSION_TEST_REDIS_URL").expect(
            "ADMISSION_TEST_REDIS_URL names the redis-server to test against; \
             scripts/test starts one and sets it",
        );
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = format!("conformance-{}-{n}:", std::process::id());
        let clock = ManualClock::new(1_000);
        let store = RedisStore::new(&url, &prefix, 4, policy.into(), Arc::new(clock.clone()))
            .expect("a redis url");
        store.freeze_time_for_tests(clock.now_ms());
        Redis { store, clock }
    }
    fn store(&self) -> &RedisStore {
        &self.store
    }
    async fn advance(&self, ms: u64) {
        self.clock.advance(ms);
        self.store.freeze_time_for_tests(self.clock.now_ms());
    }
}

fn limits(total: u32, per_subject: u32, queue_total: u32) -> Limits {
    Limits {
        total,
        per_subject,
        queue_total,
        queue_hard_total: queue_total * 4,
        lease_ttl_ms: 1_000,
        retention_ms: 5_000,
        ..Limits::default()
    }
}

fn args(subject: &str, account: Option<&str>, run: &str, mode: SubmitMode) -> SubmitArgs {
    SubmitArgs {
        instance_id: "replica-1".into(),
        subject: subject.into(),
        account_id: account.map(str::to_string),
        run_id: run.into(),
        mode,
        rss_mb: None,
        priority: 3,
        resubmit_expired: false,
        keyed: None,
    }
}

async fn submit<S: TicketStore>(
    store: &S,
    host: &str,
    subject: &str,
    run: &str,
) -> Result<(TicketId, TicketView), SubmitError> {
    store
        .submit(host, args(subject, None, run, SubmitMode::Queue))
        .await
        .expect("store reachable")
}

async fn state<S: TicketStore>(store: &S, id: &TicketId) -> Option<TicketState> {
    store
        .ticket(id)
        .await
        .expect("store reachable")
        .map(|v| v.state)
}

pub async fn admits_to_the_cap_then_queues_then_refuses<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(limits(2, 2, 1))).await;
    let s = h.store();
    let a = submit(s, "h", "alice", "r1").await.unwrap();
    let b = submit(s, "h", "alice", "r2").await.unwrap();
    let c = submit(s, "h", "bob", "r3").await.unwrap();
    assert_eq!(
        [a.1.state, b.1.state, c.1.state],
        [
            TicketState::Admitted,
            TicketState::Admitted,
            TicketState::Queued
        ]
    );
    assert!(a.1.grant > 0 && b.1.grant > a.1.grant && c.1.grant == 0);
    assert_eq!(
        submit(s, "h", "carol", "r4").await.unwrap_err(),
        SubmitError::Refused(Refusal::QueueFull)
    );
    let try_mode = s
        .submit("h", args("dave", None, "r5", SubmitMode::Try))
        .await
        .unwrap();
    assert_eq!(try_mode.unwrap_err(), SubmitError::Refused(Refusal::Busy));
    let stats = s.stats("h").await.unwrap();
    assert_eq!(
        (stats.in_flight, stats.queued, stats.counters.rejected),
        (2, 1, 2)
    );
    assert_eq!(stats.counters.admitted, 2);
}

pub async fn round_robin_across_subjects<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(Limits {
        queue_per_subject: 8,
        ..limits(1, 1, 12)
    }))
    .await;
    let s = h.store();
    let (mut current, _) = submit(s, "h", "alice", "hold").await.unwrap();
    let mut queued = Vec::new();
    for (subject, run) in [
        ("alice", "a1"),
        ("alice", "a2"),
        ("alice", "a3"),
        ("bob", "b1"),
        ("bob", "b2"),
    ] {
        let (id, v) = submit(s, "h", subject, run).await.unwrap();
        assert_eq!(v.state, TicketState::Queued);
        queued.push((id, run));
    }
    let mut order = Vec::new();
    for _ in 0..5 {
        assert_eq!(
            s.release(&current, Report::default()).await.unwrap(),
            Some(TicketState::Admitted)
        );
        let mut admitted = Vec::new();
        for (id, run) in &queued {
            if state(s, id).await == Some(TicketState::Admitted) && !order.contains(run) {
                admitted.push((id.clone(), *run));
            }
        }
        assert_eq!(admitted.len(), 1);
        order.push(admitted[0].1);
        current = admitted[0].0.clone();
    }
    assert_eq!(order, ["a1", "b1", "a2", "b2", "a3"]);
}

pub async fn accounts_are_keyed_per_host<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(Limits {
        per_account: Some(1),
        ..limits(4, 4, 0)
    }))
    .await;
    let s = h.store();
    let submit_on = |host: &'static str, run: &'static str| {
        s.submit(
            host,
            args("alice", Some("shared-acct"), run, SubmitMode::Queue),
        )
    };
    assert_eq!(
        submit_on("host-a", "r1").await.unwrap().unwrap().1.state,
        TicketState::Admitted
    );
    assert_eq!(
        submit_on("host-b", "r1").await.unwrap().unwrap().1.state,
        TicketState::Admitted,
        "the same account id on another host is another account"
    );
    assert_eq!(
        submit_on("host-a", "r2").await.unwrap().unwrap_err(),
        SubmitError::Refused(Refusal::Busy)
    );
}

pub async fn release_dispatches_and_wakes_the_waiter<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(limits(1, 1, 4))).await;
    let s = h.store();
    let (holder, _) = submit(s, "h", "alice", "hold").await.unwrap();
    let (waiter, v) = submit(s, "h", "bob", "wait").await.unwrap();
    assert_eq!(v.state, TicketState::Queued);
    let mut watch = s.watch(&waiter);
    s.release(&holder, Report::default()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), watch.changed())
        .await
        .expect("the waiter's watch fires on admission");
    let now = s.ticket(&waiter).await.unwrap().unwrap();
    assert_eq!(now.state, TicketState::Admitted);
    assert!(now.grant > 0);
}

pub async fn renew_extends_leases_and_reports_unknown_ids<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(limits(2, 2, 0))).await;
    let s = h.store();
    let (a, _) = submit(s, "h", "alice", "r1").await.unwrap();
    let unknown = TicketId::random("h");
    let other_host = TicketId::random("nowhere");
    h.advance(800).await;
    let out = s
        .renew(&[a.clone(), unknown, other_host], None)
        .await
        .unwrap();
    assert_eq!(
        out[0].as_ref().map(|v| (v.state, v.lease_remaining_ms)),
        Some((TicketState::Admitted, 1_000))
    );
    assert!(out[1].is_none() && out[2].is_none());
    h.advance(800).await;
    assert_eq!(
        state(s, &a).await,
        Some(TicketState::Admitted),
        "renewed past its first lease"
    );
}

pub async fn an_expired_lease_frees_its_slot_for_the_next_waiter<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(limits(1, 1, 4))).await;
    let s = h.store();
    let (holder, _) = submit(s, "h", "alice", "hold").await.unwrap();
    let (waiter, _) = submit(s, "h", "bob", "wait").await.unwrap();
    h.advance(600).await;
    s.renew(std::slice::from_ref(&waiter), None).await.unwrap();
    h.advance(500).await;
    s.sweep_tickets().await.unwrap();
    assert_eq!(state(s, &holder).await, Some(TicketState::Expired));
    assert_eq!(state(s, &waiter).await, Some(TicketState::Admitted));
    let stats = s.stats("h").await.unwrap();
    assert_eq!((stats.counters.expired, stats.in_flight), (1, 1));
    let wait = stats.counters.queue_wait;
    assert_eq!(
        (wait.count(), wait.sum_ms, wait.buckets[5]),
        (1, 1_100, 1),
        "the waiter queued for 1.1 s (the 1..5 s bucket)"
    );
}

pub async fn repeated_run_ids_are_idempotent_until_retention_ends<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(limits(2, 2, 0))).await;
    let s = h.store();
    let (first, _) = submit(s, "h", "alice", "run-1").await.unwrap();
    let (again, v) = submit(s, "h", "alice", "run-1").await.unwrap();
    assert_eq!((again, v.state), (first.clone(), TicketState::Admitted));
    assert_eq!(s.stats("h").await.unwrap().in_flight, 1);
    assert_eq!(
        submit(s, "h", "bob", "run-1").await.unwrap_err(),
        SubmitError::RunIdConflict { field: "subject" }
    );
    assert_eq!(
        s.release(&first, Report::default()).await.unwrap(),
        Some(TicketState::Admitted)
    );
    assert_eq!(
        s.release(&first, Report::default()).await.unwrap(),
        Some(TicketState::Released)
    );
    let (late, v) = submit(s, "h", "alice", "run-1").await.unwrap();
    assert_eq!((late, v.state), (first.clone(), TicketState::Released));
    h.advance(5_000).await;
    s.sweep_tickets().await.unwrap();
    assert_eq!(state(s, &first).await, None, "forgotten after retention");
    let (fresh, v) = submit(s, "h", "alice", "run-1").await.unwrap();
    assert_ne!(fresh, first);
    assert_eq!(v.state, TicketState::Admitted);
}

pub async fn ended_tickets_are_compact_and_bounded_per_host<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(Limits {
        max_retained: 1,
        ..limits(2, 2, 0)
    }))
    .await;
    let s = h.store();
    let slack = admission_authority::scheduler::RETAIN_SLACK;
    let mut ended = Vec::new();
    for i in 0..slack {
        let (id, v) = submit(s, "h", "alice", &format!("run-{i}")).await.unwrap();
        assert_eq!(v.state, TicketState::Admitted);
        s.release(&id, Report::default()).await.unwrap();
        ended.push((id, v.grant));
    }
    // An ended ticket answers a repeat with its final state and grant, whoever repeats it.
    let (again, v) = submit(s, "h", "bob", "run-0").await.unwrap();
    assert_eq!(
        (&again, v.state, v.grant),
        (&ended[0].0, TicketState::Released, ended[0].1)
    );
    // max_retained 1 + RETAIN_SLACK ended tickets: the oldest RETAIN_SLACK are forgotten.
    let (last, _) = submit(s, "h", "alice", "run-last").await.unwrap();
    s.release(&last, Report::default()).await.unwrap();
    for (id, _) in &ended {
        assert_eq!(state(s, id).await, None, "forgotten early: {id}");
    }
    assert_eq!(state(s, &last).await, Some(TicketState::Released));
    let (fresh, v) = submit(s, "h", "alice", "run-0").await.unwrap();
    assert_ne!(fresh, ended[0].0, "a forgotten run_id makes a new ticket");
    assert_eq!(v.state, TicketState::Admitted);
}

pub async fn shed_oldest_breaks_ties_by_age_not_by_name<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(Limits {
        overflow: admission_authority::scheduler::OverflowPolicy::ShedOldest,
        ..limits(1, 1, 3)
    }))
    .await;
    let s = h.store();
    submit(s, "h", "holder", "hold").await.unwrap();
    // Three subjects one deep each; "zed" queued first, so its waiter is the oldest of the
    // deepest, though "amy" comes first by name.
    let (zed1, _) = submit(s, "h", "zed", "z1").await.unwrap();
    let (amy1, _) = submit(s, "h", "amy", "a1").await.unwrap();
    let (_, v) = submit(s, "h", "newcomer", "n1").await.unwrap();
    assert_eq!(v.state, TicketState::Queued);
    assert_eq!(state(s, &zed1).await, Some(TicketState::Queued));
    // The queue (3) is full: the next newcomer sheds the oldest waiter of the equally deep
    // subjects, zed's, not amy's (the first by name).
    let (_, v) = submit(s, "h", "late", "l1").await.unwrap();
    assert_eq!(v.state, TicketState::Queued);
    assert_eq!(state(s, &zed1).await, Some(TicketState::Shed));
    assert_eq!(state(s, &amy1).await, Some(TicketState::Queued));
    // Then amy's waiter is the oldest of the deepest (all one deep).
    submit(s, "h", "later", "l2").await.unwrap();
    assert_eq!(state(s, &amy1).await, Some(TicketState::Shed));
}

pub async fn release_by_run_finds_the_ticket_submit_made<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(limits(1, 1, 2))).await;
    let s = h.store();
    let (held, _) = submit(s, "h", "alice", "run-1").await.unwrap();
    let (queued, v) = submit(s, "h", "bob", "run-2").await.unwrap();
    assert_eq!(v.state, TicketState::Queued);
    assert_eq!(
        s.release_run("h", "run-2", Report::default())
            .await
            .unwrap(),
        Some((queued.clone(), TicketState::Queued)),
        "a queued ticket is withdrawn"
    );
    assert_eq!(
        s.release_run("h", "run-1", Report::default())
            .await
            .unwrap(),
        Some((held.clone(), TicketState::Admitted))
    );
    assert_eq!(
        s.release_run("h", "run-1", Report::default())
            .await
            .unwrap(),
        Some((held.clone(), TicketState::Released)),
        "twice is no error"
    );
    assert_eq!(state(s, &queued).await, Some(TicketState::Cancelled));
    assert_eq!(
        s.release_run("h", "never", Report::default())
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        s.release_run("other-host", "run-1", Report::default())
            .await
            .unwrap(),
        None
    );
    let st = s.stats("h").await.unwrap();
    assert_eq!((st.in_flight, st.queued, st.counters.released), (0, 0, 1));
}

/// Ids shaped like key syntax never share state: a host `hA}:run:X` and a run `X}:c` of host
/// `hA` once met in one Redis key.
pub async fn ticket_ids_like_key_syntax_never_share_state<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(limits(1, 1, 0))).await;
    let s = h.store();
    let (odd, v) = submit(s, "hA}:run:X", "alice", "r1").await.unwrap();
    assert_eq!(v.state, TicketState::Admitted);
    let (plain, v) = submit(s, "hA", "bob", "X}:c").await.unwrap();
    assert_eq!(v.state, TicketState::Admitted, "another host, another cap");
    assert_eq!(
        submit(s, "hA", "{carol}", "q:alice").await.unwrap_err(),
        SubmitError::Refused(Refusal::Busy),
        "hA is full with bob's ticket"
    );
    assert_eq!(state(s, &odd).await, Some(TicketState::Admitted));
    assert_eq!(state(s, &plain).await, Some(TicketState::Admitted));
    for host in ["hA}:run:X", "hA"] {
        let st = s.stats(host).await.unwrap();
        assert_eq!((st.in_flight, st.counters.admitted), (1, 1), "{host}");
    }
    assert_eq!(
        s.release(&odd, Report::default()).await.unwrap(),
        Some(TicketState::Admitted)
    );
    assert_eq!(state(s, &plain).await, Some(TicketState::Admitted));
}

pub async fn stats_and_listing_show_live_tickets<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(limits(1, 1, 4))).await;
    let s = h.store();
    let (holder, _) = submit(s, "h", "alice", "hold").await.unwrap();
    let (waiter, _) = submit(s, "h", "bob", "wait").await.unwrap();
    let stats = s.stats("h").await.unwrap();
    let rows: Vec<_> = stats
        .subjects
        .iter()
        .map(|r| (r.name.as_str(), r.in_flight, r.queued))
        .collect();
    assert_eq!(rows, [("alice", 1, 0), ("bob", 0, 1)]);
    let (list, truncated) = s.list("h", 10).await.unwrap();
    assert!(!truncated);
    let keys: Vec<_> = list.iter().map(|t| (t.key, t.state)).collect();
    assert_eq!(
        keys,
        [
            (holder.key, TicketState::Admitted),
            (waiter.key, TicketState::Queued)
        ]
    );
    let (one, truncated) = s.list("h", 1).await.unwrap();
    assert_eq!((one.len(), truncated), (1, true));
    s.count_rejection("h").await.unwrap();
    assert_eq!(s.stats("h").await.unwrap().counters.rejected, 1);
    let empty = s.stats("never-seen").await.unwrap();
    assert_eq!((empty.in_flight, empty.queued), (0, 0));
}

pub async fn ticket_ids_are_distinct_and_name_their_host<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(limits(100, 100, 0))).await;
    let s = h.store();
    let mut seen = std::collections::HashSet::new();
    for i in 0..50 {
        let (id, _) = submit(s, "host.one", "alice", &format!("r{i}"))
            .await
            .unwrap();
        assert_eq!(id.host_id, "host.one");
        assert_eq!(TicketId::parse(&id.to_string()), Some(id.clone()));
        assert!(seen.insert(id.key));
    }
    assert_eq!(
        s.release(&TicketId::random("host.one"), Report::default())
            .await
            .unwrap(),
        None
    );
    assert_eq!(s.ticket(&TicketId::random("other")).await.unwrap(), None);
}

pub async fn per_host_limits_apply_to_their_host_only<H: Harness>()
where
    H::S: TicketStore,
{
    let mut table = LimitsTable::uniform(limits(2, 2, 0));
    table.hosts.insert("small".into(), limits(1, 1, 0));
    let h = H::build(table).await;
    let s = h.store();
    submit(s, "small", "alice", "r1").await.unwrap();
    assert_eq!(
        submit(s, "small", "bob", "r2").await.unwrap_err(),
        SubmitError::Refused(Refusal::Busy)
    );
    submit(s, "big", "alice", "r1").await.unwrap();
    submit(s, "big", "bob", "r2").await.unwrap();
}

pub async fn parking_lends_the_slot_and_unparking_queues_ahead<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(limits(1, 1, 4))).await;
    let s = h.store();
    let (human, v) = submit(s, "h", "alice", "needs-approval").await.unwrap();
    let (bob, _) = submit(s, "h", "bob", "b1").await.unwrap();
    let (alice2, _) = submit(s, "h", "alice", "a2").await.unwrap();
    let parked = s.park(&human).await.unwrap().unwrap().unwrap();
    assert_eq!(parked.state, TicketState::Parked);
    assert_eq!(
        state(s, &bob).await,
        Some(TicketState::Admitted),
        "the slot was lent out"
    );
    let stats = s.stats("h").await.unwrap();
    assert_eq!((stats.in_flight, stats.queued, stats.parked), (1, 1, 1));
    assert_eq!(
        s.park(&alice2).await.unwrap().unwrap(),
        Err(TicketState::Queued),
        "only an admitted ticket parks"
    );
    // The human answered, but bob holds the slot: alice's parked ticket queues ahead of a2.
    let back = s.unpark(&human).await.unwrap().unwrap().unwrap();
    assert_eq!((back.state, back.position), (TicketState::Queued, 0));
    s.release(&bob, Report::default()).await.unwrap();
    let again = s.ticket(&human).await.unwrap().unwrap();
    assert_eq!(again.state, TicketState::Admitted);
    assert!(again.grant > v.grant, "a new admission, a new grant");
    assert_eq!(state(s, &alice2).await, Some(TicketState::Queued));
    // Parked tickets keep their lease only while renewed.
    s.park(&human).await.unwrap().unwrap().unwrap();
    assert_eq!(state(s, &alice2).await, Some(TicketState::Admitted));
    h.advance(600).await;
    s.renew(std::slice::from_ref(&alice2), None).await.unwrap();
    h.advance(500).await;
    s.sweep_tickets().await.unwrap();
    assert_eq!(state(s, &human).await, Some(TicketState::Expired));
    assert_eq!(
        s.unpark(&human).await.unwrap().unwrap(),
        Err(TicketState::Expired)
    );
    assert_eq!(s.stats("h").await.unwrap().parked, 0);
    assert_eq!(s.park(&TicketId::random("h")).await.unwrap(), None);
}

// ---- auth buckets ----

/// The scheduling defaults with the given auth buckets and table bound.
fn auth_policy(buckets: &[(&str, BucketRule)], max_keys: usize) -> Policy {
    Policy {
        auth: AuthPolicy {
            local_max_keys: max_keys,
            buckets: buckets.iter().map(|(n, r)| (n.to_string(), *r)).collect(),
            configured: buckets.iter().map(|(n, _)| n.to_string()).collect(),
        },
        ..Policy::default()
    }
}

/// `n` attempts of `identity` on `endpoint`; the verdict of each.
async fn attempts<S: AuthStore>(
    s: &S,
    endpoint: &str,
    identity: &str,
    n: usize,
) -> Vec<AuthVerdict> {
    let rule = s
        .auth_policy()
        .bucket(endpoint)
        .expect("configured endpoint");
    let mut out = Vec::new();
    for _ in 0..n {
        let d = s.auth_attempt(endpoint, identity, rule).await.unwrap();
        assert!(!d.degraded, "the store decided, not a fallback");
        out.push(d.verdict);
    }
    out
}

use AuthVerdict::{Allowed, AttemptsExhausted, KeyTableFull, LockedOut};

const LOGIN: BucketRule = BucketRule::new(3, 1_000, 5_000);

pub async fn auth_allows_max_attempts_then_locks_out<H: Harness>()
where
    H::S: AuthStore,
{
    let h = H::build(auth_policy(&[("login", LOGIN)], 100)).await;
    let s = h.store();
    let rule = s.auth_policy().bucket("login").unwrap();
    let remaining: Vec<u32> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(
                s.auth_attempt("login", "mallory", rule)
                    .await
                    .unwrap()
                    .remaining,
            );
        }
        v
    };
    assert_eq!(remaining, [2, 1, 0]);
    let fourth = s.auth_attempt("login", "mallory", rule).await.unwrap();
    assert_eq!(
        (fourth.verdict, fourth.remaining, fourth.retry_after_ms),
        (LockedOut, 0, 5_000)
    );
    assert!(fourth.locked() && !fourth.allowed());
}

pub async fn auth_identities_and_endpoints_are_independent<H: Harness>()
where
    H::S: AuthStore,
{
    let h = H::build(auth_policy(&[("login", LOGIN), ("pair", LOGIN)], 100)).await;
    let s = h.store();
    assert_eq!(
        attempts(s, "login", "alice", 4).await,
        [Allowed, Allowed, Allowed, LockedOut]
    );
    assert_eq!(attempts(s, "login", "bob", 3).await, [Allowed; 3]);
    assert_eq!(attempts(s, "pair", "alice", 3).await, [Allowed; 3]);
    assert_eq!(attempts(s, "login", "alice", 1).await, [LockedOut]);
}

/// Ids shaped like key syntax never share state: an endpoint and identity that join to the same
/// text are different buckets.
pub async fn auth_ids_like_key_syntax_never_share_a_bucket<H: Harness>()
where
    H::S: AuthStore,
{
    let h = H::build(auth_policy(&[("a", LOGIN), ("a:b", LOGIN)], 100)).await;
    let s = h.store();
    assert_eq!(
        attempts(s, "a", "b:c", 4).await,
        [Allowed, Allowed, Allowed, LockedOut]
    );
    assert_eq!(attempts(s, "a:b", "c", 3).await, [Allowed; 3]);
    assert_eq!(attempts(s, "a", "b}:c{", 3).await, [Allowed; 3]);
}

pub async fn auth_window_expiry_opens_a_fresh_window<H: Harness>()
where
    H::S: AuthStore,
{
    let h = H::build(auth_policy(&[("login", LOGIN)], 100)).await;
    let s = h.store();
    assert_eq!(attempts(s, "login", "u", 2).await, [Allowed; 2]);
    h.advance(600).await;
    assert_eq!(attempts(s, "login", "u", 1).await, [Allowed]);
    h.advance(400).await; // the window opened 1,000 ms ago: it has ended
    assert_eq!(
        attempts(s, "login", "u", 4).await,
        [Allowed, Allowed, Allowed, LockedOut],
        "a fresh window with the whole budget"
    );
}

pub async fn auth_lockout_outlasts_the_window_and_is_not_extended<H: Harness>()
where
    H::S: AuthStore,
{
    let h = H::build(auth_policy(&[("login", LOGIN)], 100)).await;
    let s = h.store();
    let rule = s.auth_policy().bucket("login").unwrap();
    assert_eq!(
        attempts(s, "login", "u", 4).await,
        [Allowed, Allowed, Allowed, LockedOut]
    );
    h.advance(2_000).await; // past the 1 s window, inside the 5 s lockout
    let during = s.auth_attempt("login", "u", rule).await.unwrap();
    assert_eq!((during.verdict, during.retry_after_ms), (LockedOut, 3_000));
    h.advance(2_999).await;
    let last = s.auth_attempt("login", "u", rule).await.unwrap();
    assert_eq!(
        (last.verdict, last.retry_after_ms),
        (LockedOut, 1),
        "attempts during the lockout did not extend it"
    );
    h.advance(1).await;
    assert_eq!(
        attempts(s, "login", "u", 4).await,
        [Allowed, Allowed, Allowed, LockedOut],
        "after the lockout, a fresh window"
    );
}

pub async fn auth_without_lockout_refuses_until_the_window_ends<H: Harness>()
where
    H::S: AuthStore,
{
    let h = H::build(auth_policy(&[("login", BucketRule::new(2, 1_000, 0))], 100)).await;
    let s = h.store();
    let rule = s.auth_policy().bucket("login").unwrap();
    assert_eq!(attempts(s, "login", "u", 2).await, [Allowed; 2]);
    h.advance(300).await;
    let d = s.auth_attempt("login", "u", rule).await.unwrap();
    assert_eq!(
        (d.verdict, d.retry_after_ms, d.locked()),
        (AttemptsExhausted, 700, false)
    );
    h.advance(699).await;
    assert_eq!(
        attempts(s, "login", "u", 3).await,
        [AttemptsExhausted; 3],
        "no bypass while the window lasts"
    );
    h.advance(1).await;
    assert_eq!(attempts(s, "login", "u", 2).await, [Allowed; 2]);
}

pub async fn auth_reset_clears_bucket_and_lockout<H: Harness>()
where
    H::S: AuthStore,
{
    let h = H::build(auth_policy(&[("login", LOGIN)], 100)).await;
    let s = h.store();
    assert_eq!(
        attempts(s, "login", "u", 4).await,
        [Allowed, Allowed, Allowed, LockedOut]
    );
    let cleared = s.auth_reset("login", "u").await.unwrap();
    assert!(cleared.existed && cleared.was_locked);
    assert_eq!(attempts(s, "login", "u", 3).await, [Allowed; 3]);
    let cleared = s.auth_reset("login", "u").await.unwrap();
    assert!(cleared.existed && !cleared.was_locked);
    assert_eq!(attempts(s, "login", "u", 3).await, [Allowed; 3]);
    let none = s.auth_reset("login", "nobody").await.unwrap();
    assert!(!none.existed && !none.was_locked);
}

pub async fn auth_peek_counts_nothing<H: Harness>()
where
    H::S: AuthStore,
{
    let h = H::build(auth_policy(&[("login", LOGIN)], 100)).await;
    let s = h.store();
    let rule = s.auth_policy().bucket("login").unwrap();
    let peek = || async { s.auth_peek("login", "u", rule).await.unwrap() };
    for _ in 0..5 {
        let p = peek().await;
        assert_eq!((p.verdict, p.remaining, p.degraded), (Allowed, 3, false));
    }
    assert_eq!(attempts(s, "login", "u", 2).await, [Allowed; 2]);
    assert_eq!((peek().await.verdict, peek().await.remaining), (Allowed, 1));
    assert_eq!(attempts(s, "login", "u", 1).await, [Allowed]);
    h.advance(200).await;
    let p = peek().await;
    assert_eq!(
        (p.verdict, p.retry_after_ms, p.locked()),
        (AttemptsExhausted, 800, false),
        "the next attempt would start the lockout; nothing is locked yet"
    );
    assert_eq!(attempts(s, "login", "u", 1).await, [LockedOut]);
    h.advance(1_000).await;
    let p = peek().await;
    assert_eq!((p.verdict, p.retry_after_ms), (LockedOut, 4_000));
    h.advance(4_000).await;
    assert_eq!((peek().await.verdict, peek().await.remaining), (Allowed, 3));
    assert_eq!(attempts(s, "login", "u", 3).await, [Allowed; 3]);
}

pub async fn auth_default_budgets_are_built_in<H: Harness>()
where
    H::S: AuthStore,
{
    let h = H::build(LimitsTable::default()).await;
    let s = h.store();
    let mut approval = vec![Allowed; 10];
    approval.push(LockedOut);
    assert_eq!(attempts(s, "approval", "u", 11).await, approval);
    let mut magic = vec![Allowed; 5];
    magic.push(LockedOut);
    assert_eq!(attempts(s, "magic_link", "u", 6).await, magic);
    let approval_rule = s.auth_policy().bucket("approval").unwrap();
    let d = s
        .auth_attempt("approval", "u", approval_rule)
        .await
        .unwrap();
    assert_eq!(d.retry_after_ms, 300_000, "a five-minute lockout");
}

pub async fn auth_key_table_saturation_fails_closed_and_prunes<H: Harness>()
where
    H::S: AuthStore,
{
    let h = H::build(auth_policy(&[("login", LOGIN)], 3)).await;
    let s = h.store();
    for who in ["a", "b", "c"] {
        assert_eq!(attempts(s, "login", who, 1).await, [Allowed]);
    }
    h.advance(500).await;
    assert_eq!(
        attempts(s, "login", "d", 1).await,
        [KeyTableFull],
        "a new key is refused while the table is full"
    );
    assert_eq!(
        attempts(s, "login", "a", 1).await,
        [Allowed],
        "known keys work"
    );
    h.advance(500).await; // every window has ended
    s.sweep_auth().await.unwrap();
    assert_eq!(
        attempts(s, "login", "d", 1).await,
        [Allowed],
        "pruning freed room"
    );
    assert_eq!(attempts(s, "login", "e", 1).await, [Allowed]);
}

// ---- resource reservations ----

fn budgets(resources: ResourcePolicy) -> Policy {
    Policy {
        resources,
        ..Policy::default()
    }
}

fn tokens_cap(max_tokens: u64, unknown_usage: UnknownUsage) -> Budget {
    Budget {
        max_tokens: Some(max_tokens),
        max_cost: None,
        unknown_usage,
    }
}

fn step(run: &str, step: u32, requested: u64, input: u64) -> AuthorizeArgs {
    AuthorizeArgs {
        run_id: run.into(),
        step,
        subject: "alice".into(),
        account_id: None,
        model: "model-a".into(),
        requested_output_tokens: requested,
        estimated_input_tokens: input,
        estimated_cost: 0,
    }
}

fn for_account(mut a: AuthorizeArgs, account: &str) -> AuthorizeArgs {
    a.account_id = Some(account.into());
    a
}

fn used(input: u64, output: u64, coverage: Coverage) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cost: 0,
        coverage,
    }
}

async fn authorize<S: LedgerStore>(s: &S, args: AuthorizeArgs) -> Authorization {
    s.authorize("h", args)
        .await
        .expect("store reachable")
        .expect("a decision")
}

async fn settle<S: LedgerStore>(
    s: &S,
    run: &str,
    n: u32,
    usage: Usage,
) -> Result<bool, LedgerError> {
    s.settle("h", run, n, usage).await.expect("store reachable")
}

fn verdict(a: &Authorization) -> (Decision, Option<Reason>, u64) {
    (a.decision, a.reason, a.granted_output_tokens)
}

const ALLOW: Decision = Decision::Allow;
const DENY: Decision = Decision::Deny;

pub async fn reservations_allow_and_lower_the_grant<H: Harness>()
where
    H::S: LedgerStore,
{
    let h = H::build(budgets(ResourcePolicy {
        default: Some(tokens_cap(1_000, UnknownUsage::Reject)),
        ..ResourcePolicy::default()
    }))
    .await;
    let s = h.store();
    let a = authorize(s, step("r1", 1, 300, 200)).await;
    assert_eq!(verdict(&a), (ALLOW, None, 300));
    assert_eq!(a.remaining_tokens, Some(500));
    settle(s, "r1", 1, used(200, 300, Coverage::Complete))
        .await
        .unwrap();
    let b = authorize(s, step("r1", 2, 900, 100)).await;
    assert_eq!(
        verdict(&b),
        (ALLOW, None, 400),
        "lowered to what the cap leaves after the input estimate"
    );
    assert_eq!(b.remaining_tokens, Some(0));
    let none = H::build(Policy::default()).await;
    let free = authorize(none.store(), step("r1", 1, 900, 100)).await;
    assert_eq!(verdict(&free), (ALLOW, None, 900), "no budget applies");
    assert_eq!((free.remaining_tokens, free.remaining_cost), (None, None));
}

pub async fn reservations_deny_at_and_past_the_per_run_cap<H: Harness>()
where
    H::S: LedgerStore,
{
    let h = H::build(budgets(ResourcePolicy {
        default: Some(tokens_cap(1_000, UnknownUsage::Reject)),
        ..ResourcePolicy::default()
    }))
    .await;
    let s = h.store();
    authorize(s, step("r", 1, 500, 100)).await;
    // The step landed exactly on the cap: it completed.
    settle(s, "r", 1, used(400, 600, Coverage::Complete))
        .await
        .unwrap();
    let next = authorize(s, step("r", 2, 10, 0)).await;
    assert_eq!(verdict(&next), (DENY, Some(Reason::ResourceLimit), 0));
    assert_eq!(next.remaining_tokens, Some(0));
    authorize(s, step("over", 1, 500, 100)).await;
    settle(s, "over", 1, used(700, 800, Coverage::Complete))
        .await
        .unwrap();
    assert_eq!(
        verdict(&authorize(s, step("over", 2, 10, 0)).await),
        (DENY, Some(Reason::ResourceLimit), 0),
        "past the cap"
    );
    // An input estimate that leaves no room for output is denied as well.
    authorize(s, step("full", 1, 100, 0)).await;
    settle(s, "full", 1, used(0, 100, Coverage::Complete))
        .await
        .unwrap();
    assert_eq!(
        verdict(&authorize(s, step("full", 2, 10, 900)).await),
        (DENY, Some(Reason::ResourceLimit), 0)
    );
    let stats = s.ledger_stats("h").await.unwrap();
    assert_eq!((stats.denied, stats.open), (3, 0));
}

pub async fn reservations_intersect_default_subject_and_account_budgets<H: Harness>()
where
    H::S: LedgerStore,
{
    let mut p = ResourcePolicy {
        default: Some(tokens_cap(1_000, UnknownUsage::Allow)),
        ..ResourcePolicy::default()
    };
    p.subjects
        .insert("alice".into(), tokens_cap(600, UnknownUsage::Allow));
    p.accounts
        .insert("acct".into(), tokens_cap(800, UnknownUsage::Allow));
    let h = H::build(budgets(p)).await;
    let s = h.store();
    let a = authorize(s, for_account(step("r1", 1, 5_000, 0), "acct")).await;
    assert_eq!(
        verdict(&a),
        (ALLOW, None, 600),
        "the subject's cap is tightest"
    );
    let mut bob = for_account(step("r2", 1, 5_000, 0), "acct");
    bob.subject = "bob".into();
    assert_eq!(
        verdict(&authorize(s, bob).await),
        (ALLOW, None, 800),
        "the account's cap"
    );
    let mut carol = step("r3", 1, 5_000, 0);
    carol.subject = "carol".into();
    assert_eq!(
        verdict(&authorize(s, carol).await),
        (ALLOW, None, 1_000),
        "the default alone"
    );
}

pub async fn reservations_allowances_run_out_and_roll_over<H: Harness>()
where
    H::S: LedgerStore,
{
    let mut p = ResourcePolicy::default();
    p.allowances.insert(
        "acct".into(),
        Allowance {
            tokens: Some(1_000),
            cost: None,
            window_ms: 10_000,
        },
    );
    let h = H::build(budgets(p)).await;
    let s = h.store();
    let a = authorize(s, for_account(step("r1", 1, 700, 100), "acct")).await;
    assert_eq!(verdict(&a), (ALLOW, None, 700));
    assert_eq!(a.remaining_tokens, Some(200));
    let b = authorize(s, for_account(step("r2", 1, 700, 100), "acct")).await;
    assert_eq!(
        verdict(&b),
        (ALLOW, None, 100),
        "another run gets what is left"
    );
    let c = authorize(s, for_account(step("r3", 1, 10, 0), "acct")).await;
    assert_eq!(verdict(&c), (DENY, Some(Reason::QuotaExhausted), 0));
    // Settling below the reservation refunds the allowance.
    settle(s, "r1", 1, used(100, 100, Coverage::Complete))
        .await
        .unwrap();
    let d = authorize(s, for_account(step("r3", 2, 1_000, 0), "acct")).await;
    assert_eq!(verdict(&d), (ALLOW, None, 600));
    h.advance(10_000).await; // the window has ended
    let e = authorize(s, for_account(step("r4", 1, 5_000, 0), "acct")).await;
    assert_eq!(
        verdict(&e),
        (ALLOW, None, 1_000),
        "a new window with the whole allowance"
    );
    let other = authorize(s, step("r5", 1, 5_000, 0)).await;
    assert_eq!(
        verdict(&other),
        (ALLOW, None, 5_000),
        "no account, no allowance"
    );
}

pub async fn reservations_replay_authorize_and_settle<H: Harness>()
where
    H::S: LedgerStore,
{
    let h = H::build(budgets(ResourcePolicy {
        default: Some(tokens_cap(1_000, UnknownUsage::Reject)),
        ..ResourcePolicy::default()
    }))
    .await;
    let s = h.store();
    let first = authorize(s, step("r", 1, 300, 100)).await;
    let again = authorize(s, step("r", 1, 999, 999)).await;
    assert!(again.replay && !first.replay);
    assert_eq!(
        verdict(&again),
        verdict(&first),
        "the first decision, whatever the repeat asks"
    );
    let stats = s.ledger_stats("h").await.unwrap();
    assert_eq!(
        (stats.allowed, stats.open),
        (1, 1),
        "nothing reserved twice"
    );
    let usage = used(100, 250, Coverage::Complete);
    assert_eq!(settle(s, "r", 1, usage).await, Ok(false));
    assert_eq!(settle(s, "r", 1, usage).await, Ok(true), "a replay");
    assert_eq!(
        settle(s, "r", 1, used(100, 251, Coverage::Complete)).await,
        Err(LedgerError::SettleConflict)
    );
    assert_eq!(
        settle(s, "r", 2, usage).await,
        Err(LedgerError::NotAuthorized)
    );
    assert_eq!(
        settle(s, "never", 1, usage).await,
        Err(LedgerError::NotAuthorized)
    );
    let mut other = step("r", 2, 10, 0);
    other.subject = "bob".into();
    assert_eq!(
        s.authorize("h", other).await.unwrap(),
        Err(LedgerError::RunConflict { field: "subject" })
    );
    assert_eq!(s.ledger_stats("h").await.unwrap().settled, 1);
}

pub async fn reservations_unknown_usage_follows_the_budget_policy<H: Harness>()
where
    H::S: LedgerStore,
{
    for (policy, expected) in [
        (
            UnknownUsage::Reject,
            (DENY, Some(Reason::ResourceUsageUnknown), 0),
        ),
        (UnknownUsage::Allow, (ALLOW, None, 100)),
        (
            UnknownUsage::Defer,
            (Decision::Unknown, Some(Reason::ResourceUsageUnknown), 0),
        ),
    ] {
        let h = H::build(budgets(ResourcePolicy {
            default: Some(tokens_cap(1_000, policy)),
            ..ResourcePolicy::default()
        }))
        .await;
        let s = h.store();
        // Partial coverage makes the run's usage unknown.
        authorize(s, step("partial", 1, 100, 0)).await;
        settle(s, "partial", 1, used(0, 50, Coverage::Partial))
            .await
            .unwrap();
        assert_eq!(
            verdict(&authorize(s, step("partial", 2, 100, 0)).await),
            expected,
            "{policy:?} after partial coverage"
        );
        // So does an earlier step that was never settled.
        authorize(s, step("open", 1, 100, 0)).await;
        assert_eq!(
            verdict(&authorize(s, step("open", 2, 100, 0)).await),
            expected,
            "{policy:?} with step 1 unsettled"
        );
        // Known subtotals over the cap deny under every policy.
        authorize(s, step("over", 1, 100, 0)).await;
        settle(s, "over", 1, used(900, 200, Coverage::Unknown))
            .await
            .unwrap();
        assert_eq!(
            verdict(&authorize(s, step("over", 2, 100, 0)).await),
            (DENY, Some(Reason::ResourceLimit), 0),
            "{policy:?} over the cap"
        );
    }
    // Where no budget block applies (an allowance alone), unknown usage does not stop a run.
    let mut p = ResourcePolicy::default();
    p.allowances.insert(
        "acct".into(),
        Allowance {
            tokens: Some(10_000),
            cost: None,
            window_ms: 60_000,
        },
    );
    let h = H::build(budgets(p)).await;
    let s = h.store();
    authorize(s, for_account(step("open", 1, 100, 0), "acct")).await;
    assert_eq!(
        verdict(&authorize(s, for_account(step("open", 2, 100, 0), "acct")).await),
        (ALLOW, None, 100)
    );
}

pub async fn reservations_turn_uncertain_and_are_resolved_by_an_operator<H: Harness>()
where
    H::S: LedgerStore,
{
    let h = H::build(budgets(ResourcePolicy {
        default: Some(tokens_cap(1_000, UnknownUsage::Allow)),
        reservation_ttl_ms: 5_000,
        ..ResourcePolicy::default()
    }))
    .await;
    let s = h.store();
    authorize(s, step("a", 1, 400, 100)).await;
    authorize(s, step("b", 1, 400, 100)).await;
    h.advance(4_999).await;
    s.sweep_ledger().await.unwrap();
    let (list, _) = s.reservations("h", 10).await.unwrap();
    assert!(list.iter().all(|r| r.state == StepState::Reserved));
    h.advance(1).await;
    s.sweep_ledger().await.unwrap();
    let (list, truncated) = s.reservations("h", 10).await.unwrap();
    assert!(!truncated);
    let rows: Vec<_> = list
        .iter()
        .map(|r| (r.run_id.as_str(), r.step, r.state, r.reserved_tokens))
        .collect();
    assert_eq!(
        rows,
        [
            ("a", 1, StepState::Uncertain, 500),
            ("b", 1, StepState::Uncertain, 500)
        ]
    );
    // Still counted as spent: the run has 500 of 1,000 left.
    let next = authorize(s, step("a", 2, 1_000, 0)).await;
    assert_eq!(verdict(&next), (ALLOW, None, 500));
    let stats = s.ledger_stats("h").await.unwrap();
    assert_eq!((stats.open, stats.uncertain), (3, 2));
    // Released refunds; consumed keeps counting.
    s.resolve("h", "a", 1, Resolution::Released)
        .await
        .unwrap()
        .unwrap();
    s.resolve("h", "b", 1, Resolution::Consumed)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        s.resolve("h", "b", 1, Resolution::Released).await.unwrap(),
        Err(LedgerError::NotUncertain {
            state: "resolved as consumed"
        })
    );
    assert_eq!(
        s.resolve("h", "a", 2, Resolution::Released).await.unwrap(),
        Err(LedgerError::NotUncertain { state: "reserved" })
    );
    assert_eq!(
        s.resolve("h", "zzz", 1, Resolution::Released)
            .await
            .unwrap(),
        Err(LedgerError::NoSuchReservation)
    );
    settle(s, "a", 2, used(0, 100, Coverage::Complete))
        .await
        .unwrap();
    assert_eq!(
        verdict(&authorize(s, step("a", 3, 5_000, 0)).await),
        (ALLOW, None, 900),
        "step 1 refunded, step 2 settled at 100"
    );
    assert_eq!(
        verdict(&authorize(s, step("b", 2, 5_000, 0)).await),
        (ALLOW, None, 500),
        "step 1 consumed its 500"
    );
}

pub async fn reservations_count_fractional_dollars_exactly<H: Harness>()
where
    H::S: LedgerStore,
{
    let usd = |x: f64| usd_to_micros(x).unwrap();
    let mut p = ResourcePolicy {
        default: Some(Budget {
            max_tokens: None,
            max_cost: Some(usd(0.3)),
            unknown_usage: UnknownUsage::Reject,
        }),
        ..ResourcePolicy::default()
    };
    p.allowances.insert(
        "acct".into(),
        Allowance {
            tokens: None,
            cost: Some(usd(0.5)),
            window_ms: 60_000,
        },
    );
    let h = H::build(budgets(p)).await;
    let s = h.store();
    let cost = |c: f64| Usage {
        input_tokens: 10,
        output_tokens: 10,
        cost: usd(c),
        coverage: Coverage::Complete,
    };
    authorize(s, step("r", 1, 10, 10)).await;
    settle(s, "r", 1, cost(0.1)).await.unwrap();
    let second = authorize(s, step("r", 2, 10, 10)).await;
    assert_eq!(second.remaining_cost, Some(usd(0.2)));
    settle(s, "r", 2, cost(0.2)).await.unwrap();
    assert_eq!(
        verdict(&authorize(s, step("r", 3, 10, 10)).await),
        (DENY, Some(Reason::ResourceLimit), 0),
        "0.1 + 0.2 lands exactly on 0.3"
    );
    // A cost estimate is reserved: two runs cannot both take the allowance's last dollars.
    let mut est = for_account(step("x", 1, 10, 10), "acct");
    est.estimated_cost = usd(0.25);
    assert_eq!(verdict(&authorize(s, est.clone()).await).0, ALLOW);
    est.run_id = "y".into();
    assert_eq!(verdict(&authorize(s, est.clone()).await).0, ALLOW);
    est.run_id = "z".into();
    est.estimated_cost = usd(0.01);
    assert_eq!(
        verdict(&authorize(s, est).await),
        (DENY, Some(Reason::QuotaExhausted), 0)
    );
}

/// Expands to one `#[tokio::test]` per scenario for the harness type given.
fn rl_hit(key: &str, unit: Unit, addend: u64) -> Hit {
    Hit {
        key: key.into(),
        unit,
        addend,
    }
}

async fn rl<S: RateLimitStore>(s: &S, max: u64, hits: &[Hit]) -> Vec<Option<u64>> {
    s.rate_limit_hits("d", max, hits)
        .await
        .expect("store reachable")
        .counts
}

/// Counts in fixed windows aligned to the epoch (the harness clock starts at 1 s): a minute's
/// hits add up until 60 s, then count from zero; a look counts nothing; the answer carries
/// the windows' clock.
pub async fn rate_limits_count_in_epoch_aligned_windows<H: Harness>()
where
    H::S: RateLimitStore,
{
    let h = H::build(Policy::default()).await;
    let s = h.store();
    let minute = |n| [rl_hit("tenant=a|minute", Unit::Minute, n)];
    assert_eq!(rl(s, 10, &minute(1)).await, vec![Some(1)]);
    assert_eq!(rl(s, 10, &minute(3)).await, vec![Some(4)]);
    let look = s.rate_limit_hits("d", 10, &minute(0)).await.unwrap();
    assert_eq!((look.counts, look.now_ms), (vec![Some(4)], 1_000));
    h.advance(58_999).await; // 59.999 s: the same minute
    assert_eq!(rl(s, 10, &minute(1)).await, vec![Some(5)]);
    h.advance(1).await; // 60 s: the next minute
    assert_eq!(rl(s, 10, &minute(1)).await, vec![Some(1)]);
    // Another domain, another unit: other counters.
    let hour = [rl_hit("tenant=a|hour", Unit::Hour, 1)];
    assert_eq!(rl(s, 10, &hour).await, vec![Some(1)]);
    let other = s.rate_limit_hits("e", 10, &minute(1)).await.unwrap();
    assert_eq!(other.counts, vec![Some(1)]);
}

/// One request's hits are counted in order in one operation: the same counter twice adds up.
pub async fn rate_limits_count_one_requests_hits_in_order<H: Harness>()
where
    H::S: RateLimitStore,
{
    let h = H::build(Policy::default()).await;
    let s = h.store();
    let hits = [
        rl_hit("k=v|second", Unit::Second, 2),
        rl_hit("k=v|second", Unit::Second, 2),
        rl_hit("k=w|second", Unit::Second, 0),
    ];
    assert_eq!(rl(s, 10, &hits).await, vec![Some(2), Some(4), Some(0)]);
}

/// A domain holds at most `max` live counters: a hit needing one more is refused uncounted
/// (a look is not), the live ones count on, and a window's end makes room.
pub async fn rate_limits_refuse_new_counters_past_max<H: Harness>()
where
    H::S: RateLimitStore,
{
    let h = H::build(Policy::default()).await;
    let s = h.store();
    assert_eq!(
        rl(s, 2, &[rl_hit("a|second", Unit::Second, 1)]).await,
        vec![Some(1)]
    );
    assert_eq!(
        rl(s, 2, &[rl_hit("b|hour", Unit::Hour, 1)]).await,
        vec![Some(1)]
    );
    assert_eq!(
        rl(s, 2, &[rl_hit("c|hour", Unit::Hour, 1)]).await,
        vec![None]
    );
    assert_eq!(
        rl(s, 2, &[rl_hit("c|hour", Unit::Hour, 0)]).await,
        vec![Some(0)]
    );
    assert_eq!(
        rl(s, 2, &[rl_hit("b|hour", Unit::Hour, 1)]).await,
        vec![Some(2)]
    );
    h.advance(1_000).await; // a's second ended
    assert_eq!(
        rl(s, 2, &[rl_hit("c|hour", Unit::Hour, 1)]).await,
        vec![Some(1)]
    );
    assert_eq!(
        rl(s, 2, &[rl_hit("a|second", Unit::Second, 1)]).await,
        vec![None]
    );
    let hot = s
        .rate_limit_counters(&["d".to_string()], 10)
        .await
        .expect("store reachable");
    let hot: Vec<(String, u64)> = hot.into_iter().map(|c| (c.key, c.count)).collect();
    assert_eq!(hot, vec![("b|hour".into(), 2), ("c|hour".into(), 1)]);
    // The sweep drops ended windows from the domain's tally: after the hour, room again.
    h.advance(3_600_000).await;
    s.sweep_rate_limits(&["d".to_string()]).await.unwrap();
    assert!(
        s.rate_limit_counters(&["d".to_string()], 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        rl(s, 2, &[rl_hit("x|second", Unit::Second, 1)]).await,
        vec![Some(1)]
    );
    assert_eq!(
        rl(s, 2, &[rl_hit("y|second", Unit::Second, 1)]).await,
        vec![Some(1)]
    );
}

/// A subtraction (Envoy's `hits_subtrahend`) takes hits back from a counter of the current
/// window only, never below zero, and makes no counter, so it is never refused for a full
/// domain either.
pub async fn rate_limits_subtract_from_the_current_window_only<H: Harness>()
where
    H::S: RateLimitStore,
{
    let h = H::build(Policy::default()).await;
    let s = h.store();
    let minute = |n| [rl_hit("tenant=a|minute", Unit::Minute, n)];
    let sub = |hits: [Hit; 1]| async move {
        s.rate_limit_subtract("d", &hits)
            .await
            .expect("store reachable")
            .counts
    };
    assert_eq!(sub(minute(2)).await, vec![Some(0)], "nothing to take back");
    assert_eq!(rl(s, 1, &minute(7)).await, vec![Some(7)]);
    assert_eq!(sub(minute(5)).await, vec![Some(2)]);
    assert_eq!(rl(s, 1, &minute(0)).await, vec![Some(2)], "a look sees it");
    assert_eq!(sub(minute(5)).await, vec![Some(0)], "never below zero");
    assert_eq!(rl(s, 1, &minute(4)).await, vec![Some(4)]);
    assert_eq!(
        sub([rl_hit("tenant=b|minute", Unit::Minute, 1)]).await,
        vec![Some(0)],
        "no counter is made, though the domain is full"
    );
    h.advance(60_000).await; // the next minute
    assert_eq!(
        sub(minute(1)).await,
        vec![Some(0)],
        "last minute's is not this one"
    );
    assert_eq!(rl(s, 1, &minute(1)).await, vec![Some(1)]);
}

async fn counts_of<S: TicketStore>(s: &S, host: &str) -> history::Counts {
    history::Counts::of(&s.stats(host).await.expect("store reachable"))
}

/// A host's history: its refusals counted by reason, one sample per bucket (the first one
/// kept), the oldest forgotten past `buckets`, and what changed between samples.
async fn history_keeps_one_sample_per_bucket_and_refusals_by_reason<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(Limits {
        lease_ttl_ms: 60_000,
        ..limits(1, 1, 1)
    }))
    .await;
    let s = h.store();
    let shape = history::Shape {
        bucket_ms: 1_000,
        buckets: 3,
        max_hosts: 10,
    };
    h.advance(500).await; // the middle of a bucket
    submit(s, "hh", "a", "r1").await.expect("admitted");
    s.record_history("hh", &counts_of(s, "hh").await, &shape)
        .await
        .unwrap();
    submit(s, "hh", "a", "r2").await.expect("queued");
    let busy = s
        .submit("hh", args("a", None, "r3", SubmitMode::Try))
        .await
        .expect("store reachable");
    assert!(
        matches!(busy, Err(SubmitError::Refused(Refusal::Busy))),
        "{busy:?}"
    );
    let full = submit(s, "hh", "a", "r4").await;
    assert!(
        matches!(full, Err(SubmitError::Refused(Refusal::QueueFull))),
        "{full:?}"
    );
    let refusals = s.stats("hh").await.unwrap().counters.refusals;
    assert_eq!(
        (
            refusals[Refusal::Busy.index()],
            refusals[Refusal::QueueFull.index()]
        ),
        (1, 1)
    );
    // Later in the same bucket: not kept.
    h.advance(100).await;
    s.record_history("hh", &counts_of(s, "hh").await, &shape)
        .await
        .unwrap();
    assert_eq!(s.history("hh").await.unwrap().len(), 1);
    h.advance(1_000).await;
    s.record_history("hh", &counts_of(s, "hh").await, &shape)
        .await
        .unwrap();
    let samples = s.history("hh").await.unwrap();
    let p = history::points(&samples);
    assert_eq!(p.len(), 1);
    assert_eq!(
        (
            p[0].span_ms,
            p[0].in_flight,
            p[0].queued,
            p[0].admitted,
            p[0].refused
        ),
        (1_100, 1, 1, 0, [1, 1, 0, 0])
    );
    // Ten buckets more: four samples are kept (three buckets and the one before them).
    for _ in 0..10 {
        h.advance(1_000).await;
        s.record_history("hh", &counts_of(s, "hh").await, &shape)
            .await
            .unwrap();
    }
    assert_eq!(s.history("hh").await.unwrap().len(), 4);
    assert!(s.history("other").await.unwrap().is_empty());
}

/// A host's newest endings: who ended how, refusals with their reason, a superseded ticket
/// with the one that superseded it, newest first.
async fn recent_endings_name_who_ended_and_why<H: Harness>()
where
    H::S: TicketStore,
{
    let h = H::build(LimitsTable::uniform(Limits {
        lease_ttl_ms: 60_000,
        ..limits(1, 1, 1)
    }))
    .await;
    let s = h.store();
    let (held, _) = submit(s, "re", "alice", "r1").await.expect("admitted");
    submit(s, "re", "bob", "r2").await.expect("queued");
    let busy = s
        .submit("re", args("carol", Some("acct"), "r3", SubmitMode::Try))
        .await
        .expect("store reachable");
    assert!(
        matches!(busy, Err(SubmitError::Refused(Refusal::Busy))),
        "{busy:?}"
    );
    assert!(
        submit(s, "re", "dave", "r4").await.is_err(),
        "the queue is full"
    );
    h.advance(10).await;
    s.release(&held, Report::default()).await.unwrap();
    // Keep-newest: a newer ticket of the key supersedes its waiter.
    let keyed = |run: &str| SubmitArgs {
        keyed: Some(KeyArgs {
            key: "conv".into(),
            policy: KeyPolicy::KeepNewest,
            supersede_running: false,
            debounce_ms: 0,
            debounce_max_ms: 0,
        }),
        ..args("erin", None, run, SubmitMode::Queue)
    };
    let _ = s
        .submit("re2", keyed("k0"))
        .await
        .unwrap()
        .expect("admitted");
    let (waiter, _) = s.submit("re2", keyed("k1")).await.unwrap().expect("queued");
    let (newer, _) = s.submit("re2", keyed("k2")).await.unwrap().expect("queued");

    let e = s.recent_endings("re", 10).await.unwrap();
    let seen: Vec<_> = e
        .iter()
        .map(|e| (e.ended_as, &*e.run_id, &*e.subject, e.account.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (EndedAs::Ticket(TicketState::Released), "r1", "alice", None),
            (EndedAs::Refused("QUEUE_FULL"), "r4", "dave", None),
            (EndedAs::Refused("BUSY"), "r3", "carol", Some("acct")),
        ]
    );
    assert_eq!(e[0].key, Some(held.key));
    assert_eq!((&*e[0].instance, e[1].key), ("replica-1", None));
    assert!(
        e[0].at > e[1].at,
        "the release came 10 ms after the refusals"
    );
    assert_eq!(s.recent_endings("re", 1).await.unwrap().len(), 1);
    let k = s.recent_endings("re2", 10).await.unwrap();
    assert_eq!(k.len(), 1, "{k:?}");
    assert_eq!(
        (
            k[0].ended_as,
            k[0].key,
            k[0].superseded_by,
            k[0].keyed.as_deref()
        ),
        (
            EndedAs::Ticket(TicketState::Superseded),
            Some(waiter.key),
            Some(newer.key),
            Some("conv")
        )
    );
    assert!(s.recent_endings("nobody", 10).await.unwrap().is_empty());
}

macro_rules! conformance {
    ($harness:ty: $($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $scenario() {
                super::$scenario::<$harness>().await;
            }
        )*
    };
}

/// Every scenario every store must pass, then any of the store's own.
macro_rules! every_scenario {
    ($harness:ty $(, $own:ident)* $(,)?) => {
        conformance!($harness:
            admits_to_the_cap_then_queues_then_refuses,
            round_robin_across_subjects,
            accounts_are_keyed_per_host,
            release_dispatches_and_wakes_the_waiter,
            renew_extends_leases_and_reports_unknown_ids,
            an_expired_lease_frees_its_slot_for_the_next_waiter,
            repeated_run_ids_are_idempotent_until_retention_ends,
            ended_tickets_are_compact_and_bounded_per_host,
            shed_oldest_breaks_ties_by_age_not_by_name,
            release_by_run_finds_the_ticket_submit_made,
            ticket_ids_like_key_syntax_never_share_state,
            auth_ids_like_key_syntax_never_share_a_bucket,
            stats_and_listing_show_live_tickets,
            ticket_ids_are_distinct_and_name_their_host,
            per_host_limits_apply_to_their_host_only,
            parking_lends_the_slot_and_unparking_queues_ahead,
            auth_allows_max_attempts_then_locks_out,
            auth_identities_and_endpoints_are_independent,
            auth_window_expiry_opens_a_fresh_window,
            auth_lockout_outlasts_the_window_and_is_not_extended,
            auth_without_lockout_refuses_until_the_window_ends,
            auth_reset_clears_bucket_and_lockout,
            auth_peek_counts_nothing,
            auth_default_budgets_are_built_in,
            reservations_allow_and_lower_the_grant,
            reservations_deny_at_and_past_the_per_run_cap,
            reservations_intersect_default_subject_and_account_budgets,
            reservations_allowances_run_out_and_roll_over,
            reservations_replay_authorize_and_settle,
            reservations_unknown_usage_follows_the_budget_policy,
            reservations_turn_uncertain_and_are_resolved_by_an_operator,
            reservations_count_fractional_dollars_exactly,
            rate_limits_count_in_epoch_aligned_windows,
            rate_limits_count_one_requests_hits_in_order,
            rate_limits_refuse_new_counters_past_max,
            rate_limits_subtract_from_the_current_window_only,
            history_keeps_one_sample_per_bucket_and_refusals_by_reason,
            recent_endings_name_who_ended_and_why,
            $($own,)*
        );
    };
}

mod memory {
    // The auth key-table bound is the embedded store's own: on Redis it is the local
    // fallback's, tested with Redis unreachable in tests/redis.rs.
    every_scenario!(
        super::Memory,
        auth_key_table_saturation_fails_closed_and_prunes
    );
}

mod durable {
    every_scenario!(
        super::Durable,
        auth_key_table_saturation_fails_closed_and_prunes
    );
}

mod redis {
    every_scenario!(super::Redis);
}
