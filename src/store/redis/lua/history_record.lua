-- Keep a host's history sample: KEYS[1] its history (a sorted set: bucket number ->
-- `<at ms> <counts>`); ARGV[1] the bucket width in ms, ARGV[2] the buckets kept, ARGV[3] the
-- counts as history::Counts::encode writes them, ARGV[4] now (0 = Redis TIME).
-- The bucket is Redis' time's, so every replica counts the same buckets, and the first
-- replica's sample of a bucket is the one kept. Returns 1 when this one was kept, else 0.
local now = now_of(ARGV[4])
local width, keep = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = math.floor(now / width)
local kept = 0
if redis.call('ZCOUNT', KEYS[1], b, b) == 0 then
  redis.call('ZADD', KEYS[1], b, string.format('%d %s', now, ARGV[3]))
  kept = 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', b - keep))
redis.call('PEXPIRE', KEYS[1], width * (keep + 2))
return kept
