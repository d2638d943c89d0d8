-- One attempt against an auth bucket.
--
-- KEYS[1] bucket hash (`c` count, `e` window end ms), KEYS[2] lockout (its end ms).
-- ARGV[1] max_attempts, ARGV[2] window_ms, ARGV[3] lockout_ms, ARGV[4] now (0 = Redis TIME).
-- Returns {verdict, remaining, retry_after_ms}: verdict ALLOWED, LOCKED_OUT or
-- ATTEMPTS_EXHAUSTED (lockout 0: refused until the window ends), from the constants prelude.
--
-- A lockout replaces the window (the bucket is deleted), so the first attempt after it opens
-- a fresh window; attempts during it change nothing.
local now = tonumber(ARGV[4])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local max, window, lockout = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local locked = tonumber(redis.call('GET', KEYS[2]) or '0')
if locked > now then
  return {LOCKED_OUT, 0, locked - now}
end
local b = redis.call('HMGET', KEYS[1], 'c', 'e')
local count, wend = tonumber(b[1] or '0'), tonumber(b[2] or '0')
if wend <= now then
  redis.call('HSET', KEYS[1], 'c', 1, 'e', now + window)
  redis.call('PEXPIRE', KEYS[1], window)
  return {ALLOWED, max - 1, 0}
end
if count < max then
  redis.call('HINCRBY', KEYS[1], 'c', 1)
  return {ALLOWED, max - count - 1, 0}
end
if lockout > 0 then
  redis.call('SET', KEYS[2], now + lockout, 'PX', lockout)
  redis.call('DEL', KEYS[1])
  return {LOCKED_OUT, 0, lockout}
end
return {ATTEMPTS_EXHAUSTED, 0, wend - now}
