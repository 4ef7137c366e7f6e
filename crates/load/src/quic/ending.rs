//! How an `--h3` connection ends: handshakes and requests that waited too long, a connection
//! lost (what it leaves unanswered counted, then a new one made), a failed handshake, a close.

use std::cmp::Reverse;
use std::time::Instant;

use quinn_proto::{ConnectionError, EndpointEvent};

use crate::h3;

use super::{conn_group, Lost, QuicWorker, State, CONNECT_BACKOFF};

impl QuicWorker<'_> {
    /// Times out handshakes and requests that waited too long.
    pub(super) fn sweep(&mut self, now: Instant) {
        let timeout = self.plan.timeout;
        for idx in 0..self.conns.len() {
            let conn = &self.conns[idx];
            let waiting = match conn.state {
                State::Handshaking => true,
                State::Open => conn.in_flight() > 0,
                State::Idle | State::Done => false,
            };
            if waiting && now.saturating_duration_since(conn.waiting_since) > timeout {
                if conn.state == State::Handshaking {
                    let why = format!(
                        "no answer within {timeout:?} (is a QUIC server listening on UDP {}?)",
                        self.groups[conn.spec.group].authority
                    );
                    self.lost(idx, Lost::Handshake(why), now);
                } else {
                    self.lost(idx, Lost::Timeout, now);
                }
            }
        }
    }

    /// Connection `idx` ended (or is given up): count what it leaves unanswered, and reconnect.
    pub(super) fn lost(&mut self, idx: usize, why: Lost, now: Instant) {
        let conn = &self.conns[idx];
        let handshaking = conn.state == State::Handshaking;
        let in_flight = conn.in_flight() as u64;
        match why {
            Lost::Quic(reason) if handshaking => {
                let why = describe(&reason);
                self.handshake_failed(idx, &why, now);
            }
            Lost::Handshake(why) | Lost::Socket(why) if handshaking || in_flight == 0 => {
                self.handshake_failed(idx, &why, now);
            }
            why => {
                if self.ledger.measuring {
                    let e = &mut self.ledger.stats.errors;
                    match why {
                        Lost::Timeout => e.timeout += in_flight,
                        Lost::Protocol(why) => {
                            e.protocol += in_flight.max(1);
                            if self.ledger.stats.ws_error.is_none() {
                                self.ledger.stats.ws_error = Some(format!(
                                    "HTTP/3 connection to {} closed: {why}",
                                    self.groups[conn_group(&self.conns[idx])].authority
                                ));
                            }
                        }
                        Lost::Handshake(_) => e.tls += in_flight.max(1),
                        // The server closed, or the connection idled out, with requests in
                        // flight: they failed as reads do on TCP.
                        Lost::Quic(_) | Lost::Socket(_) => e.read += in_flight,
                    }
                }
                self.close(idx, now, false);
                self.connect(idx, now);
            }
        }
    }

    /// A handshake failed: a TLS error (it uses up one request of a counted run, as in
    /// `worker`), the first reason kept for the report; retry after a back-off.
    pub(super) fn handshake_failed(&mut self, idx: usize, why: &str, now: Instant) {
        if self.ledger.stats.tls_error.is_none() {
            self.ledger.stats.tls_error = Some(format!(
                "QUIC handshake with {} failed: {why}",
                self.groups[self.conns[idx].spec.group].authority
            ));
        }
        let in_flight = self.conns[idx].in_flight() as u64;
        if in_flight > 0 {
            // 0-RTT requests went with the handshake: they were taken from the budget, and fail
            // with it.
            if self.ledger.measuring {
                self.ledger.stats.errors.tls += in_flight;
            }
        } else {
            self.ledger.failed_handshake(&mut self.budget);
        }
        self.close(idx, now, false);
        let conn = &mut self.conns[idx];
        let wake = now + CONNECT_BACKOFF;
        conn.wake = Some(wake);
        self.timers.push(Reverse((wake, idx, conn.generation)));
    }

    /// Closes connection `idx` (with H3_NO_ERROR when `polite`, in one best-effort datagram),
    /// adds its packet counts to the summary, and frees its socket.
    pub(super) fn close(&mut self, idx: usize, now: Instant, polite: bool) {
        let conn = &mut self.conns[idx];
        if let Some(mut quic) = conn.quic.take() {
            if polite && !quic.is_closed() {
                quic.close(
                    now,
                    h3::close_code(lowlat_http::h3::ErrorCode::NoError),
                    Vec::new().into(),
                );
            }
            // The CONNECTION_CLOSE of a connection closed here (politely, or for a protocol
            // error), in one best-effort datagram; nothing for one the peer ended.
            if let Some(socket) = &conn.socket {
                self.send_buf.clear();
                if let Some(t) = quic.poll_transmit(now, 1, &mut self.send_buf) {
                    let _ = socket.send(&self.send_buf[..t.size]);
                }
            }
            let path = quic.stats().path;
            self.summary.packets_sent += path.sent_packets;
            self.summary.packets_lost += path.lost_packets;
            self.summary.bytes_lost += path.lost_bytes;
            self.summary.congestion_events += path.congestion_events;
        }
        if let Some(handle) = conn.handle.take() {
            let _ = self.endpoint.handle_event(handle, EndpointEvent::drained());
        }
        if let Some(mut socket) = conn.socket.take() {
            let _ = self.poll.registry().deregister(&mut socket);
        }
        conn.h3 = None;
        conn.queue.clear();
        conn.quic_timer = None;
        conn.timer = None;
        conn.early = false;
        conn.state = State::Idle;
    }
}

/// A failed handshake in words, with what to do next where it is clear.
pub(super) fn describe(e: &ConnectionError) -> String {
    let text = e.to_string();
    // TLS alert 120 (no_application_protocol), QUIC's crypto error 0x178; some servers send
    // handshake_failure (40) and say why in the reason.
    if text.contains("0x178") || text.contains("ALPN") || text.contains("NoApplicationProtocol") {
        return format!("the server does not offer HTTP/3 (ALPN h3): {text}");
    }
    match e {
        ConnectionError::TimedOut => "no answer (is a QUIC server listening there?)".into(),
        ConnectionError::ConnectionClosed(_) | ConnectionError::ApplicationClosed(_) => {
            format!("the server refused the connection ({text})")
        }
        ConnectionError::Reset => "the server reset the connection (stateless reset)".into(),
        _ if text.contains("certificate") || text.contains("Certificate") => {
            format!("{text} (give --cacert FILE, or --insecure)")
        }
        _ => text,
    }
}
