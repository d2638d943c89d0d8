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
        }
    }
}

/// One account's learned cap, in thousandths, and when it was last cut (0 = never).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveState {
    pub cap_milli: u64,
    pub last_cut: Millis,
}

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
/// tickets just before the release (`in_flight`): a limit outcome (RateLimited, Overloaded)
/// multiplies the cap by `decrease`, never below `min` and at most once per cooldown; an OK
/// while the account ran at its cap raises it by `increase` ÷ cap (so by about `increase` per
/// cap's worth of OKs), never above `max`. Other outcomes change nothing.
pub fn after_outcome(
    a: &Adaptive,
    s: AdaptiveState,
    outcome: Outcome,
    in_flight: u32,
    now: Millis,
) -> AdaptiveState {
    match outcome {
        Outcome::RateLimited | Outcome::Overloaded => {
            if s.last_cut != 0 && now < s.last_cut + a.cooldown_ms {
                return s;
            }
            AdaptiveState {
                cap_milli: (s.cap_milli * u64::from(a.decrease_pm) / 1000)
                    .max(u64::from(a.min) * 1000),
                last_cut: now,
            }
        }
        Outcome::Ok => {
            let cap = s.cap(a);
            if in_flight < cap {
                return s;
            }
            AdaptiveState {
                cap_milli: (s.cap_milli + u64::from(a.increase) * 1000 / u64::from(cap))
                    .min(u64::from(a.max) * 1000),
                last_cut: s.last_cut,
            }
        }
        Outcome::Unspecified | Outcome::Failed => s,
    }
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
            last_cut: 1,
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
