//! The listening side every chaos upstream shares: a port of its own on 127.0.0.1, a thread that
//! accepts and a thread per connection, the count of connections accepted, and — when the
//! upstream is dropped — the accepting stopped and every connection shut down, which ends any
//! blocking read of their threads, so no thread outlives its test for long.

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// What all threads of one upstream share.
#[derive(Default)]
pub struct Shared {
    stop: AtomicBool,
    accepted: AtomicUsize,
    /// Clones of the open connections, shut down when the upstream is dropped.
    conns: Mutex<Vec<TcpStream>>,
}

impl Shared {
    /// The upstream was dropped: its threads end what they do.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Says the upstream is done (see [`Shared::stopped`]).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Shuts every connection down (as a restart or the end of the upstream does).
    pub fn close_all(&self) {
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Lets go of the clone kept of `conn` without shutting it down (a reset must be its own
    /// last close).
    pub fn forget(&self, conn: &TcpStream) {
        let peer = conn.peer_addr().ok();
        self.conns
            .lock()
            .unwrap()
            .retain(|c| c.peer_addr().ok() != peer);
    }

    /// Counts `conn`, keeps a clone of it to shut down at the end, and has `serve` answer it on
    /// a thread of its own.
    pub fn take(
        self: &Arc<Self>,
        conn: TcpStream,
        serve: impl FnOnce(TcpStream, &Shared) + Send + 'static,
    ) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        if let Ok(c) = conn.try_clone() {
            self.conns.lock().unwrap().push(c);
        }
        let sh = Arc::clone(self);
        thread::spawn(move || serve(conn, &sh));
    }
}

/// An upstream listening on a free port, each connection answered by the function it started
/// with.
pub struct Listening {
    pub addr: SocketAddr,
    pub shared: Arc<Shared>,
}

impl Listening {
    pub fn start(serve: impl Fn(TcpStream, &Shared) + Send + Clone + 'static) -> Listening {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let sh = Arc::clone(&shared);
        thread::spawn(move || {
            for conn in listener.incoming() {
                if sh.stopped() {
                    return;
                }
                let Ok(conn) = conn else { continue };
                sh.take(conn, serve.clone());
            }
        });
        Listening { addr, shared }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.shared.stop();
        // Wakes the accepting thread, which sees the flag.
        let _ = TcpStream::connect(self.addr);
        self.shared.close_all();
    }
}
