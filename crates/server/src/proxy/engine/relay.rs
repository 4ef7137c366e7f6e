//! A response read and relayed to the client as it arrives: the head through the codec's
//! response parser (refused when malformed or when a bare LF could split it; `100 Continue`
//! passed over; a `101` to a WebSocket handshake opens a tunnel), the body decoded by its framing
//! and handed on, the trailer fields that may pass; a FastCGI exchange's bytes go to `fcgi`
//! instead.

use std::io;

use lowlat_http::body::{trailer_fields, ChunkedDecoder};
use lowlat_http::client::{
    parse_response, parse_upgrade_response, ResponseBody, ResponseHeaderSlots,
};
use lowlat_http::limits::MAX_HEADERS;
use lowlat_http::Status;

use super::{Failure, Upstreams, RELAY_HIGH_WATER};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
use crate::proxy::fcgi::{self, Progress};
use crate::proxy::headers::response_field_passes;
use crate::proxy::job::RelayBody;
use crate::proxy::trailers::trailer_passes;
use crate::proxy::upstream::{BodyLeft, Phase};

impl Upstreams {
    /// One read of the response and what it brings. Returns false when there is nothing more to
    /// do now (drained, paused, or the exchange ended).
    pub(super) fn read_response(
        &mut self,
        key: usize,
        ctx: &mut WorkerCtx<'_>,
        down: &mut dyn Downstream,
    ) -> bool {
        let c = &mut self.conns[key];
        if c.rbuf.is_empty() {
            c.rbuf = ctx.pool.take_read();
        }
        if c.rlen == c.rbuf.len() {
            // Only a head can fill the buffer (a body is handed on as it comes).
            self.fail(key, Failure::Invalid, ctx, down);
            return false;
        }
        match c.sock.read(&mut c.rbuf[c.rlen..]) {
            Ok(0) => {
                c.readable = false;
                self.eof(key, ctx, down);
                false
            }
            Ok(n) => {
                // A short read drains the socket: the next edge says when there is more (as
                // for client connections) — unless the edge already said the server closed,
                // which no later edge repeats.
                c.readable = !c.sock.drained_after(c.rlen + n < c.rbuf.len()) || c.closed_seen;
                c.rlen += n;
                c.got_bytes = true;
                if c.phase == Phase::Body {
                    c.deadline = ctx.now + c.group.cfg.timeouts.read;
                }
                if !self.process(key, ctx, down) {
                    return false;
                }
                down.flush_relayed(ctx);
                if let Some(c) = self.conns.get_mut(key) {
                    if c.phase == Phase::Body && down.backlog() > RELAY_HIGH_WATER {
                        c.paused = true;
                    }
                }
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                c.readable = false;
                false
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(_) => {
                self.fail(key, Failure::Closed, ctx, down);
                false
            }
        }
    }

    /// Handles what the read buffer holds: the head (once), then body bytes. Returns false when
    /// the exchange ended (the connection is back in its pool, or gone).
    fn process(&mut self, key: usize, ctx: &mut WorkerCtx<'_>, down: &mut dyn Downstream) -> bool {
        let c = &mut self.conns[key];
        if c.fcgi.is_some() {
            let fresh = !c.reused && !c.got_bytes;
            let progress = fcgi::process(c, ctx, down);
            if fresh && c.got_bytes {
                // A new connection got its process: as many as now hold one, php-fpm serves.
                let _ = self.fastcgi_seen(key);
            }
            let c = &mut self.conns[key];
            return match progress {
                Progress::More => true,
                Progress::File => {
                    c.phase = Phase::File;
                    true
                }
                Progress::Done => {
                    self.finish(key, ctx, down);
                    false
                }
                // Not processed (overloaded): as a connection the server closed, it may go
                // elsewhere.
                Progress::Refused => {
                    self.fail(key, Failure::Closed, ctx, down);
                    false
                }
                Progress::Invalid => {
                    self.fail(key, Failure::Invalid, ctx, down);
                    false
                }
            };
        }
        // While a body streams (Sending), an upstream may answer before it ends.
        if matches!(c.phase, Phase::Waiting | Phase::Sending) {
            loop {
                let head_request = c.job.as_ref().is_some_and(|j| j.head_request);
                let upgrade = c.job.as_ref().is_some_and(|j| j.upgrade);
                let mut slots: ResponseHeaderSlots<'_> =
                    [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
                let rbuf = std::mem::take(&mut c.rbuf);
                let parsed = if upgrade {
                    parse_upgrade_response(&rbuf[..c.rlen], &mut slots)
                } else {
                    parse_response(&rbuf[..c.rlen], head_request, &mut slots)
                };
                let p = match parsed {
                    Ok(Status::Complete(p)) => p,
                    Ok(Status::Partial) => {
                        c.rbuf = rbuf;
                        return true;
                    }
                    Err(e) => {
                        tracing::debug!(server = %c.group.cfg.servers[c.server].label, "upstream response refused: {e}");
                        c.rbuf = rbuf;
                        self.fail(key, Failure::Invalid, ctx, down);
                        return false;
                    }
                };
                let head_len = p.head.head_len;
                if has_bare_lf(&rbuf[..head_len]) {
                    // A lone LF in a head: a recipient MAY take it for a line end (RFC 9112
                    // §2.2), which would turn one field into two here — response splitting.
                    // A proxy refuses it instead of relaying a head it re-serialises.
                    tracing::debug!(server = %c.group.cfg.servers[c.server].label, "upstream response refused: bare LF in its head");
                    c.rbuf = rbuf;
                    self.fail(key, Failure::Invalid, ctx, down);
                    return false;
                }
                if p.head.status == 101 {
                    // Only reachable for a WebSocket handshake (a 101 to anything else is a
                    // parse error above, answered 502).
                    let fields = p.fields;
                    let connection = || {
                        fields
                            .iter()
                            .filter(|f| f.name.eq_ignore_ascii_case("connection"))
                            .map(|f| f.value)
                    };
                    let pass = |name: &str| response_field_passes(name, connection());
                    let label = &c.group.cfg.servers[c.server].label;
                    let accepted = c.job.as_ref().and_then(|j| j.ws_accept.as_deref());
                    if !crate::proxy::upgrade::switched_to_websocket(fields)
                        || accepted
                            .is_some_and(|a| !crate::proxy::upgrade::accept_matches(fields, a))
                        || !down.tunnel_open(ctx, p.reason, fields, &pass, label)
                    {
                        tracing::debug!(server = %label, "upstream 101 refused: not to websocket, or the client cannot tunnel");
                        c.rbuf = rbuf;
                        self.fail(key, Failure::Invalid, ctx, down);
                        return false;
                    }
                    self.open_tunnel(key, rbuf, head_len, ctx, down);
                    return true;
                }
                if p.head.is_interim() {
                    // 100 Continue and the like: the request went whole, nothing to relay.
                    let mut rbuf = rbuf;
                    rbuf.copy_within(head_len..c.rlen, 0);
                    c.rlen -= head_len;
                    c.rbuf = rbuf;
                    continue;
                }
                let fields = p.fields;
                // `pass` is asked of every field (twice when the cache keeps a copy): the
                // `Connection` lines are looked for once here, not once a field.
                let with_connection = match fields
                    .iter()
                    .position(|f| f.name.eq_ignore_ascii_case("connection"))
                {
                    Some(at) => &fields[at..],
                    None => &[],
                };
                let connection = || {
                    with_connection
                        .iter()
                        .filter(|f| f.name.eq_ignore_ascii_case("connection"))
                        .map(|f| f.value)
                };
                let announced = p.head.content_length;
                let (relay, left) = match p.head.body {
                    ResponseBody::None => (RelayBody::None { length: announced }, None),
                    ResponseBody::Length(n) => (RelayBody::Length(n), Some(BodyLeft::Length(n))),
                    ResponseBody::Chunked => (
                        RelayBody::Unknown,
                        Some(BodyLeft::Chunked(Box::new(
                            ChunkedDecoder::new(u64::MAX).keep_trailers(),
                        ))),
                    ),
                    ResponseBody::UntilClose => (RelayBody::Unknown, Some(BodyLeft::UntilClose)),
                };
                c.status = p.head.status;
                // A request not all written leaves the connection out of step.
                c.keep_alive = p.head.keep_alive && !c.refused_write;
                let pass = |name: &str| response_field_passes(name, connection());
                let added = c.job.as_ref().and_then(|j| j.added.clone());
                down.relay_head(
                    ctx,
                    p.head.status,
                    p.reason,
                    p.fields,
                    &pass,
                    added.as_deref().unwrap_or_default(),
                    relay,
                );
                let mut rbuf = rbuf;
                rbuf.copy_within(head_len..c.rlen, 0);
                c.rlen -= head_len;
                c.rbuf = rbuf;
                c.head_relayed = true;
                if let Some(mut job) = c.job.take() {
                    // The body's later reads are copied too, until the exchange ends.
                    c.fill = job.cache.take();
                    c.gate = job.gate.take();
                    if job.answered() {
                        c.keep_alive = false;
                    }
                }
                match left {
                    None => {
                        // Bytes after a bodiless response would be a second, unasked response.
                        c.keep_alive &= c.rlen == 0;
                        self.finish(key, ctx, down);
                        return false;
                    }
                    Some(left) => {
                        c.body = left;
                        c.phase = Phase::Body;
                        c.deadline = ctx.now + c.group.cfg.timeouts.read;
                    }
                }
                break;
            }
        }
        let c = &mut self.conns[key];
        let data = &c.rbuf[..c.rlen];
        let (used, done) = match &mut c.body {
            BodyLeft::Length(left) => {
                let n = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                down.relay_body(ctx, &data[..n]);
                *left -= n as u64;
                (n, *left == 0)
            }
            BodyLeft::Chunked(decoder) => match decoder.decode(data, |d| down.relay_body(ctx, d)) {
                Ok(progress) => (progress.consumed, progress.done),
                Err(_) => {
                    self.fail(key, Failure::Invalid, ctx, down);
                    return false;
                }
            },
            BodyLeft::UntilClose => {
                down.relay_body(ctx, data);
                (data.len(), false)
            }
        };
        c.rbuf.copy_within(used..c.rlen, 0);
        c.rlen -= used;
        if done {
            if let BodyLeft::Chunked(decoder) = &mut c.body {
                relay_trailers(decoder, ctx, down);
            }
            c.keep_alive &= c.rlen == 0;
            self.finish(key, ctx, down);
            return false;
        }
        true
    }

    /// The upstream closed its side.
    fn eof(&mut self, key: usize, ctx: &mut WorkerCtx<'_>, down: &mut dyn Downstream) {
        let c = &mut self.conns[key];
        if c.phase == Phase::Body && matches!(c.body, BodyLeft::UntilClose) && c.fcgi.is_none() {
            c.keep_alive = false;
            return self.finish(key, ctx, down);
        }
        self.fail(key, Failure::Closed, ctx, down);
    }
}

/// Hands the trailer fields a chunked body ended with (those that may pass) to the client. No
/// allocation unless the upstream sent trailers.
fn relay_trailers(
    decoder: &mut ChunkedDecoder,
    ctx: &mut WorkerCtx<'_>,
    down: &mut dyn Downstream,
) {
    let raw = decoder.take_trailers();
    if raw.is_empty() {
        return;
    }
    let fields: Vec<(&[u8], &[u8])> = trailer_fields(&raw)
        .filter(|(name, _)| trailer_passes(name))
        .collect();
    if !fields.is_empty() {
        down.relay_trailers(ctx, &fields);
    }
}

/// Whether `head` holds an LF not preceded by CR.
fn has_bare_lf(head: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', head).any(|i| i == 0 || head[i - 1] != b'\r')
}

#[cfg(test)]
mod tests {
    #[test]
    fn bare_line_feeds() {
        assert!(!super::has_bare_lf(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n"));
        assert!(super::has_bare_lf(b"HTTP/1.1 200 OK\r\nA: b\nC: d\r\n\r\n"));
        assert!(super::has_bare_lf(b"HTTP/1.1 200 OK\n\n"));
    }
}
