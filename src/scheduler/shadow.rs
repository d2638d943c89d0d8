//! Shadow mode: every Submit admitted, and what enforce mode would have done with it recorded.

use super::*;

impl HostState {
    /// Submit in shadow mode: admitted at once whatever the caps say, with what enforce would
    /// have done. Enforce's queue is modelled by the admissions over the caps: a host `n`
    /// over its total would have `n` waiters (so QUEUE_FULL is reported once that many reach
    /// the queue bounds).
    pub(super) fn submit_shadow(
        &mut self,
        limits: &Limits,
        args: SubmitArgs,
        instance: Arc<str>,
        key: TicketKey,
        now: Millis,
    ) -> TicketView {
        // Waiters from before a switch to shadow go first, caps or not.
        self.dispatch(limits, now);
        let decision = if limits.memory.is_hard(args.rss_mb) {
            Some(ShadowDecision::Refused(Refusal::MemoryPressure))
        } else if !self.is_soft(limits, &instance, now)
            && self.fits(limits, &args.subject, args.account_id.as_deref())
        {
            None
        } else if args.mode == SubmitMode::Try || limits.queue_total == 0 {
            Some(ShadowDecision::Refused(Refusal::Busy))
        } else {
            let subject_over = self.subjects.get(args.subject.as_str()).map_or(0, |s| {
                s.in_flight
                    .saturating_sub(limits.subject_cap(&args.subject))
            });
            let total_over = self.in_flight.saturating_sub(limits.total);
            Some(shadow_queue_decision(limits, subject_over, total_over))
        };
        if let Some(d) = decision {
            self.counters.shadow[d.index()] += 1;
        }
        self.insert_ticket(args, instance, key, 0);
        self.admit(limits, key, now);
        let mut view = self.view(limits, key, now).expect("just inserted");
        view.shadow = decision;
        view
    }
}

/// What enforce would have done with a Submit that does not fit, given how far the subject
/// and the host are over their caps (the waiters enforce would have): queued, or refused
/// when a queue bound would be reached (`shed_oldest` would queue it and shed another).
pub fn shadow_queue_decision(
    limits: &Limits,
    subject_over: u32,
    total_over: u32,
) -> ShadowDecision {
    let subject_full = limits.queue_per_subject > 0 && subject_over >= limits.queue_per_subject;
    let total_full = total_over >= limits.queue_total;
    let full = match limits.overflow {
        OverflowPolicy::Reject => subject_full || total_full,
        OverflowPolicy::Queue => subject_full || total_over >= limits.queue_hard_total,
        OverflowPolicy::ShedOldest => false,
    };
    if full {
        ShadowDecision::Refused(Refusal::QueueFull)
    } else {
        ShadowDecision::Queued
    }
}
