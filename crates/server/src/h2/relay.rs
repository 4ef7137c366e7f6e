//! An HTTP/2 stream as the upstream side's [`Downstream`]: the response head becomes HEADERS
//! (names lower-cased, connection-specific fields already dropped by the proxy), body bytes join
//! the stream's output and go out in DATA frames as the windows allow (`super::flow`), and the
//! end is an END_STREAM flag — or, when the upstream sent trailer fields, a trailing HEADERS
//! frame (RFC 9113 §8.1) once the body is out; a failed upstream resets just this stream.
//!
//! A stream opened by an extended CONNECT (RFC 8441) is the client's side of a WebSocket tunnel
//! instead: the upstream's `101` becomes `200`, its bytes go out in DATA frames and the
//! client's come from theirs, the stream's receive window given back only as the upstream takes
//! them; a half-close is END_STREAM, a broken or idle tunnel a RST_STREAM(CANCEL).

use lowlat_http::client::Header;
use lowlat_http::h2::frame::{self, ErrorCode};
use mio::Token;

use super::conn::{forget, remember, H2Conn};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::{log_relayed, lowered_fields, relayed_head, Downstream, TunnelRead};
use crate::proxy::job::RelayBody;

/// Stream `id` of `conn`, receiving a relayed response.
pub(crate) struct StreamRelay<'a> {
    pub(crate) conn: &'a mut H2Conn,
    pub(crate) id: u32,
}

impl H2Conn {
    /// Whether stream `id` awaits a relayed response.
    pub(crate) fn has_relay(&self, id: u32) -> bool {
        self.streams.iter().any(|s| s.id == id && s.relay.is_some())
    }

    /// Streams whose relayed response has drained below `low`: their upstreams may be read again.
    pub(crate) fn relays_below(&self, low: usize, out: &mut Vec<(Token, u32)>) {
        for s in &self.streams {
            if let Some(up) = s.relay.and_then(|r| r.upstream) {
                if s.pending() < low as u64 {
                    out.push((up, s.id));
                }
            }
        }
    }

    fn stream_index(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// Ends stream `id` with a HEADERS frame of trailer fields. Encoded now, as it is written:
    /// HPACK's table is the connection's, so blocks must be encoded in the order they are sent.
    pub(super) fn write_trailers(&mut self, id: u32, fields: &[(Vec<u8>, Vec<u8>)]) {
        let mut block = std::mem::take(&mut self.block);
        block.clear();
        self.encoder.encode_fields(
            fields.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
            &mut block,
        );
        frame::write_headers(
            &mut self.wbuf,
            id,
            &block,
            true,
            self.peer_settings.max_frame_size as usize,
        );
        self.block = block;
    }
}

/// A tunnel stream's one line and count, when it ends however it ends (closed, broken, reset
/// by the client): the client saw `200`, the upstream said `101`.
pub(super) fn log_tunnel(
    ctx: &mut WorkerCtx<'_>,
    peer: std::net::SocketAddr,
    s: &super::stream::Stream,
) {
    let (Some(t), Some(r)) = (s.tunnel.as_deref(), s.relay) else {
        return;
    };
    if !t.open {
        return;
    }
    log_relayed(
        ctx,
        s.held.as_deref(),
        peer,
        r.status,
        r.body_bytes,
        s.started,
        Some(crate::access_log::UpstreamFields {
            addr: &t.upstream,
            status: 101,
            time: t.upstream_time,
        }),
    );
}

/// The line of a stream whose client reset it, or left, before its answer was complete, as
/// HTTP/1.1's: 499 when no head had gone out (a relayed answer not begun, a request held back
/// by a rate limit's delay), else the status and the body bytes sent. A tunnel's line is
/// [`log_tunnel`]'s; a relay that ended was logged then (and taken).
pub(super) fn log_left(
    ctx: &mut WorkerCtx<'_>,
    peer: std::net::SocketAddr,
    s: &super::stream::Stream,
) {
    if s.tunnel.is_some() {
        return;
    }
    let (status, bytes) = match (s.relay, &s.hold) {
        (Some(r), _) if r.status != 0 => (r.status, r.body_bytes),
        (Some(_), _) | (None, Some(_)) => (499, 0),
        (None, None) => return,
    };
    log_relayed(ctx, s.held.as_deref(), peer, status, bytes, s.started, None);
}

impl Downstream for StreamRelay<'_> {
    fn client_addresses(&mut self) -> Option<lowlat_http::proxy_protocol::Addresses> {
        let c = &mut *self.conn;
        if let Some(named) = &c.named {
            return Some(**named);
        }
        Some(lowlat_http::proxy_protocol::Addresses {
            source: c.peer,
            destination: c.io.socket().local_addr().ok()?,
        })
    }

    fn relay_head(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        _reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        added: &[u8],
        body: RelayBody,
    ) {
        let c = &mut *self.conn;
        let Some(i) = c.stream_index(self.id) else {
            return;
        };
        if c.streams[i].tunnel.is_some() && status / 100 == 2 {
            // An extended CONNECT answered 2xx would read as "tunnel established" (RFC 8441
            // §5): an upstream that did not switch to a WebSocket did not establish one.
            tracing::debug!("upstream answered a WebSocket handshake {status}, not 101");
            return self.relay_error(ctx, 502);
        }
        let head_only = c.streams[i].relay.is_some_and(|r| r.head_only);
        let end = relayed_head(
            fields,
            pass,
            added,
            body,
            head_only,
            &mut c.res_buf,
            &mut c.res_fields,
        );
        c.write_head(self.id, status, end);
        if let Some(r) = &mut c.streams[i].relay {
            r.status = status;
            if end {
                // Nothing follows; `relay_end` closes the stream.
                r.head_only = true;
            }
        }
    }

    fn relay_body(&mut self, _ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        let c = &mut *self.conn;
        let Some(i) = c.stream_index(self.id) else {
            return;
        };
        let s = &mut c.streams[i];
        let Some(r) = &mut s.relay else {
            return;
        };
        if r.head_only || data.is_empty() {
            return;
        }
        r.body_bytes += data.len() as u64;
        if s.out_pos == s.out.len() {
            s.out.clear();
            s.out_pos = 0;
        }
        s.out.extend_from_slice(data);
    }
    /// The file goes out after the stream's buffered body, read into DATA frames as the
    /// windows open (`flow`), as a file this connection answers itself.
    fn relay_file(&mut self, ctx: &mut WorkerCtx<'_>, file: crate::file_body::FileBody) {
        let Some(i) = self.conn.stream_index(self.id) else {
            return;
        };
        if self.conn.streams[i].file.is_some() {
            return crate::proxy::downstream::read_file_as_body(self, ctx, &file);
        }
        let s = &mut self.conn.streams[i];
        let Some(r) = &mut s.relay else {
            return;
        };
        if r.head_only || file.len == 0 {
            return;
        }
        r.body_bytes += file.len;
        s.file = Some(file);
    }
    fn relay_trailers(&mut self, _ctx: &mut WorkerCtx<'_>, fields: &[(&[u8], &[u8])]) {
        let c = &mut *self.conn;
        let Some(i) = c.stream_index(self.id) else {
            return;
        };
        let s = &mut c.streams[i];
        if s.relay.is_none_or(|r| r.head_only) {
            return;
        }
        s.trailers = Some(Box::new(
            fields
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), v.to_vec()))
                .collect(),
        ));
    }

    fn relay_end(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        upstream: &str,
        upstream_status: u16,
        upstream_time: std::time::Duration,
    ) {
        let c = &mut *self.conn;
        let Some(i) = c.stream_index(self.id) else {
            return;
        };
        let s = &mut c.streams[i];
        let Some(r) = s.relay.take() else {
            return;
        };
        log_relayed(
            ctx,
            s.held.as_deref(),
            c.peer,
            r.status,
            r.body_bytes,
            s.started,
            Some(crate::access_log::UpstreamFields {
                addr: upstream,
                status: upstream_status,
                time: upstream_time,
            }),
        );
        if r.head_only {
            // The HEADERS frame ended the stream.
            let s = c.streams.swap_remove(i);
            forget(&s, &mut c.wbuf, &mut c.closed_ids, &mut c.reset_ids);
            return;
        }
        if s.pending() == 0 {
            match s.trailers.take() {
                Some(trailers) => c.write_trailers(self.id, &trailers),
                None => frame::write_data_header(&mut c.wbuf, self.id, 0, true),
            }
            let s = c.streams.swap_remove(i);
            forget(&s, &mut c.wbuf, &mut c.closed_ids, &mut c.reset_ids);
        }
        // Else the rest goes out with the windows; its last frame ends the stream.
    }

    fn relay_abort(&mut self, ctx: &mut WorkerCtx<'_>) {
        // The body cannot be completed: only this stream is reset.
        self.conn.stream_error(self.id, ErrorCode::Internal);
        self.conn.drive(ctx);
    }

    fn relay_error(&mut self, ctx: &mut WorkerCtx<'_>, status: u16) {
        let c = &mut *self.conn;
        let Some(i) = c.stream_index(self.id) else {
            return;
        };
        let s = &mut c.streams[i];
        s.relay = None;
        // Logged as HTTP/1.1's are: the request, the gateway error, no upstream answer.
        log_relayed(ctx, s.held.as_deref(), c.peer, status, 0, s.started, None);
        c.status_page(ctx, status);
        c.send_response(self.id, None, Some(i));
        // Nothing else will write it: the upstream side is done with this exchange.
        c.drive(ctx);
    }

    fn backlog(&self) -> usize {
        self.conn
            .streams
            .iter()
            .find(|s| s.id == self.id)
            .map_or(0, |s| usize::try_from(s.pending()).unwrap_or(usize::MAX))
    }

    fn auth_user(&mut self, user: &[u8]) {
        let c = &mut *self.conn;
        if let Some(i) = c.stream_index(self.id) {
            if let Some(held) = c.streams[i].held.as_deref_mut() {
                held.set_user(user);
            }
        }
    }

    fn relay_link(&mut self, upstream: Token) {
        let c = &mut *self.conn;
        if let Some(i) = c.stream_index(self.id) {
            if let Some(r) = &mut c.streams[i].relay {
                r.upstream = Some(upstream);
            }
        }
    }

    fn flush_relayed(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.conn.drive(ctx);
    }

    fn upload_drained(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.conn.upload_room(ctx, self.id);
        self.conn.drive(ctx);
    }

    fn tunnel_open(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        _reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        upstream: &str,
    ) -> bool {
        let c = &mut *self.conn;
        let Some(i) = c.stream_index(self.id) else {
            return false;
        };
        let s = &mut c.streams[i];
        let (Some(t), Some(r)) = (s.tunnel.as_deref_mut(), s.relay.as_mut()) else {
            // Not an extended CONNECT: an HTTP/2 stream has no other way to switch protocols.
            return false;
        };
        t.open = true;
        t.upstream = upstream.to_owned();
        t.upstream_time = ctx.now.saturating_duration_since(s.started);
        r.status = 200;
        // RFC 8441 §5: `200`, without the HTTP/1.1 handshake's accept value (the proxy checked
        // it); `pass` already dropped `Upgrade` and `Connection`.
        lowered_fields(
            fields,
            &|name| pass(name) && !name.eq_ignore_ascii_case("sec-websocket-accept"),
            b"",
            None,
            &mut c.res_buf,
            &mut c.res_fields,
        );
        c.write_head(self.id, 200, false);
        true
    }

    fn tunnel_read(&mut self, ctx: &mut WorkerCtx<'_>, buf: &mut [u8]) -> TunnelRead {
        let initial = i64::from(ctx.cfg.h2.initial_window);
        let c = &mut *self.conn;
        let Some(i) = c.stream_index(self.id) else {
            return TunnelRead::Failed;
        };
        let s = &mut c.streams[i];
        let Some(t) = s.tunnel.as_deref_mut() else {
            return TunnelRead::Failed;
        };
        let left = t.inbound.len() - t.taken;
        if left == 0 {
            return if t.client_eof {
                TunnelRead::Eof
            } else {
                TunnelRead::Blocked
            };
        }
        let n = left.min(buf.len());
        buf[..n].copy_from_slice(&t.inbound[t.taken..t.taken + n]);
        t.taken += n;
        if t.taken == t.inbound.len() {
            t.inbound.clear();
            t.taken = 0;
            // All taken: the client may send a window's worth more (flow control is the
            // tunnel's back-pressure towards the client).
            if !t.client_eof && s.recv_window < initial / 2 {
                let inc = initial - s.recv_window;
                s.recv_window += inc;
                frame::write_window_update(&mut c.wbuf, self.id, inc as u32);
                c.drive(ctx);
            }
        }
        TunnelRead::Data(n)
    }

    fn tunnel_write(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        self.relay_body(ctx, data);
    }

    fn tunnel_shutdown(&mut self, ctx: &mut WorkerCtx<'_>) {
        let c = &mut *self.conn;
        let Some(i) = c.stream_index(self.id) else {
            return;
        };
        let s = &mut c.streams[i];
        let Some(t) = s.tunnel.as_deref_mut() else {
            return;
        };
        t.shut = true;
        // Everything before it is written (the tunnel waits for that): END_STREAM now.
        if s.pending() == 0 {
            frame::write_data_header(&mut c.wbuf, self.id, 0, true);
        }
        c.drive(ctx);
    }

    fn tunnel_end(&mut self, ctx: &mut WorkerCtx<'_>) {
        let c = &mut *self.conn;
        let Some(i) = c.stream_index(self.id) else {
            return;
        };
        let s = c.streams.swap_remove(i);
        let Some(t) = s.tunnel.as_deref() else {
            return;
        };
        log_tunnel(ctx, c.peer, &s);
        if t.shut && t.client_eof && s.pending() == 0 {
            // Closed both ways, all written: the stream is over.
            remember(&mut c.closed_ids, self.id);
        } else {
            // Broken, or idle too long: the client's side is cut.
            frame::write_rst_stream(&mut c.wbuf, self.id, ErrorCode::Cancel);
            remember(&mut c.reset_ids, self.id);
        }
        c.drive(ctx);
    }
}
