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
//!   taskset -c 1 target/release/uring-limit PORT CONNS SECONDS DEPTH RESPONSE_BYTES
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::alloc::{alloc_zeroed, Layout};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

const REQ: &[u8] = b"GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
const NBUF: u16 = 4096;
const BUFSZ: usize = 4096;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 6 {
        eprintln!("usage: {} PORT CONNS SECONDS DEPTH RESPONSE_BYTES", a[0]);
        std::process::exit(2);
    }
    let port: u16 = a[1].parse().unwrap();
    let nconn: usize = a[2].parse().unwrap();
    let secs: f64 = a[3].parse().unwrap();
    let depth: usize = a[4].parse().unwrap();
    let resp_len: usize = a[5].parse().unwrap();
    let batch = REQ.repeat(depth);
    let mut ring: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(32768)
        .build(8192)
        .unwrap();
    let ring_mem =
        unsafe { alloc_zeroed(Layout::from_size_align(NBUF as usize * 16, 4096).unwrap()) };
    let bufs =
        unsafe { alloc_zeroed(Layout::from_size_align(NBUF as usize * BUFSZ, 4096).unwrap()) };
    let entries = ring_mem as *mut types::BufRingEntry;
    for i in 0..NBUF {
        let e = unsafe { &mut *entries.add(i as usize) };
        e.set_addr(bufs as u64 + i as u64 * BUFSZ as u64);
        e.set_len(BUFSZ as u32);
        e.set_bid(i);
    }
    let tail = unsafe { &*(types::BufRingEntry::tail(entries) as *const AtomicU16) };
    tail.store(NBUF, Ordering::Release);
    let mut tail_v: u16 = NBUF;
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(ring_mem as u64, NBUF, 0, 0)
            .unwrap()
    };

    let mut conns = Vec::new();
    for _ in 0..nconn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        conns.push(s);
    }
    let fds: Vec<i32> = conns.iter().map(|s| s.as_raw_fd()).collect();
    let mut pending = vec![0usize; nconn];
    let (submitter, mut sq, mut cq) = ring.split();
    let recv = |i: usize| {
        opcode::RecvMulti::new(types::Fd(fds[i]), 0)
            .build()
            .user_data((i as u64) << 1)
    };
    let send = |i: usize, k: usize| {
        opcode::Send::new(types::Fd(fds[i]), batch.as_ptr(), (k * REQ.len()) as u32)
            .build()
            .flags(squeue::Flags::SKIP_SUCCESS)
            .user_data(((i as u64) << 1) | 1)
    };
    for i in 0..nconn {
        unsafe {
            sq.push(&recv(i)).unwrap();
            sq.push(&send(i, depth)).unwrap();
        }
    }
    sq.sync();
    let mut done: u64 = 0;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        submitter.submit_and_wait(1).unwrap();
        cq.sync();
        for cqe in &mut cq {
            let ud = cqe.user_data();
            let i = (ud >> 1) as usize;
            let res = cqe.result();
            if ud & 1 == 1 {
                panic!("send failed: {res}");
            }
            if res == -libc::ENOBUFS {
                unsafe { sq.push(&recv(i)).unwrap() };
                continue;
            }
            if res <= 0 {
                panic!("recv: {res}");
            }
            let bid = cqueue::buffer_select(cqe.flags()).unwrap();
            let e = unsafe { &mut *entries.add((tail_v % NBUF) as usize) };
            e.set_addr(bufs as u64 + bid as u64 * BUFSZ as u64);
            e.set_len(BUFSZ as u32);
            e.set_bid(bid);
            tail_v = tail_v.wrapping_add(1);
            pending[i] += res as usize;
            let mut complete = pending[i] / resp_len;
            pending[i] %= resp_len;
            done += complete as u64;
            if !cqueue::more(cqe.flags()) {
                unsafe { sq.push(&recv(i)).unwrap() };
            }
            while complete > 0 {
                let k = complete.min(depth);
                unsafe { sq.push(&send(i, k)).unwrap() };
                complete -= k;
            }
        }
        tail.store(tail_v, Ordering::Release);
        sq.sync();
    }
    let el = start.elapsed().as_secs_f64();
    println!(
        "{done} requests in {el:.1}s\nRequests/sec: {:.0}",
        done as f64 / el
    );
}
