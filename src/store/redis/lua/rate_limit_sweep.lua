-- Drop the counters whose window ended from a domain's tally of live counters (the counters
-- themselves expire).
--
-- KEYS[1] the tally. ARGV[1] now (0 = Redis TIME). Returns how many were dropped.
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
return redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
