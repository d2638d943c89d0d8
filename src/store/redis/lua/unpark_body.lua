-- Ask for a slot again for a parked ticket: admitted at once if it fits, else queued ahead
-- of its subject's waiters (admitted and queued ones stay). ARGV[5] ticket key.
-- Returns as for park.
housekeeping(false)
local k = ARGV[5]
local t = ticket(k)
if not t then return false end
if t.state == PARKED then
  incr('parked', -1)
  -- It holds its key again once admitted (or waits first in its key's line).
  if t.key ~= '' then key_hold(t.key, -1) end
  local fits = L.mode == MODE_SHADOW or ((not instance_soft(t.instance))
    and cnt('in_flight') < L.total
    and num(redis.call('HGET', C, sf(t.subject))) < subject_cap(t.subject)
    and account_has_room(t.account))
  if fits then
    admit(k, t)
  else
    enqueue(k, t, true)
  end
elseif t.state ~= ADMITTED and t.state ~= QUEUED then
  return {'state', t.state}
end
local v = view(k)
return {'ok', v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]}
