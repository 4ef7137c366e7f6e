//! Packets out: a connection's transmits as GSO batches where the kernel has them, one
//! datagram per call otherwise; a batch the socket had no room for is held until it is writable,
//! and the connections that wanted to send meanwhile are driven then.

use std::os::fd::AsRawFd;
use std::time::Instant;

use quinn_proto::Transmit;

use super::QuicWorker;
use crate::ctx::WorkerCtx;
use crate::quic::udp::{self, MAX_GSO_SEGMENTS};

impl QuicWorker {
    /// Sends what the connection has to send, as GSO batches where the kernel has them.
    pub(super) fn transmit(&mut self, key: usize, now: Instant) {
        loop {
            if self.held.is_some() {
                self.waiting.push(key);
                return;
            }
            let Some(c) = self.conns.get_mut(&key) else {
                return;
            };
            // One GSO send carries at most 64 KiB in all (the kernel refuses more), so as many
            // datagrams as the path's size allows: 44 of 1472 bytes, one of 64 KiB.
            let max = if self.offload.gso {
                (udp::MAX_GSO_BYTES / usize::from(c.conn.current_mtu())).clamp(1, MAX_GSO_SEGMENTS)
            } else {
                1
            };
            self.send_buf.clear();
            let Some(t) = c.conn.poll_transmit(now, max, &mut self.send_buf) else {
                return;
            };
            let buf = std::mem::take(&mut self.send_buf);
            self.send_now(&t, &buf);
            self.send_buf = buf;
        }
    }

    /// Sends `buf[..t.size]`; what the socket has no room for is held until it is writable.
    pub(super) fn send_now(&mut self, t: &Transmit, buf: &[u8]) {
        let data = &buf[..t.size.min(buf.len())];
        let fd = self.sock.as_raw_fd();
        let segment = t.segment_size.filter(|_| self.offload.gso);
        self.counts.sends += 1;
        match udp::send(fd, t.destination, t.src_ip, data, segment) {
            Ok(true) => {}
            // One batch is held; another meeting a full buffer meanwhile (a stateless answer)
            // is dropped, as the network may drop any datagram.
            Ok(false) if self.held.is_none() => {
                self.held = Some((t.destination, t.src_ip, segment, data.to_vec()));
            }
            Ok(false) => {}
            Err(e)
                if segment.is_some()
                    && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL)) =>
            {
                // A device that cannot segment (EIO) or a kernel that refuses this batch: one
                // datagram per call from now on, and this batch sent that way.
                tracing::warn!(
                    worker = self.worker,
                    "quic: GSO send failed ({e}); sending datagrams one by one from now on"
                );
                self.offload.gso = false;
                for chunk in data.chunks(segment.unwrap_or(data.len()).max(1)) {
                    let _ = udp::send(fd, t.destination, t.src_ip, chunk, None);
                }
            }
            // A probe larger than the path (EMSGSIZE), an unreachable peer: as a lost packet.
            Err(e) => tracing::debug!(
                worker = self.worker,
                "quic: sendmsg to {}: {e}",
                t.destination
            ),
        }
    }

    /// The socket is writable again: the held batch goes out first, then those that waited.
    pub(super) fn flush_held(&mut self, now: Instant, ctx: &mut WorkerCtx<'_>) {
        let Some((to, from, segment, data)) = self.held.take() else {
            return;
        };
        match udp::send(self.sock.as_raw_fd(), to, from, &data, segment) {
            Ok(true) => {}
            Ok(false) => {
                self.held = Some((to, from, segment, data));
                return;
            }
            Err(e) => tracing::debug!(worker = self.worker, "quic: sendmsg to {to}: {e}"),
        }
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.sort_unstable();
        waiting.dedup();
        self.touched.append(&mut waiting);
        self.waiting = waiting;
        self.drive_touched(now, ctx);
    }
}
