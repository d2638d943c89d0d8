-- Read one ticket (after housekeeping). ARGV[5] ticket key, ARGV[6] 'sweep' to also drop
-- zero counts, or 'resume' to first give every live ticket at least one lease from now, as a
-- restart does (the replica calling was paused: nobody could renew through it; see
-- src/pause.rs). Returns its view or false.
if ARGV[6] == 'resume' then
  local floor = now + L.lease
  for _, k in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '-inf', '(' .. fmt(floor))) do
    set_lease(k, floor)
  end
end
housekeeping(ARGV[6] == 'sweep')
return view(ARGV[5])
