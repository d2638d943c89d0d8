-- Settle one step: replace its reservation with the reported usage, exactly once.
--
-- KEYS[1] the run's hash, KEYS[2] reserved index, KEYS[3] uncertain index, KEYS[4] stats.
-- ARGV[1] run_id, ARGV[2] step, ARGV[3] input tokens, ARGV[4] output tokens, ARGV[5] cost
-- (micro-dollars), ARGV[6] coverage (C complete, P partial, U unknown), ARGV[7] window key
-- prefix, ARGV[8] reservation_ttl ms, ARGV[9] run_retention ms, ARGV[10] run key prefix,
-- ARGV[11] now (0 = Redis TIME). The run's account and allowance window (recorded by
-- Authorize) name its window key, which shares the host's hash tag.
-- Returns {'ok'}, {'replay'}, {'not_authorized'}, {'conflict'} or {'resolved'}.
local now = now_of(ARGV[11])
local run, step = KEYS[1], tonumber(ARGV[2])
housekeeping(now, tonumber(ARGV[8]), ARGV[10], KEYS[2], KEYS[3])
local raw = redis.call('HGET', run, 's' .. ARGV[2])
if not raw then return {'not_authorized'} end
local s = unpack_step(raw)
if s.st == STEP_SETTLED then
  if s.ui == ARGV[3] and s.uo == ARGV[4] and s.uc == ARGV[5] and s.cov == ARGV[6] then
    return {'replay'}
  end
  return {'conflict'}
end
if s.st == STEP_CONSUMED or s.st == STEP_RELEASED then return {'resolved'} end
local r = redis.call('HMGET', run, 'ut', 'uc', 'partial', 'open', 'account', 'aw')
local ut, uc, partial, open = tonumber(r[1]), tonumber(r[2]), tonumber(r[3]), r[4] or ''
local rt, rcost = 0, 0
local m = ARGV[1] .. '\n' .. ARGV[2]
if s.st == STEP_RESERVED or s.st == STEP_UNCERTAIN then
  rt, rcost = tonumber(s.tok), tonumber(s.cost)
  open = open_remove(open, step)
  redis.call('ZREM', s.st == STEP_RESERVED and KEYS[2] or KEYS[3], m)
end
local used_t = tonumber(ARGV[3]) + tonumber(ARGV[4])
local used_c = tonumber(ARGV[5])
ut = math.max(ut - rt, 0) + used_t
uc = math.max(uc - rcost, 0) + used_c
if ARGV[6] ~= COVERAGE_COMPLETE then partial = partial + 1 end
redis.call('HSET', run, 'ut', fmt(ut), 'uc', fmt(uc), 'partial', partial, 'open', open)
if r[6] and r[6] ~= '' then
  local wkey = ARGV[7] .. r[5]
  local wstart, wut, wuc = current_window(wkey, tonumber(r[6]), now)
  if s.win == '' or tonumber(s.win) == wstart then
    redis.call('HSET', wkey, 'ut', fmt(math.max(wut - rt, 0) + used_t),
               'uc', fmt(math.max(wuc - rcost, 0) + used_c))
  end
end
s.st, s.ui, s.uo, s.uc, s.cov = STEP_SETTLED, ARGV[3], ARGV[4], ARGV[5], ARGV[6]
redis.call('HSET', run, 's' .. ARGV[2], pack_step(s))
redis.call('HINCRBY', KEYS[4], 'settled', 1)
keep_run(run, open, tonumber(ARGV[9]))
return {'ok'}
