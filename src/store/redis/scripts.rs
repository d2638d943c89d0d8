//! The Lua scripts of the Redis store. Each store operation is one script, so it runs
//! atomically on the Redis server: no replica ever reads, decides in Rust and writes back.
//!
//! Time inside a script is Redis `TIME` (milliseconds), never a replica's clock, so replicas
//! with skewed clocks agree. Every script takes a last ARGV `now`: 0 in production, which means
//! Redis `TIME`; tests pass a frozen time instead, so they can let windows pass without
//! sleeping and assert exact durations. Deadlines are kept in the values; key TTLs only collect
//! garbage, so a key never outlives its meaning.
//!
//! Every code and bound the scripts share with the Rust side comes from [`codes`], written in
//! as Lua locals when the scripts are built.

use super::codes;

/// One attempt against an auth bucket: KEYS[1] its bucket, KEYS[2] its lockout; ARGV[1]
/// max_attempts, ARGV[2] window_ms, ARGV[3] lockout_ms, ARGV[4] now (0 = Redis TIME).
///
/// The header of the function in `lua/auth_attempt.lua` says what it answers.
pub fn auth_attempt() -> String {
    format!(
        "{}{NOW_OF}{AUTH_ATTEMPT}{}",
        codes::auth_constants(),
        "return auth_attempt(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]),
                    tonumber(ARGV[3]), now_of(ARGV[4]))
"
    )
}

/// Several auth attempts in one call (the auth batcher's: see [`super::auth_batch`]).
///
/// Its header in `lua/auth_batch_body.lua` says what it takes and answers.
pub fn auth_batch() -> String {
    format!(
        "{}{NOW_OF}{AUTH_ATTEMPT}{}",
        codes::auth_constants(),
        include_str!("lua/auth_batch_body.lua")
    )
}

const AUTH_ATTEMPT: &str = include_str!("lua/auth_attempt.lua");

/// `now_of(arg)`: a script's now argument in ms, 0 meaning Redis TIME.
const NOW_OF: &str = include_str!("lua/now_of.lua");

/// Keep a host's history sample.
///
/// Its header in `lua/history_record.lua` says what it takes and answers.
pub fn history_record() -> String {
    format!("{NOW_OF}{}", include_str!("lua/history_record.lua"))
}

/// Read an auth bucket without counting (CheckAuthAttempt with `peek`).
///
/// Its header in `lua/auth_peek.lua` says what it takes and answers.
pub fn auth_peek() -> String {
    format!("{NOW_OF}{}", include_str!("lua/auth_peek.lua"))
}

/// Clear an auth bucket and its lockout.
///
/// Its header in `lua/auth_reset.lua` says what it takes and answers.
pub fn auth_reset() -> String {
    format!("{NOW_OF}{}", include_str!("lua/auth_reset.lua"))
}

/// One ShouldRateLimit's hits on a domain's counters: KEYS[1] the domain's tally, KEYS[2..]
/// the counters, one per hit; ARGV[1] the domain's max live counters, then per hit its unit in
/// seconds and its hits, last ARGV now (0 = Redis TIME).
///
/// The header of the function in `lua/rate_limit_hits.lua` says what it answers.
pub fn rate_limit_hits() -> String {
    format!(
        "{NOW_OF}{RATE_LIMIT_HITS_FN}local out = {{}}
rate_limit_hits(out, KEYS[1], 1, #KEYS - 1, 1, tonumber(ARGV[1]), now_of(ARGV[#ARGV]))
return out
"
    )
}

/// Several ShouldRateLimits of one domain in one call (the rate limit batcher's: see
/// [`super::rate_limit_batch`]).
///
/// Its header in `lua/rate_limit_batch_body.lua` says what it takes and answers.
pub fn rate_limit_batch() -> String {
    format!(
        "{NOW_OF}{RATE_LIMIT_HITS_FN}{}",
        include_str!("lua/rate_limit_batch_body.lua")
    )
}

const RATE_LIMIT_HITS_FN: &str = include_str!("lua/rate_limit_hits.lua");

/// A domain's live counters, for the hottest list.
///
/// Its header in `lua/rate_limit_counters.lua` says what it takes and answers.
pub fn rate_limit_counters() -> String {
    format!("{NOW_OF}{}", include_str!("lua/rate_limit_counters.lua"))
}

/// Drop ended counters from a domain's tally.
///
/// Its header in `lua/rate_limit_sweep.lua` says what it takes and answers.
pub fn rate_limit_sweep() -> String {
    format!("{NOW_OF}{}", include_str!("lua/rate_limit_sweep.lua"))
}

/// The prelude of every ledger script: `now`, number formatting, the step record codec, and the
/// housekeeping that turns reserved steps past their TTL uncertain.
///
/// Its header in `lua/ledger_prelude.lua` says what it takes and answers.
const LEDGER_PRELUDE: &str = include_str!("lua/ledger_prelude.lua");

/// Authorize one model step, as [`crate::ledger::Ledger::authorize`].
///
/// Its header in `lua/authorize_body.lua` says what it takes and answers.
pub fn authorize() -> String {
    ledger_script(AUTHORIZE_BODY)
}

const AUTHORIZE_BODY: &str = include_str!("lua/authorize_body.lua");

/// Settle one step: replace its reservation with the reported usage, exactly once.
///
/// Its header in `lua/settle_body.lua` says what it takes and answers.
pub fn settle() -> String {
    ledger_script(SETTLE_BODY)
}

const SETTLE_BODY: &str = include_str!("lua/settle_body.lua");

/// An operator's resolution of an uncertain reservation.
///
/// Its header in `lua/resolve_body.lua` says what it takes and answers.
pub fn resolve() -> String {
    ledger_script(RESOLVE_BODY)
}

const RESOLVE_BODY: &str = include_str!("lua/resolve_body.lua");

/// Housekeeping alone (the periodic sweep), and the host's open reservations for listing: uncertain
/// ones first, then reserved ones, oldest first within each, at most ARGV[3] + 1.
///
/// Its header in `lua/open_body.lua` says what it takes and answers.
pub fn open_reservations() -> String {
    ledger_script(OPEN_BODY)
}

const OPEN_BODY: &str = include_str!("lua/open_body.lua");

/// A ticket script: the constants it shares with the Rust side ([`codes::ticket_constants`],
/// written from the Rust constants themselves, so the two cannot drift apart), then `parts`.
fn ticket_script(parts: &[&str]) -> String {
    [codes::ticket_constants().as_str()]
        .into_iter()
        .chain(parts.iter().copied())
        .collect()
}

/// A ledger script: its constants ([`codes::ledger_constants`]), the prelude, then `body`.
fn ledger_script(body: &str) -> String {
    format!(
        "{}{NOW_OF}{LEDGER_PRELUDE}{body}",
        codes::ledger_constants()
    )
}

/// The prelude of every ticket script: the host's keys and limits (the limits of record),
/// `now`, and what the fast paths need.
///
/// Its header in `lua/ticket_core.lua` says what it takes, the keys, and how limits agree.
const TICKET_CORE: &str = include_str!("lua/ticket_core.lua");

/// The rest of every ticket script's prelude: the scheduling rules as functions.
///
/// Its header in `lua/ticket_helpers.lua` says what it takes and answers.
const TICKET_HELPERS: &str = include_str!("lua/ticket_helpers.lua");

/// Submit a ticket.
///
/// Its header in `lua/submit_body.lua` says what it takes and answers.
pub fn submit() -> String {
    ticket_script(&[
        TICKET_CORE,
        SUBMIT_FAST,
        SUBMIT_FAST_CALL,
        TICKET_HELPERS,
        SUBMIT_BODY,
    ])
}

const SUBMIT_BODY: &str = include_str!("lua/submit_body.lua");

/// Submit's common case in few commands, before the helpers are built: no lease due (known from the
/// counters' `next_due` bound, see `due_bound`), nothing queued, no memory ladder, room for the
/// ticket, a new run_id.
///
/// Its header in `lua/submit_fast.lua` says what it takes and answers.
const SUBMIT_FAST: &str = include_str!("lua/submit_fast.lua");

/// The Submit script's one call of its fast path, which answers when it applies (never to a
/// Submit with a key: the full rules decide those).
const SUBMIT_FAST_CALL: &str = "local EPOCH, EPOCH_INIT = ARGV[13], ARGV[14]
if (ARGV[16] or '') == '' then
  local fast = submit_fast(ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[12], EPOCH)
  if fast then return fast end
end
";

/// Renew leases.
///
/// Its header in `lua/renew_body.lua` says what it takes and answers.
pub fn renew() -> String {
    ticket_script(&[TICKET_CORE, TICKET_HELPERS, RENEW_BODY])
}

const RENEW_BODY: &str = include_str!("lua/renew_body.lua");

/// Release or withdraw a ticket.
///
/// Its header in `lua/release_body.lua` says what it takes and answers.
pub fn release() -> String {
    ticket_script(&[
        TICKET_CORE,
        RELEASE_FAST,
        RELEASE_FAST_CALL,
        TICKET_HELPERS,
        RELEASE_BODY,
    ])
}

const RELEASE_BODY: &str = include_str!("lua/release_body.lua");

/// Release's common case in few commands, before the helpers are built: an admitted ticket, no
/// lease due (see `due_bound`), nothing queued (so nothing to dispatch).
///
/// Its header in `lua/release_fast.lua` says what it takes and answers.
const RELEASE_FAST: &str = include_str!("lua/release_fast.lua");

/// The Release script's one call of its fast path, which answers when it applies.
const RELEASE_FAST_CALL: &str = "local fast, k = release_fast(ARGV[5], ARGV[6], ARGV[7], ARGV[8])
if fast ~= nil then return fast end
";

/// Submits and Releases of one host in one call, each by its fast path, in order, until one
/// does not apply (the coalescer's call: see [`super::coalesce`]).
///
/// Its header in `lua/batch_body.lua` says what it takes and answers.
pub fn batch() -> String {
    ticket_script(&[TICKET_CORE, SUBMIT_FAST, RELEASE_FAST, BATCH_BODY])
}

const BATCH_BODY: &str = include_str!("lua/batch_body.lua");

/// Park an admitted ticket (a parked one stays).
///
/// Its header in `lua/park_body.lua` says what it takes and answers.
pub fn park() -> String {
    ticket_script(&[TICKET_CORE, TICKET_HELPERS, PARK_BODY])
}

const PARK_BODY: &str = include_str!("lua/park_body.lua");

/// Ask for a slot again for a parked ticket: admitted at once if it fits, else queued ahead of its
/// subject's waiters (admitted and queued ones stay).
///
/// Its header in `lua/unpark_body.lua` says what it takes and answers.
pub fn unpark() -> String {
    ticket_script(&[TICKET_CORE, TICKET_HELPERS, UNPARK_BODY])
}

const UNPARK_BODY: &str = include_str!("lua/unpark_body.lua");

/// Re-register a ticket its holder still runs.
///
/// Its header in `lua/reclaim_body.lua` says what it takes and answers.
pub fn reclaim() -> String {
    ticket_script(&[TICKET_CORE, TICKET_HELPERS, RECLAIM_BODY])
}

const RECLAIM_BODY: &str = include_str!("lua/reclaim_body.lua");

/// Read one ticket (after housekeeping).
///
/// Its header in `lua/ticket_body.lua` says what it takes and answers.
pub fn ticket() -> String {
    ticket_script(&[TICKET_CORE, TICKET_HELPERS, TICKET_BODY])
}

const TICKET_BODY: &str = include_str!("lua/ticket_body.lua");

/// Housekeeping, then the host's gauges, counters and rows.
///
/// Its header in `lua/stats_body.lua` says what it takes and answers.
pub fn stats() -> String {
    ticket_script(&[TICKET_CORE, TICKET_HELPERS, STATS_BODY])
}

const STATS_BODY: &str = include_str!("lua/stats_body.lua");

/// Housekeeping, then every live ticket: {key, state, subject, account, run, instance, grant,
/// deadline, order} per ticket (sorted by the caller).
///
/// Its header in `lua/list_body.lua` says what it takes and answers.
pub fn list() -> String {
    ticket_script(&[TICKET_CORE, TICKET_HELPERS, LIST_BODY])
}

const LIST_BODY: &str = include_str!("lua/list_body.lua");

/// Read or change a host's limits of record (GetLimits, SetLimits, ResetLimits).
///
/// Its header in `lua/limits_body.lua` says what it takes and answers.
pub fn limits() -> String {
    ticket_script(&[TICKET_CORE, TICKET_HELPERS, LIMITS_BODY])
}

const LIMITS_BODY: &str = include_str!("lua/limits_body.lua");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_gets_its_constants_and_no_placeholder_is_left() {
        for script in [
            submit(),
            batch(),
            renew(),
            release(),
            park(),
            unpark(),
            reclaim(),
            ticket(),
            stats(),
            list(),
            limits(),
        ] {
            assert!(script.starts_with(&codes::ticket_constants()));
            assert!(!script.contains('@'), "a placeholder left unfilled");
        }
        for script in [authorize(), settle(), resolve(), open_reservations()] {
            assert!(script.starts_with(&codes::ledger_constants()));
        }
        assert!(auth_attempt().starts_with(&codes::auth_constants()));
        assert!(auth_batch().starts_with(&codes::auth_constants()));
    }
}
