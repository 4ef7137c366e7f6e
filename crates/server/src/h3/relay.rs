//! An HTTP/3 request stream as the upstream side's [`Downstream`]: a forwarded request's
//! response, relayed as it arrives. The head becomes a HEADERS frame (names lower-cased, the
//! proxy's filter already applied, `content-length` when the length is known), each piece of
//! body a DATA frame, trailer fields a trailing HEADERS frame, and the end the stream's FIN once
//! all is written; a failed upstream resets just this stream (H3_INTERNAL_ERROR), and no
//! upstream answer is a short status page (502, 504).
//!
//! Back-pressure: the stream takes what QUIC's flow control and send buffer allow; the rest
//! waits in the stream's `out`, which is the backlog the upstream side reads against. When the
//! stream takes more (`stream_writable`) and the backlog fell below the low-water mark, the
//! connection says so (`QuicProtocol::relay_news`) and the upstream is read again.

use lowlat_http::client::Header;
use lowlat_http::h3::frame;
use lowlat_http::h3::ErrorCode;
use mio::Token;

use super::conn::H3Conn;
use super::send::write_status_page;
use crate::ctx::WorkerCtx;
use crate::proxy::downstream::{log_relayed, relayed_head, Downstream};
use crate::proxy::job::RelayBody;
use crate::quic::StreamIo;

/// Request stream `id` of `conn`, receiving a relayed response.
pub(crate) struct StreamRelay<'a, 'io> {
    pub(super) conn: &'a mut H3Conn,
    pub(super) io: &'a mut StreamIo<'io>,
    pub(super) id: u64,
}

impl Downstream for StreamRelay<'_, '_> {
    fn relay_head(
        &mut self,
        _ctx: &mut WorkerCtx<'_>,
        status: u16,
        _reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        added: &[u8],
        body: RelayBody,
    ) {
        let c = &mut *self.conn;
        let Some(s) = c.requests.get_mut(&self.id) else {
            return;
        };
        let Some(head_request) = s.relay.map(|r| r.head_request) else {
            return;
        };
        let end = relayed_head(
            fields,
            pass,
            added,
            body,
            head_request,
            &mut c.res_buf,
            &mut c.res_fields,
        );
        s.take_room();
        let res_buf = &c.res_buf;
        lowlat_http::h3::head::write_response(
            &c.encoder,
            status,
            c.res_fields
                .iter()
                .map(|(n, v)| (&res_buf[n.clone()], &res_buf[v.clone()])),
            &mut s.out,
        );
        if let Some(r) = s.relay.as_mut() {
            r.status = status;
            r.head_only = end;
        }
    }

    fn relay_body(&mut self, _ctx: &mut WorkerCtx<'_>, data: &[u8]) {
        let Some(s) = self.conn.requests.get_mut(&self.id) else {
            return;
        };
        match s.relay.as_mut() {
            Some(r) if !r.head_only && !data.is_empty() => r.body_bytes += data.len() as u64,
            _ => return,
        }
        s.take_room();
        frame::put_data_header(&mut s.out, data.len() as u64);
        s.out.extend_from_slice(data);
    }

    /// The file goes out after the stream's buffered frames as one DATA frame, read a piece
    /// at a time as the stream takes it (`send::pump`), as a file this connection answers
    /// itself.
    fn relay_file(&mut self, ctx: &mut WorkerCtx<'_>, file: crate::file_body::FileBody) {
        if self
            .conn
            .requests
            .get(&self.id)
            .is_some_and(|s| s.file.is_some())
        {
            return crate::proxy::downstream::read_file_as_body(self, ctx, &file);
        }
        let Some(s) = self.conn.requests.get_mut(&self.id) else {
            return;
        };
        match s.relay.as_mut() {
            Some(r) if !r.head_only && file.len > 0 => r.body_bytes += file.len,
            _ => return,
        }
        s.take_room();
        frame::put_data_header(&mut s.out, file.len);
        s.file = Some(file);
    }

    fn relay_trailers(&mut self, _ctx: &mut WorkerCtx<'_>, fields: &[(&[u8], &[u8])]) {
        let c = &mut *self.conn;
        let Some(s) = c.requests.get_mut(&self.id) else {
            return;
        };
        if s.relay.is_none_or(|r| r.head_only) {
            return;
        }
        let lowered: Vec<(Vec<u8>, &[u8])> = fields
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), *v))
            .collect();
        let mut section = Vec::new();
        lowlat_http::h3::head::write_fields(
            &c.encoder,
            lowered.iter().map(|(n, v)| (n.as_slice(), *v)),
            &mut section,
        );
        s.trailers = Some(section);
    }

    fn relay_end(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        upstream: &str,
        upstream_status: u16,
        upstream_time: std::time::Duration,
    ) {
        let peer = self.io.peer();
        let c = &mut *self.conn;
        let Some(s) = c.requests.get_mut(&self.id) else {
            return;
        };
        let Some(r) = s.relay.take() else {
            return;
        };
        log_relayed(
            ctx,
            s.held.as_deref(),
            peer,
            r.status,
            r.body_bytes,
            s.started,
            Some(crate::access_log::UpstreamFields {
                addr: upstream,
                status: upstream_status,
                time: upstream_time,
            }),
        );
        if let Some(t) = s.trailers.take() {
            s.take_room();
            s.out.extend_from_slice(&t);
        }
        if s.upload.take().is_some() {
            // Answered before the body ended: the rest is not wanted (RFC 9114 §4.1).
            self.io.stop_sending(self.id, ErrorCode::NoError.value());
        }
        // What is left goes out as the stream takes it; FIN after its last byte.
        c.pump(self.io, self.id);
    }

    fn relay_abort(&mut self, _ctx: &mut WorkerCtx<'_>) {
        // The body cannot be completed: only this stream is reset, and the client sees a
        // response cut short rather than a complete one.
        if let Some(s) = self.conn.requests.get_mut(&self.id) {
            s.relay = None;
        }
        self.io.reset(self.id, ErrorCode::InternalError.value());
        self.conn.forget(self.id);
        // Shutting down, this may have been the last request under way.
        self.conn.close_if_done(self.io);
    }

    fn relay_error(&mut self, ctx: &mut WorkerCtx<'_>, status: u16) {
        let peer = self.io.peer();
        let c = &mut *self.conn;
        let Some(s) = c.requests.get_mut(&self.id) else {
            return;
        };
        s.relay = None;
        s.out.clear();
        s.out_at = 0;
        s.trailers = None;
        if s.upload.take().is_some() {
            self.io.stop_sending(self.id, ErrorCode::NoError.value());
        }
        // Logged as HTTP/1.1's are: the request, the gateway error, no upstream answer.
        log_relayed(ctx, s.held.as_deref(), peer, status, 0, s.started, None);
        c.res_buf.clear();
        write_status_page(&mut c.res_buf, status);
        c.send_response(self.io, self.id);
    }

    fn backlog(&self) -> usize {
        self.conn
            .requests
            .get(&self.id)
            .map_or(0, |s| s.out.len() - s.out_at)
    }

    fn auth_user(&mut self, user: &[u8]) {
        if let Some(held) = self
            .conn
            .requests
            .get_mut(&self.id)
            .and_then(|s| s.held.as_deref_mut())
        {
            held.set_user(user);
        }
    }

    fn relay_link(&mut self, upstream: Token) {
        if let Some(r) = self
            .conn
            .requests
            .get_mut(&self.id)
            .and_then(|s| s.relay.as_mut())
        {
            r.upstream = Some(upstream);
        }
    }

    fn flush_relayed(&mut self, _ctx: &mut WorkerCtx<'_>) {
        self.conn.pump(self.io, self.id);
    }

    fn upload_drained(&mut self, ctx: &mut WorkerCtx<'_>) {
        // Reading stopped while the upload was full: what waits in the stream is read now
        // (no new event would say it is there).
        if self
            .conn
            .requests
            .get(&self.id)
            .and_then(|s| s.upload.as_deref())
            .is_some_and(|u| u.drained())
        {
            self.conn.read_request(self.io, self.id, ctx);
        }
        self.conn.pump(self.io, self.id);
    }
}
