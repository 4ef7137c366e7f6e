//! This worker's own waker, kept per thread: what another thread rings to make the worker take
//! a turn for news it queued — a cache flight's waiters (`cache::collapse`, `cache::refresh`),
//! a php-fpm process asked back (`proxy::fcgi_share`). A thread without one (no event loop)
//! is never asked to wait for a ring.

use std::cell::OnceCell;
use std::sync::Arc;

thread_local! {
    /// Set when the worker's loop starts.
    static WAKER: OnceCell<Arc<mio::Waker>> = const { OnceCell::new() };
}

/// Makes `waker` this thread's: its loop handles what a ring brings.
pub(crate) fn set(waker: Arc<mio::Waker>) {
    WAKER.with(|w| {
        let _ = w.set(waker);
    });
}

/// This thread's waker, when it runs a worker loop.
pub(crate) fn get() -> Option<Arc<mio::Waker>> {
    WAKER.with(|w| w.get().cloned())
}

/// Whether this thread runs a worker loop (has a waker), asked without taking a reference
/// to it (a cache miss asks it; only a miss that waits needs the waker itself).
pub(crate) fn present() -> bool {
    WAKER.with(|w| w.get().is_some())
}

/// Rings this thread's own worker (news queued for its next turn). False when it has none.
pub(crate) fn wake() -> bool {
    WAKER.with(|w| w.get().is_some_and(|w| w.wake().is_ok()))
}
