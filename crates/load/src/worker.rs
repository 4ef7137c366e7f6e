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

use lowlat_http::client::{HeadCache, ResponseReader};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::ledger::{Ledger, LiveCounters};
use crate::plan::{ConnSpec, Group, H2Request, Plan, ScriptPlan};
use crate::report::ThreadStats;
use crate::script::ThreadScript;
use crate::sys;
use crate::transport::Stream;

mod connect;
mod receive;
mod send;

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
