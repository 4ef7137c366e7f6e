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

-- response(status, headers, body) with a fresh header table, so that the script may keep or
-- change it. A head seen once is copied from `template` (its fields, made once per distinct
-- head); a head that keeps coming back (a server repeats its heads byte for byte, bar a `Date`
-- once a second) gets `make`, a function compiled by lowlat whose one table constructor of
-- constants LuaJIT copies whole (TDUP: one allocation and a copy, no key hashed or inserted) —
-- a response() that only keeps its header table cost 2420 instructions per response over no
-- script with the copy in Lua, 1730 with `make` and the call below made through the C API
-- (callgrind, docs/PERFORMANCE.md). The template, its size, `make` and the body are set by
-- `set_response` only when they change.
local new_table = require("table.new")
local template, fields, make, body = {}, 0, nil, ""

local function set_response(t, n, b, m)
   if t then
      template, fields, make = t, n, nil
   end
   if b then
      body = b
   end
   if m then
      make = m
   end
end

local function call_response(status)
   local headers
   if make then
      headers = make()
   else
      headers = new_table(0, fields)
      for name, value in next, template do
         headers[name] = value
      end
   end
   return _G.response(status, headers, body)
end

-- For a response() that cannot read its headers or body: nothing to build. Returns true when
-- the script has since replaced response() with one that may want more (call_response then).
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

-- Whether `f` can read its 2nd and 3rd parameters (response()'s headers and body), from its
-- bytecode: a parameter is read when an instruction takes its slot as an operand (or a range
-- of slots from at or below it). A function with `...`, inner functions (which could capture
-- a parameter) or that is not Lua bytecode is taken to read both. A parameter that is never
-- read can be left nil unseen: wrk's setup.lua declares both and reads neither.
-- (`jit.util` and `bit` are taken before the script runs, which could replace them.)
local has_util, util = pcall(require, "jit.util")
local band, shr = bit.band, bit.rshift
local function reads_params(f)
   if not has_util or type(f) ~= "function" then
      return true, true
   end
   local info = util.funcinfo(f)
   if not info or info.ffid or info.addr or info.isvararg or info.children then
      return true, true
   end
   local read = {}
   local function operand(mode, v)
      -- BCMbase (2), BCMrbase (4): a range from v up; BCMvar (3): slot v.
      for slot = 1, 2 do
         if slot < info.params
            and ((mode == 3 and v == slot) or ((mode == 2 or mode == 4) and v <= slot)) then
            read[slot] = true
         end
      end
   end
   for pc = 1, info.bytecodes - 1 do
      local ins, m = util.funcbc(f, pc)
      if not ins then
         break
      end
      local ma, mb, mc = band(m, 7), band(shr(m, 3), 15), band(shr(m, 7), 15)
      local a = band(shr(ins, 8), 0xff)
      if ma == 4 and mb == 0 and mc == 6 then
         -- RET0, RET1, RET (rbase, lit): the D - 1 slots from A are returned. (Also JLOOP and
         -- the JFUNCs, whose A is at or above the first local.)
         for slot = 1, 2 do
            if slot < info.params and slot >= a and slot <= a + shr(ins, 16) - 2 then
               read[slot] = true
            end
         end
      elseif mb ~= 0 then
         operand(ma, a)
         operand(mb, shr(ins, 24))
         operand(mc, band(shr(ins, 16), 0xff))
      else
         operand(ma, a)
         operand(mc, shr(ins, 16))
      end
   end
   return read[1] or false, read[2] or false
end

-- The message handler of the calls lowlat makes through LuaJIT's C API: it keeps the error
-- and where it was raised, for `take_failure` to hand over once the call has returned.
local failure = {}
local function on_error(e)
   failure[1], failure[2] = e, debug.traceback("", 2)
   return e
end

local function take_failure()
   local e, where = failure[1], failure[2]
   failure[1], failure[2] = nil, nil
   return e, where or ""
end

return wrk, start, call_request, call_delay, call_response, set_response, call_response_light,
   reads_params, on_error, take_failure
