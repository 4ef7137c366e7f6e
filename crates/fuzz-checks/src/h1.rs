//! HTTP/1.1 on the wire: request heads as the server parses them, response heads and bodies as
//! the proxy and the load generator read them, and chunked bodies.

use lowlat_http::body::ChunkedDecoder;
use lowlat_http::client::{self, ResponseReader, Step};
use lowlat_http::request::{header_slots, parse_request, HeadLimits, Request};
use lowlat_http::{Status, Version};

/// The request parser on any bytes: a complete head claims no more than it was given and stays
/// within the limits, a head cut one byte short is never complete, and the head written out
/// again (canonical line endings and spacing) parses to the same request.
pub fn request(data: &[u8]) {
    let limits = HeadLimits::default();
    let mut slots = header_slots();
    let Ok(Status::Complete(req)) = parse_request(data, &mut slots, &limits) else {
        return;
    };
    assert!(req.head_len <= data.len() && req.head_len <= limits.max_head_bytes);
    assert!(req.headers.len() <= limits.max_headers);
    assert!(req.target.len() <= limits.max_uri_bytes);
    let mut cut_slots = header_slots();
    let cut = parse_request(&data[..req.head_len - 1], &mut cut_slots, &limits);
    assert!(!matches!(cut, Ok(Status::Complete(_))), "a cut head parsed");

    let again = write_request(&req);
    // The canonical form may be longer (CRLF for LF, a space after each colon).
    let relaxed = HeadLimits {
        max_head_bytes: usize::MAX,
        ..limits
    };
    let mut again_slots = header_slots();
    let Ok(Status::Complete(re)) = parse_request(&again, &mut again_slots, &relaxed) else {
        panic!("the request written out again does not parse: {again:?}");
    };
    assert_eq!(re.head_len, again.len());
    assert_eq!(
        (re.method, re.method_token, re.target, re.path, re.query),
        (
            req.method,
            req.method_token,
            req.target,
            req.path,
            req.query
        )
    );
    assert_eq!(re.version, req.version);
    assert_eq!(re.framing, req.framing);
    assert_eq!(
        (re.keep_alive, re.expect_continue),
        (req.keep_alive, req.expect_continue)
    );
    let fields = |r: &Request<'_, '_>| -> Vec<(String, Vec<u8>)> {
        r.headers
            .iter()
            .map(|h| (h.name.to_owned(), h.value.to_vec()))
            .collect()
    };
    assert_eq!(fields(&re), fields(&req));
}

fn write_request(req: &Request<'_, '_>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(req.method_token.as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.target.as_bytes());
    out.extend_from_slice(match req.version {
        Version::Http10 => b" HTTP/1.0\r\n",
        _ => b" HTTP/1.1\r\n",
    });
    for h in req.headers {
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Response heads and bodies on any bytes (the first byte chooses a piece size and whether the
/// request was HEAD): a parsed head written out again parses to the same head and fields, and a
/// connection's responses read whole or in pieces give the same responses and the same verdict.
pub fn response(data: &[u8]) {
    let Some((&control, data)) = data.split_first() else {
        return;
    };
    let was_head = control & 0x80 != 0;
    let piece = usize::from(control & 0x7f) + 1;
    let mut slots = [const { std::mem::MaybeUninit::uninit() }; lowlat_http::limits::MAX_HEADERS];
    if let Ok(Status::Complete(parsed)) = client::parse_response(data, was_head, &mut slots) {
        assert!(parsed.head.head_len <= data.len());
        let mut again = Vec::new();
        again.extend_from_slice(match parsed.head.version {
            Version::Http10 => b"HTTP/1.0 ",
            _ => b"HTTP/1.1 ",
        });
        again.extend_from_slice(parsed.head.status.to_string().as_bytes());
        again.push(b' ');
        again.extend_from_slice(parsed.reason.as_bytes());
        again.extend_from_slice(b"\r\n");
        for h in parsed.fields {
            again.extend_from_slice(h.name.as_bytes());
            again.extend_from_slice(b": ");
            again.extend_from_slice(h.value);
            again.extend_from_slice(b"\r\n");
        }
        again.extend_from_slice(b"\r\n");
        // Within the limit before, within it after unless the canonical form grew past it.
        if again.len() <= lowlat_http::limits::MAX_HEAD_BYTES {
            let mut again_slots =
                [const { std::mem::MaybeUninit::uninit() }; lowlat_http::limits::MAX_HEADERS];
            let Ok(Status::Complete(re)) =
                client::parse_response(&again, was_head, &mut again_slots)
            else {
                panic!("the response head written out again does not parse: {again:?}");
            };
            let head = |h: client::ResponseHead| (h.version, h.status, h.body, h.keep_alive);
            assert_eq!(head(re.head), head(parsed.head));
            assert_eq!(re.reason, parsed.reason);
            assert_eq!(re.fields.len(), parsed.fields.len());
            for (a, b) in re.fields.iter().zip(parsed.fields) {
                assert_eq!((a.name, a.value), (b.name, b.value));
            }
        }
    }
    // The same responses, and an error in both or neither (which error may differ: a head cut
    // by a read can pass the size limit before its bad byte is reached).
    let (whole, whole_end) = read_responses(data, data.len().max(1), was_head);
    let (pieces, pieces_end) = read_responses(data, piece, was_head);
    assert_eq!(whole, pieces);
    assert_eq!(whole_end.is_ok(), pieces_end.is_ok());
}

type Responses = (Vec<client::Response>, Result<(), client::ResponseError>);

/// Feeds `input` to a reader in pieces of `piece` bytes as a connection would (keeping an
/// incomplete head for the next read), then ends the connection.
fn read_responses(input: &[u8], piece: usize, was_head: bool) -> Responses {
    let mut reader = ResponseReader::new();
    let mut out = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    for chunk in input.chunks(piece) {
        pending.extend_from_slice(chunk);
        let mut i = 0;
        while i < pending.len() {
            match reader.read(&pending[i..], was_head) {
                Err(e) => return (out, Err(e)),
                Ok(Step::NeedMore { consumed }) => {
                    assert!(consumed <= pending.len() - i);
                    i += consumed;
                    break;
                }
                Ok(Step::Complete { consumed, response }) => {
                    assert!(consumed <= pending.len() - i);
                    i += consumed;
                    out.push(response);
                }
            }
        }
        pending.drain(..i);
        if !reader.wants_head() {
            assert!(pending.is_empty(), "body bytes left unconsumed");
        }
    }
    match reader.eof(pending.len()) {
        Ok(Some(r)) => out.push(r),
        Ok(None) => {}
        Err(e) => return (out, Err(e)),
    }
    (out, Ok(()))
}

/// The chunked decoder's limit in these checks.
const MAX_BODY: u64 = 4096;

/// The chunked decoder on any bytes, whole and split where the first byte says: never more than
/// the limit, the same body and verdict however split. Then the input taken as a body, encoded
/// in chunks of sizes the input chooses (with extensions and trailers), decodes to itself.
pub fn chunked(data: &[u8]) {
    let split = data.first().map_or(0, |&b| usize::from(b)) % (data.len() + 1);
    let mut whole = Vec::new();
    let a = ChunkedDecoder::new(MAX_BODY).decode(data, |d| whole.extend_from_slice(d));
    let mut parts = Vec::new();
    let mut dec = ChunkedDecoder::new(MAX_BODY);
    let first = dec.decode(&data[..split], |d| parts.extend_from_slice(d));
    if let (Ok(a), Ok(f)) = (&a, &first) {
        assert!(whole.len() as u64 <= MAX_BODY);
        assert!(a.consumed <= data.len());
        if !f.done && f.consumed == split {
            if let Ok(b) = dec.decode(&data[split..], |d| parts.extend_from_slice(d)) {
                assert_eq!(a.done, b.done);
                assert_eq!(whole, parts);
            }
        }
    }

    let encoded = encode_chunked(data);
    let mut body = Vec::new();
    let mut dec = ChunkedDecoder::new(u64::MAX).keep_trailers();
    let d = dec
        .decode(&encoded, |d| body.extend_from_slice(d))
        .expect("an encoded body decodes");
    assert!(d.done && d.consumed == encoded.len());
    assert_eq!(body, data);
    assert_eq!(dec.decoded_len(), data.len() as u64);
}

/// `body` in chunks whose sizes come from its own bytes, every third with an extension, and a
/// trailer field.
fn encode_chunked(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    let mut n = 0;
    while !rest.is_empty() {
        let size = (usize::from(rest[0]) % 37 + 1).min(rest.len());
        out.extend_from_slice(format!("{size:x}").as_bytes());
        if n % 3 == 2 {
            out.extend_from_slice(b";ext=\"v\"");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&rest[..size]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[size..];
        n += 1;
    }
    out.extend_from_slice(b"0\r\nx-trailer: t\r\n\r\n");
    out
}
