-- `arg` as now in ms: 0 means Redis TIME. Every script that takes its now as an argument
-- begins with this (tests pass a frozen time; production passes 0).
local function now_of(arg)
  local n = tonumber(arg)
  if n == 0 then
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return n
end
