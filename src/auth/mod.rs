//! Auth buckets: brute-force budgets for gateway auth endpoints, and the bounded local table
//! that decides them in process memory.
//!
//! The [`AuthTable`] is pure (every call takes `now`, no I/O, no locks). The embedded store keeps
//! one behind a mutex as its auth state; the Redis store keeps one as the fallback it decides
//! with while Redis is unreachable. The Redis store's shared buckets run the same rules in Lua;
//! the store conformance scenarios hold both to them.
//!
//! The rules, per `(endpoint, identity)`:
//! * The window is anchored at the first attempt and lasts `window_ms`.
//! * Exactly `max_attempts` attempts pass in a window. Attempt max+1 is refused and starts a
//!   lockout of `lockout_ms`; attempts during the lockout are refused and do not extend it.
//!   After the lockout the next attempt opens a fresh window.
//! * With `lockout_ms` 0, attempts past the budget are refused until the window ends (there is
//!   no way around the budget by configuring no lockout).
//! * The table holds at most `max_keys` keys per endpoint. A key whose window and lockout have
//!   both ended is pruned; when an endpoint's keys are all live and `max_keys` many, a new key
//!   of that endpoint is refused (fail closed) while its known keys keep their buckets, and the
//!   other endpoints are not affected: a flood of made-up identities on one endpoint refuses
//!   new identities of that endpoint only.

mod image;

pub use image::{AuthImage, EndpointImage};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;

use crate::scheduler::Millis;

/// One endpoint's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketRule {
    /// Attempts that pass in one window; at least 1.
    pub max_attempts: u32,
    /// Length of the window, from its first attempt; at least 1 ms.
    pub window_ms: Millis,
    /// How long a key stays refused after exceeding its budget; 0 = until its window ends.
    pub lockout_ms: Millis,
}

impl BucketRule {
    pub const fn new(max_attempts: u32, window_ms: Millis, lockout_ms: Millis) -> Self {
        BucketRule {
            max_attempts,
            window_ms,
            lockout_ms,
        }
    }
}

/// The buckets present unless the configuration overrides them by name.
pub const BUILT_IN_BUCKETS: [(&str, BucketRule); 4] = [
    ("approval", BucketRule::new(10, 60_000, 300_000)),
    ("ws_upgrade", BucketRule::new(10, 60_000, 300_000)),
    ("magic_link", BucketRule::new(5, 60_000, 300_000)),
    ("pairing_verify", BucketRule::new(5, 60_000, 300_000)),
];

/// The budget a configured endpoint gets for every field its configuration leaves out, when it
/// is not one of the [`BUILT_IN_BUCKETS`].
pub const DEFAULT_BUCKET: BucketRule = BucketRule::new(10, 60_000, 300_000);

/// Default bound of the local bucket table, per endpoint: about 17 MiB of memory for each
/// endpoint flooded to its bound.
pub const DEFAULT_LOCAL_MAX_KEYS: usize = 100_000;

/// Whether `name` may name an auth endpoint's bucket (in the configuration, or declared by a
/// caller): 1..64 letters, digits, '_', '-' or '.'.
pub fn valid_endpoint_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

/// The rule [`valid_endpoint_name`] checks, as error messages say it.
pub const ENDPOINT_NAME_RULE: &str = "endpoint names are 1..64 letters, digits, '_', '-' or '.'";

/// Longest auth window or lockout: 7 days.
pub const MAX_AUTH_MS: u64 = 7 * 24 * 3_600_000;

/// Most endpoints callers may declare buckets for that the configuration does not name, per
/// authority process: each is a bucket table of up to `local_max_keys` keys and a metrics label.
pub const MAX_DECLARED_BUCKETS: usize = 64;

/// The auth buckets an installation enforces.
#[derive(Clone, Debug, PartialEq)]
pub struct AuthPolicy {
    /// Bound of the local bucket table per endpoint (the embedded store's table, or the Redis
    /// store's fallback).
    pub local_max_keys: usize,
    /// Buckets by endpoint name: the built-in ones, and the file's over them.
    pub buckets: BTreeMap<String, BucketRule>,
    /// The endpoints the configuration file names: their buckets win over a caller's declared
    /// one. The other entries of `buckets` are built in, and a declared bucket wins over them.
    pub configured: BTreeSet<String>,
}

impl Default for AuthPolicy {
    fn default() -> Self {
        AuthPolicy {
            local_max_keys: DEFAULT_LOCAL_MAX_KEYS,
            buckets: BUILT_IN_BUCKETS
                .iter()
                .map(|(name, rule)| (name.to_string(), *rule))
                .collect(),
            configured: BTreeSet::new(),
        }
    }
}

/// Where the bucket that decides an attempt comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BucketSource {
    /// The configuration file names the endpoint.
    Operator,
    /// The caller declared it, and the file does not name the endpoint.
    Declared,
    /// Built in, and the caller declared none.
    BuiltIn,
}

impl AuthPolicy {
    /// The rule of a configured endpoint.
    pub fn bucket(&self, endpoint: &str) -> Option<BucketRule> {
        self.buckets.get(endpoint).copied()
    }

    /// The bucket that decides an attempt on `endpoint` whose caller declared `declared`: the
    /// operator's, else the declared one, else the built-in one; `None` for an endpoint with
    /// none of them.
    pub fn resolve(
        &self,
        endpoint: &str,
        declared: Option<BucketRule>,
    ) -> Option<(BucketRule, BucketSource)> {
        let known = self.bucket(endpoint);
        match (known, declared) {
            (Some(rule), _) if self.configured.contains(endpoint) => {
                Some((rule, BucketSource::Operator))
            }
            (_, Some(rule)) => Some((rule, BucketSource::Declared)),
            (Some(rule), None) => Some((rule, BucketSource::BuiltIn)),
            (None, None) => None,
        }
    }

    /// The configured endpoint names, sorted.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.buckets.keys().map(String::as_str)
    }
}

/// Why an attempt was decided the way it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthVerdict {
    /// The attempt fits the budget of its window.
    Allowed,
    /// The key is locked out: this attempt exceeded the budget and started the lockout, or it
    /// came during one.
    LockedOut,
    /// The budget of the window is spent and the bucket has no lockout: refused until the
    /// window ends.
    AttemptsExhausted,
    /// The local table is full of live keys and this key is not one of them (fail closed).
    KeyTableFull,
}

impl AuthVerdict {
    /// The `reason` code of the wire response; empty when allowed.
    pub fn code(self) -> &'static str {
        match self {
            AuthVerdict::Allowed => "",
            AuthVerdict::LockedOut => "LOCKED_OUT",
            AuthVerdict::AttemptsExhausted => "ATTEMPTS_EXHAUSTED",
            AuthVerdict::KeyTableFull => "KEY_TABLE_FULL",
        }
    }
}

/// The answer to one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthDecision {
    pub verdict: AuthVerdict,
    /// Attempts left in the current window after this one (0 when refused).
    pub remaining: u32,
    /// When refused: how long until an attempt can pass again. 0 when allowed.
    pub retry_after_ms: Millis,
    /// True when the shared store was unreachable and a local bucket decided.
    pub degraded: bool,
}

impl AuthDecision {
    pub fn allowed(&self) -> bool {
        self.verdict == AuthVerdict::Allowed
    }

    pub fn locked(&self) -> bool {
        self.verdict == AuthVerdict::LockedOut
    }

    fn refused(verdict: AuthVerdict, retry_after_ms: Millis) -> Self {
        AuthDecision {
            verdict,
            remaining: 0,
            retry_after_ms: retry_after_ms.max(1),
            degraded: false,
        }
    }
}

/// What a reset or unlock found before it cleared the key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthCleared {
    /// The key had a bucket or a lockout.
    pub existed: bool,
    /// The key was locked out.
    pub was_locked: bool,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Attempts counted in the current window.
    count: u32,
    /// End of the current window; 0 while locked out (the lockout replaces the window).
    window_end: Millis,
    /// End of the lockout; 0 when none was started.
    locked_until: Millis,
}

impl Entry {
    /// When the key no longer matters: its window and lockout have both ended.
    fn expires_at(&self) -> Millis {
        self.window_end.max(self.locked_until)
    }
}

/// A heap item: when a key may expire. An item is stale when its key has since moved its
/// expiry; the key then has a newer item, and the stale one is dropped when it surfaces.
type Expiry = Reverse<(Millis, Box<str>)>;

/// One endpoint's keys and when they expire.
#[derive(Debug, Default)]
struct Endpoint {
    /// The hasher is std's keyed SipHash: identities come from callers, so a fixed hash would
    /// let one flood a single bucket chain.
    keys: HashMap<Box<str>, Entry>,
    /// Every key's current expiry (and stale ones), soonest first.
    expiries: BinaryHeap<Expiry>,
}

impl Endpoint {
    /// Stale items pile up while keys move their expiry or are reset; rebuild the heap from the
    /// live keys before they outnumber them.
    fn compact(&mut self) {
        if self.expiries.len() > 2 * self.keys.len() + 1024 {
            self.expiries = self
                .keys
                .iter()
                .map(|(id, e)| Reverse((e.expires_at(), id.clone())))
                .collect();
        }
    }
}

/// The bounded table of buckets, keyed by endpoint then identity, at most `max_keys` per
/// endpoint.
///
/// Cost: an attempt is O(1) map work plus O(log n) when it opens a window or starts a lockout;
/// pruning pops only expired heap items, so its cost is paid once per expiry (and a look at
/// each endpoint's soonest expiry: endpoints are the configured buckets, a handful).
#[derive(Debug)]
pub struct AuthTable {
    max_keys: usize,
    endpoints: HashMap<Arc<str>, Endpoint>,
    len: usize,
}

impl AuthTable {
    /// A table of at most `max_keys` keys per endpoint.
    pub fn new(max_keys: usize) -> Self {
        AuthTable {
            max_keys: max_keys.max(1),
            endpoints: HashMap::new(),
            len: 0,
        }
    }

    /// Keys of one endpoint (live ones, plus expired ones not yet pruned).
    pub fn endpoint_len(&self, endpoint: &str) -> usize {
        self.endpoints.get(endpoint).map_or(0, |e| e.keys.len())
    }

    /// Keys in the table (live ones, plus expired ones not yet pruned).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Count one attempt of `identity` against `endpoint`'s bucket.
    pub fn attempt(
        &mut self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
        now: Millis,
    ) -> AuthDecision {
        self.prune(now);
        let max_keys = self.max_keys;
        let ep = self.endpoints.get_mut(endpoint);
        let full = ep.as_ref().is_some_and(|e| e.keys.len() >= max_keys);
        let soonest = ep
            .as_ref()
            .and_then(|e| e.expiries.peek())
            .map_or(now + 1, |Reverse(x)| x.0);
        let known = ep.and_then(|e| e.keys.get_mut(identity));
        let (decision, new_expiry) = match known {
            Some(e) if e.locked_until > now => (
                AuthDecision::refused(AuthVerdict::LockedOut, e.locked_until - now),
                None,
            ),
            Some(e) if e.window_end > now => {
                if e.count < rule.max_attempts {
                    e.count += 1;
                    (allowed(rule.max_attempts - e.count), None)
                } else if rule.lockout_ms > 0 {
                    *e = Entry {
                        count: 0,
                        window_end: 0,
                        locked_until: now + rule.lockout_ms,
                    };
                    (
                        AuthDecision::refused(AuthVerdict::LockedOut, rule.lockout_ms),
                        Some(e.expires_at()),
                    )
                } else {
                    (
                        AuthDecision::refused(AuthVerdict::AttemptsExhausted, e.window_end - now),
                        None,
                    )
                }
            }
            // Window and lockout both over but not yet pruned (only when `now` went back):
            // a fresh window.
            Some(e) => {
                *e = fresh(rule, now);
                (allowed(rule.max_attempts - 1), Some(e.expires_at()))
            }
            None if full => {
                return AuthDecision::refused(
                    AuthVerdict::KeyTableFull,
                    soonest.saturating_sub(now),
                );
            }
            None => {
                let entry = fresh(rule, now);
                let expiry = entry.expires_at();
                let ep = match self.endpoints.get_mut(endpoint) {
                    Some(e) => e,
                    None => self.endpoints.entry(Arc::from(endpoint)).or_default(),
                };
                ep.keys.insert(Box::from(identity), entry);
                self.len += 1;
                (allowed(rule.max_attempts - 1), Some(expiry))
            }
        };
        if let Some(at) = new_expiry {
            self.push_expiry(endpoint, identity, at);
        }
        decision
    }

    /// What an attempt at `now` would meet, without counting it: allowed with the attempts
    /// left in the window (the whole budget for a key with none), or the refusal it would get.
    /// One exception: the attempt that would start a lockout is reported as allowed = false,
    /// ATTEMPTS_EXHAUSTED until the window's end, since nothing is locked yet.
    pub fn peek(
        &self,
        endpoint: &str,
        identity: &str,
        rule: BucketRule,
        now: Millis,
    ) -> AuthDecision {
        let ep = self.endpoints.get(endpoint);
        match ep.and_then(|e| e.keys.get(identity)) {
            Some(e) if e.locked_until > now => {
                AuthDecision::refused(AuthVerdict::LockedOut, e.locked_until - now)
            }
            Some(e) if e.window_end > now => peek_window(rule, e.count, e.window_end, now),
            Some(_) => allowed(rule.max_attempts),
            None if ep.is_some_and(|e| e.keys.len() >= self.max_keys) => {
                let soonest = ep
                    .and_then(|e| e.expiries.peek())
                    .map_or(now + 1, |Reverse(x)| x.0);
                AuthDecision::refused(AuthVerdict::KeyTableFull, soonest.saturating_sub(now))
            }
            None => allowed(rule.max_attempts),
        }
    }

    /// When the key's lockout ends, if it is locked out at `now`.
    pub fn locked_until(&self, endpoint: &str, identity: &str, now: Millis) -> Option<Millis> {
        self.endpoints
            .get(endpoint)?
            .keys
            .get(identity)
            .map(|e| e.locked_until)
            .filter(|until| *until > now)
    }

    /// Clear the bucket and any lockout of a key.
    pub fn reset(&mut self, endpoint: &str, identity: &str, now: Millis) -> AuthCleared {
        let Some(ep) = self.endpoints.get_mut(endpoint) else {
            return AuthCleared::default();
        };
        match ep.keys.remove(identity) {
            Some(e) => {
                self.len -= 1;
                ep.compact();
                // An expired key not yet pruned is reported as absent, as it would be a moment
                // later.
                AuthCleared {
                    existed: e.expires_at() > now,
                    was_locked: e.locked_until > now,
                }
            }
            None => AuthCleared::default(),
        }
    }

    /// Whether [`AuthTable::prune`] at `now` would look at any key.
    pub fn prune_due(&self, now: Millis) -> bool {
        self.endpoints.values().any(|ep| {
            ep.expiries
                .peek()
                .is_some_and(|Reverse((at, _))| *at <= now)
        })
    }

    /// The bound on keys per endpoint (the configuration's `auth.local_max_keys`, which a
    /// restart may have changed); keys already held stay.
    pub fn set_max_keys(&mut self, max_keys: usize) {
        self.max_keys = max_keys.max(1);
    }

    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Drop every key whose window and lockout have ended by `now`; returns how many.
    pub fn prune(&mut self, now: Millis) -> usize {
        let mut removed = 0;
        for ep in self.endpoints.values_mut() {
            while ep
                .expiries
                .peek()
                .is_some_and(|Reverse((at, _))| *at <= now)
            {
                let Some(Reverse((_, identity))) = ep.expiries.pop() else {
                    break;
                };
                if ep
                    .keys
                    .get(&identity)
                    .is_some_and(|e| e.expires_at() <= now)
                {
                    ep.keys.remove(&identity);
                    removed += 1;
                }
            }
        }
        self.len -= removed;
        removed
    }

    fn push_expiry(&mut self, endpoint: &str, identity: &str, at: Millis) {
        if let Some(ep) = self.endpoints.get_mut(endpoint) {
            ep.expiries.push(Reverse((at, Box::from(identity))));
            ep.compact();
        }
    }
}

fn fresh(rule: BucketRule, now: Millis) -> Entry {
    Entry {
        count: 1,
        window_end: now + rule.window_ms,
        locked_until: 0,
    }
}

/// [`AuthTable::peek`] for a key whose window is open: `count` attempts so far, ending at
/// `window_end`. Shared with the Redis store's peek, which reads the same two numbers.
pub fn peek_window(rule: BucketRule, count: u32, window_end: Millis, now: Millis) -> AuthDecision {
    if count < rule.max_attempts {
        allowed(rule.max_attempts - count)
    } else {
        AuthDecision::refused(AuthVerdict::AttemptsExhausted, window_end - now)
    }
}

fn allowed(remaining: u32) -> AuthDecision {
    AuthDecision {
        verdict: AuthVerdict::Allowed,
        remaining,
        retry_after_ms: 0,
        degraded: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: BucketRule = BucketRule::new(3, 1_000, 5_000);

    fn verdicts(
        t: &mut AuthTable,
        id: &str,
        rule: BucketRule,
        now: Millis,
        n: usize,
    ) -> Vec<AuthVerdict> {
        (0..n)
            .map(|_| t.attempt("ep", id, rule, now).verdict)
            .collect()
    }

    #[test]
    fn remaining_counts_down_and_the_refusal_says_when_to_return() {
        let mut t = AuthTable::new(10);
        let a: Vec<_> = (0..3)
            .map(|_| t.attempt("ep", "u", RULE, 100).remaining)
            .collect();
        assert_eq!(a, [2, 1, 0]);
        let d = t.attempt("ep", "u", RULE, 400);
        assert_eq!(
            (d.verdict, d.retry_after_ms, d.remaining),
            (AuthVerdict::LockedOut, 5_000, 0)
        );
        let d = t.attempt("ep", "u", RULE, 1_400);
        assert_eq!(
            (d.verdict, d.retry_after_ms),
            (AuthVerdict::LockedOut, 4_000)
        );
    }

    #[test]
    fn a_lockout_resets_the_window_so_the_next_attempt_after_it_is_fresh() {
        let mut t = AuthTable::new(10);
        verdicts(&mut t, "u", RULE, 0, 4);
        assert_eq!(
            t.attempt("ep", "u", RULE, 4_999).verdict,
            AuthVerdict::LockedOut
        );
        assert_eq!(
            verdicts(&mut t, "u", RULE, 5_000, 4),
            [
                AuthVerdict::Allowed,
                AuthVerdict::Allowed,
                AuthVerdict::Allowed,
                AuthVerdict::LockedOut
            ]
        );
    }

    #[test]
    fn without_lockout_refusals_last_until_the_window_ends() {
        let rule = BucketRule::new(2, 1_000, 0);
        let mut t = AuthTable::new(10);
        verdicts(&mut t, "u", rule, 0, 2);
        let d = t.attempt("ep", "u", rule, 300);
        assert_eq!(
            (d.verdict, d.retry_after_ms),
            (AuthVerdict::AttemptsExhausted, 700)
        );
        assert_eq!(
            t.attempt("ep", "u", rule, 999).verdict,
            AuthVerdict::AttemptsExhausted
        );
        assert_eq!(
            t.attempt("ep", "u", rule, 1_000).verdict,
            AuthVerdict::Allowed
        );
    }

    #[test]
    fn a_full_table_refuses_new_keys_until_one_expires() {
        let mut t = AuthTable::new(2);
        t.attempt("ep", "a", RULE, 0);
        t.attempt("ep", "b", RULE, 500);
        let d = t.attempt("ep", "c", RULE, 600);
        assert_eq!(
            (d.verdict, d.retry_after_ms),
            (AuthVerdict::KeyTableFull, 400)
        );
        assert_eq!(
            t.attempt("ep", "a", RULE, 600).verdict,
            AuthVerdict::Allowed
        );
        assert_eq!(
            t.attempt("ep", "c", RULE, 1_000).verdict,
            AuthVerdict::Allowed
        );
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_flooded_endpoint_refuses_only_its_own_new_keys() {
        let mut t = AuthTable::new(3);
        for i in 0..10 {
            t.attempt("magic_link", &format!("made-up-{i}@example.com"), RULE, 0);
        }
        assert_eq!(t.endpoint_len("magic_link"), 3);
        assert_eq!(
            t.attempt("magic_link", "real@example.com", RULE, 1).verdict,
            AuthVerdict::KeyTableFull,
            "the flooded endpoint fails closed for new identities"
        );
        for ep in ["approval", "ws_upgrade", "pairing_verify"] {
            assert!(
                t.attempt(ep, "real@example.com", RULE, 1).allowed(),
                "{ep} is not refused for a flood on another endpoint"
            );
        }
        assert_eq!(t.len(), 6);
    }

    #[test]
    fn stale_expiries_are_compacted_and_never_prune_a_live_key() {
        let mut t = AuthTable::new(10);
        t.attempt("ep", "live", RULE, 0);
        // Keys reset right after their first attempt leave their expiry behind in the heap;
        // it is rebuilt before the stale items pile up.
        for i in 0..5_000 {
            let id = format!("k{i}");
            assert!(t.attempt("ep", &id, RULE, 10).allowed());
            t.reset("ep", &id, 10);
            let ep = &t.endpoints["ep"];
            assert!(ep.expiries.len() <= 2 * ep.keys.len() + 1025);
        }
        assert_eq!(t.len(), 1);
        assert_eq!(t.prune(999), 0, "the live window is kept");
        assert_eq!(t.prune(1_000), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn reset_reports_what_it_cleared() {
        let mut t = AuthTable::new(10);
        verdicts(&mut t, "u", RULE, 0, 4);
        assert_eq!(
            t.reset("ep", "u", 10),
            AuthCleared {
                existed: true,
                was_locked: true
            }
        );
        assert_eq!(t.reset("ep", "u", 10), AuthCleared::default());
        assert_eq!(t.reset("other", "u", 10), AuthCleared::default());
        assert!(t.is_empty());
    }
}
