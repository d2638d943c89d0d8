-- Renew leases. ARGV[5] rss_mb ('' none), ARGV[6..] ticket keys.
-- Returns per key {state, position, grant, lease, eta}, or false when unknown.
housekeeping(false)
local rss = tonumber(ARGV[5])
local out = {}
for i = 6, #ARGV do
  local k = ARGV[i]
  local t = ticket(k)
  if t and live(t.state) then
    set_lease(k, now + L.lease)
    if rss then
      local was_soft = instance_soft(t.instance)
      report_rss(t.instance, rss)
      if was_soft and not instance_soft(t.instance) then dispatch() end
    end
  end
  table.insert(out, view(k))
end
return out
