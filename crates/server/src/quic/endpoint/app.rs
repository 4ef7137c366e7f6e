//! The protocol above each connection (HTTP/3, or the transport's echo): chosen by the ALPN and
//! started at the handshake, given the connection's stream events, and the worker's calls into
//! it — shutdown, the sweep, a relayed response's downstream, a held request's timer.

use std::time::Instant;

use mio::{Interest, Token};
use quinn_proto::{Event, StreamEvent};

use super::{client_token, Conn, ProtocolFactory, QuicWorker, CLIENT_TOKENS, CLOSE_NO_ERROR};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::quic::streams::StreamIo;

impl QuicWorker {
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
}

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

/// One event of a connection, for the transport (handshake done, lost) or its protocol.
pub(super) fn handle_app_event(
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
