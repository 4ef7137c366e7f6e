//! One loader thread's Lua state during the run, and the calls its event loop makes into it:
//! `request()` for every batch a connection sends (only when the script defines it), `delay()`
//! before every send (only when defined), `response(status, headers, body)` for every response
//! (only when defined). A script without them costs its thread nothing per request.
//!
//! What keeps the calls cheap, measured against the ceiling responder (docs/PERFORMANCE.md,
//! "Lua scripts"):
//! - `request()` returning the very string it returned last time (wrk's pipeline.lua does) is
//!   neither copied out of Lua nor parsed again: the Lua side compares it with the last one
//!   (strings are interned: one pointer compare) and says "the same", and the bytes already
//!   checked are sent again.
//! - `response()`'s header table is filled in Lua from a template made once per distinct head
//!   (a server repeats its heads byte for byte, bar a `Date` once a second), instead of a string
//!   pushed from Rust for every name and value of every response; the head is not parsed again
//!   either. The template and the body are handed to Lua only when they change.
//! - A `response()` that declares no parameter beyond the status (wrk's stop.lua) gets neither
//!   table nor body.

use std::sync::Arc;
use std::time::Duration;

use lowlat_http::body::ChunkedDecoder;
use lowlat_http::client::{parse_response_head, ResponseBody, ResponseHead};
use lowlat_http::Status;
use mlua::{Function, Lua, Table, Value};

use super::control::ThreadControl;
use super::message::describe;
use super::wire::{self, Requests};
use crate::sys::{RawCall, RawValue};

/// Bodies up to this size are kept to reuse their Lua string when the next body is the same
/// (a copy of a few KiB is cheaper than hashing and interning them again); larger ones are
/// handed over as they come.
const REUSED_BODY_BYTES: usize = 4096;

/// After this many responses in a row with the same head, its header table gets a compiled
/// maker (`wrk.lua`'s `make`): compiling costs about as much as a few dozen copies, so a head
/// that comes once (a server whose every head differs) is only ever copied.
const MAKER_AFTER: u32 = 16;

/// A thread's Lua state and what its loop calls.
pub(crate) struct ThreadScript {
    lua: Lua,
    /// The script's file name, for messages.
    name: Arc<str>,
    control: Arc<ThreadControl>,
    /// `request()` and `response()`, called through the C API (see [`RawCall`]).
    call_request: RawCall,
    call_delay: Function,
    call_response: RawCall,
    set_response: Function,
    /// When `response()` cannot read its headers or body: the call that builds nothing.
    light_response: Option<RawCall>,
    light_response_factory: Function,
    reads_params: Function,
    /// The message handler of the raw calls, and what gives the error it kept.
    on_error: Function,
    take_failure: Function,
    flush: Function,
    /// The bytes `request()` returned last and the requests found in them.
    last_request: Vec<u8>,
    requests: Requests,
    /// The last response's bytes up to the end of its final head (interim heads included),
    /// whether it answered a `HEAD`, and what the head said; its header table is in Lua.
    head: Vec<u8>,
    head_for_head: bool,
    parsed_head: Option<ResponseHead>,
    /// Responses since the head last changed (counted up to [`MAKER_AFTER`]).
    head_repeats: u32,
    /// The last body handed to Lua (when at most [`REUSED_BODY_BYTES`]).
    body: Option<Vec<u8>>,
    /// A chunked body, decoded.
    decoded: Vec<u8>,
}

/// The functions of the embedded `wrk.lua` chunk that the loop calls.
pub(crate) struct Calls {
    pub request: Function,
    pub delay: Function,
    pub response: Function,
    pub set_response: Function,
    pub light_response_factory: Function,
    pub reads_params: Function,
    pub on_error: Function,
    pub take_failure: Function,
}

impl ThreadScript {
    pub fn new(
        lua: Lua,
        name: Arc<str>,
        control: Arc<ThreadControl>,
        calls: Calls,
    ) -> mlua::Result<Self> {
        let flush = lua
            .load("return function() pcall(io.stdout.flush, io.stdout) end")
            .set_name("=lowlat")
            .eval()?;
        let call_request = RawCall::new(&lua, &calls.request, &calls.on_error)?;
        let call_response = RawCall::new(&lua, &calls.response, &calls.on_error)?;
        Ok(Self {
            lua,
            name,
            control,
            call_request,
            call_delay: calls.delay,
            call_response,
            set_response: calls.set_response,
            light_response: None,
            light_response_factory: calls.light_response_factory,
            reads_params: calls.reads_params,
            on_error: calls.on_error,
            take_failure: calls.take_failure,
            flush,
            last_request: Vec::new(),
            requests: Requests::default(),
            head: Vec::new(),
            head_for_head: false,
            parsed_head: None,
            head_repeats: 0,
            body: None,
            decoded: Vec::new(),
        })
    }

    pub fn lua(&self) -> &Lua {
        &self.lua
    }

    /// Looks at `response` once `init()` has run (it may define or replace it).
    ///
    /// # Errors
    /// When the bytecode cannot be looked at (the script replaced `require` or `jit.util`).
    pub fn after_init(&mut self) -> mlua::Result<()> {
        self.light_response =
            match light_response(&self.lua, &self.light_response_factory, &self.reads_params)? {
                Some(f) => Some(RawCall::new(&self.lua, &f, &self.on_error)?),
                None => None,
            };
        Ok(())
    }

    /// Where the thread's connections go.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.control.addr()
    }

    /// `thread:stop()` was called (from this thread's script or from `setup()`).
    pub fn stopped(&self) -> bool {
        self.control.stopped()
    }

    /// Calls `request()` and appends what it returned to `out`; returns where each of its
    /// requests ends (relative to where it starts in `out`).
    ///
    /// # Errors
    /// The script's error, or its result when it is not complete HTTP/1.x requests: one line
    /// naming the script.
    pub fn request(&mut self, out: &mut Vec<u8>) -> Result<&Requests, String> {
        let (last, checked) = (&mut self.last_request, !self.requests.ends.is_empty());
        let outcome = self.call_request.call(None, |value| match value {
            // The string of the last call: checked already.
            RawValue::Bool(true) if checked => Ok(false),
            RawValue::Str(bytes) => {
                last.clear();
                last.extend_from_slice(bytes);
                Ok(true)
            }
            // Anything but a string or a number, by its type name.
            RawValue::Table(kind) => Err(format!(
                "{}, not a string",
                String::from_utf8_lossy(kind.unwrap_or_default())
            )),
            RawValue::Nil => Err("nil, not a string".to_owned()),
            RawValue::Bool(_) => Err("boolean, not a string".to_owned()),
            RawValue::Other => Err("a value that is not a string".to_owned()),
        });
        let fresh = match outcome {
            None => return Err(self.failure()),
            Some(Err(what)) => return Err(self.refused(&what)),
            Some(Ok(fresh)) => fresh,
        };
        if fresh {
            wire::split(&self.last_request, &mut self.requests).map_err(|e| {
                format!(
                    "{}: request() must return complete HTTP/1.1 requests: {e}",
                    self.name
                )
            })?;
        }
        out.extend_from_slice(&self.last_request);
        Ok(&self.requests)
    }

    /// The error a raw call raised, as one line (what its message handler kept).
    fn failure(&self) -> String {
        let (error, traceback): (Value, String) = match self.take_failure.call(()) {
            Ok(kept) => kept,
            Err(e) => return describe(&e, &self.name),
        };
        let error = match error {
            Value::Error(cause) => mlua::Error::CallbackError {
                traceback,
                cause: Arc::new(*cause),
            },
            Value::String(s) => {
                mlua::Error::RuntimeError(format!("{}\n{traceback}", s.to_string_lossy()))
            }
            Value::Nil => mlua::Error::RuntimeError("not enough memory".to_owned()),
            other => mlua::Error::RuntimeError(format!(
                "{}\n{traceback}",
                other
                    .to_string()
                    .unwrap_or_else(|_| other.type_name().to_owned())
            )),
        };
        describe(&error, &self.name)
    }

    fn refused(&self, what: &str) -> String {
        format!(
            "{}: request() must return complete HTTP/1.1 requests, not {what}",
            self.name
        )
    }

    /// Calls `delay()`: how long to wait before the next send (milliseconds in Lua).
    ///
    /// # Errors
    /// The script's error, or a result that is not a number.
    pub fn delay(&mut self) -> Result<Duration, String> {
        let value: Value = self
            .call_delay
            .call(())
            .map_err(|e| describe(&e, &self.name))?;
        let ms = self
            .lua
            .coerce_number(value)
            .ok()
            .flatten()
            .ok_or_else(|| format!("{}: delay() must return a number", self.name))?;
        // wrk reads the number as unsigned milliseconds; a negative or NaN delay is none.
        Ok(if ms > 0.0 && ms.is_finite() {
            Duration::from_secs_f64((ms / 1000.0).min(86_400.0))
        } else {
            Duration::ZERO
        })
    }

    /// Calls `response(status, headers, body)` for one HTTP/1.x response: `raw` is all of its
    /// bytes (interim `1xx` heads, the final head, the body as framed on the wire);
    /// `request_was_head` says the request was `HEAD`.
    ///
    /// # Errors
    /// The script's error, as one line.
    pub fn response(
        &mut self,
        status: u16,
        raw: &[u8],
        request_was_head: bool,
    ) -> Result<(), String> {
        if !self.light(status)? {
            return Ok(());
        }
        // The head of the last response again (a pure function of its bytes): neither parsed
        // nor made into a table again.
        let head = match self.parsed_head {
            Some(head) if request_was_head == self.head_for_head && raw.starts_with(&self.head) => {
                if self.head_repeats < MAKER_AFTER {
                    self.head_repeats += 1;
                    if self.head_repeats == MAKER_AFTER {
                        let fields = &self.head[self.head.len() - head.head_len..];
                        let source = maker_source(fields);
                        self.lua
                            .load(source)
                            .set_name("=lowlat")
                            .eval::<Function>()
                            .and_then(|make| {
                                self.set_response.call::<()>((
                                    Value::Nil,
                                    Value::Nil,
                                    Value::Nil,
                                    make,
                                ))
                            })
                            .map_err(|e| describe(&e, &self.name))?;
                    }
                }
                head
            }
            _ => {
                let (end, head) = final_head(raw, request_was_head);
                head_table(&self.lua, &raw[end - head.head_len..end])
                    .and_then(|(t, n)| self.set_response.call::<()>((t, n, Value::Nil)))
                    .map_err(|e| describe(&e, &self.name))?;
                self.head.clear();
                self.head.extend_from_slice(&raw[..end]);
                self.head_for_head = request_was_head;
                self.parsed_head = Some(head);
                self.head_repeats = 0;
                head
            }
        };
        let rest = &raw[self.head.len()..];
        let mut decoded = std::mem::take(&mut self.decoded);
        let body = match head.body {
            ResponseBody::None => &[][..],
            ResponseBody::Length(_) | ResponseBody::UntilClose => rest,
            ResponseBody::Chunked => {
                decoded.clear();
                let _ =
                    ChunkedDecoder::new(u64::MAX).decode(rest, |d| decoded.extend_from_slice(d));
                &decoded[..]
            }
        };
        let result = self.call_full(status, body);
        self.decoded = decoded;
        result
    }

    /// Calls `response(status, headers, body)` for one HTTP/2 response: its fields (pseudo-fields
    /// left out) and its body.
    ///
    /// # Errors
    /// The script's error, as one line.
    pub fn response_fields(
        &mut self,
        status: u16,
        fields: &[(Vec<u8>, Vec<u8>)],
        body: &[u8],
    ) -> Result<(), String> {
        if !self.light(status)? {
            return Ok(());
        }
        (|| {
            let t = self.lua.create_table_with_capacity(0, fields.len())?;
            for (name, value) in fields {
                if !name.starts_with(b":") {
                    t.raw_set(
                        self.lua.create_string(name)?,
                        self.lua.create_string(value)?,
                    )?;
                }
            }
            self.set_response.call::<()>((t, fields.len(), Value::Nil))
        })()
        .map_err(|e: mlua::Error| describe(&e, &self.name))?;
        self.parsed_head = None;
        self.call_full(status, body)
    }

    /// The call for a `response()` that takes at most the status; whether the full call is
    /// still needed.
    fn light(&mut self, status: u16) -> Result<bool, String> {
        match &self.light_response {
            Some(light) => light
                .call(Some(status), |more| more == RawValue::Bool(true))
                .ok_or_else(|| self.failure()),
            None => Ok(true),
        }
    }

    /// Hands the body to Lua when it is not the last one's, then calls `response()`.
    fn call_full(&mut self, status: u16, body: &[u8]) -> Result<(), String> {
        if self.body.as_deref() != Some(body) {
            let s = self
                .lua
                .create_string(body)
                .map_err(|e| describe(&e, &self.name))?;
            self.set_response
                .call::<()>((Value::Nil, Value::Nil, s))
                .map_err(|e| describe(&e, &self.name))?;
            match &mut self.body {
                Some(b) if body.len() <= REUSED_BODY_BYTES => {
                    b.clear();
                    b.extend_from_slice(body);
                }
                _ if body.len() <= REUSED_BODY_BYTES => self.body = Some(body.to_vec()),
                _ => self.body = None,
            }
        }
        self.call_response
            .call(Some(status), |_| ())
            .ok_or_else(|| self.failure())
    }

    /// Writes out what the script printed (C's stdio buffers it; the report is written by Rust).
    pub fn flush_output(&self) {
        let _ = self.flush.call::<()>(());
    }
}

/// The light call when the script's `response` (as it is now) cannot read its header table or
/// its body (`wrk.lua`'s `reads_params`: it declares no such parameter, or its bytecode never
/// reads them).
fn light_response(
    lua: &Lua,
    factory: &Function,
    reads_params: &Function,
) -> mlua::Result<Option<Function>> {
    let Value::Function(response) = lua.globals().get::<Value>("response")? else {
        return Ok(None);
    };
    let (headers, body): (bool, bool) = reads_params.call(response.clone())?;
    if headers || body {
        Ok(None)
    } else {
        Ok(Some(factory.call(response)?))
    }
}

/// Lua source of a function that returns the header fields of `head` as a new table: one
/// constructor of constant strings, which LuaJIT keeps as a template and copies whole (`TDUP`).
/// Of repeated names the last wins, as in [`head_table`].
fn maker_source(head: &[u8]) -> String {
    let mut fields = [httparse::EMPTY_HEADER; lowlat_http::limits::MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut fields);
    let _ = resp.parse(head);
    let mut source = String::from("return function() return {");
    for (i, h) in resp.headers.iter().enumerate() {
        if resp.headers[i + 1..]
            .iter()
            .any(|later| later.name == h.name)
        {
            continue;
        }
        source.push('[');
        lua_string(&mut source, h.name.as_bytes());
        source.push_str("]=");
        lua_string(&mut source, h.value);
        source.push(',');
    }
    source.push_str("} end");
    source
}

/// `bytes` as a Lua string literal: printable ASCII as is, anything else as a decimal escape
/// (three digits, so that a digit after it is not taken into it).
fn lua_string(out: &mut String, bytes: &[u8]) {
    use std::fmt::Write as _;
    out.push('"');
    for &b in bytes {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(b));
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\{b:03}");
            }
        }
    }
    out.push('"');
}

/// Where the final head of a response ends (after any interim `1xx` heads) and what it says.
fn final_head(raw: &[u8], request_was_head: bool) -> (usize, ResponseHead) {
    let mut at = 0;
    // The reader framed these bytes already: every head parses.
    while let Ok(Status::Complete(head)) = parse_response_head(&raw[at..], request_was_head) {
        at += head.head_len;
        if !head.is_interim() {
            return (at, head);
        }
    }
    let none = ResponseHead {
        version: lowlat_http::Version::Http11,
        status: 0,
        body: ResponseBody::None,
        keep_alive: true,
        head_len: 0,
        content_length: None,
    };
    (raw.len(), none)
}

/// The header fields of `head` as a table of name → value, names as sent (of repeated fields
/// the last wins, as in wrk), and how many there are.
fn head_table(lua: &Lua, head: &[u8]) -> mlua::Result<(Table, usize)> {
    let mut fields = [httparse::EMPTY_HEADER; lowlat_http::limits::MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut fields);
    let _ = resp.parse(head);
    let t = lua.create_table_with_capacity(0, resp.headers.len())?;
    for h in resp.headers.iter() {
        t.raw_set(lua.create_string(h.name)?, lua.create_string(h.value)?)?;
    }
    Ok((t, resp.headers.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_heads_skip_interim_ones() {
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
        let (end, head) = final_head(raw, false);
        assert_eq!(&raw[end..], b"hi");
        assert_eq!((head.status, head.body), (200, ResponseBody::Length(2)));
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(final_head(raw, true).1.body, ResponseBody::None);
    }

    /// The compiled maker gives the table the copy gives: names as sent, the last of repeated
    /// names, any byte of a value.
    #[test]
    fn made_header_tables_equal_copied_ones() {
        let lua = crate::sys::lua_with_all_libraries();
        let head =
            b"HTTP/1.1 200 OK\r\nServer: C\r\nX-A: 1\r\nx-a: \"q\\\x01\xff9\r\nX-A: 2\r\n\r\n";
        let (copied, _) = head_table(&lua, head).unwrap();
        let make: Function = lua.load(maker_source(head)).eval().unwrap();
        let made: Table = make.call(()).unwrap();
        let pairs = |t: &Table| {
            let mut v: Vec<(Vec<u8>, Vec<u8>)> = t
                .pairs::<mlua::LuaString, mlua::LuaString>()
                .map(|p| {
                    let (k, v) = p.unwrap();
                    (k.as_bytes().to_vec(), v.as_bytes().to_vec())
                })
                .collect();
            v.sort();
            v
        };
        assert_eq!(pairs(&made), pairs(&copied));
        assert_eq!(pairs(&made).len(), 3);
        let again: Table = make.call(()).unwrap();
        assert!(!again.equals(&made).unwrap(), "a fresh table per call");
    }

    /// Which of response()'s headers and body a function can read, from its bytecode.
    #[test]
    fn parameters_read_are_found() {
        let lua = crate::sys::lua_with_all_libraries();
        #[allow(clippy::type_complexity)]
        let (.., reads, _, _): (
            Value,
            Value,
            Value,
            Value,
            Value,
            Value,
            Value,
            Function,
            Value,
            Value,
        ) = lua.load(super::super::WRK_LUA).eval().unwrap();
        let cases: &[(&str, (bool, bool))] = &[
            ("function(s) end", (false, false)),
            ("function(s, h, b) n = (n or 0) + 1 end", (false, false)),
            ("function(s, h, b) return h end", (true, false)),
            (
                "function(s, h, b) if s == 200 then t = h['X-Token'] end end",
                (true, false),
            ),
            ("function(s, h, b) print(#b) end", (false, true)),
            ("function(s, h, b) local x = h x = nil end", (true, false)),
            ("function(s, h, b) return s .. b end", (false, true)),
            ("function(s, h, b) f(s, h, b) end", (true, true)),
            (
                "function(s, h, b) return function() return h end end",
                (true, true),
            ),
            ("function(...) end", (true, true)),
            (
                "function(s) local a, b = 1, 2 return a + b end",
                (false, false),
            ),
            (
                "function(s, h, b) for i = 1, 9 do x = i end return s end",
                (false, false),
            ),
            ("function(s, h, b) return s, h end", (true, false)),
            ("print", (true, true)),
        ];
        for (source, want) in cases {
            let f: Function = lua.load(format!("return {source}")).eval().unwrap();
            let got: (bool, bool) = reads.call(f).unwrap();
            assert_eq!(got, *want, "{source}");
        }
    }
}
