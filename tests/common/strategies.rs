//! Random limits shared by the property tests (tests/properties.rs) and the differential tests
//! (tests/differential.rs): the caps, queue bounds, overflow policy, memory ladder and retention
//! every generator varies. Each test adds its own overrides on top.

use admission_authority::scheduler::{Limits, MemoryLimits, OverflowPolicy};
use proptest::prelude::*;

/// Small caps and queues (so that limits bind within a few operations), any overflow policy,
/// the memory ladder on or off, and retention that sometimes forgets ended tickets early (1
/// retained: forgotten 32 at a time, scheduler::RETAIN_SLACK); leases and retention as given.
pub fn base_limits(lease_ttl_ms: u64, retention_ms: u64) -> impl Strategy<Value = Limits> {
    (
        (1u32..5, 1u32..3, prop::option::of(1u32..3)),
        (0u32..6, 0u32..3),
        prop_oneof![
            Just(OverflowPolicy::Reject),
            Just(OverflowPolicy::ShedOldest),
            Just(OverflowPolicy::Queue)
        ],
        any::<bool>(),
        prop_oneof![Just(1u32), Just(100_000)],
    )
        .prop_map(
            move |(
                (total, per_subject, per_account),
                (queue_total, queue_per_subject),
                overflow,
                memory,
                max_retained,
            )| Limits {
                total,
                per_subject,
                per_account,
                queue_total,
                queue_per_subject,
                queue_hard_total: queue_total * 2,
                overflow,
                lease_ttl_ms,
                retention_ms,
                max_retained,
                memory: if memory {
                    MemoryLimits::from_ratio(1000, 0.9)
                } else {
                    MemoryLimits::OFF
                },
                ..Limits::default()
            },
        )
}
