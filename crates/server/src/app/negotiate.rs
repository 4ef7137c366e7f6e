//! Content negotiation between the app's two representations, HTML and JSON, from the `Accept`
//! header fields (RFC 9110 §12.5.1), over the raw bytes and without allocating.
//!
//! Each representation gets the quality of the most specific media range that matches it
//! (`text/html` beats `text/*` beats `*/*`); the higher quality wins. On a tie JSON wins only
//! when `application/json` was named outright — the seed app's rule, "JSON when the Accept header
//! contains application/json" — so a browser's `text/html,...,*/*;q=0.8` gets HTML and
//! `application/json, text/html` gets JSON. Everything else gets HTML, the app's default: no
//! `Accept`, an `Accept` naming neither (`image/png`), or one refusing both. RFC 9110 lets a
//! server answer 406 there or disregard the header; the app disregards it, as the seed app did.
//!
//! Lenient where the RFC allows: an element that does not parse is skipped, not fatal; a range's
//! parameters never stop it matching (`application/json;indent=2` is JSON), and `charset=utf-8`,
//! which the app's bodies have, makes it more specific.

/// What to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Html,
    Json,
}

/// The representations on offer.
const HTML: (&[u8], &[u8]) = (b"text", b"html");
const JSON: (&[u8], &[u8]) = (b"application", b"json");

/// How one representation fares against the Accept fields seen so far.
#[derive(Debug, Clone, Copy, Default)]
struct Best {
    /// 0 = no range matched; 1 = `*/*`; 2 = `type/*`; 3 = `type/subtype`; 4 = the same with
    /// parameters (RFC 9110: "more specific media ranges ... override less specific ones").
    specificity: u8,
    /// Quality in thousandths (a qvalue has at most three decimals).
    quality: u16,
}

impl Best {
    fn offer(&mut self, specificity: u8, quality: u16) {
        if specificity > self.specificity
            || (specificity == self.specificity && quality > self.quality)
        {
            *self = Self {
                specificity,
                quality,
            };
        }
    }
}

/// Chooses between HTML and JSON given every `Accept` field value of the request.
///
/// Most elements of a real `Accept` (a browser's, TechEmpower's) name types the app does not
/// have; they are dismissed by comparing type and subtype, before any parameter is parsed. For
/// TechEmpower's five-element header that took a call from about 400 ns (every element fully
/// parsed) to 90–130 ns on the benchmark machine.
pub fn choose<'a, I>(accept_fields: I) -> Choice
where
    I: IntoIterator<Item = &'a [u8]> + Clone,
{
    let mut html = Best::default();
    let mut json = Best::default();
    for field in accept_fields.clone() {
        let quoted = field.contains(&b'"');
        for element in split(field, b',', quoted) {
            let Some((kind, subtype, params)) = split_range(element) else {
                continue;
            };
            let for_html = specificity(kind, subtype, HTML);
            let for_json = specificity(kind, subtype, JSON);
            if for_html.is_none() && for_json.is_none() {
                continue;
            }
            let Some((params, quality)) = parse_params(params, quoted) else {
                continue;
            };
            // RFC 9110: "more specific media ranges ... override less specific ones".
            let bump = |s: u8| {
                if s == 3 && params == Params::Utf8Charset {
                    4
                } else {
                    s
                }
            };
            if let Some(s) = for_html {
                html.offer(bump(s), quality);
            }
            if let Some(s) = for_json {
                json.offer(bump(s), quality);
            }
        }
    }
    let (h, j) = (html.quality, json.quality);
    if j > 0 && (j > h || (j == h && json.specificity >= 3)) {
        Choice::Json
    } else {
        Choice::Html
    }
}

/// Parameters of a media range that come before `q` (they belong to the range): whether they
/// are exactly `charset=utf-8`, which the app's bodies have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Params {
    None,
    Utf8Charset,
    Other,
}

/// `type/subtype;params` → (type, subtype, params), trimmed; `None` without a `/`.
fn split_range(element: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let (range, params) = match element.iter().position(|&b| b == b';') {
        Some(i) => (&element[..i], &element[i + 1..]),
        None => (element, &[][..]),
    };
    let range = trim(range);
    let slash = range.iter().position(|&b| b == b'/')?;
    Some((&range[..slash], &range[slash + 1..], params))
}

/// How specifically `kind/subtype` names `(type, subtype)`: 1 for `*/*`, 2 for `type/*`, 3 for
/// the type itself; `None` when it does not.
fn specificity(kind: &[u8], subtype: &[u8], (want_kind, want_sub): (&[u8], &[u8])) -> Option<u8> {
    if kind == b"*" {
        return (subtype == b"*").then_some(1);
    }
    if !kind.eq_ignore_ascii_case(want_kind) {
        return None;
    }
    if subtype == b"*" {
        return Some(2);
    }
    subtype.eq_ignore_ascii_case(want_sub).then_some(3)
}

/// The parameters before `q`, and the quality (1000 without `q`); `None` when malformed.
fn parse_params(params: &[u8], quoted: bool) -> Option<(Params, u16)> {
    let mut kind = Params::None;
    for param in split(params, b';', quoted) {
        let param = trim(param);
        if param.is_empty() {
            continue; // `text/html;` or `a;;b`
        }
        let eq = param.iter().position(|&b| b == b'=')?;
        let name = trim(&param[..eq]);
        let value = trim(&param[eq + 1..]);
        if name.eq_ignore_ascii_case(b"q") {
            // What follows q is accept-ext, not the range's (RFC 9110 §12.5.1).
            return Some((kind, parse_qvalue(value)?));
        }
        let value = value
            .strip_prefix(b"\"")
            .and_then(|v| v.strip_suffix(b"\""))
            .unwrap_or(value);
        let utf8 = name.eq_ignore_ascii_case(b"charset")
            && (value.eq_ignore_ascii_case(b"utf-8") || value.eq_ignore_ascii_case(b"utf8"));
        kind = if utf8 && kind != Params::Other {
            Params::Utf8Charset
        } else {
            Params::Other
        };
    }
    Some((kind, 1000))
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
fn parse_qvalue(value: &[u8]) -> Option<u16> {
    let (&first, rest) = value.split_first()?;
    let decimals = match rest {
        [] => &[][..],
        [b'.', decimals @ ..] if decimals.len() <= 3 => decimals,
        _ => return None,
    };
    let mut thousandths: u16 = 0;
    let mut scale = 100;
    for &d in decimals {
        if !d.is_ascii_digit() {
            return None;
        }
        thousandths += u16::from(d - b'0') * scale;
        scale /= 10;
    }
    match first {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// Splits on `sep`; when the text holds a `"`, only outside double quotes (a quoted parameter
/// value may hold `,` or `;`).
fn split(s: &[u8], sep: u8, quoted: bool) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let s = rest?;
        let end = if quoted {
            unquoted_position(s, sep)
        } else {
            s.iter().position(|&b| b == sep)
        };
        match end {
            Some(i) => {
                rest = Some(&s[i + 1..]);
                Some(&s[..i])
            }
            None => {
                rest = None;
                Some(s)
            }
        }
    })
}

/// The first `sep` outside a quoted string.
fn unquoted_position(s: &[u8], sep: u8) -> Option<usize> {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, &b) in s.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if in_quotes && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            in_quotes = !in_quotes;
        } else if b == sep && !in_quotes {
            return Some(i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use Choice::{Html, Json};

    #[test]
    fn choices() {
        let cases: &[(&[&str], Choice)] = &[
            (&[], Html),
            (&[""], Html),
            (&["application/json"], Json),
            (&["APPLICATION/JSON"], Json),
            (&["Application/Json; Q=1"], Json),
            (&["text/html"], Html),
            (&["application/json;"], Json),
            (&["*/*"], Html),
            (&["application/*"], Json),
            (&["text/*"], Html),
            (&["application/json, text/html"], Json),
            (&["text/html, application/json"], Json),
            (&["text/html;q=0.9, application/json;q=0.8"], Html),
            (&["text/html;q=0.8, application/json;q=0.9"], Json),
            (&["application/json;q=0.5, */*"], Html),
            (&["application/json, */*;q=0.1"], Json),
            (&["text/html, */*"], Html),
            (&["application/json;q=0, */*"], Html),
            (&["text/html;q=0, */*"], Json),
            // Neither acceptable, or neither named: the default, HTML.
            (&["text/html;q=0, application/json;q=0"], Html),
            (&["image/png"], Html),
            (&["text/plain"], Html),
            (&["*/*;q=0"], Html),
            // More specific ranges override less specific ones, whatever their order.
            (&["*/*;q=0.9, application/*;q=0.1"], Html),
            (&["application/*;q=0.1, application/json;q=1"], Json),
            (&["text/*;q=0.2, */*;q=0.5"], Json),
            // TechEmpower's Accept for plaintext: HTML at 0.9 beats */* at 0.7.
            (
                &["text/plain,text/html;q=0.9,application/xhtml+xml;q=0.9,application/xml;q=0.8,*/*;q=0.7"],
                Html,
            ),
            // A browser's.
            (
                &["text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"],
                Html,
            ),
            // Fields are combined as one list.
            (&["text/html;q=0.5", "application/json"], Json),
            (&["image/png", "application/json;q=0.1"], Json),
            // Parameters never stop a match; charset=utf-8 makes a range more specific.
            (&["application/json;charset=utf-8"], Json),
            (&["application/json;charset=\"UTF-8\";q=0.9, text/html;q=0.5"], Json),
            (&["application/json;version=2, text/html;q=0.1"], Json),
            (&["application/json;indent=2"], Json),
            (&["application/json;charset=latin1"], Json),
            (&["application/json;charset=utf-8;q=0.5, application/json;q=1, text/html;q=0.9"], Html),
            (&["application/json; q=0.9; ext=1, text/html;q=0.1"], Json),
            // Quoted commas and semicolons do not split.
            (&["application/json;x=\"a,b;c\", text/html;q=0.1"], Json),
            (&["text/html;x=\"a,application/json\""], Html),
            // Malformed elements are skipped.
            (&["garbage, application/json"], Json),
            (&["application/json;q=2, text/html;q=0.1"], Html),
            (&["application/json;q=0.1234, text/html;q=0.1"], Html),
            (&["application/json;q=, text/html;q=0.1"], Html),
            (&["*/json"], Html),
            (&["application/, /json"], Html),
            (&[" , ,"], Html),
            // Whitespace around everything.
            (&["  application/json ;  q=0.8 ,  text/html ; q=0.7 "], Json),
        ];
        for &(fields, want) in cases {
            let got = choose(fields.iter().map(|f| f.as_bytes()));
            assert_eq!(got, want, "{fields:?}");
        }
    }

    #[test]
    fn qvalues() {
        let cases: &[(&str, Option<u16>)] = &[
            ("0", Some(0)),
            ("1", Some(1000)),
            ("1.", Some(1000)),
            ("1.000", Some(1000)),
            ("0.5", Some(500)),
            ("0.05", Some(50)),
            ("0.001", Some(1)),
            ("0.", Some(0)),
            ("1.001", None),
            ("1.0000", None),
            ("0.1234", None),
            ("2", None),
            (".5", None),
            ("", None),
            ("0.a", None),
            ("-0", None),
        ];
        for &(text, want) in cases {
            assert_eq!(parse_qvalue(text.as_bytes()), want, "{text:?}");
        }
    }
}
