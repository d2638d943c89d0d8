-- Release's common case in few commands, before the helpers are built: the limits of record
-- the caller's own or newer (`adopt`), an admitted ticket without a key,
-- no lease due (see `due_bound`), nothing queued (so nothing to dispatch). As `finish` and the
-- full rules do it. Answers as release_body.lua does ({ADMITTED, key}, or false for a run_id
-- that names no ticket); nil when anything else holds, and then nothing was written: the full
-- rules decide.
-- A function of Release's arguments (ARGV[5..8] of release_body.lua: the ticket key ('' to
-- find it by run_id), the run_id, the outcome reported ('' none), the latency ('' none)): the
-- Release script calls it once, the batch script (batch_body.lua) once per Release. Its
-- second value is the ticket key, found by run_id when not given.
local function release_fast(k, run, outcome, latency)
  if k == '' then
    k = redis.call('GET', B .. 'run:' .. run)
    if not k then return false end
  end
  local tk = B .. 't:' .. k
  local t = redis.call('HMGET', tk, 'subject', 'account', 'run', 'state', 'qat', 'key',
                      'instance')
  if t[4] ~= ADMITTED or t[6] then return nil, k end
  local c = redis.call('HMGET', C, 'in_flight', 'released', 'queued', 's:' .. t[1], 'next_due',
                      'lv', 'ls', 'lm', 'hold', 'a:' .. t[2])
  -- This ticket's own lease is in the set, so the bound is never the fallback.
  local nd = due_bound(c[5], now)
  if not (nd > now and adopt(c[6], c[7], c[8])) then return nil, k end
  nothing_due = true
  if num(c[3]) ~= 0 then return nil, k end
  if outcome ~= '' or latency ~= '' then
    local af = t[2] ~= '' and num(redis.call('HGET', AF, t[2])) or 0
    record_outcome(t[2], outcome, latency, af, c[10])
  end
  redis.call('HSET', C, 'in_flight', fmt(num(c[1]) - 1), 'released', fmt(num(c[2]) + 1),
             's:' .. t[1], fmt(num(c[4]) - 1), 'next_due', fmt(nd),
             'hold', fmt(hold_avg(c[9], num(t[5]))))
  if t[2] ~= '' then redis.call('HINCRBY', AF, t[2], '-1') end
  redis.call('ZREM', LEASES, k)
  retire(k, tk, t[3], RELEASED, {t[1], t[2], t[7], ''})
  return {ADMITTED, k}, k
end
