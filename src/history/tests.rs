use super::*;
use crate::clock::{Clock, ManualClock};

fn counts(admitted: u64) -> Counts {
    Counts {
        admitted,
        ..Counts::default()
    }
}

#[test]
fn hours_of_buckets_keep_one_hour_per_host_and_a_bounded_number_of_hosts() {
    let shape = Shape {
        bucket_ms: 10_000,
        buckets: 360,
        max_hosts: 3,
    };
    let clock = ManualClock::default();
    let mut ring = Ring::default();
    // Ten hours, sampled twice a bucket (the second is ignored), for five hosts in turn.
    for i in 0..3_600 * 2 {
        clock.advance(5_000);
        let host = format!("h{}", i % 5);
        ring.record(&shape, &host, clock.now_ms(), counts(i));
        assert!(ring.len() <= 3 * 361, "{} samples at step {i}", ring.len());
    }
    assert_eq!(ring.hosts.len(), 3);
    for h in ring.hosts.keys() {
        let s = ring.samples(h);
        let span = s.last().unwrap().at_ms - s.first().unwrap().at_ms;
        assert!(span <= 3_600_000, "{h} keeps {span} ms");
    }
    // One host sampled every bucket for ten hours keeps exactly an hour and a bucket.
    let mut one = Ring::default();
    for i in 0..3_600u64 {
        one.record(&Shape::DEFAULT, "h", i * 10_000, counts(i));
    }
    assert_eq!(one.len(), 361);
    assert_eq!(points(&one.samples("h")).len(), 360);
}

#[test]
fn a_bucket_keeps_its_first_sample() {
    let mut ring = Ring::default();
    ring.record(&Shape::DEFAULT, "h", 10_000, counts(1));
    ring.record(&Shape::DEFAULT, "h", 19_999, counts(5));
    ring.record(&Shape::DEFAULT, "h", 20_000, counts(7));
    let s = ring.samples("h");
    assert_eq!(
        s.iter().map(|s| s.counts.admitted).collect::<Vec<_>>(),
        [1, 7]
    );
    assert!(ring.samples("other").is_empty());
}

#[test]
fn points_are_what_changed_between_samples_and_a_reset_counts_from_zero() {
    let a = Sample {
        at_ms: 1_000,
        counts: Counts {
            in_flight: 4,
            admitted: 10,
            refused: [1, 2, 0, 3],
            shed: 1,
            superseded: 2,
            ..Counts::default()
        },
    };
    let mut b = a;
    b.at_ms = 11_000;
    b.counts.in_flight = 2;
    b.counts.queued = 7;
    b.counts.admitted = 15;
    b.counts.refused = [1, 6, 0, 3];
    b.counts.expired = 2;
    let mut c = b;
    c.at_ms = 31_000;
    c.counts.admitted = 3; // the store restarted empty
    let p = points(&[a, b, c]);
    assert_eq!(p.len(), 2);
    assert_eq!(
        (p[0].at_ms, p[0].span_ms, p[0].in_flight, p[0].queued),
        (11_000, 10_000, 2, 7)
    );
    assert_eq!(
        (p[0].admitted, p[0].refused, p[0].shed, p[0].expired),
        (5, [0, 4, 0, 0], 0, 2)
    );
    assert_eq!((p[1].span_ms, p[1].admitted), (20_000, 3));
    assert_eq!((p[0].waits, p[0].wait_p50_ms), (0, None));
}

#[test]
fn wait_percentiles_are_read_inside_their_bucket() {
    // Bounds 10, 50, 100, 500, ...: 50 waits up to 10 ms, 50 between 100 and 500 ms.
    let mut w = [0; 11];
    w[0] = 50;
    w[3] = 50;
    assert_eq!(quantile(&w, 0.5), Some(10));
    assert_eq!(quantile(&w, 0.95), Some(460));
    let mut tail = [0; 11];
    tail[10] = 2;
    assert_eq!(quantile(&tail, 0.5), Some(300_000), "past the last bound");
    assert_eq!(quantile(&[0; 11], 0.5), None);
}

#[test]
fn samples_round_trip_through_their_encoding_and_malformed_ones_are_refused() {
    let c = Counts {
        in_flight: 1,
        queued: 2,
        admitted: 3,
        refused: [4, 5, 6, 7],
        shed: 8,
        expired: 9,
        superseded: 10,
        waits: std::array::from_fn(|i| 11 + i as u64),
    };
    let s = Sample::decode(&format!("123 {}", c.encode())).expect("decodes");
    assert_eq!(
        s,
        Sample {
            at_ms: 123,
            counts: c
        }
    );
    assert_eq!(Sample::decode("123 1 2"), None, "too short");
    assert_eq!(
        Sample::decode(&format!("1 {} 9", c.encode())),
        None,
        "too long"
    );
    assert_eq!(Sample::decode(&format!("x {}", c.encode())), None);
    assert_eq!(Sample::decode(""), None);
}

#[test]
fn a_sample_is_the_size_the_configuration_docs_say() {
    // docs/configuration.md: about 64 KB a host for an hour of 10 s buckets (361 samples).
    assert_eq!(std::mem::size_of::<Sample>(), 176);
}

#[test]
fn reasons_are_the_counted_refusals_in_their_order_then_a_busy_key() {
    use crate::scheduler::Refusal;
    for r in Refusal::COUNTED {
        assert_eq!(REASONS[r.index()], r.code());
    }
    assert_eq!(REASONS[3], "KEY_BUSY");
}
