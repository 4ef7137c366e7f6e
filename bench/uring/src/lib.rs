//! What the two io_uring limits share: one ring set up for a single thread that handles its
//! completions in batches, and a ring of provided buffers for multishot `recv`.

use io_uring::{types, IoUring};
use std::alloc::{alloc_zeroed, Layout};
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

/// Buffers in the provided-buffer ring, and the size of each.
const NBUF: u16 = 4096;
const BUFSZ: usize = 4096;

/// The buffer group multishot receives take their buffers from.
pub const BGID: u16 = 0;

/// A ring for one thread: `SINGLE_ISSUER | DEFER_TASKRUN`, so completions are processed only
/// when this thread enters the kernel, all at once.
pub fn ring() -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(32768)
        .build(8192)
}

/// The provided buffers of group [`BGID`]: a multishot `recv` completes into one of them, and
/// the buffer goes back to the kernel with [`Buffers::give_back`].
pub struct Buffers {
    entries: *mut types::BufRingEntry,
    bufs: *mut u8,
    tail: u16,
}

impl Buffers {
    /// Allocates the buffers and registers them with `ring`. They live as long as the process.
    pub fn register(ring: &IoUring) -> io::Result<Self> {
        let layout = |size| Layout::from_size_align(size, 4096).expect("page-aligned layout");
        // SAFETY: both layouts have a non-zero size.
        let (ring_mem, bufs) = unsafe {
            (
                alloc_zeroed(layout(usize::from(NBUF) * 16)),
                alloc_zeroed(layout(usize::from(NBUF) * BUFSZ)),
            )
        };
        assert!(!ring_mem.is_null() && !bufs.is_null(), "out of memory");
        let mut b = Self {
            entries: ring_mem.cast(),
            bufs,
            tail: 0,
        };
        for bid in 0..NBUF {
            b.give_back(bid);
        }
        b.publish();
        // SAFETY: the ring memory is page-aligned, NBUF entries long, and never freed.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(ring_mem as u64, NBUF, BGID, 0)?
        };
        Ok(b)
    }

    /// The bytes a receive completed into buffer `bid`.
    pub fn get(&self, bid: u16, len: usize) -> &[u8] {
        assert!(bid < NBUF && len <= BUFSZ);
        // SAFETY: in bounds (checked above); the kernel wrote `len` bytes there and does not
        // touch the buffer again until it is given back.
        unsafe { std::slice::from_raw_parts(self.bufs.add(usize::from(bid) * BUFSZ), len) }
    }

    /// Returns buffer `bid` to the ring; the kernel sees it after [`Buffers::publish`].
    pub fn give_back(&mut self, bid: u16) {
        // SAFETY: the index is masked into the ring's NBUF entries.
        let e = unsafe { &mut *self.entries.add(usize::from(self.tail % NBUF)) };
        e.set_addr(self.bufs as u64 + u64::from(bid) * BUFSZ as u64);
        e.set_len(BUFSZ as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes the buffers given back so far visible to the kernel.
    pub fn publish(&self) {
        // SAFETY: the tail field lives in the first entry of the ring, which outlives `self`.
        let tail = unsafe { &*types::BufRingEntry::tail(self.entries).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }
}
