-- An operator's resolution of an uncertain reservation.
--
-- KEYS as for settle. ARGV[1] run_id, ARGV[2] step, ARGV[3] resolution (X consumed,
-- Y released), ARGV[4] window key prefix, ARGV[5] reservation_ttl ms, ARGV[6] run_retention
-- ms, ARGV[7] run key prefix, ARGV[8] now (0 = Redis TIME).
-- Returns {'ok'}, {'no_such'} or {'not_uncertain', state}.
local now = now_of(ARGV[8])
local run, step = KEYS[1], tonumber(ARGV[2])
housekeeping(now, tonumber(ARGV[5]), ARGV[7], KEYS[2], KEYS[3])
local raw = redis.call('HGET', run, 's' .. ARGV[2])
if not raw then return {'no_such'} end
local s = unpack_step(raw)
if s.st ~= STEP_UNCERTAIN then return {'not_uncertain', s.st} end
local r = redis.call('HMGET', run, 'ut', 'uc', 'open', 'account')
local open = open_remove(r[3] or '', step)
redis.call('ZREM', KEYS[3], ARGV[1] .. '\n' .. ARGV[2])
if ARGV[3] == STEP_RELEASED then
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
