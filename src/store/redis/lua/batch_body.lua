-- Several Submits and Releases of one host in one call, applied in order (the coalescer,
-- src/store/redis/coalesce.rs, sends those that arrived while the host's previous call was on
-- its way). ARGV[5] how many; from ARGV[6] each one: 's' and Submit's ARGV[5..13] (9 values:
-- key, instance, subject, account, run_id, mode, rss_mb, priority, epoch), or 'r' and
-- Release's ARGV[5..8] (4 values).
-- Each is decided by its fast path (submit_fast.lua, release_fast.lua). The first one whose
-- fast path does not apply, and every one after it, is answered 0 and changed nothing: the
-- caller runs those alone with the full rules, in order, before anything else of the host.
-- So every answer is the one the operations would have had one by one in this order.
-- Returns one answer per operation: the fast path's (as the Submit or Release script answers),
-- or 0.
local out, i = {}, 6
local bail = false
for n = 1, tonumber(ARGV[5]) do
  local r = nil
  if ARGV[i] == 's' then
    if not bail then
      r = submit_fast(ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5],
                      ARGV[i + 8], ARGV[i + 9])
    end
    i = i + 10
  else
    if not bail then r = release_fast(ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]) end
    i = i + 5
  end
  if r == nil then
    bail = true
    r = 0
  end
  out[n] = r
end
return out
