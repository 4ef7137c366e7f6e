//! The worker's UDP socket: bound with `SO_REUSEPORT` (one per worker, one port), and the two
//! system calls QUIC's datagrams go through — `recvmsg` with GRO, `sendmsg` with GSO — where the
//! kernel has them, one datagram per call where it does not.
//!
//! Why batching: a QUIC server sending a large response writes one ~1.4 KB datagram per system
//! call without GSO; with `UDP_SEGMENT` one `sendmsg` carries up to 64 KB (up to 44 datagrams)
//! that the kernel splits late (in the NIC where it can). GRO is the same on receive: the kernel
//! coalesces a flow's datagrams into one buffer, and the cmsg says the segment size.
//! docs/PERFORMANCE.md has the measured difference.
//!
//! The unsafe code here is the `recvmsg`/`sendmsg`/`setsockopt` calls and their control
//! messages; each block states what it relies on.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// The largest datagram (or GRO batch) read at once: UDP's own limit.
pub(crate) const RECV_BUFFER: usize = 64 * 1024;
/// Datagrams one GSO send may carry: the kernel's limit (`UDP_MAX_SEGMENTS`) is 64; quinn-proto
/// fills one `Transmit` with at most this many, and 64 KB caps the total anyway.
pub(crate) const MAX_GSO_SEGMENTS: usize = 44;
/// The bytes one GSO send may carry in all: an IPv4 datagram's 65535 less its IP and UDP
/// headers (the kernel builds the batch as one datagram before cutting it).
pub(crate) const MAX_GSO_BYTES: usize = 65_507;
/// Socket buffers asked for (the kernel caps them at `net.core.{r,w}mem_max`): a burst of
/// Initials or a window of a large response should not be dropped by a 208 KiB default.
const SOCKET_BUFFER: usize = 4 << 20;

/// What the kernel offers for batching, found once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Offload {
    /// `UDP_SEGMENT` (Linux 4.18): one send, many datagrams.
    pub(crate) gso: bool,
    /// `UDP_GRO` (Linux 5.0): one receive, many datagrams.
    pub(crate) gro: bool,
}

/// Binds `workers` UDP sockets to `addr` (port 0: the port the first got), non-blocking,
/// `SO_REUSEPORT`, and turns on what `batching` allows of GSO and GRO. Returns the sockets, the
/// address bound and what offload each has (the same for all: one kernel).
///
/// Sockets handed over for `addr` (socket activation, an upgrade) come first, one per worker;
/// workers beyond them bind a socket of their own into the same `SO_REUSEPORT` group (a
/// systemd socket needs `ReusePort=yes` for that). Handed-over sockets beyond the workers are
/// closed: a UDP socket of the group that nobody reads would only lose the datagrams hashed to
/// it, and once closed the kernel hashes over the others.
pub(crate) fn bind_all(
    addr: SocketAddr,
    workers: usize,
    batching: bool,
    handed: Vec<std::net::UdpSocket>,
) -> io::Result<(Vec<std::net::UdpSocket>, SocketAddr, Offload)> {
    let mut socks: Vec<std::net::UdpSocket> = handed
        .into_iter()
        .filter(|s| s.local_addr().ok() == Some(addr))
        .take(workers)
        .collect();
    for s in &socks {
        s.set_nonblocking(true)?;
    }
    if socks.is_empty() {
        socks.push(bind(addr)?);
    }
    let actual = socks[0].local_addr()?;
    let handed = socks.len();
    while socks.len() < workers {
        socks.push(bind(actual).map_err(|e| {
            if handed > 0 && e.kind() == io::ErrorKind::AddrInUse {
                io::Error::new(
                    e.kind(),
                    format!("{e}: the UDP socket handed over has no SO_REUSEPORT (systemd: ReusePort=yes), which each further worker's socket needs"),
                )
            } else {
                e
            }
        })?);
    }
    let offload = if batching {
        detect(&socks[0])
    } else {
        Offload::default()
    };
    if offload.gro {
        for s in &socks[1..] {
            set_int(s.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1)?;
        }
    }
    Ok((socks, actual, offload))
}

fn bind(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    // Best effort: the kernel caps these at its maximum and that is still better than nothing.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    // Path MTU discovery sends probes that must not be fragmented; one too large for the path
    // fails with EMSGSIZE, which the sender counts as a lost probe.
    let fd = socket.as_raw_fd();
    if addr.is_ipv6() {
        let _ = set_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        );
    } else {
        let _ = set_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        );
    }
    // The address each datagram came to, so that the answer leaves from it: a socket bound to
    // 0.0.0.0 on a host with several addresses would otherwise answer from whichever the route
    // picks, and the client (its socket connected to the address it chose) would drop it.
    if addr.is_ipv6() {
        set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
    } else {
        set_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// GSO: the option can be read (and is 0) where the kernel knows it. GRO: it can be set.
fn detect(sock: &std::net::UdpSocket) -> Offload {
    let fd = sock.as_raw_fd();
    let gso = get_int(fd, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok();
    let gro = set_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
    Offload { gso, gro }
}

fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and its size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `value`, which is that large.
    let rc = unsafe { libc::getsockopt(fd, level, name, (&raw mut value).cast(), &raw mut len) };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Space for the control messages of one datagram: GRO's segment size (a `c_int`) or GSO's (a
/// `u16`), and the local address (`in_pktinfo`, 12 bytes, or `in6_pktinfo`, 20): 24 + 40 bytes
/// with their headers on 64-bit Linux.
const CMSG_SPACE: usize = 128;

/// A control-message buffer aligned as `cmsghdr` requires (the CMSG macros write its fields in
/// place).
#[repr(C, align(8))]
struct Control([u8; CMSG_SPACE]);

/// A received datagram, or a GRO batch of datagrams of `segment` bytes each (the last may be
/// shorter).
pub(crate) struct Received {
    pub(crate) len: usize,
    pub(crate) from: SocketAddr,
    pub(crate) segment: usize,
    /// The address it was sent to (ours), where the kernel said.
    pub(crate) local: Option<IpAddr>,
}

/// Reads one datagram (or GRO batch) into `buf`. `Ok(None)`: nothing more to read.
pub(crate) fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<Received>> {
    // SAFETY: all-zero is a valid `sockaddr_storage` and a valid (empty) `msghdr`.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let mut control = Control([0u8; CMSG_SPACE]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&raw mut storage).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE as _;
    // SAFETY: every pointer in `msg` points at a live buffer of the length given beside it, and
    // they outlive the call.
    let n = unsafe { libc::recvmsg(fd, &raw mut msg, 0) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    let len = n as usize;
    // SAFETY: the kernel wrote a socket address of `msg_namelen` bytes into `storage`.
    let addr = unsafe { SockAddr::new(storage, msg.msg_namelen) };
    let Some(from) = addr.as_socket() else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not an IP peer"));
    };
    let mut segment = len;
    let mut local = None;
    // SAFETY: `msg` is the header the kernel just filled; the CMSG macros walk its control
    // buffer within `msg_controllen`, and each message's data is read as the type its level
    // and type say it holds.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        while !cmsg.is_null() {
            let data = libc::CMSG_DATA(cmsg);
            match ((*cmsg).cmsg_level, (*cmsg).cmsg_type) {
                (libc::SOL_UDP, libc::UDP_GRO) => {
                    let size = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                    if size > 0 {
                        segment = size as usize;
                    }
                }
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    let info = std::ptr::read_unaligned(data.cast::<libc::in_pktinfo>());
                    let octets = info.ipi_addr.s_addr.to_ne_bytes();
                    local = Some(IpAddr::from(octets));
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    let info = std::ptr::read_unaligned(data.cast::<libc::in6_pktinfo>());
                    local = Some(IpAddr::from(info.ipi6_addr.s6_addr));
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
        }
    }
    Ok(Some(Received {
        len,
        from,
        segment,
        local,
    }))
}

/// Sends `data` to `to` from the local address `from` (where given): one datagram, or with
/// `segment` (GSO) datagrams of that size cut by the kernel. `Ok(false)`: the socket buffer is
/// full (try again when writable).
pub(crate) fn send(
    fd: RawFd,
    to: SocketAddr,
    from: Option<IpAddr>,
    data: &[u8],
    segment: Option<usize>,
) -> io::Result<bool> {
    let addr = SockAddr::from(to);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    let mut control = Control([0u8; CMSG_SPACE]);
    // SAFETY: all-zero is a valid (empty) `msghdr`.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = addr.as_ptr().cast_mut().cast();
    msg.msg_namelen = addr.len();
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    let segment = segment.filter(|&s| s < data.len());
    // The source address only where it can be given: an IPv4 one on an IPv4 socket, and so on.
    let from = from.filter(|ip| ip.is_ipv4() == to.is_ipv4());
    // SAFETY: CMSG_SPACE of a u16 (24 bytes) plus that of an `in6_pktinfo` (40) fit in
    // `control`, which is aligned for `cmsghdr`; `msg_controllen` is set to the total before the
    // headers are walked, so CMSG_FIRSTHDR/CMSG_NXTHDR stay within it, and each message's data
    // is written as the type its level and type say it holds.
    unsafe {
        let mut space = 0;
        if segment.is_some() {
            space += libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
        }
        match from {
            Some(IpAddr::V4(_)) => {
                space += libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as usize;
            }
            Some(IpAddr::V6(_)) => {
                space += libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) as usize;
            }
            None => {}
        }
        if space > 0 {
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
            if let Some(size) = segment {
                let size = u16::try_from(size).unwrap_or(u16::MAX);
                (*cmsg).cmsg_level = libc::SOL_UDP;
                (*cmsg).cmsg_type = libc::UDP_SEGMENT;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), size);
                cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
            }
            match from {
                Some(IpAddr::V4(ip)) => {
                    (*cmsg).cmsg_level = libc::IPPROTO_IP;
                    (*cmsg).cmsg_type = libc::IP_PKTINFO;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as _;
                    let info = libc::in_pktinfo {
                        ipi_ifindex: 0,
                        ipi_spec_dst: libc::in_addr {
                            s_addr: u32::from_ne_bytes(ip.octets()),
                        },
                        ipi_addr: libc::in_addr { s_addr: 0 },
                    };
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast(), info);
                }
                Some(IpAddr::V6(ip)) => {
                    (*cmsg).cmsg_level = libc::IPPROTO_IPV6;
                    (*cmsg).cmsg_type = libc::IPV6_PKTINFO;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as _;
                    let info = libc::in6_pktinfo {
                        ipi6_addr: libc::in6_addr {
                            s6_addr: ip.octets(),
                        },
                        ipi6_ifindex: 0,
                    };
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast(), info);
                }
                None => {}
            }
        }
    }
    loop {
        // SAFETY: every pointer in `msg` points at a live buffer of the length given beside it;
        // the kernel only reads them.
        let n = unsafe { libc::sendmsg(fd, &raw const msg, 0) };
        if n >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) => return Ok(false),
            _ => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a socket bound to every address, a datagram sent to 127.0.0.2 says so, and the answer
    /// given that source leaves from it: a client whose socket is connected to 127.0.0.2 gets
    /// it (an answer from 127.0.0.1, the route's choice, it would drop).
    #[test]
    fn answers_leave_from_the_address_asked() {
        let (socks, addr, _) =
            bind_all("0.0.0.0:0".parse().unwrap(), 1, false, Vec::new()).unwrap();
        let server = &socks[0];
        let to: SocketAddr = SocketAddr::from(([127, 0, 0, 2], addr.port()));
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.connect(to).unwrap();
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        client.send(b"ping").unwrap();
        let mut buf = vec![0; RECV_BUFFER];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let got = loop {
            if let Some(r) = recv(server.as_raw_fd(), &mut buf).unwrap() {
                break r;
            }
            assert!(std::time::Instant::now() < deadline, "nothing received");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(&buf[..got.len], b"ping");
        assert_eq!(got.local, Some(to.ip()));
        assert!(send(server.as_raw_fd(), got.from, got.local, b"pong", None).unwrap());
        let mut answer = [0u8; 16];
        let n = client
            .recv(&mut answer)
            .expect("the answer, from 127.0.0.2");
        assert_eq!(&answer[..n], b"pong");
    }

    /// Three datagrams sent as one GSO batch arrive as three (GRO off) or one batch whose
    /// segment size is the datagram size (GRO on); either way the bytes and sizes match.
    #[test]
    fn gso_batch_round_trips() {
        let (socks, addr, offload) =
            bind_all("127.0.0.1:0".parse().unwrap(), 1, true, Vec::new()).unwrap();
        let rx = &socks[0];
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let segment = if offload.gso { Some(1200) } else { None };
        if offload.gso {
            assert!(send(tx.as_raw_fd(), addr, None, &data, segment).unwrap());
        } else {
            for chunk in data.chunks(1200) {
                assert!(send(tx.as_raw_fd(), addr, None, chunk, None).unwrap());
            }
        }
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        let mut buf = vec![0; RECV_BUFFER];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while got.len() < data.len() && std::time::Instant::now() < deadline {
            if let Some(r) = recv(rx.as_raw_fd(), &mut buf).unwrap() {
                for seg in buf[..r.len].chunks(r.segment) {
                    sizes.push(seg.len());
                    got.extend_from_slice(seg);
                }
            }
        }
        assert_eq!(got, data);
        assert_eq!(sizes, [1200, 1200, 600]);
    }
}
