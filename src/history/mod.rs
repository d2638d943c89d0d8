//! A host's last hour: its installation-wide gauges and cumulative counters sampled once a
//! bucket ([`Sample`]), and the buckets an operator reads ([`Point`]: what changed between two
//! samples). Pure: the server samples every host's stats, the store keeps the samples (in a
//! bounded [`Ring`] on the embedded store, in one sorted set per host on Redis, so every
//! replica reads the same hour), and `GetHostHistory` answers [`points`].

use std::collections::{HashMap, VecDeque};

use crate::scheduler::{HostStats, QUEUE_WAIT_BOUNDS_MS};

/// How the history is cut: a sample every `bucket_ms`, the last `buckets` of them answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub bucket_ms: u64,
    pub buckets: u64,
    /// Hosts whose history is kept (the first ones by name); the rest answer none.
    pub max_hosts: usize,
}

impl Shape {
    /// 10 s buckets for an hour, for up to 200 hosts: 361 samples of 176 bytes, about 64 KB,
    /// a host.
    pub const DEFAULT: Shape = Shape {
        bucket_ms: 10_000,
        buckets: 360,
        max_hosts: 200,
    };

    /// The bucket a time falls in.
    pub fn bucket_of(&self, at_ms: u64) -> u64 {
        at_ms / self.bucket_ms.max(1)
    }
}

/// Refusal reasons a point counts, in order: the scheduler's three, then a busy key.
pub const REASONS: [&str; 4] = ["BUSY", "QUEUE_FULL", "MEMORY_PRESSURE", "KEY_BUSY"];

/// One host's numbers at one moment: the gauges as they were and the counters so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub in_flight: u64,
    pub queued: u64,
    pub admitted: u64,
    /// Refusals by [`REASONS`].
    pub refused: [u64; 4],
    pub shed: u64,
    pub expired: u64,
    pub superseded: u64,
    /// Queue waits by the buckets of [`QUEUE_WAIT_BOUNDS_MS`].
    pub waits: [u64; 11],
}

/// How many numbers a [`Counts`] is written as.
const FIELDS: usize = 21;

impl Counts {
    pub fn of(stats: &HostStats) -> Counts {
        let c = &stats.counters;
        // REASONS is the scheduler's counted refusals in their order, then a busy key.
        let [busy, queue_full, memory_pressure] = c.refusals;
        let refused = [busy, queue_full, memory_pressure, c.key_refused];
        Counts {
            in_flight: stats.in_flight.into(),
            queued: stats.queued.into(),
            admitted: c.admitted,
            refused,
            shed: c.shed,
            expired: c.expired,
            superseded: c.superseded,
            waits: c.queue_wait.buckets,
        }
    }

    fn numbers(&self) -> [u64; FIELDS] {
        let mut out = [0; FIELDS];
        out[..7].copy_from_slice(&[
            self.in_flight,
            self.queued,
            self.admitted,
            self.refused[0],
            self.refused[1],
            self.refused[2],
            self.refused[3],
        ]);
        out[7..10].copy_from_slice(&[self.shed, self.expired, self.superseded]);
        out[10..].copy_from_slice(&self.waits);
        out
    }

    fn from_numbers(n: &[u64; FIELDS]) -> Counts {
        Counts {
            in_flight: n[0],
            queued: n[1],
            admitted: n[2],
            refused: [n[3], n[4], n[5], n[6]],
            shed: n[7],
            expired: n[8],
            superseded: n[9],
            waits: n[10..].try_into().expect("eleven wait buckets"),
        }
    }

    /// Its numbers separated by spaces (how Redis keeps a sample after its time).
    pub fn encode(&self) -> String {
        let n = self.numbers().map(|x| x.to_string());
        n.join(" ")
    }
}

/// A host's counts and when they were read (ms since the Unix epoch, on the store's clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    pub at_ms: u64,
    pub counts: Counts,
}

impl Sample {
    /// `<at_ms> <counts>`, as [`Counts::encode`] writes them after the time.
    pub fn decode(s: &str) -> Option<Sample> {
        let mut parts = s.split(' ').map(|p| p.parse::<u64>().ok());
        let at_ms = parts.next()??;
        let mut n = [0; FIELDS];
        for x in n.iter_mut() {
            *x = parts.next()??;
        }
        parts.next().is_none().then_some(Sample {
            at_ms,
            counts: Counts::from_numbers(&n),
        })
    }
}

/// One bucket as an operator reads it: the gauges at its end, and what happened in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Point {
    /// When the bucket ended (the later sample's time) and how long it lasted (usually the
    /// bucket width; longer when samples were missed).
    pub at_ms: u64,
    pub span_ms: u64,
    pub in_flight: u64,
    pub queued: u64,
    pub admitted: u64,
    pub refused: [u64; 4],
    pub shed: u64,
    pub expired: u64,
    pub superseded: u64,
    /// Tickets admitted from the queue in the bucket, and their waits' 50th and 95th
    /// percentiles (ms; `None` without any).
    pub waits: u64,
    pub wait_p50_ms: Option<u64>,
    pub wait_p95_ms: Option<u64>,
}

/// The buckets between consecutive samples, oldest first. A counter that went down (a store
/// that restarted empty) counts from zero again.
pub fn points(samples: &[Sample]) -> Vec<Point> {
    samples
        .windows(2)
        .map(|w| {
            let (a, b) = (&w[0].counts, &w[1].counts);
            let d = |x: u64, y: u64| if y >= x { y - x } else { y };
            let waits: [u64; 11] = std::array::from_fn(|i| d(a.waits[i], b.waits[i]));
            Point {
                at_ms: w[1].at_ms,
                span_ms: w[1].at_ms.saturating_sub(w[0].at_ms),
                in_flight: b.in_flight,
                queued: b.queued,
                admitted: d(a.admitted, b.admitted),
                refused: std::array::from_fn(|i| d(a.refused[i], b.refused[i])),
                shed: d(a.shed, b.shed),
                expired: d(a.expired, b.expired),
                superseded: d(a.superseded, b.superseded),
                waits: waits.iter().sum(),
                wait_p50_ms: quantile(&waits, 0.5),
                wait_p95_ms: quantile(&waits, 0.95),
            }
        })
        .collect()
}

/// The `q` quantile of waits counted in the buckets of [`QUEUE_WAIT_BOUNDS_MS`], read linearly
/// inside its bucket (as Prometheus' `histogram_quantile` does); a quantile in the last,
/// unbounded bucket answers its lower bound.
pub fn quantile(waits: &[u64; 11], q: f64) -> Option<u64> {
    let total: u64 = waits.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, n) in waits.iter().enumerate() {
        if *n > 0 && (below + n) as f64 >= rank {
            let lower = if i == 0 {
                0
            } else {
                QUEUE_WAIT_BOUNDS_MS[i - 1]
            };
            let Some(&upper) = QUEUE_WAIT_BOUNDS_MS.get(i) else {
                return Some(lower);
            };
            let within = (rank - below as f64).max(0.0) / *n as f64;
            return Some(lower + ((upper - lower) as f64 * within).round() as u64);
        }
        below += n;
    }
    Some(QUEUE_WAIT_BOUNDS_MS[QUEUE_WAIT_BOUNDS_MS.len() - 1])
}

/// The embedded store's histories: at most `buckets + 1` samples per host (one per bucket),
/// for at most `max_hosts` hosts (a new one past that takes the place of the host sampled
/// least recently).
#[derive(Debug, Default)]
pub struct Ring {
    hosts: HashMap<String, VecDeque<Sample>>,
}

impl Ring {
    /// Keep `counts` as the host's sample of the bucket `at_ms` falls in, unless it has one.
    pub fn record(&mut self, shape: &Shape, host_id: &str, at_ms: u64, counts: Counts) {
        let bucket = shape.bucket_of(at_ms);
        if !self.hosts.contains_key(host_id) && self.hosts.len() >= shape.max_hosts.max(1) {
            let stalest = self
                .hosts
                .iter()
                .min_by_key(|(_, s)| s.back().map_or(0, |s| s.at_ms))
                .map(|(h, _)| h.clone());
            if let Some(h) = stalest {
                self.hosts.remove(&h);
            }
        }
        let samples = self.hosts.entry(host_id.to_string()).or_default();
        if samples
            .back()
            .is_some_and(|s| shape.bucket_of(s.at_ms) >= bucket)
        {
            return;
        }
        samples.push_back(Sample { at_ms, counts });
        while samples
            .front()
            .is_some_and(|s| shape.bucket_of(s.at_ms) + shape.buckets < bucket)
        {
            samples.pop_front();
        }
    }

    /// The host's samples, oldest first.
    pub fn samples(&self, host_id: &str) -> Vec<Sample> {
        self.hosts
            .get(host_id)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Samples kept, over every host (for tests of its bound).
    pub fn len(&self) -> usize {
        self.hosts.values().map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

#[cfg(test)]
mod tests;
