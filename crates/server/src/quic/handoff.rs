//! QUIC connections across a binary upgrade (USR2): each process's connections keep being
//! answered by that process until they end, although every process shares the same UDP
//! sockets.
//!
//! The problem: a USR2 hands the UDP sockets themselves to the new process (the port never
//! closes), so the old and the new one read from the same sockets. A datagram read by the
//! process that does not own its connection was lost (the old one's connections lost packets
//! to the new, the new one's handshakes lost packets to the old): 4 of 2 675 HTTP/3 requests
//! failed over three upgrades.
//!
//! What is done instead:
//! - **A generation in every connection ID.** Each process has a generation, one byte, and
//!   the second byte of every ID it issues is that byte (`super::cid`: worker, generation, six
//!   random bytes). A process picks the smallest generation no live process it was handed
//!   uses, so the processes alive at one time never share one.
//! - **Only the newest process reads.** When a process hands over, its workers stop reading
//!   the UDP sockets (they still send on them); from then on the new process reads every
//!   datagram. So a new client's Initial always reaches the process that accepts new clients.
//! - **What belongs to an older process is passed to it.** Each worker of each process has a
//!   channel — a Unix `SOCK_SEQPACKET` socket pair: one datagram a message, whole or not at
//!   all — whose sending end is handed to the next process with the UDP sockets, named
//!   `quic-handoff.GENERATION.WORKER` (with the sending ends that process was itself handed,
//!   for generations still alive). The newest process looks at each datagram's destination ID:
//!   one naming another generation goes, with the client's address and the address it was sent
//!   to, to that generation's channel for the worker the ID names; its owner reads it as if from
//!   the socket and answers the client from the shared socket directly.
//!
//! The cost on the path of a datagram of one's own: one test of the header form and one byte
//! compared (the generation), in [`owner`]. Only the forwarded datagrams pay more — a copy into
//! a Unix socket and out of it — and only while an older process still has connections.
//!
//! Which packets are routed: short-header packets (every packet after the handshake) and
//! Handshake packets, whose destination ID is always one the server chose. Initial and 0-RTT
//! packets are not: a client's first ones carry an ID it chose at random, which names no
//! process, and they belong to the newest process, which accepts new clients. (A client's later
//! Initials to an older process carry that process's ID but are protected with keys from the
//! first, random ID: any other process fails to decrypt them and drops them, and the handshake
//! goes on in Handshake packets, which are routed.)
//!
//! Limits:
//! - Between the moment the new process starts reading and the moment the old one stops (a
//!   few milliseconds), both read; a datagram of the new process's read by the old one in that
//!   window is dropped, as the network may drop one, and QUIC sends it again.
//! - A channel whose queue is full (its process too busy to read it) drops the datagram.
//! - A Retry token is good only at the process that issued it: with `--h3-retry`, a client
//!   that got its Retry from the old process just before the hand-over is refused by the new
//!   one (INVALID_TOKEN) and must connect again. Likewise a TLS session ticket: a client's
//!   0-RTT to the new process with a ticket from the old one is rejected, and its requests go
//!   in 1-RTT, a round trip later.
//! - From a binary without hand-off channels, the first upgrade shares the sockets as before.
//!
//! Why not separate sockets per generation: the kernel's `SO_REUSEPORT` group is one array of
//! sockets, steered by index (`super::steer`); when a socket leaves the group the last one
//! takes its index, so the old process's exit would renumber the new one's sockets under the
//! steering program. A program that steers by generation would need an eBPF socket map
//! (`BPF_MAP_TYPE_REUSEPORT_SOCKARRAY`), and so privileges a web server should not need.

use std::io::{self, IoSlice, Read as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use socket2::{Domain, Socket, Type};

/// The name of a channel handed over: `quic-handoff.GENERATION.WORKER`.
pub(crate) const NAME_PREFIX: &str = "quic-handoff.";

/// The bytes before the datagram in a message: the client's address (family, 16 bytes of
/// address, port, IPv6 scope) and the address the datagram was sent to (family, 16 bytes).
pub(crate) const HEADER_LEN: usize = 40;

/// Room asked for in each channel's buffer (the kernel caps it at `net.core.wmem_max`): a
/// burst of a busy connection's datagrams should not be dropped by the 208 KiB default.
const CHANNEL_BUFFER: usize = 4 << 20;

/// A process's generation: the second byte of its connection IDs.
pub(crate) type Generation = u8;

/// A channel handed over by the previous process: the generation and worker it reaches.
#[derive(Debug)]
pub(crate) struct HandedChannel {
    pub(crate) generation: Generation,
    pub(crate) worker: usize,
    pub(crate) fd: OwnedFd,
}

/// Parses a channel's name (`quic-handoff.G.W`): its generation and worker.
pub(crate) fn parse_name(name: &str) -> Option<(Generation, usize)> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let (generation, worker) = rest.split_once('.')?;
    Some((generation.parse().ok()?, worker.parse().ok()?))
}

/// One older process: the sending ends of its workers' channels, by worker index.
struct Route {
    generation: Generation,
    workers: Vec<Option<Socket>>,
}

/// This process's side of the hand-off, shared by its workers: its generation, where the
/// datagrams of older processes go, and its own channels' sending ends (for the next process).
pub(crate) struct Handoff {
    pub(crate) generation: Generation,
    /// Older processes still alive when this one started (at most a few).
    routes: Vec<Route>,
    /// The sending end of each of this process's workers' channels, kept to be handed over.
    own: Vec<Socket>,
}

/// A worker's receiving end of its channel.
pub(crate) struct Inbox(Socket);

/// A datagram read from an inbox: the client's address, the address it was sent to, and where
/// the datagram lies in the buffer read into.
pub(crate) struct Passed {
    pub(crate) from: SocketAddr,
    pub(crate) local: Option<IpAddr>,
    pub(crate) range: std::ops::Range<usize>,
}

impl Handoff {
    /// The channels of `workers` workers, and the routes to the older processes `handed` names;
    /// this process's generation is the smallest they do not use.
    ///
    /// # Errors
    /// A socket pair that cannot be made (out of descriptors).
    pub(crate) fn new(
        workers: usize,
        handed: Vec<HandedChannel>,
    ) -> io::Result<(Self, Vec<Inbox>)> {
        let mut routes: Vec<Route> = Vec::new();
        for ch in handed {
            let at = match routes.iter().position(|r| r.generation == ch.generation) {
                Some(at) => at,
                None => {
                    routes.push(Route {
                        generation: ch.generation,
                        workers: Vec::new(),
                    });
                    routes.len() - 1
                }
            };
            let slots = &mut routes[at].workers;
            if slots.len() <= ch.worker {
                slots.resize_with(ch.worker + 1, || None);
            }
            let sock = Socket::from(ch.fd);
            sock.set_nonblocking(true)?;
            slots[ch.worker] = Some(sock);
        }
        let generation = (0..=Generation::MAX)
            .find(|g| routes.iter().all(|r| r.generation != *g))
            .unwrap_or(0);
        let mut own = Vec::with_capacity(workers);
        let mut inboxes = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (inbox, outbox) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None)?;
            inbox.set_nonblocking(true)?;
            outbox.set_nonblocking(true)?;
            // Best effort, as for the UDP sockets.
            let _ = outbox.set_send_buffer_size(CHANNEL_BUFFER);
            let _ = inbox.set_recv_buffer_size(CHANNEL_BUFFER);
            own.push(outbox);
            inboxes.push(Inbox(inbox));
        }
        Ok((
            Self {
                generation,
                routes,
                own,
            },
            inboxes,
        ))
    }

    /// Every channel to hand to the next process, with its name: this process's own and those of
    /// the older processes it was handed (the upgrade leaves out those whose process has gone).
    pub(crate) fn handed(&self) -> Vec<(BorrowedFd<'_>, String)> {
        let mut out = Vec::new();
        for route in &self.routes {
            for (worker, sock) in route.workers.iter().enumerate() {
                if let Some(sock) = sock {
                    out.push((
                        sock.as_fd(),
                        format!("{NAME_PREFIX}{}.{worker}", route.generation),
                    ));
                }
            }
        }
        for (worker, sock) in self.own.iter().enumerate() {
            out.push((
                sock.as_fd(),
                format!("{NAME_PREFIX}{}.{worker}", self.generation),
            ));
        }
        out
    }

    /// The generations of the older processes this one may pass datagrams to.
    pub(crate) fn older(&self) -> Vec<Generation> {
        self.routes.iter().map(|r| r.generation).collect()
    }

    /// Passes `datagram`, which came from `from` to `local`, to worker `worker` of generation
    /// `generation`. `false`: no such process is known (the datagram is this process's to
    /// judge); `true`: it was passed on, or dropped on the way (a full channel, a process that
    /// has just exited), as the network may drop one.
    pub(crate) fn forward(
        &self,
        generation: Generation,
        worker: u8,
        from: SocketAddr,
        local: Option<IpAddr>,
        datagram: &[u8],
    ) -> bool {
        let Some(route) = self.routes.iter().find(|r| r.generation == generation) else {
            return false;
        };
        let Some(Some(sock)) = route.workers.get(usize::from(worker)) else {
            return false;
        };
        let header = encode_header(from, local);
        // MSG_NOSIGNAL: a channel whose process has exited fails with EPIPE, not a signal.
        if let Err(e) = sock.send_vectored_with_flags(
            &[IoSlice::new(&header), IoSlice::new(datagram)],
            libc::MSG_NOSIGNAL,
        ) {
            tracing::trace!("quic: cannot pass a datagram to generation {generation}: {e}");
        }
        true
    }
}

impl Inbox {
    /// The descriptor, to register with the worker's poll.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Reads one passed datagram into `buf` (at least [`HEADER_LEN`] + 64 KiB). `Ok(None)`:
    /// nothing more to read.
    pub(crate) fn recv(&self, buf: &mut [u8]) -> io::Result<Option<Passed>> {
        loop {
            let n = match (&self.0).read(buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                // The sending ends are all closed (no newer process any more): nothing to read.
                return Ok(None);
            }
            // A message is written whole by `forward`; one too short to hold a header is not
            // ours, and is skipped.
            if let Some((from, local)) = decode_header(&buf[..n]) {
                return Ok(Some(Passed {
                    from,
                    local,
                    range: HEADER_LEN..n,
                }));
            }
        }
    }
}

/// The process a datagram belongs to, when it is not this one (generation `mine`): its
/// generation and the worker its connection ID names. `None` for this process's own datagrams
/// — the normal path, decided by the header form and one byte — and for packets that are not
/// routed (Initial, 0-RTT, anything too short to tell).
#[inline]
pub(crate) fn owner(datagram: &[u8], mine: Generation) -> Option<(Generation, u8)> {
    use super::cid::{CID_LEN, GENERATION_AT};
    let first = *datagram.first()?;
    if first & 0x80 == 0 {
        // Short header: flags, then our 8-byte destination ID (worker, generation, …).
        let generation = *datagram.get(1 + GENERATION_AT)?;
        return (generation != mine).then(|| (generation, datagram[1]));
    }
    // Long header (RFC 9000 §17.2): flags, version (4), destination ID length, the ID. Only a
    // Handshake packet (type 2 in version 1's numbering, bits 0x30) is sure to carry our ID.
    if first & 0x30 != 0x20 || datagram.get(5) != Some(&(CID_LEN as u8)) {
        return None;
    }
    let generation = *datagram.get(6 + GENERATION_AT)?;
    (generation != mine).then(|| (generation, datagram[6]))
}

fn encode_header(from: SocketAddr, local: Option<IpAddr>) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    match from {
        SocketAddr::V4(a) => {
            h[0] = 4;
            h[1..5].copy_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            h[0] = 6;
            h[1..17].copy_from_slice(&a.ip().octets());
            h[19..23].copy_from_slice(&a.scope_id().to_be_bytes());
        }
    }
    h[17..19].copy_from_slice(&from.port().to_be_bytes());
    match local {
        None => {}
        Some(IpAddr::V4(ip)) => {
            h[23] = 4;
            h[24..28].copy_from_slice(&ip.octets());
        }
        Some(IpAddr::V6(ip)) => {
            h[23] = 6;
            h[24..40].copy_from_slice(&ip.octets());
        }
    }
    h
}

fn decode_header(m: &[u8]) -> Option<(SocketAddr, Option<IpAddr>)> {
    let h: &[u8; HEADER_LEN] = m.get(..HEADER_LEN)?.try_into().ok()?;
    let ip16 = |at: usize| -> [u8; 16] { h[at..at + 16].try_into().unwrap_or([0; 16]) };
    let ip4 = |at: usize| -> [u8; 4] { h[at..at + 4].try_into().unwrap_or([0; 4]) };
    let port = u16::from_be_bytes([h[17], h[18]]);
    let from = match h[0] {
        4 => SocketAddr::from((Ipv4Addr::from(ip4(1)), port)),
        6 => SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(ip16(1)),
            port,
            0,
            u32::from_be_bytes([h[19], h[20], h[21], h[22]]),
        )),
        _ => return None,
    };
    let local = match h[23] {
        0 => None,
        4 => Some(IpAddr::from(ip4(24))),
        6 => Some(IpAddr::from(ip16(24))),
        _ => return None,
    };
    Some((from, local))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which datagrams are another generation's, and whose: a table of headers.
    #[test]
    fn owners_by_header() {
        type Case<'a> = (&'a [u8], Option<(u8, u8)>);
        let mine = 3;
        // (datagram, owner)
        let cases: &[Case<'_>] = &[
            // Short header, ours: the normal path.
            (&[0x40, 1, 3, 9, 9, 9, 9, 9, 9, 0xaa], None),
            // Short header, generation 4's worker 1.
            (&[0x40, 1, 4, 9, 9, 9, 9, 9, 9, 0xaa], Some((4, 1))),
            // Handshake (0xe0: long, fixed bit, type 2), 8-byte ID of generation 7, worker 0.
            (&[0xe0, 0, 0, 0, 1, 8, 0, 7, 1, 2, 3, 4, 5, 6], Some((7, 0))),
            // Handshake naming us.
            (&[0xe0, 0, 0, 0, 1, 8, 0, 3, 1, 2, 3, 4, 5, 6], None),
            // Initial (0xc0) and 0-RTT (0xd0): never routed, whatever their ID.
            (&[0xc0, 0, 0, 0, 1, 8, 0, 7, 1, 2, 3, 4, 5, 6], None),
            (&[0xd0, 0, 0, 0, 1, 8, 0, 7, 1, 2, 3, 4, 5, 6], None),
            // Handshake with an ID of another length: not one of ours.
            (&[0xe0, 0, 0, 0, 1, 9, 0, 7, 1, 2, 3, 4, 5, 6, 7], None),
            // Too short to tell.
            (&[], None),
            (&[0x40, 1], None),
            (&[0xe0, 0, 0, 0, 1, 8, 0], None),
        ];
        for (datagram, want) in cases {
            assert_eq!(owner(datagram, mine), *want, "{datagram:02x?}");
        }
    }

    /// Addresses survive the header both ways, IPv4 and IPv6 with a scope, with or without the
    /// local address.
    #[test]
    fn header_round_trips() {
        let cases = [
            ("192.0.2.7:4433", None),
            ("192.0.2.7:1", Some("198.51.100.1")),
            ("[fe80::1%3]:65535", Some("fe80::2")),
            ("[2001:db8::7]:443", None),
        ];
        for (from, local) in cases {
            let from: SocketAddr = from.parse().unwrap();
            let local: Option<IpAddr> = local.map(|l| l.parse().unwrap());
            let h = encode_header(from, local);
            assert_eq!(decode_header(&h), Some((from, local)), "{from}");
        }
        assert_eq!(decode_header(&[4; HEADER_LEN - 1]), None);
    }

    /// A datagram passed to generation 5's worker 1 arrives whole at that worker's inbox, with
    /// its addresses, through real socket pairs; a generation nobody handed is not passed.
    #[test]
    fn datagrams_reach_the_older_process() {
        let (older, inboxes) = Handoff::new(2, Vec::new()).unwrap();
        assert_eq!(older.generation, 0);
        // The newer process is handed the older one's channels, as by an upgrade.
        let handed = older
            .handed()
            .into_iter()
            .map(|(fd, name)| {
                let (generation, worker) = parse_name(&name).unwrap();
                HandedChannel {
                    generation,
                    worker,
                    fd: fd.try_clone_to_owned().unwrap(),
                }
            })
            .collect();
        let (newer, _) = Handoff::new(2, handed).unwrap();
        assert_eq!(newer.generation, 1, "the smallest generation not in use");
        assert_eq!(newer.older(), [0]);
        let from: SocketAddr = "[2001:db8::7]:4433".parse().unwrap();
        let local = Some("2001:db8::1".parse().unwrap());
        let datagram: Vec<u8> = (0..1350u32).map(|i| i as u8).collect();
        assert!(newer.forward(0, 1, from, local, &datagram));
        assert!(
            !newer.forward(9, 1, from, local, &datagram),
            "unknown generation"
        );
        assert!(
            !newer.forward(0, 7, from, local, &datagram),
            "unknown worker"
        );
        let mut buf = vec![0u8; HEADER_LEN + 65_536];
        assert!(inboxes[0].recv(&mut buf).unwrap().is_none());
        let got = inboxes[1].recv(&mut buf).unwrap().unwrap();
        assert_eq!((got.from, got.local), (from, local));
        assert_eq!(&buf[got.range], &datagram[..]);
        assert!(inboxes[1].recv(&mut buf).unwrap().is_none());
    }
}
