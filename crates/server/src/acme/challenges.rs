//! Answering the CA's challenges: HTTP-01 (RFC 8555 §8.3) from the workers' routers, TLS-ALPN-01
//! (RFC 8737) from the TLS certificate resolver.
//!
//! HTTP-01 key authorizations sit in one process-wide map (token → key authorization): the
//! routers that answer them are rebuilt on every SIGHUP while the ACME thread lives on, and
//! tokens are random, so one map serves every router of the process. A token not in it is looked
//! for in the state directory, where another lowlat process sharing it publishes its own: the CA
//! may reach either process on the shared port. The map is read only for paths under
//! `/.well-known/acme-challenge/`, never on another request's path.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use super::error::AcmeError;
use crate::handler::{Handler, Req, Response};
use lowlat_http::request::Method;

/// Where HTTP-01 asks (RFC 8555 §8.3).
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";
/// Longest token accepted (Let's Encrypt's are 43 characters).
const MAX_TOKEN: usize = 128;
/// Largest key authorization read from another process's file.
const MAX_KEY_AUTHORIZATION: u64 = 512;

static HTTP01: LazyLock<RwLock<HashMap<String, String>>> = LazyLock::new(RwLock::default);

/// Publishes an HTTP-01 answer.
pub fn publish_http01(token: &str, key_authorization: &str) {
    HTTP01
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(token.to_owned(), key_authorization.to_owned());
}

/// Withdraws an HTTP-01 answer.
pub fn withdraw_http01(token: &str) {
    HTTP01
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(token);
}

/// A token is base64url (RFC 8555 §8.1): anything else is no token of ours, and never a path.
fn valid_token(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= MAX_TOKEN
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Answers `GET /.well-known/acme-challenge/TOKEN` with the key authorization, on every site
/// and before any other route.
#[derive(Debug, Clone)]
pub struct Http01Handler {
    /// Where other processes sharing the state directory publish theirs.
    shared: PathBuf,
}

impl Http01Handler {
    #[must_use]
    pub fn new(shared: PathBuf) -> Self {
        Self { shared }
    }

    fn find(&self, token: &str) -> Option<String> {
        if let Some(found) = HTTP01
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
        {
            return Some(found.clone());
        }
        let file = std::fs::File::open(self.shared.join(token)).ok()?;
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(file, MAX_KEY_AUTHORIZATION),
            &mut text,
        )
        .ok()?;
        Some(text)
    }
}

impl Handler for Http01Handler {
    fn handle(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
        if !matches!(req.method(), Method::Get | Method::Head) {
            res.send_status_with(405, b"Allow: GET, HEAD\r\n");
            return;
        }
        let token = req.path().strip_prefix(HTTP01_PREFIX).unwrap_or_default();
        match valid_token(token).then(|| self.find(token)).flatten() {
            Some(answer) => res.send(200, b"application/octet-stream", answer.as_bytes()),
            None => res.send_status(404),
        }
    }
}

/// The TLS-ALPN-01 certificate for `name` (RFC 8737 §3): self-signed, the name as its only
/// subjectAltName, and the critical acmeIdentifier extension holding the SHA-256 digest of the
/// key authorization.
///
/// # Errors
/// [`AcmeError::Other`] when it cannot be made (no usable key type in this provider).
pub fn tls_alpn01_cert(
    name: &str,
    digest: &[u8],
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, AcmeError> {
    let fail = |e: &dyn std::fmt::Display| {
        AcmeError::Other(format!("cannot make the TLS-ALPN-01 certificate: {e}"))
    };
    let key = rcgen::KeyPair::generate().map_err(|e| fail(&e))?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).map_err(|e| fail(&e))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .custom_extensions
        .push(rcgen::CustomExtension::new_acme_identifier(digest));
    let cert = params.self_signed(&key).map_err(|e| fail(&e))?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    // Not `CertifiedKey::from_der`: its check parses the certificate with webpki, which refuses
    // the critical extension a validation needs.
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| fail(&e))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![CertificateDer::from(cert.der().to_vec())],
        signing,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only base64url tokens are looked up, so no path reaches outside the challenges folder.
    #[test]
    fn tokens() {
        for good in ["abc", "A-b_9", &"x".repeat(MAX_TOKEN)] {
            assert!(valid_token(good), "{good}");
        }
        for bad in [
            "",
            "..",
            "../x",
            "a/b",
            "a.b",
            "a%2f",
            &"x".repeat(MAX_TOKEN + 1),
        ] {
            assert!(!valid_token(bad), "{bad}");
        }
    }

    /// Another process's published answer is found through the shared folder.
    #[test]
    fn shared_answers() {
        let dir = tempfile::tempdir().unwrap();
        let handler = Http01Handler::new(dir.path().to_owned());
        assert_eq!(handler.find("t1"), None);
        std::fs::write(dir.path().join("t1"), "t1.thumb").unwrap();
        assert_eq!(handler.find("t1").as_deref(), Some("t1.thumb"));
        publish_http01("t2", "t2.thumb");
        assert_eq!(handler.find("t2").as_deref(), Some("t2.thumb"));
        withdraw_http01("t2");
        assert_eq!(handler.find("t2"), None);
    }

    /// The challenge certificate carries the name and the critical acmeIdentifier (RFC 8737).
    #[test]
    fn alpn_certificate() {
        use x509_parser::prelude::{FromDer, X509Certificate};
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let digest = [7u8; 32];
        let key = tls_alpn01_cert("a.test", &digest, &provider).unwrap();
        let (_, cert) = X509Certificate::from_der(&key.cert[0]).unwrap();
        let ext = cert
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .expect("acmeIdentifier");
        assert!(ext.critical);
        // DER OCTET STRING of the 32-byte digest.
        assert_eq!(&ext.value[..2], &[0x04, 32]);
        assert_eq!(&ext.value[2..], &digest);
    }
}
