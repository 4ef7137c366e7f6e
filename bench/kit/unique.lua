-- compare.py's cache-miss scenario: every request's target is new (the URL given, with
-- ?n=<run>-<counter>), so that a cache misses on each. The run's prefix keeps a later run (the
-- measured one after the warm-up) from asking for what an earlier one stored.
local prefix
local counter = 0

init = function(args)
  math.randomseed(os.time() + math.floor(os.clock() * 1e6))
  prefix = string.format("%d%06d", os.time(), math.random(0, 999999))
end

request = function()
  counter = counter + 1
  return wrk.format(nil, wrk.path .. "?n=" .. prefix .. "-" .. counter)
end
