//! The server-side limit with io_uring: the same job as the anchors' `ceiling` (every
//! "\r\n\r\n" in the input is one request, answered with a canned TechEmpower plaintext
//! response; nothing parsed), done the cheapest way io_uring allows, so that its server-core
//! µs per request beside ceiling's (epoll) says what lowlat serve could gain from io_uring.
//!
//! One ring with `SINGLE_ISSUER | DEFER_TASKRUN`; a multishot `accept`; one multishot `recv`
//! per connection into provided buffers, so a request costs no submission; the answers to
//! everything one receive completed leave in one `send` flagged `CQE_SKIP_SUCCESS`, so they
//! cost no completion. Each loop turn is one `io_uring_enter`.
//!
//!   taskset -c 0 bench/uring/target/release/uring-ceiling PORT

use io_uring::{cqueue, opcode, squeue, types};
use lowlat_uring_limits::{ring, Buffers, BGID};
use std::os::fd::IntoRawFd;

const RESP: &[u8] =
    b"HTTP/1.1 200 OK\r\nServer: C\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\
Date: Sun, 22 Nov 2026 00:00:00 GMT\r\n\r\nHello, World!";
const MAX_BATCH: usize = 256;

const ACCEPT: u64 = u64::MAX;
const SEND: u64 = 1 << 32;

fn main() {
    let port: u16 = match std::env::args().nth(1).map(|p| p.parse()) {
        Some(Ok(p)) => p,
        _ => {
            eprintln!("usage: uring-ceiling PORT");
            std::process::exit(2);
        }
    };
    let out = RESP.repeat(MAX_BATCH);
    let ls = listen(port);
    let mut ring = ring().expect("io_uring setup");
    let mut bufs = Buffers::register(&ring).expect("provided buffers");
    // Per connection (by fd): how much of a "\r\n\r\n" the last receive ended in.
    let mut matched = vec![0u8; 1 << 20];
    let (submitter, mut sq, mut cq) = ring.split();
    let accept = opcode::AcceptMulti::new(types::Fd(ls))
        .build()
        .user_data(ACCEPT);
    let recv = |fd: i32| {
        opcode::RecvMulti::new(types::Fd(fd), BGID)
            .build()
            .user_data(fd as u64)
    };
    // SAFETY (every push): each entry refers to the listening socket, a connection's fd, the
    // static response batch, or the provided buffers, all of which outlive the ring.
    unsafe { sq.push(&accept).expect("submission queue") };
    sq.sync();
    loop {
        submitter.submit_and_wait(1).expect("io_uring_enter");
        cq.sync();
        for cqe in &mut cq {
            let (ud, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            if ud == ACCEPT {
                if res as usize >= matched.len() {
                    // SAFETY: an accepted connection we own and do not track.
                    unsafe { libc::close(res) };
                } else if res >= 0 {
                    nodelay(res);
                    matched[res as usize] = 0;
                    unsafe { sq.push(&recv(res)).expect("submission queue") };
                }
                if !cqueue::more(flags) {
                    unsafe { sq.push(&accept).expect("submission queue") };
                }
                continue;
            }
            if ud & SEND != 0 {
                continue; // A failed send: the connection's receive reports its end.
            }
            let fd = ud as i32;
            if res == -libc::ENOBUFS {
                unsafe { sq.push(&recv(fd)).expect("submission queue") };
                continue;
            }
            if res <= 0 {
                // SAFETY: the connection is ours and its multishot receive has ended.
                unsafe { libc::close(fd) };
                continue;
            }
            let bid = cqueue::buffer_select(flags).expect("a provided buffer");
            let mut m = matched[fd as usize];
            let mut reqs = 0;
            for &c in bufs.get(bid, res as usize) {
                let want = if m & 1 == 1 { b'\n' } else { b'\r' };
                m = if c == want {
                    m + 1
                } else {
                    u8::from(c == b'\r')
                };
                if m == 4 {
                    reqs += 1;
                    m = 0;
                }
            }
            matched[fd as usize] = m;
            bufs.give_back(bid);
            while reqs > 0 {
                let k = reqs.min(MAX_BATCH);
                let send = opcode::Send::new(types::Fd(fd), out.as_ptr(), (k * RESP.len()) as u32)
                    .build()
                    .flags(squeue::Flags::SKIP_SUCCESS)
                    .user_data(SEND | fd as u64);
                unsafe { sq.push(&send).expect("submission queue") };
                reqs -= k;
            }
            if !cqueue::more(flags) {
                unsafe { sq.push(&recv(fd)).expect("submission queue") };
            }
        }
        bufs.publish();
        sq.sync();
    }
}

fn listen(port: u16) -> i32 {
    let l = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind");
    let fd = l.into_raw_fd();
    // SAFETY: a listening socket we own; a deeper backlog, as ceiling's.
    unsafe { libc::listen(fd, 4096) };
    fd
}

fn nodelay(fd: i32) {
    let one: libc::c_int = 1;
    // SAFETY: a connected TCP socket we own; `one` outlives the call.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&raw const one).cast(),
            std::mem::size_of_val(&one) as libc::socklen_t,
        )
    };
}
