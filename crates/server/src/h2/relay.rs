//! An HTTP/2 stream as the upstream side's [`Downstream`]: the response head becomes HEADERS
//! (names lower-cased, connection-specific fields already dropped by the proxy), body bytes join
//! the stream's output and go out in DATA frames as the windows allow (`super::flow`), and the
//! end is an END_STREAM flag — or, when the upstream sent trailer fields, a trailing HEADERS
//! frame (RFC 9113 §8.1) once the body is out; a failed upstream resets just this stream.

use lowlat_http::client::Header;
use lowlat_http::h2::frame::{self, ErrorCode};
use mio::Token;

use super::conn::{forget, H2Conn};
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::Downstream;
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

impl Downstream for StreamRelay<'_> {
    fn relay_head(
        &mut self,
        _ctx: &mut WorkerCtx<'_>,
        status: u16,
        _reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        body: RelayBody,
    ) {
        let c = &mut *self.conn;
        let Some(i) = c.stream_index(self.id) else {
            return;
        };
        let head_only = c.streams[i].relay.is_some_and(|r| r.head_only);
        c.res_buf.clear();
        c.res_fields.clear();
        for f in fields.iter().filter(|f| pass(f.name)) {
            let at = c.res_buf.len();
            c.res_buf.extend_from_slice(f.name.as_bytes());
            c.res_buf[at..].make_ascii_lowercase();
            let name = at..c.res_buf.len();
            c.res_buf.extend_from_slice(f.value);
            c.res_fields.push((name.clone(), name.end..c.res_buf.len()));
        }
        let announced = match body {
            RelayBody::Length(n) => Some(n),
            RelayBody::None { length } if head_only => length,
            _ => None,
        };
        if let Some(n) = announced {
            let at = c.res_buf.len();
            c.res_buf.extend_from_slice(b"content-length");
            let name = at..c.res_buf.len();
            c.res_buf
                .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            c.res_fields.push((name.clone(), name.end..c.res_buf.len()));
        }
        let end = head_only || matches!(body, RelayBody::None { .. });
        let mut block = std::mem::take(&mut c.block);
        block.clear();
        let res_buf = &c.res_buf;
        c.encoder.encode_response(
            status,
            c.res_fields
                .iter()
                .map(|(n, v)| (&res_buf[n.clone()], &res_buf[v.clone()])),
            &mut block,
        );
        frame::write_headers(
            &mut c.wbuf,
            self.id,
            &block,
            end,
            c.peer_settings.max_frame_size as usize,
        );
        c.block = block;
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
        let took = ctx.now.saturating_duration_since(s.started);
        ctx.counters.response(0, r.status, r.body_bytes, took);
        if let (Some(log), Some(held)) = (ctx.access_log.as_deref_mut(), &s.held) {
            log.record(&held.entry(
                c.peer,
                r.status,
                r.body_bytes,
                took,
                ctx.worker,
                Some(crate::access_log::UpstreamFields {
                    addr: upstream,
                    status: upstream_status,
                    time: upstream_time,
                }),
            ));
        }
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
        c.streams[i].relay = None;
        ctx.counters
            .response(0, status, 0, std::time::Duration::ZERO);
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
}
