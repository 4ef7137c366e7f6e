//! The pieces of an access-log line written by hand rather than through `write!`: escaped
//! fields, addresses, seconds, hex ids, the Basic user, the calendar date. Each measured or
//! required: see its doc.

use std::io::Write;
use std::time::Duration;

/// Copies a header value or request part into a quoted field, escaping `"`, `\` and bytes
/// outside printable ASCII as `\xHH`, as nginx does: a client cannot forge a line or a field.
pub(super) fn escaped(out: &mut Vec<u8>, v: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in v {
        if c == b'"' || c == b'\\' || !(0x20..0x7f).contains(&c) {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(c >> 4)],
                HEX[usize::from(c & 15)],
            ]);
        } else {
            out.push(c);
        }
    }
}

/// An address as `Display` writes it (`127.0.0.1`, `::1`), IPv4 by hand: `write!` through the
/// formatting machinery cost ~650 instructions a line, 15% of a logged `/plaintext` request
/// (callgrind, docs/PERFORMANCE.md).
pub(super) fn push_ip(out: &mut Vec<u8>, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let mut num = itoa::Buffer::new();
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(num.format(octet).as_bytes());
            }
        }
        std::net::IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// Seconds with milliseconds, as nginx's `$request_time` (`0.003`). By hand rather than
/// `write!`, whose formatting machinery cost ~300 instructions a line (callgrind).
pub(super) fn seconds_ms(out: &mut Vec<u8>, d: Duration) {
    let ms = d.as_millis();
    out.extend_from_slice(itoa::Buffer::new().format(ms / 1000).as_bytes());
    let frac = (ms % 1000) as u16;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// 16 lower-case hex digits.
pub(super) fn hex64(out: &mut Vec<u8>, v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    for (i, d) in digits.iter_mut().enumerate() {
        *d = HEX[((v >> (60 - 4 * i)) & 15) as usize];
    }
    out.extend_from_slice(&digits);
}

/// Longest `Authorization: Basic` credentials decoded for `$remote_user`.
const MAX_BASIC_CREDENTIALS: usize = 768;

/// Writes the user name of an `Authorization: Basic` field (nginx's `$remote_user`), escaped,
/// or `-` when there is none or it does not decode. Decoded on the stack: no allocation.
pub(super) fn basic_user(out: &mut Vec<u8>, field: Option<&[u8]>) {
    use base64::Engine;
    let basic = field.and_then(|field| {
        let (scheme, token) = field.split_at(field.iter().position(|&b| b == b' ')?);
        scheme.eq_ignore_ascii_case(b"basic").then_some(token)
    });
    let Some(token) = basic else {
        out.push(b'-');
        return;
    };
    let mut decoded = [0u8; MAX_BASIC_CREDENTIALS];
    let user = {
        let n = base64::engine::general_purpose::STANDARD
            .decode_slice(token.trim_ascii(), &mut decoded)
            .unwrap_or(0);
        decoded[..n]
            .iter()
            .position(|&b| b == b':')
            .map(|end| &decoded[..end])
    };
    match user {
        Some(u) if !u.is_empty() => escaped(out, u),
        _ => out.push(b'-'),
    }
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01 (Howard Hinnant's algorithm).
pub(super) fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_781), (2026, 11, 24));
    }

    #[test]
    fn addresses_as_display_writes_them() {
        for ip in [
            "127.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "10.20.3.40",
            "::1",
            "::ffff:1.2.3.4",
            "2001:db8::8a2e:370:7334",
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            let mut out = Vec::new();
            push_ip(&mut out, ip);
            assert_eq!(String::from_utf8(out).unwrap(), ip.to_string());
        }
    }

    #[test]
    fn numbers() {
        let mut out = Vec::new();
        for ms in [0, 3, 1_234, 60_007] {
            seconds_ms(&mut out, Duration::from_millis(ms));
            out.push(b' ');
        }
        hex64(&mut out, 0x0123_4567_89ab_cdef);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "0.000 0.003 1.234 60.007 0123456789abcdef"
        );
    }

    #[test]
    fn remote_users() {
        let cases: &[(Option<&[u8]>, &str)] = &[
            (Some(b"Basic YWxpY2U6c2VjcmV0"), "alice"),
            (Some(b"basic YWxpY2U6c2VjcmV0"), "alice"),
            (Some(b"Basic Ym9iOg=="), "bob"),
            (Some(b"Basic bm9jb2xvbg=="), "-"),
            (Some(b"Basic !!!"), "-"),
            (Some(b"Bearer YWxpY2U6c2VjcmV0"), "-"),
            (Some(b"Basic InE6eA=="), "\\x22q"),
            (None, "-"),
        ];
        for &(field, want) in cases {
            let mut out = Vec::new();
            basic_user(&mut out, field);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{field:?}");
        }
    }

    #[test]
    fn escaping() {
        let mut out = Vec::new();
        escaped(&mut out, b"a\"b\\c\n\xff");
        assert_eq!(out, b"a\\x22b\\x5Cc\\x0A\\xFF");
    }
}
