-- Release or withdraw a ticket. ARGV[5] ticket key, or '' to find it by ARGV[6] run_id.
-- Returns {previous state, ticket key}, or false for an unknown ticket.
housekeeping(false)
local t = ticket(k)
if not t then return false end
if t.state == 'A' or t.state == 'P' then
  finish(k, t, 'R')
  incr('released')
  dispatch()
elseif t.state == 'Q' then
  finish(k, t, 'C')
  incr('cancelled')
  dispatch()
end
return {t.state, k}
