-- The live counters of one domain, for the hottest list.
--
-- KEYS[1] the domain's tally of live counters (see rate_limit_hits.lua).
-- ARGV[1] the most to read, ARGV[2] now (0 = Redis TIME).
-- Returns {counter key, window start s, count, ...} of the first ARGV[1] live counters.
local now = now_of(ARGV[2])
local keys = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', 0, tonumber(ARGV[1]))
local out = {}
for _, k in ipairs(keys) do
  local v = redis.call('GET', k)
  if v then
    local sep = string.find(v, ':', 1, true)
    out[#out + 1] = k
    out[#out + 1] = tonumber(string.sub(v, 1, sep - 1))
    out[#out + 1] = tonumber(string.sub(v, sep + 1))
  end
end
return out
