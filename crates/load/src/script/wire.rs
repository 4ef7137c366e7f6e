//! What a script's `request()` returned, checked before a byte of it is sent: one or more
//! complete HTTP/1.x requests back to back (the codec's strict request parser for each head, its
//! `Content-Length` or chunked framing for each body). Where each request ends is kept, so that
//! a counted run (`-n`) can send only part of a batch; for `--h2` the requests become HTTP/2
//! fields.
//!
//! A refusal names the reason and the line and column where parsing stopped, as wrk does
//! ("incomplete request at 1:21").

use lowlat_http::body::{BodyFraming, ChunkedDecoder};
use lowlat_http::head::is_connection_specific;
use lowlat_http::request::{header_slots, parse_request, HeadLimits};
use lowlat_http::{Status, Version};

/// One request as HTTP/2 fields (pseudo-fields first) and its body.
pub(crate) type H2Fields = (Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>);

/// Why bytes from `request()` are not requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WireError {
    pub reason: String,
    /// 1-based line and column of the byte where parsing stopped.
    pub line: usize,
    pub column: usize,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}:{}", self.reason, self.line, self.column)
    }
}

/// The requests found in one `request()` result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Requests {
    /// End offset of each request.
    pub ends: Vec<usize>,
    /// Whether each request is a `HEAD` (its response has no body).
    pub heads: Vec<bool>,
}

impl Requests {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether every request is a `HEAD` (`Some(true)`), none is (`Some(false)`), or they mix.
    pub fn all_head(&self) -> Option<bool> {
        let first = *self.heads.first()?;
        self.heads.iter().all(|&h| h == first).then_some(first)
    }
}

/// Splits `bytes` into complete requests, refusing anything else (nothing, a partial request,
/// a malformed head, a body shorter than declared).
pub(crate) fn split(bytes: &[u8], out: &mut Requests) -> Result<(), WireError> {
    out.ends.clear();
    out.heads.clear();
    let mut at = 0;
    while at < bytes.len() || out.ends.is_empty() {
        let (len, head) = one(&bytes[at..]).map_err(|(reason, stop)| {
            let stop = (at + stop).min(bytes.len());
            position(bytes, stop, reason)
        })?;
        at += len;
        out.ends.push(at);
        out.heads.push(head);
    }
    Ok(())
}

/// The length of the request at the start of `bytes` and whether it is a `HEAD`; or why not,
/// with the offset where parsing stopped.
fn one(bytes: &[u8]) -> Result<(usize, bool), (String, usize)> {
    let mut slots = header_slots();
    let req = match parse_request(bytes, &mut slots, &HeadLimits::default()) {
        Ok(Status::Complete(req)) => req,
        Ok(Status::Partial) => return Err(("incomplete request".into(), bytes.len())),
        Err(e) => return Err((e.to_string(), error_offset(bytes))),
    };
    let head = req.is_head();
    let start = req.head_len;
    match req.framing {
        BodyFraming::None => Ok((start, head)),
        BodyFraming::Length(n) => {
            let end = usize::try_from(n)
                .ok()
                .and_then(|n| start.checked_add(n))
                .filter(|&end| end <= bytes.len())
                .ok_or_else(|| {
                    (
                        format!("incomplete request (a body of {n} bytes declared)"),
                        bytes.len(),
                    )
                })?;
            Ok((end, head))
        }
        BodyFraming::Chunked => {
            let mut decoder = ChunkedDecoder::new(u64::MAX);
            let d = decoder
                .decode(&bytes[start..], |_| {})
                .map_err(|e| (e.to_string(), bytes.len()))?;
            if !d.done {
                return Err(("incomplete request (chunked body)".into(), bytes.len()));
            }
            Ok((start + d.consumed, head))
        }
    }
}

/// Where a malformed head stops making sense: the end of its first line that is not a valid
/// request line or field, as near as can be told without the parser's own position.
fn error_offset(bytes: &[u8]) -> usize {
    let head_end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(bytes.len(), |i| i + 4);
    let mut slots = header_slots();
    // The longest prefix of whole lines that still parses as the start of a request.
    let mut good = 0;
    for (i, _) in bytes[..head_end]
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
    {
        match parse_request(&bytes[..=i], &mut slots, &HeadLimits::default()) {
            Ok(Status::Partial) => good = i + 1,
            _ => break,
        }
    }
    good
}

fn position(bytes: &[u8], stop: usize, reason: String) -> WireError {
    let before = &bytes[..stop];
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let column = 1 + before.iter().rev().take_while(|&&b| b != b'\n').count();
    WireError {
        reason,
        line,
        column,
    }
}

/// The requests of `bytes` (already split into `reqs`) as HTTP/2 fields: `:method`, `:scheme`,
/// `:authority` (from `Host`), `:path` (the request-target), then the other fields in order,
/// names in lower case, without HTTP/1.1's connection-specific ones; chunked bodies decoded.
pub(crate) fn to_h2(bytes: &[u8], reqs: &Requests, scheme: &str, mut out: impl FnMut(H2Fields)) {
    let mut start = 0;
    for &end in &reqs.ends {
        out(one_h2(&bytes[start..end], scheme));
        start = end;
    }
}

fn one_h2(bytes: &[u8], scheme: &str) -> H2Fields {
    let mut slots = header_slots();
    // `split` accepted these bytes: they parse.
    let Ok(Status::Complete(req)) = parse_request(bytes, &mut slots, &HeadLimits::default()) else {
        return (Vec::new(), None);
    };
    let authority = req.header("host").unwrap_or_default();
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b":method".to_vec(), req.method_token.as_bytes().to_vec()),
        (b":scheme".to_vec(), scheme.as_bytes().to_vec()),
        (b":authority".to_vec(), authority.to_vec()),
        (b":path".to_vec(), req.target.as_bytes().to_vec()),
    ];
    for h in req.headers {
        let name = h.name.to_ascii_lowercase();
        // RFC 9113 §8.2.2: connection-specific fields are not sent; `TE` only as `trailers`.
        // `Host` is `:authority`.
        let te_other = name == "te" && !h.value.eq_ignore_ascii_case(b"trailers");
        if te_other || name == "host" || is_connection_specific(name.as_bytes()) {
            continue;
        }
        fields.push((name.into_bytes(), h.value.to_vec()));
    }
    let body = &bytes[req.head_len..];
    let body = match req.framing {
        BodyFraming::None => None,
        BodyFraming::Length(_) => Some(body.to_vec()),
        BodyFraming::Chunked => {
            let mut decoded = Vec::new();
            let _ = ChunkedDecoder::new(u64::MAX).decode(body, |d| decoded.extend_from_slice(d));
            fields.push((
                b"content-length".to_vec(),
                decoded.len().to_string().into_bytes(),
            ));
            Some(decoded)
        }
    };
    if req.version == Version::Http10 && authority.is_empty() {
        // An HTTP/1.0 request may lack Host; HTTP/2 needs an authority or none at all.
        fields.retain(|(n, _)| n != b":authority");
    }
    (fields, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(bytes: &[u8]) -> Vec<usize> {
        let mut r = Requests::default();
        split(bytes, &mut r).unwrap();
        r.ends
    }

    fn refused(bytes: &[u8]) -> String {
        let mut r = Requests::default();
        split(bytes, &mut r).unwrap_err().to_string()
    }

    /// Requests are counted and delimited, bodies included, every framing.
    #[test]
    fn splits_complete_requests() {
        let get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(ok(get), vec![get.len()]);
        let three = [&get[..], get, get].concat();
        assert_eq!(ok(&three), vec![27, 54, 81]);
        let post = b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(ok(post), vec![51, 78]);
        let chunked =
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(ok(chunked), vec![chunked.len()]);
        let old = b"GET / HTTP/1.0\r\n\r\n";
        assert_eq!(ok(old), vec![old.len()]);
    }

    /// Anything but complete requests is refused, with where it went wrong.
    #[test]
    fn refuses_what_is_not_a_request() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "incomplete request at 1:1"),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\n",
                "incomplete request at 3:1",
            ),
            (b"hello", "incomplete request at 1:6"),
            (
                b"GET / HTTP/1.1\r\nHost a\r\n\r\n",
                "malformed request at 2:1",
            ),
            (b"GET  HTTP/1.1\r\n\r\n", "malformed request at 1:1"),
            (b"GET / HTTP/1.1\r\n\r\n", "missing or repeated Host at 2:1"),
            (
                b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\nabc",
                "incomplete request (a body of 9 bytes declared) at 5:4",
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /",
                "incomplete request at 4:6",
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                refused(bytes),
                *want,
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn heads_are_noted() {
        let mut r = Requests::default();
        split(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", &mut r).unwrap();
        assert_eq!(r.all_head(), Some(true));
        split(
            b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            &mut r,
        )
        .unwrap();
        assert_eq!(r.all_head(), None);
    }

    /// HTTP/1.1 requests become HTTP/2 fields: pseudo-fields from the request line and Host,
    /// the connection's own fields dropped, a chunked body decoded.
    #[test]
    fn maps_to_h2_fields() {
        let bytes = b"POST /x?y HTTP/1.1\r\nHost: h:1\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\nX-A: 1\r\nTE: trailers\r\nUpgrade: h2c\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";
        let mut r = Requests::default();
        split(bytes, &mut r).unwrap();
        let mut out = Vec::new();
        to_h2(bytes, &r, "https", |f| out.push(f));
        let f: Vec<(String, String)> = out[0]
            .0
            .iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect();
        let want = [
            (":method", "POST"),
            (":scheme", "https"),
            (":authority", "h:1"),
            (":path", "/x?y"),
            ("x-a", "1"),
            ("te", "trailers"),
            ("content-length", "2"),
        ];
        assert_eq!(
            f,
            want.iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect::<Vec<_>>()
        );
        assert_eq!(out[0].1.as_deref(), Some(&b"hi"[..]));
    }
}
