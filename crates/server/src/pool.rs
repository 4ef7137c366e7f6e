//! Per-worker pool of connection buffers.
//!
//! A keep-alive connection between requests holds no buffer at all: its read and write buffers go
//! back here as soon as a batch of responses is flushed and no partial request is pending, and
//! the next readable event takes one again. That keeps 10,000 idle connections at a few hundred
//! bytes each, and the pool (owned by one worker thread, so no lock) makes the take/give back a
//! `Vec::pop`/`push`.

/// Capacity of a pooled buffer. Reads of 16 KiB hold ~100 pipelined TechEmpower requests.
pub const BUF_CAPACITY: usize = 16 * 1024;

/// Most free buffers of each kind kept; more are freed. 256 × 16 KiB = 4 MiB, per worker.
const MAX_FREE: usize = 256;

/// Buffers that grew past this (large pipelined batches, request bodies) are freed, not pooled,
/// so one big request does not pin memory for the life of the worker.
const MAX_POOLED_CAPACITY: usize = 64 * 1024;

/// Free buffers of two kinds. Read buffers are kept initialised (length = capacity, zeroed once
/// when first allocated) so `read(2)` can fill them through a safe `&mut [u8]` without a memset
/// per use — zeroing 16 KiB per request would cost more than parsing it. Write buffers are kept
/// empty, to be appended to.
#[derive(Debug, Default)]
pub struct BufferPool {
    read: Vec<Vec<u8>>,
    write: Vec<Vec<u8>>,
}

impl BufferPool {
    /// A read buffer: `len() >= BUF_CAPACITY`, contents unspecified.
    pub fn take_read(&mut self) -> Vec<u8> {
        self.read.pop().unwrap_or_else(|| vec![0; BUF_CAPACITY])
    }

    /// An empty write buffer with at least [`BUF_CAPACITY`] bytes of capacity.
    pub fn take_write(&mut self) -> Vec<u8> {
        self.write
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUF_CAPACITY))
    }

    /// Returns a read buffer; one that is too small or grew too big is freed instead.
    pub fn give_read(&mut self, buf: Vec<u8>) {
        if (BUF_CAPACITY..=MAX_POOLED_CAPACITY).contains(&buf.len()) && self.read.len() < MAX_FREE {
            self.read.push(buf);
        }
    }

    /// Returns a write buffer; one that is too small or grew too big is freed instead.
    pub fn give_write(&mut self, mut buf: Vec<u8>) {
        if (BUF_CAPACITY..=MAX_POOLED_CAPACITY).contains(&buf.capacity())
            && self.write.len() < MAX_FREE
        {
            buf.clear();
            self.write.push(buf);
        }
    }

    /// Free buffers held now: (read, write).
    #[cfg(test)]
    #[must_use]
    pub fn free_count(&self) -> (usize, usize) {
        (self.read.len(), self.write.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_and_bounds() {
        let mut pool = BufferPool::default();
        let mut w = pool.take_write();
        w.extend_from_slice(b"data");
        let ptr = w.as_ptr();
        pool.give_write(w);
        let w = pool.take_write();
        assert!(w.is_empty());
        assert_eq!(w.as_ptr(), ptr, "the same allocation comes back");

        let r = pool.take_read();
        assert_eq!(r.len(), BUF_CAPACITY, "read buffers come initialised");
        pool.give_read(r);
        assert_eq!(pool.free_count(), (1, 0));

        pool.give_write(Vec::new()); // no capacity: ignored
        pool.give_write(Vec::with_capacity(MAX_POOLED_CAPACITY * 2)); // too big: freed
        pool.give_read(vec![0; MAX_POOLED_CAPACITY * 2]);
        assert_eq!(pool.free_count(), (1, 0));
        for _ in 0..MAX_FREE + 10 {
            pool.give_write(Vec::with_capacity(BUF_CAPACITY));
        }
        assert_eq!(pool.free_count(), (1, MAX_FREE));
    }
}
