//! One loader thread of an `--h3` run: a mio event loop driving its share of the QUIC
//! connections, each a quinn-proto [`Connection`] (sans-I/O) on its own connected UDP socket,
//! with the HTTP/3 session of `h3` on top; and the thread's own [`ThreadStats`].
//!
//! The same run as `worker`'s, over QUIC: `-c` connections, `-m` request streams in flight on
//! each, closed loop or wrk2's constant rate (`-R`, latency from each request's scheduled send
//! time), `-n`, `-d`, warm-up, `-T`, interval histograms, `-U`. One quinn-proto [`Endpoint`]
//! per thread routes datagrams to connections; every connection has its own socket, so what a
//! socket reads belongs to one connection and a server sees one 4-tuple per connection.
//!
//! Per readable socket: `recv` until `EAGAIN`, each datagram through the endpoint into its
//! connection; then the connection's events (handshake, streams) are handled, responses
//! recorded with one timestamp, the requests they made room for opened as streams, and
//! everything quinn-proto has to send written with one `send` per datagram. Timers: quinn's
//! (loss detection, ACK delay, idle), rate-mode send times and reconnect back-offs, all woken
//! on time by one timerfd.
//!
//! UDP I/O: datagrams are read with `recvmmsg`, up to 32 a call (a connection drained after a
//! wait holds about 4.5 on average under load), and written with one `send` each — about 0.2
//! per response, since quinn-proto packs several streams' frames into one packet; GSO would
//! save little, and GRO is not used (see docs/PERFORMANCE.md, "HTTP/3").
//!
//! Beside this file: `requests` (the requests queued, opened as streams, given back) and
//! `ending` (timeouts, a lost connection counted and replaced, a failed handshake, a close).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mio::net::UdpSocket;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use quinn_proto::{
    ConnectionError, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Event as QuicEvent,
};

use crate::h3::{self, Event, Session};
use crate::ledger::{Ledger, LiveCounters};
use crate::plan::{ConnSpec, Group, H3Plan, Plan};
use crate::report::{H3Summary, ThreadStats};
use crate::sys;

mod ending;
mod requests;

type Connection = quinn_proto::Connection;

/// Token of the timerfd; connections use their index.
const TIMER: Token = Token(usize::MAX);

/// Events taken per `epoll_wait`.
const EVENTS: usize = 1024;

/// The `max_udp_payload_size` the endpoint announces (the largest UDP has), so that a server
/// whose path MTU discovery finds a path wider than Ethernet (loopback: 65536) may use it: a
/// 100 MiB download from `lowlat serve` on loopback takes 1 600 datagrams instead of 71 000, and
/// each costs both sides per-datagram work (packet protection setup, ACKs, system calls).
const MAX_UDP_PAYLOAD: u16 = 65_527;

/// Room for one datagram read: the largest one announced.
const RECV_SLOT: usize = 64 * 1024;

/// The receive buffer: [`sys::RECV_BATCH`] datagrams of [`RECV_SLOT`] bytes (2 MiB a thread;
/// only what arrives is touched).
const RECV_BUF: usize = RECV_SLOT * sys::RECV_BATCH;

/// Wait before reconnecting after a failed handshake, as `worker` does after a failed connect.
const CONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// Longest sleep in `poll`, so that the stop flag is seen within this.
const MAX_POLL_WAIT: Duration = Duration::from_millis(50);

/// What a connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No connection; reconnect when `wake` passes.
    Idle,
    /// The QUIC handshake is under way (requests may already go as 0-RTT).
    Handshaking,
    Open,
    /// Nothing more to do (request budget spent).
    Done,
}

/// A request waiting for a stream: its scheduled (or closed-loop send) time, and for one sent
/// before and refused with its 0-RTT, which request it was and when it was first written.
#[derive(Debug, Clone, Copy)]
struct Queued {
    sent: Instant,
    again: Option<(Instant, usize)>,
}

struct QConn {
    spec: ConnSpec,
    generation: u32,
    state: State,
    socket: Option<UdpSocket>,
    handle: Option<ConnectionHandle>,
    quic: Option<Box<Connection>>,
    h3: Option<Box<Session>>,
    /// Requests owed to the connection, not yet on a stream.
    queue: VecDeque<Queued>,
    /// Position in the host's weighted request cycle.
    cursor: usize,
    /// Since when the connection has waited: handshake start, or last progress with requests
    /// in flight. The timeout runs from here.
    waiting_since: Instant,
    /// Rate mode: requests scheduled so far on this connection.
    scheduled: u64,
    /// Rate mode: the send time a timer is armed for.
    timer: Option<Instant>,
    /// When an idle connection may reconnect.
    wake: Option<Instant>,
    /// quinn-proto's next timeout.
    quic_timer: Option<Instant>,
    /// Requests were sent as 0-RTT, before the handshake completed.
    early: bool,
}

impl QConn {
    fn in_flight(&self) -> usize {
        self.queue.len() + self.h3.as_ref().map_or(0, |h| h.in_flight())
    }
}

/// The loop and everything it owns.
pub(crate) struct QuicWorker<'a> {
    plan: &'a Plan,
    h3: &'a H3Plan,
    groups: &'a [Group],
    stop: &'a AtomicBool,
    poll: Poll,
    endpoint: Endpoint,
    conns: Vec<QConn>,
    recv_buf: Box<[u8]>,
    /// Where received datagrams are copied to be handed over (see `receive`).
    rx: BytesMut,
    send_buf: Vec<u8>,
    /// What the thread measures, and when.
    ledger: Ledger<'a>,
    summary: H3Summary,
    budget: Option<u64>,
    start: Instant,
    depth: usize,
    timers: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    timerfd: sys::TimerFd,
    timerfd_armed: Option<Instant>,
    /// The earliest of the connections' quinn-proto timeouts, or earlier (never later).
    quic_min: Option<Instant>,
    /// Connections with something to do this turn (datagrams in, a timer due).
    dirty: Vec<usize>,
    is_dirty: Vec<bool>,
}

impl<'a> QuicWorker<'a> {
    pub fn new(
        plan: &'a Plan,
        h3: &'a H3Plan,
        index: usize,
        start: Instant,
        stop: &'a AtomicBool,
        live: &'a LiveCounters,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        let timerfd = sys::TimerFd::new()?;
        poll.registry().register(
            &mut SourceFd(&std::os::fd::AsRawFd::as_raw_fd(&timerfd)),
            TIMER,
            Interest::READABLE,
        )?;
        let conns: Vec<QConn> = plan.threads[index]
            .iter()
            .map(|&spec| QConn {
                spec,
                generation: 0,
                state: State::Idle,
                socket: None,
                handle: None,
                quic: None,
                h3: None,
                queue: VecDeque::with_capacity(plan.pipeline as usize),
                cursor: 0,
                waiting_since: start,
                scheduled: 0,
                timer: None,
                wake: None,
                quic_timer: None,
                early: false,
            })
            .collect();
        let n = conns.len();
        Ok(Self {
            plan,
            h3,
            groups: &plan.groups,
            stop,
            poll,
            endpoint: Endpoint::new(Arc::new(endpoint_config()), None, true, None),
            timers: BinaryHeap::with_capacity(n + 1),
            conns,
            recv_buf: vec![0; RECV_BUF].into_boxed_slice(),
            rx: BytesMut::with_capacity(RECV_BUF),
            send_buf: Vec::with_capacity(RECV_BUF),
            ledger: Ledger::new(plan, start, live),
            summary: H3Summary::default(),
            budget: plan.budgets[index],
            start,
            depth: plan.pipeline as usize,
            timerfd,
            timerfd_armed: None,
            quic_min: None,
            dirty: Vec::with_capacity(n),
            is_dirty: vec![false; n],
        })
    }

    /// Runs until the deadline, the request count, or the stop flag; returns the thread's
    /// figures.
    pub fn run(mut self) -> io::Result<ThreadStats> {
        let mut events = Events::with_capacity(EVENTS.min(self.conns.len() + 1));
        self.ledger.start_run();
        let mut now = self.ledger.clock();
        for i in 0..self.conns.len() {
            self.connect(i, now);
        }
        loop {
            if self.stop.load(Ordering::Relaxed)
                || self.ledger.past_deadline(now)
                || self.finished()
            {
                break;
            }
            let wait = self.next_wait(now);
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            now = self.ledger.clock();
            for ev in &events {
                let idx = ev.token().0;
                if ev.token() != TIMER && idx < self.conns.len() {
                    self.receive(idx, now);
                }
            }
            self.run_timers(now);
            while let Some(idx) = self.dirty.pop() {
                self.is_dirty[idx] = false;
                self.drive(idx, now);
            }
            self.ledger.roll_intervals(now);
            if self.ledger.sweep_due(now) {
                self.sweep(now);
            }
            self.ledger.publish();
        }
        let end = Instant::now();
        self.ledger.finish(end);
        // Say goodbye (H3_NO_ERROR), so the server sees the run end as a normal closure.
        for idx in 0..self.conns.len() {
            self.close(idx, end, true);
        }
        let mut stats = self.ledger.stats;
        stats.h3 = Some(self.summary);
        Ok(stats)
    }

    /// With a request count: the budget is spent and nothing is in flight.
    fn finished(&self) -> bool {
        self.budget == Some(0) && self.conns.iter().all(|c| c.in_flight() == 0)
    }

    fn mark(&mut self, idx: usize) {
        if !self.is_dirty[idx] {
            self.is_dirty[idx] = true;
            self.dirty.push(idx);
        }
    }

    /// How long `poll` may sleep; the timerfd is armed for the next timer.
    fn next_wait(&mut self, now: Instant) -> Duration {
        let mut until = self.ledger.wake_by();
        let mut next: Option<Instant> = self.timers.peek().map(|Reverse((t, _, _))| *t);
        if let Some(t) = self.quic_min {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        if let Some(t) = next {
            // epoll's timeout is in whole milliseconds: the timerfd wakes the loop on time.
            if self.timerfd_armed != Some(t) {
                if self.timerfd.arm(t.saturating_duration_since(now)).is_ok() {
                    self.timerfd_armed = Some(t);
                } else {
                    until = until.min(t);
                }
            }
        }
        until.saturating_duration_since(now).min(MAX_POLL_WAIT)
    }

    /// Starts a QUIC connection for `idx` on a new UDP socket.
    fn connect(&mut self, idx: usize, now: Instant) {
        if self.budget == Some(0) && self.ledger.measuring {
            self.conns[idx].state = State::Done;
            return;
        }
        let group = &self.groups[self.conns[idx].spec.group];
        let addr = group.addr;
        let name = group
            .tls
            .as_ref()
            .map_or_else(|| addr.ip().to_string(), |n| n.to_str().into_owned());
        let conn = &mut self.conns[idx];
        conn.generation = conn.generation.wrapping_add(1);
        conn.wake = None;
        conn.timer = None;
        conn.waiting_since = now;
        conn.early = false;
        let local: SocketAddr = match addr.ip() {
            IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(local).and_then(|mut s| {
            s.connect(addr)?;
            self.poll
                .registry()
                .register(&mut s, Token(idx), Interest::READABLE)?;
            Ok(s)
        });
        let socket = match socket {
            Ok(s) => s,
            Err(e) => {
                return self.handshake_failed(idx, &format!("cannot open a socket: {e}"), now)
            }
        };
        let (handle, mut quic) =
            match self
                .endpoint
                .connect(now, self.h3.client.clone(), addr, &name)
            {
                Ok(c) => c,
                Err(e) => return self.handshake_failed(idx, &e.to_string(), now),
            };
        let conn = &mut self.conns[idx];
        conn.socket = Some(socket);
        conn.handle = Some(handle);
        conn.state = State::Handshaking;
        if self.h3.early_data && quic.has_0rtt() {
            // A resumed session with early-data keys: the control streams and the first
            // requests go in 0-RTT packets, before the handshake completes.
            conn.h3 = Some(Box::new(Session::new(
                &mut quic,
                self.groups[conn.spec.group].requests.head,
            )));
            conn.early = true;
        }
        conn.quic = Some(Box::new(quic));
        if conn.early {
            self.send_more(idx, now);
        }
        self.mark(idx);
    }

    /// Reads every datagram waiting on connection `idx`'s socket into its connection, up to
    /// [`sys::RECV_BATCH`] per `recvmmsg`.
    fn receive(&mut self, idx: usize, now: Instant) {
        let mut lens = [0usize; sys::RECV_BATCH];
        loop {
            let conn = &mut self.conns[idx];
            let Some(socket) = &conn.socket else { return };
            let fd = std::os::fd::AsRawFd::as_raw_fd(socket);
            let got = match sys::recv_datagrams(fd, &mut self.recv_buf, RECV_SLOT, &mut lens) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // ICMP port unreachable comes back as ECONNREFUSED on a connected socket.
                    let why = if e.kind() == io::ErrorKind::ConnectionRefused {
                        format!(
                            "nothing answers on UDP {} (no QUIC server there?)",
                            self.groups[conn.spec.group].authority
                        )
                    } else {
                        e.to_string()
                    };
                    self.lost(idx, Lost::Socket(why), now);
                    return;
                }
            };
            let (Some(handle), Some(quic)) = (conn.handle, conn.quic.as_mut()) else {
                return;
            };
            let remote = self.groups[conn.spec.group].addr;
            for (i, &n) in lens.iter().enumerate().take(got) {
                if n == 0 {
                    continue; // Longer than announced (max_udp_payload_size): dropped.
                }
                let at = i * RECV_SLOT;
                // quinn-proto takes each datagram as its own `BytesMut` and may keep parts of
                // it (stream data not read yet): they are cut from one 64 KiB block, so that
                // a datagram costs a copy but not an allocation.
                if self.rx.capacity() < RECV_SLOT {
                    self.rx.reserve(RECV_BUF);
                }
                self.rx.extend_from_slice(&self.recv_buf[at..at + n]);
                let data = self.rx.split();
                self.send_buf.clear();
                match self
                    .endpoint
                    .handle(now, remote, None, None, data, &mut self.send_buf)
                {
                    Some(DatagramEvent::ConnectionEvent(h, event)) if h == handle => {
                        quic.handle_event(event);
                    }
                    Some(DatagramEvent::Response(t)) => {
                        let _ = socket.send(&self.send_buf[..t.size]);
                    }
                    _ => {}
                }
            }
            if got < sys::RECV_BATCH {
                // Fewer than asked: the socket is drained (edge-triggered epoll reports any
                // later datagram as a new event), so the call that would only say EAGAIN is
                // saved.
                break;
            }
        }
        self.mark(idx);
    }

    /// Handles everything connection `idx` has to report, sends what it made room for, and
    /// writes its packets.
    fn drive(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        let (Some(mut quic), Some(handle)) = (conn.quic.take(), conn.handle) else {
            return;
        };
        let mut h3 = conn.h3.take();
        let groups = self.groups;
        let group = &groups[conn.spec.group];
        let mut completed = 0usize;
        let mut ended: Option<Lost> = None;
        loop {
            while let Some(ev) = quic.poll_endpoint_events() {
                if let Some(back) = self.endpoint.handle_event(handle, ev) {
                    quic.handle_event(back);
                }
            }
            let Some(ev) = quic.poll() else { break };
            match ev {
                QuicEvent::Connected => {
                    // The session must exist before the next events: the server's control and
                    // QPACK streams open in the same flight.
                    if let Some(why) = self.connected(idx, &mut quic, &mut h3, now) {
                        ended = Some(why);
                        break;
                    }
                }
                QuicEvent::ConnectionLost { reason } => {
                    ended = Some(Lost::Quic(reason));
                    break;
                }
                QuicEvent::Stream(se) => {
                    if h3.is_none() {
                        continue;
                    }
                    let session = h3.as_mut().expect("checked above");
                    let (stats, measuring, measure_start) = (
                        &mut self.ledger.stats,
                        self.ledger.measuring,
                        self.ledger.measure_start,
                    );
                    let mut bytes = 0;
                    let result = session.on_stream_event(
                        &mut quic,
                        se,
                        &group.h3_requests,
                        &mut |e| {
                            completed += 1;
                            record(stats, e, measuring, measure_start, now);
                        },
                        &mut bytes,
                    );
                    if measuring {
                        stats.bytes_read += bytes;
                    }
                    if let Err(e) = result {
                        quic.close(
                            now,
                            h3::close_code(e.code),
                            e.why.as_bytes().to_vec().into(),
                        );
                        ended = Some(Lost::Protocol(e.why));
                    }
                }
                QuicEvent::HandshakeDataReady
                | QuicEvent::DatagramReceived
                | QuicEvent::DatagramsUnblocked => {}
            }
        }
        let conn = &mut self.conns[idx];
        if let Some(session) = &mut h3 {
            if session.goaway.is_some() {
                let refused = session.take_refused() + conn.queue.len();
                conn.queue.clear();
                self.give_back(idx, refused as u64);
            }
        }
        let conn = &mut self.conns[idx];
        conn.quic = Some(quic);
        conn.h3 = h3;
        if let Some(why) = ended {
            self.lost(idx, why, now);
            return;
        }
        if completed > 0 {
            self.conns[idx].waiting_since = now;
        }
        let conn = &self.conns[idx];
        let draining = conn.h3.as_ref().is_some_and(|s| s.goaway.is_some());
        if draining {
            if conn.in_flight() == 0 {
                self.summary.goaways += 1;
                self.close(idx, now, true);
                self.connect(idx, now);
                return;
            }
        } else if conn.state == State::Open || conn.early {
            self.send_more(idx, now);
        }
        self.transmit(idx, now);
    }

    /// The handshake completed: checks ALPN, counts 0-RTT, and starts the HTTP/3 session (or,
    /// when the server refused the 0-RTT requests, starts it again and queues them again).
    fn connected(
        &mut self,
        idx: usize,
        quic: &mut Connection,
        h3: &mut Option<Box<Session>>,
        now: Instant,
    ) -> Option<Lost> {
        self.summary.handshakes += 1;
        let conn = &mut self.conns[idx];
        let group = &self.groups[conn.spec.group];
        let alpn_ok = quic
            .crypto_session()
            .handshake_data()
            .and_then(|d| {
                d.downcast::<quinn_proto::crypto::rustls::HandshakeData>()
                    .ok()
            })
            .is_some_and(|d| d.protocol.as_deref() == Some(b"h3"));
        if !alpn_ok {
            quic.close(
                now,
                h3::close_code(lowlat_http::h3::ErrorCode::NoError),
                Vec::new().into(),
            );
            return Some(Lost::Handshake(
                "the server does not offer HTTP/3 (ALPN h3)".into(),
            ));
        }
        conn.state = State::Open;
        conn.waiting_since = now;
        if conn.early && quic.accepted_0rtt() {
            self.summary.zero_rtt_accepted += 1;
            return None;
        }
        if conn.early {
            // Refused: quinn-proto dropped every stream; the session starts again and the
            // requests go out again, charged from their first send.
            self.summary.zero_rtt_rejected += 1;
            if let Some(old) = h3.as_mut() {
                for (sent, actual, index) in old.take_in_flight().into_iter().rev() {
                    conn.queue.push_front(Queued {
                        sent,
                        again: Some((actual, index)),
                    });
                }
            }
            conn.early = false;
        }
        let mut session = Box::new(Session::new(quic, group.requests.head));
        // Streams the server opened before this (announced while there was no session).
        if let Err(e) = session.accept_streams(quic) {
            quic.close(
                now,
                h3::close_code(e.code),
                e.why.as_bytes().to_vec().into(),
            );
            return Some(Lost::Protocol(e.why));
        }
        *h3 = Some(session);
        None
    }

    /// Writes every datagram connection `idx` has to send, and notes its next timeout.
    fn transmit(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        let (Some(quic), Some(socket)) = (conn.quic.as_mut(), &conn.socket) else {
            return;
        };
        loop {
            self.send_buf.clear();
            let Some(t) = quic.poll_transmit(now, 1, &mut self.send_buf) else {
                break;
            };
            // A full socket buffer drops the datagram: QUIC's loss recovery sends it again.
            let _ = socket.send(&self.send_buf[..t.size]);
        }
        conn.quic_timer = quic.poll_timeout();
        if let Some(t) = conn.quic_timer {
            self.quic_min = Some(self.quic_min.map_or(t, |m| m.min(t)));
        }
    }

    /// Fires due timers: quinn-proto's, rate-mode sends, reconnects after a back-off.
    fn run_timers(&mut self, now: Instant) {
        // The connections are looked through only when the earliest quinn timer is due (or
        // seems to be: `quic_min` may be early after a timer moved later), not every turn: at
        // 1000 connections two scans a turn were 7 % of the loader's CPU.
        if self.quic_min.is_some_and(|m| m <= now) {
            let mut min: Option<Instant> = None;
            for idx in 0..self.conns.len() {
                let conn = &mut self.conns[idx];
                match conn.quic_timer {
                    Some(t) if t <= now => {
                        conn.quic_timer = None;
                        if let Some(q) = conn.quic.as_mut() {
                            q.handle_timeout(now);
                        }
                        // Its next timeout comes back through `transmit`.
                        self.mark(idx);
                    }
                    Some(t) => min = Some(min.map_or(t, |m| m.min(t))),
                    None => {}
                }
            }
            self.quic_min = min;
        }
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
                State::Idle if conn.wake == Some(t) => self.connect(idx, now),
                State::Open | State::Handshaking if conn.timer == Some(t) => {
                    conn.timer = None;
                    self.mark(idx);
                }
                _ => {}
            }
        }
    }
}

/// quinn-proto's endpoint defaults, announcing datagrams up to [`MAX_UDP_PAYLOAD`].
fn endpoint_config() -> EndpointConfig {
    let mut config = EndpointConfig::default();
    // In range (1200..=65527), so it cannot fail.
    let _ = config.max_udp_payload_size(MAX_UDP_PAYLOAD);
    config
}

fn conn_group(c: &QConn) -> usize {
    c.spec.group
}

/// Why a connection ended.
enum Lost {
    /// quinn-proto closed it (the peer, an idle timeout, a transport error).
    Quic(ConnectionError),
    /// The HTTP/3 layer closed it.
    Protocol(&'static str),
    /// The handshake did not complete, or did not give HTTP/3.
    Handshake(String),
    /// The socket failed.
    Socket(String),
    /// Requests waited longer than `-T`.
    Timeout,
}

/// A response or a failed request: counted, with its latency from the scheduled send.
fn record(
    stats: &mut ThreadStats,
    e: Event,
    measuring: bool,
    measure_start: Instant,
    now: Instant,
) {
    let (sent, actual, status) = match e {
        Event::Response {
            sent,
            actual,
            status,
        } => (sent, actual, Some(status)),
        Event::Failed { sent, actual } => (sent, actual, None),
    };
    if !measuring || sent < measure_start {
        return;
    }
    let Some(status) = status else {
        stats.errors.protocol += 1;
        return;
    };
    stats.responses += 1;
    stats.status.count_n(status, 1);
    let us = u64::try_from(now.saturating_duration_since(sent).as_micros()).unwrap_or(u64::MAX);
    stats.latency.saturating_record(us);
    if let Some(iv) = &mut stats.intervals {
        if iv
            .current
            .record(us.min(crate::report::MAX_LATENCY_US))
            .is_err()
        {
            iv.current.saturating_record(us);
        }
    }
    if let Some(u) = &mut stats.u_latency {
        let us =
            u64::try_from(now.saturating_duration_since(actual).as_micros()).unwrap_or(u64::MAX);
        u.saturating_record(us);
    }
}
