//! A counting global allocator. A test binary installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: lowlat_testkit::alloc::Counting = lowlat_testkit::alloc::Counting;
//! ```
//!
//! and reads [`allocations`] before and after the loop it watches. Every thread of the process
//! is counted (the server's workers run in the test process), so a test compares counts over a
//! loop in which its own client allocates nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Defers to [`System`], counting `alloc` and `realloc` calls.
pub struct Counting;

// SAFETY: defers every operation to `System`, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held by a test for as long as it counts: the count is the whole process's, so two tests of
/// one binary counting at once (the test harness runs them in parallel) would see each other's
/// allocations.
pub fn counting_alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Allocations a stretch of requests started at `started` may make without making one per
/// request: the Date cache (and the access log's time fields) format once per second each, so
/// a run slowed down by a loaded machine is allowed two a second it took, beside the ten a
/// quick run always was.
#[must_use]
pub fn allowed_since(started: std::time::Instant) -> u64 {
    10 + 2 * started.elapsed().as_secs()
}

/// Allocations (and reallocations) made by the whole process so far.
#[must_use]
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::SeqCst)
}
