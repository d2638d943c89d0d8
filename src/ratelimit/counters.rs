//! The embedded store's rate limit counters: per domain, one count per counter key and its
//! current window, bounded.
//!
//! A counter lives while its window runs: a hit in a later window starts it again from zero,
//! and [`CounterTable::prune`] drops the counters whose window ended. A domain holds at most
//! `max` live counters; a hit that would need one more is refused (`None`, counted nowhere)
//! unless pruning makes room, while the domain's live counters keep counting. A look (0 hits)
//! never makes a counter. Pure: every call takes the time, in ms since the Unix epoch.

use std::collections::HashMap;

use super::Unit;

/// One descriptor's hits on one counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The counter: the descriptor's entries and the unit (see [`super::decide`]).
    pub key: String,
    pub unit: Unit,
    /// 0 only looks.
    pub addend: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counter {
    /// Seconds since the epoch when its window started.
    start: u64,
    unit: Unit,
    count: u64,
}

impl Counter {
    fn end(&self) -> u64 {
        self.start + self.unit.seconds()
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
struct DomainCounters {
    counters: HashMap<Box<str>, Counter>,
    /// No counter's window ends before this (seconds); `u64::MAX` when there are none.
    next_end: u64,
}

impl DomainCounters {
    /// Drop the counters whose window ended by `now_s`.
    fn prune(&mut self, now_s: u64) -> usize {
        let before = self.counters.len();
        let mut next_end = u64::MAX;
        self.counters.retain(|_, c| {
            let live = c.end() > now_s;
            if live {
                next_end = next_end.min(c.end());
            }
            live
        });
        self.next_end = next_end;
        before - self.counters.len()
    }
}

/// A live counter, as the console and `GetRateLimits` list the hottest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterInfo {
    pub domain: String,
    pub key: String,
    pub unit: Unit,
    /// When its window started, in seconds since the epoch.
    pub window_start: u64,
    pub count: u64,
}

/// One counter in an image: (key, window start, unit, count).
pub type CounterRow = (String, u64, Unit, u64);

/// Every counter, for a snapshot: per domain, its counters, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterImage {
    pub domains: Vec<(String, Vec<CounterRow>)>,
}

/// Every domain's counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CounterTable {
    domains: HashMap<String, DomainCounters>,
}

impl CounterTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Count `hits` in `domain` at `now_ms`, in order: each one's count after it, or `None`
    /// when it needed a new counter and the domain already holds `max` live ones.
    pub fn hit(&mut self, domain: &str, max: u64, hits: &[Hit], now_ms: u64) -> Vec<Option<u64>> {
        let now_s = now_ms / 1000;
        if !self.domains.contains_key(domain) {
            if hits.iter().all(|h| h.addend == 0) {
                return vec![Some(0); hits.len()];
            }
            self.domains.insert(
                domain.to_string(),
                DomainCounters {
                    counters: HashMap::new(),
                    next_end: u64::MAX,
                },
            );
        }
        let d = self.domains.get_mut(domain).expect("just made");
        hits.iter()
            .map(|h| {
                let start = h.unit.window_start(now_s);
                if let Some(c) = d.counters.get_mut(h.key.as_str()) {
                    if c.start == start {
                        c.count = c.count.saturating_add(h.addend);
                        return Some(c.count);
                    }
                    // Its window ended (the next prune would drop it): a look sees zero, a hit
                    // starts it again in this window.
                    if h.addend > 0 {
                        *c = Counter {
                            start,
                            unit: h.unit,
                            count: h.addend,
                        };
                    }
                    return Some(h.addend);
                }
                if h.addend == 0 {
                    return Some(0);
                }
                if d.counters.len() as u64 >= max
                    && (now_s < d.next_end || {
                        d.prune(now_s);
                        d.counters.len() as u64 >= max
                    })
                {
                    return None;
                }
                let c = Counter {
                    start,
                    unit: h.unit,
                    count: h.addend,
                };
                d.next_end = d.next_end.min(c.end());
                d.counters.insert(h.key.as_str().into(), c);
                Some(h.addend)
            })
            .collect()
    }

    /// Subtract each of `hits`' `addend` from its counter in `domain` at `now_ms`, in order:
    /// each one's count after it. Only a counter of the current window changes, never below
    /// zero; a subtraction makes no counter (one that finds none, or one of an ended window,
    /// answers 0).
    pub fn subtract(&mut self, domain: &str, hits: &[Hit], now_ms: u64) -> Vec<Option<u64>> {
        let now_s = now_ms / 1000;
        let Some(d) = self.domains.get_mut(domain) else {
            return vec![Some(0); hits.len()];
        };
        hits.iter()
            .map(|h| match d.counters.get_mut(h.key.as_str()) {
                Some(c) if c.start == h.unit.window_start(now_s) => {
                    c.count = c.count.saturating_sub(h.addend);
                    Some(c.count)
                }
                _ => Some(0),
            })
            .collect()
    }

    /// Whether some counter's window has ended by `now_ms`.
    pub fn prune_due(&self, now_ms: u64) -> bool {
        let now_s = now_ms / 1000;
        self.domains.values().any(|d| d.next_end <= now_s)
    }

    /// Drop every counter whose window ended by `now_ms`, and domains left without any; the
    /// number of counters dropped.
    pub fn prune(&mut self, now_ms: u64) -> usize {
        let now_s = now_ms / 1000;
        let mut dropped = 0;
        self.domains.retain(|_, d| {
            if d.next_end <= now_s {
                dropped += d.prune(now_s);
            }
            !d.counters.is_empty()
        });
        dropped
    }

    /// Counters held (live or not yet pruned), per domain.
    pub fn domain_len(&self, domain: &str) -> usize {
        self.domains.get(domain).map_or(0, |d| d.counters.len())
    }

    /// Counters held in every domain.
    pub fn len(&self) -> usize {
        self.domains.values().map(|d| d.counters.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// The counts of `domain` (every domain when `None`) whose window still runs at `now_ms`,
    /// highest first, at most `n`.
    pub fn hottest(&self, domain: Option<&str>, n: usize, now_ms: u64) -> Vec<CounterInfo> {
        let now_s = now_ms / 1000;
        let mut out: Vec<CounterInfo> = self
            .domains
            .iter()
            .filter(|(name, _)| domain.is_none_or(|d| d == name.as_str()))
            .flat_map(|(name, d)| {
                d.counters
                    .iter()
                    .filter(move |(_, c)| c.end() > now_s)
                    .map(move |(key, c)| CounterInfo {
                        domain: name.clone(),
                        key: key.to_string(),
                        unit: c.unit,
                        window_start: c.start,
                        count: c.count,
                    })
            })
            .collect();
        out.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| (&a.domain, &a.key).cmp(&(&b.domain, &b.key)))
        });
        out.truncate(n);
        out
    }

    /// Every counter, for a snapshot.
    pub fn image(&self) -> CounterImage {
        let mut domains: Vec<_> = self
            .domains
            .iter()
            .map(|(name, d)| {
                let mut counters: Vec<_> = d
                    .counters
                    .iter()
                    .map(|(k, c)| (k.to_string(), c.start, c.unit, c.count))
                    .collect();
                counters.sort();
                (name.clone(), counters)
            })
            .collect();
        domains.sort_by(|a, b| a.0.cmp(&b.0));
        CounterImage { domains }
    }

    /// The table a snapshot's image holds.
    pub fn from_image(image: CounterImage) -> Self {
        let domains = image
            .domains
            .into_iter()
            .map(|(name, counters)| {
                let mut d = DomainCounters {
                    counters: HashMap::with_capacity(counters.len()),
                    next_end: u64::MAX,
                };
                for (key, start, unit, count) in counters {
                    let c = Counter { start, unit, count };
                    d.next_end = d.next_end.min(c.end());
                    d.counters.insert(key.into(), c);
                }
                (name, d)
            })
            .collect();
        CounterTable { domains }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(key: &str, unit: Unit, addend: u64) -> Hit {
        Hit {
            key: key.into(),
            unit,
            addend,
        }
    }

    #[test]
    fn a_window_counts_until_it_ends_then_starts_from_zero() {
        let mut t = CounterTable::new();
        let m = |n| vec![hit("a", Unit::Minute, n)];
        assert_eq!(t.hit("d", 10, &m(1), 120_000), vec![Some(1)]);
        assert_eq!(t.hit("d", 10, &m(3), 179_999), vec![Some(4)]);
        assert_eq!(t.hit("d", 10, &m(0), 179_999), vec![Some(4)], "a look");
        assert_eq!(t.hit("d", 10, &m(1), 180_000), vec![Some(1)], "next minute");
    }

    #[test]
    fn a_subtraction_takes_from_the_current_window_only_never_below_zero() {
        let mut t = CounterTable::new();
        let m = |n| vec![hit("a", Unit::Minute, n)];
        assert_eq!(t.subtract("d", &m(5), 120_000), vec![Some(0)], "no domain");
        assert_eq!(t.hit("d", 10, &m(7), 120_000), vec![Some(7)]);
        assert_eq!(t.subtract("d", &m(5), 130_000), vec![Some(2)]);
        assert_eq!(t.subtract("d", &m(5), 130_000), vec![Some(0)], "floored");
        assert_eq!(t.hit("d", 10, &m(3), 130_000), vec![Some(3)]);
        assert_eq!(
            t.subtract("d", &m(1), 180_000),
            vec![Some(0)],
            "the next minute's counter is not the one charged"
        );
        assert_eq!(t.hit("d", 10, &m(0), 180_000), vec![Some(0)]);
        assert_eq!(
            t.subtract("d", &[hit("b", Unit::Minute, 1)], 180_000),
            vec![Some(0)]
        );
        assert_eq!(t.domain_len("d"), 1, "a subtraction makes no counter");
    }

    #[test]
    fn one_request_counts_each_hit_in_order() {
        let mut t = CounterTable::new();
        let hits = [hit("a", Unit::Second, 2), hit("a", Unit::Second, 2)];
        assert_eq!(t.hit("d", 10, &hits, 5_000), vec![Some(2), Some(4)]);
    }

    #[test]
    fn a_full_domain_refuses_new_counters_but_counts_its_own() {
        let mut t = CounterTable::new();
        assert_eq!(
            t.hit("d", 2, &[hit("a", Unit::Minute, 1)], 0),
            vec![Some(1)]
        );
        assert_eq!(t.hit("d", 2, &[hit("b", Unit::Hour, 1)], 0), vec![Some(1)]);
        assert_eq!(
            t.hit("d", 2, &[hit("c", Unit::Minute, 1)], 1_000),
            vec![None]
        );
        assert_eq!(
            t.hit("d", 2, &[hit("c", Unit::Minute, 0)], 1_000),
            vec![Some(0)]
        );
        assert_eq!(
            t.hit("d", 2, &[hit("a", Unit::Minute, 1)], 1_000),
            vec![Some(2)]
        );
        assert_eq!(
            t.hit("e", 2, &[hit("c", Unit::Minute, 1)], 1_000),
            vec![Some(1)]
        );
        // a's minute ended: its place is free again.
        assert_eq!(
            t.hit("d", 2, &[hit("c", Unit::Minute, 1)], 60_000),
            vec![Some(1)]
        );
        assert_eq!(t.domain_len("d"), 2);
    }

    #[test]
    fn pruning_drops_ended_windows_and_empty_domains() {
        let mut t = CounterTable::new();
        t.hit("d", 10, &[hit("a", Unit::Second, 1)], 0);
        t.hit("d", 10, &[hit("b", Unit::Minute, 1)], 0);
        t.hit("e", 10, &[hit("c", Unit::Second, 1)], 0);
        assert!(!t.prune_due(999));
        assert!(t.prune_due(1_000));
        assert_eq!(t.prune(1_000), 2);
        assert_eq!((t.len(), t.domain_len("e")), (1, 0));
        assert!(!t.prune_due(59_999));
        assert_eq!(t.prune(60_000), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn a_look_never_makes_a_counter() {
        let mut t = CounterTable::new();
        assert_eq!(
            t.hit("d", 1, &[hit("a", Unit::Second, 0)], 0),
            vec![Some(0)]
        );
        assert!(t.is_empty());
    }

    #[test]
    fn the_image_round_trips_and_hottest_lists_live_counts() {
        let mut t = CounterTable::new();
        t.hit("d", 10, &[hit("a", Unit::Minute, 5)], 0);
        t.hit("d", 10, &[hit("b", Unit::Second, 9)], 0);
        t.hit("e", 10, &[hit("c", Unit::Hour, 7)], 0);
        let mut back = CounterTable::from_image(t.image());
        assert_eq!(back.image(), t.image());
        assert_eq!(
            back.hit("d", 10, &[hit("a", Unit::Minute, 1)], 0),
            vec![Some(6)]
        );
        let hot: Vec<_> = t
            .hottest(None, 10, 1_500)
            .into_iter()
            .map(|c| (c.key, c.count))
            .collect();
        assert_eq!(
            hot,
            vec![("c".into(), 7), ("a".into(), 5)],
            "b's second ended"
        );
        assert_eq!(t.hottest(Some("d"), 1, 0)[0].key, "b");
    }
}
