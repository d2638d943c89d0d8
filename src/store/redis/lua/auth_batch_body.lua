-- Several attempts, each against its own bucket, in one call (the auth batcher's: see
-- auth_batch.rs), applied in order as the single script applies one.
--
-- KEYS: each attempt's bucket and lockout in turn (2 per attempt). ARGV: each attempt's
-- max_attempts, window_ms, lockout_ms and now (0 = Redis TIME) in turn (4 per attempt).
-- Returns one {verdict, remaining, retry_after_ms} per attempt, in order.
local out, time_now = {}, nil
for i = 1, #KEYS / 2 do
  local a = (i - 1) * 4
  local now = tonumber(ARGV[a + 4])
  if now == 0 then
    time_now = time_now or now_of('0')
    now = time_now
  end
  out[i] = auth_attempt(KEYS[2 * i - 1], KEYS[2 * i], tonumber(ARGV[a + 1]),
                        tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), now)
end
return out
