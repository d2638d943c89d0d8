-- The prelude of every ledger script: `now`, number formatting, the step record codec, and
-- the housekeeping that turns reserved steps past their TTL uncertain.
--
-- A step is one field `s<step>` of its run's hash, packed as
-- `state|decision|reason|granted|remaining_tokens|remaining_cost|tokens|cost|window|at|
-- input|output|usage_cost|coverage|model` (numbers as integers, `''` for none; the model last,
-- as it may hold `|`). States: R reserved, U uncertain, S settled, X resolved consumed,
-- Y resolved released, C closed (denied or deferred). Reserved and uncertain steps are indexed
-- in the host's `reserved` and `uncertain` sorted sets (member `<run_id>\n<step>`, score the
-- time they were authorized).
--
-- Expects `now_arg`, `ttl` (reservation_ttl ms), `run_prefix` (key prefix of run hashes),
-- `k_reserved`, `k_uncertain`, `k_stats` to be set by the script body.
local function fmt(x) return string.format('%.0f', x) end
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
      s.st = STEP_UNCERTAIN
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
