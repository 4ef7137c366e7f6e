//! Listening sockets: one per worker per address, all bound with `SO_REUSEPORT` so the kernel
//! spreads new connections over the workers with no shared accept queue.

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

/// Listening sockets per worker, and the addresses bound.
pub(crate) type Bound = (Vec<Vec<std::net::TcpListener>>, Vec<SocketAddr>);

/// Binds `workers` sockets for each address. Port 0 is resolved by the first bind, and the other
/// workers bind the port it got, so all of them share one port.
pub(crate) fn bind_all(
    addrs: &[SocketAddr],
    workers: usize,
    backlog: u32,
) -> Result<Bound, (SocketAddr, io::Error)> {
    let mut per_worker: Vec<Vec<std::net::TcpListener>> =
        (0..workers).map(|_| Vec::new()).collect();
    let mut bound = Vec::with_capacity(addrs.len());
    for &addr in addrs {
        if addr.port() != 0 {
            refuse_if_taken(addr).map_err(|e| (addr, e))?;
        }
        let first = bind(addr, backlog).map_err(|e| (addr, e))?;
        let actual = first.local_addr().map_err(|e| (addr, e))?;
        per_worker[0].push(first);
        for listeners in per_worker.iter_mut().skip(1) {
            listeners.push(bind(actual, backlog).map_err(|e| (actual, e))?);
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
