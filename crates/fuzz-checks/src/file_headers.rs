//! The `Range` and conditional request headers a static file is answered by (RFC 9110 §13,
//! §14.2), evaluated against a representation whose length and validators the input chooses.

use lowlat_server::files::conditional::{self, Outcome, Preconditions, Validators};
use lowlat_server::files::range::{self, RangeOutcome};

/// `Range` on any bytes, against a length from the input: a partial answer always lies inside
/// the representation, and nothing at all is satisfiable in an empty one.
pub fn range(data: &[u8]) {
    let Some((len_bytes, field)) = data.split_first_chunk::<8>() else {
        return;
    };
    // Small lengths most of the time, where the edges are.
    let raw = u64::from_le_bytes(*len_bytes);
    let len = if raw & 1 == 0 {
        (raw >> 1) % 4096
    } else {
        raw >> 1
    };
    match range::evaluate(field, len) {
        RangeOutcome::Partial { start, end } => {
            assert!(start <= end && end < len, "{start}-{end} of {len}");
        }
        RangeOutcome::Full | RangeOutcome::Unsatisfiable => {}
    }
}

/// The conditional fields on any bytes (cut at `0xff`: If-Match, If-Unmodified-Since,
/// If-None-Match, If-Modified-Since, If-Range): never a panic, `*` in If-Match never fails, an
/// If-None-Match naming the current tag is always 304, and If-Range holds for the exact current
/// validators.
pub fn conditional(data: &[u8]) {
    let mut parts = data.split(|&b| b == 0xff);
    let mut next = || parts.next().filter(|p| !p.is_empty());
    let pre = Preconditions {
        if_match: next(),
        if_unmodified_since: next(),
        if_none_match: next(),
        if_modified_since: next(),
    };
    let if_range = next();
    let mtime_secs = data
        .iter()
        .fold(0u64, |n, &b| n.wrapping_mul(31) ^ u64::from(b))
        % (1 << 34);
    let http_date =
        httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime_secs));
    let v = Validators {
        etag: b"\"5f-1a2b\"",
        last_modified: http_date.as_bytes(),
        mtime_secs,
    };
    let outcome = conditional::evaluate(&pre, &v);
    if let Some(field) = if_range {
        let _ = conditional::if_range_holds(field, &v);
    }
    if pre.if_match == Some(b"*") && pre.if_none_match.is_none() && pre.if_modified_since.is_none()
    {
        assert_eq!(outcome, Outcome::Proceed);
    }
    let tagged = Preconditions {
        if_none_match: Some(b"W/\"x\", \"5f-1a2b\""),
        ..Preconditions::default()
    };
    assert_eq!(conditional::evaluate(&tagged, &v), Outcome::NotModified);
    assert!(conditional::if_range_holds(v.etag, &v));
    assert!(conditional::if_range_holds(v.last_modified, &v));
}
