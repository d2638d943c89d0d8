-- One ShouldRateLimit's hits on a domain's counters, in order, as a function: the single
-- script (its call in scripts.rs) and the batch (rate_limit_batch_body.lua) share it.
--
-- tally the domain's tally of live counters (sorted set: counter key -> its window's end ms);
-- the counters are KEYS[k0 + 1 .. k0 + n] (string `<window start s>:<count>`), one per hit;
-- hit j's unit in seconds is ARGV[u0 + 2j - 1] and its hits ARGV[u0 + 2j] (0 only looks);
-- max the domain's max live counters; now in ms.
-- Returns {now ms, count after each hit...}, a count of -1 when the hit needed a new counter
-- and the domain holds its max live ones (nothing counted).
--
-- Windows are aligned to the Unix epoch: a unit of d seconds starts at now_s - now_s % d. A
-- counter of an earlier window counts from zero: in its place when the tally still holds it,
-- else as a new counter (as the embedded store's table, which drops what the tally drops).
-- A counter's TTL and its tally entry only collect garbage (the window start in the value
-- decides); a look never makes a counter.
local function rate_limit_hits(tally, k0, n, u0, max, now)
  local now_s = math.floor(now / 1000)
  local out = {now}
  local live = nil
  -- Put a counter in the tally until `finish`, which lives at least as long as its counters.
  local function track(key, finish)
    redis.call('ZADD', tally, finish, key)
    local ttl = redis.call('PTTL', tally)
    if ttl >= 0 and ttl < finish - now then
      redis.call('PEXPIRE', tally, finish - now)
    end
  end
  for j = 1, n do
    local key = KEYS[k0 + j]
    local div, add = tonumber(ARGV[u0 + 2 * j - 1]), tonumber(ARGV[u0 + 2 * j])
    local start = now_s - now_s % div
    local finish = (start + div) * 1000
    local v = redis.call('GET', key)
    local count = nil
    if v then
      local sep = string.find(v, ':', 1, true)
      if tonumber(string.sub(v, 1, sep - 1)) == start then
        count = tonumber(string.sub(v, sep + 1))
      elseif redis.call('ZSCORE', tally, key) then
        -- Its window ended and it is still in the tally: a look sees zero, a hit starts it
        -- again in this window in the place it holds.
        count = 0
        if add > 0 then
          track(key, finish)
        end
      end
    end
    if count == nil and add > 0 then
      live = live or redis.call('ZCARD', tally)
      if live >= max then
        redis.call('ZREMRANGEBYSCORE', tally, '-inf', now)
        live = redis.call('ZCARD', tally)
      end
      if live < max then
        live = live + 1
        count = 0
        track(key, finish)
      end
    end
    if count == nil then
      out[#out + 1] = (add > 0) and -1 or 0
    else
      count = count + add
      if add > 0 then
        redis.call('SET', key, string.format('%d:%d', start, count), 'PX', finish - now)
      end
      out[#out + 1] = count
    end
  end
  return out
end
