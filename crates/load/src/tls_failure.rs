//! Why a TLS handshake failed, in words a user can act on: the certificate is not trusted, has
//! expired, names another host, or uses an algorithm this client does not verify — each with
//! what to do next (`--cacert FILE`, `-k`). rustls reports these as enum values
//! (`InvalidCertificate(UnknownIssuer)`, algorithm identifiers as DER bytes); printed as they
//! are, they read as a program's debug output.
//!
//! Only the wording: the failure is counted where it happens (the worker), and the first
//! reason is kept in the report. Nothing here runs per request — once per run at most.

use std::io;
use std::time::{Duration, SystemTime};

use rustls::pki_types::UnixTime;
use rustls::{AlertDescription, CertificateError, Error, InvalidMessage};

/// What to do when the certificate cannot be verified but the server is the one meant.
const TRUST_HINT: &str = "pass --cacert FILE, or -k to skip verification";

/// One line saying why a handshake failed, and how to proceed when the user can do something
/// about it. `h2`: the run asked for HTTP/2 only (ALPN `h2`).
pub(crate) fn describe(err: &io::Error, h2: bool) -> String {
    match err.get_ref().and_then(|e| e.downcast_ref::<Error>()) {
        Some(e) => describe_rustls(e, h2),
        None if err.kind() == io::ErrorKind::UnexpectedEof => {
            "the server closed the connection during the handshake".to_owned()
        }
        None => err.to_string(),
    }
}

fn describe_rustls(e: &Error, h2: bool) -> String {
    match e {
        Error::InvalidCertificate(c) => describe_certificate(c),
        Error::AlertReceived(AlertDescription::NoApplicationProtocol)
        | Error::NoApplicationProtocol
            if h2 =>
        {
            "the server does not offer HTTP/2 (ALPN h2)".to_owned()
        }
        Error::AlertReceived(alert) => format!(
            "the server refused the handshake (TLS alert: {})",
            alert_name(*alert)
        ),
        Error::InvalidMessage(
            InvalidMessage::InvalidContentType
            | InvalidMessage::UnknownProtocolVersion
            | InvalidMessage::MessageTooLarge,
        ) => "the server does not speak TLS on this port (an http:// port?)".to_owned(),
        Error::PeerIncompatible(why) => {
            format!("no TLS version or cipher in common with the server ({why:?})")
        }
        Error::NoCertificatesPresented => "the server sent no certificate".to_owned(),
        other => other.to_string(),
    }
}

fn describe_certificate(c: &CertificateError) -> String {
    #[allow(deprecated)] // matched so that a rustls which still reports it is worded too
    match c {
        CertificateError::UnknownIssuer => {
            format!("certificate not trusted (self-signed?): {TRUST_HINT}")
        }
        CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext {
            signature_algorithm_id,
            public_key_algorithm_id,
        } => format!(
            "certificate not trusted (self-signed, or from another CA of the same name?): it is \
             signed with {}, but the trusted certificate named as its issuer has a key for {}: \
             {TRUST_HINT}",
            algorithm_name(signature_algorithm_id),
            algorithm_name(public_key_algorithm_id)
        ),
        CertificateError::BadSignature => format!(
            "certificate not trusted (self-signed, or from another CA of the same name?): the \
             trusted certificate named as its issuer did not sign it: {TRUST_HINT}"
        ),
        CertificateError::Expired => {
            "certificate expired: renew it, or -k to skip verification".to_owned()
        }
        CertificateError::ExpiredContext { not_after, .. } => format!(
            "certificate expired on {}: renew it, or -k to skip verification",
            date(*not_after)
        ),
        CertificateError::NotValidYet => {
            "certificate not valid yet (is this machine's clock right?), or -k to skip \
             verification"
                .to_owned()
        }
        CertificateError::NotValidYetContext { not_before, .. } => format!(
            "certificate not valid before {} (is this machine's clock right?), or -k to skip \
             verification",
            date(*not_before)
        ),
        CertificateError::NotValidForName => {
            "certificate is for another name than the URL's host: use a URL with one of its \
             names, or -k to skip verification"
                .to_owned()
        }
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } => format!(
            "certificate is not for {} (it names {}): use a URL with one of its names, or -k to \
             skip verification",
            expected.to_str(),
            if presented.is_empty() {
                "no host".to_owned()
            } else {
                presented
                    .iter()
                    .map(|n| bare_name(n))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        CertificateError::UnsupportedSignatureAlgorithm => {
            "certificate signed with an algorithm this client does not support: -k to skip \
             verification"
                .to_owned()
        }
        CertificateError::UnsupportedSignatureAlgorithmContext {
            signature_algorithm_id,
            ..
        } => format!(
            "certificate signed with {}, an algorithm this client does not support: -k to skip \
             verification",
            algorithm_name(signature_algorithm_id)
        ),
        CertificateError::Revoked => "certificate revoked".to_owned(),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "certificate is not for a TLS server (its extended key usage): -k to skip \
             verification"
                .to_owned()
        }
        CertificateError::BadEncoding => "certificate malformed".to_owned(),
        CertificateError::UnhandledCriticalExtension => {
            "certificate has a critical extension this client does not know: -k to skip \
             verification"
                .to_owned()
        }
        // webpki's own error, which rustls passes on boxed (`Other`): matched by name, since
        // this crate does not depend on webpki.
        other if format!("{other:?}").contains("CaUsedAsEndEntity") => {
            "certificate is a CA's (basicConstraints CA:TRUE), not a server's: make it with \
             CA:FALSE, or -k to skip verification"
                .to_owned()
        }
        other => format!("invalid certificate: {other}"),
    }
}

/// A name as webpki lists it (`DnsName("a.example")`, `IpAddress(127.0.0.1)`), without the
/// wrapping.
fn bare_name(listed: &str) -> &str {
    for (open, close) in [("DnsName(\"", "\")"), ("IpAddress(", ")")] {
        if let Some(inner) = listed
            .strip_prefix(open)
            .and_then(|rest| rest.strip_suffix(close))
        {
            return inner;
        }
    }
    listed
}

/// A certificate time as a date and time (UTC).
fn date(t: UnixTime) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(t.as_secs());
    humantime::format_rfc3339_seconds(at).to_string()
}

/// An alert's name as the TLS RFCs write it (`handshake_failure`).
fn alert_name(a: AlertDescription) -> String {
    let debug = format!("{a:?}");
    let mut out = String::with_capacity(debug.len() + 4);
    for (i, ch) in debug.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_lowercase());
    }
    out
}

/// The name of an algorithm from the DER of its AlgorithmIdentifier (an OID, perhaps followed
/// by parameters), or the OID in dotted form when it is not one of the usual ones.
fn algorithm_name(der: &[u8]) -> String {
    let Some(oid) = oid(der) else {
        return "an unknown algorithm".to_owned();
    };
    let name = match oid.as_str() {
        "1.2.840.10045.4.1" => "ECDSA with SHA-1",
        "1.2.840.10045.4.3.2" => "ECDSA with SHA-256",
        "1.2.840.10045.4.3.3" => "ECDSA with SHA-384",
        "1.2.840.10045.4.3.4" => "ECDSA with SHA-512",
        "1.2.840.10045.2.1" => "ECDSA",
        "1.2.840.113549.1.1.1" => "RSA",
        "1.2.840.113549.1.1.4" => "RSA with MD5",
        "1.2.840.113549.1.1.5" => "RSA with SHA-1",
        "1.2.840.113549.1.1.10" => "RSA-PSS",
        "1.2.840.113549.1.1.11" => "RSA with SHA-256",
        "1.2.840.113549.1.1.12" => "RSA with SHA-384",
        "1.2.840.113549.1.1.13" => "RSA with SHA-512",
        "1.3.101.112" => "Ed25519",
        "1.3.101.113" => "Ed448",
        "1.2.840.10040.4.1" => "DSA",
        "1.2.840.10040.4.3" => "DSA with SHA-1",
        _ => return format!("algorithm {oid}"),
    };
    name.to_owned()
}

/// The dotted form of the OID that opens `der` (tag 6, a short length, base-128 arcs).
fn oid(der: &[u8]) -> Option<String> {
    let (&tag, rest) = der.split_first()?;
    let (&len, rest) = rest.split_first()?;
    let body = rest.get(..usize::from(len))?;
    if tag != 6 || len == 0 || len > 127 {
        return None;
    }
    let mut arcs = Vec::new();
    let mut value: u64 = 0;
    for &b in body {
        value = value.checked_mul(128)? | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            arcs.push(value);
            value = 0;
        }
    }
    let first = *arcs.first()?;
    let (a, b) = if first < 80 {
        (first / 40, first % 40)
    } else {
        (2, first - 80)
    };
    let mut s = format!("{a}.{b}");
    for arc in &arcs[1..] {
        s.push('.');
        s.push_str(&arc.to_string());
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(e: Error) -> String {
        describe(&io::Error::new(io::ErrorKind::InvalidData, e), false)
    }

    /// Each failure a user meets, in words, with what to do; no enum names, no byte lists.
    #[test]
    fn certificate_failures_in_words() {
        let ecdsa_sha256 = vec![6, 8, 42, 134, 72, 206, 61, 4, 3, 2];
        let rsa = vec![6, 9, 42, 134, 72, 134, 247, 13, 1, 1, 1, 5, 0];
        let cases: Vec<(CertificateError, &str)> = vec![
            (
                CertificateError::UnknownIssuer,
                "certificate not trusted (self-signed?): pass --cacert FILE, or -k to skip verification",
            ),
            (
                CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext {
                    signature_algorithm_id: ecdsa_sha256.clone(),
                    public_key_algorithm_id: rsa,
                },
                "certificate not trusted (self-signed, or from another CA of the same name?): it \
                 is signed with ECDSA with SHA-256, but the trusted certificate named as its \
                 issuer has a key for RSA: pass --cacert FILE, or -k to skip verification",
            ),
            (
                CertificateError::ExpiredContext {
                    time: UnixTime::since_unix_epoch(Duration::from_secs(1_800_000_000)),
                    not_after: UnixTime::since_unix_epoch(Duration::from_secs(1_700_000_000)),
                },
                "certificate expired on 2023-11-14T22:13:20Z: renew it, or -k to skip verification",
            ),
            (
                CertificateError::NotValidForNameContext {
                    expected: rustls::pki_types::ServerName::try_from("localhost")
                        .unwrap()
                        .to_owned(),
                    presented: vec!["DnsName(\"example.test\")".into(), "IpAddress(10.0.0.1)".into()],
                },
                "certificate is not for localhost (it names example.test, 10.0.0.1): use a URL \
                 with one of its names, or -k to skip verification",
            ),
            (
                CertificateError::UnsupportedSignatureAlgorithmContext {
                    signature_algorithm_id: vec![6, 9, 42, 134, 72, 134, 247, 13, 1, 1, 5],
                    supported_algorithms: vec![],
                },
                "certificate signed with RSA with SHA-1, an algorithm this client does not \
                 support: -k to skip verification",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(said(Error::InvalidCertificate(e)), want);
        }
    }

    #[test]
    fn other_failures_in_words() {
        assert_eq!(
            said(Error::AlertReceived(AlertDescription::HandshakeFailure)),
            "the server refused the handshake (TLS alert: handshake_failure)"
        );
        assert_eq!(
            said(Error::InvalidMessage(InvalidMessage::InvalidContentType)),
            "the server does not speak TLS on this port (an http:// port?)"
        );
        let no_h2 = io::Error::new(
            io::ErrorKind::InvalidData,
            Error::AlertReceived(AlertDescription::NoApplicationProtocol),
        );
        assert_eq!(
            describe(&no_h2, true),
            "the server does not offer HTTP/2 (ALPN h2)"
        );
        assert_eq!(
            describe(&io::ErrorKind::UnexpectedEof.into(), false),
            "the server closed the connection during the handshake"
        );
    }

    #[test]
    fn oids() {
        assert_eq!(oid(&[6, 3, 43, 101, 112]).as_deref(), Some("1.3.101.112"));
        assert_eq!(
            oid(&[6, 8, 42, 134, 72, 206, 61, 4, 3, 2]).as_deref(),
            Some("1.2.840.10045.4.3.2")
        );
        assert_eq!(oid(&[6, 9, 1]), None, "truncated");
        assert_eq!(oid(&[4, 1, 0]), None, "not an OID");
        assert_eq!(algorithm_name(&[6, 2, 42, 3]), "algorithm 1.2.3");
    }
}
