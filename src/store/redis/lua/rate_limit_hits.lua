-- One ShouldRateLimit's hits on a domain's counters, in order, as a function: the single
-- script (its call in scripts.rs) and the batch (rate_limit_batch_body.lua) share it.
--
-- out the table the answer is appended to; tally the domain's tally of live counters (sorted
-- set: counter key -> its window's end ms);
-- the counters are KEYS[k0 + 1 .. k0 + n] (string `<window start s>:<count>`), one per hit;
-- hit j's unit in seconds is ARGV[u0 + 2j - 1] and its hits ARGV[u0 + 2j] (0 only looks; a
-- negative number subtracts, from a counter of the current window only, never below zero,
-- and never makes a counter);
-- max the domain's max live counters; now in ms.
-- Appends now ms, then the count after each hit, to out: a count of -1 when the hit needed a
-- new counter and the domain holds its max live ones (nothing counted).
--
-- Windows are aligned to the Unix epoch: a unit of d seconds starts at now_s - now_s % d. A
-- counter of an earlier window counts from zero: in its place when the tally still holds it,
-- else as a new counter (as the embedded store's table, which drops what the tally drops).
-- A counter's TTL and its tally entry only collect garbage (the window start in the value
-- decides); a look never makes a counter.
--
-- What a hit costs Redis is mostly the script around its GET and SET, so: a window's strings
-- are made once per now (a batch shares one), a counter in its window keeps its TTL, and the
-- answers go in one flat table.

-- The window of a unit of `div` seconds at `now` ms: its start (s), its end (ms), the
-- counter value's prefix in it and its TTL from now (ms), made once per (div, now).
local rl_windows, rl_windows_now = {}, nil
local function rl_window(div, now)
  if rl_windows_now ~= now then
    rl_windows, rl_windows_now = {}, now
  end
  local w = rl_windows[div]
  if not w then
    local now_s = math.floor(now / 1000)
    local start = now_s - now_s % div
    local finish = (start + div) * 1000
    w = {start = start, finish = finish, prefix = string.format('%d:', start),
         px = string.format('%d', finish - now)}
    rl_windows[div] = w
  end
  return w
end

-- Put counter `key` in the tally until `finish`; the tally lives as long as its longest
-- lived counter (a new tally has no TTL yet: PTTL -1).
local function rl_track(tally, key, finish, now)
  redis.call('ZADD', tally, finish, key)
  local ttl = redis.call('PTTL', tally)
  if ttl < finish - now then
    redis.call('PEXPIRE', tally, finish - now)
  end
end

local function rate_limit_hits(out, tally, k0, n, u0, max, now)
  out[#out + 1] = now
  local live = nil
  for j = 1, n do
    local key = KEYS[k0 + j]
    local add = tonumber(ARGV[u0 + 2 * j])
    local w = rl_window(tonumber(ARGV[u0 + 2 * j - 1]), now)
    local v = redis.call('GET', key)
    local count, same = nil, false
    if v then
      local p = w.prefix
      if string.sub(v, 1, #p) == p then
        count, same = tonumber(string.sub(v, #p + 1)), true
      elseif redis.call('ZSCORE', tally, key) then
        -- Its window ended and it is still in the tally: a look sees zero, a hit starts it
        -- again in this window in the place it holds.
        count = 0
        if add > 0 then
          rl_track(tally, key, w.finish, now)
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
        rl_track(tally, key, w.finish, now)
      end
    end
    if count == nil then
      out[#out + 1] = (add > 0) and -1 or 0
    elseif add < 0 then
      if same then
        count = math.max(count + add, 0)
        redis.call('SET', key, w.prefix .. count, 'KEEPTTL')
      end
      out[#out + 1] = count
    else
      count = count + add
      if add > 0 then
        if same then
          redis.call('SET', key, w.prefix .. count, 'KEEPTTL')
        else
          redis.call('SET', key, w.prefix .. count, 'PX', w.px)
        end
      end
      out[#out + 1] = count
    end
  end
end
