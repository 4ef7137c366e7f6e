//! The client-side limit with io_uring: the same job as the anchors' `ceiling-client` (N
//! keep-alive connections, DEPTH canned requests in flight on each, responses not parsed but
//! counted by their fixed length), done the cheapest way io_uring allows, so that its cost per
//! response beside ceiling-client's (epoll) says what lowlat load could gain from io_uring.
//!
//! One ring with `SINGLE_ISSUER | DEFER_TASKRUN` (completions are processed only when this
//! thread enters the kernel, in one batch); one multishot `recv` per connection into a ring of
//! provided buffers, so a response costs no submission; sends flagged `CQE_SKIP_SUCCESS`, so a
//! request costs no completion. Each loop turn is one `io_uring_enter`: submit every send the
//! last batch of completions asked for and wait for at least one more completion.
//!
//!   taskset -c 1 bench/uring/target/release/uring-client PORT CONNS SECONDS DEPTH RESPONSE_BYTES

use io_uring::{cqueue, opcode, squeue, types};
use lowlat_uring_limits::{ring, Buffers, BGID};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const REQ: &[u8] = b"GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let nums: Vec<f64> = a.iter().skip(1).filter_map(|s| s.parse().ok()).collect();
    if a.len() != 6 || nums.len() != 5 || nums.iter().any(|&x| x <= 0.0) {
        eprintln!("usage: uring-client PORT CONNS SECONDS DEPTH RESPONSE_BYTES");
        std::process::exit(2);
    }
    let (port, nconn, secs) = (nums[0] as u16, nums[1] as usize, nums[2]);
    let (depth, resp_len) = (nums[3] as usize, nums[4] as usize);
    let batch = REQ.repeat(depth);
    let mut ring = ring().expect("io_uring setup");
    let mut bufs = Buffers::register(&ring).expect("provided buffers");

    let conns: Vec<TcpStream> = (0..nconn)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            s.set_nodelay(true).expect("TCP_NODELAY");
            s
        })
        .collect();
    let fds: Vec<i32> = conns.iter().map(AsRawFd::as_raw_fd).collect();
    let mut pending = vec![0usize; nconn];
    let (submitter, mut sq, mut cq) = ring.split();
    let recv = |i: usize| {
        opcode::RecvMulti::new(types::Fd(fds[i]), BGID)
            .build()
            .user_data((i as u64) << 1)
    };
    let send = |i: usize, k: usize| {
        opcode::Send::new(types::Fd(fds[i]), batch.as_ptr(), (k * REQ.len()) as u32)
            .build()
            .flags(squeue::Flags::SKIP_SUCCESS)
            .user_data(((i as u64) << 1) | 1)
    };
    // SAFETY (every push): each entry refers to a connection's fd, the request batch or the
    // provided buffers, all of which outlive the ring.
    for i in 0..nconn {
        unsafe {
            sq.push(&recv(i)).expect("submission queue");
            sq.push(&send(i, depth)).expect("submission queue");
        }
    }
    sq.sync();
    let mut done: u64 = 0;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        submitter.submit_and_wait(1).expect("io_uring_enter");
        cq.sync();
        for cqe in &mut cq {
            let (ud, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            let i = (ud >> 1) as usize;
            if ud & 1 == 1 {
                eprintln!("send failed: {}", std::io::Error::from_raw_os_error(-res));
                std::process::exit(1);
            }
            if res == -libc::ENOBUFS {
                unsafe { sq.push(&recv(i)).expect("submission queue") };
                continue;
            }
            if res <= 0 {
                eprintln!("connection closed");
                std::process::exit(1);
            }
            let bid = cqueue::buffer_select(flags).expect("a provided buffer");
            bufs.give_back(bid);
            pending[i] += res as usize;
            let mut complete = pending[i] / resp_len;
            pending[i] %= resp_len;
            done += complete as u64;
            if !cqueue::more(flags) {
                unsafe { sq.push(&recv(i)).expect("submission queue") };
            }
            while complete > 0 {
                let k = complete.min(depth);
                unsafe { sq.push(&send(i, k)).expect("submission queue") };
                complete -= k;
            }
        }
        bufs.publish();
        sq.sync();
    }
    let el = start.elapsed().as_secs_f64();
    println!(
        "{done} requests in {el:.1}s\nRequests/sec: {:.0}",
        done as f64 / el
    );
}
