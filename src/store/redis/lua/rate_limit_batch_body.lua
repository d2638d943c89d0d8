-- Several ShouldRateLimits of one domain in one call (the rate limit batcher's: see
-- rate_limit_batch.rs), each applied as the single script applies one, in order.
--
-- KEYS[1] the domain's tally, then each request's counters in turn. ARGV[1] the domain's max
-- live counters, ARGV[2] the number of requests, then per request: its now (0 = Redis TIME),
-- its number of hits n, and its n pairs of unit in seconds and hits.
-- Returns, flat, each request's now ms and count after each hit, request after request.
local max, out, time_now = tonumber(ARGV[1]), {}, nil
local k0, a = 1, 3
for r = 1, tonumber(ARGV[2]) do
  local now = tonumber(ARGV[a])
  if now == 0 then
    time_now = time_now or now_of('0')
    now = time_now
  end
  local n = tonumber(ARGV[a + 1])
  rate_limit_hits(out, KEYS[1], k0, n, a + 1, max, now)
  k0, a = k0 + n, a + 2 + 2 * n
end
return out
