//! Server connection IDs that name the worker and the process owning the connection.
//!
//! Every connection ID this server issues is 8 bytes: the worker's index, the process's
//! generation (`super::handoff`: after a USR2 upgrade, the processes alive at once have
//! different ones, and a datagram of an older one's connection is passed to it), then 6 random
//! bytes.
//! The kernel's socket-selection program (`super::steer`) reads that first byte of a packet's
//! destination ID and hands the packet to that worker's socket, so a connection's packets keep
//! reaching the thread that owns its state whatever address they come from (NAT rebinding,
//! migration). A worker also refuses to answer (with a stateless reset) a short-header packet
//! whose ID names another worker or another generation: were steering ever off, or the process
//! of that generation gone, that packet belongs to a connection elsewhere (and a reset from us,
//! made with our key, would not even be one the client accepts).
//!
//! 6 random bytes (48 bits) keep IDs unlinkable (RFC 9000 §5.1: an observer must not correlate
//! them); an ID already in use on the worker is drawn again (quinn-proto checks). The worker and
//! generation bytes are the same for all of a worker's connections, as a load
//! balancer's server ID is (draft-ietf-quic-load-balancers).

use std::time::Duration;

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};
use rustls::crypto::SecureRandom;

/// Length of the connection IDs issued.
pub(crate) const CID_LEN: usize = 8;

/// Where the generation byte is: after the worker's.
pub(crate) const GENERATION_AT: usize = 1;
/// Where the random bytes start.
const RANDOM_AT: usize = 2;

/// Issues the connection IDs of one worker.
pub(crate) struct WorkerCids {
    worker: u8,
    generation: u8,
    random: &'static dyn SecureRandom,
}

impl WorkerCids {
    /// IDs naming `worker` (below 256: steering is not used with more workers) of the process of
    /// `generation`.
    pub(crate) fn new(worker: u8, generation: u8, random: &'static dyn SecureRandom) -> Self {
        Self {
            worker,
            generation,
            random,
        }
    }
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut bytes = [0u8; CID_LEN];
        bytes[0] = self.worker;
        bytes[GENERATION_AT] = self.generation;
        if self.random.fill(&mut bytes[RANDOM_AT..]).is_err() {
            // The system's random source failed, which the TLS handshake could not survive
            // either; the ID stays unique enough from the clock to keep this connection going.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            bytes[RANDOM_AT..].copy_from_slice(&nanos.to_le_bytes()[..CID_LEN - RANDOM_AT]);
        }
        ConnectionId::new(&bytes)
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        if cid.len() == CID_LEN && cid[0] == self.worker && cid[GENERATION_AT] == self.generation {
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
    fn ids_name_their_worker_and_generation_and_differ() {
        let random = rustls::crypto::aws_lc_rs::default_provider().secure_random;
        let mut gen = WorkerCids::new(3, 9, random);
        let a = gen.generate_cid();
        let b = gen.generate_cid();
        assert_eq!((a.len(), a[0], a[1], b[0], b[1]), (CID_LEN, 3, 9, 3, 9));
        assert_ne!(a, b);
        assert!(gen.validate(&a).is_ok());
        let other_worker = WorkerCids::new(4, 9, random).generate_cid();
        assert!(gen.validate(&other_worker).is_err());
        let other_generation = WorkerCids::new(3, 10, random).generate_cid();
        assert!(gen.validate(&other_generation).is_err());
    }
}
