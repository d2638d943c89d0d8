-- One ShouldRateLimit's hits on a domain's counters, in order, atomically.
--
-- KEYS[1] the domain's tally of live counters (sorted set: counter key -> its window's end
-- ms), KEYS[2..] the counters (string `<window start s>:<count>`), one per hit.
-- ARGV[1] max live counters of the domain, then per hit its unit in seconds and its hits
-- (0 only looks), last ARGV now (0 = Redis TIME).
-- Returns {now ms, count after each hit...}, a count of -1 when the hit needed a new counter
-- and the domain holds its max live ones (nothing counted).
--
-- Windows are aligned to the Unix epoch: a unit of d seconds starts at now_s - now_s % d. A
-- counter of an earlier window counts from zero: in its place when the tally still holds it,
-- else as a new counter (as the embedded store's table, which drops what the tally drops).
-- A counter's TTL and its tally entry only collect garbage (the window start in the value
-- decides); a look never makes a counter.
local now = tonumber(ARGV[#ARGV])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local now_s = math.floor(now / 1000)
local max = tonumber(ARGV[1])
local out = {now}
local live = nil
-- Put a counter in the tally until `finish`, which lives at least as long as its counters.
local function track(key, finish)
  redis.call('ZADD', KEYS[1], finish, key)
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl >= 0 and ttl < finish - now then
    redis.call('PEXPIRE', KEYS[1], finish - now)
  end
end
for i = 2, #KEYS do
  local div, add = tonumber(ARGV[2 * i - 2]), tonumber(ARGV[2 * i - 1])
  local start = now_s - now_s % div
  local finish = (start + div) * 1000
  local v = redis.call('GET', KEYS[i])
  local count = nil
  if v then
    local sep = string.find(v, ':', 1, true)
    if tonumber(string.sub(v, 1, sep - 1)) == start then
      count = tonumber(string.sub(v, sep + 1))
    elseif redis.call('ZSCORE', KEYS[1], KEYS[i]) then
      -- Its window ended and it is still in the tally: a look sees zero, a hit starts it
      -- again in this window in the place it holds.
      count = 0
      if add > 0 then
        track(KEYS[i], finish)
      end
    end
  end
  if count == nil and add > 0 then
    live = live or redis.call('ZCARD', KEYS[1])
    if live >= max then
      redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
      live = redis.call('ZCARD', KEYS[1])
    end
    if live < max then
      live = live + 1
      count = 0
      track(KEYS[i], finish)
    end
  end
  if count == nil then
    out[#out + 1] = (add > 0) and -1 or 0
  else
    count = count + add
    if add > 0 then
      redis.call('SET', KEYS[i], string.format('%d:%d', start, count), 'PX', finish - now)
    end
    out[#out + 1] = count
  end
end
return out
