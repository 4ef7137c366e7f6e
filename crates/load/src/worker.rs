//! One loader thread: a mio (epoll, edge-triggered) event loop driving its share of the
//! connections, and the thread's own [`ThreadStats`]. Nothing here is shared with other threads
//! but the stop flag and the live counters the progress line reads.
//!
//! The hot path, per readable connection: `read` into the thread's one 64 KiB buffer; take one
//! timestamp for everything that read completed; walk the responses in place with
//! [`ResponseReader`] (bodies counted, never copied); then one `write` of as many pre-built
//! requests as responses came back (closed loop) or as are due (rate mode). A read shorter than
//! the buffer means the socket is drained (edge-triggered: new data raises a new event), so the
//! extra read that would only return `EAGAIN` is skipped, unless the event also reported the
//! peer's close. No allocation happens per request: send times live in a per-connection ring
//! sized to the pipeline depth, and only a head split across two reads is copied aside.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use lowlat_http::client::{HeadCache, ResponseReader, Step};
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::ledger::{Ledger, LiveCounters};
use crate::plan::{ConnSpec, Group, H2Request, Plan, ScriptPlan};
use crate::report::ThreadStats;
use crate::script::ThreadScript;
use crate::sys;
use crate::transport::{Handshake, Stream};

/// Read buffer per thread. 64 KiB holds 16 pipelined responses of up to 4 KiB each in one read.
const READ_BUF: usize = 64 * 1024;

/// Events taken per `epoll_wait`.
const EVENTS: usize = 1024;

/// Token of the rate-mode timer; connections use their index.
const TIMER: Token = Token(usize::MAX);

/// Wait before reconnecting after a failed connect, so that a dead server costs ~100 attempts per
/// second per connection instead of a busy loop.
const CONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// Longest sleep in `poll`, so that the stop flag is seen within this.
const MAX_POLL_WAIT: Duration = Duration::from_millis(50);

/// Send times of the requests in flight on one connection, oldest first, as (time, count) runs:
/// the requests of one batch share one entry, so 16 pipelined requests cost one push and their
/// ring stays one cache line instead of four.
#[derive(Debug)]
struct SendTimes {
    runs: VecDeque<(Instant, u32)>,
    len: usize,
}

impl SendTimes {
    fn with_capacity(depth: usize) -> Self {
        Self {
            runs: VecDeque::with_capacity(depth),
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `k` requests sent (or scheduled) at `t`.
    fn push(&mut self, t: Instant, k: usize) {
        let k32 = u32::try_from(k).unwrap_or(u32::MAX);
        match self.runs.back_mut() {
            Some((last, n)) if *last == t => *n += k32,
            _ => self.runs.push_back((t, k32)),
        }
        self.len += k;
    }

    /// The send time of the oldest request, which is answered.
    fn pop(&mut self) -> Option<Instant> {
        let (t, n) = self.runs.front_mut()?;
        let t = *t;
        *n -= 1;
        if *n == 0 {
            self.runs.pop_front();
        }
        self.len -= 1;
        Some(t)
    }

    fn clear(&mut self) {
        self.runs.clear();
        self.len = 0;
    }

    /// The send time of the `i`-th oldest request.
    fn nth(&self, mut i: usize) -> Option<Instant> {
        for &(t, n) in &self.runs {
            if i < n as usize {
                return Some(t);
            }
            i -= n as usize;
        }
        None
    }
}

/// The thread's script, when it has one (its state, held for this turn of the loop).
fn held_script<'s>(
    script: &'s mut Option<MutexGuard<'_, Option<ThreadScript>>>,
) -> Option<&'s mut ThreadScript> {
    script.as_deref_mut().and_then(Option::as_mut)
}

/// What a connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    /// No socket; (re)connect when `wake` passes.
    Idle,
    /// Non-blocking connect in progress.
    Connecting,
    /// TCP is up; the TLS handshake is under way (`https://` only).
    Handshaking,
    Open,
    /// Nothing more to do (request budget spent).
    Done,
}

/// Why a connection failed; which error counter it charges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Connect,
    Read,
    Write,
    Timeout,
    Protocol,
    Tls,
}

struct Conn {
    spec: ConnSpec,
    stream: Option<Stream>,
    /// Bumped at every new socket, so that events of a closed socket are recognised as stale.
    generation: u32,
    state: ConnState,
    /// Send (or, in rate mode, scheduled) times of the requests in flight, oldest first. Requests
    /// owed but not yet written are included: they are in flight as far as latency goes.
    sent: SendTimes,
    /// Requests counted in `sent` whose bytes are not written yet.
    owed: usize,
    /// `-U`: the actual send times of the requests written and unanswered, oldest first.
    actual: Option<SendTimes>,
    /// Bytes of the batch buffer still to write after a short write.
    partial: Option<(usize, usize)>,
    reader: ResponseReader,
    /// An incomplete head held between two reads.
    carry: Vec<u8>,
    /// Position in the host's weighted request cycle.
    cursor: usize,
    /// Since when the connection has waited: connect start, or last progress with requests in
    /// flight. The timeout runs from here.
    waiting_since: Instant,
    /// Rate mode: requests scheduled so far on this connection.
    scheduled: u64,
    /// Rate mode: the send time a timer is armed for, if any.
    timer: Option<Instant>,
    /// When an idle connection may reconnect.
    wake: Option<Instant>,
    /// With `--h2`: the connection's HTTP/2 session, once it is open.
    h2: Option<Box<crate::h2::Session>>,
    /// With `--ws`: the connection's WebSocket session, once it is open.
    ws: Option<Box<crate::ws::Session>>,
    /// With a script's `request()`: what it returned, to write from `out_pos` on.
    out: Vec<u8>,
    out_pos: usize,
    /// With a script's `request()`: whether each request in flight is a `HEAD` (its response
    /// has no body), oldest first.
    heads: VecDeque<bool>,
    /// With a script's `request()` and `--h2`: the requests to send as streams.
    h2_out: Vec<H2Request>,
    /// With a script's `response()`: the bytes of a response that spans reads.
    capture: Vec<u8>,
}

/// The loop and everything it owns.
pub(crate) struct Worker<'a> {
    plan: &'a Plan,
    groups: &'a [Group],
    stop: &'a AtomicBool,
    poll: Poll,
    conns: Vec<Conn>,
    buf: Box<[u8]>,
    /// The last response head parsed on any of this thread's connections (see [`HeadCache`]).
    head_cache: HeadCache,
    /// What the thread measures, and when.
    ledger: Ledger<'a>,
    /// Requests this thread may still start while measuring; `None`: unlimited.
    budget: Option<u64>,
    start: Instant,
    depth: usize,
    /// Rate-mode timers and reconnect back-offs: (when, connection, generation).
    timers: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    timerfd: Option<sys::TimerFd>,
    timerfd_armed: Option<Instant>,
    /// Which thread of the plan this is.
    index: usize,
    /// With `-s`: what the threads do with the script, and this thread's Lua state, locked for
    /// each turn of the loop and let go while it waits in `poll` (so that the main state's
    /// `thread:get()` and `thread:set()` reach a running thread between two turns).
    script_plan: Option<&'a ScriptPlan>,
    script: Option<MutexGuard<'a, Option<ThreadScript>>>,
    /// The script failed (the run ends) or called `thread:stop()` (this thread ends).
    script_ended: bool,
}

impl<'a> Worker<'a> {
    pub fn new(
        plan: &'a Plan,
        index: usize,
        start: Instant,
        stop: &'a AtomicBool,
        live: &'a LiveCounters,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        let depth = plan.pipeline as usize;
        let script_plan = plan.script.as_ref();
        // With a script, each thread has its own group: its address and requests.
        let groups = match script_plan {
            Some(s) => std::slice::from_ref(&s.groups[index]),
            None => &plan.groups[..],
        };
        let conns = plan.threads[index]
            .iter()
            .map(|&spec| Conn {
                spec,
                stream: None,
                generation: 0,
                state: ConnState::Idle,
                sent: SendTimes::with_capacity(depth),
                owed: 0,
                actual: plan.uncorrected.then(|| SendTimes::with_capacity(depth)),
                partial: None,
                reader: ResponseReader::new(),
                carry: Vec::new(),
                cursor: 0,
                waiting_since: start,
                scheduled: 0,
                timer: None,
                wake: None,
                h2: None,
                ws: None,
                out: Vec::new(),
                out_pos: 0,
                heads: VecDeque::new(),
                h2_out: Vec::new(),
                capture: Vec::new(),
            })
            .collect::<Vec<_>>();
        // Not for delay(): its milliseconds wait for `poll`'s timeout, which wakes the loop once
        // for every delay that ends within the same millisecond (as wrk's timers do); a timerfd
        // armed to each one cost twice wrk's CPU per response at 256 connections.
        let timerfd = if plan.conn_interval.is_some() {
            let t = sys::TimerFd::new()?;
            poll.registry().register(
                &mut SourceFd(&std::os::fd::AsRawFd::as_raw_fd(&t)),
                TIMER,
                Interest::READABLE,
            )?;
            Some(t)
        } else {
            None
        };
        Ok(Self {
            plan,
            groups,
            stop,
            poll,
            timers: BinaryHeap::with_capacity(conns.len() + 1),
            conns,
            buf: vec![0; READ_BUF].into_boxed_slice(),
            head_cache: HeadCache::new(),
            ledger: Ledger::new(plan, start, live),
            budget: plan.budgets[index],
            start,
            depth,
            timerfd,
            timerfd_armed: None,
            index,
            script_plan,
            script: script_plan.and_then(|s| s.script.lock(index)),
            script_ended: false,
        })
    }

    /// Runs until the deadline, the request count, or the stop flag; returns the thread's figures.
    /// What the script printed is written out at the end.
    pub fn run(mut self) -> io::Result<ThreadStats> {
        let result = self.run_loop();
        if let Some(script) = held_script(&mut self.script) {
            script.flush_output();
        }
        self.script = None;
        result.map(|()| self.ledger.stats)
    }

    fn run_loop(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(EVENTS.min(self.conns.len() + 1));
        self.ledger.start_run();
        let mut now = self.ledger.clock();
        for i in 0..self.conns.len() {
            if i % 64 == 63 {
                // Thousands of connects take a while; each connect's wait starts at its own time.
                now = self.ledger.clock();
            }
            self.connect(i, now);
        }
        loop {
            self.ledger.begin_measuring_at(now);
            if self.stop.load(Ordering::Relaxed)
                || self.ledger.past_deadline(now)
                || self.finished()
                || self.script_stopped()
            {
                break;
            }
            let wait = self.next_wait(now);
            // The script's state is free while the loop waits; one lock per turn, not per call.
            self.script = None;
            let polled = self.poll.poll(&mut events, Some(wait));
            self.script = self.script_plan.and_then(|s| s.script.lock(self.index));
            match polled {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            now = self.ledger.clock();
            for ev in &events {
                if ev.token() == TIMER {
                    continue; // Handled by `run_timers` below.
                }
                let idx = ev.token().0;
                // An event of a socket closed earlier in this batch lands on its replacement
                // (same token), which is then still connecting or idle: harmless, since a
                // connect is confirmed with `peer_addr` and a spurious read gets `EAGAIN`.
                let Some(conn) = self.conns.get(idx) else {
                    continue;
                };
                match conn.state {
                    ConnState::Connecting => {
                        if ev.is_writable() || ev.is_error() || ev.is_read_closed() {
                            self.finish_connect(idx, now);
                        }
                    }
                    ConnState::Handshaking => self.handshake(idx, now),
                    ConnState::Open => {
                        let pending = conn.stream.as_ref().is_some_and(Stream::has_pending)
                            || conn.h2.as_ref().is_some_and(|h| h.has_output());
                        let unwritten = conn.partial.is_some() || conn.out_pos < conn.out.len();
                        if ev.is_writable() && (unwritten || pending) {
                            self.flush(idx, now);
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            let peer_closed = ev.is_read_closed() || ev.is_error();
                            self.on_readable(idx, peer_closed, now);
                        }
                    }
                    ConnState::Idle | ConnState::Done => {}
                }
            }
            self.run_timers(now);
            self.ledger.roll_intervals(now);
            if self.ledger.sweep_due(now) {
                self.sweep(now);
            }
            self.ledger.publish();
        }
        let end = Instant::now();
        self.close_ws_sessions();
        self.ledger.finish(end);
        Ok(())
    }

    /// `--ws`, at the end: each open session says Close (1000) in one best-effort write, so the
    /// server sees the run end as a normal closure, not a dropped connection.
    fn close_ws_sessions(&mut self) {
        for conn in &mut self.conns {
            if let (Some(stream), Some(ws)) = (&mut conn.stream, &mut conn.ws) {
                if ws.upgraded() && !ws.has_output() && !stream.has_pending() {
                    ws.written();
                    ws.close();
                    let _ = stream.write(&ws.out);
                    let _ = stream.flush_pending();
                }
            }
        }
    }

    /// With a request count: the budget is spent and nothing is in flight.
    fn finished(&self) -> bool {
        self.budget == Some(0) && self.conns.iter().all(|c| c.sent.is_empty())
    }

    /// How long `poll` may sleep.
    fn next_wait(&mut self, now: Instant) -> Duration {
        let mut until = self.ledger.wake_by();
        if let Some(Reverse((t, _, _))) = self.timers.peek() {
            match &self.timerfd {
                // Rate mode: the timerfd wakes the loop on time; poll's timeout is coarse.
                Some(fd) => {
                    if self.timerfd_armed != Some(*t) {
                        if fd.arm(t.saturating_duration_since(now)).is_ok() {
                            self.timerfd_armed = Some(*t);
                        } else {
                            until = until.min(*t);
                        }
                    }
                }
                None => until = until.min(*t),
            }
        }
        until.saturating_duration_since(now).min(MAX_POLL_WAIT)
    }

    /// Opens a socket for connection `idx` (non-blocking connect).
    fn connect(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        if self.budget == Some(0) && self.ledger.measuring {
            conn.state = ConnState::Done;
            return;
        }
        conn.generation = conn.generation.wrapping_add(1);
        conn.reader = ResponseReader::new();
        conn.h2 = None;
        conn.carry.clear();
        conn.partial = None;
        conn.owed = 0;
        conn.heads.clear();
        conn.capture.clear();
        conn.wake = None;
        conn.waiting_since = now;
        let addr = self.groups[conn.spec.group].addr;
        let result = TcpStream::connect(addr).and_then(|mut s| {
            s.set_nodelay(true)?;
            self.poll.registry().register(
                &mut s,
                Token(idx),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            Ok(s)
        });
        match result {
            Ok(s) => {
                conn.stream = Some(Stream::Plain(s));
                conn.state = ConnState::Connecting;
            }
            Err(_) => {
                conn.state = ConnState::Idle;
                self.connect_failed(idx, now);
            }
        }
    }

    /// A connect failed: count it (it uses up one request of a counted run) and retry later.
    fn connect_failed(&mut self, idx: usize, now: Instant) {
        if self.ledger.measuring {
            self.ledger.stats.errors.connect += 1;
            if let Some(b) = &mut self.budget {
                *b = b.saturating_sub(1);
            }
        }
        self.close(idx);
        let conn = &mut self.conns[idx];
        let wake = now + CONNECT_BACKOFF;
        conn.wake = Some(wake);
        self.timers.push(Reverse((wake, idx, conn.generation)));
    }

    fn finish_connect(&mut self, idx: usize, now: Instant) {
        let Some(stream) = &mut self.conns[idx].stream else {
            return;
        };
        let stream = stream.socket();
        let connected = match stream.take_error() {
            Ok(None) => match stream.peer_addr() {
                Ok(_) => Some(true),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => None,
                Err(_) => Some(false),
            },
            _ => Some(false),
        };
        match connected {
            None => {}
            Some(false) => self.connect_failed(idx, now),
            Some(true) => {
                let group = &self.groups[self.conns[idx].spec.group];
                if let (Some(name), Some(cfg)) = (&group.tls, &self.plan.tls) {
                    let session = match rustls::ClientConnection::new(
                        std::sync::Arc::clone(cfg),
                        name.clone(),
                    ) {
                        Ok(session) => session,
                        Err(e) => {
                            let e = io::Error::other(e);
                            self.handshake_failed(idx, &e, now);
                            return;
                        }
                    };
                    let conn = &mut self.conns[idx];
                    let Some(Stream::Plain(sock)) = conn.stream.take() else {
                        return;
                    };
                    conn.stream = Some(Stream::tls(sock, session));
                    conn.state = ConnState::Handshaking;
                    conn.waiting_since = now;
                    self.handshake(idx, now);
                } else {
                    self.opened(idx, now);
                }
            }
        }
    }

    /// The connection is ready for requests (TCP connected, TLS handshake done).
    fn opened(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        if let Some(ws) = &self.plan.ws {
            // The handshake first; messages once the 101 is in (`consume_ws`).
            let (key, accept) = lowlat_http::ws::handshake_key();
            let mut handshake = ws.handshakes[conn.spec.group].clone();
            handshake.extend_from_slice(b"Sec-WebSocket-Key: ");
            handshake.extend_from_slice(key.as_bytes());
            handshake.extend_from_slice(b"\r\n\r\n");
            let seed = (conn.spec.global as u64) << 32 | u64::from(conn.generation);
            conn.ws = Some(Box::new(crate::ws::Session::new(
                &handshake,
                &accept,
                ws.message_size,
                seed,
            )));
            conn.state = ConnState::Open;
            conn.waiting_since = now;
            self.flush_ws(idx, now);
            return;
        }
        if self.plan.h2 {
            let group = &self.groups[conn.spec.group];
            let mut session = Box::new(crate::h2::Session::new(group.h2_requests.len()));
            if self.script_plan.is_some_and(|s| s.response) {
                session.collect_responses();
            }
            conn.h2 = Some(session);
        }
        conn.state = ConnState::Open;
        conn.waiting_since = now;
        if self.plan.conn_interval.is_some() {
            self.send_due(idx, now);
        } else {
            self.send_next(idx, self.depth, now);
        }
    }

    /// Drives a TLS handshake; on success notes what was negotiated and starts sending.
    fn handshake(&mut self, idx: usize, now: Instant) {
        let Some(stream) = &mut self.conns[idx].stream else {
            return;
        };
        match stream.handshake() {
            Ok(Handshake::Pending) => {}
            Ok(Handshake::Done) => {
                if let Some(session) = stream.session() {
                    let version = session
                        .protocol_version()
                        .map_or("unknown", crate::report::tls_version_name);
                    let suite = session
                        .negotiated_cipher_suite()
                        .map_or("unknown", crate::report::tls_suite_name);
                    let resumed = session.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                    if self.plan.h2 && session.alpn_protocol() != Some(b"h2") {
                        let e = io::Error::other("the server does not offer HTTP/2 (ALPN h2)");
                        self.handshake_failed(idx, &e, now);
                        return;
                    }
                    self.ledger.stats.tls.record(version, suite, resumed);
                }
                self.opened(idx, now);
            }
            Err(e) => self.handshake_failed(idx, &e, now),
        }
    }

    /// A TLS handshake failed: count it as a TLS error (it uses up one request of a counted
    /// run, as a failed connect does), remember the first reason, retry after a back-off.
    fn handshake_failed(&mut self, idx: usize, err: &io::Error, now: Instant) {
        if self.ledger.stats.tls_error.is_none() {
            self.ledger.stats.tls_error = Some(format!(
                "TLS handshake with {} failed: {}",
                self.groups[self.conns[idx].spec.group].authority,
                crate::tls_failure::describe(err, self.plan.h2)
            ));
        }
        self.ledger.failed_handshake(&mut self.budget);
        self.close(idx);
        let conn = &mut self.conns[idx];
        let wake = now + CONNECT_BACKOFF;
        conn.wake = Some(wake);
        self.timers.push(Reverse((wake, idx, conn.generation)));
    }

    /// Closed loop, as responses make room: the next send, after the script's `delay()` when
    /// it has one (wrk calls it before every send, the first included).
    fn send_next(&mut self, idx: usize, k: usize, now: Instant) {
        if self.script_stopped() {
            // thread:stop() in the response() just read: nothing more goes out (as in wrk).
            return;
        }
        if !self.script_plan.is_some_and(|s| s.delay) {
            return self.send_more(idx, k, now);
        }
        if self.conns[idx].timer.is_some() || self.room(idx) == 0 {
            return;
        }
        let Some(script) = held_script(&mut self.script) else {
            return;
        };
        let wait = match script.delay() {
            Ok(wait) => wait,
            Err(e) => return self.script_failed(e),
        };
        if wait.is_zero() {
            return self.send_more(idx, k, now);
        }
        let conn = &mut self.conns[idx];
        let at = now + wait;
        conn.timer = Some(at);
        self.timers.push(Reverse((at, idx, conn.generation)));
    }

    /// The script failed, or called `thread:stop()`.
    fn script_stopped(&self) -> bool {
        self.script_ended
            || self
                .script
                .as_deref()
                .and_then(Option::as_ref)
                .is_some_and(ThreadScript::stopped)
    }

    /// How many more requests connection `idx` may have in flight: with a script's
    /// `request()`, whether one more batch fits (0 or the batch size).
    fn room(&self, idx: usize) -> usize {
        let conn = &self.conns[idx];
        let room = depth_of(conn, self.depth).saturating_sub(conn.sent.len());
        match self.script_plan {
            Some(s) if s.dynamic => {
                if room >= s.per_call || conn.sent.is_empty() {
                    s.per_call
                } else {
                    0
                }
            }
            _ => room,
        }
    }

    /// Calls the script's `request()` for connection `idx` and queues what it returned (at
    /// most `allowed` of its requests, for a counted run): its bytes, or with `--h2` its
    /// streams. Returns how many requests were queued; `None` when the script failed.
    fn next_batch(&mut self, idx: usize, allowed: usize, now: Instant) -> Option<usize> {
        let (Some(script), Some(plan)) = (held_script(&mut self.script), self.script_plan) else {
            return None;
        };
        let conn = &mut self.conns[idx];
        let start = conn.out.len();
        let requests = match script.request(&mut conn.out) {
            Ok(r) => r,
            Err(e) => {
                conn.out.truncate(start);
                self.script_failed(e);
                return None;
            }
        };
        let k = requests.len().min(allowed);
        conn.out.truncate(start + requests.ends[k - 1]);
        if self.plan.h2 {
            let mut kept = requests.clone();
            kept.ends.truncate(k);
            let h2_out = &mut conn.h2_out;
            crate::script::wire::to_h2(&conn.out[start..], &kept, plan.scheme, |(fields, body)| {
                h2_out.push(H2Request { fields, body });
            });
            conn.out.truncate(start);
        } else {
            conn.heads.extend(&requests.heads[..k]);
        }
        if script.stopped() {
            self.script_ended = true;
        }
        if conn.sent.is_empty() {
            conn.waiting_since = now;
        }
        Some(k)
    }

    /// The script raised an error, or returned what cannot be sent: the run ends with it.
    fn script_failed(&mut self, message: String) {
        if let Some(plan) = self.script_plan {
            plan.script.fail(message);
        }
        self.script_ended = true;
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Closed loop: queue up to `k` more requests (within the budget and the depth) and write.
    fn send_more(&mut self, idx: usize, k: usize, now: Instant) {
        if self.script_plan.is_some_and(|s| s.dynamic) {
            return self.send_batches(idx, now);
        }
        let conn = &mut self.conns[idx];
        let room = depth_of(conn, self.depth).saturating_sub(conn.sent.len());
        let mut k = k.min(room);
        if self.ledger.measuring {
            if let Some(b) = &mut self.budget {
                k = k.min(usize::try_from(*b).unwrap_or(usize::MAX));
                *b -= k as u64;
            }
        }
        if k == 0 {
            return;
        }
        if conn.sent.is_empty() {
            conn.waiting_since = now;
        }
        conn.sent.push(now, k);
        conn.owed += k;
        self.flush(idx, now);
    }

    /// Closed loop with a script's `request()`: one batch per call, as many as fit within the
    /// depth and the budget, then one write.
    fn send_batches(&mut self, idx: usize, now: Instant) {
        let mut queued = 0;
        while self.room(idx) > 0 && !self.script_ended {
            let allowed = match (self.ledger.measuring, self.budget) {
                (true, Some(0)) => break,
                (true, Some(b)) => usize::try_from(b).unwrap_or(usize::MAX),
                _ => usize::MAX,
            };
            let Some(k) = self.next_batch(idx, allowed, now) else {
                return;
            };
            if self.ledger.measuring {
                if let Some(b) = &mut self.budget {
                    *b -= k as u64;
                }
            }
            let conn = &mut self.conns[idx];
            conn.sent.push(now, k);
            conn.owed += k;
            queued += k;
        }
        if queued > 0 {
            self.flush(idx, now);
        }
    }

    /// Rate mode: queue every request whose scheduled time has come (within the depth), write
    /// them, and arm a timer for the next one.
    fn send_due(&mut self, idx: usize, now: Instant) {
        let Some(interval) = self.plan.conn_interval else {
            return;
        };
        let conn = &self.conns[idx];
        if conn.state != ConnState::Open || self.script_stopped() {
            return;
        }
        let phase = Duration::from_secs_f64(
            interval.as_secs_f64() * conn.spec.global as f64 / self.plan.connections as f64,
        );
        let start = self.start;
        let due = move |k: u64| start + phase + interval.mul_f64(k as f64);
        // With a script's `request()`, each call is one batch; its requests take consecutive
        // slots of the schedule and are charged from the first one's time, as in wrk2.
        let dynamic = self.script_plan.is_some_and(|s| s.dynamic);
        let mut queued = 0;
        while self.room(idx) > 0 && !self.script_ended {
            let t = due(self.conns[idx].scheduled);
            if t > now {
                break;
            }
            let counted = self.ledger.measuring && t >= self.ledger.measure_start;
            let allowed = match (counted, self.budget) {
                (true, Some(0)) => break,
                (true, Some(b)) => usize::try_from(b).unwrap_or(usize::MAX),
                _ => usize::MAX,
            };
            let k = if dynamic {
                match self.next_batch(idx, allowed, now) {
                    Some(k) => k,
                    None => return,
                }
            } else {
                1
            };
            if counted {
                if let Some(b) = &mut self.budget {
                    *b -= k as u64;
                }
            }
            let conn = &mut self.conns[idx];
            if conn.sent.is_empty() {
                conn.waiting_since = now;
            }
            conn.sent.push(t, k);
            conn.scheduled += k as u64;
            queued += k;
        }
        self.conns[idx].owed += queued;
        if self.room(idx) > 0 && self.budget != Some(0) {
            let conn = &mut self.conns[idx];
            let next = due(conn.scheduled);
            if conn.timer.is_none_or(|t| t > next) {
                conn.timer = Some(next);
                self.timers.push(Reverse((next, idx, conn.generation)));
            }
        }
        if queued > 0 {
            self.flush(idx, now);
        }
    }

    /// Writes what is owed: first the rest of a short write, then the owed requests, one write.
    fn flush(&mut self, idx: usize, now: Instant) {
        if self.plan.ws.is_some() {
            return self.flush_ws(idx, now);
        }
        if self.plan.h2 {
            return self.flush_h2(idx, now);
        }
        let conn = &mut self.conns[idx];
        let Some(stream) = &mut conn.stream else {
            return;
        };
        let batch = &self.groups[conn.spec.group].requests;
        match stream.flush_pending() {
            Ok(true) => {}
            Ok(false) => return, // TLS records still wait for the socket: wait for writable.
            Err(_) => {
                self.fail(idx, Failure::Write, now);
                return;
            }
        }
        if self.script_plan.is_some_and(|s| s.dynamic) {
            // What the script's request() returned, in `out`.
            if conn.owed > 0 {
                if let Some(actual) = &mut conn.actual {
                    actual.push(now, conn.owed);
                }
                self.ledger.count_sent(conn.owed);
                conn.owed = 0;
            }
            while conn.out_pos < conn.out.len() {
                match stream.write(&conn.out[conn.out_pos..]) {
                    Ok(n) => {
                        conn.out_pos += n;
                        if conn.out_pos < conn.out.len() {
                            return; // The socket buffer is full: wait for a writable event.
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        self.fail(idx, Failure::Write, now);
                        return;
                    }
                }
            }
            conn.out.clear();
            conn.out_pos = 0;
            return;
        }
        loop {
            let (start, end) = match conn.partial {
                Some(range) => range,
                None if conn.owed > 0 => {
                    // At most `depth` requests: what the batch was laid out for.
                    let k = conn.owed.min(self.depth);
                    let range = batch.range(conn.cursor, k);
                    conn.cursor = batch.window(conn.cursor, k).1;
                    conn.owed -= k;
                    if let Some(actual) = &mut conn.actual {
                        actual.push(now, k);
                    }
                    self.ledger.count_sent(k);
                    range
                }
                None => return,
            };
            match stream.write(batch.slice(start, end)) {
                Ok(n) if start + n == end => conn.partial = None,
                Ok(n) => {
                    conn.partial = Some((start + n, end));
                    return; // The socket buffer is full: wait for a writable event.
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    conn.partial = Some((start, end));
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    conn.partial = Some((start, end))
                }
                Err(_) => {
                    self.fail(idx, Failure::Write, now);
                    return;
                }
            }
        }
    }

    /// HTTP/2: the owed requests become frames behind any control frames waiting, then one
    /// write of all of it.
    fn flush_h2(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        let (Some(stream), Some(h2)) = (&mut conn.stream, &mut conn.h2) else {
            return;
        };
        match stream.flush_pending() {
            Ok(true) => {}
            Ok(false) => return,
            Err(_) => {
                self.fail(idx, Failure::Write, now);
                return;
            }
        }
        if conn.owed > 0 {
            let group = &self.groups[conn.spec.group];
            let k = conn.owed;
            // The owed requests are the newest in `sent`; each stream keeps its own time.
            let first = conn.sent.len() - k;
            if self.script_plan.is_some_and(|s| s.dynamic) {
                for (i, req) in conn.h2_out.drain(..).enumerate() {
                    let sent = conn.sent.nth(first + i).unwrap_or(now);
                    h2.request_once(&req, sent);
                }
            } else {
                for i in 0..k {
                    let sent = conn.sent.nth(first + i).unwrap_or(now);
                    let index = group.h2_cycle[conn.cursor];
                    h2.request(index, &group.h2_requests[index], sent);
                    conn.cursor = (conn.cursor + 1) % group.h2_cycle.len();
                }
            }
            conn.owed = 0;
            if let Some(actual) = &mut conn.actual {
                actual.push(now, k);
            }
            self.ledger.count_sent(k);
        }
        match write_queued(stream, &h2.out, &mut h2.out_pos) {
            Ok(true) => h2.written(),
            // The socket buffer is full: wait for a writable event.
            Ok(false) => {}
            Err(()) => self.fail(idx, Failure::Write, now),
        }
    }

    /// WebSocket: once the handshake is done, the owed messages are queued (one copy of the
    /// prebuilt frame each) behind any pong, then one write of all of it.
    fn flush_ws(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        let (Some(stream), Some(ws)) = (&mut conn.stream, &mut conn.ws) else {
            return;
        };
        match stream.flush_pending() {
            Ok(true) => {}
            Ok(false) => return,
            Err(_) => {
                self.fail(idx, Failure::Write, now);
                return;
            }
        }
        if conn.owed > 0 && ws.upgraded() {
            let k = conn.owed;
            for _ in 0..k {
                ws.message();
            }
            conn.owed = 0;
            if let Some(actual) = &mut conn.actual {
                actual.push(now, k);
            }
            self.ledger.count_sent(k);
        }
        match write_queued(stream, &ws.out, &mut ws.out_pos) {
            Ok(true) => ws.written(),
            // The socket buffer is full: wait for a writable event.
            Ok(false) => {}
            Err(()) => self.fail(idx, Failure::Write, now),
        }
    }

    /// WebSocket: reads the handshake's answer, then echoes in `self.buf[..n]`; each echo
    /// completes the oldest message in flight (a server answers in order).
    fn consume_ws(&mut self, idx: usize, n: usize, now: Instant) -> Result<Consumed, Failure> {
        let conn = &mut self.conns[idx];
        let Some(mut ws) = conn.ws.take() else {
            return Err(Failure::Protocol);
        };
        let was_upgraded = ws.upgraded();
        let mut run = Recorded::empty(now);
        let (mut completed, mut closed, mut stray) = (0, false, false);
        let stats = &mut self.ledger.stats;
        let (measuring, measure_start) = (self.ledger.measuring, self.ledger.measure_start);
        let result = ws.read(&self.buf[..n], |event| match event {
            crate::ws::Event::Upgraded => {}
            crate::ws::Event::Echo => {
                let Some(sent) = conn.sent.pop() else {
                    stray = true;
                    return;
                };
                completed += 1;
                record_uncorrected(
                    stats,
                    conn.actual.as_mut(),
                    measuring && sent >= measure_start,
                    now,
                );
                // An echo counts as a successful response.
                if let Some(mut done) = run.push(sent, 200) {
                    done.flush(stats, measuring, measure_start, now);
                }
            }
            crate::ws::Event::Closed => closed = true,
        });
        run.flush(
            &mut self.ledger.stats,
            self.ledger.measuring,
            self.ledger.measure_start,
            now,
        );
        let upgraded_now = !was_upgraded && ws.upgraded();
        let answer = ws.has_output();
        conn.ws = Some(ws);
        if let Err(e) = result {
            if self.ledger.stats.ws_error.is_none() {
                let why = match e {
                    crate::ws::WsError::Handshake(why) => format!("WebSocket handshake: {why}"),
                    crate::ws::WsError::Frame => {
                        "a WebSocket frame was refused, or an echo had another length".into()
                    }
                };
                self.ledger.stats.ws_error = Some(format!(
                    "{} {why}",
                    self.groups[self.conns[idx].spec.group].authority
                ));
            }
            return Err(Failure::Protocol);
        }
        if stray {
            return Err(Failure::Protocol);
        }
        if closed {
            // The server ended the session: messages in flight are lost.
            if self.conns[idx].sent.is_empty() {
                self.closed_by_server(idx, now);
            } else {
                self.fail(idx, Failure::Read, now);
            }
            return Ok(Consumed::Closed);
        }
        if upgraded_now {
            self.conns[idx].waiting_since = now;
            if self.plan.conn_interval.is_some() {
                // Messages due during the handshake go now, charged from their schedule.
                self.send_due(idx, now);
            } else {
                self.send_next(idx, self.depth, now);
            }
        } else if answer {
            self.flush_ws(idx, now);
        }
        Ok(Consumed::More(completed))
    }

    /// HTTP/2: reads the frames in `self.buf[..n]`; completed streams are recorded.
    fn consume_h2(&mut self, idx: usize, n: usize, now: Instant) -> Result<Consumed, Failure> {
        let conn = &mut self.conns[idx];
        let Some(mut h2) = conn.h2.take() else {
            return Err(Failure::Protocol);
        };
        let mut run = Recorded::empty(now);
        let mut completed = 0;
        let stats = &mut self.ledger.stats;
        let (measuring, measure_start) = (self.ledger.measuring, self.ledger.measure_start);
        let mut script = held_script(&mut self.script);
        let mut script_error = None;
        let result = h2.read(&self.buf[..n], |event| {
            completed += 1;
            conn.sent.pop();
            match event {
                crate::h2::Event::Response {
                    sent,
                    status,
                    collected,
                } => {
                    if let (Some(script), Some(c), None) =
                        (script.as_deref_mut(), collected, &script_error)
                    {
                        if let Err(e) = script.response_fields(status, &c.fields, &c.body) {
                            script_error = Some(e);
                        }
                    }
                    record_uncorrected(
                        stats,
                        conn.actual.as_mut(),
                        measuring && sent >= measure_start,
                        now,
                    );
                    if let Some(mut done) = run.push(sent, status) {
                        done.flush(stats, measuring, measure_start, now);
                    }
                }
                crate::h2::Event::Reset { sent } => {
                    if let Some(actual) = &mut conn.actual {
                        actual.pop();
                    }
                    if measuring && sent >= measure_start {
                        stats.errors.protocol += 1;
                    }
                }
            }
        });
        run.flush(
            &mut self.ledger.stats,
            self.ledger.measuring,
            self.ledger.measure_start,
            now,
        );
        let drained = h2.drained();
        let exhausted = h2.exhausted() && h2.in_flight() == 0;
        let acks = h2.has_output();
        conn.h2 = Some(h2);
        if let Some(e) = script_error {
            self.script_failed(e);
        }
        if result.is_err() {
            return Err(Failure::Protocol);
        }
        if drained || exhausted {
            // GOAWAY: what the server will not answer goes back to the budget, on a new
            // connection; stream ids used up likewise.
            self.closed_by_server(idx, now);
            return Ok(Consumed::Closed);
        }
        if acks {
            self.flush_h2(idx, now);
        }
        Ok(Consumed::More(completed))
    }

    /// Reads until drained, completing responses; then sends what they made room for.
    fn on_readable(&mut self, idx: usize, peer_closed: bool, mut now: Instant) {
        let mut completed = 0;
        loop {
            let conn = &mut self.conns[idx];
            let Some(stream) = &mut conn.stream else {
                return;
            };
            let (n, more) = match stream.read(&mut self.buf) {
                Ok(r) if r.n == 0 => {
                    self.on_eof(idx, now);
                    return;
                }
                Ok(r) => (r.n, r.more),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // rustls refusing a record is a TLS failure; the socket failing is a read's.
                    let kind = if e.kind() == io::ErrorKind::InvalidData {
                        Failure::Tls
                    } else {
                        Failure::Read
                    };
                    self.fail(idx, kind, now);
                    return;
                }
            };
            // One timestamp for every response this read completed.
            now = self.ledger.clock();
            if self.ledger.measuring {
                self.ledger.stats.bytes_read += n as u64;
            }
            match self.consume(idx, n, now) {
                Ok(Consumed::More(k)) => completed += k,
                Ok(Consumed::Closed) => return,
                Err(f) => {
                    self.fail(idx, f, now);
                    return;
                }
            }
            // Short read: drained. Edge-triggered epoll reports any later data as a new event.
            if !more && !peer_closed {
                break;
            }
        }
        if self.conns[idx].state != ConnState::Open {
            return;
        }
        if completed > 0 {
            self.conns[idx].waiting_since = now;
        }
        if self.plan.conn_interval.is_some() {
            self.send_due(idx, now);
        } else if completed > 0 {
            self.send_next(idx, completed, now);
        }
    }

    /// Walks the responses in `self.buf[..n]` (after any held head bytes).
    fn consume(&mut self, idx: usize, n: usize, now: Instant) -> Result<Consumed, Failure> {
        if self.plan.ws.is_some() {
            return self.consume_ws(idx, n, now);
        }
        if self.plan.h2 {
            return self.consume_h2(idx, n, now);
        }
        let conn = &mut self.conns[idx];
        let head_method = self.groups[conn.spec.group].requests.head;
        // With a script: `request()` says per request whether it is a HEAD, and `response()`
        // wants each response's bytes.
        let dynamic = self.script_plan.is_some_and(|s| s.dynamic);
        let capture = self.script_plan.is_some_and(|s| s.response);
        let mut script_error = None;
        let mut carry = std::mem::take(&mut conn.carry);
        let from_carry = !carry.is_empty();
        if from_carry {
            carry.extend_from_slice(&self.buf[..n]);
        }
        // Every response this read completed shares `now`, and the requests of one batch share
        // their send time, so consecutive responses of one batch and one status have the same
        // latency: they are recorded together, one histogram update for up to `depth` responses.
        // (At depth 16 recording one by one was a third of the loader's own instructions; see
        // docs/PERFORMANCE.md, "lowlat load".)
        let mut run = Recorded::empty(now);
        let (i, completed, close) = {
            let data: &[u8] = if from_carry { &carry } else { &self.buf[..n] };
            let mut i = 0;
            let mut completed = 0;
            let mut close = false;
            while i < data.len() {
                if conn.sent.is_empty() && conn.reader.wants_head() {
                    // Bytes nobody asked for; what came before them still counts.
                    run.flush(
                        &mut self.ledger.stats,
                        self.ledger.measuring,
                        self.ledger.measure_start,
                        now,
                    );
                    return Err(Failure::Protocol);
                }
                let head = if dynamic {
                    conn.heads.front().copied().unwrap_or(false)
                } else {
                    head_method
                };
                match conn
                    .reader
                    .read_cached(&data[i..], head, Some(&mut self.head_cache))
                {
                    Err(_) => {
                        run.flush(
                            &mut self.ledger.stats,
                            self.ledger.measuring,
                            self.ledger.measure_start,
                            now,
                        );
                        return Err(Failure::Protocol);
                    }
                    Ok(Step::NeedMore { consumed }) => {
                        if capture {
                            conn.capture.extend_from_slice(&data[i..i + consumed]);
                        }
                        i += consumed;
                        break;
                    }
                    Ok(Step::Complete { consumed, response }) => {
                        if let (true, Some(script)) = (capture, held_script(&mut self.script)) {
                            // The response's bytes: in this read alone (no copy), or after the
                            // part an earlier read kept.
                            let raw: &[u8] = if conn.capture.is_empty() {
                                &data[i..i + consumed]
                            } else {
                                conn.capture.extend_from_slice(&data[i..i + consumed]);
                                &conn.capture
                            };
                            if let Err(e) = script.response(response.status, raw, head) {
                                script_error = Some(e);
                            }
                            conn.capture.clear();
                        }
                        if dynamic {
                            conn.heads.pop_front();
                        }
                        i += consumed;
                        completed += 1;
                        let sent = conn.sent.pop().unwrap_or(now);
                        record_uncorrected(
                            &mut self.ledger.stats,
                            conn.actual.as_mut(),
                            self.ledger.measuring && sent >= self.ledger.measure_start,
                            now,
                        );
                        if let Some(mut done) = run.push(sent, response.status) {
                            done.flush(
                                &mut self.ledger.stats,
                                self.ledger.measuring,
                                self.ledger.measure_start,
                                now,
                            );
                        }
                        if !response.keep_alive || !self.plan.keep_alive {
                            close = true;
                            break;
                        }
                        if script_error.is_some() {
                            break;
                        }
                    }
                }
            }
            (i, completed, close)
        };
        run.flush(
            &mut self.ledger.stats,
            self.ledger.measuring,
            self.ledger.measure_start,
            now,
        );
        let len = if from_carry { carry.len() } else { n };
        if !close && i < len {
            // An incomplete head: keep its bytes for the next read.
            if from_carry {
                carry.drain(..i);
            } else {
                carry.extend_from_slice(&self.buf[i..n]);
            }
        } else {
            carry.clear();
        }
        conn.carry = carry;
        if let Some(e) = script_error {
            self.script_failed(e);
        }
        if close {
            self.closed_by_server(idx, now);
            return Ok(Consumed::Closed);
        }
        Ok(Consumed::More(completed))
    }

    /// The server ended the connection after a response (`Connection: close`, or a
    /// close-delimited body): requests still in flight were never processed, so they go back to
    /// the budget, and the connection is reopened.
    fn closed_by_server(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        let unanswered = conn.sent.len() as u64;
        if self.ledger.measuring {
            if let Some(b) = &mut self.budget {
                // Only requests sent while measuring were taken from the budget; the few sent
                // during the warm-up and unanswered are not worth telling apart.
                *b += unanswered;
            }
        }
        if self.plan.conn_interval.is_some() {
            // Rate mode: the unanswered are the latest scheduled; schedule them again, so that
            // they are sent on the new connection and charged from their original times.
            conn.scheduled -= unanswered;
        }
        conn.sent.clear();
        if let Some(actual) = &mut conn.actual {
            actual.clear();
        }
        self.close(idx);
        self.connect(idx, now);
    }

    fn on_eof(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        if self.plan.h2 || self.plan.ws.is_some() {
            if conn.ws.as_ref().is_some_and(|w| !w.upgraded()) {
                // Closed before answering the handshake.
                self.fail(idx, Failure::Protocol, now);
            } else if conn.sent.is_empty() {
                self.close(idx);
                self.connect(idx, now);
            } else {
                self.fail(idx, Failure::Read, now);
            }
            return;
        }
        let held = if conn.reader.wants_head() {
            conn.carry.len()
        } else {
            0
        };
        match conn.reader.eof(held) {
            Ok(Some(response)) => {
                if let (true, Some(script)) = (
                    self.script_plan.is_some_and(|s| s.response),
                    held_script(&mut self.script),
                ) {
                    let head = conn.heads.pop_front().unwrap_or(false);
                    let raw = std::mem::take(&mut conn.capture);
                    let result = script.response(response.status, &raw, head);
                    conn.capture = raw;
                    conn.capture.clear();
                    if let Err(e) = result {
                        self.script_failed(e);
                        return;
                    }
                }
                let conn = &mut self.conns[idx];
                let sent = conn.sent.pop().unwrap_or(now);
                record_uncorrected(
                    &mut self.ledger.stats,
                    conn.actual.as_mut(),
                    self.ledger.measuring && sent >= self.ledger.measure_start,
                    now,
                );
                let mut one = Recorded::empty(now);
                one.push(sent, response.status);
                one.flush(
                    &mut self.ledger.stats,
                    self.ledger.measuring,
                    self.ledger.measure_start,
                    now,
                );
                self.closed_by_server(idx, now);
            }
            Ok(None) if conn.sent.is_empty() => {
                // An idle connection closed (keep-alive timeout): just reopen it.
                self.close(idx);
                self.connect(idx, now);
            }
            Ok(None) | Err(_) => self.fail(idx, Failure::Read, now),
        }
    }

    /// A connection failed: every request in flight on it fails with `kind`; reopen it.
    fn fail(&mut self, idx: usize, kind: Failure, now: Instant) {
        if kind == Failure::Connect {
            self.connect_failed(idx, now);
            return;
        }
        let conn = &mut self.conns[idx];
        let lost = (conn.sent.len() as u64).max(u64::from(kind == Failure::Protocol));
        if self.ledger.measuring {
            let e = &mut self.ledger.stats.errors;
            match kind {
                Failure::Read => e.read += lost,
                Failure::Write => e.write += lost,
                Failure::Timeout => e.timeout += lost,
                Failure::Protocol => e.protocol += lost,
                Failure::Tls => e.tls += lost,
                Failure::Connect => {}
            }
        }
        conn.sent.clear();
        if let Some(actual) = &mut conn.actual {
            actual.clear();
        }
        self.close(idx);
        self.connect(idx, now);
    }

    /// Drops the socket (closing it removes it from epoll).
    fn close(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        if let Some(mut s) = conn.stream.take() {
            let _ = self.poll.registry().deregister(s.socket());
        }
        conn.state = ConnState::Idle;
        conn.timer = None;
        conn.partial = None;
        conn.owed = 0;
        conn.out.clear();
        conn.out_pos = 0;
        conn.h2_out.clear();
    }

    /// Fires due timers: rate-mode sends and reconnects after a back-off.
    fn run_timers(&mut self, now: Instant) {
        while let Some(&Reverse((t, idx, generation))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let conn = &mut self.conns[idx];
            if conn.generation != generation {
                continue;
            }
            match conn.state {
                ConnState::Idle if conn.wake == Some(t) => self.connect(idx, now),
                ConnState::Open if conn.timer == Some(t) => {
                    conn.timer = None;
                    if self.plan.conn_interval.is_some() {
                        self.send_due(idx, now);
                    } else {
                        // The script's delay() is over.
                        self.send_more(idx, self.depth, now);
                    }
                }
                _ => {}
            }
        }
        if self.timers.is_empty() {
            self.timerfd_armed = None;
        }
    }

    /// Times out connections that waited too long for a connect or a response.
    fn sweep(&mut self, now: Instant) {
        let timeout = self.plan.timeout;
        for idx in 0..self.conns.len() {
            let conn = &self.conns[idx];
            let waiting = match conn.state {
                ConnState::Connecting | ConnState::Handshaking => true,
                // A WebSocket handshake waits for its 101 with nothing counted in flight.
                ConnState::Open => {
                    !conn.sent.is_empty() || conn.ws.as_ref().is_some_and(|w| !w.upgraded())
                }
                ConnState::Idle | ConnState::Done => false,
            };
            if waiting && now.saturating_duration_since(conn.waiting_since) > timeout {
                if conn.state == ConnState::Connecting {
                    // Its completion may be among events not read yet (a thread opening
                    // thousands of connections): ask the socket before calling it a failure.
                    self.finish_connect(idx, now);
                    if self.conns[idx].state == ConnState::Connecting {
                        self.fail(idx, Failure::Connect, now);
                    }
                } else if conn.state == ConnState::Handshaking {
                    let e = io::Error::new(io::ErrorKind::TimedOut, "no answer within the timeout");
                    self.handshake_failed(idx, &e, now);
                } else {
                    self.fail(idx, Failure::Timeout, now);
                }
            }
        }
    }
}

/// `-U`: the response to the oldest written request came at `now`; its latency from the actual
/// send goes into the uncorrected histogram (one record per response: -U is a diagnostic).
/// Requests a connection may have in flight: the depth (`--pipeline`, or `-m` streams), within
/// what an HTTP/2 server allows (SETTINGS_MAX_CONCURRENT_STREAMS).
fn depth_of(conn: &Conn, depth: usize) -> usize {
    conn.h2.as_ref().map_or(depth, |h| depth.min(h.max_streams))
}

fn record_uncorrected(
    stats: &mut ThreadStats,
    actual: Option<&mut SendTimes>,
    counted: bool,
    now: Instant,
) {
    let (Some(actual), Some(h)) = (actual, &mut stats.u_latency) else {
        return;
    };
    if let Some(t) = actual.pop() {
        if counted {
            let us =
                u64::try_from(now.saturating_duration_since(t).as_micros()).unwrap_or(u64::MAX);
            h.saturating_record(us);
        }
    }
}

/// What a read did to its connection.
enum Consumed {
    /// Still open; this many responses completed.
    More(usize),
    /// The server closed it after a response; it is being reopened.
    Closed,
}

/// Consecutive responses with one send time and one status, not yet counted: they share one
/// latency, so they cost one histogram update.
#[derive(Debug)]
struct Recorded {
    sent: Instant,
    status: u16,
    /// Responses in the run; none yet when 0.
    n: u64,
}

impl Recorded {
    fn empty(now: Instant) -> Self {
        Self {
            sent: now,
            status: 0,
            n: 0,
        }
    }

    /// Adds a response sent at `sent`. A response with another send time or status starts a
    /// new run; the finished one is returned, to be flushed.
    #[inline]
    fn push(&mut self, sent: Instant, status: u16) -> Option<Recorded> {
        if self.n > 0 && self.status == status && self.sent == sent {
            self.n += 1;
            return None;
        }
        let next = Self { sent, status, n: 1 };
        let done = std::mem::replace(self, next);
        (done.n > 0).then_some(done)
    }

    /// Counts the run's responses, answered at `now`. Requests sent (or scheduled) during the
    /// warm-up are not measured.
    #[inline]
    fn flush(
        &mut self,
        stats: &mut ThreadStats,
        measuring: bool,
        measure_start: Instant,
        now: Instant,
    ) {
        let n = std::mem::take(&mut self.n);
        if n == 0 || !measuring || self.sent < measure_start {
            return;
        }
        let sent = self.sent;
        stats.responses += n;
        stats.status.count_n(self.status, n);
        let us = u64::try_from(now.saturating_duration_since(sent).as_micros()).unwrap_or(u64::MAX);
        stats.latency.saturating_record_n(us, n);
        if let Some(iv) = &mut stats.intervals {
            // `record_n`, not `saturating_record_n`: the latter clamps instead of growing the
            // histogram.
            if iv
                .current
                .record_n(us.min(crate::report::MAX_LATENCY_US), n)
                .is_err()
            {
                iv.current.saturating_record_n(us, n);
            }
        }
    }
}

/// Writes `out[*pos..]` as far as the socket takes it. `Ok(true)`: all of it is out; `Ok(false)`:
/// the socket is full (a writable event will say when to go on); `Err`: the write failed.
fn write_queued(stream: &mut Stream, out: &[u8], pos: &mut usize) -> Result<bool, ()> {
    while *pos < out.len() {
        match stream.write(&out[*pos..]) {
            Ok(n) => {
                *pos += n;
                if *pos < out.len() {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(()),
        }
    }
    Ok(true)
}
