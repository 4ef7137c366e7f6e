//! `lowlat load -s script.lua`: wrk's Lua scripting API (wg/wrk, SCRIPTING), so that wrk's
//! scripts run unchanged, on LuaJIT as in wrk.
//!
//! As in wrk there is a main state, where `setup(thread)` runs once per loader thread before the
//! run and `done(summary, latency, requests)` after it, and one state per loader thread, driven
//! by that thread's own event loop: `init(args)` before the run, then `delay()`, `request()` and
//! `response(status, headers, body)` as it sends and receives. Each state has the global `wrk`
//! table (`scheme`, `host`, `port`, `method`, `path`, `headers`, `body`, `thread`, `format()`,
//! `lookup()`, `connect()`; `wrk.lua` beside this file).
//!
//! Before the run ([`start`]), in wrk's order: the main state loads the script; for each thread,
//! its state loads the script, `setup(thread)` runs in the main state, and the thread's state
//! runs `init(args)` and builds the request of the `wrk` table; thread 1's `request()` is then
//! called once and its result checked (not sent, as in wrk): how many requests it holds is the
//! pipeline depth of a batch. A script without a `request()` function has each thread's request
//! built once and sent like a request of the command line, at no cost per request.
//!
//! Not here: when the calls happen (the worker's loop) and what the threads send without a
//! script (`request`).
//!
//! # Layout
//! - `calls`: a thread's state during the run and the calls its loop makes (the hot path).
//! - `thread`: the `thread` objects, addresses, and values copied between states.
//! - `control`: what a thread and the scripts share (stop, address).
//! - `stats`: the statistics objects of `done()`.
//! - `wire`: what `request()` returned, checked and split into requests; HTTP/2 fields.
//! - `message`: a script's error as one line.

mod calls;
mod control;
mod message;
mod stats;
mod thread;
pub(crate) mod wire;

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mlua::{Function, Lua, Table, Value};

use calls::Calls;
pub(crate) use calls::ThreadScript;
use control::ThreadControl;
pub(crate) use message::describe;
use thread::{Addr, OwnThread, ThreadHandle, ThreadSlot};
pub(crate) use wire::Requests;

use crate::error::LoadError;
use crate::report::Report;

/// The `wrk` table and the functions lowlat calls, loaded into every state first.
const WRK_LUA: &str = include_str!("wrk.lua");

/// How long `wrk.connect(addr)` waits for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The target as the `wrk` table shows it.
#[derive(Debug, Clone)]
pub(crate) struct Target<'a> {
    /// The URL as given (`init`'s `args[0]`, as in wrk).
    pub url: &'a str,
    pub scheme: &'a str,
    /// The host, without the brackets of an IPv6 address.
    pub host: &'a str,
    /// The port as written in the URL; `None` when it was not.
    pub port: Option<u16>,
    /// The request-target: the path and the query.
    pub path: &'a str,
    /// Where the threads connect unless `setup()` says otherwise (`thread.addr`).
    pub addr: SocketAddr,
}

/// What a script starts from.
#[derive(Debug, Clone)]
pub(crate) struct Inputs<'a> {
    pub file: &'a Path,
    /// The arguments after `--`.
    pub args: &'a [String],
    pub target: Target<'a>,
    /// `-X`, `--body`, `-H`: the `wrk` table's `method`, `body` and `headers` before the
    /// script runs.
    pub method: &'a str,
    pub body: Option<&'a [u8]>,
    pub headers: &'a [(String, String)],
    pub threads: usize,
}

/// The main state and the threads' states, for the whole run.
pub(crate) struct Script {
    main: Lua,
    /// The script's file name, for messages.
    name: Arc<str>,
    slots: Vec<Arc<ThreadSlot>>,
    /// The first error a thread's script raised during the run.
    error: Mutex<Option<String>>,
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Script")
            .field("name", &self.name)
            .field("threads", &self.slots.len())
            .finish_non_exhaustive()
    }
}

/// A script set up for the run.
#[derive(Debug)]
pub(crate) struct Started {
    pub script: Arc<Script>,
    /// Per thread: where it connects, and (without `request()`) the request bytes it sends.
    pub threads: Vec<StartedThread>,
    /// The requests in thread 1's checked `request()` result: the batch of one send.
    pub per_call: usize,
    /// `request()` is called for every send.
    pub dynamic: bool,
    /// `delay()` is called before every send.
    pub delay: bool,
    /// `response()` is called for every response.
    pub response: bool,
}

/// One thread of a [`Started`] script.
#[derive(Debug)]
pub(crate) struct StartedThread {
    pub addr: SocketAddr,
    /// Without `request()`: the thread's request bytes (from `wrk.request()`), and where each of
    /// their requests ends.
    pub requests: Option<(Vec<u8>, Requests)>,
}

/// Loads the script into the main state and one state per thread, runs `setup()` and `init()`
/// in wrk's order, and checks the first `request()`.
///
/// # Errors
/// [`LoadError::Script`]: the file cannot be read, the script fails (file, line and message),
/// or its request is not complete HTTP/1.x requests.
pub(crate) fn start(inputs: &Inputs<'_>) -> Result<Started, LoadError> {
    let source = std::fs::read(inputs.file)
        .map_err(|e| LoadError::Script(format!("cannot read {}: {e}", inputs.file.display())))?;
    let name: Arc<str> = inputs.file.display().to_string().into();
    let fail = |e: mlua::Error| LoadError::Script(describe(&e, &name));
    let main = State::new(&source, &name, inputs, None).map_err(fail)?;
    main.wrk
        .raw_set(
            "addrs",
            main.lua
                .create_sequence_from([Addr(inputs.target.addr)])
                .map_err(fail)?,
        )
        .map_err(fail)?;
    let setup = function(&main.lua, "setup").map_err(fail)?;
    let flush = |lua: &Lua| {
        let _ = lua.load("pcall(io.stdout.flush, io.stdout)").exec();
    };
    let mut slots = Vec::with_capacity(inputs.threads);
    let mut threads = Vec::with_capacity(inputs.threads);
    let mut first = None;
    for i in 0..inputs.threads {
        let control = Arc::new(ThreadControl::new(inputs.target.addr));
        let state = State::new(&source, &name, inputs, Some(&control)).map_err(fail)?;
        let args = state.lua.create_table().map_err(fail)?;
        args.raw_set(0, inputs.target.url).map_err(fail)?;
        for (n, a) in inputs.args.iter().enumerate() {
            args.raw_set(n + 1, a.as_str()).map_err(fail)?;
        }
        let slot = Arc::new(ThreadSlot {
            control: Arc::clone(&control),
            script: Mutex::new(None),
        });
        let State {
            lua,
            wrk,
            start,
            calls,
        } = state;
        slot.put(ThreadScript::new(lua, Arc::clone(&name), control, calls).map_err(fail)?);
        if let Some(setup) = &setup {
            setup
                .call::<()>(ThreadHandle(Arc::clone(&slot)))
                .map_err(fail)?;
            flush(&main.lua);
        }
        let mut script = slot.take().ok_or(LoadError::ThreadPanicked)?;
        start.call::<()>(args).map_err(fail)?;
        script.after_init().map_err(fail)?;
        if i == 0 {
            first = Some(check_first(&mut script, &name)?);
        }
        let requests = match first {
            Some((_, true, _, _)) | None => None,
            Some((_, false, _, _)) => {
                let request: Function = wrk.get("request").map_err(fail)?;
                let value: mlua::LuaString = request.call(()).map_err(fail)?;
                let bytes = value.as_bytes().to_vec();
                let mut split = Requests::default();
                wire::split(&bytes, &mut split).map_err(|e| {
                    LoadError::Script(format!(
                        "{name}: the request of the wrk table is not complete HTTP/1.1 requests: {e}"
                    ))
                })?;
                Some((bytes, split))
            }
        };
        script.flush_output();
        threads.push(StartedThread {
            addr: script.addr(),
            requests,
        });
        slot.put(script);
        slots.push(slot);
    }
    let (mut per_call, dynamic, delay, response) = first.ok_or(LoadError::ThreadPanicked)?;
    if !dynamic {
        per_call = threads
            .first()
            .and_then(|t| t.requests.as_ref())
            .map_or(1, |(_, r)| r.len());
    }
    Ok(Started {
        script: Arc::new(Script {
            main: main.lua,
            name,
            slots,
            error: Mutex::new(None),
        }),
        threads,
        per_call,
        dynamic,
        delay,
        response,
    })
}

/// Thread 1's `request()`, called once and checked (its result is not sent, as in wrk), and
/// which of the script's functions the loop calls: (requests per batch, `request()`,
/// `delay()`, `response()`).
fn check_first(
    script: &mut ThreadScript,
    name: &str,
) -> Result<(usize, bool, bool, bool), LoadError> {
    let fail = |e: mlua::Error| LoadError::Script(describe(&e, name));
    let lua = script.lua();
    let dynamic = function(lua, "request").map_err(fail)?.is_some();
    let delay = function(lua, "delay").map_err(fail)?.is_some();
    let response = function(lua, "response").map_err(fail)?.is_some();
    let per_call = if dynamic {
        script
            .request(&mut Vec::new())
            .map_err(LoadError::Script)?
            .len()
    } else {
        // Counted from each thread's own request by the caller.
        0
    };
    Ok((per_call, dynamic, delay, response))
}

/// The global `name` when it is a function.
fn function(lua: &Lua, name: &str) -> mlua::Result<Option<Function>> {
    Ok(match lua.globals().get::<Value>(name)? {
        Value::Function(f) => Some(f),
        _ => None,
    })
}

impl Script {
    /// Thread `i`'s state, locked for one turn of its loop. Between turns the main state's
    /// `thread:get()` and `thread:set()` reach it (wrk reads a running thread's state from
    /// `setup()` of the threads after it; here they all wait for the lock instead of racing).
    pub fn lock(&self, i: usize) -> Option<std::sync::MutexGuard<'_, Option<ThreadScript>>> {
        self.slots.get(i).map(|s| s.lock())
    }

    /// A thread's script failed: the first message is kept, to end the run with.
    pub fn fail(&self, message: String) {
        let mut error = self.error.lock().unwrap_or_else(PoisonError::into_inner);
        if error.is_none() {
            *error = Some(message);
        }
    }

    /// The first error a thread's script raised during the run.
    pub fn error(&self) -> Option<String> {
        self.error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Calls `done(summary, latency, requests)` when the script defines it: `rate_samples` are
    /// the threads' request rates, sampled while measuring.
    ///
    /// # Errors
    /// [`LoadError::Script`] when `done()` fails.
    pub fn done(&self, report: &Report, rate_samples: &[f64]) -> Result<(), LoadError> {
        let fail = |e: mlua::Error| LoadError::Script(describe(&e, &self.name));
        let Some(done) = function(&self.main, "done").map_err(fail)? else {
            return Ok(());
        };
        let summary = summary(&self.main, report).map_err(fail)?;
        let latency = stats::Stats::new(report.latency.clone());
        let requests = stats::Stats::from_samples(rate_samples);
        let result = done.call::<()>((summary, latency, requests)).map_err(fail);
        let _ = self.main.load("pcall(io.stdout.flush, io.stdout)").exec();
        result
    }
}

/// wrk's `summary`: duration (µs), requests (responses), bytes read, and errors by wrk's kinds
/// (`status`: responses with a status above 399).
fn summary(lua: &Lua, report: &Report) -> mlua::Result<Table> {
    let e = &report.errors;
    let errors = lua.create_table()?;
    errors.raw_set("connect", e.connect + e.tls)?;
    errors.raw_set("read", e.read + e.protocol)?;
    errors.raw_set("write", e.write)?;
    errors.raw_set(
        "status",
        report.status.client_error + report.status.server_error,
    )?;
    errors.raw_set("timeout", e.timeout)?;
    let t = lua.create_table()?;
    t.raw_set(
        "duration",
        u64::try_from(report.elapsed.as_micros()).unwrap_or(u64::MAX),
    )?;
    t.raw_set("requests", report.responses)?;
    t.raw_set("bytes", report.bytes_read)?;
    t.raw_set("errors", errors)?;
    Ok(t)
}

/// A state with the `wrk` table and the script loaded.
struct State {
    lua: Lua,
    wrk: Table,
    /// `wrk.lua`'s thread start: `Host`, `init(args)`, the table's request.
    start: Function,
    calls: Calls,
}

impl State {
    fn new(
        source: &[u8],
        name: &str,
        inputs: &Inputs<'_>,
        own: Option<&Arc<ThreadControl>>,
    ) -> mlua::Result<Self> {
        let lua = crate::sys::lua_with_all_libraries();
        let (
            wrk,
            start,
            request,
            delay,
            response,
            set_response,
            light,
            reads_params,
            on_error,
            take_failure,
        ): (
            Table,
            Function,
            Function,
            Function,
            Function,
            Function,
            Function,
            Function,
            Function,
            Function,
        ) = lua.load(WRK_LUA).set_name("@wrk.lua").eval()?;
        let t = &inputs.target;
        wrk.raw_set("scheme", t.scheme)?;
        wrk.raw_set("host", t.host)?;
        wrk.raw_set("port", t.port.map(|p| p.to_string()))?;
        wrk.raw_set("path", t.path)?;
        wrk.raw_set("method", inputs.method)?;
        if let Some(body) = inputs.body {
            wrk.raw_set("body", lua.create_string(body)?)?;
        }
        let headers: Table = wrk.raw_get("headers")?;
        for (k, v) in inputs.headers {
            headers.raw_set(k.as_str(), v.as_str())?;
        }
        wrk.raw_set("lookup", lua.create_function(lookup)?)?;
        wrk.raw_set(
            "connect",
            lua.create_function(|_, addr: mlua::UserDataRef<Addr>| {
                Ok(TcpStream::connect_timeout(&addr.0, CONNECT_TIMEOUT).is_ok())
            })?,
        )?;
        if let Some(control) = own {
            wrk.raw_set("thread", OwnThread(Arc::clone(control)))?;
        }
        lua.globals().raw_set("wrk", &wrk)?;
        // `require "wrk"` gives the same table, as in wrk.
        let loaded: Table = lua
            .globals()
            .raw_get::<Table>("package")?
            .raw_get("loaded")?;
        loaded.raw_set("wrk", &wrk)?;
        lua.load(source).set_name(format!("@{name}")).exec()?;
        Ok(Self {
            lua,
            wrk,
            start,
            calls: Calls {
                request,
                delay,
                response,
                set_response,
                light_response_factory: light,
                reads_params,
                on_error,
                take_failure,
            },
        })
    }
}

/// `wrk.lookup(host, service)`: the addresses of `host` for `service` (a port number, `http`
/// or `https`), as a sequence of address objects.
fn lookup(_: &Lua, (host, service): (String, Value)) -> mlua::Result<Vec<Addr>> {
    let service_text = match &service {
        Value::String(s) => s.to_string_lossy(),
        Value::Integer(i) => i.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Nil => "http".to_owned(),
        other => other.type_name().to_owned(),
    };
    let port = match service_text.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        s => s.parse::<u16>().ok(),
    }
    .ok_or_else(|| {
        mlua::Error::runtime(format!(
            "unable to resolve {host}:{service_text}: unknown service"
        ))
    })?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs = (bare, port).to_socket_addrs().map_err(|e| {
        mlua::Error::runtime(format!("unable to resolve {host}:{service_text}: {e}"))
    })?;
    Ok(addrs.map(Addr).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `thread:get()` in the main state while the thread runs (as wrk's `setup()` of a later
    /// thread may call it): it waits for the turn the thread's loop is in, then reads the value
    /// the thread's global holds after that turn.
    #[test]
    fn get_reads_a_running_thread() {
        let mut file = tempfile::Builder::new().suffix(".lua").tempfile().unwrap();
        std::io::Write::write_all(
            &mut file,
            b"threads = {}\nfunction setup(t) table.insert(threads, t) end\n\
              function peek() return threads[1]:get('n') end\nn = 0\n",
        )
        .unwrap();
        let inputs = Inputs {
            file: file.path(),
            args: &[],
            target: Target {
                url: "http://127.0.0.1:1/",
                scheme: "http",
                host: "127.0.0.1",
                port: Some(1),
                path: "/",
                addr: "127.0.0.1:1".parse().unwrap(),
            },
            method: "GET",
            body: None,
            headers: &[],
            threads: 1,
        };
        let started = start(&inputs).unwrap();
        let script = Arc::clone(&started.script);
        // A turn of the thread's loop: it holds the state and changes the global.
        let turn = std::thread::spawn(move || {
            let guard = script.lock(0).unwrap();
            let lua = guard.as_ref().unwrap().lua();
            lua.globals().set("n", 41).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            lua.globals().set("n", 42).unwrap();
        });
        std::thread::sleep(Duration::from_millis(30));
        let peek: Function = started.script.main.globals().get("peek").unwrap();
        let n: Option<i64> = peek.call(()).unwrap();
        turn.join().unwrap();
        assert_eq!(n, Some(42));
    }
}
