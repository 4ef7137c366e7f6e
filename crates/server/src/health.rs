//! The health endpoint for a balancer's or an orchestrator's probes (`--health ADDR:PORT`): a
//! listener of its own, so that it can be exposed to the balancer while `--metrics` is not
//! (the metrics listener answers `/health` too, for probes that reach it),
//! answering `GET /health` with `200 ok` — or `503 draining` from the moment shutdown begins,
//! so that the balancer stops sending new connections before lowlat stops accepting them
//! (`--shutdown-delay` is how long it waits for that). A binary upgrade is not a shutdown:
//! the new process answers on the same socket, and the endpoint stays ok.
//!
//! Answered on a thread of its own, one probe at a time (a probe is a few bytes a second), so
//! a probe never waits behind requests and the workers never see one.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the endpoint reports.
#[derive(Debug, Default)]
pub struct Health {
    draining: AtomicBool,
}

impl Health {
    /// Shutdown began: probes get 503 from now on.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// A probe's status line and body.
    #[must_use]
    pub fn answer(&self) -> (&'static str, &'static str) {
        if self.is_draining() {
            ("503 Service Unavailable", "draining\n")
        } else {
            ("200 OK", "ok\n")
        }
    }
}

/// Answers probes on `listener` from a thread of its own.
///
/// # Errors
/// When the thread cannot be started.
pub fn serve(listener: TcpListener, health: Arc<Health>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("lowlat-health".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                answer(conn, &health);
            }
        })?;
    Ok(())
}

/// Reads a request head into `buf` on a blocking side listener (this one, the metrics one):
/// at most `buf`'s size, 2 s to read and to write. `None` when the peer left first.
pub(crate) fn read_head<'b>(conn: &mut TcpStream, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
    let mut len = 0;
    while len < buf.len() && !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf[len..]) {
            Ok(0) | Err(_) => return None,
            Ok(n) => len += n,
        }
    }
    Some(&buf[..len])
}

/// Whether `head` asks for the health endpoint (`GET` or `HEAD /health`).
pub(crate) fn is_probe(head: &[u8]) -> bool {
    head.starts_with(b"GET /health ") || head.starts_with(b"HEAD /health ")
}

/// One probe: read a head (at most 4 KiB, 2 s), answer, close.
fn answer(mut conn: TcpStream, health: &Health) {
    let mut buf = [0u8; 4096];
    let Some(head) = read_head(&mut conn, &mut buf) else {
        return;
    };
    let probe = is_probe(head);
    let (status, body) = if probe {
        health.answer()
    } else {
        ("404 Not Found", "the health endpoint is GET /health\n")
    };
    let length = body.len();
    let body = if head.starts_with(b"HEAD ") { "" } else { body };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {length}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}"
    );
}
