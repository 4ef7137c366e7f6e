//! What a client certificate verified in a TLS handshake says of the client ([`ClientCert`]):
//! its subject and issuer as RFC 4514 strings, its serial number and its SHA-256 fingerprint —
//! the values of nginx's `$ssl_client_s_dn`, `$ssl_client_i_dn`, `$ssl_client_serial` and
//! (SHA-256 rather than nginx's SHA-1) `$ssl_client_fingerprint` — worked out once per
//! connection, when its handshake is done, and never again per request. The fields an upstream
//! gets are written out here once too ([`ClientCert::upstream_fields`]).
//!
//! Which fields are the server's to set, so that a client's own are dropped on the way to an
//! upstream ([`is_client_cert_field`]), is said here as well. Deciding whether a certificate
//! counts for a request's site is not: that is `crate::client_auth`. A leaf: it imports no other
//! module of the crate.
//!
//! Every value is printable ASCII: RFC 4514 §2.4's escapes, and `\XX` for every byte outside
//! printable ASCII (as OpenSSL's `ASN1_STRFLGS_ESC_MSB`, hence nginx, does), so a value can go
//! into a header field or a log line as it is.

use std::path::Path;
use std::sync::Arc;

use x509_parser::prelude::{FromDer, X509Certificate, X509Name};

/// `X-Client-Verify` when no certificate was verified for the request's site.
pub const VERIFY_NONE: &str = "NONE";
/// `X-Client-Verify` when one was.
pub const VERIFY_SUCCESS: &str = "SUCCESS";

/// The upstream fields of a request that comes with no certificate verified for its site.
pub(crate) const UPSTREAM_NONE: &[u8] = b"X-Client-Verify: NONE\r\n";

/// A verified client certificate, as the server reports it.
#[derive(Debug)]
pub struct ClientCert {
    /// The `--client-ca` file whose certificates verified it: a site accepts the certificate
    /// only when its own CA file is this one.
    pub ca: Arc<Path>,
    /// The subject, RFC 4514 (`CN=alice,O=Example,C=FR`: the most specific part first).
    pub subject: Box<str>,
    /// The issuer, the same way.
    pub issuer: Box<str>,
    /// The serial number, upper-case hex (`0A1B…`), as nginx's `$ssl_client_serial`.
    pub serial: Box<str>,
    /// SHA-256 of the certificate's DER, lower-case hex.
    pub fingerprint: Box<str>,
    /// `X-Client-Verify: SUCCESS` and the `X-Client-Cert-*` lines, as an upstream gets them.
    upstream: Box<[u8]>,
}

impl ClientCert {
    /// Describes the certificate `der`, verified against the CA file `ca`; `sha256` hashes.
    /// A certificate that x509-parser cannot read (the verifier could) keeps its fingerprint,
    /// with empty names.
    #[must_use]
    pub fn new(der: &[u8], ca: Arc<Path>, sha256: &dyn Fn(&[u8]) -> Vec<u8>) -> Self {
        let fingerprint = hex_lower(&sha256(der));
        let (subject, issuer, serial) = match X509Certificate::from_der(der) {
            Ok((_, cert)) => (
                rfc4514(cert.subject()),
                rfc4514(cert.issuer()),
                serial_hex(cert.raw_serial()),
            ),
            Err(_) => (String::new(), String::new(), String::new()),
        };
        let mut upstream = Vec::with_capacity(160 + subject.len() + issuer.len());
        for (name, value) in [
            ("X-Client-Verify", VERIFY_SUCCESS),
            ("X-Client-Cert-Subject", subject.as_str()),
            ("X-Client-Cert-Issuer", issuer.as_str()),
            ("X-Client-Cert-Serial", serial.as_str()),
            ("X-Client-Cert-Fingerprint", fingerprint.as_str()),
        ] {
            upstream.extend_from_slice(name.as_bytes());
            upstream.extend_from_slice(b": ");
            upstream.extend_from_slice(value.as_bytes());
            upstream.extend_from_slice(b"\r\n");
        }
        Self {
            ca,
            subject: subject.into(),
            issuer: issuer.into(),
            serial: serial.into(),
            fingerprint: fingerprint.into(),
            upstream: upstream.into(),
        }
    }

    /// The header lines an upstream gets for a request this certificate was verified for.
    #[must_use]
    pub fn upstream_fields(&self) -> &[u8] {
        &self.upstream
    }
}

/// What an upstream is told of a request's client certificate.
#[derive(Debug, Clone, Copy)]
pub enum CertReport<'a> {
    /// The request's site asks for no certificate: nothing (the client's own such fields are
    /// still dropped).
    NotAsked,
    /// It asks, and none counts for it: `X-Client-Verify: NONE`.
    Absent,
    /// It asks, and this one was verified by its CA file.
    Verified(&'a ClientCert),
}

impl CertReport<'_> {
    /// The header lines an upstream gets (each ending in CRLF).
    #[must_use]
    pub fn upstream_fields(&self) -> &[u8] {
        match self {
            Self::NotAsked => b"",
            Self::Absent => UPSTREAM_NONE,
            Self::Verified(cert) => cert.upstream_fields(),
        }
    }
}

/// Whether a request field named `name` is one the server sets about client certificates
/// (`X-Client-Verify`, `X-Client-Cert` and every `X-Client-Cert-*`, RFC 9440's `Client-Cert`
/// and `Client-Cert-Chain`): a client's own is never passed on, on any site, so that an
/// upstream may trust what it reads there.
#[must_use]
pub fn is_client_cert_field(name: &str) -> bool {
    let n = name.as_bytes();
    // Asked of every field of every forwarded request: most names fail the first test.
    match n.first() {
        Some(b'x' | b'X') if n.len() >= 13 && n[..9].eq_ignore_ascii_case(b"x-client-") => {
            let rest = &n[9..];
            rest.eq_ignore_ascii_case(b"verify")
                || rest.len() >= 4
                    && rest[..4].eq_ignore_ascii_case(b"cert")
                    && (rest.len() == 4 || rest[4] == b'-')
        }
        Some(b'c' | b'C') => {
            name.eq_ignore_ascii_case("client-cert")
                || name.eq_ignore_ascii_case("client-cert-chain")
        }
        _ => false,
    }
}

/// The short names RFC 4514 §3 gives (and those OpenSSL prints, which nginx's values use),
/// by dotted OID; any other attribute is written as its OID.
const SHORT_NAMES: [(&str, &str); 17] = [
    ("2.5.4.3", "CN"),
    ("2.5.4.4", "SN"),
    ("2.5.4.5", "serialNumber"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.9", "STREET"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.12", "title"),
    ("2.5.4.42", "GN"),
    ("2.5.4.43", "initials"),
    ("2.5.4.46", "dnQualifier"),
    ("2.5.4.65", "pseudonym"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
    ("1.2.840.113549.1.9.1", "emailAddress"),
];

/// A distinguished name as RFC 4514 writes it: the relative names last to first, `,` between
/// them, `+` between the values of a multi-valued one — those last to first too, as OpenSSL
/// (so nginx) writes them (RFC 4514 leaves their order open).
fn rfc4514(name: &X509Name<'_>) -> String {
    let mut out = String::new();
    let rdns: Vec<_> = name.iter().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let values: Vec<_> = rdn.iter().collect();
        for (j, atv) in values.iter().rev().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = atv.attr_type().to_id_string();
            match SHORT_NAMES.iter().find(|(o, _)| *o == oid) {
                Some((_, short)) => out.push_str(short),
                None => out.push_str(&oid),
            }
            out.push('=');
            let value = atv.attr_value();
            match text(value.tag().0, value.data) {
                Some(text) => escape_value(&mut out, text.as_bytes()),
                // §2.4: a value of no string type is `#` and the hex of its BER encoding.
                None => {
                    out.push('#');
                    let encoded = ber(
                        value.tag().0,
                        value.class() as u8,
                        value.header.is_constructed(),
                        value.data,
                    );
                    out.push_str(&hex_upper(&encoded));
                }
            }
        }
    }
    out
}

/// The text of a string value of universal tag `tag`: UTF-8, PrintableString, IA5String,
/// NumericString and TeletexString (read as Latin-1, as OpenSSL does) as they are, BMPString
/// (UTF-16) and UniversalString (UTF-32) decoded; `None` for anything else.
fn text(tag: u32, data: &[u8]) -> Option<String> {
    match tag {
        12 | 18 | 19 | 22 => std::str::from_utf8(data).ok().map(str::to_owned),
        20 => Some(data.iter().map(|&b| char::from(b)).collect()),
        30 => {
            let units: Vec<u16> = data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        28 => data
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => None,
    }
}

/// A value with RFC 4514 §2.4's escapes, and every byte outside printable ASCII as `\XX`.
fn escape_value(out: &mut String, v: &[u8]) {
    for (i, &b) in v.iter().enumerate() {
        let special = matches!(b, b'"' | b'+' | b',' | b';' | b'<' | b'>' | b'\\')
            || (i == 0 && (b == b' ' || b == b'#'))
            || (i == v.len() - 1 && b == b' ');
        if special {
            out.push('\\');
            out.push(char::from(b));
        } else if (0x20..0x7f).contains(&b) {
            out.push(char::from(b));
        } else {
            out.push('\\');
            out.push_str(&hex_upper(&[b]));
        }
    }
}

/// A value's BER encoding from its parts (short tag form up to 30, else the long form).
fn ber(tag: u32, class: u8, constructed: bool, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 8);
    let first = (class << 6) | if constructed { 0x20 } else { 0 };
    match u8::try_from(tag) {
        Ok(t) if t < 31 => out.push(first | t),
        _ => {
            out.push(first | 0x1f);
            let mut groups = Vec::new();
            let mut t = tag;
            loop {
                groups.push(u8::try_from(t & 0x7f).unwrap_or(0));
                t >>= 7;
                if t == 0 {
                    break;
                }
            }
            for (k, g) in groups.iter().rev().enumerate() {
                out.push(if k + 1 < groups.len() { g | 0x80 } else { *g });
            }
        }
    }
    match u8::try_from(data.len()) {
        Ok(l) if l < 0x80 => out.push(l),
        _ => {
            let bytes = data.len().to_be_bytes();
            let skip = bytes.iter().take_while(|&&b| b == 0).count();
            out.push(0x80 | u8::try_from(bytes.len() - skip).unwrap_or(0));
            out.extend_from_slice(&bytes[skip..]);
        }
    }
    out.extend_from_slice(data);
    out
}

/// A serial number's magnitude in upper-case hex: DER's sign padding dropped, as OpenSSL prints
/// it.
fn serial_hex(raw: &[u8]) -> String {
    let skip = raw
        .iter()
        .take_while(|&&b| b == 0)
        .count()
        .min(raw.len().saturating_sub(1));
    hex_upper(&raw[skip..])
}

fn hex_upper(bytes: &[u8]) -> String {
    hex(bytes, b"0123456789ABCDEF")
}

fn hex_lower(bytes: &[u8]) -> String {
    hex(bytes, b"0123456789abcdef")
}

fn hex(bytes: &[u8], digits: &[u8; 16]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(digits[usize::from(b >> 4)]));
        s.push(char::from(digits[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(v: &str) -> String {
        let mut out = String::new();
        escape_value(&mut out, v.as_bytes());
        out
    }

    /// RFC 4514 §2.4's escapes, and bytes outside printable ASCII as `\XX`.
    #[test]
    fn values_escape() {
        for (value, want) in [
            ("alice", "alice"),
            ("Doe, John", "Doe\\, John"),
            ("a+b;c<d>e\"f\\g", "a\\+b\\;c\\<d\\>e\\\"f\\\\g"),
            (" lead", "\\ lead"),
            ("#tag", "\\#tag"),
            ("trail ", "trail\\ "),
            ("in # side", "in # side"),
            ("é", "\\C3\\A9"),
            ("line\r\nbreak", "line\\0D\\0Abreak"),
            ("nul\0", "nul\\00"),
        ] {
            assert_eq!(escaped(value), want, "{value:?}");
        }
    }

    /// The fields the server sets are told apart from the client's other fields.
    #[test]
    fn server_fields() {
        for name in [
            "X-Client-Verify",
            "x-client-verify",
            "X-Client-Cert",
            "X-CLIENT-CERT-SUBJECT",
            "x-client-cert-fingerprint",
            "x-client-cert-anything",
            "Client-Cert",
            "client-cert-chain",
        ] {
            assert!(is_client_cert_field(name), "{name}");
        }
        for name in [
            "X-Client-Id",
            "X-Client-Certainly",
            "X-Client-Verified",
            "Content-Type",
            "Client-Certs",
            "x-clien",
            "",
        ] {
            assert!(!is_client_cert_field(name), "{name}");
        }
    }

    #[test]
    fn encodings() {
        assert_eq!(serial_hex(&[0x00, 0x8f, 0x01]), "8F01");
        assert_eq!(serial_hex(&[0x00]), "00");
        assert_eq!(serial_hex(&[0x01, 0x00]), "0100");
        assert_eq!(ber(4, 0, false, b"ab"), [0x04, 2, b'a', b'b']);
        assert_eq!(ber(31, 2, true, &[]), [0xbf, 0x1f, 0]);
        assert_eq!(ber(4, 0, false, &[0; 200])[..3], [0x04, 0x81, 200]);
    }

    /// A certificate made with a known subject reads back in RFC 4514's order, with its
    /// fingerprint and the fields an upstream gets.
    #[test]
    fn described() {
        use lowlat_testkit::pki::{DnType, Pki};
        let pki = Pki::named("Test CA, Inc");
        let files = pki.client(
            "alice",
            &[
                (DnType::CountryName, "FR"),
                (DnType::OrganizationName, "Example"),
                (DnType::CommonName, "alice"),
            ],
        );
        let ca: Arc<Path> = Arc::from(pki.ca_path().as_path());
        let fake_sha = |d: &[u8]| vec![u8::try_from(d.len() % 256).unwrap_or(0), 0xab];
        let cert = ClientCert::new(&files.leaf_der, Arc::clone(&ca), &fake_sha);
        assert_eq!(&*cert.subject, "CN=alice,O=Example,C=FR");
        assert_eq!(&*cert.issuer, "CN=Test CA\\, Inc");
        assert!(
            !cert.serial.is_empty() && cert.serial.bytes().all(|b| b.is_ascii_hexdigit()),
            "{}",
            cert.serial
        );
        assert_eq!(
            &*cert.fingerprint,
            format!("{:02x}ab", files.leaf_der.len() % 256)
        );
        let fields = String::from_utf8(cert.upstream_fields().to_vec()).unwrap();
        assert!(
            fields.starts_with(
                "X-Client-Verify: SUCCESS\r\nX-Client-Cert-Subject: CN=alice,O=Example,C=FR\r\n"
            ),
            "{fields}"
        );
        assert!(fields.ends_with(&format!(
            "X-Client-Cert-Fingerprint: {}\r\n",
            cert.fingerprint
        )));
        // Not a certificate: the fingerprint stays, the names are empty.
        let junk = ClientCert::new(b"junk", ca, &fake_sha);
        assert!(junk.subject.is_empty() && !junk.fingerprint.is_empty());
    }
}
