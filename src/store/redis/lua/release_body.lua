-- Release or withdraw a ticket. ARGV[5] ticket key, or '' to find it by ARGV[6] run_id.
-- Returns {previous state, ticket key}, or false for an unknown ticket.
housekeeping(false)
local t = ticket(k)
if not t then return false end
if t.state == ADMITTED or t.state == PARKED then
  finish(k, t, RELEASED)
  incr('released')
  dispatch()
elseif t.state == QUEUED then
  finish(k, t, CANCELLED)
  incr('cancelled')
  dispatch()
end
return {t.state, k}
