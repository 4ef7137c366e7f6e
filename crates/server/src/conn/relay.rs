//! The HTTP/1.1 side of the proxy's `Downstream` contract: an upstream's response head, body
//! (chunked when its length is unknown) and trailers written for the client, the exchange's log
//! line, and a WebSocket tunnel's bytes both ways.

use std::io;
use std::time::Duration;

use mio::Token;

use super::{ClientTunnel, Conn};
use crate::access_log::UpstreamFields;
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::{log_relayed, Downstream, RelayedFields, TunnelRead};
use crate::proxy::job::RelayBody;
use lowlat_http::Version;

impl Downstream for Conn {
    fn client_addresses(&mut self) -> Option<lowlat_http::proxy_protocol::Addresses> {
        // From a balancer: what its header named, as haproxy passes it on.
        if let Some(named) = &self.named {
            return Some(**named);
        }
        Some(lowlat_http::proxy_protocol::Addresses {
            source: self.peer,
            destination: self.io.socket().local_addr().ok()?,
        })
    }

    fn relay_head(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        reason: &str,
        fields: &[lowlat_http::client::Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        added: &[u8],
        body: RelayBody,
    ) {
        let head = RelayedFields {
            fields,
            pass,
            lines: None,
        };
        self.write_relayed_head(ctx, status, reason, head, added, b"", body);
    }

    fn relay_head_lines(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        reason: &str,
        head: RelayedFields<'_, '_>,
        added: &[u8],
        own: &[u8],
        body: RelayBody,
    ) {
        self.write_relayed_head(ctx, status, reason, head, added, own, body);
    }

    fn relay_body(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        let Some(relay) = &mut self.relay else {
            return;
        };
        if relay.head_only || data.is_empty() {
            return;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        relay.body_bytes += data.len() as u64;
        if relay.chunked {
            let mut size = [0u8; 16];
            let n = hex_len(data.len(), &mut size);
            self.wbuf.extend_from_slice(&size[..n]);
            self.wbuf.extend_from_slice(b"\r\n");
            self.wbuf.extend_from_slice(data);
            self.wbuf.extend_from_slice(b"\r\n");
        } else {
            self.wbuf.extend_from_slice(data);
        }
    }
    /// The file goes out after what is buffered, by `sendfile(2)` (or read and encrypted over
    /// TLS) as the socket takes it (`conn::output`), and the requests pipelined behind it wait
    /// for it as they wait for a file this connection answers itself.
    fn relay_file(&mut self, ctx: &mut WorkerCtx<'_>, file: crate::file_body::FileBody) {
        let Some(relay) = &mut self.relay else {
            return;
        };
        if relay.head_only || file.len == 0 {
            return;
        }
        if relay.chunked || self.file.is_some() {
            // Framed piece by piece (not what a held answer is: it announces its length).
            return crate::proxy::downstream::read_file_as_body(self, ctx, &file);
        }
        relay.body_bytes += file.len;
        self.file = Some(Box::new(file));
    }
    /// Trailer fields go in the chunked body's trailer section (RFC 9112 §7.1.2), sent whether
    /// or not the client said `TE: trailers`: a recipient that does not want them discards them.
    /// A response not sent chunked (an HTTP/1.0 client, HEAD) has nowhere to put them.
    fn relay_trailers(&mut self, ctx: &mut WorkerCtx<'_>, fields: &[(&[u8], &[u8])]) {
        let Some(relay) = &mut self.relay else {
            return;
        };
        if !relay.chunked {
            return;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        self.wbuf.extend_from_slice(b"0\r\n");
        for (name, value) in fields {
            self.wbuf.extend_from_slice(name);
            self.wbuf.extend_from_slice(b": ");
            self.wbuf.extend_from_slice(value);
            self.wbuf.extend_from_slice(b"\r\n");
        }
        self.wbuf.extend_from_slice(b"\r\n");
        // The last chunk is written: `relay_end` has nothing to add.
        relay.chunked = false;
    }

    fn relay_end(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        upstream: &str,
        upstream_status: u16,
        upstream_time: Duration,
    ) {
        let Some(relay) = self.relay.take() else {
            return;
        };
        self.upstream = None;
        let unread = self.end_upload();
        if relay.chunked {
            self.wbuf.extend_from_slice(b"0\r\n\r\n");
        }
        log_relayed(
            ctx,
            self.held.as_deref(),
            self.peer,
            relay.status,
            relay.body_bytes,
            relay.started,
            Some(UpstreamFields {
                addr: upstream,
                status: upstream_status,
                time: upstream_time,
            }),
        );
        if !relay.keep_alive {
            self.closing = true;
            self.lingering = self.rlen > 0 || unread;
        }
        // Requests pipelined behind this one are answered now.
        self.unparsed = self.rlen > 0;
    }

    fn relay_abort(&mut self, ctx: &mut WorkerCtx<'_>) {
        // Already-written bytes go out; then the close shows the response was cut.
        self.relay = None;
        self.upstream = None;
        self.end_upload();
        let _ = self.flush(ctx);
        self.close_now(ctx);
    }

    fn relay_error(&mut self, ctx: &mut WorkerCtx<'_>, status: u16) {
        let Some(mut relay) = self.relay.take() else {
            return;
        };
        self.upstream = None;
        if self.end_upload() {
            relay.keep_alive = false;
            self.lingering = true;
        }
        log_relayed(
            ctx,
            self.held.as_deref(),
            self.peer,
            status,
            0,
            relay.started,
            None,
        );
        Self::write_status(
            &mut self.wbuf,
            ctx,
            status,
            relay.version,
            !relay.keep_alive,
        );
        if !relay.keep_alive {
            self.closing = true;
        }
        self.unparsed = self.rlen > 0;
        // Nothing else will write it: the upstream side is done with this exchange.
        self.drive(ctx);
    }

    fn backlog(&self) -> usize {
        // Encrypted bytes still waiting for the socket count too: a tunnel half-closes the
        // client only once nothing at all is left to send, TLS records included.
        self.wbuf.len() - self.wpos + usize::from(self.io.has_pending())
    }

    fn auth_user(&mut self, user: &[u8]) {
        if let Some(held) = self.held.as_deref_mut() {
            held.set_user(user);
        }
    }

    fn relay_link(&mut self, upstream: Token) {
        self.upstream = Some(upstream);
    }

    fn flush_relayed(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.drive(ctx);
    }

    fn tunnel_open(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        reason: &str,
        fields: &[lowlat_http::client::Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        upstream: &str,
    ) -> bool {
        if self.relay.is_none() || self.closed {
            return false;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        let out = &mut self.wbuf;
        out.extend_from_slice(b"HTTP/1.1 101 ");
        out.extend_from_slice(if reason.is_empty() {
            b"Switching Protocols"
        } else {
            reason.as_bytes()
        });
        out.extend_from_slice(b"\r\n");
        for f in fields.iter().filter(|f| pass(f.name)) {
            out.extend_from_slice(f.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(f.value);
            out.extend_from_slice(b"\r\n");
        }
        // The upgrade's own fields are hop-by-hop, so `pass` dropped the upstream's: this hop's.
        out.extend_from_slice(b"Upgrade: websocket\r\nConnection: upgrade\r\n\r\n");
        if let Some(relay) = &mut self.relay {
            relay.status = 101;
            relay.keep_alive = false;
        }
        self.tunnel = Some(Box::new(ClientTunnel {
            upstream: upstream.to_owned(),
            received: 0,
            sent: 0,
            shut_wanted: false,
            shut_done: false,
        }));
        true
    }

    fn tunnel_read(&mut self, _ctx: &mut WorkerCtx<'_>, buf: &mut [u8]) -> TunnelRead {
        let Some(t) = self.tunnel.as_deref_mut() else {
            return TunnelRead::Failed;
        };
        if self.closed {
            return TunnelRead::Failed;
        }
        if self.rlen > 0 {
            // Sent behind the handshake, before the 101 came back: the first tunnelled bytes.
            let n = self.rlen.min(buf.len());
            buf[..n].copy_from_slice(&self.rbuf[..n]);
            self.rbuf.copy_within(n..self.rlen, 0);
            self.rlen -= n;
            t.received += n as u64;
            return TunnelRead::Data(n);
        }
        if !self.read_ready {
            return TunnelRead::Blocked;
        }
        loop {
            return match self.io.read(buf) {
                Ok(r) if r.n == 0 => {
                    self.read_ready = false;
                    TunnelRead::Eof
                }
                Ok(r) => {
                    self.read_ready = r.more || self.fin_seen;
                    t.received += r.n as u64;
                    TunnelRead::Data(r.n)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.read_ready = false;
                    TunnelRead::Blocked
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => TunnelRead::Failed,
            };
        }
    }

    fn tunnel_write(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        let Some(t) = self.tunnel.as_deref_mut() else {
            return;
        };
        if self.closed {
            return;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        t.sent += data.len() as u64;
        self.wbuf.extend_from_slice(data);
    }

    fn tunnel_shutdown(&mut self, ctx: &mut WorkerCtx<'_>) {
        if let Some(t) = self.tunnel.as_deref_mut() {
            t.shut_wanted = true;
            self.drive(ctx);
        }
    }

    fn tunnel_end(&mut self, ctx: &mut WorkerCtx<'_>) {
        // The upstream side has closed its connection already.
        self.upstream = None;
        if !self.closed {
            let _ = self.flush(ctx);
            self.close_now(ctx);
        }
    }
}

/// `n` in lower-case hexadecimal (a chunk size), into `out`; returns the digits' count.
fn hex_len(mut n: usize, out: &mut [u8; 16]) -> usize {
    let mut digits = [0u8; 16];
    let mut i = 0;
    loop {
        digits[i] = b"0123456789abcdef"[n & 0xf];
        i += 1;
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    for (k, d) in digits[..i].iter().rev().enumerate() {
        out[k] = *d;
    }
    i
}

impl Conn {
    /// A relayed response's head into the write buffer: the status line, the fields that pass
    /// (`head.lines` in one piece when there are, else each field `pass` lets through), the
    /// site's added lines, `own`'s, and the framing.
    #[allow(clippy::too_many_arguments)]
    fn write_relayed_head(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        reason: &str,
        head: RelayedFields<'_, '_>,
        added: &[u8],
        own: &[u8],
        body: RelayBody,
    ) {
        let RelayedFields {
            fields,
            pass,
            lines,
        } = head;
        let Some(relay) = &mut self.relay else {
            return;
        };
        if self.upload.is_some() {
            // Answered before the body ended: the rest of it is not read, so the next request
            // cannot be found; the connection closes after this response.
            relay.keep_alive = false;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = ctx.pool.take_write();
        }
        let out = &mut self.wbuf;
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        out.push(b' ');
        // The upstream's phrase; an empty one (allowed) gets the standard phrase if there is one.
        let standard = lowlat_http::response::reason(status);
        out.extend_from_slice(if !reason.is_empty() {
            reason.as_bytes()
        } else if standard == "Unknown" {
            b""
        } else {
            standard.as_bytes()
        });
        out.extend_from_slice(b"\r\n");
        if let Some(lines) = lines {
            out.extend_from_slice(lines);
        } else {
            for f in fields.iter().filter(|f| pass(f.name)) {
                out.extend_from_slice(f.name.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(f.value);
                out.extend_from_slice(b"\r\n");
            }
        }
        for (name, value) in crate::proxy::downstream::added_lines(added, fields, pass) {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(own);
        let length = |n: u64, out: &mut Vec<u8>| {
            out.extend_from_slice(b"Content-Length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        };
        match body {
            RelayBody::Length(n) => length(n, out),
            RelayBody::None { length: announced } => {
                let bodiless = (100..200).contains(&status) || status == 204 || status == 304;
                if relay.head_only {
                    if let Some(n) = announced {
                        length(n, out);
                    }
                } else if !bodiless {
                    length(0, out);
                }
            }
            RelayBody::Unknown => {
                if relay.version == Version::Http11 {
                    if !relay.head_only {
                        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
                        relay.chunked = true;
                    }
                } else {
                    // An HTTP/1.0 client reads to the close.
                    relay.keep_alive = false;
                }
            }
        }
        if !relay.keep_alive {
            out.extend_from_slice(b"Connection: close\r\n");
        } else if relay.version == Version::Http10 {
            out.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        out.extend_from_slice(b"\r\n");
        relay.status = status;
    }
}
