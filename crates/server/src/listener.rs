//! Listening sockets: one per worker per address, all bound with `SO_REUSEPORT` so the kernel
//! spreads new connections over the workers with no shared accept queue — or the sockets this
//! process was handed ([`crate::inherit`]: systemd's, or the previous process's on USR2),
//! shared out among the workers.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Binds one listening socket: non-blocking, `SO_REUSEADDR` + `SO_REUSEPORT`, `TCP_NODELAY`
/// (inherited by accepted sockets on Linux), IPv6 sockets v6-only so `[::]` and `0.0.0.0` can both
/// be listened on.
pub(crate) fn bind(addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nodelay(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

/// Listening sockets per worker, each with the index of its address; and the addresses bound.
pub(crate) type Bound = (Vec<Vec<(usize, std::net::TcpListener)>>, Vec<SocketAddr>);

/// Gives every worker a socket for each address: a handed-over one when `inherited` holds
/// sockets bound to that address (taken out of it), else one bound here. Port 0 is resolved by
/// the first bind, and the other workers bind the port it got, so all of them share one port.
///
/// Handed-over sockets are shared out rather than re-bound: socket `j` of an address goes to
/// worker `j % workers`, so every one of them is accepted from (each socket of a `SO_REUSEPORT`
/// group gets its share of connections, and one nobody accepts from would hold its share until
/// it is closed and reset them). A worker left without one gets a duplicate of socket
/// `i % count`: systemd hands over one socket per address, and the workers then share its accept
/// queue, each registering the duplicate in its own epoll. Every worker is woken for each new
/// connection and all but one find nothing to accept — a wasted wake-up per worker per
/// connection, which `EPOLLEXCLUSIVE` would spare but mio does not offer; the new process after
/// a USR2 receives one socket per worker of the old one and so, with as many workers, has none
/// of this.
pub(crate) fn bind_all(
    addrs: &[SocketAddr],
    workers: usize,
    backlog: u32,
    inherited: &mut Vec<std::net::TcpListener>,
) -> Result<Bound, (SocketAddr, io::Error)> {
    let mut per_worker: Vec<Vec<(usize, std::net::TcpListener)>> =
        (0..workers).map(|_| Vec::new()).collect();
    let mut bound = Vec::with_capacity(addrs.len());
    for (index, &addr) in addrs.iter().enumerate() {
        let mut handed = Vec::new();
        let mut i = 0;
        while i < inherited.len() {
            if inherited[i].local_addr().ok() == Some(addr) {
                handed.push(inherited.swap_remove(i));
            } else {
                i += 1;
            }
        }
        if !handed.is_empty() {
            for sock in &handed {
                sock.set_nonblocking(true).map_err(|e| (addr, e))?;
            }
            let count = handed.len();
            for w in count..workers {
                let dup = handed[w % count].try_clone().map_err(|e| (addr, e))?;
                per_worker[w].push((index, dup));
            }
            for (j, sock) in handed.into_iter().enumerate() {
                per_worker[j % workers].push((index, sock));
            }
            bound.push(addr);
            continue;
        }
        if addr.port() != 0 {
            refuse_if_taken(addr).map_err(|e| (addr, e))?;
        }
        let first = bind(addr, backlog).map_err(|e| (addr, e))?;
        let actual = first.local_addr().map_err(|e| (addr, e))?;
        per_worker[0].push((index, first));
        for listeners in per_worker.iter_mut().skip(1) {
            listeners.push((index, bind(actual, backlog).map_err(|e| (actual, e))?));
        }
        bound.push(actual);
    }
    Ok((per_worker, bound))
}

/// `SO_REUSEPORT` would let us bind a port that another server of the same user already listens
/// on — and silently split its traffic. A plain bind first (closed at once) fails with
/// `EADDRINUSE` if anyone holds the port.
fn refuse_if_taken(addr: SocketAddr) -> io::Result<()> {
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.set_reuse_address(true)?;
    probe.bind(&addr.into())?;
    Ok(())
}
