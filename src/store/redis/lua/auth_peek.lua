-- Read an auth bucket without counting (CheckAuthAttempt with `peek`).
--
-- KEYS[1] bucket hash, KEYS[2] lockout. ARGV[1] now (0 = Redis TIME).
-- Returns {lockout_left_ms, count, window_left_ms}: 0 for a lockout or window that is over.
local now = now_of(ARGV[1])
local locked = tonumber(redis.call('GET', KEYS[2]) or '0')
local b = redis.call('HMGET', KEYS[1], 'c', 'e')
local wend = tonumber(b[2] or '0')
return {math.max(locked - now, 0), tonumber(b[1] or '0'), math.max(wend - now, 0)}
