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
//!
//! # Layout
//! - this file: the worker's endpoint and connections as data, built once; its counts.
//! - `recv`: datagrams in, from the socket or a newer process's hand-off inbox; a new client
//!   accepted, sent a Retry, or refused.
//! - `drive`: connections driven after each call (events, packets out, next timer) and the
//!   timer heap.
//! - `send`: packets out, in GSO batches; a batch the socket had no room for, held.
//! - `app`: the protocol above each connection: started at the handshake, given its events, and
//!   the worker's calls into it (shutdown, sweep, a relayed response, a held request).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use mio::net::UdpSocket;
use mio::{Interest, Registry, Token};
use quinn_proto::{Endpoint, EndpointConfig};
use rustc_hash::FxHashMap;

use super::handoff::Inbox;
use super::setup::QuicShared;
use super::streams::QuicProtocol;
use super::udp::{Offload, RECV_BUFFER};
use crate::proxy::downstream::Wake;

mod app;
mod drive;
mod recv;
mod send;

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

    /// Whether the connection `client` names is still here.
    pub(crate) fn has_client(&self, client: Token) -> bool {
        self.conns.contains_key(&(client.0 - CLIENT_TOKENS))
    }

    /// Whether a stream woke since the last [`QuicWorker::take_wake`] emptied the list.
    pub(crate) fn has_wake(&self) -> bool {
        !self.wakes.is_empty()
    }

    /// What a relay asks of the upstream side: (client, upstream, stream, what).
    pub(crate) fn take_wake(&mut self) -> Option<(Token, Token, u32, Wake)> {
        self.wakes.pop()
    }
}
