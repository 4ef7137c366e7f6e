//! Request bodies that stream to an HTTP/2 upstream: what a client's upload holds moved into
//! DATA frames as far as the server's windows and the connection's unwritten output allow, the
//! stream ended (with the client's trailers) once the body is in, reset when the client's side
//! refused its own body; the client told when there is room for more.

use mio::Token;

use super::{base, H2Upstreams, Outcome, Phase, EXCHANGE_OFFSET};
use crate::ctx::WorkerCtx;
use crate::proxy::upload::{UPLOAD_LOW_WATER, UPLOAD_WAIT_LIMIT};

/// Request bodies are taken from their uploads only while a connection has less than this
/// unwritten: the socket's pace bounds what sits here, as the upload's high water bounds what
/// waits before (64 KiB: four full DATA frames, enough to keep a socket busy between events).
const UPLOAD_OUT_LIMIT: usize = 64 * 1024;

impl H2Upstreams {
    /// Moves streaming request bodies from their uploads into DATA frames, as far as the
    /// server's windows and [`UPLOAD_OUT_LIMIT`] allow; ends those whose client body is all in.
    /// Returns whether anything was queued.
    pub(super) fn pump_uploads(&mut self, key: usize, ctx: &mut WorkerCtx<'_>) -> bool {
        let Self {
            conns,
            exchanges,
            touched,
            ..
        } = self;
        let c = &mut conns[key];
        if c.uploads == 0 {
            return false;
        }
        let timeouts = c.group.cfg.timeouts;
        let mut moved = false;
        let mut refused = false;
        let mut uploads = 0;
        for &(stream, xkey) in &c.streams {
            let Some(x) = exchanges.get_mut(xkey) else {
                continue;
            };
            let Some(up) = &x.upload else { continue };
            uploads += 1;
            let mut pipe = up.borrow_mut();
            if let Some(status) = pipe.failed() {
                // The upstream got part of a request: its stream is reset, the others on the
                // connection go on.
                tracing::debug!(
                    status,
                    stream,
                    "request body refused while streaming: upstream stream reset"
                );
                c.session.cancel(stream);
                drop(pipe);
                x.upload = None;
                x.outcome = Outcome::Refused(status);
                touched.push(xkey);
                refused = true;
                moved = true;
                continue;
            }
            if !c.session.sending(stream) {
                // The response ended first (the codec reset the stream): nothing more goes.
                continue;
            }
            let mut progress = false;
            while c.session.out.len() - c.wpos < UPLOAD_OUT_LIMIT {
                let pending = pipe.pending();
                if pending.is_empty() {
                    break;
                }
                let before = pending.len();
                let n = c
                    .session
                    .send_data(stream, &pending[..before.min(UPLOAD_OUT_LIMIT)]);
                if n == 0 {
                    break;
                }
                pipe.taken(n);
                progress = true;
                if before >= UPLOAD_LOW_WATER && pipe.drained() {
                    // The client's side may have stopped for room: it reads again.
                    x.upload_resume = true;
                    touched.push(xkey);
                }
            }
            let head_seen = x.head.is_some() || x.head_relayed;
            if pipe.done() {
                let trailers = pipe.trailers().iter().map(|(n, v)| (&n[..], &v[..]));
                c.session.finish(stream, trailers);
                drop(pipe);
                x.upload = None;
                progress = true;
                if !head_seen {
                    x.deadline = ctx.now + timeouts.first_byte;
                }
            } else if !head_seen {
                x.deadline = if progress {
                    ctx.now + timeouts.write
                } else if pipe.pending().is_empty() {
                    // The client's pace: its connection's body timeout bounds the wait.
                    ctx.now + UPLOAD_WAIT_LIMIT
                } else {
                    // The server's window: it must take the body within the write timeout.
                    x.deadline.min(ctx.now + timeouts.write)
                };
            }
            moved |= progress;
        }
        c.uploads = uploads;
        if refused {
            c.streams.retain(|&(_, xkey)| {
                exchanges
                    .get(xkey)
                    .is_some_and(|x| !matches!(x.outcome, Outcome::Refused(_)))
            });
        }
        moved
    }

    /// The client passed more of its body to exchange `token`'s upload: the connection sends it.
    pub(crate) fn wake(&mut self, token: Token, ctx: &mut WorkerCtx<'_>) {
        let Some(key) = token.0.checked_sub(base() + EXCHANGE_OFFSET) else {
            return;
        };
        if let Some(conn) = self.exchanges.get(key).map(|x| x.conn) {
            if self.conns.get(conn).is_some_and(|c| c.phase == Phase::Open) {
                self.drive(conn, ctx);
            }
        }
    }
}
