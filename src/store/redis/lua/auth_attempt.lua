-- One attempt against an auth bucket, as a function: the single script (its call below the
-- function, see scripts.rs) and the batch (auth_batch_body.lua) share it.
--
-- kb the bucket hash (`c` count, `e` window end ms), kl the lockout (its end ms); max,
-- window, lockout the rule (numbers, ms); now in ms. Returns {verdict, remaining,
-- retry_after_ms}: verdict ALLOWED, LOCKED_OUT or ATTEMPTS_EXHAUSTED (lockout 0: refused until
-- the window ends), from the constants prelude.
--
-- A lockout replaces the window (the bucket is deleted), so the first attempt after it opens
-- a fresh window; attempts during it change nothing.
local function auth_attempt(kb, kl, max, window, lockout, now)
  local locked = tonumber(redis.call('GET', kl) or '0')
  if locked > now then
    return {LOCKED_OUT, 0, locked - now}
  end
  local b = redis.call('HMGET', kb, 'c', 'e')
  local count, wend = tonumber(b[1] or '0'), tonumber(b[2] or '0')
  if wend <= now then
    redis.call('HSET', kb, 'c', 1, 'e', now + window)
    redis.call('PEXPIRE', kb, window)
    return {ALLOWED, max - 1, 0}
  end
  if count < max then
    redis.call('HINCRBY', kb, 'c', 1)
    return {ALLOWED, max - count - 1, 0}
  end
  if lockout > 0 then
    redis.call('SET', kl, now + lockout, 'PX', lockout)
    redis.call('DEL', kb)
    return {LOCKED_OUT, 0, lockout}
  end
  return {ATTEMPTS_EXHAUSTED, 0, wend - now}
end
