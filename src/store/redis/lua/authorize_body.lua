-- Authorize one model step, as crate::ledger::Ledger::authorize.
--
-- KEYS[1] the run's hash, KEYS[2] the account's allowance window hash (any key of the host
-- when there is no allowance), KEYS[3] reserved index, KEYS[4] uncertain index, KEYS[5] stats.
-- ARGV[1] run_id, ARGV[2] step, ARGV[3] subject, ARGV[4] account ('' none), ARGV[5] model,
-- ARGV[6] requested output tokens, ARGV[7] estimated input tokens, ARGV[8] estimated cost
-- (micro-dollars), ARGV[9] per-run max tokens ('' none), ARGV[10] per-run max cost ('' none),
-- ARGV[11] unknown_usage ('' no budget block, 'reject', 'allow', 'defer'), ARGV[12] allowance
-- tokens (''), ARGV[13] allowance cost (''), ARGV[14] allowance window ms ('' no allowance),
-- ARGV[15] reservation_ttl ms, ARGV[16] run_retention ms, ARGV[17] run key prefix,
-- ARGV[18] now (0 = Redis TIME).
-- Returns {'ok', decision (A/D/U), reason, granted, remaining_tokens, remaining_cost, replay}
-- or {'conflict', field}.
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
if ARGV[9] ~= '' then table.insert(tl, {tonumber(ARGV[9]), ut, RESOURCE_LIMIT}) end
if ARGV[10] ~= '' then table.insert(cl, {tonumber(ARGV[10]), uc, RESOURCE_LIMIT}) end
if has_allowance and ARGV[12] ~= '' then
  table.insert(tl, {tonumber(ARGV[12]), wut, QUOTA_EXHAUSTED})
end
if has_allowance and ARGV[13] ~= '' then
  table.insert(cl, {tonumber(ARGV[13]), wuc, QUOTA_EXHAUSTED})
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
      if x[3] == RESOURCE_LIMIT then return x[3] end
      found = found or x[3]
    end
  end
  for _, x in ipairs(cl) do
    if test(x[1], x[2]) then
      if x[3] == RESOURCE_LIMIT then return x[3] end
      found = found or x[3]
    end
  end
  return found
end
local decision, reason = nil, nil
local spent = reason_where(function(limit, used) return used >= limit end)
if spent then
  decision, reason = DENY, spent
elseif ARGV[11] ~= '' and (partial > 0 or open_list_has_before(open, step)) then
  if ARGV[11] == UNKNOWN_REJECT then
    decision, reason = DENY, RESOURCE_USAGE_UNKNOWN
  elseif ARGV[11] == UNKNOWN_DEFER then
    decision, reason = DEFER, RESOURCE_USAGE_UNKNOWN
  end
end
local input, est_cost = tonumber(ARGV[7]), tonumber(ARGV[8])
if decision == nil then
  local tight = nil
  for _, x in ipairs(tl) do
    if x[2] + input >= x[1] then
      if x[3] == RESOURCE_LIMIT then tight = x[3] break end
      tight = tight or x[3]
    end
  end
  if tight ~= RESOURCE_LIMIT then
    for _, x in ipairs(cl) do
      if x[2] + est_cost > x[1] then
        if x[3] == RESOURCE_LIMIT then tight = x[3] break end
        tight = tight or x[3]
      end
    end
  end
  if tight then decision, reason = DENY, tight end
end
local s = {st = STEP_CLOSED, d = '', r = reason or '', g = '0', rt = '', rc = '', tok = '0', cost = '0',
           win = '', at = fmt(now), ui = '', uo = '', uc = '', cov = '', model = ARGV[5]}
local m = ARGV[1] .. '\n' .. ARGV[2]
if decision then
  s.d, s.rt, s.rc = decision, opt(remaining(tl, 0)), opt(remaining(cl, 0))
  redis.call('HINCRBY', KEYS[5], decision == DEFER and 'deferred' or 'denied', 1)
else
  local room = remaining(tl, input)
  local granted = tonumber(ARGV[6])
  if room ~= nil and room < granted then granted = room end
  local tokens = input + granted
  s.d, s.g, s.tok, s.cost = ALLOW, fmt(granted), fmt(tokens), fmt(est_cost)
  s.rt, s.rc = opt(remaining(tl, tokens)), opt(remaining(cl, est_cost))
  redis.call('HSET', run, 'ut', fmt(ut + tokens), 'uc', fmt(uc + est_cost))
  open = open == '' and ARGV[2] or (open .. ',' .. ARGV[2])
  redis.call('HSET', run, 'open', open)
  if has_allowance then
    s.win = fmt(wstart)
    redis.call('HSET', KEYS[2], 'ut', fmt(wut + tokens), 'uc', fmt(wuc + est_cost))
  end
  s.st = STEP_RESERVED
  redis.call('ZADD', KEYS[3], now, m)
  redis.call('HINCRBY', KEYS[5], 'allowed', 1)
end
redis.call('HSET', run, 's' .. ARGV[2], pack_step(s))
keep_run(run, open, tonumber(ARGV[16]))
return {'ok', s.d, s.r, s.g, s.rt, s.rc, '0'}
