//! The `Range` request header (RFC 9110 §14.2): which part of a representation to send.
//!
//! One satisfiable range gives a 206. Several ranges are answered with the whole representation
//! (200): RFC 9110 §14.2 lets a server ignore Range, nginx does the same for overlapping
//! ranges, and a multipart body would cost more than the bytes it saves for the small files
//! this server keeps in memory. A header that does not parse, or uses another unit, is ignored
//! (§14.2: "MAY ignore"). When no range is satisfiable: 416 (§15.5.17).

/// What a Range header asks of a representation of `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOutcome {
    /// Send everything (no usable Range, or several ranges).
    Full,
    /// Send bytes `start..=end` with 206.
    Partial { start: u64, end: u64 },
    /// 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// Evaluates a `Range` header value against a representation of `len` bytes.
#[must_use]
pub fn evaluate(field: &[u8], len: u64) -> RangeOutcome {
    let field = field.trim_ascii();
    let Some(unit) = field.get(..6) else {
        return RangeOutcome::Full;
    };
    if !unit.eq_ignore_ascii_case(b"bytes=") {
        return RangeOutcome::Full;
    }
    let mut specs = 0u32;
    let mut satisfiable = None;
    let mut satisfiable_count = 0u32;
    for spec in field[6..].split(|&b| b == b',') {
        let spec = spec.trim_ascii();
        if spec.is_empty() {
            continue;
        }
        let Some(dash) = spec.iter().position(|&b| b == b'-') else {
            return RangeOutcome::Full;
        };
        let (first, last) = (&spec[..dash], &spec[dash + 1..]);
        specs += 1;
        let range = match (number(first), number(last)) {
            // `a-b`
            (Some(a), Some(b)) => {
                if b < a {
                    return RangeOutcome::Full;
                }
                (a < len).then(|| (a, b.min(len - 1)))
            }
            // `a-`
            (Some(a), None) if last.is_empty() => (a < len).then(|| (a, len - 1)),
            // `-n`: the last n bytes
            (None, Some(n)) if first.is_empty() => {
                (n > 0 && len > 0).then(|| (len.saturating_sub(n), len - 1))
            }
            _ => return RangeOutcome::Full,
        };
        if let Some(r) = range {
            satisfiable_count += 1;
            satisfiable = Some(r);
        }
    }
    match (specs, satisfiable_count, satisfiable) {
        (0, _, _) => RangeOutcome::Full,
        (_, 0, _) => RangeOutcome::Unsatisfiable,
        (1, 1, Some((start, end))) => RangeOutcome::Partial { start, end },
        _ => RangeOutcome::Full,
    }
}

/// Decimal digits as a number, saturating (a position past u64 is past any file's end);
/// `None` when empty or not all digits.
fn number(text: &[u8]) -> Option<u64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeOutcome::{Full, Partial, Unsatisfiable};

    #[test]
    fn cases() {
        let p = |start, end| Partial { start, end };
        for (field, len, want) in [
            ("bytes=0-9", 100, p(0, 9)),
            ("bytes=10-", 100, p(10, 99)),
            ("bytes=-10", 100, p(90, 99)),
            ("bytes=-1000", 100, p(0, 99)),
            ("bytes=90-1000", 100, p(90, 99)),
            ("bytes=99-99", 100, p(99, 99)),
            ("BYTES = 0-0", 100, Full),
            ("Bytes=0-0", 100, p(0, 0)),
            ("bytes= 5-6 ", 100, p(5, 6)),
            ("bytes=5-6,", 100, p(5, 6)),
            ("bytes=100-", 100, Unsatisfiable),
            ("bytes=100-200", 100, Unsatisfiable),
            ("bytes=-0", 100, Unsatisfiable),
            ("bytes=0-", 0, Unsatisfiable),
            ("bytes=-5", 0, Unsatisfiable),
            ("bytes=99999999999999999999999-", 100, Unsatisfiable),
            ("bytes=0-99999999999999999999999", 100, p(0, 99)),
            ("bytes=0-1,5-6", 100, Full),
            ("bytes=0-1,200-300", 100, Full),
            ("bytes=200-300,400-", 100, Unsatisfiable),
            ("bytes=9-5", 100, Full),
            ("bytes=abc", 100, Full),
            ("bytes=", 100, Full),
            ("bytes=-", 100, Full),
            ("bytes=1-2-3", 100, Full),
            ("bytes=+1-2", 100, Full),
            ("items=0-1", 100, Full),
            ("", 100, Full),
        ] {
            assert_eq!(evaluate(field.as_bytes(), len), want, "{field} / {len}");
        }
    }
}
