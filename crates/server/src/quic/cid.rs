//! Server connection IDs that name the worker owning the connection.
//!
//! Every connection ID this server issues is 8 bytes: the worker's index, then 7 random bytes.
//! The kernel's socket-selection program (`super::steer`) reads that first byte of a packet's
//! destination ID and hands the packet to that worker's socket, so a connection's packets keep
//! reaching the thread that owns its state whatever address they come from (NAT rebinding,
//! migration). A worker also refuses to answer (with a stateless reset) a short-header packet
//! whose ID names another worker: were steering ever off, that packet belongs to a live
//! connection elsewhere, and a reset would kill it.
//!
//! 7 random bytes (56 bits) keep IDs unlinkable (RFC 9000 §5.1: an observer must not correlate
//! them); the worker byte is the same for all of a worker's connections, as a load balancer's
//! server ID is (draft-ietf-quic-load-balancers).

use std::time::Duration;

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};
use rustls::crypto::SecureRandom;

/// Length of the connection IDs issued.
pub(crate) const CID_LEN: usize = 8;

/// Issues the connection IDs of one worker.
pub(crate) struct WorkerCids {
    worker: u8,
    random: &'static dyn SecureRandom,
}

impl WorkerCids {
    /// IDs naming `worker` (below 256: steering is not used with more workers).
    pub(crate) fn new(worker: u8, random: &'static dyn SecureRandom) -> Self {
        Self { worker, random }
    }
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut bytes = [0u8; CID_LEN];
        bytes[0] = self.worker;
        if self.random.fill(&mut bytes[1..]).is_err() {
            // The system's random source failed, which the TLS handshake could not survive
            // either; the ID stays unique enough from the clock to keep this connection going.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            bytes[1..].copy_from_slice(&nanos.to_le_bytes()[..CID_LEN - 1]);
        }
        ConnectionId::new(&bytes)
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        if cid.len() == CID_LEN && cid[0] == self.worker {
            Ok(())
        } else {
            Err(InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_their_worker_and_differ() {
        let random = rustls::crypto::aws_lc_rs::default_provider().secure_random;
        let mut gen = WorkerCids::new(3, random);
        let a = gen.generate_cid();
        let b = gen.generate_cid();
        assert_eq!((a.len(), a[0], b[0]), (CID_LEN, 3, 3));
        assert_ne!(a, b);
        assert!(gen.validate(&a).is_ok());
        let other = WorkerCids::new(4, random).generate_cid();
        assert!(gen.validate(&other).is_err());
    }
}
