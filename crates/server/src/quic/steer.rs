//! Steering: a classic BPF program on the workers' `SO_REUSEPORT` group that hands each QUIC
//! packet to the socket of the worker owning its connection (`SO_ATTACH_REUSEPORT_CBPF`, Linux
//! 4.5).
//!
//! The kernel runs the program on each datagram with the UDP payload at offset 0 and takes its
//! result as the index of the socket in the group (the order they were bound: worker order). It
//! reads the first byte of the destination connection ID — offset 1 in a short header, offset 6
//! in a long one (flags, 4-byte version, ID length) — and returns it modulo the number of
//! workers:
//! - short-header packets (all of a connection's packets after the handshake) carry one of our
//!   IDs, whose first byte is the worker's index (`super::cid`): they reach their worker from
//!   any address, so a client that migrates or is NAT-rebound keeps its connection;
//! - a client's first Initial carries an ID it chose at random: its first byte spreads new
//!   connections over the workers, and the Initials, 0-RTT packets and a Retry's answer that
//!   repeat the same ID (or, after our first answer, carry ours) reach the same worker.
//!
//! A program that reads past a short datagram returns 0: garbage goes to worker 0, which drops it.
//!
//! When the attach fails (a kernel without it, more than 256 workers, seccomp), the kernel's own
//! choice applies: a hash of the source and destination addresses. A connection's packets then
//! still reach one worker as long as the client's address and port stay the same, but a client
//! that migrates or is NAT-rebound lands on another worker, which does not know the connection
//! and drops its packets (it sends no reset: the ID names another worker), so that connection
//! times out instead of moving.

use std::io;
use std::os::fd::AsRawFd;

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const BPF_LD: u16 = 0x00;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_ALU: u16 = 0x04;
const BPF_B: u16 = 0x10;
const BPF_ABS: u16 = 0x20;
const BPF_JA: u16 = 0x00;
const BPF_JSET: u16 = 0x40;
const BPF_K: u16 = 0x00;
const BPF_A: u16 = 0x10;
const BPF_MOD: u16 = 0x90;

/// The most workers steering can tell apart: one byte of the connection ID.
pub(crate) const MAX_WORKERS: usize = 256;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The program for `workers` sockets.
pub(crate) fn program(workers: u32) -> [libc::sock_filter; 7] {
    [
        // A = flags byte
        op(BPF_LD | BPF_B | BPF_ABS, 0, 0, 0),
        // long header (0x80)? jump to 4
        op(BPF_JMP | BPF_JSET | BPF_K, 2, 0, 0x80),
        // short: A = first byte of the destination ID
        op(BPF_LD | BPF_B | BPF_ABS, 0, 0, 1),
        op(BPF_JMP | BPF_JA, 0, 0, 1),
        // long: A = first byte of the destination ID
        op(BPF_LD | BPF_B | BPF_ABS, 0, 0, 6),
        op(BPF_ALU | BPF_MOD | BPF_K, 0, 0, workers),
        op(BPF_RET | BPF_A, 0, 0, 0),
    ]
}

/// Attaches the program to the group `sock` belongs to (any one socket of it will do).
pub(crate) fn attach(sock: &impl AsRawFd, workers: usize) -> io::Result<()> {
    if workers > MAX_WORKERS {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{workers} workers: connection IDs name at most {MAX_WORKERS}"),
        ));
    }
    let mut prog = program(u32::try_from(workers).unwrap_or(1));
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, alive for the call; the kernel copies the program.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&raw const fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// With the program attached, a packet whose destination ID starts with `i` reaches socket
    /// `i`, short header or long, whatever port it comes from.
    #[test]
    fn packets_reach_the_worker_their_id_names() {
        let (socks, addr, _) =
            super::super::udp::bind_all("127.0.0.1:0".parse().unwrap(), 3, false, Vec::new())
                .unwrap();
        attach(&socks[0], 3).unwrap();
        for s in &socks {
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        let mut buf = [0u8; 64];
        for round in 0..4u8 {
            // A fresh source port each round: the kernel's own hash would move it around.
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for worker in 0..3u8 {
                let short = [0x40, worker, 9, 9, 9, 9, 9, 9, 9, round];
                tx.send_to(&short, addr).unwrap();
                let (n, _) = socks[usize::from(worker)].recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..n], &short);
                let long = [0xc0, 0, 0, 0, 1, 8, worker + 3, 1, 2, 3, round];
                tx.send_to(&long, addr).unwrap();
                let (n, _) = socks[usize::from(worker)].recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..n], &long);
            }
        }
    }
}
