//! An echo protocol over the QUIC transport, for testing it without HTTP/3: each bidirectional
//! stream sends back what it received, then finishes when the client finished; a
//! unidirectional stream is read and dropped. Offered (ALPN `lowlat-echo`) only when the
//! environment has `LOWLAT_QUIC_ECHO=1`, which the transport's tests set.
//!
//! It uses the interface as HTTP/3 does, back-pressure included: at most [`PENDING`] bytes of a
//! stream are read ahead of what the client has taken back, so a client that does not read
//! stops being read from, and its sending stalls on flow control.

use std::collections::HashMap;

use super::streams::{is_bidi, QuicProtocol, Read, StreamError, StreamIo};
use crate::ctx::WorkerCtx;

/// ALPN of the echo protocol.
pub(crate) const ALPN: &[u8] = b"lowlat-echo";
/// Bytes of one stream read and not yet written back, at most.
const PENDING: usize = 64 * 1024;

/// One connection's echo streams.
#[derive(Default)]
pub(crate) struct Echo {
    streams: HashMap<u64, EchoStream>,
}

#[derive(Default)]
struct EchoStream {
    pending: Vec<u8>,
    fin: bool,
}

impl Echo {
    fn pump(io: &mut StreamIo<'_>, stream: u64, s: &mut EchoStream) -> bool {
        loop {
            if !s.pending.is_empty() {
                match io.write(stream, &s.pending) {
                    Ok(n) => {
                        s.pending.drain(..n);
                        if !s.pending.is_empty() {
                            return false; // wait for stream_writable
                        }
                    }
                    Err(e) => {
                        tracing::debug!("echo: write {stream}: {e:?}");
                        return true;
                    }
                }
            }
            if s.fin {
                io.finish(stream);
                return true;
            }
            match io.read(stream, &mut s.pending, PENDING) {
                Ok(Read::Data(_)) => {}
                Ok(Read::Fin(_)) => s.fin = true,
                Ok(Read::Blocked) => return false,
                // Already read to its end (a late readable event): nothing to do.
                Err(StreamError::Closed) => return true,
                // The client gave up on its request: so do we.
                Err(e) => {
                    tracing::debug!("echo: read {stream}: {e:?}");
                    io.reset(stream, 0);
                    return true;
                }
            }
        }
    }

    fn drive(&mut self, io: &mut StreamIo<'_>, stream: u64) {
        if !is_bidi(stream) {
            let mut sink = Vec::new();
            while let Ok(Read::Data(_)) = io.read(stream, &mut sink, PENDING) {
                sink.clear();
            }
            return;
        }
        let s = self.streams.entry(stream).or_default();
        if Self::pump(io, stream, s) {
            self.streams.remove(&stream);
        }
    }
}

impl QuicProtocol for Echo {
    fn stream_readable(&mut self, io: &mut StreamIo<'_>, stream: u64, _ctx: &mut WorkerCtx<'_>) {
        self.drive(io, stream);
    }

    fn stream_writable(&mut self, io: &mut StreamIo<'_>, stream: u64, _ctx: &mut WorkerCtx<'_>) {
        if self.streams.contains_key(&stream) {
            self.drive(io, stream);
        }
    }

    fn stream_stopped(
        &mut self,
        io: &mut StreamIo<'_>,
        stream: u64,
        code: u64,
        _ctx: &mut WorkerCtx<'_>,
    ) {
        tracing::debug!("echo: stopped {stream}: {code}");
        io.reset(stream, code);
        io.stop_sending(stream, code);
        self.streams.remove(&stream);
    }
}
