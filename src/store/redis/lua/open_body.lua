-- Housekeeping alone (the periodic sweep), and the host's open reservations for listing:
-- uncertain ones first, then reserved ones, oldest first within each, at most ARGV[3] + 1.
--
-- KEYS[1] reserved index, KEYS[2] uncertain index. ARGV[1] reservation_ttl ms, ARGV[2] run
-- key prefix, ARGV[3] limit (0 = housekeeping only), ARGV[4] now (0 = Redis TIME).
-- Returns {now, uncertain count, reserved count, then per listed step: run_id, step, state,
-- subject, account, model, tokens, cost, authorized_at}.
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
