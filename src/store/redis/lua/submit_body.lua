-- Submit a ticket. ARGV[5] ticket key (32 hex digits, fresh), ARGV[6] instance, ARGV[7]
-- subject, ARGV[8] account ('' none), ARGV[9] run_id, ARGV[10] mode (Q queue, T try),
-- ARGV[11] rss_mb ('' none).
-- Returns {'ok', key, state, position, grant, lease}, {'refused', reason} or
-- {'conflict', field}. The key is not checked for a collision: it is 128 random bits, and
-- finding a taken one is as likely as guessing one.
housekeeping(false)
local key, inst, subject, account, run = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
-- Claim the run_id for the new ticket in one command; a refusal below gives it back.
local existing = redis.call('SET', runkey(run), key, 'NX', 'GET')
if existing then
  local t = ticket(existing)
  if t then
    -- An ended ticket keeps no subject or account: a repeat gets its final state.
    if live(t.state) and t.subject ~= subject then return {'conflict', 'subject'} end
    if live(t.state) and t.account ~= account then return {'conflict', 'account_id'} end
    local v = view(existing)
    return {'ok', existing, v[1], v[2], v[3], v[4]}
  end
  redis.call('SET', runkey(run), key)
end
local function refuse(reason)
  redis.call('DEL', runkey(run))
  incr('rejected')
  return {'refused', reason}
end
local rss = tonumber(ARGV[11])
if rss then report_rss(inst, rss) end
if L.max_rss > 0 and rss and rss >= L.max_rss then
  return refuse(MEMORY_PRESSURE)
end
dispatch()
local c = redis.call('HMGET', C, 'grant', 'in_flight', 'submitted', 'admitted', sf(subject))
local eligible = (not instance_soft(inst)) and num(c[2]) < L.total
  and num(c[5]) < subject_cap(subject) and account_has_room(account)
if not eligible then
  if ARGV[10] == MODE_TRY or L.queue_total == 0 then
    return refuse(BUSY)
  end
  local depth = redis.call('ZCARD', qkey(subject))
  local subject_full = L.queue_per_subject > 0 and depth >= L.queue_per_subject
  local total_full = cnt('queued') >= L.queue_total
  if subject_full or total_full then
    if L.overflow == OVERFLOW_REJECT then
      return refuse(QUEUE_FULL)
    elseif L.overflow == OVERFLOW_QUEUE then
      if subject_full or cnt('queued') >= L.queue_hard_total then
        return refuse(QUEUE_FULL)
      end
    else
      local victim_subject = subject
      if not subject_full then
        -- The deepest subject; of equally deep ones the one whose oldest waiter came first.
        local top = redis.call('ZREVRANGE', DEPTH, 0, 0, 'WITHSCORES')
        if top[2] then
          victim_subject = dsubject(
            redis.call('ZRANGEBYSCORE', DEPTH, top[2], top[2], 'LIMIT', 0, 1)[1])
        else
          victim_subject = nil
        end
      end
      local victim = victim_subject and redis.call('ZRANGE', qkey(victim_subject), 0, 0)[1]
      if not victim then
        return refuse(QUEUE_FULL)
      end
      finish(victim, ticket(victim), SHED)
      incr('shed')
    end
  end
end
if eligible then
  -- A new ticket admitted at once: one write of the ticket, counters together; nothing is
  -- published (no Wait stream can follow a ticket before its id is answered).
  local g = admit_new(key, subject, account, inst, run, next_grant(c[1]))
  redis.call('HSET', C, 'grant', g, 'in_flight', fmt(num(c[2]) + 1),
             'submitted', fmt(num(c[3]) + 1), 'admitted', fmt(num(c[4]) + 1),
             sf(subject), fmt(num(c[5]) + 1))
  if account ~= '' then hincr(AF, account, 1) end
  return {'ok', key, ADMITTED, 0, g, L.lease}
end
redis.call('HSET', tkey(key), 'subject', subject, 'account', account, 'instance', inst,
           'run', run, 'state', 'N', 'grant', 0, 'deadline', 0, 'order', 0)
incr('submitted')
enqueue(key, {subject = subject, account = account, instance = inst, run = run})
local v = view(key)
return {'ok', key, v[1], v[2], v[3], v[4]}
