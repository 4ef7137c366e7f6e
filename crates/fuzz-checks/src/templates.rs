//! The texts a config names and the server expands per request: `return` rules, the templates
//! they and `try_files` use, and `log_format` lines.

use lowlat_http::request::{header_slots, parse_request, HeadLimits};
use lowlat_http::Status;
use lowlat_server::log_format::LogFormat;
use lowlat_server::returns::parse_return_rule;
use lowlat_server::template::{self, Context, Ports, Template};

/// The input is a text and a request head (cut at the first `0xff`); the first byte says
/// whether the text is a `return` rule, a template or a `log_format`.
///
/// A rule or template that compiles expands for any request the server accepts without a
/// control byte the text did not hold (a CR or LF in a `Location` would split the response),
/// and a text without `$` expands to itself. A `log_format` that compiles holds no line break.
pub fn check(data: &[u8]) {
    let Some((&kind, data)) = data.split_first() else {
        return;
    };
    let (text, request) = match data.iter().position(|&b| b == 0xff) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (
            data,
            &b"GET /a/b?c=d HTTP/1.1\r\nHost: example.com\r\n\r\n"[..],
        ),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let _ = template::split(text);
    let compiled = match kind % 3 {
        0 => match parse_return_rule(text) {
            Ok(rule) => {
                assert!(rule.prefix.starts_with('/') && (200..=599).contains(&rule.status));
                rule.text
            }
            Err(_) => None,
        },
        1 => Template::compile(text).ok(),
        _ => {
            if let Ok(format) = LogFormat::compile(text) {
                for s in &format.segments {
                    if let lowlat_server::log_format::Segment::Literal(l) = s {
                        assert!(!l.contains(&b'\n') && !l.contains(&b'\r'));
                    }
                }
            }
            None
        }
    };
    let Some(t) = compiled else {
        return;
    };
    if !text.contains('$') && kind % 3 == 1 {
        assert_eq!(t.literal().as_deref(), Some(text.as_bytes()));
    }
    let mut slots = header_slots();
    let Ok(Status::Complete(req)) = parse_request(request, &mut slots, &HeadLimits::default())
    else {
        return;
    };
    let cx = Context {
        tls: kind & 0x80 != 0,
        ports: Ports {
            clear: Some(8080),
            tls: (kind & 0x40 != 0).then_some(8443),
        },
        server_name: (kind & 0x20 != 0).then_some("example.org"),
    };
    let mut out = Vec::new();
    if t.expand(&req, &cx, &mut out).is_ok() {
        for c in [b'\r', b'\n', 0] {
            assert!(
                !out.contains(&c) || text.as_bytes().contains(&c),
                "{c:#x} in the expansion of {text:?}"
            );
        }
        if t.literal().is_some() {
            assert_eq!(Some(out), t.literal());
        }
    }
}
