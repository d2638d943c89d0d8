-- Read or change a host's limits of record (GetLimits, SetLimits, ResetLimits).
--
-- ARGV[5] what to do: `get`, `set` or `reset`; ARGV[6] the revision the limits must be at
-- (0: any); for `set`, ARGV[7] the operator's limits as scalars (without a version) and ARGV[8]
-- their caps as JSON (as ARGV[2] and ARGV[4]).
-- Returns {'ok', source, revision, scalars, caps...} (source `file` or `operator`; the caps as
-- the stats script answers them) or {'moved', revision}.
--
-- The counters' `rev` counts the changes of the limits of record (resolve_limits bumps it when
-- a newer replica's file replaces them). An operator's limits get a version of at least
-- OPERATOR_LIMITS (2^52, above any start time in µs), so no replica's file replaces them;
-- `reset` puts the caller's file back with the caller's version.
local what, expected = ARGV[5], tonumber(ARGV[6])
local rev = cnt('rev')
if what ~= 'get' and expected ~= 0 and expected ~= rev then return {'moved', rev} end
local lv = cnt('lv')
local function put(scalars, caps, version)
  LIMITS_S, LIMITS_M = scalars, caps
  L = limits_of(scalars, caps)
  redis.call('HSET', C, 'lv', fmt(version), 'ls', scalars, 'lm', caps)
  lv = version
  rev = redis.call('HINCRBY', C, 'rev', 1)
  -- New limits start every subject's turn afresh (weights may have changed).
  redis.call('DEL', WC)
  WEIGHTED = next(L.weights) ~= nil
  -- A raised cap admits waiters at once; a lowered one revokes nothing.
  housekeeping(false)
  dispatch()
end
if what == 'set' then
  put(ARGV[7], ARGV[8], math.max(lv, OPERATOR_LIMITS) + 1)
elseif what == 'reset' and lv >= OPERATOR_LIMITS then
  local mine_v, mine_s = string.match(ARGV[2], '^(%d+),(.*)$')
  put(mine_s, ARGV[4], tonumber(mine_v))
end
local out = {'ok', lv >= OPERATOR_LIMITS and 'operator' or 'file', rev}
append_limits(out)
return out
