//! The codec's HTTP/2 client state machine (`lowlat_http::h2::client`) against real servers
//! over real sockets: `lowlat serve --h2c` (many requests multiplexed within the server's
//! stream limit) and grpcio (unary gRPC calls: the reply's trailers, an error status, request
//! metadata). The proxy's HTTP/2 upstreams are to be built on this machine, so it is held to
//! what strict peers accept.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use lowlat_http::h2::client::{ClientConn, Event, OpenError, MIN_READ_BUFFER};

mod support;
use support::upstream::Upstream;
use support::BIN;

/// A request: its head fields (pseudo-fields first) and body.
type Request = (Vec<(Vec<u8>, Vec<u8>)>, Vec<u8>);

/// A response as collected: status, head fields, body, trailer fields.
#[derive(Debug, Default, Clone)]
struct Response {
    status: u16,
    head: Vec<(String, String)>,
    body: Vec<u8>,
    trailers: Vec<(String, String)>,
}

fn owned(fields: lowlat_http::h2::client::Fields<'_>) -> Vec<(String, String)> {
    fields
        .iter()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect()
}

/// Sends `requests` over one connection, as many at once as the server allows, and returns
/// the responses in request order, with the most streams that were open at once.
fn run(addr: SocketAddr, requests: &[Request]) -> (Vec<Response>, usize) {
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut c = ClientConn::new();
    let mut queue: VecDeque<usize> = (0..requests.len()).collect();
    let mut stream_of: HashMap<u32, usize> = HashMap::new();
    let mut out: Vec<Option<Response>> = vec![None; requests.len()];
    let mut partial: HashMap<u32, Response> = HashMap::new();
    let mut most = 0;
    let mut buf = vec![0u8; MIN_READ_BUFFER * 2];
    let mut len = 0;
    while out.iter().any(Option::is_none) {
        while let Some(&i) = queue.front() {
            let (head, body) = &requests[i];
            match c.open(
                head.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
                body,
                &[],
            ) {
                Ok(id) => {
                    queue.pop_front();
                    stream_of.insert(id, i);
                }
                Err(OpenError::Full) => break,
                Err(OpenError::Closing) => panic!("the server is closing"),
            }
        }
        most = most.max(c.in_flight());
        sock.write_all(&c.out).unwrap();
        c.out.clear();
        let n = sock.read(&mut buf[len..]).unwrap();
        assert!(n > 0, "the server closed the connection");
        len += n;
        let mut done = Vec::new();
        let mut released = Vec::new();
        let used = c
            .receive(&buf[..len], |e| match e {
                Event::Head {
                    stream,
                    status,
                    fields,
                    end_stream,
                } => {
                    let r = partial.entry(stream).or_default();
                    r.status = status;
                    r.head = owned(fields);
                    if end_stream {
                        done.push(stream);
                    }
                }
                Event::Data {
                    stream,
                    data,
                    end_stream,
                } => {
                    partial
                        .entry(stream)
                        .or_default()
                        .body
                        .extend_from_slice(data);
                    released.push((stream, data.len()));
                    if end_stream {
                        done.push(stream);
                    }
                }
                Event::Trailers { stream, fields } => {
                    partial.entry(stream).or_default().trailers = owned(fields);
                    done.push(stream);
                }
                Event::Reset { stream, code } => panic!("stream {stream} reset ({code})"),
                Event::GoAway { .. } => {}
            })
            .unwrap();
        buf.copy_within(used..len, 0);
        len -= used;
        for (stream, n) in released {
            c.release(stream, n);
        }
        for stream in done {
            out[stream_of[&stream]] = partial.remove(&stream);
        }
    }
    (out.into_iter().map(Option::unwrap).collect(), most)
}

fn get(path: &str) -> Request {
    (
        vec![
            (b":method".to_vec(), b"GET".to_vec()),
            (b":scheme".to_vec(), b"http".to_vec()),
            (b":path".to_vec(), path.as_bytes().to_vec()),
            (b":authority".to_vec(), b"localhost".to_vec()),
        ],
        Vec::new(),
    )
}

/// Two hundred requests over one connection to `lowlat serve --h2c`: all answered, several at
/// once but never more than the server's SETTINGS_MAX_CONCURRENT_STREAMS.
#[test]
fn many_requests_are_multiplexed_within_the_servers_limit() {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--workers",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--h2c",
        "--h2-max-streams",
        "8",
    ]);
    let (mut child, _stderr, banner) = support::spawn_serve(cmd);
    let addr = support::address(&banner, "http://");
    let requests: Vec<Request> = (0..200).map(|_| get("/plaintext")).collect();
    let (responses, most) = run(addr, &requests);
    let _ = child.kill();
    let _ = child.wait();
    for r in &responses {
        assert_eq!((r.status, r.body.as_slice()), (200, &b"Hello, World!"[..]));
    }
    assert!((2..=8).contains(&most), "{most} streams at once");
}

/// A gRPC message: the 5-byte prefix (not compressed, length) and the protobuf bytes.
fn grpc_message(proto: &[u8]) -> Vec<u8> {
    let mut m = vec![0];
    m.extend_from_slice(&u32::try_from(proto.len()).unwrap().to_be_bytes());
    m.extend_from_slice(proto);
    m
}

/// A unary call of lowlat.test.Echo with `proto` (an encoded EchoRequest).
fn unary(proto: &[u8]) -> Request {
    (
        vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":scheme".to_vec(), b"http".to_vec()),
            (b":path".to_vec(), b"/lowlat.test.Echo/Unary".to_vec()),
            (b":authority".to_vec(), b"localhost".to_vec()),
            (b"content-type".to_vec(), b"application/grpc".to_vec()),
            (b"te".to_vec(), b"trailers".to_vec()),
            (b"x-from-test".to_vec(), b"yes".to_vec()),
        ],
        grpc_message(proto),
    )
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// grpcio answers unary calls made by the state machine: the reply message in DATA, the status
/// and the server's trailing metadata in trailers; an error status (with its message) arrives
/// in the trailers too, or in a trailers-only response.
#[test]
fn grpcio_answers_unary_calls() {
    let upstream = Upstream::grpc();
    // EchoRequest { message: "hi" } and { message: "x", fail_code: 5, fail_message: "nope" }.
    let ok = unary(b"\x0a\x02hi");
    let failing = unary(b"\x0a\x01x\x20\x05\x2a\x04nope");
    let requests = vec![ok.clone(), failing, ok];
    let (responses, _) = run(upstream.addr(), &requests);
    for r in [&responses[0], &responses[2]] {
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(field(&r.head, "content-type"), Some("application/grpc"));
        assert_eq!(field(&r.head, "x-lowlat-initial"), Some("unary"));
        assert_eq!(field(&r.trailers, "grpc-status"), Some("0"), "{r:?}");
        assert_eq!(field(&r.trailers, "x-lowlat-trailer"), Some("unary"));
        // The reply: prefix, then EchoReply { message: "hi", metadata: {..., x-from-test: yes} }.
        assert_eq!(&r.body[..1], &[0]);
        assert_eq!(&r.body[5..9], b"\x0a\x02hi");
        let text = String::from_utf8_lossy(&r.body);
        assert!(
            text.contains("x-from-test") && text.contains("yes"),
            "{text:?}"
        );
    }
    let r = &responses[1];
    let status = field(&r.trailers, "grpc-status").or(field(&r.head, "grpc-status"));
    let message = field(&r.trailers, "grpc-message").or(field(&r.head, "grpc-message"));
    assert_eq!((status, message), (Some("5"), Some("nope")), "{r:?}");
}
