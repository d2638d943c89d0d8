-- Housekeeping, then the host's gauges, counters and rows.
-- Returns {in_flight, queued, parked, submitted, admitted, rejected, released, cancelled,
-- shed, expired, reported_rss, n_subjects, (subject, in_flight, queued) x n, n_accounts,
-- (account, in_flight, queued, cap (-1 none)) x n, queue-wait buckets and sum, shadow
-- decisions (QUEUED, BUSY, QUEUE_FULL, MEMORY_PRESSURE), mean hold, outcomes (ok,
-- rate_limited, overloaded, failed), latency sum and count, tickets reclaimed, the ms left
-- of a learning window (0 none), tickets superseded, Submits refused KEY_BUSY, refusals BUSY,
-- QUEUE_FULL and MEMORY_PRESSURE, the limits of record}.
housekeeping(false)
local out = {}
for _, f in ipairs({'in_flight', 'queued', 'parked', 'submitted', 'admitted', 'rejected',
                    'released', 'cancelled', 'shed', 'expired'}) do
  table.insert(out, cnt(f))
end
local rss = 0
for _, inst in ipairs(redis.call('HKEYS', RSS)) do
  local mb = rss_of(inst)
  if mb and mb > rss then rss = mb end
end
table.insert(out, rss)
local subjects, seen = {}, {}
local accounts, aseen = {}, {}
for _, f in ipairs(redis.call('HKEYS', C)) do
  if string.sub(f, 1, 2) == 's:' then
    local s = string.sub(f, 3)
    seen[s] = true; table.insert(subjects, s)
  elseif string.sub(f, 1, 2) == 'a:' then
    local a = string.sub(f, 3)
    aseen[a] = true; table.insert(accounts, a)
  end
end
for p = 1, LEVELS do
  for _, s in ipairs(redis.call('LRANGE', (lvl_keys(p)), 0, -1)) do
    if not seen[s] then seen[s] = true; table.insert(subjects, s) end
  end
end
local rows = {}
for _, s in ipairs(subjects) do
  local f, q = num(redis.call('HGET', C, sf(s))), redis.call('ZCARD', qkey(s))
  if f > 0 or q > 0 then
    table.insert(rows, s); table.insert(rows, f); table.insert(rows, q)
  end
end
table.insert(out, #rows / 3)
for _, v in ipairs(rows) do table.insert(out, v) end
-- Accounts with live tickets, and those whose adaptive cap moved from its start.
for _, h in ipairs({AF, AQ}) do
  for _, a in ipairs(redis.call('HKEYS', h)) do
    if not aseen[a] then aseen[a] = true; table.insert(accounts, a) end
  end
end
rows = {}
for _, a in ipairs(accounts) do
  local f, q = num(redis.call('HGET', AF, a)), num(redis.call('HGET', AQ, a))
  local moved = adaptive_of(a) ~= nil and redis.call('HEXISTS', C, 'a:' .. a) == 1
  if f > 0 or q > 0 or moved then
    table.insert(rows, a); table.insert(rows, f); table.insert(rows, q)
    table.insert(rows, account_cap(a) or -1)
  end
end
table.insert(out, #rows / 4)
for _, v in ipairs(rows) do table.insert(out, v) end
for i = 0, #QW_BOUNDS do table.insert(out, num(redis.call('HGET', QW, 'b' .. i))) end
table.insert(out, num(redis.call('HGET', QW, 'sum')))
for _, r in ipairs({SHADOW_QUEUED, BUSY, QUEUE_FULL, MEMORY_PRESSURE}) do
  table.insert(out, cnt('sh:' .. r))
end
table.insert(out, cnt('hold'))
for _, o in ipairs({'ok', 'rate_limited', 'overloaded', 'failed'}) do
  table.insert(out, cnt('o:' .. o))
end
table.insert(out, cnt('lat_sum'))
table.insert(out, cnt('lat_n'))
table.insert(out, cnt('reclaimed'))
table.insert(out, math.max(cnt('lu') - now, 0))
table.insert(out, cnt('superseded'))
table.insert(out, cnt('key_refused'))
for _, r in ipairs({BUSY, QUEUE_FULL, MEMORY_PRESSURE}) do table.insert(out, cnt('r:' .. r)) end
append_limits(out)
return out
