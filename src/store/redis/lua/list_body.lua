-- Housekeeping, then every live ticket: {key, state, subject, account, run, instance, grant,
-- deadline, order, priority, blocker ('' unless queued)} per ticket (sorted by the caller).
housekeeping(false)
local out = {fmt(now)}
local head = head_waiter() or ''
for _, k in ipairs(redis.call('ZRANGE', LEASES, 0, -1)) do
  local t = ticket(k)
  if t then
    local by = t.state == QUEUED and blocker(k, t, head) or ''
    for _, v in ipairs({k, t.state, t.subject, t.account, t.run, t.instance, fmt(t.grant),
                        fmt(t.deadline), fmt(t.order), fmt(t.lvl), by}) do
      table.insert(out, v)
    end
  end
end
return out
