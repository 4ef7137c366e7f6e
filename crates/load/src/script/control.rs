//! What a loader thread and the scripts share about it: whether `thread:stop()` was called,
//! and the address its connections go to (`thread.addr`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// What a thread and the scripts share about it.
#[derive(Debug)]
pub(crate) struct ThreadControl {
    /// `thread:stop()` was called: the thread ends its run.
    pub stop: AtomicBool,
    /// Where the thread's connections go (`thread.addr`, set in `setup()`).
    pub addr: Mutex<SocketAddr>,
}

impl ThreadControl {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            stop: AtomicBool::new(false),
            addr: Mutex::new(addr),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        *self.addr.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}
