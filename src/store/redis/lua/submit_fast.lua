-- Submit's common case in few commands, before the helpers are built: the limits of record
-- the caller's own or newer (`adopt`), no lease due (known
-- from the counters' `next_due` bound, see `due_bound`), nothing queued, no memory ladder,
-- room for the ticket, a new run_id. The answer is what the full
-- rules give (housekeeping and dispatch have nothing to do then); nil when anything else
-- holds, and then nothing was written: the full rules decide.
-- A function of Submit's arguments (ARGV[5..12] of submit_body.lua) and `epoch`, the state
-- epoch this replica knows (ARGV[13]): the Submit script calls it once, the batch script
-- (batch_body.lua) once per Submit. It runs only for a host of that epoch outside a learning
-- window (its counters' `ep` and `lu`, read with the rest).
local function submit_fast(key, inst, subject, account, run, prio, epoch)
  if L.max_rss ~= 0 then return nil end
  local c = redis.call('HMGET', C, 'grant', 'in_flight', 'submitted', 'admitted', 'queued',
                      's:' .. subject, 'next_due', 'lv', 'ls', 'lm', 'a:' .. account, 'ep', 'lu')
  local nd = c[12] == epoch and num(c[13]) <= now and adopt(c[8], c[9], c[10])
    and L.max_rss == 0 and due_bound(c[7], now + L.lease)
  if not (nd and nd > now) then return nil end
  nothing_due = true
  local acap, af = nil, 0
  if capped(account) then
    af = num(redis.call('HGET', AF, account))
    acap = account_cap_of(account, af, c[11])
  end
  if num(c[5]) == 0 and num(c[2]) < L.total
    and num(c[6]) < (L.subjects[subject] or L.per_subject)
    and (acap == nil or af < acap)
    and not redis.call('SET', B .. 'run:' .. run, key, 'NX', 'GET') then
    local g, deadline = admit_new(key, subject, account, inst, run, next_grant(c[1]), prio)
    redis.call('HSET', C, 'grant', g, 'in_flight', fmt(num(c[2]) + 1),
               'submitted', fmt(num(c[3]) + 1), 'admitted', fmt(num(c[4]) + 1),
               's:' .. subject, fmt(num(c[6]) + 1),
               'next_due', nd > now + L.lease and deadline or fmt(nd))
    if account ~= '' then redis.call('HINCRBY', AF, account, '1') end
    return {'ok', key, ADMITTED, 0, g, L.lease, 0, '', '', 0, ''}
  end
  return nil
end
