-- Release or withdraw a ticket. ARGV[5] ticket key, or '' to find it by ARGV[6] run_id;
-- ARGV[7] the outcome reported ('' none), ARGV[8] the latency ('' none).
-- Returns {previous state, ticket key}, or false for an unknown ticket.
housekeeping(false)
local t = ticket(k)
if not t then return false end
if t.state == ADMITTED and (ARGV[7] ~= '' or ARGV[8] ~= '') then
  record_outcome(t.account, ARGV[7], ARGV[8],
                 t.account ~= '' and num(redis.call('HGET', AF, t.account)) or 0)
end
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
