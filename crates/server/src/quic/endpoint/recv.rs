//! Datagrams in: read from the socket (or, after an upgrade, from the inbox a newer process
//! passes this one's datagrams to), each handed to its connection, to the older process that
//! owns it, or — a new client — accepted, sent a Retry, or refused.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Instant;

use bytes::BytesMut;
use quinn_proto::DatagramEvent;

use super::{Conn, QuicWorker, RECV_BUDGET};
use crate::ctx::WorkerCtx;
use crate::quic::handoff::{self, HEADER_LEN};
use crate::quic::udp::{self, RECV_BUFFER};

impl QuicWorker {
    /// The socket has news: datagrams to read, or room to send what was held back. Returns
    /// whether datagrams may be left unread.
    pub(crate) fn on_event(
        &mut self,
        readable: bool,
        writable: bool,
        now: Instant,
        ctx: &mut WorkerCtx<'_>,
    ) -> bool {
        if writable {
            self.flush_held(now, ctx);
        }
        readable && self.receive(now, ctx)
    }

    /// Whether datagrams may be left unread (the budget ran out): the loop comes back at once.
    pub(crate) fn receive(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) -> bool {
        let mut more = self.reading && self.read_socket(now);
        if self.inbox_more {
            self.inbox_more = self.read_inbox(now);
            more |= self.inbox_more;
        }
        self.drive_touched(now, ctx);
        more
    }

    /// The inbox has news: datagrams of this process's connections, read by a newer process.
    /// Returns whether some may be left unread (the budget ran out).
    pub(crate) fn on_inbox(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) -> bool {
        self.inbox_more = self.read_inbox(now);
        self.drive_touched(now, ctx);
        self.inbox_more
    }

    /// Reads the socket (up to the budget): each datagram goes to its connection, or to the
    /// older process that owns it. Returns whether the budget ran out.
    fn read_socket(&mut self, now: Instant) -> bool {
        let fd = self.sock.as_raw_fd();
        let generation = self.shared.handoff.generation;
        let mut budget = RECV_BUDGET;
        while budget > 0 {
            let got = match udp::recv(fd, &mut self.recv_buf) {
                Ok(Some(got)) => got,
                Ok(None) => return false,
                Err(e) => {
                    tracing::debug!(worker = self.worker, "quic: recvmsg: {e}");
                    return false;
                }
            };
            let segment = got.segment.max(1);
            let mut start = 0;
            while start < got.len {
                let end = (start + segment).min(got.len);
                let bytes = &self.recv_buf[start..end];
                start = end;
                budget = budget.saturating_sub(1);
                self.counts.datagrams_in += 1;
                // An older process's connection (after an upgrade): passed to it. For our own,
                // this is one byte compared.
                if let Some((older, worker)) = handoff::owner(bytes, generation) {
                    if self
                        .shared
                        .handoff
                        .forward(older, worker, got.from, got.local, bytes)
                    {
                        self.counts.passed_on += 1;
                        continue;
                    }
                }
                let data = BytesMut::from(bytes);
                self.datagram(now, got.from, got.local, data);
            }
        }
        true
    }

    /// Reads the inbox (up to the budget). Returns whether the budget ran out.
    fn read_inbox(&mut self, now: Instant) -> bool {
        if self.inbox_buf.is_empty() {
            self.inbox_buf = vec![0; HEADER_LEN + RECV_BUFFER];
        }
        for _ in 0..RECV_BUDGET {
            let got = match self.inbox.recv(&mut self.inbox_buf) {
                Ok(Some(got)) => got,
                Ok(None) => return false,
                Err(e) => {
                    tracing::debug!(worker = self.worker, "quic: hand-off inbox: {e}");
                    return false;
                }
            };
            self.counts.passed_in += 1;
            let data = BytesMut::from(&self.inbox_buf[got.range]);
            self.datagram(now, got.from, got.local, data);
        }
        true
    }

    fn datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        local: Option<std::net::IpAddr>,
        data: BytesMut,
    ) {
        self.send_buf.clear();
        match self
            .endpoint
            .handle(now, from, local, None, data, &mut self.send_buf)
        {
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(c) = self.conns.get_mut(&ch.0) {
                    c.conn.handle_event(event);
                    self.touched.push(ch.0);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => self.incoming(now, incoming),
            Some(DatagramEvent::Response(t)) => {
                let buf = std::mem::take(&mut self.send_buf);
                self.send_now(&t, &buf);
                self.send_buf = buf;
            }
            None => {}
        }
    }

    /// A new client: accepted, asked to prove its address (Retry), or refused.
    fn incoming(&mut self, now: Instant, incoming: quinn_proto::Incoming) {
        let cfg = &self.shared.cfg;
        self.send_buf.clear();
        if self.closing && self.handing_over {
            self.endpoint.ignore(incoming);
            return;
        }
        if self.closing || self.conns.len() >= cfg.max_conns_per_worker {
            self.counts.refused += 1;
            let t = self.endpoint.refuse(incoming, &mut self.send_buf);
            let buf = std::mem::take(&mut self.send_buf);
            self.send_now(&t, &buf);
            self.send_buf = buf;
            return;
        }
        let must_validate = cfg.retry_always || self.handshakes >= cfg.retry_above;
        if must_validate && !incoming.remote_address_validated() && incoming.may_retry() {
            match self.endpoint.retry(incoming, &mut self.send_buf) {
                Ok(t) => {
                    self.counts.retries += 1;
                    let buf = std::mem::take(&mut self.send_buf);
                    self.send_now(&t, &buf);
                    self.send_buf = buf;
                }
                Err(e) => self.endpoint.ignore(e.into_incoming()),
            }
            return;
        }
        match self
            .endpoint
            .accept(incoming, now, &mut self.send_buf, None)
        {
            Ok((ch, conn)) => {
                self.counts.accepted += 1;
                self.handshakes += 1;
                self.conns.insert(
                    ch.0,
                    Conn {
                        conn,
                        proto: None,
                        handshaking: true,
                        timer: None,
                    },
                );
                self.touched.push(ch.0);
            }
            Err(e) => {
                if let Some(t) = e.response {
                    let buf = std::mem::take(&mut self.send_buf);
                    self.send_now(&t, &buf);
                    self.send_buf = buf;
                }
            }
        }
    }
}
