-- Submit a ticket. ARGV[5] ticket key (32 hex digits, fresh), ARGV[6] instance, ARGV[7]
-- subject, ARGV[8] account ('' none), ARGV[9] run_id, ARGV[10] mode (Q queue, T try),
-- ARGV[11] rss_mb ('' none), ARGV[12] priority (1..5), ARGV[13] the state epoch the caller
-- knows, ARGV[14] '' or how to begin the host under that epoch: when its loss was detected
-- (ms; '0' none, 'now' this call), ARGV[15] '1' when the run's ticket lapsed before the run
-- started (resubmit_expired: an EXPIRED ticket of the run does not answer for it), ARGV[16]
-- the ticket's key ('' none; absent from replicas before keys), ARGV[17] its policy code,
-- ARGV[18] '1' to tell the key's holders (supersede_running), ARGV[19] debounce ms,
-- ARGV[20] debounce_max ms (scheduler::keys).
-- Returns {'ok', key, state, position, grant, lease, eta, blocker ('' none), superseded_by
-- ('' none), debounce left (ms), shadow decision ('' none)},
-- {'refused', reason, ms left of a learning window ('' none)}, {'conflict', field},
-- {'key_policy', the key's policy} or {'key_busy', the ticket holding the key}, or
-- {'epoch', the host's epoch ('' none)} when the host is not of the caller's epoch and no
-- way to begin it was given (nothing changed: the caller learns the store's epoch and calls
-- again). The key is not checked for a collision: it is 128 random bits, and finding a taken
-- one is as likely as guessing one.
--
-- A host begun under an epoch whose loss is recent is in a learning window for one lease
-- plus the clients' renew interval (a third of the lease) after that loss (`lu`, its end):
-- meanwhile no Submit is admitted (holders are re-registering with Reclaim), and dispatch
-- waits for its end (ticket_helpers.lua).
local e = redis.call('HMGET', C, 'ep', 'lu')
if e[1] ~= EPOCH then
  if EPOCH_INIT == '' then return {'epoch', e[1] or ''} end
  redis.call('HSET', C, 'ep', EPOCH)
  local lost = EPOCH_INIT == 'now' and now or num(EPOCH_INIT)
  local ends = lost + L.lease + math.floor(L.lease / 3)
  if lost > 0 and ends > now then
    e[2] = fmt(ends)
    redis.call('HSET', C, 'lu', e[2])
  end
end
local learning_left = math.max(num(e[2]) - now, 0)
housekeeping(false)
local key, inst, subject, account, run = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
-- Claim the run_id for the new ticket in one command; a refusal below gives it back.
local existing = redis.call('SET', runkey(run), key, 'NX', 'GET')
-- The run's expired ticket a resubmit_expired Submit replaces, and how long its run key had
-- left: a refusal gives the run back to it. The new ticket takes the place among its key's
-- tickets its run first had (scheduler::keys).
local lapsed, lapsed_ttl, place = nil, nil, 0
if existing then
  local t = ticket(existing)
  if t and ARGV[15] == '1' and t.state == EXPIRED then
    lapsed, lapsed_ttl, place = existing, redis.call('PTTL', runkey(run)), t.kseq
  elseif t then
    -- An ended ticket keeps no subject or account: a repeat gets its final state.
    if live(t.state) and t.subject ~= subject then return {'conflict', 'subject'} end
    if live(t.state) and t.account ~= account then return {'conflict', 'account_id'} end
    local v = view(existing)
    return {'ok', existing, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], ''}
  end
  redis.call('SET', runkey(run), key)
end
-- Give the run_id back (a refusal).
local function unclaim()
  if lapsed then
    redis.call('SET', runkey(run), lapsed)
    if lapsed_ttl > 0 then redis.call('PEXPIRE', runkey(run), lapsed_ttl) end
  else
    redis.call('DEL', runkey(run))
  end
end
local function refuse(reason)
  unclaim()
  incr('rejected')
  incr('r:' .. reason)
  note_end('', '', run, subject, account, inst, ARGV[16] or '', '', reason)
  return {'refused', reason, learning_left > 0 and fmt(learning_left) or ''}
end
local shadow = L.mode == MODE_SHADOW
-- A key that refuses the Submit refuses it before anything else changes; in shadow mode a key
-- only labels (scheduler::keys::key_gate).
local kname, kpol = ARGV[16] or '', ARGV[17] or ''
if kname ~= '' and not shadow then
  local live_policy = key_meta(kname)
  if live_policy and live_policy ~= kpol then
    unclaim()
    return {'key_policy', live_policy}
  end
  if live_policy == KP_REJECT_NEW then
    unclaim()
    incr('rejected')
    incr('key_refused')
    note_end('', '', run, subject, account, inst, kname, '', 'KEY_BUSY')
    return {'key_busy', redis.call('ZRANGE', kkey(kname), 0, 0)[1]}
  end
end
local rss = tonumber(ARGV[11])
if rss then report_rss(inst, rss) end
local prio = tonumber(ARGV[12])
if not shadow and L.max_rss > 0 and rss and rss >= L.max_rss then
  return refuse(MEMORY_PRESSURE)
end
dispatch()
local c = redis.call('HMGET', C, 'grant', 'in_flight', 'submitted', 'admitted', sf(subject))
local eligible = learning_left == 0 and (not instance_soft(inst)) and num(c[2]) < L.total
  and num(c[5]) < subject_cap(subject) and account_has_room(account)
-- A keep-newest ticket ends its key's waiters once it is accepted; a debounced one waits
-- until its burst is quiet; a serial key's holder (or its waiters ahead) holds a new one.
local waiters, since, ready = {}, nil, nil
local ended_before = cnt('shed') + cnt('superseded')
if kname ~= '' and not shadow then
  -- Sent before a live ticket of its key (keep-newest): the newest supersedes it at once,
  -- and it takes nothing (scheduler::keys::superseded_at_submit).
  local newest = place > 0 and keeps_newest(kpol)
    and redis.call('ZREVRANGEBYSCORE', kkey(kname), '+inf', '(' .. fmt(place), 'LIMIT', 0, 1)[1]
  if newest then
    redis.call('HSET', tkey(key), 'run', run, 'grant', 0, 'lvl', ARGV[12], 'key', kname,
               'kseq', fmt(place), 'sby', newest)
    retire(key, tkey(key), run, SUPERSEDED, {subject, account, inst, kname})
    incr('submitted')
    incr('superseded')
    local v = view(key)
    return {'ok', key, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], ''}
  end
  if keeps_newest(kpol) then
    -- The waiters sent before it.
    local before = place > 0 and '(' .. fmt(place) or '+inf'
    for _, w in ipairs(redis.call('ZRANGEBYSCORE', kkey(kname), '-inf', before)) do
      local wt = ticket(w)
      if wt and wt.state == QUEUED then table.insert(waiters, wt) end
    end
  end
  local debounce = tonumber(ARGV[19]) or 0
  if debounce > 0 then
    since = now
    for _, wt in ipairs(waiters) do
      if wt.burst and wt.burst < since then since = wt.burst end
    end
    ready = now + debounce
    local most = tonumber(ARGV[20]) or 0
    if most > 0 then ready = math.max(math.min(ready, since + most), now) end
  end
  local waits = ready ~= nil and ready > now
  if not waits then
    local p, held = key_meta(kname)
    if p == KP_SERIAL then
      waits = redis.call('EXISTS', kkey(kname)) == 1
    elseif p == KP_SERIAL_KEEP_NEWEST then
      waits = held > 0
    end
  end
  if waits then eligible = false end
end
-- The new ticket's key: indexed, holding it when admitted, its debounce written.
local function join_key(admitted)
  if kname == '' then return end
  key_join(key, kname, kpol, place)
  if admitted then key_hold(kname, 1) end
  if ready then
    redis.call('HSET', tkey(key), 'ready', fmt(ready), 'burst', fmt(since))
    if ready > now and not admitted then redis.call('ZADD', DEB, fmt(ready), key) end
  end
end
-- A new ticket admitted at once: one write of the ticket, counters together; nothing is
-- published (no Wait stream can follow a ticket before its id is answered).
local function admit_now(decision)
  local g = admit_new(key, subject, account, inst, run, next_grant(c[1]), ARGV[12])
  redis.call('HSET', C, 'grant', g, 'in_flight', fmt(num(c[2]) + 1),
             'submitted', fmt(num(c[3]) + 1), 'admitted', fmt(num(c[4]) + 1),
             sf(subject), fmt(num(c[5]) + 1))
  if account ~= '' then hincr(AF, account, 1) end
  join_key(true)
  return {'ok', key, ADMITTED, 0, g, L.lease, 0, '', '', 0, decision}
end
if shadow then
  -- What enforce would have done (scheduler::HostState::submit_shadow); admitted anyway.
  local decision = ''
  if L.max_rss > 0 and rss and rss >= L.max_rss then
    decision = MEMORY_PRESSURE
  elseif eligible then
    decision = ''
  elseif ARGV[10] == MODE_TRY or L.queue_total == 0 then
    decision = BUSY
  else
    local subject_over = math.max(num(c[5]) - subject_cap(subject), 0)
    local total_over = math.max(num(c[2]) - L.total, 0)
    local subject_full = L.queue_per_subject > 0 and subject_over >= L.queue_per_subject
    local full = false
    if L.overflow == OVERFLOW_REJECT then
      full = subject_full or total_over >= L.queue_total
    elseif L.overflow == OVERFLOW_QUEUE then
      full = subject_full or total_over >= L.queue_hard_total
    end
    decision = full and QUEUE_FULL or SHADOW_QUEUED
  end
  if decision ~= '' then incr('sh:' .. decision) end
  return admit_now(decision)
end
if not eligible then
  if ARGV[10] == MODE_TRY or L.queue_total == 0 then
    return refuse(BUSY)
  end
  local depth = redis.call('ZCARD', qkey(subject))
  local subject_full = L.queue_per_subject > 0 and depth >= L.queue_per_subject
  local total_full = cnt('queued') >= L.queue_total
  -- Room once the waiters this ticket supersedes have left (scheduler::keys::room_after).
  local of_subject = 0
  for _, wt in ipairs(waiters) do
    if wt.subject == subject then of_subject = of_subject + 1 end
  end
  local room = not ((L.queue_per_subject > 0 and depth - of_subject >= L.queue_per_subject)
    or cnt('queued') - #waiters >= L.queue_total)
  if not room and (subject_full or total_full) then
    if L.overflow == OVERFLOW_REJECT then
      return refuse(QUEUE_FULL)
    elseif L.overflow == OVERFLOW_QUEUE then
      if subject_full or cnt('queued') >= L.queue_hard_total then
        return refuse(QUEUE_FULL)
      end
    else
      -- From the lowest priority with waiters, never above the newcomer's
      -- (scheduler::HostState::make_room).
      local victim, vp = nil, nil
      if subject_full then
        local last = redis.call('ZREVRANGE', qkey(subject), 0, 0, 'WITHSCORES')
        if last[2] then
          vp = math.floor((tonumber(last[2]) + SPAN / 2) / SPAN) + 3
          victim = redis.call('ZRANGEBYSCORE', qkey(subject), lane_lo(vp), lane_hi(vp),
                              'LIMIT', 0, 1)[1]
        end
      else
        for p = LEVELS, 1, -1 do
          local _, dk = lvl_keys(p)
          -- The deepest lane; of equally deep ones the one whose oldest waiter came first.
          local top = redis.call('ZREVRANGE', dk, 0, 0, 'WITHSCORES')
          if top[2] then
            local vs = dsubject(redis.call('ZRANGEBYSCORE', dk, top[2], top[2], 'LIMIT', 0, 1)[1])
            victim = redis.call('ZRANGEBYSCORE', qkey(vs), lane_lo(p), lane_hi(p), 'LIMIT', 0, 1)[1]
            vp = p
            break
          end
        end
      end
      if not victim or vp < prio then
        return refuse(QUEUE_FULL)
      end
      finish(victim, ticket(victim), SHED)
      incr('shed')
    end
  end
end
-- The key's waiters leave (SUPERSEDED, naming this ticket) and its holders are told.
for _, wt in ipairs(waiters) do
  local cur = ticket(wt.id)
  if cur and cur.state == QUEUED then
    redis.call('HSET', tkey(wt.id), 'sby', key)
    finish(wt.id, cur, SUPERSEDED)
    incr('superseded')
  end
end
if kname ~= '' and ARGV[18] == '1' then
  for _, h in ipairs(redis.call('ZRANGE', kkey(kname), 0, -1)) do
    local ht = ticket(h)
    if ht and (ht.state == ADMITTED or ht.state == PARKED) then
      redis.call('HSET', tkey(h), 'sby', key)
      changed(h)
    end
  end
end
if eligible then return admit_now('') end
redis.call('HSET', tkey(key), 'subject', subject, 'account', account, 'instance', inst,
           'run', run, 'state', 'N', 'grant', 0, 'deadline', 0, 'order', 0, 'lvl', ARGV[12])
incr('submitted')
join_key(false)
enqueue(key, {subject = subject, account = account, instance = inst, run = run, lvl = prio})
if cnt('shed') + cnt('superseded') ~= ended_before then
  -- A waiter that left may have been what a serial key's next waiter waited for.
  dispatch()
end
local v = view(key)
return {'ok', key, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], ''}
