//! The Lua scripts of the Redis store. Each store operation is one script, so it runs
//! atomically on the Redis server: no replica ever reads, decides in Rust and writes back.
//!
//! Time inside a script is Redis `TIME` (milliseconds), never a replica's clock, so replicas
//! with skewed clocks agree. Every script takes a last ARGV `now`: 0 in production, which means
//! Redis `TIME`; tests pass a frozen time instead, so they can let windows pass without
//! sleeping and assert exact durations. Deadlines are kept in the values; key TTLs only collect
//! garbage, so a key never outlives its meaning.

/// One attempt against an auth bucket.
///
/// KEYS[1] bucket hash (`c` count, `e` window end ms), KEYS[2] lockout (its end ms).
/// ARGV[1] max_attempts, ARGV[2] window_ms, ARGV[3] lockout_ms, ARGV[4] now (0 = Redis TIME).
/// Returns {verdict, remaining, retry_after_ms}: verdict 0 allowed, 1 locked out, 2 attempts
/// exhausted (lockout 0: refused until the window ends).
///
/// A lockout replaces the window (the bucket is deleted), so the first attempt after it opens
/// a fresh window; attempts during it change nothing.
pub const AUTH_ATTEMPT: &str = r#"
local now = tonumber(ARGV[4])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local max, window, lockout = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local locked = tonumber(redis.call('GET', KEYS[2]) or '0')
if locked > now then
  return {1, 0, locked - now}
end
local b = redis.call('HMGET', KEYS[1], 'c', 'e')
local count, wend = tonumber(b[1] or '0'), tonumber(b[2] or '0')
if wend <= now then
  redis.call('HSET', KEYS[1], 'c', 1, 'e', now + window)
  redis.call('PEXPIRE', KEYS[1], window)
  return {0, max - 1, 0}
end
if count < max then
  redis.call('HINCRBY', KEYS[1], 'c', 1)
  return {0, max - count - 1, 0}
end
if lockout > 0 then
  redis.call('SET', KEYS[2], now + lockout, 'PX', lockout)
  redis.call('DEL', KEYS[1])
  return {1, 0, lockout}
end
return {2, 0, wend - now}
"#;

/// Read an auth bucket without counting (CheckAuthAttempt with `peek`).
///
/// KEYS[1] bucket hash, KEYS[2] lockout. ARGV[1] now (0 = Redis TIME).
/// Returns {lockout_left_ms, count, window_left_ms}: 0 for a lockout or window that is over.
pub const AUTH_PEEK: &str = r#"
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local locked = tonumber(redis.call('GET', KEYS[2]) or '0')
local b = redis.call('HMGET', KEYS[1], 'c', 'e')
local wend = tonumber(b[2] or '0')
return {math.max(locked - now, 0), tonumber(b[1] or '0'), math.max(wend - now, 0)}
"#;

/// Clear an auth bucket and its lockout.
///
/// KEYS[1] bucket, KEYS[2] lockout. ARGV[1] now (0 = Redis TIME).
/// Returns {existed, was_locked}: whether a live window or lockout was cleared.
pub const AUTH_RESET: &str = r#"
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local locked = tonumber(redis.call('GET', KEYS[2]) or '0')
local wend = tonumber(redis.call('HGET', KEYS[1], 'e') or '0')
redis.call('DEL', KEYS[1], KEYS[2])
local was_locked = locked > now and 1 or 0
local existed = (was_locked == 1 or wend > now) and 1 or 0
return {existed, was_locked}
"#;

/// The prelude of every ledger script: `now`, number formatting, the step record codec, and
/// the housekeeping that turns reserved steps past their TTL uncertain.
///
/// A step is one field `s<step>` of its run's hash, packed as
/// `state|decision|reason|granted|remaining_tokens|remaining_cost|tokens|cost|window|at|
/// input|output|usage_cost|coverage|model` (numbers as integers, `''` for none; the model last,
/// as it may hold `|`). States: R reserved, U uncertain, S settled, X resolved consumed,
/// Y resolved released, C closed (denied or deferred). Reserved and uncertain steps are indexed
/// in the host's `reserved` and `uncertain` sorted sets (member `<run_id>\n<step>`, score the
/// time they were authorized).
///
/// Expects `now_arg`, `ttl` (reservation_ttl ms), `run_prefix` (key prefix of run hashes),
/// `k_reserved`, `k_uncertain`, `k_stats` to be set by the script body.
const LEDGER_PRELUDE: &str = r#"
local function fmt(x) return string.format('%.0f', x) end
local function now_of(arg)
  local n = tonumber(arg)
  if n == 0 then
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return n
end
local function unpack_step(raw)
  local t, i = {}, 1
  for k = 1, 14 do
    local j = string.find(raw, '|', i, true)
    t[k] = string.sub(raw, i, j - 1)
    i = j + 1
  end
  t[15] = string.sub(raw, i)
  return {st = t[1], d = t[2], r = t[3], g = t[4], rt = t[5], rc = t[6], tok = t[7],
          cost = t[8], win = t[9], at = t[10], ui = t[11], uo = t[12], uc = t[13],
          cov = t[14], model = t[15]}
end
local function pack_step(s)
  return table.concat({s.st, s.d, s.r, s.g, s.rt, s.rc, s.tok, s.cost, s.win, s.at, s.ui,
                       s.uo, s.uc, s.cov, s.model}, '|')
end
local function housekeeping(now, ttl, run_prefix, k_reserved, k_uncertain)
  local due = redis.call('ZRANGEBYSCORE', k_reserved, '-inf', now - ttl, 'WITHSCORES')
  for i = 1, #due, 2 do
    local m = due[i]
    local sep = string.find(m, '\n', 1, true)
    local rk, field = run_prefix .. string.sub(m, 1, sep - 1), 's' .. string.sub(m, sep + 1)
    local raw = redis.call('HGET', rk, field)
    if raw then
      local s = unpack_step(raw)
      s.st = 'U'
      redis.call('HSET', rk, field, pack_step(s))
    end
    redis.call('ZREM', k_reserved, m)
    redis.call('ZADD', k_uncertain, due[i + 1], m)
  end
end
local function open_list_has_before(open, step)
  for n in string.gmatch(open, '%d+') do
    if tonumber(n) < step then return true end
  end
  return false
end
local function open_remove(open, step)
  local out = {}
  for n in string.gmatch(open, '%d+') do
    if tonumber(n) ~= step then table.insert(out, n) end
  end
  return table.concat(out, ',')
end
local function keep_run(run, open, retention)
  if open == '' then
    redis.call('PEXPIRE', run, retention)
  else
    redis.call('PERSIST', run)
  end
end
local function current_window(key, window, now)
  local w = redis.call('HMGET', key, 'start', 'end', 'ut', 'uc')
  local wend = tonumber(w[2] or '0')
  if wend <= now then
    redis.call('HSET', key, 'start', fmt(now), 'end', fmt(now + window), 'ut', 0, 'uc', 0)
    redis.call('PEXPIRE', key, window)
    return now, 0, 0
  end
  return tonumber(w[1]), tonumber(w[3]), tonumber(w[4])
end
"#;

/// Authorize one model step, as [`crate::ledger::Ledger::authorize`].
///
/// KEYS[1] the run's hash, KEYS[2] the account's allowance window hash (any key of the host
/// when there is no allowance), KEYS[3] reserved index, KEYS[4] uncertain index, KEYS[5] stats.
/// ARGV[1] run_id, ARGV[2] step, ARGV[3] subject, ARGV[4] account ('' none), ARGV[5] model,
/// ARGV[6] requested output tokens, ARGV[7] estimated input tokens, ARGV[8] estimated cost
/// (micro-dollars), ARGV[9] per-run max tokens ('' none), ARGV[10] per-run max cost ('' none),
/// ARGV[11] unknown_usage ('' no budget block, 'reject', 'allow', 'defer'), ARGV[12] allowance
/// tokens (''), ARGV[13] allowance cost (''), ARGV[14] allowance window ms ('' no allowance),
/// ARGV[15] reservation_ttl ms, ARGV[16] run_retention ms, ARGV[17] run key prefix,
/// ARGV[18] now (0 = Redis TIME).
/// Returns {'ok', decision (A/D/U), reason, granted, remaining_tokens, remaining_cost, replay}
/// or {'conflict', field}.
pub fn authorize() -> String {
    format!("{LEDGER_PRELUDE}{AUTHORIZE_BODY}")
}

const AUTHORIZE_BODY: &str = r#"
local now = now_of(ARGV[18])
local run, step = KEYS[1], tonumber(ARGV[2])
housekeeping(now, tonumber(ARGV[15]), ARGV[17], KEYS[3], KEYS[4])
local r = redis.call('HMGET', run, 'subject', 'account', 'ut', 'uc', 'partial', 'open')
if r[1] then
  if r[1] ~= ARGV[3] then return {'conflict', 'subject'} end
  if r[2] ~= ARGV[4] then return {'conflict', 'account_id'} end
  local prev = redis.call('HGET', run, 's' .. ARGV[2])
  if prev then
    local p = unpack_step(prev)
    keep_run(run, r[6], tonumber(ARGV[16]))
    return {'ok', p.d, p.r, p.g, p.rt, p.rc, '1'}
  end
else
  redis.call('HSET', run, 'subject', ARGV[3], 'account', ARGV[4], 'ut', 0, 'uc', 0,
             'partial', 0, 'open', '', 'aw', ARGV[14])
end
local ut, uc = tonumber(r[3] or '0'), tonumber(r[4] or '0')
local partial, open = tonumber(r[5] or '0'), r[6] or ''
local has_allowance = ARGV[14] ~= ''
local wstart, wut, wuc = nil, 0, 0
if has_allowance then
  wstart, wut, wuc = current_window(KEYS[2], tonumber(ARGV[14]), now)
end
local tl, cl = {}, {}
if ARGV[9] ~= '' then table.insert(tl, {tonumber(ARGV[9]), ut, 'RESOURCE_LIMIT'}) end
if ARGV[10] ~= '' then table.insert(cl, {tonumber(ARGV[10]), uc, 'RESOURCE_LIMIT'}) end
if has_allowance and ARGV[12] ~= '' then
  table.insert(tl, {tonumber(ARGV[12]), wut, 'QUOTA_EXHAUSTED'})
end
if has_allowance and ARGV[13] ~= '' then
  table.insert(cl, {tonumber(ARGV[13]), wuc, 'QUOTA_EXHAUSTED'})
end
local function remaining(l, extra)
  local m = nil
  for _, x in ipairs(l) do
    local v = x[1] - (x[2] + extra)
    if v < 0 then v = 0 end
    if m == nil or v < m then m = v end
  end
  return m
end
local function opt(x) if x == nil then return '' end return fmt(x) end
-- The first reason among the limits for which test(limit, used) holds, per-run caps first.
local function reason_where(test)
  local found = nil
  for _, x in ipairs(tl) do
    if test(x[1], x[2]) then
      if x[3] == 'RESOURCE_LIMIT' then return x[3] end
      found = found or x[3]
    end
  end
  for _, x in ipairs(cl) do
    if test(x[1], x[2]) then
      if x[3] == 'RESOURCE_LIMIT' then return x[3] end
      found = found or x[3]
    end
  end
  return found
end
local decision, reason = nil, nil
local spent = reason_where(function(limit, used) return used >= limit end)
if spent then
  decision, reason = 'D', spent
elseif ARGV[11] ~= '' and (partial > 0 or open_list_has_before(open, step)) then
  if ARGV[11] == 'reject' then
    decision, reason = 'D', 'RESOURCE_USAGE_UNKNOWN'
  elseif ARGV[11] == 'defer' then
    decision, reason = 'U', 'RESOURCE_USAGE_UNKNOWN'
  end
end
local input, est_cost = tonumber(ARGV[7]), tonumber(ARGV[8])
if decision == nil then
  local tight = nil
  for _, x in ipairs(tl) do
    if x[2] + input >= x[1] then
      if x[3] == 'RESOURCE_LIMIT' then tight = x[3] break end
      tight = tight or x[3]
    end
  end
  if tight ~= 'RESOURCE_LIMIT' then
    for _, x in ipairs(cl) do
      if x[2] + est_cost > x[1] then
        if x[3] == 'RESOURCE_LIMIT' then tight = x[3] break end
        tight = tight or x[3]
      end
    end
  end
  if tight then decision, reason = 'D', tight end
end
local s = {st = 'C', d = '', r = reason or '', g = '0', rt = '', rc = '', tok = '0', cost = '0',
           win = '', at = fmt(now), ui = '', uo = '', uc = '', cov = '', model = ARGV[5]}
local m = ARGV[1] .. '\n' .. ARGV[2]
if decision then
  s.d, s.rt, s.rc = decision, opt(remaining(tl, 0)), opt(remaining(cl, 0))
  redis.call('HINCRBY', KEYS[5], decision == 'U' and 'deferred' or 'denied', 1)
else
  local room = remaining(tl, input)
  local granted = tonumber(ARGV[6])
  if room ~= nil and room < granted then granted = room end
  local tokens = input + granted
  s.d, s.g, s.tok, s.cost = 'A', fmt(granted), fmt(tokens), fmt(est_cost)
  s.rt, s.rc = opt(remaining(tl, tokens)), opt(remaining(cl, est_cost))
  redis.call('HSET', run, 'ut', fmt(ut + tokens), 'uc', fmt(uc + est_cost))
  open = open == '' and ARGV[2] or (open .. ',' .. ARGV[2])
  redis.call('HSET', run, 'open', open)
  if has_allowance then
    s.win = fmt(wstart)
    redis.call('HSET', KEYS[2], 'ut', fmt(wut + tokens), 'uc', fmt(wuc + est_cost))
  end
  s.st = 'R'
  redis.call('ZADD', KEYS[3], now, m)
  redis.call('HINCRBY', KEYS[5], 'allowed', 1)
end
redis.call('HSET', run, 's' .. ARGV[2], pack_step(s))
keep_run(run, open, tonumber(ARGV[16]))
return {'ok', s.d, s.r, s.g, s.rt, s.rc, '0'}
"#;

/// Settle one step: replace its reservation with the reported usage, exactly once.
///
/// KEYS[1] the run's hash, KEYS[2] reserved index, KEYS[3] uncertain index, KEYS[4] stats.
/// ARGV[1] run_id, ARGV[2] step, ARGV[3] input tokens, ARGV[4] output tokens, ARGV[5] cost
/// (micro-dollars), ARGV[6] coverage (C complete, P partial, U unknown), ARGV[7] window key
/// prefix, ARGV[8] reservation_ttl ms, ARGV[9] run_retention ms, ARGV[10] run key prefix,
/// ARGV[11] now (0 = Redis TIME). The run's account and allowance window (recorded by
/// Authorize) name its window key, which shares the host's hash tag.
/// Returns {'ok'}, {'replay'}, {'not_authorized'}, {'conflict'} or {'resolved'}.
pub fn settle() -> String {
    format!("{LEDGER_PRELUDE}{SETTLE_BODY}")
}

const SETTLE_BODY: &str = r#"
local now = now_of(ARGV[11])
local run, step = KEYS[1], tonumber(ARGV[2])
housekeeping(now, tonumber(ARGV[8]), ARGV[10], KEYS[2], KEYS[3])
local raw = redis.call('HGET', run, 's' .. ARGV[2])
if not raw then return {'not_authorized'} end
local s = unpack_step(raw)
if s.st == 'S' then
  if s.ui == ARGV[3] and s.uo == ARGV[4] and s.uc == ARGV[5] and s.cov == ARGV[6] then
    return {'replay'}
  end
  return {'conflict'}
end
if s.st == 'X' or s.st == 'Y' then return {'resolved'} end
local r = redis.call('HMGET', run, 'ut', 'uc', 'partial', 'open', 'account', 'aw')
local ut, uc, partial, open = tonumber(r[1]), tonumber(r[2]), tonumber(r[3]), r[4] or ''
local rt, rcost = 0, 0
local m = ARGV[1] .. '\n' .. ARGV[2]
if s.st == 'R' or s.st == 'U' then
  rt, rcost = tonumber(s.tok), tonumber(s.cost)
  open = open_remove(open, step)
  redis.call('ZREM', s.st == 'R' and KEYS[2] or KEYS[3], m)
end
local used_t = tonumber(ARGV[3]) + tonumber(ARGV[4])
local used_c = tonumber(ARGV[5])
ut = math.max(ut - rt, 0) + used_t
uc = math.max(uc - rcost, 0) + used_c
if ARGV[6] ~= 'C' then partial = partial + 1 end
redis.call('HSET', run, 'ut', fmt(ut), 'uc', fmt(uc), 'partial', partial, 'open', open)
if r[6] and r[6] ~= '' then
  local wkey = ARGV[7] .. r[5]
  local wstart, wut, wuc = current_window(wkey, tonumber(r[6]), now)
  if s.win == '' or tonumber(s.win) == wstart then
    redis.call('HSET', wkey, 'ut', fmt(math.max(wut - rt, 0) + used_t),
               'uc', fmt(math.max(wuc - rcost, 0) + used_c))
  end
end
s.st, s.ui, s.uo, s.uc, s.cov = 'S', ARGV[3], ARGV[4], ARGV[5], ARGV[6]
redis.call('HSET', run, 's' .. ARGV[2], pack_step(s))
redis.call('HINCRBY', KEYS[4], 'settled', 1)
keep_run(run, open, tonumber(ARGV[9]))
return {'ok'}
"#;

/// An operator's resolution of an uncertain reservation.
///
/// KEYS as for settle. ARGV[1] run_id, ARGV[2] step, ARGV[3] resolution (X consumed,
/// Y released), ARGV[4] window key prefix, ARGV[5] reservation_ttl ms, ARGV[6] run_retention
/// ms, ARGV[7] run key prefix, ARGV[8] now (0 = Redis TIME).
/// Returns {'ok'}, {'no_such'} or {'not_uncertain', state}.
pub fn resolve() -> String {
    format!("{LEDGER_PRELUDE}{RESOLVE_BODY}")
}

const RESOLVE_BODY: &str = r#"
local now = now_of(ARGV[8])
local run, step = KEYS[1], tonumber(ARGV[2])
housekeeping(now, tonumber(ARGV[5]), ARGV[7], KEYS[2], KEYS[3])
local raw = redis.call('HGET', run, 's' .. ARGV[2])
if not raw then return {'no_such'} end
local s = unpack_step(raw)
if s.st ~= 'U' then return {'not_uncertain', s.st} end
local r = redis.call('HMGET', run, 'ut', 'uc', 'open', 'account')
local open = open_remove(r[3] or '', step)
redis.call('ZREM', KEYS[3], ARGV[1] .. '\n' .. ARGV[2])
if ARGV[3] == 'Y' then
  local rt, rcost = tonumber(s.tok), tonumber(s.cost)
  redis.call('HSET', run, 'ut', fmt(math.max(tonumber(r[1]) - rt, 0)),
             'uc', fmt(math.max(tonumber(r[2]) - rcost, 0)))
  if s.win ~= '' then
    local wkey = ARGV[4] .. r[4]
    local w = redis.call('HMGET', wkey, 'start', 'end', 'ut', 'uc')
    if w[1] and tonumber(w[1]) == tonumber(s.win) and now < tonumber(w[2]) then
      redis.call('HSET', wkey, 'ut', fmt(math.max(tonumber(w[3]) - rt, 0)),
                 'uc', fmt(math.max(tonumber(w[4]) - rcost, 0)))
    end
  end
end
redis.call('HSET', run, 'open', open)
s.st = ARGV[3]
redis.call('HSET', run, 's' .. ARGV[2], pack_step(s))
keep_run(run, open, tonumber(ARGV[6]))
return {'ok'}
"#;

/// Housekeeping alone (the periodic sweep), and the host's open reservations for listing:
/// uncertain ones first, then reserved ones, oldest first within each, at most ARGV[3] + 1.
///
/// KEYS[1] reserved index, KEYS[2] uncertain index. ARGV[1] reservation_ttl ms, ARGV[2] run
/// key prefix, ARGV[3] limit (0 = housekeeping only), ARGV[4] now (0 = Redis TIME).
/// Returns {now, uncertain count, reserved count, then per listed step: run_id, step, state,
/// subject, account, model, tokens, cost, authorized_at}.
pub fn open_reservations() -> String {
    format!("{LEDGER_PRELUDE}{OPEN_BODY}")
}

const OPEN_BODY: &str = r#"
local now = now_of(ARGV[4])
housekeeping(now, tonumber(ARGV[1]), ARGV[2], KEYS[1], KEYS[2])
local out = {fmt(now), tostring(redis.call('ZCARD', KEYS[2])),
             tostring(redis.call('ZCARD', KEYS[1]))}
local limit = tonumber(ARGV[3])
if limit == 0 then return out end
local listed = 0
for _, key in ipairs({KEYS[2], KEYS[1]}) do
  if listed > limit then break end
  local members = redis.call('ZRANGE', key, 0, limit - listed)
  for _, m in ipairs(members) do
    if listed > limit then break end
    local sep = string.find(m, '\n', 1, true)
    local run_id, step = string.sub(m, 1, sep - 1), string.sub(m, sep + 1)
    local rk = ARGV[2] .. run_id
    local raw = redis.call('HGET', rk, 's' .. step)
    if raw then
      local s = unpack_step(raw)
      local r = redis.call('HMGET', rk, 'subject', 'account')
      for _, v in ipairs({run_id, step, s.st, r[1] or '', r[2] or '', s.model, s.tok, s.cost,
                          s.at}) do
        table.insert(out, v)
      end
      listed = listed + 1
    end
  end
end
return out
"#;

/// The prelude of every ticket script ([`TICKET_CORE`] then [`TICKET_HELPERS`]): the scheduling
/// rules of [`crate::scheduler`] in Lua.
///
/// ARGV[1] the host's key prefix `B` (`{prefix}sched:{<host>}:`; every key below starts with
/// it, so all of a host's keys share its hash tag and slot), ARGV[2] the calling replica's
/// limits version and its limits for the host as `version,total,per_subject,per_account(-1
/// none),queue_total,queue_per_subject,queue_hard_total,overflow,lease,retention,max_retained,
/// max_rss,soft_rss`, ARGV[3] now (0 = Redis TIME), ARGV[4] the per-subject and per-account
/// caps as JSON (`''` when there are none).
///
/// One set of limits: `limits` (hash `s` scalars, `m` maps) holds the host's limits of record
/// and the counters' field `lv` their version. A caller with a newer version (a replica
/// started, or its file reloaded, later) writes its own there; every other caller decides with
/// the stored ones. So replicas whose files differ never enforce different limits for a host at
/// the same time: the most recently started replica's file is in force, from its first call
/// for the host. The fast paths read `lv` with the counters they read anyway and run only when
/// it is the caller's own version; the full rules resolve the limits first
/// (`resolve_limits`). KEYS[1] is `B c` (the counters), named so Redis routes the
/// script to the host's slot; the other keys are derived from `B`.
///
/// Keys: `t:<ticket>` hash (subject, account, instance, run, state Q/A/R/C/S/E/P, grant,
/// deadline, order, qat; an ended ticket keeps only run, state, grant and deadline, which is
/// when it is forgotten, and its key and its run's expire by TTL just after); `ended` list of
/// ended tickets, oldest first, trimmed to `max_retained` (the oldest are forgotten early); `run:<run_id>` → ticket; `leases` zset of live tickets by
/// deadline; `q:<subject>` zset of a subject's waiters by order; `rot` list, the round-robin
/// rotation of subjects with waiters; `depth` zset of subjects by queue depth; `dc` hash,
/// depth → subjects with more waiters than that; `af`, `aq` hashes of account in-flight and
/// account queued; `rss` hash instance → `mb|at`; `c` counters, with each subject's in-flight
/// count as field `s:<subject>`. Every change a Wait stream can see (a queued ticket admitted,
/// shed, cancelled or expired) is published on `B changes` (the ticket's key) for Wait streams
/// on any replica.
///
/// Times and counts go to Redis through `fmt`, as integers: a Lua number given to `redis.call`
/// is written with `%.17g`, which costs about twice as much (glibc prints a double digit by
/// digit), and these scripts pass a dozen numbers on every call. (`%d` goes through a C `long`:
/// 64 bits on the 64-bit builds of Redis that hold millisecond times; a 32-bit build would not.)
/// A ticket script with the constants it shares with the Rust core written in, from the Rust
/// constants themselves (so the two cannot drift apart): `@RETAIN_SLACK@`,
/// `@QUEUE_WAIT_BOUNDS_MS@` and `@EXACT_POSITION_SUBJECTS@`.
fn with_constants(script: &str) -> String {
    use crate::scheduler::{EXACT_POSITION_SUBJECTS, QUEUE_WAIT_BOUNDS_MS, RETAIN_SLACK};
    let bounds: Vec<String> = QUEUE_WAIT_BOUNDS_MS.iter().map(u64::to_string).collect();
    script
        .replace("@RETAIN_SLACK@", &RETAIN_SLACK.to_string())
        .replace("@QUEUE_WAIT_BOUNDS_MS@", &bounds.join(", "))
        .replace(
            "@EXACT_POSITION_SUBJECTS@",
            &EXACT_POSITION_SUBJECTS.to_string(),
        )
}

const TICKET_CORE: &str = r#"
local format = string.format
local function fmt(x) return format('%d', x) end
local function num(v) return tonumber(v or '0') or 0 end
local B = ARGV[1]
-- The limits as a table, from their scalars and their cap maps' JSON.
local function limits_of(scalars, maps_json)
  local total, per_subject, per_account, queue_total, queue_per_subject, queue_hard_total,
    overflow, lease, retention, max_retained, max_rss, soft_rss = string.match(scalars,
    '^(%d+),(%d+),(%-?%d+),(%d+),(%d+),(%d+),([%a_]+),(%d+),(%d+),(%d+),(%d+),(%d+)$')
  -- One constructor: the table is sized once (filling it field by field rehashes it). The
  -- cap maps are only read, so one empty table stands for both when there are none.
  local none = {}
  local maps = maps_json ~= '' and cjson.decode(maps_json) or none
  return {total = tonumber(total), per_subject = tonumber(per_subject),
          per_account = tonumber(per_account), queue_total = tonumber(queue_total),
          queue_per_subject = tonumber(queue_per_subject),
          queue_hard_total = tonumber(queue_hard_total), overflow = overflow,
          lease = tonumber(lease), retention = tonumber(retention),
          max_retained = tonumber(max_retained), max_rss = tonumber(max_rss),
          soft_rss = tonumber(soft_rss), subjects = maps.subjects or none,
          accounts = maps.accounts or none}
end
-- The caller's limits and their version; `L` (and LIMITS_S, LIMITS_M, which the stats script
-- answers) are the caller's until `resolve_limits` finds others of record.
local MY_V, LIMITS_S = string.match(ARGV[2], '^(%d+),(.*)$')
local LIMITS_M = ARGV[4]
local L = limits_of(LIMITS_S, LIMITS_M)
local now = tonumber(ARGV[3])
-- Grants are at least the time in µs (scheduler::HostState::set_grant_floor), so they keep
-- increasing after Redis restarts empty. (About 1.8e15: exact in a Lua double.)
local now_us
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now_us = now * 1000
end
-- The grant after `last` (the counters' `grant` field as read).
local function next_grant(last) return math.max(num(last) + 1, now_us) end
local C, LEASES, AF = B .. 'c', B .. 'leases', B .. 'af'
-- Use the limits of record (see above), given the counters' `lv` as read: a newer version's
-- stored limits replace the caller's; an older one (or none) is replaced by the caller's.
local function resolve_limits(stored_v)
  local sv, mine = tonumber(stored_v), tonumber(MY_V)
  if sv == mine then return end
  if sv and sv > mine then
    local st = redis.call('HMGET', B .. 'limits', 's', 'm')
    LIMITS_S, LIMITS_M = st[1], st[2]
    L = limits_of(LIMITS_S, LIMITS_M)
  else
    redis.call('HSET', B .. 'limits', 's', LIMITS_S, 'm', LIMITS_M)
    redis.call('HSET', C, 'lv', MY_V)
  end
end
-- A subject's in-flight count is the field `s:<subject>` of the counters (read and written
-- with the others).
local function sf(s) return 's:' .. s end
-- Set by a fast path that found no lease due, so the full rules skip that look.
local nothing_due = false
-- The fast paths' look for due leases. The counters' `next_due` is a lower bound of every
-- lease deadline: the fast paths keep it (they add leases at `now + lease`, never below it,
-- or only remove them), and every other ticket script drops it first thing, before it may
-- add a lease anywhere. `stored` is its value; with none, or once it has passed, the first
-- lease is read (`empty`: the bound when there are no leases). Returns the bound: nothing
-- is due while it is above `now`.
local function due_bound(stored, empty)
  local nd = tonumber(stored)
  if nd and nd > now then return nd end
  local first = redis.call('ZRANGE', LEASES, 0, 0, 'WITHSCORES')
  return tonumber(first[2]) or empty
end
-- A new ticket admitted at once (Submit's fast path and full rules): the ticket and its lease
-- in one write each; the caller writes the counters. Returns its grant and deadline.
local function admit_new(key, subject, account, inst, run, grant)
  local g, deadline = fmt(grant), fmt(now + L.lease)
  redis.call('HSET', B .. 't:' .. key, 'subject', subject, 'account', account,
             'instance', inst, 'run', run, 'state', 'A', 'grant', g,
             'deadline', deadline, 'order', '0')
  redis.call('ZADD', LEASES, deadline, key)
  return g, deadline
end
-- A ticket that just ended: write its final state and when it is forgotten, keeping only what
-- an idempotent retry needs (its subject, account and instance are emptied in the same write:
-- cheaper than deleting the fields, and as small), let its keys expire a second after
-- retention, and remember it in `ended`, forgetting the oldest RETAIN_SLACK once
-- `max_retained` + RETAIN_SLACK are remembered (scheduler::RETAIN_SLACK).
local function retire(k, tk, run, state)
  -- Remembered for retention (`ticket` forgets it then, by the scripts' time).
  redis.call('HSET', tk, 'state', state, 'deadline', fmt(now + L.retention), 'subject', '',
             'account', '', 'instance', '')
  local keep = fmt(L.retention + 1000)
  redis.call('PEXPIRE', tk, keep)
  redis.call('PEXPIRE', B .. 'run:' .. run, keep)
  local ended = B .. 'ended'
  if redis.call('RPUSH', ended, k) >= L.max_retained + @RETAIN_SLACK@ then
    for _, old in ipairs(redis.call('LPOP', ended, @RETAIN_SLACK@)) do
      local otk = B .. 't:' .. old
      local orun = redis.call('HGET', otk, 'run')
      redis.call('DEL', otk)
      if orun and redis.call('GET', B .. 'run:' .. orun) == old then
        redis.call('DEL', B .. 'run:' .. orun)
      end
    end
  end
end
"#;

/// The rest of every ticket script's prelude: the scheduling rules as functions. Kept apart from
/// [`TICKET_CORE`] so that a fast path placed between them returns before Lua builds them.
const TICKET_HELPERS: &str = r#"
-- Past the fast paths: this script decides with the limits of record, and may add leases, so
-- the fast paths' bound goes.
resolve_limits(redis.call('HGET', C, 'lv'))
redis.call('HDEL', C, 'next_due')
local ROT, DEPTH, DC, AQ, RSS = B .. 'rot', B .. 'depth', B .. 'dc', B .. 'aq', B .. 'rss'
local QW = B .. 'qw'
-- Upper bounds (ms) of the queue-wait histogram (scheduler::QUEUE_WAIT_BOUNDS_MS).
local QW_BOUNDS = {@QUEUE_WAIT_BOUNDS_MS@}
local function tkey(k) return B .. 't:' .. k end
local function qkey(s) return B .. 'q:' .. s end
local function runkey(r) return B .. 'run:' .. r end
local function cnt(f) return num(redis.call('HGET', C, f)) end
local function incr(f, by) redis.call('HINCRBY', C, f, by or 1) end
-- Counts per name stay at 0 when they reach it (the sweep drops zeros), saving a command on
-- the hot path.
local function hincr(h, f, by) redis.call('HINCRBY', h, f, by) end
local function changed(k) redis.call('PUBLISH', B .. 'changes', k) end
-- `depth` holds one member per subject with waiters, scored by its depth: the order of its
-- oldest waiter (fixed width and offset, so members sort by it) and its name. The first member
-- of the top score is the deepest subject whose oldest waiter came first (as the core's
-- `by_depth`).
local function dmember(s, head) return format('%020d', head + 4503599627370496) .. s end
local function dsubject(m) return string.sub(m, 21) end
local function head_of(q) return tonumber(redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')[2]) end
local function subject_cap(s) return L.subjects[s] or L.per_subject end
local function account_cap(a)
  if a == '' then return nil end
  local v = L.accounts[a]
  if v then return v end
  if L.per_account >= 0 then return L.per_account end
  return nil
end
local function account_has_room(a)
  local cap = account_cap(a)
  return cap == nil or num(redis.call('HGET', AF, a)) < cap
end
local function rss_of(inst)
  local r = redis.call('HGET', RSS, inst)
  if not r then return nil end
  local sep = string.find(r, '|', 1, true)
  local mb, at = tonumber(string.sub(r, 1, sep - 1)), tonumber(string.sub(r, sep + 1))
  if now - at >= L.lease then return nil end
  return mb
end
local function instance_soft(inst)
  if L.max_rss == 0 then return false end
  local mb = rss_of(inst)
  return mb ~= nil and mb >= L.soft_rss
end
local function report_rss(inst, mb)
  if L.max_rss > 0 then redis.call('HSET', RSS, inst, fmt(mb) .. '|' .. fmt(now)) end
end
local function ticket(k)
  local t = redis.call('HMGET', tkey(k), 'subject', 'account', 'instance', 'run', 'state',
                       'grant', 'deadline', 'order', 'qat')
  if not t[5] then return nil end
  -- An ended ticket past its retention is forgotten (its keys expire by TTL soon after).
  if t[5] ~= 'Q' and t[5] ~= 'A' and t[5] ~= 'P' and num(t[7]) <= now then return nil end
  return {subject = t[1], account = t[2], instance = t[3], run = t[4], state = t[5],
          grant = num(t[6]), deadline = num(t[7]), order = num(t[8]), qat = num(t[9])}
end
local function live(state) return state == 'Q' or state == 'A' or state == 'P' end
local function set_lease(k, deadline)
  redis.call('HSET', tkey(k), 'deadline', fmt(deadline))
  redis.call('ZADD', LEASES, deadline, k)
end
-- Admit a waiter that dispatch took out of its queue.
local function admit(k, t)
  local g = fmt(next_grant(redis.call('HGET', C, 'grant')))
  redis.call('HSET', C, 'grant', g)
  redis.call('HSET', tkey(k), 'state', 'A', 'grant', g, 'deadline', fmt(now + L.lease))
  redis.call('ZADD', LEASES, now + L.lease, k)
  redis.call('HINCRBY', C, 'in_flight', 1)
  redis.call('HINCRBY', C, 'admitted', 1)
  hincr(C, sf(t.subject), 1)
  if t.account ~= '' then hincr(AF, t.account, 1) end
  changed(k)
end
local function enqueue(k, t, front)
  local order
  if front then
    order = redis.call('HINCRBY', C, 'next_front', -1)
  else
    order = redis.call('HINCRBY', C, 'next_order', 1)
  end
  redis.call('HSET', tkey(k), 'state', 'Q', 'order', order, 'qat', fmt(now))
  set_lease(k, now + L.lease)
  if t.account ~= '' then hincr(AQ, t.account, 1) end
  incr('queued')
  local q = qkey(t.subject)
  local depth = redis.call('ZCARD', q)
  local old_head = depth > 0 and head_of(q) or nil
  redis.call('ZADD', q, order, k)
  if depth == 0 then redis.call('RPUSH', ROT, t.subject) end
  local head = (old_head == nil or order < old_head) and order or old_head
  if old_head and old_head ~= head then redis.call('ZREM', DEPTH, dmember(t.subject, old_head)) end
  redis.call('ZADD', DEPTH, depth + 1, dmember(t.subject, head))
  hincr(DC, tostring(depth), 1)
end
-- Take a waiter out of its subject's queue; `popped` when dispatch already took the subject
-- off the rotation.
local function dequeue(k, t, popped)
  if t.account ~= '' then hincr(AQ, t.account, -1) end
  incr('queued', -1)
  local q = qkey(t.subject)
  local depth = redis.call('ZCARD', q)
  local old_head = head_of(q)
  redis.call('ZREM', q, k)
  hincr(DC, tostring(depth - 1), -1)
  if depth > 1 then
    local head = old_head
    if t.order == old_head then
      head = head_of(q)
      redis.call('ZREM', DEPTH, dmember(t.subject, old_head))
    end
    redis.call('ZADD', DEPTH, depth - 1, dmember(t.subject, head))
  else
    redis.call('ZREM', DEPTH, dmember(t.subject, old_head))
    if not popped then redis.call('LREM', ROT, 1, t.subject) end
  end
end
local function finish(k, t, state)
  local was_queued = t.state == 'Q'
  if was_queued then
    dequeue(k, t, false)
  elseif t.state == 'A' then
    incr('in_flight', -1)
    hincr(C, sf(t.subject), -1)
    if t.account ~= '' then hincr(AF, t.account, -1) end
  elseif t.state == 'P' then
    incr('parked', -1)
  else
    return
  end
  redis.call('ZREM', LEASES, k)
  retire(k, tkey(k), t.run, state)
  -- A Wait stream follows a ticket only while it is queued.
  if was_queued then changed(k) end
end
local function dispatch()
  local idle = 0
  while redis.call('LLEN', ROT) > idle and cnt('in_flight') < L.total do
    local s = redis.call('LPOP', ROT)
    if not s then break end
    local q = qkey(s)
    local pick, pt = nil, nil
    if num(redis.call('HGET', C, sf(s))) < subject_cap(s) then
      for _, k in ipairs(redis.call('ZRANGE', q, 0, -1)) do
        local t = ticket(k)
        if account_has_room(t.account) and not instance_soft(t.instance) then
          pick, pt = k, t
          break
        end
      end
    end
    if not pick then
      idle = idle + 1
      redis.call('RPUSH', ROT, s)
    else
      dequeue(pick, pt, true)
      local waited = math.max(now - pt.qat, 0)
      local bucket = #QW_BOUNDS
      for i, b in ipairs(QW_BOUNDS) do
        if waited <= b then bucket = i - 1 break end
      end
      redis.call('HINCRBY', QW, 'b' .. bucket, 1)
      redis.call('HINCRBY', QW, 'sum', waited)
      admit(pick, pt)
      if redis.call('ZCARD', q) > 0 then redis.call('RPUSH', ROT, s) end
      idle = 0
    end
  end
end
-- Expire due leases (and drop stale rss reports); with `forget` (the sweep), also drop the
-- zero counts of subjects and accounts no longer seen.
local function housekeeping(forget)
  local freed = false
  local due = {}
  if forget or not nothing_due then due = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now) end
  for _, k in ipairs(due) do
    local t = ticket(k)
    if t then
      finish(k, t, 'E')
      incr('expired')
      freed = true
    else
      redis.call('ZREM', LEASES, k)
    end
  end
  if forget then
    for _, h in ipairs({C, AF, AQ, DC}) do
      local all = redis.call('HGETALL', h)
      for i = 1, #all, 2 do
        -- Of the counters, only subjects' in-flight counts are dropped at 0.
        if tonumber(all[i + 1]) == 0 and (h ~= C or string.sub(all[i], 1, 2) == 's:') then
          redis.call('HDEL', h, all[i])
        end
      end
    end
  end
  if L.max_rss > 0 then
    local r = redis.call('HGETALL', RSS)
    for i = 1, #r, 2 do
      local sep = string.find(r[i + 1], '|', 1, true)
      if now - tonumber(string.sub(r[i + 1], sep + 1)) >= L.lease then
        redis.call('HDEL', RSS, r[i])
        freed = true
      end
    end
  end
  if freed then dispatch() end
end
local function position(k, t)
  local depth = redis.call('ZCOUNT', qkey(t.subject), '-inf', '(' .. fmt(t.order))
  local before = 0
  for d = 0, depth - 1 do before = before + num(redis.call('HGET', DC, tostring(d))) end
  -- scheduler::EXACT_POSITION_SUBJECTS
  if redis.call('LLEN', ROT) <= @EXACT_POSITION_SUBJECTS@ then
    for _, s in ipairs(redis.call('LRANGE', ROT, 0, -1)) do
      if s == t.subject then break end
      if redis.call('ZCARD', qkey(s)) > depth then before = before + 1 end
    end
  end
  return before
end
-- {state, position, grant, lease remaining}, or false for an unknown ticket.
local function view(k)
  local t = ticket(k)
  if not t then return false end
  local pos, lease = 0, 0
  if t.state == 'Q' then pos = position(k, t) end
  if live(t.state) then lease = math.max(t.deadline - now, 0) end
  return {t.state, pos, t.grant, lease}
end
"#;

/// Submit a ticket. ARGV[5] ticket key (32 hex digits, fresh), ARGV[6] instance, ARGV[7]
/// subject, ARGV[8] account ('' none), ARGV[9] run_id, ARGV[10] mode (Q queue, T try),
/// ARGV[11] rss_mb ('' none).
/// Returns {'ok', key, state, position, grant, lease}, {'refused', reason} or
/// {'conflict', field}. The key is not checked for a collision: it is 128 random bits, and
/// finding a taken one is as likely as guessing one.
pub fn submit() -> String {
    with_constants(&[TICKET_CORE, SUBMIT_FAST, TICKET_HELPERS, SUBMIT_BODY].concat())
}

const SUBMIT_BODY: &str = r#"
housekeeping(false)
local key, inst, subject, account, run = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
-- Claim the run_id for the new ticket in one command; a refusal below gives it back.
local existing = redis.call('SET', runkey(run), key, 'NX', 'GET')
if existing then
  local t = ticket(existing)
  if t then
    -- An ended ticket keeps no subject or account: a repeat gets its final state.
    if live(t.state) and t.subject ~= subject then return {'conflict', 'subject'} end
    if live(t.state) and t.account ~= account then return {'conflict', 'account_id'} end
    local v = view(existing)
    return {'ok', existing, v[1], v[2], v[3], v[4]}
  end
  redis.call('SET', runkey(run), key)
end
local function refuse(reason)
  redis.call('DEL', runkey(run))
  incr('rejected')
  return {'refused', reason}
end
local rss = tonumber(ARGV[11])
if rss then report_rss(inst, rss) end
if L.max_rss > 0 and rss and rss >= L.max_rss then
  return refuse('MEMORY_PRESSURE')
end
dispatch()
local c = redis.call('HMGET', C, 'grant', 'in_flight', 'submitted', 'admitted', sf(subject))
local eligible = (not instance_soft(inst)) and num(c[2]) < L.total
  and num(c[5]) < subject_cap(subject) and account_has_room(account)
if not eligible then
  if ARGV[10] == 'T' or L.queue_total == 0 then
    return refuse('BUSY')
  end
  local depth = redis.call('ZCARD', qkey(subject))
  local subject_full = L.queue_per_subject > 0 and depth >= L.queue_per_subject
  local total_full = cnt('queued') >= L.queue_total
  if subject_full or total_full then
    if L.overflow == 'reject' then
      return refuse('QUEUE_FULL')
    elseif L.overflow == 'queue' then
      if subject_full or cnt('queued') >= L.queue_hard_total then
        return refuse('QUEUE_FULL')
      end
    else
      local victim_subject = subject
      if not subject_full then
        -- The deepest subject; of equally deep ones the one whose oldest waiter came first.
        local top = redis.call('ZREVRANGE', DEPTH, 0, 0, 'WITHSCORES')
        if top[2] then
          victim_subject = dsubject(
            redis.call('ZRANGEBYSCORE', DEPTH, top[2], top[2], 'LIMIT', 0, 1)[1])
        else
          victim_subject = nil
        end
      end
      local victim = victim_subject and redis.call('ZRANGE', qkey(victim_subject), 0, 0)[1]
      if not victim then
        return refuse('QUEUE_FULL')
      end
      finish(victim, ticket(victim), 'S')
      incr('shed')
    end
  end
end
if eligible then
  -- A new ticket admitted at once: one write of the ticket, counters together; nothing is
  -- published (no Wait stream can follow a ticket before its id is answered).
  local g = admit_new(key, subject, account, inst, run, next_grant(c[1]))
  redis.call('HSET', C, 'grant', g, 'in_flight', fmt(num(c[2]) + 1),
             'submitted', fmt(num(c[3]) + 1), 'admitted', fmt(num(c[4]) + 1),
             sf(subject), fmt(num(c[5]) + 1))
  if account ~= '' then hincr(AF, account, 1) end
  return {'ok', key, 'A', 0, g, L.lease}
end
redis.call('HSET', tkey(key), 'subject', subject, 'account', account, 'instance', inst,
           'run', run, 'state', 'N', 'grant', 0, 'deadline', 0, 'order', 0)
incr('submitted')
enqueue(key, {subject = subject, account = account, instance = inst, run = run})
local v = view(key)
return {'ok', key, v[1], v[2], v[3], v[4]}
"#;

/// Submit's common case in few commands, before the helpers are built: no lease due (known
/// from the counters' `next_due` bound, see `due_bound`), nothing queued, no memory ladder,
/// room for the ticket, a new run_id. The answer is what the full
/// rules give (housekeeping and dispatch have nothing to do then); anything else falls
/// through to them.
const SUBMIT_FAST: &str = r#"
if L.max_rss == 0 then
  local key, inst, subject, account, run = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
  local c = redis.call('HMGET', C, 'grant', 'in_flight', 'submitted', 'admitted', 'queued',
                      's:' .. subject, 'next_due', 'lv')
  local nd = due_bound(c[7], now + L.lease)
  if nd > now and c[8] == MY_V then
    nothing_due = true
    local acap = nil
    if account ~= '' then
      acap = L.accounts[account]
      if not acap and L.per_account >= 0 then acap = L.per_account end
    end
    if num(c[5]) == 0 and num(c[2]) < L.total
      and num(c[6]) < (L.subjects[subject] or L.per_subject)
      and (acap == nil or num(redis.call('HGET', AF, account)) < acap)
      and not redis.call('SET', B .. 'run:' .. run, key, 'NX', 'GET') then
      local g, deadline = admit_new(key, subject, account, inst, run, next_grant(c[1]))
      redis.call('HSET', C, 'grant', g, 'in_flight', fmt(num(c[2]) + 1),
                 'submitted', fmt(num(c[3]) + 1), 'admitted', fmt(num(c[4]) + 1),
                 's:' .. subject, fmt(num(c[6]) + 1),
                 'next_due', nd > now + L.lease and deadline or fmt(nd))
      if account ~= '' then redis.call('HINCRBY', AF, account, '1') end
      return {'ok', key, 'A', 0, g, L.lease}
    end
  end
end
"#;

/// Renew leases. ARGV[5] rss_mb ('' none), ARGV[6..] ticket keys.
/// Returns per key {state, position, grant, lease}, or false when unknown.
pub fn renew() -> String {
    with_constants(&[TICKET_CORE, TICKET_HELPERS, RENEW_BODY].concat())
}

const RENEW_BODY: &str = r#"
housekeeping(false)
local rss = tonumber(ARGV[5])
local out = {}
for i = 6, #ARGV do
  local k = ARGV[i]
  local t = ticket(k)
  if t and live(t.state) then
    set_lease(k, now + L.lease)
    if rss then
      local was_soft = instance_soft(t.instance)
      report_rss(t.instance, rss)
      if was_soft and not instance_soft(t.instance) then dispatch() end
    end
  end
  table.insert(out, view(k))
end
return out
"#;

/// Release or withdraw a ticket. ARGV[5] ticket key, or '' to find it by ARGV[6] run_id.
/// Returns {previous state, ticket key}, or false for an unknown ticket.
pub fn release() -> String {
    with_constants(&[TICKET_CORE, RELEASE_FAST, TICKET_HELPERS, RELEASE_BODY].concat())
}

const RELEASE_BODY: &str = r#"
housekeeping(false)
local t = ticket(k)
if not t then return false end
if t.state == 'A' or t.state == 'P' then
  finish(k, t, 'R')
  incr('released')
  dispatch()
elseif t.state == 'Q' then
  finish(k, t, 'C')
  incr('cancelled')
  dispatch()
end
return {t.state, k}
"#;

/// Release's common case in few commands, before the helpers are built: an admitted ticket,
/// no lease due (see `due_bound`), nothing queued (so nothing to dispatch). As `finish` and the full rules do it.
const RELEASE_FAST: &str = r#"
local k = ARGV[5]
if k == '' then
  k = redis.call('GET', B .. 'run:' .. ARGV[6])
  if not k then return false end
end
local tk = B .. 't:' .. k
local t = redis.call('HMGET', tk, 'subject', 'account', 'run', 'state')
if t[4] == 'A' then
  local c = redis.call('HMGET', C, 'in_flight', 'released', 'queued', 's:' .. t[1], 'next_due',
                      'lv')
  -- This ticket's own lease is in the set, so the bound is never the fallback.
  local nd = due_bound(c[5], now)
  if nd > now and c[6] == MY_V then
    nothing_due = true
    if num(c[3]) == 0 then
      redis.call('HSET', C, 'in_flight', fmt(num(c[1]) - 1), 'released', fmt(num(c[2]) + 1),
                 's:' .. t[1], fmt(num(c[4]) - 1), 'next_due', fmt(nd))
      if t[2] ~= '' then redis.call('HINCRBY', AF, t[2], '-1') end
      redis.call('ZREM', LEASES, k)
      retire(k, tk, t[3], 'R')
      return {'A', k}
    end
  end
end
"#;

/// Park an admitted ticket (a parked one stays). ARGV[5] ticket key.
/// Returns {'ok', state, position, grant, lease}, {'state', state} when the ticket may not be
/// parked, or false when unknown.
pub fn park() -> String {
    with_constants(&[TICKET_CORE, TICKET_HELPERS, PARK_BODY].concat())
}

const PARK_BODY: &str = r#"
housekeeping(false)
local k = ARGV[5]
local t = ticket(k)
if not t then return false end
if t.state == 'A' then
  incr('in_flight', -1)
  hincr(C, sf(t.subject), -1)
  if t.account ~= '' then hincr(AF, t.account, -1) end
  incr('parked', 1)
  redis.call('HSET', tkey(k), 'state', 'P')
  dispatch()
elseif t.state ~= 'P' then
  return {'state', t.state}
end
local v = view(k)
return {'ok', v[1], v[2], v[3], v[4]}
"#;

/// Ask for a slot again for a parked ticket: admitted at once if it fits, else queued ahead
/// of its subject's waiters (admitted and queued ones stay). ARGV[5] ticket key.
/// Returns as for park.
pub fn unpark() -> String {
    with_constants(&[TICKET_CORE, TICKET_HELPERS, UNPARK_BODY].concat())
}

const UNPARK_BODY: &str = r#"
housekeeping(false)
local k = ARGV[5]
local t = ticket(k)
if not t then return false end
if t.state == 'P' then
  incr('parked', -1)
  local fits = (not instance_soft(t.instance)) and cnt('in_flight') < L.total
    and num(redis.call('HGET', C, sf(t.subject))) < subject_cap(t.subject)
    and account_has_room(t.account)
  if fits then
    local g = fmt(next_grant(redis.call('HGET', C, 'grant')))
    redis.call('HSET', C, 'grant', g)
    redis.call('HSET', tkey(k), 'state', 'A', 'grant', g, 'deadline', fmt(now + L.lease))
    redis.call('ZADD', LEASES, now + L.lease, k)
    redis.call('HINCRBY', C, 'in_flight', 1)
    redis.call('HINCRBY', C, 'admitted', 1)
    hincr(C, sf(t.subject), 1)
    if t.account ~= '' then hincr(AF, t.account, 1) end
  else
    enqueue(k, t, true)
  end
elseif t.state ~= 'A' and t.state ~= 'Q' then
  return {'state', t.state}
end
local v = view(k)
return {'ok', v[1], v[2], v[3], v[4]}
"#;

/// Read one ticket (after housekeeping). ARGV[5] ticket key, ARGV[6] 'sweep' to also drop
/// zero counts. Returns its view or false.
pub fn ticket() -> String {
    with_constants(&[TICKET_CORE, TICKET_HELPERS, TICKET_BODY].concat())
}

const TICKET_BODY: &str = r#"
housekeeping(ARGV[6] == 'sweep')
return view(ARGV[5])
"#;

/// Housekeeping, then the host's gauges, counters and rows.
/// Returns {in_flight, queued, parked, submitted, admitted, rejected, released, cancelled,
/// shed, expired, reported_rss, n_subjects, (subject, in_flight, queued) x n, n_accounts,
/// (account, in_flight, queued) x n}.
pub fn stats() -> String {
    with_constants(&[TICKET_CORE, TICKET_HELPERS, STATS_BODY].concat())
}

const STATS_BODY: &str = r#"
housekeeping(false)
local out = {}
for _, f in ipairs({'in_flight', 'queued', 'parked', 'submitted', 'admitted', 'rejected',
                    'released', 'cancelled', 'shed', 'expired'}) do
  table.insert(out, cnt(f))
end
local rss = 0
for _, inst in ipairs(redis.call('HKEYS', RSS)) do
  local mb = rss_of(inst)
  if mb and mb > rss then rss = mb end
end
table.insert(out, rss)
local subjects, seen = {}, {}
for _, f in ipairs(redis.call('HKEYS', C)) do
  if string.sub(f, 1, 2) == 's:' then
    local s = string.sub(f, 3)
    seen[s] = true; table.insert(subjects, s)
  end
end
for _, s in ipairs(redis.call('LRANGE', ROT, 0, -1)) do
  if not seen[s] then seen[s] = true; table.insert(subjects, s) end
end
local rows = {}
for _, s in ipairs(subjects) do
  local f, q = num(redis.call('HGET', C, sf(s))), redis.call('ZCARD', qkey(s))
  if f > 0 or q > 0 then
    table.insert(rows, s); table.insert(rows, f); table.insert(rows, q)
  end
end
table.insert(out, #rows / 3)
for _, v in ipairs(rows) do table.insert(out, v) end
local accounts, aseen = {}, {}
for _, h in ipairs({AF, AQ}) do
  for _, a in ipairs(redis.call('HKEYS', h)) do
    if not aseen[a] then aseen[a] = true; table.insert(accounts, a) end
  end
end
rows = {}
for _, a in ipairs(accounts) do
  local f, q = num(redis.call('HGET', AF, a)), num(redis.call('HGET', AQ, a))
  if f > 0 or q > 0 then
    table.insert(rows, a); table.insert(rows, f); table.insert(rows, q)
  end
end
table.insert(out, #rows / 3)
for _, v in ipairs(rows) do table.insert(out, v) end
for i = 0, #QW_BOUNDS do table.insert(out, num(redis.call('HGET', QW, 'b' .. i))) end
table.insert(out, num(redis.call('HGET', QW, 'sum')))
-- The limits of record: scalars, then each cap map as a count and name, cap pairs.
table.insert(out, LIMITS_S)
for _, m in ipairs({'subjects', 'accounts'}) do
  local caps = L[m]
  local names = {}
  for name in pairs(caps) do table.insert(names, name) end
  table.insert(out, #names)
  for _, name in ipairs(names) do
    table.insert(out, name); table.insert(out, caps[name])
  end
end
return out
"#;

/// Housekeeping, then every live ticket: {key, state, subject, account, run, instance, grant,
/// deadline, order} per ticket (sorted by the caller).
pub fn list() -> String {
    with_constants(&[TICKET_CORE, TICKET_HELPERS, LIST_BODY].concat())
}

const LIST_BODY: &str = r#"
housekeeping(false)
local out = {fmt(now)}
for _, k in ipairs(redis.call('ZRANGE', LEASES, 0, -1)) do
  local t = ticket(k)
  if t then
    for _, v in ipairs({k, t.state, t.subject, t.account, t.run, t.instance, fmt(t.grant),
                        fmt(t.deadline), fmt(t.order)}) do
      table.insert(out, v)
    end
  end
end
return out
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rust_constants_are_written_into_every_ticket_script() {
        for script in [
            submit(),
            renew(),
            release(),
            park(),
            unpark(),
            ticket(),
            stats(),
            list(),
        ] {
            assert!(!script.contains('@'), "a placeholder left unfilled");
            assert!(script.contains(&format!(
                "max_retained + {} then",
                crate::scheduler::RETAIN_SLACK
            )));
            assert!(script.contains(&format!(
                "QW_BOUNDS = {{{}}}",
                crate::scheduler::QUEUE_WAIT_BOUNDS_MS.map(|b| b.to_string()).join(", ")
            )));
            assert!(script.contains(&format!(
                "<= {} then",
                crate::scheduler::EXACT_POSITION_SUBJECTS
            )));
        }
    }
}
