//! A `Range` request answered from a stored complete response (RFC 9110 §14; RFC 9111 §3.4 lets
//! a cache answer one from what it holds): one satisfiable byte range is a 206 with that slice
//! of the stored body, none at all a 416. Several ranges, a `Range` that does not parse, an
//! `If-Range` that does not hold, or a stored response that refuses ranges
//! (`Accept-Ranges: none`) get the whole response, as the file handler answers
//! (`files::range`). A partial response from the upstream is not stored (`storable`), so only
//! complete ones are here.

use lowlat_http::cache::first;
use lowlat_http::request::{Method, Request};

use super::object::Object;
use crate::files::conditional::{if_range_holds, Validators};
use crate::files::range::{evaluate, RangeOutcome};
use crate::handler::Response;

/// Answers `head`'s `Range` from `o` when it asks for a part of it: `lines` holds the head lines
/// the cache adds (`Age`, `Cache-Status`), `Content-Range` is added to them. `false`: nothing
/// was sent, the whole response is the answer.
pub(super) fn send_range(
    head: &Request<'_, '_>,
    o: &Object,
    lines: &mut Vec<u8>,
    res: &mut Response<'_>,
) -> bool {
    let Some(range) = head.header("range") else {
        return false;
    };
    if head.method != Method::Get || o.status != 200 {
        return false;
    }
    if first(o, "accept-ranges").is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"none")) {
        return false;
    }
    if let Some(field) = head.header("if-range") {
        if !if_range_applies(field, o) {
            return false;
        }
    }
    let len = o.body().len() as u64;
    let mut num = itoa::Buffer::new();
    match evaluate(range, len) {
        RangeOutcome::Full => false,
        RangeOutcome::Partial { start, end } => {
            lines.extend_from_slice(b"Content-Range: bytes ");
            lines.extend_from_slice(num.format(start).as_bytes());
            lines.push(b'-');
            lines.extend_from_slice(num.format(end).as_bytes());
            lines.push(b'/');
            lines.extend_from_slice(num.format(len).as_bytes());
            lines.extend_from_slice(b"\r\n");
            // `evaluate` keeps start <= end < len, and the body is in memory.
            let (start, end) = (start as usize, end as usize);
            res.send_stored(
                206,
                "Partial Content",
                o.lines.bytes(),
                lines,
                &o.body()[start..=end],
            );
            true
        }
        RangeOutcome::Unsatisfiable => {
            // Only the length: the stored fields describe a representation not sent.
            lines.extend_from_slice(b"Content-Range: bytes */");
            lines.extend_from_slice(num.format(len).as_bytes());
            lines.extend_from_slice(b"\r\n");
            res.send_stored(416, "Range Not Satisfiable", b"", lines, b"");
            true
        }
    }
}

/// Whether `If-Range` lets the range apply to the stored response (RFC 9110 §13.1.5): a strong
/// entity-tag equal to its own (a weak one, on either side, never holds), or a date equal to
/// its `Last-Modified`.
fn if_range_applies(field: &[u8], o: &Object) -> bool {
    let etag = first(o, "etag").map_or(&b""[..], <[u8]>::trim_ascii);
    let last_modified = first(o, "last-modified").map_or(&b"\0"[..], <[u8]>::trim_ascii);
    let v = Validators {
        // A weak stored tag matches nothing (`if_range_holds` compares tags as bytes).
        etag: if etag.starts_with(b"W/") { b"\0" } else { etag },
        last_modified,
        mtime_secs: lowlat_http::cache::parse_date(last_modified).unwrap_or(u64::MAX),
    };
    if_range_holds(field, &v)
}
