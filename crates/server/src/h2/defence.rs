//! Errors and defences: stream and connection errors (RST_STREAM, GOAWAY), and the per-second
//! counts of control frames and resets that cut off floods (rapid reset, CVE-2023-44487; ping
//! and settings floods) with ENHANCE_YOUR_CALM.
use std::time::Duration;

use lowlat_http::h2::frame::{self, ErrorCode};

use super::conn::{remember, H2Conn};
use crate::ctx::WorkerCtx;

impl H2Conn {
    /// Opens a new counting second when the last one is over.
    pub(super) fn count_window(&mut self, ctx: &WorkerCtx<'_>) {
        if ctx.now.saturating_duration_since(self.flood_window) >= Duration::from_secs(1) {
            self.flood_window = ctx.now;
            self.control_frames = 0;
            self.resets = 0;
        }
    }

    /// A frame that costs work and answers no request.
    pub(super) fn count_control(&mut self, ctx: &WorkerCtx<'_>) {
        self.count_window(ctx);
        self.control_frames += 1;
        if self.control_frames > ctx.cfg.h2.max_control_per_sec {
            self.conn_error(ErrorCode::EnhanceYourCalm, "too many control frames");
        }
    }

    /// A stream error: RST_STREAM, and the stream is forgotten.
    ///
    /// A reset the client provoked by a malformed frame counts against the same per-second
    /// budget as the resets it sends (checked in [`H2Conn::frame`]): otherwise a client can have
    /// the server reset streams as fast as it could reset them itself, with the work behind them
    /// still running — CVE-2025-8671, "MadeYouReset". Its upstream exchange, if it had one, is
    /// cancelled. `Internal` is the server's own failure (an upstream cut short): not counted.
    pub(super) fn stream_error(&mut self, id: u32, code: ErrorCode) {
        let provoked = !matches!(code, ErrorCode::Internal);
        if let Some(i) = self.streams.iter().position(|s| s.id == id) {
            let s = self.streams.swap_remove(i);
            if let (true, Some(up)) = (provoked, s.relay.and_then(|r| r.upstream)) {
                self.abandoned.push(up);
            }
        }
        if provoked {
            self.resets += 1;
        }
        frame::write_rst_stream(&mut self.wbuf, id, code);
        remember(&mut self.reset_ids, id);
    }

    /// A connection error: GOAWAY with `code`, then close once it is written.
    pub(super) fn conn_error(&mut self, code: ErrorCode, why: &str) {
        if self.closing {
            return;
        }
        tracing::debug!(peer = %self.peer, ?code, "HTTP/2 connection error: {why}");
        frame::write_goaway(&mut self.wbuf, self.last_stream, code, why.as_bytes());
        self.goaway = true;
        self.closing = true;
        self.streams.clear();
        self.rlen = 0;
    }

    /// GOAWAY for a graceful end: streams in flight finish, no new ones start.
    pub(crate) fn go_away(&mut self, code: ErrorCode) {
        if self.goaway {
            return;
        }
        self.goaway = true;
        frame::write_goaway(&mut self.wbuf, self.last_stream, code, b"");
    }
}
