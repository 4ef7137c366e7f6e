-- The `wrk` table of wrk's scripting API (wg/wrk, SCRIPTING), as `lowlat load -s` provides it.
--
-- Loaded into every Lua state before the user's script. lowlat fills in `scheme`, `host`,
-- `port`, `path`, `method`, `body` and `headers` from the command line and adds `lookup`,
-- `connect` and `thread` (Rust functions and userdata) before the script runs. The chunk returns
-- the table and the functions lowlat itself calls; these are not reachable from the script.

local wrk = {
   scheme  = "http",
   host    = "localhost",
   port    = nil,
   method  = "GET",
   path    = "/",
   headers = {},
   body    = nil,
   thread  = nil,
}

local concat, pairs, next, type = table.concat, pairs, next, type

-- One request as bytes: each argument left nil takes its value from the `wrk` table. As in wrk,
-- the header table it uses gets `Host` (when missing) and `Content-Length` (set from the body,
-- removed without one) written into it, and the fields go out in `pairs()` order. Built with
-- one concat of the pieces, in one table kept between calls (pieces past `n` are left from an
-- earlier call and not used): about half the time of wrk's one `string.format` per line and a
-- new table per call.
local pieces = {}
function wrk.format(method, path, headers, body)
   method  = method  or wrk.method
   path    = path    or wrk.path
   headers = headers or wrk.headers
   body    = body    or wrk.body
   if not headers["Host"] then
      headers["Host"] = wrk.headers["Host"]
   end
   headers["Content-Length"] = body and string.len(body)
   local s = pieces
   s[1], s[2], s[3], s[4] = method, " ", path, " HTTP/1.1\r\n"
   local n = 4
   for name, value in pairs(headers) do
      s[n + 1], s[n + 2], s[n + 3], s[n + 4] = name, ": ", value, "\r\n"
      n = n + 4
   end
   s[n + 1] = "\r\n"
   s[n + 2] = body or ""
   return concat(s, "", 1, n + 2)
end

-- wrk's `wrk.resolve(host, service)`: the addresses that accept a connection, as `wrk.addrs`.
function wrk.resolve(host, service)
   local addrs = wrk.lookup(host, service)
   for i = #addrs, 1, -1 do
      if not wrk.connect(addrs[i]) then
         table.remove(addrs, i)
      end
   end
   wrk.addrs = addrs
end

-- A thread's start, in its own state: the default `Host`, the script's `init(args)`, then the
-- request every `wrk.request()` returns, built once from the table as `init` left it.
local function start(args)
   if not wrk.headers["Host"] then
      local host, port = wrk.host, wrk.port
      if host:find(":") then
         host = "[" .. host .. "]"
      end
      if port then
         host = host .. ":" .. port
      end
      wrk.headers["Host"] = host
   end
   if type(init) == "function" then
      init(args)
   end
   local req = wrk.format()
   wrk.request = function()
      return req
   end
end

-- The calls lowlat makes for each send and each response, looked up at every call like wrk.

-- request(): its result, or `true` when it is the very string of the last call (strings are
-- interned, so `==` on strings is one pointer compare): lowlat then sends the bytes it already
-- has and checked, instead of copying and parsing them again (wrk's pipeline.lua returns the
-- same string every time). A number is taken as its string, as wrk takes it; anything else
-- comes back as `{ type name }`, for lowlat to refuse.
local last_request
local function call_request()
   local r = _G.request()
   local t = type(r)
   if t == "number" then
      r = tostring(r)
   elseif t ~= "string" then
      return { t }
   end
   if r == last_request then
      return true
   end
   last_request = r
   return r
end

local function call_delay()
   return _G.delay()
end

-- response(status, headers, body) with a fresh header table, copied from `template` (the fields
-- of the head, made once per distinct head), so that the script may keep or change it. The
-- template, its size and the body are set by `set_response` only when they change.
local new_table = require("table.new")
local template, fields, body = {}, 0, ""

local function set_response(t, n, b)
   if t then
      template, fields = t, n
   end
   if b then
      body = b
   end
end

local function call_response(status)
   local headers = new_table(0, fields)
   for name, value in next, template do
      headers[name] = value
   end
   return _G.response(status, headers, body)
end

-- For a response() that takes at most the status: nothing to build. Returns true when the
-- script has since replaced response() with one that may want more (call_response then).
local function call_response_light(expected)
   return function(status)
      local f = _G.response
      if f ~= expected then
         return true
      end
      f(status)
      return false
   end
end

return wrk, start, call_request, call_delay, call_response, set_response, call_response_light
