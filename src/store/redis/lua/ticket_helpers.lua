-- The rest of every ticket script's prelude: the scheduling rules as functions. Kept apart from
-- ticket_core.lua so that a fast path placed between them returns before Lua builds them.
-- Past the fast paths: this script decides with the limits of record, and may add leases, so
-- the fast paths' bound goes.
resolve_limits(redis.call('HGET', C, 'lv'))
redis.call('HDEL', C, 'next_due')
local ROT, DEPTH, DC, AQ, RSS = B .. 'rot', B .. 'depth', B .. 'dc', B .. 'aq', B .. 'rss'
local QW = B .. 'qw'
-- QW_BOUNDS: upper bounds (ms) of the queue-wait histogram, from the constants prelude.
local function tkey(k) return B .. 't:' .. k end
local function qkey(s) return B .. 'q:' .. s end
local function runkey(r) return B .. 'run:' .. r end
local function cnt(f) return num(redis.call('HGET', C, f)) end
local function incr(f, by) redis.call('HINCRBY', C, f, by or 1) end
-- Counts per name stay at 0 when they reach it (the sweep drops zeros), saving a command on
-- the hot path.
local function hincr(h, f, by) redis.call('HINCRBY', h, f, by) end
local function changed(k) redis.call('PUBLISH', B .. 'changes', k) end
-- `depth` holds one member per subject with waiters, scored by its depth: the order of its
-- oldest waiter (fixed width and offset, so members sort by it) and its name. The first member
-- of the top score is the deepest subject whose oldest waiter came first (as the core's
-- `by_depth`).
local function dmember(s, head) return format('%020d', head + 4503599627370496) .. s end
local function dsubject(m) return string.sub(m, 21) end
local function head_of(q) return tonumber(redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')[2]) end
local function subject_cap(s) return L.subjects[s] or L.per_subject end
local function account_cap(a)
  if a == '' then return nil end
  local v = L.accounts[a]
  if v then return v end
  if L.per_account >= 0 then return L.per_account end
  return nil
end
local function account_has_room(a)
  local cap = account_cap(a)
  return cap == nil or num(redis.call('HGET', AF, a)) < cap
end
local function rss_of(inst)
  local r = redis.call('HGET', RSS, inst)
  if not r then return nil end
  local sep = string.find(r, '|', 1, true)
  local mb, at = tonumber(string.sub(r, 1, sep - 1)), tonumber(string.sub(r, sep + 1))
  if now - at >= L.lease then return nil end
  return mb
end
local function instance_soft(inst)
  if L.max_rss == 0 then return false end
  local mb = rss_of(inst)
  return mb ~= nil and mb >= L.soft_rss
end
local function report_rss(inst, mb)
  if L.max_rss > 0 then redis.call('HSET', RSS, inst, fmt(mb) .. '|' .. fmt(now)) end
end
local function ticket(k)
  local t = redis.call('HMGET', tkey(k), 'subject', 'account', 'instance', 'run', 'state',
                       'grant', 'deadline', 'order', 'qat')
  if not t[5] then return nil end
  -- An ended ticket past its retention is forgotten (its keys expire by TTL soon after).
  if t[5] ~= QUEUED and t[5] ~= ADMITTED and t[5] ~= PARKED and num(t[7]) <= now then return nil end
  return {subject = t[1], account = t[2], instance = t[3], run = t[4], state = t[5],
          grant = num(t[6]), deadline = num(t[7]), order = num(t[8]), qat = num(t[9])}
end
local function live(state) return state == QUEUED or state == ADMITTED or state == PARKED end
local function set_lease(k, deadline)
  redis.call('HSET', tkey(k), 'deadline', fmt(deadline))
  redis.call('ZADD', LEASES, deadline, k)
end
-- Admit a waiter that dispatch took out of its queue, or a parked ticket that fits again.
local function admit(k, t)
  local g = fmt(next_grant(redis.call('HGET', C, 'grant')))
  redis.call('HSET', C, 'grant', g)
  redis.call('HSET', tkey(k), 'state', ADMITTED, 'grant', g, 'deadline', fmt(now + L.lease))
  redis.call('ZADD', LEASES, now + L.lease, k)
  redis.call('HINCRBY', C, 'in_flight', 1)
  redis.call('HINCRBY', C, 'admitted', 1)
  hincr(C, sf(t.subject), 1)
  if t.account ~= '' then hincr(AF, t.account, 1) end
  changed(k)
end
local function enqueue(k, t, front)
  local order
  if front then
    order = redis.call('HINCRBY', C, 'next_front', -1)
  else
    order = redis.call('HINCRBY', C, 'next_order', 1)
  end
  redis.call('HSET', tkey(k), 'state', QUEUED, 'order', order, 'qat', fmt(now))
  set_lease(k, now + L.lease)
  if t.account ~= '' then hincr(AQ, t.account, 1) end
  incr('queued')
  local q = qkey(t.subject)
  local depth = redis.call('ZCARD', q)
  local old_head = depth > 0 and head_of(q) or nil
  redis.call('ZADD', q, order, k)
  if depth == 0 then redis.call('RPUSH', ROT, t.subject) end
  local head = (old_head == nil or order < old_head) and order or old_head
  if old_head and old_head ~= head then redis.call('ZREM', DEPTH, dmember(t.subject, old_head)) end
  redis.call('ZADD', DEPTH, depth + 1, dmember(t.subject, head))
  hincr(DC, tostring(depth), 1)
end
-- Take a waiter out of its subject's queue; `popped` when dispatch already took the subject
-- off the rotation.
local function dequeue(k, t, popped)
  if t.account ~= '' then hincr(AQ, t.account, -1) end
  incr('queued', -1)
  local q = qkey(t.subject)
  local depth = redis.call('ZCARD', q)
  local old_head = head_of(q)
  redis.call('ZREM', q, k)
  hincr(DC, tostring(depth - 1), -1)
  if depth > 1 then
    local head = old_head
    if t.order == old_head then
      head = head_of(q)
      redis.call('ZREM', DEPTH, dmember(t.subject, old_head))
    end
    redis.call('ZADD', DEPTH, depth - 1, dmember(t.subject, head))
  else
    redis.call('ZREM', DEPTH, dmember(t.subject, old_head))
    if not popped then redis.call('LREM', ROT, 1, t.subject) end
  end
end
local function finish(k, t, state)
  local was_queued = t.state == QUEUED
  if was_queued then
    dequeue(k, t, false)
  elseif t.state == ADMITTED then
    incr('in_flight', -1)
    hincr(C, sf(t.subject), -1)
    if t.account ~= '' then hincr(AF, t.account, -1) end
  elseif t.state == PARKED then
    incr('parked', -1)
  else
    return
  end
  redis.call('ZREM', LEASES, k)
  retire(k, tkey(k), t.run, state)
  -- A Wait stream follows a ticket only while it is queued.
  if was_queued then changed(k) end
end
local function dispatch()
  local idle = 0
  while redis.call('LLEN', ROT) > idle and cnt('in_flight') < L.total do
    local s = redis.call('LPOP', ROT)
    if not s then break end
    local q = qkey(s)
    local pick, pt = nil, nil
    if num(redis.call('HGET', C, sf(s))) < subject_cap(s) then
      for _, k in ipairs(redis.call('ZRANGE', q, 0, -1)) do
        local t = ticket(k)
        if account_has_room(t.account) and not instance_soft(t.instance) then
          pick, pt = k, t
          break
        end
      end
    end
    if not pick then
      idle = idle + 1
      redis.call('RPUSH', ROT, s)
    else
      dequeue(pick, pt, true)
      local waited = math.max(now - pt.qat, 0)
      local bucket = #QW_BOUNDS
      for i, b in ipairs(QW_BOUNDS) do
        if waited <= b then bucket = i - 1 break end
      end
      redis.call('HINCRBY', QW, 'b' .. bucket, 1)
      redis.call('HINCRBY', QW, 'sum', waited)
      admit(pick, pt)
      if redis.call('ZCARD', q) > 0 then redis.call('RPUSH', ROT, s) end
      idle = 0
    end
  end
end
-- Expire due leases (and drop stale rss reports); with `forget` (the sweep), also drop the
-- zero counts of subjects and accounts no longer seen.
local function housekeeping(forget)
  local freed = false
  local due = {}
  if forget or not nothing_due then due = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now) end
  for _, k in ipairs(due) do
    local t = ticket(k)
    if t then
      finish(k, t, EXPIRED)
      incr('expired')
      freed = true
    else
      redis.call('ZREM', LEASES, k)
    end
  end
  if forget then
    for _, h in ipairs({C, AF, AQ, DC}) do
      local all = redis.call('HGETALL', h)
      for i = 1, #all, 2 do
        -- Of the counters, only subjects' in-flight counts are dropped at 0.
        if tonumber(all[i + 1]) == 0 and (h ~= C or string.sub(all[i], 1, 2) == 's:') then
          redis.call('HDEL', h, all[i])
        end
      end
    end
  end
  if L.max_rss > 0 then
    local r = redis.call('HGETALL', RSS)
    for i = 1, #r, 2 do
      local sep = string.find(r[i + 1], '|', 1, true)
      if now - tonumber(string.sub(r[i + 1], sep + 1)) >= L.lease then
        redis.call('HDEL', RSS, r[i])
        freed = true
      end
    end
  end
  if freed then dispatch() end
end
local function position(k, t)
  local depth = redis.call('ZCOUNT', qkey(t.subject), '-inf', '(' .. fmt(t.order))
  local before = 0
  for d = 0, depth - 1 do before = before + num(redis.call('HGET', DC, tostring(d))) end
  -- scheduler::EXACT_POSITION_SUBJECTS
  if redis.call('LLEN', ROT) <= EXACT_POSITION_SUBJECTS then
    for _, s in ipairs(redis.call('LRANGE', ROT, 0, -1)) do
      if s == t.subject then break end
      if redis.call('ZCARD', qkey(s)) > depth then before = before + 1 end
    end
  end
  return before
end
-- {state, position, grant, lease remaining}, or false for an unknown ticket.
local function view(k)
  local t = ticket(k)
  if not t then return false end
  local pos, lease = 0, 0
  if t.state == QUEUED then pos = position(k, t) end
  if live(t.state) then lease = math.max(t.deadline - now, 0) end
  return {t.state, pos, t.grant, lease}
end
-- Append the limits of record to a reply (the stats and limits scripts): the scalars, then
-- each cap map as a count and name, cap pairs.
local function append_limits(out)
  table.insert(out, LIMITS_S)
  for _, m in ipairs({'subjects', 'accounts'}) do
    local caps = L[m]
    local names = {}
    for name in pairs(caps) do table.insert(names, name) end
    table.insert(out, #names)
    for _, name in ipairs(names) do
      table.insert(out, name); table.insert(out, caps[name])
    end
  end
end
