-- Park an admitted ticket (a parked one stays). ARGV[5] ticket key.
-- Returns {'ok', state, position, grant, lease, eta}, {'state', state} when the ticket may not be
-- parked, or false when unknown.
housekeeping(false)
local k = ARGV[5]
local t = ticket(k)
if not t then return false end
if t.state == ADMITTED then
  incr('in_flight', -1)
  hincr(C, sf(t.subject), -1)
  if t.account ~= '' then hincr(AF, t.account, -1) end
  observe_hold(t.qat)
  incr('parked', 1)
  redis.call('HSET', tkey(k), 'state', PARKED)
  dispatch()
elseif t.state ~= PARKED then
  return {'state', t.state}
end
local v = view(k)
return {'ok', v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]}
