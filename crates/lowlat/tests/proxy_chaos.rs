//! Upstreams that fail the way real ones do, behind `lowlat serve --proxy`: one that accepts and
//! never answers, half a head then a close, a body longer or shorter than its Content-Length,
//! invalid chunking, a reset mid-body, `100 Continue` twice (and without end), a head of 1 MiB,
//! a close after every keep-alive response racing the proxy's pool, a server flapping up and
//! down every 100 ms, one byte a second. The upstreams are threads of this test on real sockets
//! (`chaos/upstream.rs`); the proxy is the real binary.
//!
//! For each, the client gets a whole 502 or 504, or a response cut short by the close of its
//! connection (HTTP/2: a reset stream) — never a success of the wrong length, never another
//! request's body (each request's target is its tag, which a good answer echoes); the proxy
//! gives back what the exchange held (its descriptors in `/proc/PID/fd`, the pool's gauges on
//! `/metrics`, no CLOSE-WAIT socket); and a healthy route on the same proxy (one worker) answers
//! every request meanwhile.
//!
//! Two more check the relay itself under a fast upstream: an endless body and an endless run of
//! `100 Continue` must not keep the worker from the healthy route (the relay yields every 512
//! KiB), and a large body must cross byte-exact through those turns.
//!
//! Timeouts are short (`--proxy-first-byte-timeout 1s` and the like), so the file takes about
//! 20 s with the tests side by side on two busy cores.

use std::io::Write;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

mod chaos;
mod support;

use chaos::upstream::{body_for, pattern, Act, Chaos, Flapper};
use chaos::{
    assert_answer, assert_cut, assert_cut_of, concurrent_gets, connect, get, read_outcome,
    read_outcome_of, HealthyLoop, Outcome, Rig,
};
use support::{curl, BIN};

/// The timeouts every rig runs with unless a test says otherwise: short, so that a hang shows
/// as a failed assertion within seconds.
const FAST: [(&str, &str); 3] = [
    ("--proxy-connect-timeout", "1s"),
    ("--proxy-first-byte-timeout", "1s"),
    ("--proxy-read-timeout", "1s"),
];

/// The [`FAST`] flags, a value replaced where `extra` names the flag, then the rest of `extra`
/// (flag and value pairs; a flag may be given once only).
fn flags(extra: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (flag, value) in FAST {
        let value = extra
            .chunks(2)
            .find(|p| p[0] == flag)
            .map_or(value, |p| p[1]);
        out.extend([flag.to_owned(), value.to_owned()]);
    }
    for pair in extra.chunks(2) {
        if !FAST.iter().any(|(f, _)| *f == pair[0]) {
            out.extend(pair.iter().map(|a| (*a).to_owned()));
        }
    }
    out
}

/// Longer than a healthy request may wait behind a relay's turn. A turn is 512 KiB; in a debug
/// build on two busy cores it has taken up to 300 ms (a run of 1xx heads, each parsed and moved
/// on its own, costs the most). Before a relay yielded its turns, a request waited for the
/// whole flood: 1.4 s for one second of relaying.
const STARVED: Duration = Duration::from_secs(1);

/// A rig whose `/bad/` route goes to `bad`, with [`FAST`] timeouts but where `extra` says
/// otherwise.
fn rig(bad: &Chaos, extra: &[&str]) -> Rig {
    Rig::start(&bad.url(), &flags(extra))
}

/// An upstream that reads the request and never answers: each of three requests at once is a
/// whole 504 once the first-byte timeout (1 s) has passed, the upstream connections are closed
/// (none left active or pooled, no descriptor kept), and the healthy route answered throughout.
#[test]
fn never_answering_is_504_after_the_first_byte_timeout() {
    let bad = Chaos::start(Act::NeverAnswer);
    let rig = rig(&bad, &[]);
    let healthy = HealthyLoop::start(rig.addr());
    for (target, o, took) in concurrent_gets(&rig, 0..3) {
        assert_answer(&o, 504, &target);
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(3),
            "{target}: 504 after {took:?}"
        );
    }
    healthy.finish();
    rig.assert_freed(bad.port(), 0);
}

/// Half a head (`HTTP/1.1 200 OK\r\nContent-Le`), then a close: 502 at once, nothing of the
/// half head relayed.
#[test]
fn half_a_head_then_a_close_is_502() {
    let bad = Chaos::start(Act::HalfHead);
    let rig = rig(&bad, &[]);
    let healthy = HealthyLoop::start(rig.addr());
    for (target, o, took) in concurrent_gets(&rig, 0..4) {
        assert_answer(&o, 502, &target);
        if let Outcome::Complete { head, .. } = &o {
            assert!(!head.contains("Content-Le\r"), "{target}: {head}");
        }
        assert!(
            took < Duration::from_secs(1),
            "{target}: 502 after {took:?}"
        );
    }
    healthy.finish();
    rig.assert_freed(bad.port(), 0);
}

/// A body longer than its Content-Length (14 bytes more in the same write): the client gets
/// exactly the declared length, and the connection is not pooled — the next request on the
/// same client connection goes to a new upstream connection and gets its own answer (the
/// upstream answers nothing more on the first, so a reuse would show as a 504).
#[test]
fn a_body_longer_than_its_length_is_cut_to_it_and_the_connection_dropped() {
    let bad = Chaos::start(Act::LongerBody);
    let rig = rig(&bad, &[]);
    let healthy = HealthyLoop::start(rig.addr());
    let mut s = connect(rig.addr());
    let mut pending = Vec::new();
    for i in 0..3 {
        let target = format!("/bad/{i}");
        write!(s, "GET {target} HTTP/1.1\r\nHost: chaos.test\r\n\r\n").unwrap();
        assert_answer(&read_outcome(&mut s, &mut pending), 200, &target);
        assert!(pending.is_empty(), "surplus relayed: {pending:?}");
    }
    assert_eq!(
        bad.accepted(),
        3,
        "a connection with surplus bytes was reused"
    );
    drop(s);
    healthy.finish();
    rig.assert_freed(bad.port(), 0);
}

/// An upstream that sends a body with its answer to `HEAD` (as many applications do): the
/// client gets the head alone, and the GET that follows on the same connection gets its own
/// body, never the `HEAD`'s (the connection the body came on is not pooled).
#[test]
fn a_body_sent_to_head_never_answers_the_next_request() {
    let bad = Chaos::start(Act::Echo);
    let rig = rig(&bad, &[]);
    let healthy = HealthyLoop::start(rig.addr());
    let mut s = connect(rig.addr());
    let mut pending = Vec::new();
    for i in 0..6 {
        let (method, target) = if i % 2 == 0 {
            ("HEAD", format!("/bad/head/{i}"))
        } else {
            ("GET", format!("/bad/get/{i}"))
        };
        write!(s, "{method} {target} HTTP/1.1\r\nHost: chaos.test\r\n\r\n").unwrap();
        let o = read_outcome_of(&mut s, &mut pending, method == "HEAD");
        if method == "HEAD" {
            assert_eq!(o.status(), Some(200), "{target}: {o:?}");
            // What the client would take for the next response.
            thread::sleep(Duration::from_millis(50));
            s.set_nonblocking(true).unwrap();
            let mut more = [0u8; 256];
            let extra = std::io::Read::read(&mut s, &mut more);
            s.set_nonblocking(false).unwrap();
            assert!(
                pending.is_empty() && extra.is_err(),
                "{target}: bytes after the head: {pending:?} {extra:?}"
            );
        } else {
            assert_answer(&o, 200, &target);
        }
    }
    drop(s);
    healthy.finish();
    rig.assert_freed(bad.port(), 1);
}

/// Surplus bytes that come 30 ms after a complete response, while the connection sits in the
/// pool: the pool drops it, and a request 100 ms later gets its own answer on a new connection.
/// Requests sent at once (racing the surplus onto a reused connection) get their own answer or
/// a clean 502 — the surplus never becomes a response.
#[test]
fn surplus_bytes_on_a_pooled_connection_never_answer_the_next_request() {
    let bad = Chaos::start(Act::LongerBodyLate);
    let rig = rig(&bad, &[]);
    let healthy = HealthyLoop::start(rig.addr());
    for i in 0..3 {
        let target = format!("/bad/slow/{i}");
        assert_answer(&get(rig.addr(), &target), 200, &target);
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        bad.accepted(),
        3,
        "a connection with surplus bytes was reused"
    );
    let mut s = connect(rig.addr());
    let mut pending = Vec::new();
    let mut answered = 0;
    for i in 0..10 {
        let target = format!("/bad/fast/{i}");
        write!(s, "GET {target} HTTP/1.1\r\nHost: chaos.test\r\n\r\n").unwrap();
        let o = read_outcome(&mut s, &mut pending);
        if o.status() == Some(200) {
            assert_answer(&o, 200, &target);
            answered += 1;
        } else {
            assert_answer(&o, 502, &target);
        }
    }
    assert!(answered > 0, "no request answered");
    drop(s);
    healthy.finish();
    rig.assert_freed(bad.port(), 1);
}

/// A body shorter than its Content-Length, then a close: the client gets the head, the bytes
/// that came, and the close of its connection, at once.
#[test]
fn a_body_shorter_than_its_length_is_cut_at_the_close() {
    let bad = Chaos::start(Act::ShorterBodyClose);
    let rig = rig(&bad, &[]);
    let healthy = HealthyLoop::start(rig.addr());
    for (target, o, took) in concurrent_gets(&rig, 0..3) {
        assert_cut(&o, &target);
        if let Outcome::Cut { got, head, .. } = &o {
            assert_eq!(got, &body_for(&target), "{target}");
            assert!(head.contains("Content-Length: 1000\r\n"), "{head}");
        }
        assert!(
            took < Duration::from_millis(900),
            "{target}: cut after {took:?}"
        );
    }
    healthy.finish();
    rig.assert_freed(bad.port(), 0);
}

/// A body shorter than its Content-Length, then silence: cut once the read timeout (500 ms)
/// has passed without a byte.
#[test]
fn a_body_shorter_than_its_length_is_cut_after_the_read_timeout() {
    let bad = Chaos::start(Act::ShorterBodyStall);
    let rig = rig(&bad, &["--proxy-read-timeout", "500ms"]);
    let healthy = HealthyLoop::start(rig.addr());
    for (target, o, took) in concurrent_gets(&rig, 0..3) {
        assert_cut(&o, &target);
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_secs(3),
            "{target}: cut after {took:?}"
        );
    }
    healthy.finish();
    rig.assert_freed(bad.port(), 0);
}

/// Invalid chunking after a valid first chunk — a size that is not hex, a chunk not ended by
/// CRLF, a size past 64 bits, a negative size, an extension past the limit — cuts the response
/// after the valid chunk (the data of a chunk whose end is wrong may have gone: it is relayed
/// as it comes): the client's chunked body never gets its last chunk, and its connection
/// closes.
#[test]
fn invalid_chunking_cuts_the_response_after_the_valid_chunks() {
    let long_extension: &'static [u8] = Box::leak(
        [
            b"5;".as_slice(),
            &b"x".repeat(64 * 1024),
            b"\r\nhello\r\n0\r\n\r\n",
        ]
        .concat()
        .into_boxed_slice(),
    );
    let cases: [&'static [u8]; 5] = [
        b"zz\r\nhello\r\n0\r\n\r\n",
        b"5\r\nhelloXX0\r\n\r\n",
        b"fffffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
        b"-5\r\nhello\r\n0\r\n\r\n",
        long_extension,
    ];
    let bads: Vec<Chaos> = cases
        .iter()
        .map(|b| Chaos::start(Act::BadChunk(b)))
        .collect();
    let threads: Vec<_> = bads
        .iter()
        .enumerate()
        .map(|(n, bad)| {
            let url = bad.url();
            let port = bad.port();
            thread::spawn(move || {
                let rig = Rig::start(&url, &flags(&[]));
                let healthy = HealthyLoop::start(rig.addr());
                for (target, o, took) in concurrent_gets(&rig, 0..2) {
                    // At most the valid chunk and the data of the bad one.
                    let most = [body_for(&target).as_slice(), b"hello"].concat();
                    assert_cut_of(&o, &most, &target);
                    assert!(
                        took < Duration::from_millis(900),
                        "case {n}: {target} after {took:?}"
                    );
                }
                healthy.finish();
                rig.assert_freed(port, 0);
            })
        })
        .collect();
    for (n, t) in threads.into_iter().enumerate() {
        t.join().unwrap_or_else(|_| {
            panic!(
                "case {n}: {:?}",
                String::from_utf8_lossy(&cases[n][..cases[n].len().min(40)])
            )
        });
    }
}

/// A reset (RST, `SO_LINGER` 0) mid-body: the response is cut at once, with only the bytes that
/// came before it.
#[test]
fn a_reset_mid_body_cuts_the_response() {
    let bad = Chaos::start(Act::ResetMidBody);
    let rig = rig(&bad, &[]);
    let healthy = HealthyLoop::start(rig.addr());
    for (target, o, took) in concurrent_gets(&rig, 0..3) {
        assert_cut(&o, &target);
        assert!(
            took < Duration::from_millis(900),
            "{target}: cut after {took:?}"
        );
    }
    healthy.finish();
    rig.assert_freed(bad.port(), 0);
}

/// Two `100 Continue` before the response: the client gets the one final response, its own,
/// for a GET, a POST and a POST that asked `Expect: 100-continue` (which gets the proxy's own
/// `100 Continue` first, once), five times on one kept-alive connection; the upstream
/// connection goes back to the pool and is reused.
#[test]
fn two_100_continues_are_dropped_and_the_final_response_relayed() {
    let bad = Chaos::start(Act::TwoContinues);
    let rig = rig(&bad, &[]);
    let healthy = HealthyLoop::start(rig.addr());
    let mut s = connect(rig.addr());
    let mut pending = Vec::new();
    for i in 0..5 {
        let target = format!("/bad/{i}");
        let request = match i % 3 {
            0 => format!("GET {target} HTTP/1.1\r\nHost: chaos.test\r\n\r\n"),
            1 => format!("POST {target} HTTP/1.1\r\nHost: chaos.test\r\nContent-Length: 5\r\n\r\nhello"),
            _ => format!(
                "POST {target} HTTP/1.1\r\nHost: chaos.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
            ),
        };
        s.write_all(request.as_bytes()).unwrap();
        if i % 3 == 2 {
            let interim = read_outcome(&mut s, &mut pending);
            assert_eq!(interim.status(), Some(100), "{target}: {interim:?}");
            s.write_all(b"hello").unwrap();
        }
        assert_answer(&read_outcome(&mut s, &mut pending), 200, &target);
        assert!(
            pending.is_empty(),
            "{target}: more after the response: {pending:?}"
        );
    }
    assert_eq!(
        bad.accepted(),
        1,
        "the connection was not reused after its 1xx"
    );
    drop(s);
    healthy.finish();
    rig.assert_freed(bad.port(), 1);
}

/// `100 Continue` without end, as fast as the socket takes it: 504 once the first-byte timeout
/// has passed (1xx responses are not the response), and the worker (there is one) keeps
/// answering the healthy route meanwhile, each request well within a second.
#[test]
fn an_endless_stream_of_100_continues_is_504_and_starves_no_one() {
    let bad = Chaos::start(Act::InterimFlood);
    let rig = rig(&bad, &[]);
    let healthy = HealthyLoop::start(rig.addr());
    thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    let o = get(rig.addr(), "/bad/flood");
    let took = start.elapsed();
    assert_answer(&o, 504, "/bad/flood");
    assert!(took < Duration::from_secs(3), "504 after {took:?}");
    let report = healthy.finish();
    eprintln!(
        "1xx flood: 504 after {took:?}; {} healthy requests meanwhile, the slowest {:?}",
        report.ok, report.slowest
    );
    assert!(
        report.slowest < STARVED,
        "a healthy request waited {:?} behind the flood",
        report.slowest
    );
    rig.assert_freed(bad.port(), 0);
}

/// A body without end, as fast as the socket takes it, to a client that reads as fast: the
/// relay shares the worker — healthy requests meanwhile answer well within a second.
#[test]
fn an_endless_fast_body_starves_no_one() {
    let bad = Chaos::start(Act::FloodBody);
    let rig = rig(&bad, &[]);
    let addr = rig.addr();
    let reader = thread::spawn(move || {
        let mut s = connect(addr);
        write!(s, "GET /bad/flood HTTP/1.1\r\nHost: chaos.test\r\n\r\n").unwrap();
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1500) {
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n as u64,
            }
        }
        total
    });
    thread::sleep(Duration::from_millis(100));
    let healthy = HealthyLoop::start(rig.addr());
    thread::sleep(Duration::from_millis(1000));
    let report = healthy.finish();
    let relayed = reader.join().unwrap();
    eprintln!(
        "fast body: {relayed} bytes relayed; {} healthy requests meanwhile, the slowest {:?}",
        report.ok, report.slowest
    );
    assert!(relayed > 1 << 20, "only {relayed} bytes relayed");
    assert!(
        report.slowest < STARVED,
        "a healthy request waited {:?} behind the flood ({} answered, {relayed} bytes relayed)",
        report.slowest,
        report.ok
    );
    rig.assert_freed(bad.port(), 0);
}

/// A large body sent as fast as the socket takes it crosses byte-exact through the relay's
/// turns (it yields the worker every 512 KiB and reads on at the next turn), to an HTTP/1.1
/// client that reads as fast, to one that reads slowly (the relay pauses and resumes), and to
/// an HTTP/2 client.
#[test]
fn a_large_fast_body_crosses_whole_through_the_relay_turns() {
    const LEN: usize = 48 << 20;
    let bad = Chaos::start(Act::BigBody(LEN));
    let rig = rig(&bad, &["--h2c"]);
    let want = pattern(0, LEN);
    for slow in [false, true] {
        let mut s = connect(rig.addr());
        write!(s, "GET /bad/big HTTP/1.1\r\nHost: chaos.test\r\n\r\n").unwrap();
        if slow {
            // The proxy's backlog for this client fills: its relay pauses, then resumes.
            thread::sleep(Duration::from_millis(300));
        }
        match read_outcome(&mut s, &mut Vec::new()) {
            Outcome::Complete {
                status: 200, body, ..
            } => assert!(
                body == want,
                "slow {slow}: {} bytes, not the pattern",
                body.len()
            ),
            other => panic!("slow {slow}: {:?}", other.status()),
        }
    }
    let out = support::curl(&[
        "--http2-prior-knowledge",
        "-o",
        "-",
        &format!("http://{}/bad/big", rig.addr()),
    ]);
    assert!(
        out.status.success() && out.stdout == want,
        "HTTP/2: {:?}, {} bytes",
        out.status,
        out.stdout.len()
    );
    rig.assert_freed(bad.port(), 2);
}

/// A head of 1 MiB (1024 fields of 1 KiB): 502, none of its fields relayed.
#[test]
fn a_head_of_one_mebibyte_is_502() {
    let bad = Chaos::start(Act::HugeHead);
    let rig = rig(&bad, &[]);
    let healthy = HealthyLoop::start(rig.addr());
    for (target, o, _) in concurrent_gets(&rig, 0..3) {
        assert_answer(&o, 502, &target);
        if let Outcome::Complete { head, .. } = &o {
            assert!(!head.contains("X-Filler"), "{target}: {head}");
        }
    }
    healthy.finish();
    rig.assert_freed(bad.port(), 0);
}

/// An upstream that closes every keep-alive connection after one response (at once, or 1 or 3
/// ms later, so that the proxy's reuse of its pooled connection races the close): four clients
/// with 25 requests each on kept-alive connections, GETs and POSTs interleaved. Every GET gets
/// its own answer (a pooled connection found closed is retried on a new one); a POST gets its
/// own answer or a clean 502 (a request whose body went is never sent twice).
#[test]
fn closing_after_every_response_races_the_pool_and_loses_no_get() {
    for delay_ms in [0, 1, 3] {
        let bad = Chaos::start(Act::CloseAfterOne(delay_ms));
        let rig = rig(&bad, &[]);
        let healthy = HealthyLoop::start(rig.addr());
        let addr = rig.addr();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                thread::spawn(move || {
                    let mut s = connect(addr);
                    let mut pending = Vec::new();
                    let mut post_502 = 0;
                    for i in 0..25 {
                        let target = format!("/bad/{t}/{i}");
                        let post = i % 5 == 4;
                        if post {
                            write!(s, "POST {target} HTTP/1.1\r\nHost: chaos.test\r\nContent-Length: 2\r\n\r\nhi").unwrap();
                        } else {
                            write!(s, "GET {target} HTTP/1.1\r\nHost: chaos.test\r\n\r\n").unwrap();
                        }
                        let o = read_outcome(&mut s, &mut pending);
                        if post && o.status() == Some(502) {
                            assert_answer(&o, 502, &target);
                            post_502 += 1;
                        } else {
                            assert_answer(&o, 200, &target);
                        }
                    }
                    post_502
                })
            })
            .collect();
        let post_502: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        eprintln!("close after {delay_ms} ms: {post_502} of 20 POSTs answered 502");
        healthy.finish();
        rig.assert_freed(bad.port(), 0);
    }
}

/// A server up and down every 100 ms (its listener and connections closed, as a restart does):
/// alone in its group, each request gets its own answer or a clean 502, quickly; in a group
/// with a steady server, every GET gets its own answer (a failure is retried on the other). A
/// `lowlat load` on the healthy route meanwhile sees no error; once the server is gone for
/// good, the proxy holds nothing of it.
#[test]
fn a_flapping_server_gives_clean_answers_and_a_steady_one_takes_over() {
    let flapper = Flapper::start(Duration::from_millis(100));
    let steady = Chaos::start(Act::Echo);
    let both = format!("/both/={},{}", flapper.url(), steady.url());
    let rig = Rig::start(
        &flapper.url(),
        &flags(&["--proxy", &both, "--proxy-fail-timeout", "200ms"]),
    );
    let load = Command::new(BIN)
        .args(["load", "-c", "4", "-d", "2s"])
        .arg(format!("http://{}/ok/load", rig.addr()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = rig.addr();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            thread::spawn(move || {
                let (mut answered, mut refused) = (0, 0);
                let start = Instant::now();
                let mut i = 0;
                while start.elapsed() < Duration::from_millis(1500) {
                    i += 1;
                    let prefix = if t % 2 == 0 { "bad" } else { "both" };
                    let target = format!("/{prefix}/{t}/{i}");
                    let begun = Instant::now();
                    let o = get(addr, &target);
                    let took = begun.elapsed();
                    assert!(took < Duration::from_millis(1500), "{target}: {took:?}");
                    if prefix == "bad" && o.status() == Some(502) {
                        assert_answer(&o, 502, &target);
                        refused += 1;
                    } else {
                        assert_answer(&o, 200, &target);
                        answered += 1;
                    }
                    thread::sleep(Duration::from_millis(3));
                }
                (answered, refused)
            })
        })
        .collect();
    let counts: Vec<(usize, usize)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let out = load.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}");
    assert!(!report.contains("Socket errors"), "{report}");
    assert!(!report.contains("Non-2xx"), "{report}");
    assert!(flapper.cycles() >= 10, "only {} cycles", flapper.cycles());
    eprintln!("flapping: (answered, 502) per client {counts:?}");
    let port = flapper.port();
    drop(flapper);
    rig.assert_freed(port, 0);
    // The load's connections to the healthy server are back in its pool, none in an exchange.
    rig.assert_freed(rig.healthy.port(), 4);
}

/// One byte a second. A head so trickled is 504 once the first-byte timeout (1.5 s) has passed
/// — the whole head must come within it. A body so trickled (`/x\n`: the rule's URL replaces
/// the prefix, so that the body is three bytes) is relayed whole while each byte comes within
/// the read timeout (2 s), and cut after the first gap past it (500 ms).
#[test]
fn one_byte_a_second() {
    let head = Chaos::start(Act::TrickleHead(Duration::from_secs(1)));
    let body = Chaos::start(Act::TrickleBody(Duration::from_secs(1)));
    let slow_head = thread::spawn({
        let url = head.url();
        move || {
            let rig = Rig::start(&url, &flags(&["--proxy-first-byte-timeout", "1500ms"]));
            let healthy = HealthyLoop::start(rig.addr());
            let start = Instant::now();
            assert_answer(&get(rig.addr(), "/bad/h"), 504, "/bad/h");
            let took = start.elapsed();
            assert!(
                took >= Duration::from_millis(1400) && took < Duration::from_secs(4),
                "{took:?}"
            );
            healthy.finish();
            rig
        }
    });
    let slow_body = thread::spawn({
        let url = format!("{}/", body.url());
        move || {
            let rig = Rig::start(&url, &flags(&["--proxy-read-timeout", "2s"]));
            let healthy = HealthyLoop::start(rig.addr());
            let start = Instant::now();
            match get(rig.addr(), "/bad/x") {
                Outcome::Complete {
                    status: 200, body, ..
                } => assert_eq!(body, body_for("/x")),
                other => panic!("a slow body: {other:?}"),
            }
            let took = start.elapsed();
            assert!(took >= Duration::from_millis(1900), "{took:?}");
            healthy.finish();
            rig
        }
    });
    let rig = Rig::start(
        &format!("{}/", body.url()),
        &flags(&["--proxy-read-timeout", "500ms"]),
    );
    let start = Instant::now();
    let o = get(rig.addr(), "/bad/x");
    let took = start.elapsed();
    match &o {
        Outcome::Cut {
            status: 200, got, ..
        } => assert!(b"/x\n".starts_with(got) && got.len() < 3, "{o:?}"),
        other => panic!("a body past the read timeout: {other:?}"),
    }
    assert!(took < Duration::from_secs(3), "{took:?}");
    rig.assert_freed(body.port(), 0);
    let rig = slow_head.join().unwrap();
    rig.assert_freed(head.port(), 0);
    let rig = slow_body.join().unwrap();
    rig.assert_freed(body.port(), 1);
}

/// Over HTTP/2 (h2c), every misbehaving upstream gives the client's stream a clean end: a 502
/// or 504, or its own answer, or a reset stream (curl exit 92, or 18/56) after no more than a
/// prefix of its own body — and other streams go on.
#[test]
fn http2_clients_get_clean_answers_from_every_misbehaving_upstream() {
    // (act, what a whole answer may be)
    let cases: [(Act, &[u16]); 9] = [
        (Act::NeverAnswer, &[504]),
        (Act::HalfHead, &[502]),
        (Act::LongerBody, &[200]),
        (Act::ShorterBodyClose, &[]),
        (Act::BadChunk(b"zz\r\n"), &[]),
        (Act::ResetMidBody, &[]),
        (Act::TwoContinues, &[200]),
        (Act::HugeHead, &[502]),
        (Act::CloseAfterOne(0), &[200]),
    ];
    let bads: Vec<Chaos> = cases.iter().map(|(a, _)| Chaos::start(*a)).collect();
    // The never-answering stream's 504 comes after 3 s: the healthy streams beside it must be
    // answered long before.
    let mut args = flags(&["--proxy-first-byte-timeout", "3s"]);
    args.push("--h2c".to_owned());
    for (n, bad) in bads.iter().enumerate() {
        args.push("--proxy".to_owned());
        args.push(format!("/c{n}/={}", bad.url()));
    }
    let ok = Chaos::start(Act::Echo);
    args.push("--proxy".to_owned());
    args.push(format!("/ok/={}", ok.url()));
    let proxy = support::Served::start(args);
    let addr = proxy.addr;
    let threads: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(n, &(act, whole))| {
            thread::spawn(move || {
                for i in 0..2 {
                    let target = format!("/c{n}/{i}");
                    let out = curl(&[
                        "--http2-prior-knowledge",
                        "--max-time",
                        "10",
                        "-o",
                        "-",
                        "-w",
                        "\n%{http_code}",
                        &format!("http://{addr}{target}"),
                    ]);
                    let text = String::from_utf8_lossy(&out.stdout).into_owned();
                    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
                    let code: u16 = code.parse().unwrap_or(0);
                    let want = String::from_utf8(body_for(&target)).unwrap();
                    match out.status.code() {
                        Some(0) => {
                            assert!(whole.contains(&code), "{act:?}: whole {code}: {text:?}");
                            if code == 200 {
                                assert_eq!(body, want, "{act:?}: another body");
                            }
                        }
                        Some(92 | 18 | 56) => assert!(
                            want.starts_with(body),
                            "{act:?}: reset after other bytes: {text:?}"
                        ),
                        other => panic!(
                            "{act:?}: curl exit {other:?}: {text:?} {}",
                            String::from_utf8_lossy(&out.stderr)
                        ),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let out = curl(&[
        "--http2-prior-knowledge",
        "-o",
        "-",
        &format!("http://{addr}/ok/after"),
    ]);
    assert_eq!(out.stdout, body_for("/ok/after"));
    // Every case and five healthy requests as streams of one connection: the healthy ones are
    // answered whole, none waiting for the never-answering stream's 504.
    let mut uris: Vec<String> = (0..cases.len())
        .map(|n| format!("http://{addr}/c{n}/multiplexed"))
        .collect();
    uris.extend((0..5).map(|i| format!("http://{addr}/ok/multiplexed/{i}")));
    let out = Command::new("nghttp")
        .args(["-n", "-s", "-t", "10"])
        .args(&uris)
        .output()
        .expect("run nghttp (scripts/test-deps.sh installs it)");
    let stats = String::from_utf8_lossy(&out.stdout);
    for i in 0..5 {
        let path = format!("/ok/multiplexed/{i}");
        let size = body_for(&path).len().to_string();
        // id responseEnd requestStart process code size path
        let line = stats
            .lines()
            .find(|l| l.ends_with(&format!(" {path}")))
            .unwrap_or_else(|| panic!("{path} not answered: {stats}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((cols[4], cols[5]), ("200", size.as_str()), "{line}");
        let took = nghttp_duration(cols[3]);
        assert!(took < STARVED, "{path} took {took:?}: {stats}");
    }
}

/// A duration as nghttp's statistics print it: `812us`, `2.26ms`, `1.02s`.
fn nghttp_duration(text: &str) -> Duration {
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else {
        panic!("not an nghttp duration: {text}")
    };
    Duration::from_secs_f64(number.parse::<f64>().unwrap() * scale)
}
