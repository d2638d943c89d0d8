-- Re-register a ticket its holder still runs (scheduler::HostState::reclaim). ARGV[5] ticket
-- key, ARGV[6] instance, ARGV[7] subject, ARGV[8] account ('' none), ARGV[9] run_id,
-- ARGV[10] grant (> 0), ARGV[11] priority (1..5), ARGV[12] its key ('' none; absent from
-- replicas before keys), ARGV[13] the key's policy code.
-- Returns {'ok', 1 re-created or 0 still held, state, position, grant, lease, eta, blocker},
-- with 'rollback' after it when the Reclaim showed that the host's state went back, or
-- {'refused', TICKET_ENDED | RUN_ID_TAKEN | TICKET_MISMATCH, the ticket's state ('' none)}.
--
-- A rollback (a failover to a replica that missed the last writes, a restore of an older
-- snapshot) leaves the host's counters in place, so no epoch tells it. Its evidence is a
-- holder that re-registers a ticket the host has no trace of, though its grant was issued
-- within the retention (grants are the scripts' clock in µs, at least) while the host forgot
-- no ended ticket early: a consistent host remembers every ticket it admitted that recently,
-- live or ended and retained. The host then enters its learning window at once, as after a
-- state loss: no new admission for one lease plus the renew interval, while its holders
-- re-register.
housekeeping(false)
local key, inst, subject, account, run = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local grant = tonumber(ARGV[10])
local t = ticket(key)
local function answer(again)
  local v = view(key)
  return {'ok', again, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]}
end
if t and live(t.state) then
  if t.run ~= run then return {'refused', 'TICKET_MISMATCH', t.state} end
  set_lease(key, now + L.lease)
  return answer(0)
end
local holder = redis.call('GET', runkey(run))
if holder and holder ~= key and ticket(holder) then return {'refused', 'RUN_ID_TAKEN', ''} end
local rolled = false
if not t then
  local c = redis.call('HMGET', C, 'ep', 'lu')
  if c[1] and num(c[2]) <= now and now_us - grant < L.retention * 1000
      and redis.call('LLEN', B .. 'ended') < L.max_retained then
    rolled = true
    redis.call('HSET', C, 'lu', fmt(now + L.lease + math.floor(L.lease / 3)))
  end
end
if t then
  -- Only a ticket that expired holding this very grant comes back; no longer remembered as
  -- ended (the trim of `ended` must not forget it later), and its keys no longer expire.
  if t.state ~= EXPIRED or t.grant == 0 or t.grant ~= grant then
    return {'refused', 'TICKET_ENDED', t.state}
  end
  redis.call('LREM', B .. 'ended', 1, key)
  redis.call('PERSIST', tkey(key))
end
-- It comes back without its key (a Reclaim names none), also from the fields of a ticket
-- forgotten but not yet expired.
redis.call('HDEL', tkey(key), 'key', 'kseq', 'ready', 'burst', 'sby')
redis.call('SET', runkey(run), key)
admit_new(key, subject, account, inst, run, grant, ARGV[11])
-- It holds its key again (above a serial key's one holder if need be, as above the caps).
if (ARGV[12] or '') ~= '' then
  key_join(key, ARGV[12], ARGV[13])
  key_hold(ARGV[12], 1)
end
if grant > cnt('grant') then redis.call('HSET', C, 'grant', fmt(grant)) end
incr('in_flight')
incr('reclaimed')
hincr(C, sf(subject), 1)
if account ~= '' then hincr(AF, account, 1) end
changed(key)
local out = answer(1)
if rolled then table.insert(out, 'rollback') end
return out
