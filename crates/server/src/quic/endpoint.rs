//! One worker's QUIC endpoint: its UDP socket, a quinn-proto `Endpoint` (sans-I/O), the
//! connections it owns, their timers, and the protocol above each — all driven from the
//! worker's own loop (`crate::worker`), with no runtime and no thread hop.
//!
//! The loop calls in three ways: the socket is readable (datagrams in: each goes to its
//! connection or starts one), the socket is writable again (what a full send buffer held back
//! goes out), and the earliest timer is due (loss detection, acknowledgements, idle timeout).
//! After each, every connection touched is *driven*: its events go to the endpoint and to its
//! protocol, then it transmits (GSO batches where the kernel has them), then its next timer is
//! filed.
//!
//! Across a binary upgrade (`super::handoff`): a datagram whose connection ID names an older
//! process's generation is passed to that process rather than handled; once a newer process
//! serves, this one stops reading the socket and takes its connections' datagrams from its
//! inbox instead, answering them from the socket as before.
//!
//! Address validation: a new client whose address is not proven is answered with a Retry
//! (stateless: a token in the Retry, no memory kept) when `--h3-retry` says so or when more
//! than `--h3-retry-above` handshakes are in progress on this worker — the flood of spoofed
//! Initials case. Past `--h3-max-conns` connections a new client is refused.
//!
//! Timers: quinn-proto says when each connection next needs `handle_timeout`. They sit in a
//! binary heap of (time, connection); an entry whose time is no longer its connection's is
//! skipped when popped (rather than searched for and removed when the time changes), and the
//! heap is rebuilt when stale entries outnumber live ones four to one.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use mio::net::UdpSocket;
use mio::{Interest, Registry, Token};
use quinn_proto::{
    ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Event, StreamEvent, Transmit,
};
use rustc_hash::FxHashMap;

use super::handoff::{self, Inbox, HEADER_LEN};
use super::setup::QuicShared;
use super::streams::{QuicProtocol, StreamIo};
use super::udp::{self, Offload, MAX_GSO_SEGMENTS, RECV_BUFFER};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::{Downstream, Wake};

/// Datagrams read per readable event before the other connections get their turn (a flood of
/// Initials must not starve the TCP side of the worker).
const RECV_BUDGET: usize = 256;
/// The application error code a connection is closed with at shutdown: HTTP/3's H3_NO_ERROR.
const CLOSE_NO_ERROR: u64 = 0x100;

/// The tokens that name this worker's QUIC connections as clients of the upstream side (a
/// relayed response finds its connection by one): the connection's handle from here on, above
/// the TCP connections' and below the upstream connections' tokens.
const CLIENT_TOKENS: usize = usize::MAX / 4;

/// Whether `token` names a QUIC connection (see [`QuicWorker::with_downstream`]).
pub(crate) fn owns_client(token: Token) -> bool {
    token
        .0
        .checked_sub(CLIENT_TOKENS)
        .is_some_and(|k| k < CLIENT_TOKENS)
}

fn client_token(key: usize) -> Token {
    Token(CLIENT_TOKENS + key)
}

/// What chooses a protocol for a connection whose handshake agreed on an ALPN.
pub(crate) type ProtocolFactory = fn(alpn: &[u8]) -> Option<Box<dyn QuicProtocol>>;

/// One connection this worker owns.
struct Conn {
    conn: quinn_proto::Connection,
    /// Chosen when the handshake completes.
    proto: Option<Box<dyn QuicProtocol>>,
    handshaking: bool,
    /// The timer filed in the heap (others there for it are stale).
    timer: Option<Instant>,
}

/// A batch the socket had no room for: destination, source address, GSO segment size, bytes.
type Held = (SocketAddr, Option<std::net::IpAddr>, Option<usize>, Vec<u8>);

/// Counts kept for `--metrics` and the tests' logs.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct QuicCounts {
    pub(crate) accepted: u64,
    pub(crate) retries: u64,
    pub(crate) refused: u64,
    pub(crate) datagrams_in: u64,
    pub(crate) sends: u64,
    /// Datagrams of an older process's connections, passed to it.
    pub(crate) passed_on: u64,
    /// Datagrams of this process's connections a newer process passed here.
    pub(crate) passed_in: u64,
}

/// One worker's QUIC side.
pub(crate) struct QuicWorker {
    worker: usize,
    sock: UdpSocket,
    token: Token,
    /// Still reading `sock`: until a newer process takes it over (USR2).
    reading: bool,
    /// Where a newer process passes this one's datagrams (`super::handoff`).
    inbox: Inbox,
    /// Read into from `inbox`: a header and a datagram; empty until the first arrives (only a
    /// process that handed over needs it).
    inbox_buf: Vec<u8>,
    /// The inbox's budget ran out with datagrams perhaps left (its events are edge-triggered).
    inbox_more: bool,
    endpoint: Endpoint,
    shared: Arc<QuicShared>,
    offload: Offload,
    /// By quinn-proto's handle (ours, not the client's): FxHash, looked up per datagram.
    conns: FxHashMap<usize, Conn>,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    handshakes: usize,
    recv_buf: Vec<u8>,
    send_buf: Vec<u8>,
    /// A transmit the socket had no room for, sent first when it is writable again.
    held: Option<Held>,
    /// Connections that had more to send while `held` waited.
    waiting: Vec<usize>,
    touched: Vec<usize>,
    /// What the upstream side is asked for relays: (client, upstream, stream, what).
    wakes: Vec<(Token, Token, u32, Wake)>,
    wake_buf: Vec<(Token, u32, Wake)>,
    protocols: ProtocolFactory,
    closing: bool,
    /// Shutting down because a new process (USR2) reads the same UDP sockets: a new client's
    /// Initial that reaches this one is dropped, not refused, so that the client's
    /// retransmission may reach the new process, which accepts it.
    handing_over: bool,
    pub(crate) counts: QuicCounts,
}

impl QuicWorker {
    /// Worker `worker`'s endpoint on `sock`, registered under `token`, with its hand-off
    /// `inbox` under `inbox_token`.
    #[allow(clippy::too_many_arguments)] // each is one of the worker's own, passed once at start
    pub(crate) fn new(
        worker: usize,
        sock: std::net::UdpSocket,
        token: Token,
        inbox: Inbox,
        inbox_token: Token,
        registry: &Registry,
        shared: Arc<QuicShared>,
        protocols: ProtocolFactory,
    ) -> io::Result<Self> {
        let mut sock = UdpSocket::from_std(sock);
        // Writable too: edge-triggered, it fires only when a full send buffer drains.
        registry.register(&mut sock, token, Interest::READABLE | Interest::WRITABLE)?;
        registry.register(
            &mut mio::unix::SourceFd(&inbox.raw_fd()),
            inbox_token,
            Interest::READABLE,
        )?;
        let mut config: EndpointConfig = shared.endpoint.clone();
        let random = shared.random;
        let id = u8::try_from(worker % super::steer::MAX_WORKERS).unwrap_or(0);
        let generation = shared.handoff.generation;
        config.cid_generator(move || Box::new(super::cid::WorkerCids::new(id, generation, random)));
        let endpoint = Endpoint::new(
            Arc::new(config),
            Some(Arc::clone(&shared.server)),
            true,
            None,
        );
        Ok(Self {
            worker,
            sock,
            token,
            reading: true,
            inbox,
            inbox_buf: Vec::new(),
            inbox_more: false,
            endpoint,
            offload: shared.offload,
            shared,
            conns: FxHashMap::default(),
            timers: BinaryHeap::new(),
            handshakes: 0,
            recv_buf: vec![0; RECV_BUFFER],
            send_buf: Vec::with_capacity(RECV_BUFFER),
            held: None,
            waiting: Vec::new(),
            touched: Vec::new(),
            wakes: Vec::new(),
            wake_buf: Vec::new(),
            protocols,
            closing: false,
            handing_over: false,
            counts: QuicCounts::default(),
        })
    }

    /// Connections open (handshaking, established or closing).
    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }

    /// Says, at exit, what this worker's endpoint did.
    pub(crate) fn report(&self) {
        let c = &self.counts;
        tracing::info!(
            worker = self.worker,
            "quic: {} connections accepted, {} clients sent a Retry, {} refused; {} datagrams in, {} sends; {} passed on to an older process, {} passed in by a newer one",
            c.accepted,
            c.retries,
            c.refused,
            c.datagrams_in,
            c.sends,
            c.passed_on,
            c.passed_in
        );
    }

    /// When the earliest timer is due (perhaps a stale one: waking early is harmless).
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// The socket has news: datagrams to read, or room to send what was held back. Returns
    /// whether datagrams may be left unread.
    pub(crate) fn on_event(
        &mut self,
        readable: bool,
        writable: bool,
        now: Instant,
        ctx: &mut WorkerCtx<'_>,
    ) -> bool {
        if writable {
            self.flush_held(now, ctx);
        }
        readable && self.receive(now, ctx)
    }

    /// Whether datagrams may be left unread (the budget ran out): the loop comes back at once.
    pub(crate) fn receive(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) -> bool {
        let mut more = self.reading && self.read_socket(now);
        if self.inbox_more {
            self.inbox_more = self.read_inbox(now);
            more |= self.inbox_more;
        }
        self.drive_touched(now, ctx);
        more
    }

    /// The inbox has news: datagrams of this process's connections, read by a newer process.
    /// Returns whether some may be left unread (the budget ran out).
    pub(crate) fn on_inbox(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) -> bool {
        self.inbox_more = self.read_inbox(now);
        self.drive_touched(now, ctx);
        self.inbox_more
    }

    /// Reads the socket (up to the budget): each datagram goes to its connection, or to the
    /// older process that owns it. Returns whether the budget ran out.
    fn read_socket(&mut self, now: Instant) -> bool {
        let fd = self.sock.as_raw_fd();
        let generation = self.shared.handoff.generation;
        let mut budget = RECV_BUDGET;
        while budget > 0 {
            let got = match udp::recv(fd, &mut self.recv_buf) {
                Ok(Some(got)) => got,
                Ok(None) => return false,
                Err(e) => {
                    tracing::debug!(worker = self.worker, "quic: recvmsg: {e}");
                    return false;
                }
            };
            let segment = got.segment.max(1);
            let mut start = 0;
            while start < got.len {
                let end = (start + segment).min(got.len);
                let bytes = &self.recv_buf[start..end];
                start = end;
                budget = budget.saturating_sub(1);
                self.counts.datagrams_in += 1;
                // An older process's connection (after an upgrade): passed to it. For our own,
                // this is one byte compared.
                if let Some((older, worker)) = handoff::owner(bytes, generation) {
                    if self
                        .shared
                        .handoff
                        .forward(older, worker, got.from, got.local, bytes)
                    {
                        self.counts.passed_on += 1;
                        continue;
                    }
                }
                let data = BytesMut::from(bytes);
                self.datagram(now, got.from, got.local, data);
            }
        }
        true
    }

    /// Reads the inbox (up to the budget). Returns whether the budget ran out.
    fn read_inbox(&mut self, now: Instant) -> bool {
        if self.inbox_buf.is_empty() {
            self.inbox_buf = vec![0; HEADER_LEN + RECV_BUFFER];
        }
        for _ in 0..RECV_BUDGET {
            let got = match self.inbox.recv(&mut self.inbox_buf) {
                Ok(Some(got)) => got,
                Ok(None) => return false,
                Err(e) => {
                    tracing::debug!(worker = self.worker, "quic: hand-off inbox: {e}");
                    return false;
                }
            };
            self.counts.passed_in += 1;
            let data = BytesMut::from(&self.inbox_buf[got.range]);
            self.datagram(now, got.from, got.local, data);
        }
        true
    }

    fn datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        local: Option<std::net::IpAddr>,
        data: BytesMut,
    ) {
        self.send_buf.clear();
        match self
            .endpoint
            .handle(now, from, local, None, data, &mut self.send_buf)
        {
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(c) = self.conns.get_mut(&ch.0) {
                    c.conn.handle_event(event);
                    self.touched.push(ch.0);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => self.incoming(now, incoming),
            Some(DatagramEvent::Response(t)) => {
                let buf = std::mem::take(&mut self.send_buf);
                self.send_now(&t, &buf);
                self.send_buf = buf;
            }
            None => {}
        }
    }

    /// A new client: accepted, asked to prove its address (Retry), or refused.
    fn incoming(&mut self, now: Instant, incoming: quinn_proto::Incoming) {
        let cfg = &self.shared.cfg;
        self.send_buf.clear();
        if self.closing && self.handing_over {
            self.endpoint.ignore(incoming);
            return;
        }
        if self.closing || self.conns.len() >= cfg.max_conns_per_worker {
            self.counts.refused += 1;
            let t = self.endpoint.refuse(incoming, &mut self.send_buf);
            let buf = std::mem::take(&mut self.send_buf);
            self.send_now(&t, &buf);
            self.send_buf = buf;
            return;
        }
        let must_validate = cfg.retry_always || self.handshakes >= cfg.retry_above;
        if must_validate && !incoming.remote_address_validated() && incoming.may_retry() {
            match self.endpoint.retry(incoming, &mut self.send_buf) {
                Ok(t) => {
                    self.counts.retries += 1;
                    let buf = std::mem::take(&mut self.send_buf);
                    self.send_now(&t, &buf);
                    self.send_buf = buf;
                }
                Err(e) => self.endpoint.ignore(e.into_incoming()),
            }
            return;
        }
        match self
            .endpoint
            .accept(incoming, now, &mut self.send_buf, None)
        {
            Ok((ch, conn)) => {
                self.counts.accepted += 1;
                self.handshakes += 1;
                self.conns.insert(
                    ch.0,
                    Conn {
                        conn,
                        proto: None,
                        handshaking: true,
                        timer: None,
                    },
                );
                self.touched.push(ch.0);
            }
            Err(e) => {
                if let Some(t) = e.response {
                    let buf = std::mem::take(&mut self.send_buf);
                    self.send_now(&t, &buf);
                    self.send_buf = buf;
                }
            }
        }
    }

    /// Due timers fire; their connections are driven.
    pub(crate) fn on_timers(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) {
        while let Some(&Reverse((at, key))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(c) = self.conns.get_mut(&key) else {
                continue;
            };
            if c.timer != Some(at) {
                continue; // stale
            }
            c.timer = None;
            c.conn.handle_timeout(now);
            self.touched.push(key);
        }
        self.drive_touched(now, ctx);
        if self.timers.len() > 64 && self.timers.len() > 4 * self.conns.len() {
            self.timers = self
                .conns
                .iter()
                .filter_map(|(&k, c)| c.timer.map(|t| Reverse((t, k))))
                .collect();
        }
    }

    /// Shutdown: no new connection is accepted, each protocol is told to finish what it has
    /// under way and close (HTTP/3: GOAWAY, then H3_NO_ERROR once its requests are answered; a
    /// handshake not done is closed at once); the worker waits until they have drained (or its
    /// grace period ends).
    pub(crate) fn shut_down(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) {
        if self.closing {
            return;
        }
        self.closing = true;
        self.handing_over = ctx.handing_over;
        if self.handing_over {
            // The newer process reads the socket from now on, and passes our connections'
            // datagrams to the inbox; the socket is still ours to send on.
            self.reading = false;
            if let Err(e) = ctx
                .registry
                .reregister(&mut self.sock, self.token, Interest::WRITABLE)
            {
                tracing::warn!(worker = self.worker, "quic: cannot stop reading: {e}");
            }
        }
        let token = ctx.token;
        for (&key, c) in &mut self.conns {
            ctx.token = client_token(key);
            match c.proto.as_mut() {
                Some(proto) => proto.shut_down(
                    &mut StreamIo {
                        conn: &mut c.conn,
                        now,
                    },
                    ctx,
                ),
                None => c.conn.close(
                    now,
                    quinn_proto::VarInt::from_u64(CLOSE_NO_ERROR).unwrap_or_default(),
                    bytes::Bytes::new(),
                ),
            }
            self.touched.push(key);
        }
        ctx.token = token;
        self.drive_touched(now, ctx);
    }

    /// The worker's sweep: each connection's protocol ends the streams past their time limits.
    pub(crate) fn sweep(&mut self, ctx: &mut WorkerCtx<'_>) {
        let token = ctx.token;
        for (&key, c) in &mut self.conns {
            let Some(proto) = c.proto.as_mut() else {
                continue;
            };
            ctx.token = client_token(key);
            proto.expire(
                &mut StreamIo {
                    conn: &mut c.conn,
                    now: ctx.now,
                },
                ctx,
            );
            self.touched.push(key);
        }
        ctx.token = token;
        let now = ctx.now;
        self.drive_touched(now, ctx);
    }

    /// Calls `f` with where the upstream side delivers the response of `stream` on the
    /// connection `client` names (`None` when that exchange is no longer wanted, or the
    /// connection is gone), then sends what it wrote.
    pub(crate) fn with_downstream(
        &mut self,
        client: Token,
        stream: u32,
        ctx: &mut WorkerCtx<'_>,
        f: impl FnOnce(Option<&mut dyn Downstream>, &mut WorkerCtx<'_>),
    ) {
        let key = client.0 - CLIENT_TOKENS;
        let mut f = Some(f);
        if let Some(c) = self.conns.get_mut(&key) {
            if let Some(proto) = c.proto.as_mut() {
                let mut io = StreamIo {
                    conn: &mut c.conn,
                    now: ctx.now,
                };
                proto.with_downstream(&mut io, stream, &mut |down| {
                    if let Some(f) = f.take() {
                        f(down, ctx);
                    }
                });
            }
            self.touched.push(key);
        }
        if let Some(f) = f.take() {
            f(None, ctx);
        }
        let now = ctx.now;
        self.drive_touched(now, ctx);
    }

    /// A held request's timer for the connection `client` names came (`crate::hold`): its
    /// protocol answers what is due, and what it wrote is sent.
    pub(crate) fn release_held(&mut self, client: Token, ctx: &mut WorkerCtx<'_>) {
        let key = client.0 - CLIENT_TOKENS;
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        if let Some(proto) = c.proto.as_mut() {
            let token = std::mem::replace(&mut ctx.token, client);
            proto.release_held(
                &mut StreamIo {
                    conn: &mut c.conn,
                    now: ctx.now,
                },
                ctx,
            );
            ctx.token = token;
        }
        self.touched.push(key);
        let now = ctx.now;
        self.drive_touched(now, ctx);
    }

    /// Whether the connection `client` names is still here.
    pub(crate) fn has_client(&self, client: Token) -> bool {
        self.conns.contains_key(&(client.0 - CLIENT_TOKENS))
    }

    /// What a relay asks of the upstream side: (client, upstream, stream, what).
    /// Whether a stream woke since the last [`QuicWorker::take_wake`] emptied the list.
    pub(crate) fn has_wake(&self) -> bool {
        !self.wakes.is_empty()
    }

    pub(crate) fn take_wake(&mut self) -> Option<(Token, Token, u32, Wake)> {
        self.wakes.pop()
    }

    fn drive_touched(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for key in touched.drain(..) {
            self.drive(key, now, ctx);
        }
        // Driving may have touched none further; keep the allocation.
        if self.touched.is_empty() {
            self.touched = touched;
        }
    }

    /// One connection: its events to the endpoint and its protocol, its packets out, its next
    /// timer filed; gone once drained.
    fn drive(&mut self, key: usize, now: Instant, ctx: &mut WorkerCtx<'_>) {
        let ch = ConnectionHandle(key);
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let mut drained = false;
        // What the protocol does (a request forwarded, a stream reset) is on this client's behalf.
        let token = std::mem::replace(&mut ctx.token, client_token(key));
        loop {
            let mut progress = false;
            while let Some(event) = c.conn.poll_endpoint_events() {
                progress = true;
                drained |= event.is_drained();
                if let Some(back) = self.endpoint.handle_event(ch, event) {
                    c.conn.handle_event(back);
                }
            }
            while let Some(event) = c.conn.poll() {
                progress = true;
                handle_app_event(c, event, now, self.protocols, ctx, &mut self.handshakes);
            }
            if !progress {
                break;
            }
        }
        if let Some(proto) = c.proto.as_mut() {
            proto.relay_news(&mut self.wake_buf, ctx.proxy_cancels);
            let client = client_token(key);
            self.wakes.extend(
                self.wake_buf
                    .drain(..)
                    .map(|(up, stream, wake)| (client, up, stream, wake)),
            );
        }
        if drained {
            if c.handshaking {
                self.handshakes = self.handshakes.saturating_sub(1);
            }
            if let Some(mut proto) = c.proto.take() {
                proto.closed(ctx);
            }
            ctx.token = token;
            self.conns.remove(&key);
            return;
        }
        ctx.token = token;
        self.transmit(key, now);
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        let next = c.conn.poll_timeout();
        if next != c.timer {
            c.timer = next;
            if let Some(t) = next {
                self.timers.push(Reverse((t, key)));
            }
        }
    }

    /// Sends what the connection has to send, as GSO batches where the kernel has them.
    fn transmit(&mut self, key: usize, now: Instant) {
        loop {
            if self.held.is_some() {
                self.waiting.push(key);
                return;
            }
            let Some(c) = self.conns.get_mut(&key) else {
                return;
            };
            // One GSO send carries at most 64 KiB in all (the kernel refuses more), so as many
            // datagrams as the path's size allows: 44 of 1472 bytes, one of 64 KiB.
            let max = if self.offload.gso {
                (udp::MAX_GSO_BYTES / usize::from(c.conn.current_mtu())).clamp(1, MAX_GSO_SEGMENTS)
            } else {
                1
            };
            self.send_buf.clear();
            let Some(t) = c.conn.poll_transmit(now, max, &mut self.send_buf) else {
                return;
            };
            let buf = std::mem::take(&mut self.send_buf);
            self.send_now(&t, &buf);
            self.send_buf = buf;
        }
    }

    /// Sends `buf[..t.size]`; what the socket has no room for is held until it is writable.
    fn send_now(&mut self, t: &Transmit, buf: &[u8]) {
        let data = &buf[..t.size.min(buf.len())];
        let fd = self.sock.as_raw_fd();
        let segment = t.segment_size.filter(|_| self.offload.gso);
        self.counts.sends += 1;
        match udp::send(fd, t.destination, t.src_ip, data, segment) {
            Ok(true) => {}
            // One batch is held; another meeting a full buffer meanwhile (a stateless answer)
            // is dropped, as the network may drop any datagram.
            Ok(false) if self.held.is_none() => {
                self.held = Some((t.destination, t.src_ip, segment, data.to_vec()));
            }
            Ok(false) => {}
            Err(e)
                if segment.is_some()
                    && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) =>
            {
                // A device that cannot segment (EIO) or a kernel that refuses this batch: one
                // datagram per call from now on, and this batch sent that way.
                tracing::warn!(
                    worker = self.worker,
                    "quic: GSO send failed ({e}); sending datagrams one by one from now on"
                );
                self.offload.gso = false;
                for chunk in data.chunks(segment.unwrap_or(data.len()).max(1)) {
                    let _ = udp::send(fd, t.destination, t.src_ip, chunk, None);
                }
            }
            // A probe larger than the path (EMSGSIZE), an unreachable peer: as a lost packet.
            Err(e) => tracing::debug!(
                worker = self.worker,
                "quic: sendmsg to {}: {e}",
                t.destination
            ),
        }
    }

    fn flush_held(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) {
        let Some((to, from, segment, data)) = self.held.take() else {
            return;
        };
        match udp::send(self.sock.as_raw_fd(), to, from, &data, segment) {
            Ok(true) => {}
            Ok(false) => {
                self.held = Some((to, from, segment, data));
                return;
            }
            Err(e) => tracing::debug!(worker = self.worker, "quic: sendmsg to {to}: {e}"),
        }
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.sort_unstable();
        waiting.dedup();
        self.touched.append(&mut waiting);
        self.waiting = waiting;
        self.drive_touched(now, ctx);
    }
}

/// One event of a connection, for the transport (handshake done, lost) or its protocol.
/// Starts the connection's protocol, chosen by the ALPN the handshake agreed on (once).
fn start_protocol(c: &mut Conn, now: Instant, protocols: ProtocolFactory, ctx: &mut WorkerCtx<'_>) {
    if c.proto.is_some() {
        return;
    }
    let alpn = c
        .conn
        .crypto_session()
        .handshake_data()
        .and_then(|d| {
            d.downcast::<quinn_proto::crypto::rustls::HandshakeData>()
                .ok()
        })
        .and_then(|d| d.protocol);
    c.proto = alpn.as_deref().and_then(protocols);
    let mut io = StreamIo {
        conn: &mut c.conn,
        now,
    };
    match &mut c.proto {
        Some(p) => p.connected(&mut io, ctx),
        // The handshake offered only protocols we serve, so this is not expected.
        None => io.close(0x0110, b"no application protocol"),
    }
}

fn handle_app_event(
    c: &mut Conn,
    event: Event,
    now: Instant,
    protocols: ProtocolFactory,
    ctx: &mut WorkerCtx<'_>,
    handshakes: &mut usize,
) {
    tracing::trace!("quic: {event:?}");
    match event {
        Event::DatagramReceived | Event::DatagramsUnblocked => {}
        // The ClientHello is read, so the protocol is known: it starts now, not at the end of
        // the handshake, so that requests sent as 0-RTT data (streams opened before
        // `Connected`) are seen — their `Opened` events come only once.
        Event::HandshakeDataReady => start_protocol(c, now, protocols, ctx),
        Event::Connected => {
            if c.handshaking {
                c.handshaking = false;
                *handshakes = handshakes.saturating_sub(1);
            }
            start_protocol(c, now, protocols, ctx);
        }
        Event::ConnectionLost { reason } => {
            let stats = c.conn.stats();
            tracing::debug!(
                "quic: connection from {} lost: {reason} ({} datagrams sent, {} lost, {} congestion events)",
                c.conn.remote_address(),
                stats.udp_tx.datagrams,
                stats.path.lost_packets,
                stats.path.congestion_events
            );
            if let Some(mut p) = c.proto.take() {
                p.closed(ctx);
            }
        }
        Event::Stream(event) => {
            let Some(proto) = c.proto.as_mut() else {
                return;
            };
            let mut io = StreamIo {
                conn: &mut c.conn,
                now,
            };
            match event {
                StreamEvent::Opened { dir } => {
                    while let Some(id) = io.conn.streams().accept(dir) {
                        proto.stream_readable(&mut io, u64::from(id), ctx);
                    }
                }
                StreamEvent::Readable { id } => proto.stream_readable(&mut io, u64::from(id), ctx),
                StreamEvent::Writable { id } => proto.stream_writable(&mut io, u64::from(id), ctx),
                StreamEvent::Stopped { id, error_code } => {
                    proto.stream_stopped(&mut io, u64::from(id), error_code.into_inner(), ctx);
                }
                StreamEvent::Finished { id } => proto.stream_acked(&mut io, u64::from(id), ctx),
                StreamEvent::Available { .. } => {}
            }
        }
    }
}
