//! Choosing among a file's precompressed siblings (`x.css.br`, `x.css.gz`) with the request's
//! `Accept-Encoding` (RFC 9110 §12.5.3), q-values honoured.
//!
//! A coding is acceptable when listed with q > 0, or when not listed and `*` has q > 0.
//! `identity` is acceptable unless refused by `identity;q=0`, or by `*;q=0` without an
//! `identity` entry. The highest q wins; on a tie the smaller body wins (br, then gzip, then
//! identity). With no `Accept-Encoding` at all, identity is sent: any coding would be allowed,
//! but a client that says nothing may not decode. When nothing listed is available, identity is
//! sent as well (§12.5.3 permits ignoring the field rather than answering 415).

/// A content coding this server can serve from a sibling file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
    Br,
}

impl Coding {
    /// Index into a file's variants: identity, gzip, br.
    #[must_use]
    pub const fn index(self) -> usize {
        match self {
            Self::Identity => 0,
            Self::Gzip => 1,
            Self::Br => 2,
        }
    }

    /// The sibling's file name suffix.
    #[must_use]
    pub const fn suffix(self) -> &'static str {
        match self {
            Self::Identity => "",
            Self::Gzip => ".gz",
            Self::Br => ".br",
        }
    }

    /// The `Content-Encoding` value.
    #[must_use]
    pub const fn token(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Gzip => "gzip",
            Self::Br => "br",
        }
    }
}

/// Picks the coding to send. `has_gzip` / `has_br` say which siblings exist.
#[must_use]
pub fn choose(accept_encoding: Option<&[u8]>, has_gzip: bool, has_br: bool) -> Coding {
    let Some(field) = accept_encoding else {
        return Coding::Identity;
    };
    // q-values in thousandths (RFC 9110 §12.4.2: at most three decimals); None = not listed.
    let (mut gzip, mut br, mut identity, mut star) = (None, None, None, None);
    for element in field.split(|&b| b == b',') {
        let mut parts = element.split(|&b| b == b';');
        let coding = parts.next().unwrap_or_default().trim_ascii();
        if coding.is_empty() {
            continue;
        }
        let mut q = 1000u16;
        for param in parts {
            let param = param.trim_ascii();
            if param.len() >= 2 && param[..2].eq_ignore_ascii_case(b"q=") {
                q = qvalue(&param[2..]).unwrap_or(0);
            }
        }
        let slot = if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip")
        {
            &mut gzip
        } else if coding.eq_ignore_ascii_case(b"br") {
            &mut br
        } else if coding.eq_ignore_ascii_case(b"identity") {
            &mut identity
        } else if coding == b"*" {
            &mut star
        } else {
            continue;
        };
        *slot = Some(q);
    }
    let listed_or_star = |q: Option<u16>| q.or(star).unwrap_or(0);
    let identity_q = identity.unwrap_or(match star {
        Some(0) => 0,
        _ => 1,
    });
    let mut best = (Coding::Identity, identity_q);
    for (coding, available, q) in [
        (Coding::Gzip, has_gzip, listed_or_star(gzip)),
        (Coding::Br, has_br, listed_or_star(br)),
    ] {
        if available && q > 0 && q >= best.1 {
            best = (coding, q);
        }
    }
    best.0
}

/// A qvalue (`0`, `0.5`, `1`, `1.000`) in thousandths; `None` when malformed.
fn qvalue(text: &[u8]) -> Option<u16> {
    let text = text.trim_ascii();
    let (int, frac) = match text.iter().position(|&b| b == b'.') {
        Some(dot) => (&text[..dot], &text[dot + 1..]),
        None => (text, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |&d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::{Br, Gzip, Identity};

    #[test]
    fn choices() {
        for (field, gz, br, want) in [
            (None, true, true, Identity),
            (Some("gzip, deflate, br"), true, true, Br),
            (Some("gzip, deflate, br"), true, false, Gzip),
            (Some("gzip, deflate, br"), false, false, Identity),
            (Some("br;q=0.5, gzip;q=0.8"), true, true, Gzip),
            (Some("br;q=1.0, gzip;q=0.8"), true, true, Br),
            (Some("br;q=0, gzip"), true, true, Gzip),
            (Some("br;q=0, gzip;q=0"), true, true, Identity),
            (Some("*"), true, true, Br),
            (Some("*;q=0.1, identity;q=0.5"), true, true, Identity),
            (Some("*;q=0.5, identity;q=0.5"), true, true, Br),
            (Some("*;q=0"), true, true, Identity),
            (Some("*;q=0, gzip;q=0.1"), true, true, Gzip),
            (Some("identity;q=0, gzip;q=0.001"), true, false, Gzip),
            (Some("x-gzip"), true, false, Gzip),
            (Some("GZIP;Q=0.9"), true, false, Gzip),
            (Some("gzip;q=2"), true, false, Identity),
            (Some("gzip;q=0.5555"), true, false, Identity),
            (Some(""), true, true, Identity),
            (Some(" , ,gzip"), true, true, Gzip),
            (Some("deflate, zstd"), true, true, Identity),
        ] {
            assert_eq!(
                choose(field.map(str::as_bytes), gz, br),
                want,
                "{field:?} gz={gz} br={br}"
            );
        }
    }

    #[test]
    fn qvalues() {
        assert_eq!(qvalue(b"1"), Some(1000));
        assert_eq!(qvalue(b"1.000"), Some(1000));
        assert_eq!(qvalue(b"0.5"), Some(500));
        assert_eq!(qvalue(b"0.05"), Some(50));
        assert_eq!(qvalue(b"0"), Some(0));
        assert_eq!(qvalue(b"1.5"), None);
        assert_eq!(qvalue(b"abc"), None);
    }
}
