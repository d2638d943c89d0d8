-- `arg` as now in ms: 0 means Redis TIME (the scripts that take their now as an argument).
local function now_ms(arg)
  local now = tonumber(arg)
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
