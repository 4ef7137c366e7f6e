//! Choosing a content coding with the request's `Accept-Encoding` (RFC 9110 §12.5.3), q-values
//! honoured: among a file's precompressed siblings (`x.css.br`, `x.css.gz`, `x.css.zst`), and
//! among the codings the server compresses with on the fly.
//!
//! A coding is acceptable when listed with q > 0, or when not listed and `*` has q > 0.
//! `identity` is acceptable unless refused by `identity;q=0`, or by `*;q=0` without an
//! `identity` entry. The highest q wins; on a tie the server's order of preference decides
//! (`--compress-encodings`, by default zstd, br, gzip), and any coding beats identity. With no
//! `Accept-Encoding` at all, identity is sent: any coding would be allowed, but a client that
//! says nothing may not decode. When nothing listed is available, identity is sent as well
//! (§12.5.3 permits ignoring the field rather than answering 415).

/// A content coding this server can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
    Br,
    Zstd,
}

/// Every coding but identity, in the default order of preference: zstd compresses about as
/// small as brotli at gzip's speed or better, brotli a little smaller than gzip; gzip is the one
/// every client decodes.
pub const DEFAULT_ORDER: [Coding; 3] = [Coding::Zstd, Coding::Br, Coding::Gzip];

impl Coding {
    /// Index into a file's variants: identity, gzip, br, zstd.
    #[must_use]
    pub const fn index(self) -> usize {
        match self {
            Self::Identity => 0,
            Self::Gzip => 1,
            Self::Br => 2,
            Self::Zstd => 3,
        }
    }

    /// This coding's bit in a set of available codings ([`Codings`]).
    #[must_use]
    pub const fn bit(self) -> Codings {
        Codings(1 << self.index())
    }

    /// The sibling's file name suffix.
    #[must_use]
    pub const fn suffix(self) -> &'static str {
        match self {
            Self::Identity => "",
            Self::Gzip => ".gz",
            Self::Br => ".br",
            Self::Zstd => ".zst",
        }
    }

    /// The `Content-Encoding` value.
    #[must_use]
    pub const fn token(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Gzip => "gzip",
            Self::Br => "br",
            Self::Zstd => "zstd",
        }
    }

    /// The coding a `Content-Encoding` token names (`x-gzip` is gzip, RFC 9110 §8.4.1.3).
    #[must_use]
    pub fn from_token(token: &[u8]) -> Option<Self> {
        [Self::Gzip, Self::Br, Self::Zstd, Self::Identity]
            .into_iter()
            .find(|c| token.eq_ignore_ascii_case(c.token().as_bytes()))
            .or_else(|| token.eq_ignore_ascii_case(b"x-gzip").then_some(Self::Gzip))
    }
}

/// A set of codings, one bit each ([`Coding::bit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Codings(pub u8);

impl Codings {
    /// Whether `coding` is in the set.
    #[must_use]
    pub const fn has(self, coding: Coding) -> bool {
        self.0 & coding.bit().0 != 0
    }

    /// The set with `coding` added.
    #[must_use]
    pub const fn with(self, coding: Coding) -> Self {
        Self(self.0 | coding.bit().0)
    }

    /// Whether no coding but identity is in the set.
    #[must_use]
    pub const fn is_empty(self) -> bool {
        self.0 & !Coding::Identity.bit().0 == 0
    }
}

/// Picks the coding to send among `available` (identity is always possible), `order` breaking
/// ties between codings of equal q.
#[must_use]
pub fn choose(accept_encoding: Option<&[u8]>, available: Codings, order: &[Coding]) -> Coding {
    let Some(field) = accept_encoding else {
        return Coding::Identity;
    };
    if available.is_empty() {
        return Coding::Identity;
    }
    // q-values in thousandths (RFC 9110 §12.4.2: at most three decimals); None = not listed.
    let mut listed: [Option<u16>; 4] = [None; 4];
    let mut star = None;
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
        let slot = if coding == b"*" {
            &mut star
        } else if let Some(c) = Coding::from_token(coding) {
            &mut listed[c.index()]
        } else {
            continue;
        };
        *slot = Some(q);
    }
    let identity_q = listed[0].unwrap_or(match star {
        Some(0) => 0,
        _ => 1,
    });
    let mut best: Option<(Coding, u16)> = None;
    for &coding in order {
        let q = listed[coding.index()].or(star).unwrap_or(0);
        if coding != Coding::Identity
            && available.has(coding)
            && q > 0
            && best.is_none_or(|(_, b)| q > b)
        {
            best = Some((coding, q));
        }
    }
    match best {
        Some((coding, q)) if q >= identity_q => coding,
        _ => Coding::Identity,
    }
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
    use Coding::{Br, Gzip, Identity, Zstd};

    fn set(codings: &[Coding]) -> Codings {
        codings.iter().fold(Codings::default(), |s, &c| s.with(c))
    }

    /// Siblings: br and gzip available, br preferred on a tie (the order before zstd existed).
    #[test]
    fn choices() {
        let order = [Br, Gzip, Zstd];
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
            let mut available = Codings::default();
            if gz {
                available = available.with(Gzip);
            }
            if br {
                available = available.with(Br);
            }
            assert_eq!(
                choose(field.map(str::as_bytes), available, &order),
                want,
                "{field:?} gz={gz} br={br}"
            );
        }
    }

    /// On the fly: every coding available, the server's order breaking ties.
    #[test]
    fn server_order_breaks_ties() {
        let all = set(&[Gzip, Br, Zstd]);
        for (field, order, want) in [
            ("gzip, br, zstd", &DEFAULT_ORDER[..], Zstd),
            ("gzip, br, zstd", &[Gzip, Br, Zstd][..], Gzip),
            ("gzip, br, zstd", &[Br, Gzip][..], Br),
            ("gzip;q=0.9, br, zstd;q=0.5", &DEFAULT_ORDER[..], Br),
            ("zstd;q=0.5, gzip;q=0.5", &[Br, Gzip, Zstd][..], Gzip),
            ("zstd", &[Br, Gzip][..], Identity),
            ("*", &[Gzip][..], Gzip),
            ("*, zstd;q=0", &DEFAULT_ORDER[..], Br),
            ("identity;q=0, *;q=0", &DEFAULT_ORDER[..], Identity),
            ("identity, gzip", &DEFAULT_ORDER[..], Gzip),
            ("identity, gzip;q=0.5", &DEFAULT_ORDER[..], Identity),
        ] {
            assert_eq!(
                choose(Some(field.as_bytes()), all, order),
                want,
                "{field:?} {order:?}"
            );
        }
        assert_eq!(choose(Some(b"gzip"), set(&[Br]), &DEFAULT_ORDER), Identity);
    }

    #[test]
    fn tokens() {
        assert_eq!(Coding::from_token(b"ZSTD"), Some(Zstd));
        assert_eq!(Coding::from_token(b"x-gzip"), Some(Gzip));
        assert_eq!(Coding::from_token(b"deflate"), None);
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
