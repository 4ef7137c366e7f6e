//! Opening a loader connection: the non-blocking connect, its failure and back-off, the TLS
//! handshake, and what an open connection starts with (HTTP/2's preface, a WebSocket's
//! upgrade, the first requests).

use std::cmp::Reverse;
use std::io;
use std::time::Instant;

use lowlat_http::client::ResponseReader;
use mio::net::TcpStream;
use mio::{Interest, Token};

use crate::transport::{Handshake, Stream};

use super::{ConnState, Worker, CONNECT_BACKOFF};

impl Worker<'_> {
    /// Opens a socket for connection `idx` (non-blocking connect).
    pub(super) fn connect(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        if self.budget == Some(0) && self.ledger.measuring {
            conn.state = ConnState::Done;
            return;
        }
        conn.generation = conn.generation.wrapping_add(1);
        conn.reader = ResponseReader::new();
        conn.h2 = None;
        conn.carry.clear();
        conn.partial = None;
        conn.owed = 0;
        conn.heads.clear();
        conn.capture.clear();
        conn.wake = None;
        conn.waiting_since = now;
        let addr = self.groups[conn.spec.group].addr;
        let result = TcpStream::connect(addr).and_then(|mut s| {
            s.set_nodelay(true)?;
            self.poll.registry().register(
                &mut s,
                Token(idx),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            Ok(s)
        });
        match result {
            Ok(s) => {
                conn.stream = Some(Stream::Plain(s));
                conn.state = ConnState::Connecting;
            }
            Err(_) => {
                conn.state = ConnState::Idle;
                self.connect_failed(idx, now);
            }
        }
    }

    /// A connect failed: count it (it uses up one request of a counted run) and retry later.
    pub(super) fn connect_failed(&mut self, idx: usize, now: Instant) {
        if self.ledger.measuring {
            self.ledger.stats.errors.connect += 1;
            if let Some(b) = &mut self.budget {
                *b = b.saturating_sub(1);
            }
        }
        self.close(idx);
        let conn = &mut self.conns[idx];
        let wake = now + CONNECT_BACKOFF;
        conn.wake = Some(wake);
        self.timers.push(Reverse((wake, idx, conn.generation)));
    }

    pub(super) fn finish_connect(&mut self, idx: usize, now: Instant) {
        let Some(stream) = &mut self.conns[idx].stream else {
            return;
        };
        let stream = stream.socket();
        let connected = match stream.take_error() {
            Ok(None) => match stream.peer_addr() {
                Ok(_) => Some(true),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => None,
                Err(_) => Some(false),
            },
            _ => Some(false),
        };
        match connected {
            None => {}
            Some(false) => self.connect_failed(idx, now),
            Some(true) => {
                let group = &self.groups[self.conns[idx].spec.group];
                if let (Some(name), Some(cfg)) = (&group.tls, &self.plan.tls) {
                    let session = match rustls::ClientConnection::new(
                        std::sync::Arc::clone(cfg),
                        name.clone(),
                    ) {
                        Ok(session) => session,
                        Err(e) => {
                            let e = io::Error::other(e);
                            self.handshake_failed(idx, &e, now);
                            return;
                        }
                    };
                    let conn = &mut self.conns[idx];
                    let Some(Stream::Plain(sock)) = conn.stream.take() else {
                        return;
                    };
                    conn.stream = Some(Stream::tls(sock, session));
                    conn.state = ConnState::Handshaking;
                    conn.waiting_since = now;
                    self.handshake(idx, now);
                } else {
                    self.opened(idx, now);
                }
            }
        }
    }

    /// The connection is ready for requests (TCP connected, TLS handshake done).
    pub(super) fn opened(&mut self, idx: usize, now: Instant) {
        let conn = &mut self.conns[idx];
        if let Some(ws) = &self.plan.ws {
            // The handshake first; messages once the 101 is in (`consume_ws`).
            let (key, accept) = lowlat_http::ws::handshake_key();
            let mut handshake = ws.handshakes[conn.spec.group].clone();
            handshake.extend_from_slice(b"Sec-WebSocket-Key: ");
            handshake.extend_from_slice(key.as_bytes());
            handshake.extend_from_slice(b"\r\n\r\n");
            let seed = (conn.spec.global as u64) << 32 | u64::from(conn.generation);
            conn.ws = Some(Box::new(crate::ws::Session::new(
                &handshake,
                &accept,
                ws.message_size,
                seed,
            )));
            conn.state = ConnState::Open;
            conn.waiting_since = now;
            self.flush_ws(idx, now);
            return;
        }
        if self.plan.h2 {
            let group = &self.groups[conn.spec.group];
            let mut session = Box::new(crate::h2::Session::new(group.h2_requests.len()));
            if self.script_plan.is_some_and(|s| s.response) {
                session.collect_responses();
            }
            conn.h2 = Some(session);
        }
        conn.state = ConnState::Open;
        conn.waiting_since = now;
        if self.plan.conn_interval.is_some() {
            self.send_due(idx, now);
        } else {
            self.send_next(idx, self.depth, now);
        }
    }

    /// Drives a TLS handshake; on success notes what was negotiated and starts sending.
    pub(super) fn handshake(&mut self, idx: usize, now: Instant) {
        let Some(stream) = &mut self.conns[idx].stream else {
            return;
        };
        match stream.handshake() {
            Ok(Handshake::Pending) => {}
            Ok(Handshake::Done) => {
                if let Some(session) = stream.session() {
                    let version = session
                        .protocol_version()
                        .map_or("unknown", crate::report::tls_version_name);
                    let suite = session
                        .negotiated_cipher_suite()
                        .map_or("unknown", crate::report::tls_suite_name);
                    let resumed = session.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                    if self.plan.h2 && session.alpn_protocol() != Some(b"h2") {
                        let e = io::Error::other("the server does not offer HTTP/2 (ALPN h2)");
                        self.handshake_failed(idx, &e, now);
                        return;
                    }
                    self.ledger.stats.tls.record(version, suite, resumed);
                }
                self.opened(idx, now);
            }
            Err(e) => self.handshake_failed(idx, &e, now),
        }
    }

    /// A TLS handshake failed: count it as a TLS error (it uses up one request of a counted
    /// run, as a failed connect does), remember the first reason, retry after a back-off.
    pub(super) fn handshake_failed(&mut self, idx: usize, err: &io::Error, now: Instant) {
        if self.ledger.stats.tls_error.is_none() {
            self.ledger.stats.tls_error = Some(format!(
                "TLS handshake with {} failed: {}",
                self.groups[self.conns[idx].spec.group].authority,
                crate::tls_failure::describe(err, self.plan.h2)
            ));
        }
        self.ledger.failed_handshake(&mut self.budget);
        self.close(idx);
        let conn = &mut self.conns[idx];
        let wake = now + CONNECT_BACKOFF;
        conn.wake = Some(wake);
        self.timers.push(Reverse((wake, idx, conn.generation)));
    }
}
