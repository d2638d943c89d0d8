-- Clear an auth bucket and its lockout.
--
-- KEYS[1] bucket, KEYS[2] lockout. ARGV[1] now (0 = Redis TIME).
-- Returns {existed, was_locked}: whether a live window or lockout was cleared.
local now = now_of(ARGV[1])
local locked = tonumber(redis.call('GET', KEYS[2]) or '0')
local wend = tonumber(redis.call('HGET', KEYS[1], 'e') or '0')
redis.call('DEL', KEYS[1], KEYS[2])
local was_locked = locked > now and 1 or 0
local existed = (was_locked == 1 or wend > now) and 1 or 0
return {existed, was_locked}
