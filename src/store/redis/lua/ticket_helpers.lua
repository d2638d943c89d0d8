-- The rest of every ticket script's prelude: the scheduling rules as functions. Kept apart from
-- ticket_core.lua so that a fast path placed between them returns before Lua builds them.
-- Past the fast paths: this script decides with the limits of record, and may add leases, so
-- the fast paths' bound goes.
resolve_limits(redis.call('HGET', C, 'lv'))
redis.call('HDEL', C, 'next_due')
local AQ, RSS, QW = B .. 'aq', B .. 'rss', B .. 'qw'
-- Priorities: a subject's waiters are one zset `q:<subject>` scored by `order` plus
-- (priority - 3) * SPAN, so each priority's waiters (its lane) are a score range, oldest
-- first, and the subject's depth is its ZCARD. Each priority has its own rotation, depth
-- index and depth counts: `rot`, `depth`, `dc` for priority 3 (the default, and the only one
-- before priorities existed), `rot<p>`, `depth<p>`, `dc<p>` for the others; the counters'
-- `ql<p>` count the waiters of priority p other than 3 (those are `queued` minus the rest).
-- `aging` holds the waiters of priorities 2..5 by when they were queued, ties broken by
-- their order (members `amember`: the order, fixed width, then the ticket); `wc` the
-- weights' credits, `<p>:<subject>` → admissions in a row in the subject's current turn.
local SPAN = 1099511627776
local AGING, WC = B .. 'aging', B .. 'wc'
local WEIGHTED = next(L.weights) ~= nil
local function lvl_keys(p)
  if p == 3 then return B .. 'rot', B .. 'depth', B .. 'dc' end
  return B .. 'rot' .. p, B .. 'depth' .. p, B .. 'dc' .. p
end
local function lane_lo(p) return fmt((p - 3) * SPAN - SPAN / 2) end
local function lane_hi(p) return fmt((p - 3) * SPAN + SPAN / 2) end
local function weight(s) return L.weights[s] or 1 end
local function amember(order, k) return format('%020d', order + 4503599627370496) .. k end
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
-- The order of the oldest waiter of priority p in zset q (nil when none).
local function lane_head(q, p)
  local h = redis.call('ZRANGEBYSCORE', q, lane_lo(p), lane_hi(p), 'WITHSCORES', 'LIMIT', 0, 1)
  if not h[2] then return nil end
  return tonumber(h[2]) - (p - 3) * SPAN
end
local function lane_len(q, p) return redis.call('ZCOUNT', q, lane_lo(p), lane_hi(p)) end
local function subject_cap(s) return L.subjects[s] or L.per_subject end
local account_cap = account_cap_of
local function account_has_room(a)
  if not capped(a) then return true end
  local af = num(redis.call('HGET', AF, a))
  return af < account_cap(a, af)
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
-- A ticket's fields; a keyed one also has `key` (its key), `kseq` (its place among the key's
-- tickets), `ready` and `burst` (debounced: not dispatched before `ready`; its burst began at
-- `burst`) and `sby` (the newer ticket that supersedes it). Tickets of versions before keys
-- have none of them: no key.
local function ticket(k)
  local t = redis.call('HMGET', tkey(k), 'subject', 'account', 'instance', 'run', 'state',
                       'grant', 'deadline', 'order', 'qat', 'lvl', 'key', 'kseq', 'ready',
                       'burst', 'sby')
  if not t[5] then return nil end
  -- An ended ticket past its retention is forgotten (its keys expire by TTL soon after).
  if t[5] ~= QUEUED and t[5] ~= ADMITTED and t[5] ~= PARKED and num(t[7]) <= now then return nil end
  return {id = k, subject = t[1], account = t[2], instance = t[3], run = t[4], state = t[5],
          grant = num(t[6]), deadline = num(t[7]), order = num(t[8]), qat = num(t[9]),
          lvl = tonumber(t[10]) or DEFAULT_PRIORITY, key = t[11] or '', kseq = num(t[12]),
          ready = num(t[13]), burst = tonumber(t[14]), sby = t[15] or ''}
end
-- Keys (scheduler::keys): `keys` hash, key → `<policy>|<held>` (its policy code and how many
-- of its tickets are admitted or parked), while it has live tickets; `k:<key>` zset of its
-- live tickets by `kseq`; `deb` zset of debounced waiters by `ready`, until then; the
-- counters' `kseq` the last place handed out, `superseded` and `key_refused`.
local KEYS_H, DEB = B .. 'keys', B .. 'deb'
local function kkey(name) return B .. 'k:' .. name end
local function key_meta(name)
  local v = redis.call('HGET', KEYS_H, name)
  if not v then return nil, 0 end
  local sep = string.find(v, '|', 1, true)
  return string.sub(v, 1, sep - 1), tonumber(string.sub(v, sep + 1))
end
local function serial(p) return p == KP_SERIAL or p == KP_SERIAL_KEEP_NEWEST end
local function keeps_newest(p) return p == KP_KEEP_NEWEST or p == KP_SERIAL_KEEP_NEWEST end
-- A keyed ticket became a holder (`d` 1) or stopped being one (-1).
local function key_hold(name, d)
  local p, held = key_meta(name)
  redis.call('HSET', KEYS_H, name, p .. '|' .. fmt(held + d))
end
-- Index new ticket k under key `name` (its first live ticket sets the key's policy), at
-- `place` (its run's first place, a resubmission's) or the next.
local function key_join(k, name, policy, place)
  local seq = (place and place > 0) and place or redis.call('HINCRBY', C, 'kseq', 1)
  redis.call('HSETNX', KEYS_H, name, policy .. '|0')
  redis.call('ZADD', kkey(name), seq, k)
  redis.call('HSET', tkey(k), 'key', name, 'kseq', seq)
end
-- A keyed ticket ended: out of its key (forgotten with its last ticket) and the debounce index.
local function key_leave(k, t, held)
  local kk = kkey(t.key)
  redis.call('ZREM', kk, k)
  redis.call('ZREM', DEB, k)
  if redis.call('EXISTS', kk) == 0 then
    redis.call('HDEL', KEYS_H, t.key)
  elseif held then
    key_hold(t.key, -1)
  end
end
-- Whether waiter t's key lets it be dispatched (scheduler::keys::key_ready).
local function key_ready(t)
  if t.key == '' then return true end
  if t.ready > now then return false end
  local p, held = key_meta(t.key)
  if not serial(p) then return true end
  return held == 0 and redis.call('ZRANGE', kkey(t.key), 0, 0)[1] == t.id
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
  redis.call('HSET', tkey(k), 'state', ADMITTED, 'grant', g, 'deadline', fmt(now + L.lease),
             'qat', fmt(now))
  redis.call('ZADD', LEASES, now + L.lease, k)
  redis.call('HINCRBY', C, 'in_flight', 1)
  redis.call('HINCRBY', C, 'admitted', 1)
  hincr(C, sf(t.subject), 1)
  if t.account ~= '' then hincr(AF, t.account, 1) end
  if t.key ~= '' then key_hold(t.key, 1) end
  changed(k)
end
-- A slot held since `since` was freed (an admitted ticket released, parked or expired). While
-- housekeeping expires leases, the holds wait in `batch` and count shortest first (as the
-- core's), so the mean does not depend on the order of leases that ran out together.
local batch = nil
local function observe_hold(since)
  if batch then
    if since > 0 then table.insert(batch, now - since) end
    return
  end
  redis.call('HSET', C, 'hold', fmt(hold_avg(redis.call('HGET', C, 'hold'), since)))
end
-- The lane and priority bookkeeping of waiter k joining subject s's lane of priority p under
-- `order` (the host's and account's counts are the caller's).
local function enter_lane(k, s, p, order)
  local rot, dk, dc = lvl_keys(p)
  local q = qkey(s)
  local depth = lane_len(q, p)
  local old_head = depth > 0 and lane_head(q, p) or nil
  redis.call('ZADD', q, fmt(order + (p - 3) * SPAN), k)
  if depth == 0 then redis.call('RPUSH', rot, s) end
  local head = (old_head == nil or order < old_head) and order or old_head
  if old_head and old_head ~= head then redis.call('ZREM', dk, dmember(s, old_head)) end
  redis.call('ZADD', dk, depth + 1, dmember(s, head))
  hincr(dc, tostring(depth), 1)
  if p ~= 3 then incr('ql' .. p) end
end
-- The lane bookkeeping of waiter k (ticket t) leaving its lane; `popped` when dispatch
-- already took the lane off its rotation.
local function leave_lane(k, t, popped)
  local p, s = t.lvl, t.subject
  local rot, dk, dc = lvl_keys(p)
  local q = qkey(s)
  local depth = lane_len(q, p)
  local old_head = lane_head(q, p)
  redis.call('ZREM', q, k)
  hincr(dc, tostring(depth - 1), -1)
  if p ~= 3 then incr('ql' .. p, -1) end
  if depth > 1 then
    local head = old_head
    if t.order == old_head then
      head = lane_head(q, p)
      redis.call('ZREM', dk, dmember(s, old_head))
    end
    redis.call('ZADD', dk, depth - 1, dmember(s, head))
  else
    redis.call('ZREM', dk, dmember(s, old_head))
    if not popped then redis.call('LREM', rot, 1, s) end
    if WEIGHTED then redis.call('HDEL', WC, p .. ':' .. s) end
  end
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
  if t.lvl ~= 1 then redis.call('ZADD', AGING, fmt(now), amember(order, k)) end
  incr('queued')
  enter_lane(k, t.subject, t.lvl, order)
end
-- Take a waiter out of its lane; `popped` when dispatch already took the lane off the
-- rotation.
local function dequeue(k, t, popped)
  if t.account ~= '' then hincr(AQ, t.account, -1) end
  if t.lvl ~= 1 then redis.call('ZREM', AGING, amember(t.order, k)) end
  incr('queued', -1)
  leave_lane(k, t, popped)
end
-- Serve a waiter past `aging` as priority 1, keeping its order (scheduler::HostState::promote).
local function promote(k, t)
  redis.call('ZREM', AGING, amember(t.order, k))
  leave_lane(k, t, false)
  redis.call('HSET', tkey(k), 'lvl', '1')
  enter_lane(k, t.subject, 1, t.order)
end
local function finish(k, t, state)
  local was_queued = t.state == QUEUED
  if was_queued then
    dequeue(k, t, false)
  elseif t.state == ADMITTED then
    incr('in_flight', -1)
    hincr(C, sf(t.subject), -1)
    if t.account ~= '' then hincr(AF, t.account, -1) end
    observe_hold(t.qat)
  elseif t.state == PARKED then
    incr('parked', -1)
  else
    return
  end
  redis.call('ZREM', LEASES, k)
  if t.key ~= '' then key_leave(k, t, t.state == ADMITTED or t.state == PARKED) end
  retire(k, tkey(k), t.run, state, {t.subject, t.account, t.instance, t.key})
  -- A Wait stream follows a ticket only while it is queued.
  if was_queued then changed(k) end
end
-- Admit waiters while any fits: priority 1 first, within a priority round robin over its
-- rotation, a subject of weight w keeping the head for up to w admissions in a row
-- (scheduler::HostState::dispatch). Shadow mode admits every waiter.
local function dispatch()
  -- Nobody is admitted in a learning window (submit_body.lua); housekeeping dispatches at
  -- its end.
  if cnt('lu') > now then return end
  local shadow = L.mode == MODE_SHADOW
  for p = 1, LEVELS do
    local rot = lvl_keys(p)
    local idle = 0
    while redis.call('LLEN', rot) > idle and (shadow or cnt('in_flight') < L.total) do
      local s = redis.call('LPOP', rot)
      if not s then break end
      local q = qkey(s)
      local pick, pt = nil, nil
      if shadow then
        pick = redis.call('ZRANGEBYSCORE', q, lane_lo(p), lane_hi(p), 'LIMIT', 0, 1)[1]
        pt = pick and ticket(pick)
      elseif num(redis.call('HGET', C, sf(s))) < subject_cap(s) then
        for _, k in ipairs(redis.call('ZRANGEBYSCORE', q, lane_lo(p), lane_hi(p))) do
          local t = ticket(k)
          if account_has_room(t.account) and not instance_soft(t.instance) and key_ready(t) then
            pick, pt = k, t
            break
          end
        end
      end
      if not pick then
        idle = idle + 1
        if WEIGHTED then redis.call('HDEL', WC, p .. ':' .. s) end
        redis.call('RPUSH', rot, s)
      else
        dequeue(pick, pt, true)
        local stay = false
        if WEIGHTED then
          local w = weight(s)
          local credit = redis.call('HINCRBY', WC, p .. ':' .. s, 1)
          stay = credit < w
          if not stay then redis.call('HDEL', WC, p .. ':' .. s) end
        end
        local waited = math.max(now - pt.qat, 0)
        local bucket = #QW_BOUNDS
        for i, b in ipairs(QW_BOUNDS) do
          if waited <= b then bucket = i - 1 break end
        end
        redis.call('HINCRBY', QW, 'b' .. bucket, 1)
        redis.call('HINCRBY', QW, 'sum', waited)
        admit(pick, pt)
        if lane_len(q, p) > 0 then
          if stay then redis.call('LPUSH', rot, s) else redis.call('RPUSH', rot, s) end
        elseif WEIGHTED then
          redis.call('HDEL', WC, p .. ':' .. s)
        end
        idle = 0
      end
    end
  end
end
-- Expire due leases (and drop stale rss reports); with `forget` (the sweep), also drop the
-- zero counts of subjects and accounts no longer seen.
local function housekeeping(forget)
  local freed = false
  local due = {}
  if forget or not nothing_due then due = redis.call('ZRANGEBYSCORE', LEASES, '-inf', now) end
  batch = {}
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
  local holds = batch
  batch = nil
  -- Debounced waiters whose time came (scheduler::HostState::debounce_due).
  for _, k in ipairs(redis.call('ZRANGEBYSCORE', DEB, '-inf', fmt(now))) do
    redis.call('ZREM', DEB, k)
    changed(k)
    freed = true
  end
  if #holds > 0 then
    table.sort(holds)
    local avg = tonumber(redis.call('HGET', C, 'hold')) or 0
    for _, held in ipairs(holds) do avg = hold_avg(avg, now - held) end
    redis.call('HSET', C, 'hold', fmt(avg))
  end
  if L.aging > 0 then
    -- Oldest first, and of equal times by order (as the core's index).
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', AGING, '-inf', fmt(now - L.aging))) do
      local k = string.sub(m, 21)
      local t = ticket(k)
      if t and t.state == QUEUED then promote(k, t) else redis.call('ZREM', AGING, m) end
    end
  end
  if forget then
    local hashes = {C, AF, AQ}
    for p = 1, LEVELS do table.insert(hashes, (select(3, lvl_keys(p)))) end
    for _, h in ipairs(hashes) do
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
  local lu = redis.call('HGET', C, 'lu')
  if lu and num(lu) <= now then
    redis.call('HDEL', C, 'lu')
    freed = true
  end
  if freed then dispatch() end
end
-- A waiter's place in the dispatch order and its depth in its lane
-- (scheduler::HostState::position): every waiter of a higher priority first, then the
-- earlier rounds of its own priority's round robin, then the lanes ahead of its own.
local function position(k, t, max_depth)
  local p = t.lvl
  local rot, _, dc = lvl_keys(p)
  local q = qkey(t.subject)
  local depth = redis.call('ZCOUNT', q, lane_lo(p), '(' .. fmt(t.order + (p - 3) * SPAN))
  if max_depth and depth >= max_depth then return nil end
  local before = 0
  if p > 1 then
    local c = redis.call('HMGET', C, 'queued', 'ql1', 'ql2', 'ql4', 'ql5')
    local ql = {num(c[2]), num(c[3]), 0, num(c[4]), num(c[5])}
    ql[3] = num(c[1]) - ql[1] - ql[2] - ql[4] - ql[5]
    for h = 1, p - 1 do before = before + ql[h] end
  end
  for d = 0, depth - 1 do before = before + num(redis.call('HGET', dc, tostring(d))) end
  -- scheduler::EXACT_POSITION_SUBJECTS
  if redis.call('LLEN', rot) <= EXACT_POSITION_SUBJECTS then
    for _, s in ipairs(redis.call('LRANGE', rot, 0, -1)) do
      if s == t.subject then break end
      if lane_len(qkey(s), p) > depth then before = before + 1 end
    end
  end
  return before, depth
end
-- scheduler::eta_ms
local function eta(hold, pos, depth, cap)
  if hold == 0 then return 0 end
  local a = math.floor((2 * pos + 1) * hold / (2 * math.max(L.total, 1)))
  local b = math.floor((2 * depth + 1) * hold / (2 * math.max(cap, 1)))
  return math.max(a, b, 1)
end
-- {state, position, grant, lease remaining, eta}, or false for an unknown ticket.
-- What holds waiter k (scheduler::HostState::blocker): a learning window, its replica's
-- memory, its subject's cap, its account's, then the total while the host is full, else its
-- turn (a slot is free, others go first).
local function blocker(t)
  if cnt('lu') > now then return 'state_loss' end
  if not key_ready(t) then return 'key' end
  if instance_soft(t.instance) then return 'memory' end
  if num(redis.call('HGET', C, sf(t.subject))) >= subject_cap(t.subject) then return 'subject' end
  if not account_has_room(t.account) then return 'account' end
  if cnt('in_flight') >= L.total then return 'total' end
  return 'turn'
end
-- The ticket that supersedes t, as its view tells it: a live ticket's (supersede_running),
-- or a SUPERSEDED one's; '' otherwise.
local function superseded_by(t)
  if live(t.state) or t.state == SUPERSEDED then return t.sby end
  return ''
end
-- {state, position, grant, lease, eta, blocker ('' unless queued), superseded_by ('' none),
-- debounce left (ms, while queued)}, or false when unknown.
local function view(k)
  local t = ticket(k)
  if not t then return false end
  local pos, lease, wait, by = 0, 0, 0, ''
  if t.state == QUEUED then
    local depth
    pos, depth = position(k, t)
    wait = eta(cnt('hold'), pos, depth, subject_cap(t.subject))
    by = blocker(t)
  end
  if live(t.state) then lease = math.max(t.deadline - now, 0) end
  local left = 0
  if t.state == QUEUED then left = math.max(t.ready - now, 0) end
  return {t.state, pos, t.grant, lease, wait, by, superseded_by(t), left}
end
-- Append the limits of record to a reply (the stats and limits scripts): the scalars, then
-- the cap maps and the weights each as a count and name, value pairs, then aging and mode.
local function append_limits(out)
  table.insert(out, LIMITS_S)
  for _, m in ipairs({'subjects', 'accounts', 'weights'}) do
    local caps = L[m]
    local names = {}
    for name in pairs(caps) do table.insert(names, name) end
    table.insert(out, #names)
    for _, name in ipairs(names) do
      table.insert(out, name); table.insert(out, caps[name])
    end
  end
  table.insert(out, L.aging)
  table.insert(out, L.mode)
  table.insert(out, L.adaptive or '')
  local names = {}
  for name in pairs(L.adaptive_accounts) do table.insert(names, name) end
  table.insert(out, #names)
  for _, name in ipairs(names) do
    table.insert(out, name); table.insert(out, L.adaptive_accounts[name])
  end
end
