-- Housekeeping, then every live ticket: {key, state, subject, account, run, instance, grant,
-- deadline, order, priority, blocker ('' unless queued), since (entered its state), place,
-- eta, key ('' none), key policy ('' none), superseded_by ('' none), debounce left (ms)} per
-- ticket (sorted by the caller). Place (1-based) and eta only for a waiter fewer than
-- LISTED_PLACE_DEPTH deep in its lane (scheduler::HostState::list), else 0.
housekeeping(false)
local out = {fmt(now)}
local hold = cnt('hold')
for _, k in ipairs(redis.call('ZRANGE', LEASES, 0, -1)) do
  local t = ticket(k)
  if t then
    local by, place, wait = '', 0, 0
    if t.state == QUEUED then
      by = blocker(t)
      local pos, depth = position(k, t, LISTED_PLACE_DEPTH)
      if pos then
        place = pos + 1
        wait = eta(hold, pos, depth, subject_cap(t.subject))
      end
    end
    local policy, left = '', 0
    if t.key ~= '' then policy = key_meta(t.key) end
    if t.state == QUEUED then left = math.max(t.ready - now, 0) end
    for _, v in ipairs({k, t.state, t.subject, t.account, t.run, t.instance, fmt(t.grant),
                        fmt(t.deadline), fmt(t.order), fmt(t.lvl), by, fmt(t.qat), fmt(place),
                        fmt(wait), t.key, policy, t.sby, fmt(left)}) do
      table.insert(out, v)
    end
  end
end
return out
