//! Client certificates in TLS handshakes (mTLS, `--client-ca`): which sites ask for one, the
//! rustls configuration each such site's handshakes get, and the choice among them by SNI.
//!
//! rustls asks for client certificates per configuration, not per name: its verifier never
//! sees the SNI. So when a site asks, a connection is accepted in two steps (rustls's
//! `Acceptor`, driven by `crate::transport`): the ClientHello is read first, its server name
//! picks the site — by the rule the router picks a site by `Host` (`crate::sitename`) — and
//! the connection goes on under that site's configuration: the one every site shares when the
//! site asks for nothing, else one per CA file and mode, with a `WebPkiClientVerifier` for the
//! CA file (`allow_unauthenticated` when the certificate is optional). A ClientHello offering
//! `acme-tls/1` is a CA's TLS-ALPN-01 validation and always gets the shared configuration.
//! When no site asks, none of this exists and a connection starts as it always did.
//!
//! Each configuration of its own has its own ticket key and session cache: a session resumed
//! under a configuration was made under it, so the certificate it carries (rustls keeps it in
//! the ticket) was verified against the same CA file; and a reload, which makes new ones,
//! cannot let a session verified against a CA file's old certificates resume.
//!
//! What a handshake's SNI cannot settle — a request whose `Host` names another site than its
//! SNI did, HTTP/2's connection coalescing — is settled per request by the site's rule
//! (`crate::client_auth`), from the CA file recorded with the certificate ([`CaTag`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::hash::{Hash, HashAlgorithm};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig};

use super::error::TlsError;
use super::managed::ACME_TLS_ALPN;

/// What a site asks of its clients' certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCaRule {
    /// PEM: the CA certificates a client certificate must chain to.
    pub file: PathBuf,
    /// A handshake without a certificate is refused (else a client may send none).
    pub required: bool,
}

/// A site as the TLS layer sees it: the names it answers to and its rule, if it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAuthSite {
    /// Host names (`example.com`, `*.example.com`), as its `server_names`.
    pub names: Vec<String>,
    pub rule: Option<ClientCaRule>,
}

/// Which CA file verified a connection's certificate, and how its fingerprint is hashed:
/// what the transport records with the connection for its requests' sites to check.
pub struct CaTag {
    /// The CA file, as the sites' rules name it.
    pub ca: Arc<Path>,
    sha256: &'static dyn Hash,
}

impl std::fmt::Debug for CaTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaTag")
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

impl CaTag {
    /// SHA-256 of `data`, with the provider's own hash.
    #[must_use]
    pub fn sha256(&self, data: &[u8]) -> Vec<u8> {
        self.sha256.hash(data).as_ref().to_vec()
    }
}

/// The configurations a handshake may get, and which site's names choose which.
#[derive(Debug)]
pub struct ClientAuthConfigs {
    /// The configuration of sites that ask for no certificate (the one `TlsContext` holds).
    plain: Arc<ServerConfig>,
    /// One per distinct rule, with the tag its connections carry.
    own: Vec<(Arc<ServerConfig>, Arc<CaTag>)>,
    /// The sites in the router's order, each with its index in `own`; the first is the
    /// default, for a ClientHello naming no site (or none at all).
    sites: Vec<(Vec<String>, Option<usize>)>,
}

impl ClientAuthConfigs {
    /// The configurations for `sites` (in the router's order, the default first), each made by
    /// `make` from a verifier; `None` when no site asks for a certificate. Every CA file is
    /// read here.
    ///
    /// # Errors
    /// A CA file that cannot be read, holds no certificate, or holds one rustls cannot use.
    pub(super) fn build(
        sites: &[ClientAuthSite],
        plain: &Arc<ServerConfig>,
        provider: &Arc<CryptoProvider>,
        make: &dyn Fn(Arc<dyn ClientCertVerifier>) -> Result<ServerConfig, TlsError>,
    ) -> Result<Option<Self>, TlsError> {
        if sites.iter().all(|s| s.rule.is_none()) {
            return Ok(None);
        }
        let sha256 = sha256_of(provider).ok_or_else(|| {
            TlsError::Setup(rustls::Error::General(
                "the TLS provider offers no SHA-256 (for client certificate fingerprints)".into(),
            ))
        })?;
        let mut rules: Vec<&ClientCaRule> = Vec::new();
        let mut own = Vec::new();
        let mut chosen = Vec::with_capacity(sites.len());
        for site in sites {
            let index = match &site.rule {
                None => None,
                Some(rule) => Some(match rules.iter().position(|r| *r == rule) {
                    Some(i) => i,
                    None => {
                        let roots = Arc::new(load_client_ca(&rule.file)?);
                        let builder = WebPkiClientVerifier::builder_with_provider(
                            roots,
                            Arc::clone(provider),
                        );
                        let builder = if rule.required {
                            builder
                        } else {
                            builder.allow_unauthenticated()
                        };
                        let verifier = builder.build().map_err(|e| TlsError::ClientCa {
                            path: rule.file.clone(),
                            reason: e.to_string(),
                        })?;
                        let tag = Arc::new(CaTag {
                            ca: Arc::from(rule.file.as_path()),
                            sha256,
                        });
                        own.push((Arc::new(make(verifier)?), tag));
                        rules.push(rule);
                        rules.len() - 1
                    }
                }),
            };
            let names = site
                .names
                .iter()
                .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
                .collect();
            chosen.push((names, index));
        }
        Ok(Some(Self {
            plain: Arc::clone(plain),
            own,
            sites: chosen,
        }))
    }

    /// The configuration of the sites that ask for no certificate.
    #[must_use]
    pub fn plain(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.plain)
    }

    /// The configuration a connection whose ClientHello is `hello` goes on under, and the tag
    /// its certificate carries when the configuration asks for one.
    #[must_use]
    pub fn choose(&self, hello: &ClientHello<'_>) -> (Arc<ServerConfig>, Option<Arc<CaTag>>) {
        let validation = hello
            .alpn()
            .is_some_and(|mut offered| offered.any(|p| p == ACME_TLS_ALPN));
        if validation {
            return (Arc::clone(&self.plain), None);
        }
        // As the router: the first of the other sites that lists the name, else the default.
        let site = hello
            .server_name()
            .and_then(|name| {
                self.sites
                    .iter()
                    .skip(1)
                    .find(|(names, _)| crate::sitename::matches(names, name))
            })
            .or(self.sites.first());
        match site.and_then(|(_, i)| *i).and_then(|i| self.own.get(i)) {
            Some((config, tag)) => (Arc::clone(config), Some(Arc::clone(tag))),
            None => (Arc::clone(&self.plain), None),
        }
    }
}

/// Reads a `--client-ca` file: every certificate in it is a trust anchor.
///
/// # Errors
/// [`TlsError`] naming the file: unreadable, no certificate in it, or one that is not usable as
/// a trust anchor.
pub fn load_client_ca(path: &Path) -> Result<RootCertStore, TlsError> {
    let bad = |reason: String| TlsError::ClientCa {
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(
            "no CERTIFICATE block in it (the PEM certificates of the CAs that issue client certificates)"
                .into(),
        ));
    }
    let mut roots = RootCertStore::empty();
    for (i, cert) in certs.into_iter().enumerate() {
        roots
            .add(cert)
            .map_err(|e| bad(format!("certificate {} is not usable as a CA: {e}", i + 1)))?;
    }
    Ok(roots)
}

/// The provider's SHA-256, found through its TLS 1.3 cipher suites (every provider has one).
fn sha256_of(provider: &CryptoProvider) -> Option<&'static dyn Hash> {
    provider
        .cipher_suites
        .iter()
        .filter_map(|s| s.tls13())
        .map(|s| s.common.hash_provider)
        .find(|h| h.algorithm() == HashAlgorithm::SHA256)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_testkit::pki::{DnType, Pki};

    /// A CA file without a certificate, one that is not there, and one with a broken block are
    /// each told with the file's name.
    #[test]
    fn bad_ca_files() {
        let pki = Pki::new();
        let leaf = pki.client("c", &[(DnType::CommonName, "c")]);
        let missing = pki.dir().join("missing.pem");
        let e = load_client_ca(&missing).unwrap_err().to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let e = load_client_ca(&leaf.key).unwrap_err().to_string();
        assert!(e.contains("c.key") && e.contains("no CERTIFICATE"), "{e}");
        let broken = pki.dir().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = load_client_ca(&broken).unwrap_err().to_string();
        assert!(e.contains("broken.pem"), "{e}");
        assert_eq!(load_client_ca(&pki.ca_path()).unwrap().len(), 1);
        // A chain (leaf then CA) is two anchors.
        assert_eq!(load_client_ca(&leaf.cert).unwrap().len(), 2);
    }

    #[test]
    fn both_providers_hash() {
        for p in [
            rustls::crypto::aws_lc_rs::default_provider(),
            rustls::crypto::ring::default_provider(),
        ] {
            let h = sha256_of(&p).unwrap();
            assert_eq!(h.hash(b"").as_ref()[..4], [0xe3, 0xb0, 0xc4, 0x42]);
        }
    }
}
