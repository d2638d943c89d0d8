-- Drop the counters whose window ended from a domain's tally of live counters (the counters
-- themselves expire).
--
-- KEYS[1] the tally. ARGV[1] now (0 = Redis TIME). Returns how many were dropped.
local now = now_of(ARGV[1])
return redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
