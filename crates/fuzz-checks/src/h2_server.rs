//! HTTP/2 as a server: a whole connection, written as a list of frames, sent to a real
//! `lowlat serve` engine (the built-in endpoints, `h2c` with prior knowledge, one worker) on
//! 127.0.0.1 in this process, and its answer read to the end.
//!
//! Why over a socket: the server's connection state machine (`crates/server/src/h2/`) is
//! driven by the worker's loop and lent its buffers, router and handlers (`WorkerCtx`), so it
//! cannot be fed bytes alone; this is the same code a client reaches, flood counters, windows,
//! CONTINUATION and stream states included. A panic on the worker thread aborts the process,
//! which the fuzzer reports as a crash. Beyond that: the server always ends the connection once
//! the client has finished sending (no hang), and what it sent is the SETTINGS frame first, then
//! whole frames, every header block decodable by HPACK within the protocol's default table.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use lowlat_http::h2::frame::{self, flag, kind, FrameHeader, HEADER_LEN, PREFACE};
use lowlat_http::h2::{Decoder, Encoder};
use lowlat_server::{Server, ServerConfig};

use crate::h2_frames::{self, Frame};

/// Longest a connection's answer may take once the client has sent everything. The server
/// ends it at once; this only turns a hang into a failure rather than a stuck fuzzer.
const ANSWER_LIMIT: Duration = Duration::from_secs(20);

/// The connection: the client's SETTINGS (always first: anything else is refused at once, and
/// the fuzzer should get past that), then frames.
#[derive(Debug, Arbitrary)]
struct Connection {
    settings: Vec<(u8, u32)>,
    frames: Vec<Frame>,
}

/// The server every input is sent to, started once per process and left running.
fn server() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        // SAFETY: setting a signal's disposition to "ignore" before any thread of ours writes
        // to a socket; no handler runs, so nothing can be unsound in one.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        // Timeouts of a second: a connection left waiting after the client's end (a response
        // stalled on a window the client never opens, a body that never comes) is ended by
        // them, and at the defaults (10-30 s) one such input would cost the fuzzer 10^4 others.
        let second = Duration::from_secs(1);
        let mut cfg = ServerConfig {
            listen: vec!["127.0.0.1:0".parse().expect("an address")],
            workers: 1,
            keepalive_timeout: second,
            header_timeout: second,
            body_timeout: second,
            write_timeout: second,
            ..ServerConfig::default()
        };
        cfg.h2.h2c = true;
        cfg.h2.settings_timeout = second;
        let running = Server::bind(cfg, lowlat_server::builtin_service())
            .and_then(Server::start)
            .expect("the server starts");
        let addr = running.local_addrs()[0];
        // Runs until the process ends.
        std::mem::forget(running);
        addr
    })
}

pub fn check(data: &[u8]) {
    let Ok(conn) = Connection::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut input = PREFACE.to_vec();
    let settings: Vec<(u16, u32)> = conn
        .settings
        .iter()
        .map(|&(id, v)| (u16::from(id % 9), v))
        .collect();
    frame::write_settings(&mut input, &settings);
    h2_frames::write(&conn.frames, &mut Encoder::default(), &mut input);
    let answer = exchange(&input);
    check_answer(&answer, client_max_frame(&input[PREFACE.len()..]));
}

/// The largest frame the client allowed in any of its SETTINGS (the server may have applied
/// any of them by the time it wrote a frame).
fn client_max_frame(mut frames: &[u8]) -> u32 {
    let mut max = frame::DEFAULT_MAX_FRAME;
    while let Some(h) = FrameHeader::parse(frames) {
        let end = (HEADER_LEN + h.len as usize).min(frames.len());
        if h.kind == kind::SETTINGS {
            for entry in frames[HEADER_LEN..end].chunks_exact(6) {
                let id = u16::from_be_bytes([entry[0], entry[1]]);
                let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
                if id == frame::setting::MAX_FRAME_SIZE && value <= frame::MAX_MAX_FRAME {
                    max = max.max(value);
                }
            }
        }
        frames = &frames[end..];
    }
    max
}

/// Sends `input`, half-closes, and reads the answer until the server closes.
fn exchange(input: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(server()).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    stream
        .set_read_timeout(Some(ANSWER_LIMIT))
        .expect("read timeout");
    let mut answer = Vec::new();
    std::thread::scope(|s| {
        let mut writer = stream.try_clone().expect("clone");
        // Written on its own thread: the server stops reading while much output waits, so a
        // client that wrote everything before reading could wait on it forever.
        s.spawn(move || {
            // The server may close first (after a protocol error): the rest is not read.
            if writer.write_all(input).is_ok() {
                let _ = writer.shutdown(Shutdown::Write);
            }
        });
        let mut buf = [0u8; 16 * 1024];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                // libFuzzer's timer signal (for `-timeout`) interrupts a blocked read.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("the server did not end the connection: {e}"),
            }
        }
    });
    answer
}

/// The answer is SETTINGS, then whole frames (a close may cut the last one short, after a
/// GOAWAY), and every header block decodes.
fn check_answer(answer: &[u8], max_frame: u32) {
    let mut decoder = Decoder::new(4096);
    let mut block: Option<Vec<u8>> = None;
    let mut at = 0;
    let mut first = true;
    while let Some(h) = FrameHeader::parse(&answer[at..]) {
        let end = at + HEADER_LEN + h.len as usize;
        if end > answer.len() {
            break;
        }
        let payload = &answer[at + HEADER_LEN..end];
        at = end;
        if first {
            assert!(
                h.kind == kind::SETTINGS && !h.has(flag::ACK),
                "SETTINGS first"
            );
            first = false;
        }
        assert!(h.len <= max_frame, "a frame past the client's size");
        match h.kind {
            kind::HEADERS => {
                assert!(block.is_none(), "HEADERS inside a header block");
                let fragment = frame::unpad(h.flags, payload).expect("padding");
                block = Some(fragment.to_vec());
            }
            kind::CONTINUATION => {
                block
                    .as_mut()
                    .expect("CONTINUATION outside a header block")
                    .extend_from_slice(payload);
            }
            _ => assert!(block.is_none(), "a header block interrupted"),
        }
        if matches!(h.kind, kind::HEADERS | kind::CONTINUATION) && h.has(flag::END_HEADERS) {
            let b = block.take().unwrap_or_default();
            decoder
                .decode(&b, |_, _| {})
                .expect("the server's header block decodes");
        }
    }
}
