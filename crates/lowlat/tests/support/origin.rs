//! An HTTP/1.1 origin for the cache's tests, written here: it counts the requests it gets per
//! path and answers each path with the head and body a test gave it; and a one-request client
//! whose answer ([`Got`]) says what the cache did.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{field, find};

/// What the origin answers for a path: status, extra head lines (each ending in CRLF), body,
/// and how the body is framed and sent.
#[derive(Clone)]
pub struct Answer {
    pub status: u16,
    pub lines: String,
    pub body: Vec<u8>,
    /// How long the origin takes before it answers (a slow application).
    pub delay: Duration,
    /// How long it pauses after the head and the first half of the body (a body that arrives
    /// in more than one read).
    pub pause: Duration,
    pub framing: Framing,
}

/// How the origin sends a body.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length`, head and body in one write.
    Length,
    /// `Content-Length`, the body a moment after the head: the proxy reads it on a later event.
    Late,
    /// No length: the body, a moment after the head, ends when the origin closes the
    /// connection (RFC 9112 §6.3 ¶8).
    Close,
}

#[derive(Default)]
pub struct OriginState {
    pub answers: HashMap<String, Answer>,
    /// Requests per path (the query stripped), by method and path: `GET /a`.
    pub counts: HashMap<String, usize>,
    /// The last request head per path.
    pub last: HashMap<String, String>,
    /// Down: every connection is closed without an answer, as a crashed application's are.
    pub down: bool,
}

/// An HTTP/1.1 origin on 127.0.0.1: keep-alive, a thread per connection.
pub struct Origin {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<OriginState>>,
}

impl Origin {
    pub fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(OriginState::default()));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                if shared.lock().unwrap().down {
                    continue;
                }
                let state = Arc::clone(&shared);
                std::thread::spawn(move || serve(conn, &state));
            }
        });
        Origin { addr, state }
    }

    /// Answers `path` with this status, head lines (`Name: value` each, joined by `\n`) and body.
    pub fn set(&self, path: &str, status: u16, lines: &str, body: &[u8]) {
        self.set_answer(
            path,
            status,
            lines,
            body,
            Framing::Length,
            Duration::ZERO,
            Duration::ZERO,
        );
    }

    /// [`Origin::set`], with the body sent as `framing` says.
    pub fn set_framed(&self, path: &str, status: u16, lines: &str, body: &[u8], framing: Framing) {
        self.set_answer(
            path,
            status,
            lines,
            body,
            framing,
            Duration::ZERO,
            Duration::ZERO,
        );
    }

    /// As [`Origin::set`], the answer taking `delay` to start and pausing for `pause` halfway
    /// through its body.
    pub fn set_slow(
        &self,
        path: &str,
        status: u16,
        lines: &str,
        body: &[u8],
        delay: Duration,
        pause: Duration,
    ) {
        self.set_answer(path, status, lines, body, Framing::Length, delay, pause);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn set_answer(
        &self,
        path: &str,
        status: u16,
        lines: &str,
        body: &[u8],
        framing: Framing,
        delay: Duration,
        pause: Duration,
    ) {
        let lines: String = lines
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| format!("{l}\r\n"))
            .collect();
        self.state.lock().unwrap().answers.insert(
            path.to_owned(),
            Answer {
                status,
                lines,
                body: body.to_vec(),
                framing,
                delay,
                pause,
            },
        );
    }

    /// Requests `GET path` (or another method) got so far.
    pub fn count(&self, method_path: &str) -> usize {
        *self
            .state
            .lock()
            .unwrap()
            .counts
            .get(method_path)
            .unwrap_or(&0)
    }

    pub fn last(&self, path: &str) -> String {
        self.state
            .lock()
            .unwrap()
            .last
            .get(path)
            .cloned()
            .unwrap_or_default()
    }

    pub fn go_down(&self) {
        self.state.lock().unwrap().down = true;
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

pub fn serve(mut conn: TcpStream, state: &Mutex<OriginState>) {
    // A body goes in two writes: without this the second waits for the proxy's delayed ACK
    // (Nagle), 40 ms a response.
    let _ = conn.set_nodelay(true);
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 16 * 1024];
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let length: usize = field(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < length {
            let mut chunk = [0u8; 16 * 1024];
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..length);
        let mut words = head.split(' ');
        let method = words.next().unwrap_or("").to_owned();
        let target = words.next().unwrap_or("/");
        let path = target.split('?').next().unwrap_or("/").to_owned();
        let answer = {
            let mut s = state.lock().unwrap();
            if s.down {
                return;
            }
            *s.counts.entry(format!("{method} {path}")).or_default() += 1;
            s.last.insert(path.clone(), head.clone());
            s.answers.get(&path).cloned().unwrap_or(Answer {
                status: 404,
                lines: String::new(),
                body: b"no such path\n".to_vec(),
                framing: Framing::Length,
                delay: Duration::ZERO,
                pause: Duration::ZERO,
            })
        };
        std::thread::sleep(answer.delay);
        let length = match answer.framing {
            Framing::Close => String::new(),
            _ => format!("Content-Length: {}\r\n", answer.body.len()),
        };
        let mut out = format!(
            "HTTP/1.1 {} X\r\n{}{length}\r\n",
            answer.status, answer.lines
        )
        .into_bytes();
        if answer.framing != Framing::Length {
            if conn.write_all(&out).is_err() {
                return;
            }
            out.clear();
            std::thread::sleep(Duration::from_millis(200));
        }
        let half = answer.body.len() / 2;
        if method != "HEAD" {
            out.extend_from_slice(&answer.body[..half]);
        }
        if conn.write_all(&out).is_err() {
            return;
        }
        if method != "HEAD" {
            std::thread::sleep(answer.pause);
            if conn.write_all(&answer.body[half..]).is_err() {
                return;
            }
        }
        if answer.framing == Framing::Close {
            return;
        }
    }
}

/// A response as the client got it.
pub struct Got {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Got {
    pub fn field(&self, name: &str) -> Option<&str> {
        field(&self.head, name)
    }

    pub fn cache_status(&self) -> &str {
        self.field("cache-status").unwrap_or("")
    }

    /// `Cache-Status`'s `ttl`, when it has one.
    pub fn ttl(&self) -> Option<i64> {
        self.cache_status()
            .split(';')
            .find_map(|p| p.trim().strip_prefix("ttl="))
            .and_then(|v| v.parse().ok())
    }
}

/// One request on a new connection (`Connection: close`), with extra head lines.
pub fn request(addr: SocketAddr, method: &str, target: &str, lines: &[&str]) -> Got {
    request_to(addr, "cache.test", method, target, lines)
}

/// [`request`] with `Host: host`.
pub fn request_to(addr: SocketAddr, host: &str, method: &str, target: &str, lines: &[&str]) -> Got {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for l in lines {
        req.push_str(l);
        req.push_str("\r\n");
    }
    if method == "POST" || method == "PUT" {
        req.push_str("Content-Length: 0\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = find(&all, b"\r\n\r\n").expect("a response head") + 4;
    let head = String::from_utf8_lossy(&all[..end]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Got {
        status,
        head,
        body: all[end..].to_vec(),
    }
}

pub fn get(addr: SocketAddr, target: &str) -> Got {
    request(addr, "GET", target, &[])
}
