//! Upstream servers that misbehave on purpose, one behaviour each ([`Act`]), as threads of the
//! test process on real sockets (127.0.0.1, a port of their own): a thread accepts, a thread per
//! connection reads each request head (and its Content-Length body) and answers as its act says.
//! A [`Flapper`] is a server that goes up and down on a fixed port.
//!
//! Every response that carries a body meant for the client carries the request's target, so
//! that a client can tell its own response from another request's. Dropping an upstream closes
//! its listener and every connection it holds, so no thread outlives its test for long.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::listen::{Listening, Shared};

/// Request heads longer than this end the connection: the fixture needs no more.
const MAX_REQUEST_HEAD_BYTES: usize = 64 * 1024;

/// What an upstream does with each request it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// A well-behaved server: `200`, the target as the body (with its line end), keep-alive.
    Echo,
    /// Reads the request and never answers; holds the connection until the peer closes it.
    NeverAnswer,
    /// Half a response head (`HTTP/1.1 200 OK\r\nContent-Le`), then FIN.
    HalfHead,
    /// `Content-Length` covers the target's line; 14 bytes more follow in the same write.
    LongerBody,
    /// As `LongerBody`, but the surplus comes 30 ms after the body (a separate segment), after
    /// which the connection stays open and its next requests are answered properly.
    LongerBodyLate,
    /// `Content-Length: 1000`, the target's line, then FIN.
    ShorterBodyClose,
    /// `Content-Length: 1000`, the target's line, then silence (connection kept open).
    ShorterBodyStall,
    /// A chunked body: the target's line as a valid chunk, then the given bytes (invalid
    /// chunking), then silence.
    BadChunk(&'static [u8]),
    /// `Content-Length: 1024`, the target's line, then RST (`SO_LINGER` 0) with no FIN.
    ResetMidBody,
    /// Two `100 Continue`, then the real `200` with the target.
    TwoContinues,
    /// `100 Continue` without end, as fast as the socket takes it.
    InterimFlood,
    /// A response head of 1 MiB: 1024 fields of 1 KiB, then a 2-byte body.
    HugeHead,
    /// A complete keep-alive response (no `Connection: close`), then the connection closes
    /// after the given number of milliseconds (0: at once): the proxy's pooled connection
    /// races the close.
    CloseAfterOne(u64),
    /// The response head (with the target as a 4-byte-or-longer body) one byte per interval.
    TrickleHead(Duration),
    /// The head at once, then the body (the target's line) one byte per interval.
    TrickleBody(Duration),
    /// A body with no length (close-delimited) sent without end, as fast as the socket takes.
    FloodBody,
    /// A well-behaved `200` of this many bytes of [`pattern`], as fast as the socket takes it.
    BigBody(usize),
}

/// The bytes `offset..offset + len` of the pattern [`Act::BigBody`] sends: byte `i` is `i % 251`
/// (a prime, so that no power-of-two split of the stream lines up with the pattern).
pub fn pattern(offset: usize, len: usize) -> Vec<u8> {
    // One period computed, the rest copied from what is already there in whole periods (a
    // byte at a time, the debug build takes seconds for tens of MiB).
    let mut out = Vec::with_capacity(len);
    out.extend((offset..offset + len.min(251)).map(|i| u8::try_from(i % 251).unwrap()));
    while out.len() < len {
        let k = (out.len() / 251 * 251).min(len - out.len());
        out.extend_from_within(..k);
    }
    out
}

/// The body a well-behaved answer to `target` carries.
pub fn body_for(target: &str) -> Vec<u8> {
    format!("{target}\n").into_bytes()
}

/// A misbehaving (or healthy) upstream on a port of its own.
pub struct Chaos(Listening);

impl Chaos {
    /// Listens on 127.0.0.1 (a free port) and answers every request with `act`.
    pub fn start(act: Act) -> Chaos {
        Chaos(Listening::start(move |conn, sh| serve(conn, act, sh)))
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.0.addr)
    }

    pub fn port(&self) -> u16 {
        self.0.port()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.0.accepted()
    }
}

/// One request as the upstream read it.
struct Request {
    target: String,
}

/// Reads one request head and its Content-Length body from `conn`, `buf` holding bytes already
/// read (and keeping those that follow). `None` at end of file or on an error.
fn read_request(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Request> {
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_REQUEST_HEAD_BYTES {
            return None;
        }
        let mut chunk = [0u8; 16 * 1024];
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end);
    let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < length {
        let mut chunk = [0u8; 16 * 1024];
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    buf.drain(..length);
    Some(Request { target })
}

/// A complete keep-alive `200` whose body is `body`.
fn ok_response(body: &[u8]) -> Vec<u8> {
    let mut r = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    r.extend_from_slice(body);
    r
}

/// Reads until the peer closes or the upstream stops (what a server that never answers does).
fn hold(conn: &mut TcpStream, sh: &Shared) {
    let _ = conn.set_read_timeout(Some(Duration::from_millis(100)));
    let mut sink = [0u8; 16 * 1024];
    while !sh.stopped() {
        match conn.read(&mut sink) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// Sends `bytes` one at a time, `every` apart; false when the peer went away or the upstream
/// stopped.
fn trickle(conn: &mut TcpStream, bytes: &[u8], every: Duration, sh: &Shared) -> bool {
    for b in bytes {
        if sh.stopped() || conn.write_all(&[*b]).is_err() {
            return false;
        }
        thread::sleep(every);
    }
    true
}

/// Answers the requests of one connection with `act` until one side closes.
fn serve(mut conn: TcpStream, act: Act, sh: &Shared) {
    let _ = conn.set_nodelay(true);
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut conn, &mut buf) {
        let body = body_for(&req.target);
        let keep_going = match act {
            Act::Echo => conn.write_all(&ok_response(&body)).is_ok(),
            Act::NeverAnswer => {
                hold(&mut conn, sh);
                false
            }
            Act::HalfHead => {
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Le");
                false
            }
            Act::LongerBody => {
                let mut r = ok_response(&body);
                r.extend_from_slice(b"SURPLUS BYTES\n");
                let _ = conn.write_all(&r);
                // Answers no more on this connection: whatever the proxy sends next is read
                // and dropped, so a reused connection would show as a timeout, not pass.
                hold(&mut conn, sh);
                false
            }
            Act::LongerBodyLate => {
                let ok = conn.write_all(&ok_response(&body)).is_ok();
                thread::sleep(Duration::from_millis(30));
                ok && conn.write_all(b"SURPLUS BYTES\n").is_ok()
            }
            Act::ShorterBodyClose => {
                let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".to_vec();
                r.extend_from_slice(&body);
                let _ = conn.write_all(&r);
                let _ = conn.shutdown(Shutdown::Write);
                hold(&mut conn, sh);
                false
            }
            Act::ShorterBodyStall => {
                let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".to_vec();
                r.extend_from_slice(&body);
                let _ = conn.write_all(&r);
                hold(&mut conn, sh);
                false
            }
            Act::BadChunk(bad) => {
                let mut r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                r.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                r.extend_from_slice(&body);
                r.extend_from_slice(b"\r\n");
                r.extend_from_slice(bad);
                let _ = conn.write_all(&r);
                hold(&mut conn, sh);
                false
            }
            Act::ResetMidBody => {
                let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n".to_vec();
                r.extend_from_slice(&body);
                let _ = conn.write_all(&r);
                thread::sleep(Duration::from_millis(20));
                return reset(conn, sh);
            }
            Act::TwoContinues => {
                let mut r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n".to_vec();
                r.extend_from_slice(&ok_response(&body));
                conn.write_all(&r).is_ok()
            }
            Act::InterimFlood => {
                let many = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(2048);
                while !sh.stopped() && conn.write_all(&many).is_ok() {}
                false
            }
            Act::HugeHead => {
                let mut r = b"HTTP/1.1 200 OK\r\n".to_vec();
                let value = "a".repeat(1024);
                for i in 0..1024 {
                    r.extend_from_slice(format!("X-Filler-{i:04}: {value}\r\n").as_bytes());
                }
                r.extend_from_slice(b"Content-Length: 2\r\n\r\nok");
                let _ = conn.write_all(&r);
                hold(&mut conn, sh);
                false
            }
            Act::CloseAfterOne(ms) => {
                let _ = conn.write_all(&ok_response(&body));
                if ms > 0 {
                    thread::sleep(Duration::from_millis(ms));
                }
                false
            }
            Act::TrickleHead(every) => {
                let r = ok_response(&body);
                trickle(&mut conn, &r, every, sh)
            }
            Act::TrickleBody(every) => {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                conn.write_all(head.as_bytes()).is_ok() && trickle(&mut conn, &body, every, sh)
            }
            Act::BigBody(len) => {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
                let mut ok = conn.write_all(head.as_bytes()).is_ok();
                let mut sent = 0;
                while ok && sent < len {
                    // 251 × 1024 bytes: a whole number of periods, so each block is the same.
                    let n = (len - sent).min(251 * 1024);
                    ok = conn.write_all(&pattern(sent, n)).is_ok();
                    sent += n;
                }
                ok
            }
            Act::FloodBody => {
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                let block = vec![b'x'; 64 * 1024];
                while !sh.stopped() && conn.write_all(&block).is_ok() {}
                false
            }
        };
        if !keep_going {
            break;
        }
    }
    let _ = conn.shutdown(Shutdown::Both);
}

/// Closes `conn` with a reset: `SO_LINGER` on with a zero timeout makes the close of its last
/// descriptor send RST (and no FIN). The clone `Shared` keeps is closed first, without a
/// shutdown, so that the drop of `conn` is the last close.
fn reset(conn: TcpStream, sh: &Shared) {
    socket2::SockRef::from(&conn)
        .set_linger(Some(Duration::ZERO))
        .expect("SO_LINGER");
    sh.forget(&conn);
    drop(conn);
}

/// A server on a fixed port that is up for `period`, then down (its listener and every
/// connection closed) for `period`, and so on until dropped. Up, it answers as [`Act::Echo`].
pub struct Flapper {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Up/down cycles so far.
    cycles: Arc<AtomicUsize>,
}

impl Flapper {
    pub fn start(period: Duration) -> Flapper {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = first.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let cycles = Arc::new(AtomicUsize::new(0));
        let (sh, cy) = (Arc::clone(&shared), Arc::clone(&cycles));
        thread::spawn(move || {
            let mut listener = Some(first);
            while !sh.stopped() {
                let l = listener
                    .take()
                    .or_else(|| TcpListener::bind(addr).ok())
                    .expect("rebind the flapping port");
                l.set_nonblocking(true).unwrap();
                let up_until = std::time::Instant::now() + period;
                while std::time::Instant::now() < up_until && !sh.stopped() {
                    match l.accept() {
                        Ok((conn, _)) => {
                            conn.set_nonblocking(false).unwrap();
                            sh.take(conn, |conn, sh| serve(conn, Act::Echo, sh));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(2)),
                    }
                }
                // Down: as a restart is, for the listener and every connection.
                drop(l);
                sh.close_all();
                cy.fetch_add(1, Ordering::Relaxed);
                thread::sleep(period);
            }
        });
        Flapper {
            addr,
            shared,
            cycles,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn cycles(&self) -> usize {
        self.cycles.load(Ordering::Relaxed)
    }
}

impl Drop for Flapper {
    fn drop(&mut self) {
        self.shared.stop();
        self.shared.close_all();
    }
}
