//! Adaptive account caps: what a provider account can take, learned from the outcomes runs
//! report when they release their slot. Pure functions on integers (caps in thousandths), so
//! the Redis store's scripts compute exactly the same values.

use super::Millis;

/// How one account's cap adapts (`accounts.<id>.adaptive`, or `scheduling.adaptive` for every
/// account that names no cap of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adaptive {
    /// The cap never goes below this (>= 1).
    pub min: u32,
    /// The cap starts here and never goes above it.
    pub max: u32,
    /// A limit outcome multiplies the cap by this many thousandths (1..=999; 700 = × 0.7).
    pub decrease_pm: u32,
    /// OK outcomes at the cap raise it by about this much per cap's worth of them.
    pub increase: u32,
    /// At most one decrease per this long, so one burst of 429s counts once.
    pub cooldown_ms: u64,
}

impl Adaptive {
    /// A cap of `max` with the defaults: min 1, decrease 0.7, increase 1, cooldown 1 s.
    pub fn up_to(max: u32) -> Self {
        Adaptive {
            min: 1,
            max,
            decrease_pm: 700,
            increase: 1,
            cooldown_ms: 1_000,
        }
    }

    /// The state an account starts in (and returns to once it is at `max` again).
    pub fn fresh(&self) -> AdaptiveState {
        AdaptiveState {
            cap_milli: u64::from(self.max) * 1000,
            last_cut: 0,
            knee_milli: 0,
        }
    }
}

/// One account's learned cap, in thousandths, when it was last cut (0 = never), and the knee:
/// the cap at which the provider last refused (0 = none known).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveState {
    pub cap_milli: u64,
    pub last_cut: Millis,
    pub knee_milli: u64,
}

/// Near the knee, OKs raise the cap this many times more slowly than `increase` says, so an
/// account probes a provider's known limit gently (one refused call every few seconds, not one
/// per round of calls).
pub const PROBE_SLOWDOWN: u64 = 8;

impl AdaptiveState {
    /// The cap in force: the whole part, within `min..=max`.
    pub fn cap(&self, a: &Adaptive) -> u32 {
        ((self.cap_milli / 1000) as u32).clamp(a.min, a.max)
    }

    /// Whether this state says nothing a fresh one would not: at `max`, and no cooldown
    /// running at `now` (so it may be forgotten).
    pub fn is_fresh(&self, a: &Adaptive, now: Millis) -> bool {
        self.cap_milli >= u64::from(a.max) * 1000
            && (self.last_cut == 0 || now >= self.last_cut + a.cooldown_ms)
    }
}

/// What a run reports on Release about its call to the model provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum Outcome {
    /// Nothing said: the cap does not move.
    #[default]
    Unspecified,
    Ok,
    /// The provider answered 429.
    RateLimited,
    /// The provider answered 5xx or timed out.
    Overloaded,
    /// Anything else (the cap does not move).
    Failed,
}

impl Outcome {
    /// Every outcome but Unspecified, in the order of the counters.
    pub const REPORTED: [Outcome; 4] = [
        Outcome::Ok,
        Outcome::RateLimited,
        Outcome::Overloaded,
        Outcome::Failed,
    ];

    /// Its place in [`super::Counters::outcomes`]; `None` for Unspecified.
    pub fn index(self) -> Option<usize> {
        Outcome::REPORTED.iter().position(|o| *o == self)
    }

    /// Its name in metrics and in the Redis scripts.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Unspecified => "unspecified",
            Outcome::Ok => "ok",
            Outcome::RateLimited => "rate_limited",
            Outcome::Overloaded => "overloaded",
            Outcome::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Outcome::Unspecified]
            .into_iter()
            .chain(Outcome::REPORTED)
            .find(|o| o.name() == s)
    }
}

/// The account's state after a release that reported `outcome`, given the account's admitted
/// tickets just before the release (`in_flight`):
///
/// * a limit outcome (RateLimited, Overloaded), at most once per cooldown: at or above the knee
///   (the cap at which the provider last refused), the cap steps back to one below it; below
///   it, or with no knee known, the cap is multiplied by `decrease` (never below `min`) and the
///   cap it hit becomes the knee;
/// * an OK while the account ran at its cap, and no cut within the cooldown, raises the cap
///   (never above `max`): by `increase` ÷ cap (about `increase` per cap's worth of OKs) with no
///   knee known; more than one below the knee, by at least half the distance to one below the
///   knee per cap's worth (a cut is recovered in a few rounds of calls); from there on,
///   [`PROBE_SLOWDOWN`] times more slowly. Two above the knee, the knee is forgotten (the
///   provider's limit rose).
///
/// Other outcomes change nothing. So against a provider that refuses calls beyond N, the cap
/// finds N in a few cooldowns, then stays at N and probes N + 1 once per cooldown and a few
/// rounds of calls; when N falls, a refusal below the knee cuts again.
pub fn after_outcome(
    a: &Adaptive,
    s: AdaptiveState,
    outcome: Outcome,
    in_flight: u32,
    now: Millis,
) -> AdaptiveState {
    match outcome {
        Outcome::RateLimited | Outcome::Overloaded => {
            if cooling(a, &s, now) {
                return s;
            }
            let floor = u64::from(a.min) * 1000;
            if s.knee_milli != 0 && u64::from(s.cap(a)) >= s.knee_milli / 1000 {
                AdaptiveState {
                    cap_milli: s.knee_milli.saturating_sub(1000).max(floor),
                    last_cut: now,
                    knee_milli: s.knee_milli,
                }
            } else {
                AdaptiveState {
                    cap_milli: (s.cap_milli * u64::from(a.decrease_pm) / 1000).max(floor),
                    last_cut: now,
                    knee_milli: s.cap_milli,
                }
            }
        }
        Outcome::Ok => {
            let cap = u64::from(s.cap(a));
            if u64::from(in_flight) < cap || cooling(a, &s, now) {
                return s;
            }
            let step = u64::from(a.increase) * 1000 / cap;
            let below_knee = s.knee_milli.saturating_sub(1000);
            let delta = if s.knee_milli == 0 {
                step
            } else if s.cap_milli < below_knee {
                step.max((below_knee - s.cap_milli) / (2 * cap))
            } else {
                step / PROBE_SLOWDOWN
            }
            .max(1);
            let cap_milli = (s.cap_milli + delta).min(u64::from(a.max) * 1000);
            AdaptiveState {
                cap_milli,
                last_cut: s.last_cut,
                knee_milli: if s.knee_milli != 0 && cap_milli >= s.knee_milli + 2000 {
                    0
                } else {
                    s.knee_milli
                },
            }
        }
        Outcome::Unspecified | Outcome::Failed => s,
    }
}

/// Whether a cut happened within the cooldown: the cap holds still (no second cut for the same
/// burst, no raise while the calls of the burst drain).
fn cooling(a: &Adaptive, s: &AdaptiveState, now: Millis) -> bool {
    s.last_cut != 0 && now < s.last_cut + a.cooldown_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a() -> Adaptive {
        Adaptive {
            min: 2,
            max: 20,
            decrease_pm: 700,
            increase: 1,
            cooldown_ms: 1_000,
        }
    }

    #[test]
    fn a_limit_outcome_cuts_once_per_cooldown_and_never_below_min() {
        let a = a();
        let s = a.fresh();
        assert_eq!(s.cap(&a), 20);
        let s = after_outcome(&a, s, Outcome::RateLimited, 20, 5_000);
        assert_eq!((s.cap(&a), s.last_cut), (14, 5_000));
        // The rest of the burst, inside the cooldown, counts for nothing.
        let same = after_outcome(&a, s, Outcome::Overloaded, 14, 5_999);
        assert_eq!(same, s);
        let s = after_outcome(&a, s, Outcome::Overloaded, 14, 6_000);
        assert_eq!(s.cap(&a), 9);
        let mut s = s;
        for i in 0..10 {
            s = after_outcome(&a, s, Outcome::RateLimited, 9, 7_000 + i * 1_000);
        }
        assert_eq!((s.cap(&a), s.cap_milli), (2, 2_000), "bounded by min");
    }

    #[test]
    fn ok_outcomes_raise_the_cap_only_at_the_cap_and_never_above_max() {
        let a = a();
        let s = AdaptiveState {
            cap_milli: 10_000,
            last_cut: 0,
            knee_milli: 0,
        };
        // Below the cap: the account is not asking for more.
        assert_eq!(after_outcome(&a, s, Outcome::Ok, 9, 10), s);
        // At the cap: a cap's worth of OKs (10) raises it by about one.
        let mut t = s;
        for _ in 0..10 {
            t = after_outcome(&a, t, Outcome::Ok, t.cap(&a), 10);
        }
        assert_eq!(t.cap(&a), 11);
        let mut u = a.fresh();
        for _ in 0..100 {
            u = after_outcome(&a, u, Outcome::Ok, 20, 10);
        }
        assert_eq!(u.cap_milli, 20_000, "bounded by max");
        assert!(u.is_fresh(&a, 10));
    }

    #[test]
    fn after_a_cut_the_cap_recovers_fast_to_below_the_knee_then_probes_slowly() {
        let a = a();
        let mut s = AdaptiveState {
            cap_milli: 11_000,
            last_cut: 0,
            knee_milli: 0,
        };
        s = after_outcome(&a, s, Outcome::RateLimited, 11, 5_000);
        assert_eq!((s.cap(&a), s.knee_milli), (7, 11_000));
        // Rounds of calls at the cap: half the way to 10 per round, then one at most per 8.
        let mut rounds = Vec::new();
        for _ in 0..12 {
            for _ in 0..s.cap(&a) {
                s = after_outcome(&a, s, Outcome::Ok, s.cap(&a), 6_000);
            }
            rounds.push(s.cap(&a));
        }
        assert_eq!(
            rounds,
            [8, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11],
            "two rounds back to one below the knee, eight more to probe the knee again"
        );
        // A refusal at the knee again steps back to one below it, and holds for a cooldown.
        let at_knee = after_outcome(&a, s, Outcome::RateLimited, 11, 9_000);
        assert_eq!((at_knee.cap(&a), at_knee.knee_milli), (10, 11_000));
        let held = after_outcome(&a, at_knee, Outcome::Ok, 10, 9_500);
        assert_eq!(held, at_knee, "no raise within the cooldown");
        // A refusal below the knee: the limit fell, cut by decrease.
        let fell = after_outcome(&a, at_knee, Outcome::RateLimited, 10, 10_000);
        assert_eq!((fell.cap(&a), fell.knee_milli), (7, 10_000));
        // Two above the knee, it is forgotten: the provider's limit rose.
        let mut t = AdaptiveState {
            cap_milli: 12_900,
            last_cut: 0,
            knee_milli: 11_000,
        };
        for _ in 0..20 {
            t = after_outcome(&a, t, Outcome::Ok, t.cap(&a), 6_000);
        }
        assert_eq!(t.knee_milli, 0);
    }

    #[test]
    fn failed_and_unspecified_outcomes_change_nothing_and_min_equal_max_pins() {
        let a = a();
        let s = after_outcome(&a, a.fresh(), Outcome::RateLimited, 20, 5_000);
        assert_eq!(after_outcome(&a, s, Outcome::Failed, 20, 9_000), s);
        assert_eq!(after_outcome(&a, s, Outcome::Unspecified, 20, 9_000), s);
        let pinned = Adaptive {
            min: 7,
            max: 7,
            ..a
        };
        let mut p = pinned.fresh();
        for (i, o) in [Outcome::RateLimited, Outcome::Ok, Outcome::Overloaded]
            .into_iter()
            .enumerate()
        {
            p = after_outcome(&pinned, p, o, 7, 10_000 * (i as u64 + 1));
            assert_eq!(p.cap(&pinned), 7);
        }
    }
}
