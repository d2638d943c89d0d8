//! Every code the Lua scripts and the Rust side exchange, written once. The scripts get them
//! as Lua locals from [`ticket_constants`] and [`ledger_constants`] when they are built, and the
//! Rust side writes arguments and reads replies with the same tables, so a state code, a
//! reason name or a shared bound can only change in one place.

use crate::auth::AuthVerdict;
use crate::ledger::{Coverage, Decision, Reason, Resolution, StepState, UnknownUsage, Usage};
use crate::scheduler::{
    DEFAULT_PRIORITY, EXACT_POSITION_SUBJECTS, KeyPolicy, LEVELS, LISTED_PLACE_DEPTH,
    MAX_ADAPTIVE_ACCOUNTS, Mode, OverflowPolicy, PROBE_SLOWDOWN, QUEUE_WAIT_BOUNDS_MS,
    RECENT_ENDINGS, RETAIN_SLACK, Refusal, ShadowDecision, SubmitMode, TicketState,
};

/// The least version of an operator's limits of record: above any replica's start time in µs
/// (about 1.8e15 today; 2^52 is 4.5e15, and exact in a Lua number), so no file replaces them.
pub(super) const OPERATOR_LIMITS: u64 = 1 << 52;

/// A ticket's `state` field: the state, its code, and the Lua local that names it.
const TICKET_STATES: [(TicketState, &str, &str); 8] = [
    (TicketState::Queued, "Q", "QUEUED"),
    (TicketState::Admitted, "A", "ADMITTED"),
    (TicketState::Parked, "P", "PARKED"),
    (TicketState::Released, "R", "RELEASED"),
    (TicketState::Cancelled, "C", "CANCELLED"),
    (TicketState::Shed, "S", "SHED"),
    (TicketState::Expired, "E", "EXPIRED"),
    (TicketState::Superseded, "X", "SUPERSEDED"),
];

/// A key's policy, in a keyed Submit's arguments and the key index.
const KEY_POLICIES: [(KeyPolicy, &str, &str); 5] = [
    (KeyPolicy::None, "0", "KP_NONE"),
    (KeyPolicy::KeepNewest, "1", "KP_KEEP_NEWEST"),
    (KeyPolicy::Serial, "2", "KP_SERIAL"),
    (KeyPolicy::SerialKeepNewest, "3", "KP_SERIAL_KEEP_NEWEST"),
    (KeyPolicy::RejectNew, "4", "KP_REJECT_NEW"),
];

/// A key policy's code in the scripts.
pub(super) fn key_policy_code(p: KeyPolicy) -> &'static str {
    KEY_POLICIES
        .iter()
        .find(|(x, _, _)| *x == p)
        .map(|(_, c, _)| *c)
        .expect("every policy is listed")
}

/// The key policy of a script's code.
pub(super) fn key_policy(code: &str) -> Option<KeyPolicy> {
    KEY_POLICIES
        .iter()
        .find(|(_, c, _)| *c == code)
        .map(|(p, _, _)| *p)
}

/// Submit's mode argument.
const SUBMIT_MODES: [(SubmitMode, &str, &str); 2] = [
    (SubmitMode::Queue, "Q", "MODE_QUEUE"),
    (SubmitMode::Try, "T", "MODE_TRY"),
];

/// Refusals a Submit script answers (draining is decided before the store).
const REFUSALS: [(Refusal, &str); 3] = [
    (Refusal::Busy, "BUSY"),
    (Refusal::QueueFull, "QUEUE_FULL"),
    (Refusal::MemoryPressure, "MEMORY_PRESSURE"),
];

/// The overflow policy in a host's limits.
/// (Its code is its configuration name, [`OverflowPolicy::name`].)
const OVERFLOWS: [(OverflowPolicy, &str); 3] = [
    (OverflowPolicy::Reject, "OVERFLOW_REJECT"),
    (OverflowPolicy::ShedOldest, "OVERFLOW_SHED_OLDEST"),
    (OverflowPolicy::Queue, "OVERFLOW_QUEUE"),
];

/// A step's state, the first field of its packed record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StepCode {
    Reserved,
    Uncertain,
    Settled,
    Consumed,
    Released,
    Closed,
}

impl StepCode {
    /// The state's name for messages, from the ledger's own names.
    pub(super) fn name(self) -> &'static str {
        crate::ledger::state_name(match self {
            StepCode::Reserved => StepState::Reserved,
            StepCode::Uncertain => StepState::Uncertain,
            // The usage does not change the name.
            StepCode::Settled => StepState::Settled(Usage {
                input_tokens: 0,
                output_tokens: 0,
                cost: 0,
                coverage: Coverage::Complete,
            }),
            StepCode::Consumed => StepState::Resolved(Resolution::Consumed),
            StepCode::Released => StepState::Resolved(Resolution::Released),
            StepCode::Closed => StepState::Closed,
        })
    }
}

const STEP_STATES: [(StepCode, &str, &str); 6] = [
    (StepCode::Reserved, "R", "STEP_RESERVED"),
    (StepCode::Uncertain, "U", "STEP_UNCERTAIN"),
    (StepCode::Settled, "S", "STEP_SETTLED"),
    (StepCode::Consumed, "X", "STEP_CONSUMED"),
    (StepCode::Released, "Y", "STEP_RELEASED"),
    (StepCode::Closed, "C", "STEP_CLOSED"),
];

/// Authorize's decision.
const DECISIONS: [(Decision, &str, &str); 3] = [
    (Decision::Allow, "A", "ALLOW"),
    (Decision::Deny, "D", "DENY"),
    (Decision::Unknown, "U", "DEFER"),
];

/// Authorize's reason (its contract name is its code).
const REASONS: [Reason; 3] = [
    Reason::ResourceLimit,
    Reason::QuotaExhausted,
    Reason::ResourceUsageUnknown,
];

/// Settle's coverage argument.
const COVERAGES: [(Coverage, &str, &str); 3] = [
    (Coverage::Complete, "C", "COVERAGE_COMPLETE"),
    (Coverage::Partial, "P", "COVERAGE_PARTIAL"),
    (Coverage::Unknown, "U", "COVERAGE_UNKNOWN"),
];

/// A budget's unknown-usage policy ('' when no budget block applies).
const UNKNOWN_USAGES: [(UnknownUsage, &str); 3] = [
    (UnknownUsage::Reject, "UNKNOWN_REJECT"),
    (UnknownUsage::Allow, "UNKNOWN_ALLOW"),
    (UnknownUsage::Defer, "UNKNOWN_DEFER"),
];

/// An auth attempt's verdict, as the attempt script answers it.
const AUTH_VERDICTS: [(AuthVerdict, u8, &str); 3] = [
    (AuthVerdict::Allowed, 0, "ALLOWED"),
    (AuthVerdict::LockedOut, 1, "LOCKED_OUT"),
    (AuthVerdict::AttemptsExhausted, 2, "ATTEMPTS_EXHAUSTED"),
];

pub(super) fn auth_verdict(code: u8) -> Option<AuthVerdict> {
    AUTH_VERDICTS
        .iter()
        .find(|(_, c, _)| *c == code)
        .map(|(v, ..)| *v)
}

fn find<T: Copy + PartialEq, const N: usize>(
    table: &[(T, &'static str, &'static str); N],
    v: T,
) -> &'static str {
    table
        .iter()
        .find(|(x, ..)| *x == v)
        .map(|(_, code, _)| *code)
        .expect("every value has a code")
}

fn parse<T: Copy, const N: usize>(
    table: &[(T, &'static str, &'static str); N],
    code: &str,
) -> Option<T> {
    table.iter().find(|(_, c, _)| *c == code).map(|(v, ..)| *v)
}

#[cfg(test)]
pub(super) fn ticket_code(s: TicketState) -> &'static str {
    find(&TICKET_STATES, s)
}

pub(super) fn ticket_state(code: &str) -> Option<TicketState> {
    parse(&TICKET_STATES, code)
}

pub(super) fn mode_code(m: SubmitMode) -> &'static str {
    find(&SUBMIT_MODES, m)
}

pub(super) fn refusal(code: &str) -> Option<Refusal> {
    REFUSALS.iter().find(|(_, c)| *c == code).map(|(r, _)| *r)
}

pub(super) fn step_code(s: StepCode) -> &'static str {
    find(&STEP_STATES, s)
}

pub(super) fn step_state(code: &str) -> Option<StepCode> {
    parse(&STEP_STATES, code)
}

pub(super) fn resolution_code(r: Resolution) -> &'static str {
    step_code(match r {
        Resolution::Consumed => StepCode::Consumed,
        Resolution::Released => StepCode::Released,
    })
}

pub(super) fn decision(code: &str) -> Option<Decision> {
    parse(&DECISIONS, code)
}

/// `None` for the empty code (no reason).
pub(super) fn reason(code: &str) -> Option<Option<Reason>> {
    if code.is_empty() {
        return Some(None);
    }
    REASONS.iter().find(|r| r.code() == code).map(|r| Some(*r))
}

pub(super) fn coverage_code(c: Coverage) -> &'static str {
    find(&COVERAGES, c)
}

const HEADER: &str = "-- Written from the Rust side's constants (src/store/redis/codes.rs).\n";

/// `local A, B = 'a', 'b'` for every row of a table.
fn locals<'a>(out: &mut String, rows: impl Iterator<Item = (&'a str, String)>) {
    let (names, values): (Vec<&str>, Vec<String>) = rows.unzip();
    out.push_str(&format!(
        "local {} = {}\n",
        names.join(", "),
        values.join(", ")
    ));
}

fn quoted(s: &str) -> String {
    format!("'{s}'")
}

/// The Lua prelude of every ticket script: state codes, modes, refusals, overflow policies and
/// the bounds the scheduling core shares.
pub(super) fn ticket_constants() -> String {
    let mut out = String::from(HEADER);
    locals(
        &mut out,
        TICKET_STATES.iter().map(|(_, c, n)| (*n, quoted(c))),
    );
    locals(
        &mut out,
        SUBMIT_MODES.iter().map(|(_, c, n)| (*n, quoted(c))),
    );
    locals(&mut out, REFUSALS.iter().map(|(_, c)| (*c, quoted(c))));
    locals(
        &mut out,
        KEY_POLICIES.iter().map(|(_, c, n)| (*n, quoted(c))),
    );
    locals(
        &mut out,
        OVERFLOWS.iter().map(|(o, n)| (*n, quoted(o.name()))),
    );
    let bounds: Vec<String> = QUEUE_WAIT_BOUNDS_MS.iter().map(u64::to_string).collect();
    out.push_str(&format!(
        "local RETAIN_SLACK, EXACT_POSITION_SUBJECTS = {RETAIN_SLACK}, {EXACT_POSITION_SUBJECTS}\n\
         local LISTED_PLACE_DEPTH, RECENT_ENDINGS = {LISTED_PLACE_DEPTH}, {RECENT_ENDINGS}\n\
         local OPERATOR_LIMITS = {OPERATOR_LIMITS}\n\
         local LEVELS, DEFAULT_PRIORITY = {LEVELS}, {DEFAULT_PRIORITY}\n\
         local MAX_ADAPTIVE_ACCOUNTS, PROBE_SLOWDOWN = {MAX_ADAPTIVE_ACCOUNTS}, {PROBE_SLOWDOWN}\n\
         local SHADOW_QUEUED, MODE_SHADOW = '{queued}', '{shadow}'\n\
         local QW_BOUNDS = {{{}}}\n",
        bounds.join(", "),
        queued = ShadowDecision::Queued.code(),
        shadow = Mode::Shadow.name(),
    ));
    out
}

/// The Lua prelude of every ledger script: step states, decisions, reasons, coverages and
/// unknown-usage policies.
pub(super) fn ledger_constants() -> String {
    let mut out = String::from(HEADER);
    locals(
        &mut out,
        STEP_STATES.iter().map(|(_, c, n)| (*n, quoted(c))),
    );
    locals(&mut out, DECISIONS.iter().map(|(_, c, n)| (*n, quoted(c))));
    locals(
        &mut out,
        REASONS.iter().map(|r| (r.code(), quoted(r.code()))),
    );
    locals(&mut out, COVERAGES.iter().map(|(_, c, n)| (*n, quoted(c))));
    locals(
        &mut out,
        UNKNOWN_USAGES.iter().map(|(u, n)| (*n, quoted(u.name()))),
    );
    out
}

/// The Lua prelude of the auth attempt script: its verdicts.
pub(super) fn auth_constants() -> String {
    let mut out = String::from(HEADER);
    locals(
        &mut out,
        AUTH_VERDICTS.iter().map(|(_, c, n)| (*n, c.to_string())),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_as_what_it_was_written_from() {
        for (s, c, _) in TICKET_STATES {
            assert_eq!(ticket_state(ticket_code(s)), Some(s), "{c}");
        }
        for (s, ..) in STEP_STATES {
            assert_eq!(step_state(step_code(s)), Some(s));
        }
        for (d, c, _) in DECISIONS {
            assert_eq!(decision(c), Some(d));
        }
        for r in REASONS {
            assert_eq!(reason(r.code()), Some(Some(r)));
        }
        assert_eq!(reason(""), Some(None));
        for (v, c, _) in AUTH_VERDICTS {
            assert_eq!(auth_verdict(c), Some(v));
        }
        assert_eq!(reason("NOPE"), None);
        for (i, (r, c)) in REFUSALS.into_iter().enumerate() {
            assert_eq!(r.index(), i, "stats answers the counts in this order");
            assert_eq!(refusal(c), Some(r));
            assert_eq!(r.code(), c, "the script answers the contract name");
        }
    }

    #[test]
    fn the_preludes_define_every_name_once() {
        let t = ticket_constants();
        assert!(t.contains("local QUEUED, ADMITTED, PARKED, RELEASED, CANCELLED, SHED, EXPIRED, SUPERSEDED = 'Q', 'A', 'P', 'R', 'C', 'S', 'E', 'X'"), "{t}");
        assert!(t.contains(&format!(
            "RETAIN_SLACK, EXACT_POSITION_SUBJECTS = {RETAIN_SLACK}, {EXACT_POSITION_SUBJECTS}"
        )));
        let l = ledger_constants();
        assert!(l.contains("local RESOURCE_LIMIT, QUOTA_EXHAUSTED, RESOURCE_USAGE_UNKNOWN = 'RESOURCE_LIMIT', 'QUOTA_EXHAUSTED', 'RESOURCE_USAGE_UNKNOWN'"), "{l}");
        assert!(
            l.contains("UNKNOWN_REJECT, UNKNOWN_ALLOW, UNKNOWN_DEFER = 'reject', 'allow', 'defer'"),
            "{l}"
        );
    }
}
