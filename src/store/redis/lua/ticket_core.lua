-- The prelude of every ticket script (this file, then a fast path if any, then
-- ticket_helpers.lua): the scheduling rules of the Rust core (src/scheduler) in Lua.
--
-- ARGV[1] the host's key prefix `B` (`{prefix}sched:{<host>}:`; every key below starts with
-- it, so all of a host's keys share its hash tag and slot), ARGV[2] the calling replica's
-- limits version and its limits for the host as `version,total,per_subject,per_account(-1
-- none),queue_total,queue_per_subject,queue_hard_total,overflow,lease,retention,max_retained,
-- max_rss,soft_rss`, ARGV[3] now (0 = Redis TIME), ARGV[4] the per-subject and per-account
-- caps as JSON (`''` when there are none).
--
-- One set of limits: `limits` (hash `s` scalars, `m` maps) holds the host's limits of record
-- and the counters' field `lv` their version. A caller with a newer version (a replica
-- started, or its file reloaded, later) writes its own there; every other caller decides with
-- the stored ones. So replicas whose files differ never enforce different limits for a host at
-- the same time: the most recently started replica's file is in force, from its first call
-- for the host, unless an operator's SetLimits put others there (their version is at least
-- OPERATOR_LIMITS, above any start time: see limits_body.lua). The fast paths read `lv`, and
-- a copy of the limits in the counters' `ls`, `lm`, with the counters they read anyway, and
-- run when the limits of record are the caller's own or newer (`adopt`); the full rules
-- resolve the limits first (`resolve_limits`). KEYS[1] is `B c` (the counters), named so Redis routes the
-- script to the host's slot; the other keys are derived from `B`.
--
-- Keys: `t:<ticket>` hash (subject, account, instance, run, state (a code from the constants
-- prelude), grant,
-- deadline, order, qat; an ended ticket keeps only run, state, grant and deadline, which is
-- when it is forgotten (its subject, account and instance emptied), and its key and its run's
-- expire by TTL just after); `ended` list of ended tickets, oldest first, trimmed to
-- `max_retained` (the oldest are forgotten early); `recent` list of the newest endings, newest
-- first, RECENT_ENDINGS of them, for operators (`note_end`); `run:<run_id>` → ticket; `leases` zset of
-- live tickets by deadline; `q:<subject>` zset of a subject's waiters by order; `rot` list, the round-robin
-- rotation of subjects with waiters; `depth` zset of subjects by queue depth; `dc` hash,
-- depth → subjects with more waiters than that; `af`, `aq` hashes of account in-flight and
-- account queued; `rss` hash instance → `mb|at`; `c` counters, with each subject's in-flight
-- count as field `s:<subject>`. Every change a Wait stream can see (a queued ticket admitted,
-- shed, cancelled or expired) is published on `B changes` (the ticket's key) for Wait streams
-- on any replica.
--
-- Times and counts go to Redis through `fmt`, as integers: a Lua number given to `redis.call`
-- is written with `%.17g`, which costs about twice as much (glibc prints a double digit by
-- digit), and these scripts pass a dozen numbers on every call. (`%d` goes through a C `long`:
-- 64 bits on the 64-bit builds of Redis that hold millisecond times; a 32-bit build would not.)
local format = string.format
local function fmt(x) return format('%d', x) end
local function num(v) return tonumber(v or '0') or 0 end
local B = ARGV[1]
-- The limits as a table, from their scalars and their maps' JSON: `subjects` and `accounts`
-- (caps), `weights`, and `aging` (ms) and `mode` when not the defaults (0, enforce). Replicas
-- of versions before priorities read only the caps.
local function limits_of(scalars, maps_json)
  local total, per_subject, per_account, queue_total, queue_per_subject, queue_hard_total,
    overflow, lease, retention, max_retained, max_rss, soft_rss = string.match(scalars,
    '^(%d+),(%d+),(%-?%d+),(%d+),(%d+),(%d+),([%a_]+),(%d+),(%d+),(%d+),(%d+),(%d+)$')
  -- One constructor: the table is sized once (filling it field by field rehashes it). The
  -- cap maps are only read, so one empty table stands for both when there are none.
  local none = {}
  local maps = maps_json ~= '' and cjson.decode(maps_json) or none
  return {total = tonumber(total), per_subject = tonumber(per_subject),
          per_account = tonumber(per_account), queue_total = tonumber(queue_total),
          queue_per_subject = tonumber(queue_per_subject),
          queue_hard_total = tonumber(queue_hard_total), overflow = overflow,
          lease = tonumber(lease), retention = tonumber(retention),
          max_retained = tonumber(max_retained), max_rss = tonumber(max_rss),
          soft_rss = tonumber(soft_rss), subjects = maps.subjects or none,
          accounts = maps.accounts or none, weights = maps.weights or none,
          aging = maps.aging or 0, mode = maps.mode or 'enforce',
          adaptive = maps.adaptive, adaptive_accounts = maps.adaptiveAccounts or none}
end
-- The caller's limits and their version; `L` (and LIMITS_S, LIMITS_M, which the stats script
-- answers) are the caller's until `resolve_limits` finds others of record.
local MY_V, LIMITS_S = string.match(ARGV[2], '^(%d+),(.*)$')
local LIMITS_M = ARGV[4]
local L = limits_of(LIMITS_S, LIMITS_M)
local now = tonumber(ARGV[3])
-- Grants are at least the time in µs (scheduler::HostState::set_grant_floor), so they keep
-- increasing after Redis restarts empty. (About 1.8e15: exact in a Lua double.)
local now_us
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now_us = now * 1000
end
-- The host's mean hold after a slot held since `since` is freed, given the mean before
-- (scheduler::next_hold_avg). A ticket admitted by a version that did not record when is not
-- counted.
local function hold_avg(avg, since)
  avg = tonumber(avg) or 0
  if since <= 0 then return avg end
  local held = math.max(now - since, 0)
  if avg == 0 then return math.max(held, 1) end
  return math.max(math.floor((15 * avg + held) / 16), 1)
end
-- The grant after `last` (the counters' `grant` field as read).
local function next_grant(last) return math.max(num(last) + 1, now_us) end
local C, LEASES, AF = B .. 'c', B .. 'leases', B .. 'af'
-- Use the limits of record (see above), given the counters' `lv` as read: a newer version's
-- stored limits replace the caller's; an older one (or none) is replaced by the caller's.
local function resolve_limits(stored_v)
  local sv, mine = tonumber(stored_v), tonumber(MY_V)
  if sv == mine then return end
  if sv and sv > mine then
    local st = redis.call('HMGET', C, 'ls', 'lm')
    LIMITS_S, LIMITS_M = st[1], st[2]
    L = limits_of(LIMITS_S, LIMITS_M)
  else
    redis.call('HSET', C, 'lv', MY_V, 'ls', LIMITS_S, 'lm', LIMITS_M)
    redis.call('HINCRBY', C, 'rev', 1)
    -- New limits start every subject's turn afresh (weights may have changed).
    redis.call('DEL', B .. 'wc')
  end
end
-- The fast paths read the limits of record with the counters (`lv`, `ls`, `lm`).
-- Given what they read:
-- true when they may decide with `L`, which is then the limits of record: the caller's own, or
-- newer ones (another replica's newer file, an operator's). Older ones (or none) are the full
-- rules' to replace.
local function adopt(v, s, m)
  if v == MY_V then return true end
  local sv = tonumber(v)
  if not sv or not s or sv < tonumber(MY_V) then return false end
  LIMITS_S, LIMITS_M = s, m or ''
  L = limits_of(LIMITS_S, LIMITS_M)
  return true
end
-- Adaptive account caps (scheduler::adaptive). Settings travel as `min,max,decrease‰,increase,
-- cooldown`. Each account's learned cap away from its start is the counters' field
-- `a:<account>` = `cap‰|last_cut|knee‰` (read with the counters the fast paths read anyway, so
-- an adaptive account costs no extra command there), and `a_n` counts them.
local adaptive_parsed = {}
-- The settings of `a`'s adaptive cap, or nil: a fixed cap in `accounts` wins, then the
-- account's own, then the default (scheduler::Limits::adaptive_of).
local function adaptive_of(a)
  if L.accounts[a] then return nil end
  local s = L.adaptive_accounts[a] or L.adaptive
  if not s then return nil end
  local p = adaptive_parsed[s]
  if not p then
    local mn, mx, dec, inc, cd = string.match(s, '^(%d+),(%d+),(%d+),(%d+),(%d+)$')
    p = {min = tonumber(mn), max = tonumber(mx), dec = tonumber(dec), inc = tonumber(inc),
         cd = tonumber(cd)}
    adaptive_parsed[s] = p
  end
  return p
end
-- An account's learned cap in thousandths, when it was last cut and its knee (its start when
-- none is remembered), and whether one is. `pre`: the field as already read (false: absent),
-- nil to read it.
local function adaptive_state(a, ad, pre)
  local st = pre
  if st == nil then st = redis.call('HGET', C, 'a:' .. a) end
  if not st then return ad.max * 1000, 0, 0, false end
  local m, last, knee = string.match(st, '^(%d+)|(%d+)|(%d+)$')
  return tonumber(m), tonumber(last), tonumber(knee), true
end
-- Whether any cap binds account `a` (its in-flight count need only be read then).
local function capped(a)
  return a ~= '' and (L.accounts[a] ~= nil or L.per_account >= 0 or adaptive_of(a) ~= nil)
end
local function clamp_cap(m, ad) return math.min(math.max(math.floor(m / 1000), ad.min), ad.max) end
-- The cap of account `a` in force (nil: none), given its adaptive settings or fixed caps. With
-- `in_flight` (the account's admitted tickets) below an adaptive cap's `min`, that bound is
-- answered without reading the learned cap (it only matters whether the account has room).
local function account_cap_of(a, in_flight, pre)
  if a == '' then return nil end
  local ad = adaptive_of(a)
  if ad and in_flight and in_flight < ad.min then return ad.min end
  if ad then return clamp_cap(adaptive_state(a, ad, pre), ad) end
  local v = L.accounts[a]
  if v then return v end
  if L.per_account >= 0 then return L.per_account end
  return nil
end
-- A release of an admitted ticket reported `outcome` ('' none) and `latency` ('' none):
-- count them, and move the account's adaptive cap given its admitted tickets before this
-- release (scheduler::HostState::record_outcome, scheduler::after_outcome).
local function record_outcome(account, outcome, latency, in_flight, pre)
  if outcome ~= '' then redis.call('HINCRBY', C, 'o:' .. outcome, 1) end
  if latency ~= '' then
    redis.call('HINCRBY', C, 'lat_sum', latency)
    redis.call('HINCRBY', C, 'lat_n', 1)
  end
  if account == '' or outcome == '' or outcome == 'failed' then return end
  local ad = adaptive_of(account)
  -- An OK below `min` cannot be at the cap: nothing changes, nothing need be read.
  if not ad or (outcome == 'ok' and in_flight < ad.min) then return end
  local m, last, knee, known = adaptive_state(account, ad, pre)
  local m0, last0, knee0 = m, last, knee
  local cooling = last ~= 0 and now < last + ad.cd
  if (outcome == 'rate_limited' or outcome == 'overloaded') and not cooling then
    if knee ~= 0 and clamp_cap(m, ad) >= math.floor(knee / 1000) then
      m = math.max(knee - 1000, ad.min * 1000)
    else
      knee = m
      m = math.max(math.floor(m * ad.dec / 1000), ad.min * 1000)
    end
    last = now
  elseif outcome == 'ok' and not cooling then
    local cap = clamp_cap(m, ad)
    if in_flight >= cap then
      local step = math.floor(ad.inc * 1000 / cap)
      local below = math.max(knee - 1000, 0)
      local delta
      if knee == 0 then
        delta = step
      elseif m < below then
        delta = math.max(step, math.floor((below - m) / (2 * cap)))
      else
        delta = math.floor(step / PROBE_SLOWDOWN)
      end
      m = math.min(m + math.max(delta, 1), ad.max * 1000)
      if knee ~= 0 and m >= knee + 2000 then knee = 0 end
    end
  end
  if m == m0 and last == last0 and knee == knee0 then return end
  if m >= ad.max * 1000 and (last == 0 or now >= last + ad.cd) then
    if known then
      redis.call('HDEL', C, 'a:' .. account)
      redis.call('HINCRBY', C, 'a_n', -1)
    end
  elseif known or num(redis.call('HGET', C, 'a_n')) < MAX_ADAPTIVE_ACCOUNTS then
    redis.call('HSET', C, 'a:' .. account, fmt(m) .. '|' .. fmt(last) .. '|' .. fmt(knee))
    if not known then redis.call('HINCRBY', C, 'a_n', 1) end
  end
end
-- A subject's in-flight count is the field `s:<subject>` of the counters (read and written
-- with the others).
local function sf(s) return 's:' .. s end
-- Set by a fast path that found no lease due, so the full rules skip that look.
local nothing_due = false
-- The fast paths' look for due leases. The counters' `next_due` is a lower bound of every
-- lease deadline: the fast paths keep it (they add leases at `now + lease`, never below it,
-- or only remove them), and every other ticket script drops it first thing, before it may
-- add a lease anywhere. `stored` is its value; with none, or once it has passed, the first
-- lease is read (`empty`: the bound when there are no leases). Returns the bound: nothing
-- is due while it is above `now`.
local function due_bound(stored, empty)
  local nd = tonumber(stored)
  if nd and nd > now then return nd end
  local first = redis.call('ZRANGE', LEASES, 0, 0, 'WITHSCORES')
  return tonumber(first[2]) or empty
end
-- A new ticket admitted at once (Submit's fast path and full rules): the ticket and its lease
-- in one write each; the caller writes the counters. Returns its grant and deadline.
local function admit_new(key, subject, account, inst, run, grant, prio)
  local g, deadline = fmt(grant), fmt(now + L.lease)
  redis.call('HSET', B .. 't:' .. key, 'subject', subject, 'account', account,
             'instance', inst, 'run', run, 'state', ADMITTED, 'grant', g,
             'deadline', deadline, 'order', '0', 'qat', fmt(now), 'lvl', prio)
  redis.call('ZADD', LEASES, deadline, key)
  return g, deadline
end
-- A ticket that just ended: write its final state and when it is forgotten, keeping only what
-- an idempotent retry needs (its subject, account and instance are emptied in the same write:
-- cheaper than deleting the fields, and as small), let its keys expire a second after
-- retention, and remember it in `ended`, forgetting the oldest RETAIN_SLACK once
-- `max_retained` + RETAIN_SLACK are remembered (scheduler::RETAIN_SLACK).
-- Keep an ending for operators (scheduler::recent): the ticket ('' for a refused Submit), its
-- state ('' refused), run, subject, account, instance, key, superseding ticket, refusal
-- reason and time, joined by newlines (ids are printable ASCII). The list is trimmed back to
-- RECENT_ENDINGS once it holds RETAIN_SLACK more (a command saved on most endings); it is
-- read from its head.
local function note_end(k, state, run, subject, account, instance, kname, sby, reason)
  local r = B .. 'recent'
  local n = redis.call('LPUSH', r, table.concat({k, state, run, subject or '', account or '',
                                                 instance or '', kname or '', sby or '', reason,
                                                 fmt(now)}, '\n'))
  if n >= RECENT_ENDINGS + RETAIN_SLACK then redis.call('LTRIM', r, 0, RECENT_ENDINGS - 1) end
end
-- `who`: the ticket's subject, account, instance and key, as `ticket` reads them (read here
-- when the caller has not); a superseded ticket's superseding one is read here (it was named
-- just before the ticket ended).
local function retire(k, tk, run, state, who)
  who = who or redis.call('HMGET', tk, 'subject', 'account', 'instance', 'key')
  local sby = state == SUPERSEDED and redis.call('HGET', tk, 'sby') or ''
  note_end(k, state, run, who[1], who[2], who[3], who[4], sby, '')
  -- Remembered for retention (`ticket` forgets it then, by the scripts' time).
  redis.call('HSET', tk, 'state', state, 'deadline', fmt(now + L.retention), 'subject', '',
             'account', '', 'instance', '')
  local keep = fmt(L.retention + 1000)
  redis.call('PEXPIRE', tk, keep)
  redis.call('PEXPIRE', B .. 'run:' .. run, keep)
  local ended = B .. 'ended'
  if redis.call('RPUSH', ended, k) >= L.max_retained + RETAIN_SLACK then
    for _, old in ipairs(redis.call('LPOP', ended, RETAIN_SLACK)) do
      local otk = B .. 't:' .. old
      local orun = redis.call('HGET', otk, 'run')
      redis.call('DEL', otk)
      if orun and redis.call('GET', B .. 'run:' .. orun) == old then
        redis.call('DEL', B .. 'run:' .. orun)
      end
    end
  end
end
