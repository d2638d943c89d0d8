//! The Lua scripts of the Redis store. Each store operation is one script, so it runs
//! atomically on the Redis server: no replica ever reads, decides in Rust and writes back.
//!
//! Time inside a script is Redis `TIME` (milliseconds), never a replica's clock, so replicas
//! with skewed clocks agree. Every script takes a last ARGV `now`: 0 in production, which means
//! Redis `TIME`; tests pass a frozen time instead, so they can let windows pass without
//! sleeping and assert exact durations. Deadlines are kept in the values; key TTLs only collect
//! garbage, so a key never outlives its meaning.

/// One attempt against an auth bucket (DESIGN.md section 5).
///
/// KEYS[1] bucket hash (`c` count, `e` window end ms), KEYS[2] lockout (its end ms).
/// ARGV[1] max_attempts, ARGV[2] window_ms, ARGV[3] lockout_ms, ARGV[4] now (0 = Redis TIME).
/// Returns {verdict, remaining, retry_after_ms}: verdict 0 allowed, 1 locked out, 2 attempts
/// exhausted (lockout 0: refused until the window ends).
///
/// A lockout replaces the window (the bucket is deleted), so the first attempt after it opens
/// a fresh window; attempts during it change nothing.
pub const AUTH_ATTEMPT: &str = r#"
local now = tonumber(ARGV[4])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local max, window, lockout = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local locked = tonumber(redis.call('GET', KEYS[2]) or '0')
if locked > now then
  return {1, 0, locked - now}
end
local b = redis.call('HMGET', KEYS[1], 'c', 'e')
local count, wend = tonumber(b[1] or '0'), tonumber(b[2] or '0')
if wend <= now then
  redis.call('HSET', KEYS[1], 'c', 1, 'e', now + window)
  redis.call('PEXPIRE', KEYS[1], window)
  return {0, max - 1, 0}
end
if count < max then
  redis.call('HINCRBY', KEYS[1], 'c', 1)
  return {0, max - count - 1, 0}
end
if lockout > 0 then
  redis.call('SET', KEYS[2], now + lockout, 'PX', lockout)
  redis.call('DEL', KEYS[1])
  return {1, 0, lockout}
end
return {2, 0, wend - now}
"#;

/// Clear an auth bucket and its lockout.
///
/// KEYS[1] bucket, KEYS[2] lockout. ARGV[1] now (0 = Redis TIME).
/// Returns {existed, was_locked}: whether a live window or lockout was cleared.
pub const AUTH_RESET: &str = r#"
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local locked = tonumber(redis.call('GET', KEYS[2]) or '0')
local wend = tonumber(redis.call('HGET', KEYS[1], 'e') or '0')
redis.call('DEL', KEYS[1], KEYS[2])
local was_locked = locked > now and 1 or 0
local existed = (was_locked == 1 or wend > now) and 1 or 0
return {existed, was_locked}
"#;
