//! Certificates: reading PEM chains and keys, checking that they belong together, learning
//! which names each serves, and choosing one per handshake by the client's SNI.
//!
//! Each `--cert`/`--key` pair serves the DNS names in its certificate's subjectAltName (a
//! `*.example.com` entry serves one label under `example.com`, RFC 6125 §6.4.3). The first pair
//! is the default: it answers a client that sends no SNI (an IP address, old clients) or a name
//! no certificate lists — as nginx's default server does.
//!
//! Names whose certificates ACME obtains (`super::managed`) come before the files: a pending
//! one (no certificate yet) is refused — rustls's resolver can only decline, which rustls sends
//! as the fatal alert `access_denied`; `unrecognized_name` would need the ClientHello parsed
//! before rustls — rather than shown another site's certificate. A ClientHello offering ALPN
//! `acme-tls/1` is a CA's TLS-ALPN-01 validation: it gets the challenge certificate or nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::error::TlsError;
use super::managed::{Managed, ManagedCerts, ACME_TLS_ALPN};

/// Where one certificate and its key are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPaths {
    /// PEM: the leaf first, then the intermediates a client needs.
    pub cert: PathBuf,
    /// PEM: PKCS#8, PKCS#1 (RSA) or SEC1 (EC) private key.
    pub key: PathBuf,
}

/// One loaded certificate, with what was learned about it.
#[derive(Debug)]
pub struct LoadedCert {
    pub paths: CertPaths,
    pub key: Arc<CertifiedKey>,
    /// DNS names from subjectAltName (lower case), wildcards as `*.example.com`.
    pub names: Vec<String>,
    /// `notAfter` has passed: served anyway (the operator may be replacing it), with a warning.
    pub expired: bool,
    /// `notAfter`, as text, for the warning.
    pub not_after: String,
    /// basicConstraints says CA:TRUE (what a plain `openssl req -x509` makes): rustls clients,
    /// curl on rustls and browsers refuse such a certificate as a server's own.
    pub is_ca: bool,
}

/// The certificates in use, looked up by server name.
#[derive(Debug)]
pub struct CertStore {
    /// In the order given; the first is the default.
    pub certs: Vec<LoadedCert>,
    exact: HashMap<String, usize>,
    /// `*.example.com` is stored under `example.com`.
    wildcard: HashMap<String, usize>,
}

impl CertStore {
    /// A store without certificates: every name is ACME's (`super::managed`).
    #[must_use]
    pub fn empty() -> Self {
        Self {
            certs: Vec::new(),
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        }
    }

    /// Reads and checks every pair. The first pair given is the default certificate.
    ///
    /// # Errors
    /// [`TlsError`] naming the file at fault: missing, unreadable, no certificate or key in it,
    /// a key this provider cannot use, or a key that does not match its certificate.
    pub fn load(pairs: &[CertPaths], provider: &CryptoProvider) -> Result<Self, TlsError> {
        if pairs.is_empty() {
            return Err(TlsError::NoCertificate);
        }
        let mut certs = Vec::with_capacity(pairs.len());
        for pair in pairs {
            certs.push(load_pair(pair, provider)?);
        }
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (i, cert) in certs.iter().enumerate() {
            for name in &cert.names {
                // The first certificate to list a name keeps it.
                if let Some(parent) = name.strip_prefix("*.") {
                    wildcard.entry(parent.to_owned()).or_insert(i);
                } else {
                    exact.entry(name.clone()).or_insert(i);
                }
            }
        }
        Ok(Self {
            certs,
            exact,
            wildcard,
        })
    }

    /// The certificate for `name` (the client's SNI), or the default; `None` for a store
    /// without certificates.
    #[must_use]
    pub fn choose(&self, name: Option<&str>) -> Option<&Arc<CertifiedKey>> {
        let index = name
            .and_then(|n| {
                // rustls hands SNI over already lower-cased and without a trailing dot.
                self.exact.get(n).copied().or_else(|| {
                    let (_, parent) = n.split_once('.')?;
                    self.wildcard.get(parent).copied()
                })
            })
            .unwrap_or(0);
        self.certs.get(index).map(|c| &c.key)
    }
}

/// Chooses a certificate per handshake from a store that SIGHUP may replace. Handshakes
/// already past this point keep the certificate they got.
#[derive(Debug)]
pub struct SniResolver {
    store: RwLock<Arc<CertStore>>,
    /// ACME's certificates and challenges, when `--acme` is on.
    managed: Option<Arc<ManagedCerts>>,
}

impl SniResolver {
    pub fn new(store: CertStore, managed: Option<Arc<ManagedCerts>>) -> Self {
        Self {
            store: RwLock::new(Arc::new(store)),
            managed,
        }
    }

    /// ACME's certificates, when `--acme` is on.
    pub fn managed(&self) -> Option<&Arc<ManagedCerts>> {
        self.managed.as_ref()
    }

    /// The store in use.
    pub fn current(&self) -> Arc<CertStore> {
        Arc::clone(
            &self
                .store
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Puts a new store in place for the handshakes that follow.
    pub fn replace(&self, store: CertStore) {
        *self
            .store
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(store);
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(managed) = &self.managed {
            let name = hello.server_name();
            let validation = hello
                .alpn()
                .is_some_and(|mut offered| offered.any(|p| p == ACME_TLS_ALPN));
            if validation {
                // RFC 8737 §3: the challenge certificate, for the SNI name, or no handshake.
                return name.and_then(|n| managed.challenge(n));
            }
            if let Some(name) = name {
                match managed.lookup(name) {
                    Managed::Ready(key) => return Some(key),
                    Managed::Pending => return None,
                    Managed::No => {}
                }
            }
        }
        // One uncontended read lock per full handshake (about a millisecond of signing), never
        // per request.
        let store = self
            .store
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        store.choose(hello.server_name()).map(Arc::clone)
    }
}

fn load_pair(pair: &CertPaths, provider: &CryptoProvider) -> Result<LoadedCert, TlsError> {
    let chain = read_chain(&pair.cert)?;
    let key = read_key(&pair.key)?;
    let key = CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
            cert: pair.cert.clone(),
            key: pair.key.clone(),
        },
        other => TlsError::BadKey {
            path: pair.key.clone(),
            reason: other.to_string(),
        },
    })?;
    let (names, expired, not_after, is_ca) = inspect_leaf(&key.cert[0], &pair.cert)?;
    Ok(LoadedCert {
        paths: pair.clone(),
        key: Arc::new(key),
        names,
        expired,
        not_after,
        is_ca,
    })
}

fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_file(path)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::BadPem {
            path: path.to_owned(),
            reason: "no CERTIFICATE block in it".into(),
        });
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_file(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::BadPem {
        path: path.to_owned(),
        reason: match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "no PRIVATE KEY block in it (PKCS#8, RSA or EC)".into()
            }
            other => other.to_string(),
        },
    })
}

/// The leaf's DNS names, whether it has expired (and when it does), whether it is a CA's.
fn inspect_leaf(
    der: &CertificateDer<'_>,
    path: &Path,
) -> Result<(Vec<String>, bool, String, bool), TlsError> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| TlsError::BadPem {
        path: path.to_owned(),
        reason: format!("the first certificate does not parse: {e}"),
    })?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                names.push(dns.trim_end_matches('.').to_ascii_lowercase());
            }
        }
    }
    if names.is_empty() {
        // Only a certificate without subjectAltName is matched by its common name.
        for cn in cert.subject().iter_common_name() {
            if let Ok(cn) = cn.as_str() {
                names.push(cn.trim_end_matches('.').to_ascii_lowercase());
            }
        }
    }
    let validity = cert.validity();
    let expired = validity.time_to_expiration().is_none();
    let is_ca = cert
        .basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|bc| bc.value.ca);
    Ok((names, expired, validity.not_after.to_string(), is_ca))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_testkit::pki::{KeyKind, Pki};

    fn paths(files: &lowlat_testkit::pki::CertFiles) -> CertPaths {
        CertPaths {
            cert: files.cert.clone(),
            key: files.key.clone(),
        }
    }

    /// Exact names, one-label wildcards, and the first certificate as the default.
    #[test]
    fn sni_lookup() {
        let pki = Pki::new();
        let pairs = [
            paths(&pki.leaf("a", &["a.test"], KeyKind::EcdsaP256)),
            paths(&pki.leaf("b", &["b.test", "*.wild.test"], KeyKind::Rsa2048)),
            paths(&pki.leaf("c", &["c.test", "B.test"], KeyKind::EcdsaP256)),
        ];
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let store = CertStore::load(&pairs, &provider).unwrap();
        let idx = |name: Option<&str>| {
            let chosen = store.choose(name).unwrap();
            store
                .certs
                .iter()
                .position(|c| Arc::ptr_eq(&c.key, chosen))
                .unwrap()
        };
        assert_eq!(idx(Some("a.test")), 0);
        assert_eq!(
            idx(Some("b.test")),
            1,
            "the first certificate to list a name keeps it"
        );
        assert_eq!(idx(Some("c.test")), 2);
        assert_eq!(idx(Some("x.wild.test")), 1);
        // A wildcard covers one label only, and not the parent itself.
        assert_eq!(idx(Some("y.x.wild.test")), 0);
        assert_eq!(idx(Some("wild.test")), 0);
        assert_eq!(idx(Some("unknown.test")), 0);
        assert_eq!(idx(None), 0);
        assert!(store.certs.iter().all(|c| !c.expired));
    }

    /// Managed names come first; a pending one is refused rather than given the default; a
    /// ClientHello offering `acme-tls/1` gets the challenge certificate or nothing.
    #[test]
    fn managed_names() {
        let pki = Pki::new();
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let files = CertStore::load(
            &[paths(&pki.leaf(
                "d",
                &["d.test", "m.test"],
                KeyKind::EcdsaP256,
            ))],
            &provider,
        )
        .unwrap();
        let default = Arc::clone(&files.certs[0].key);
        let other = CertStore::load(
            &[paths(&pki.leaf("m", &["m.test"], KeyKind::EcdsaP256))],
            &provider,
        )
        .unwrap();
        let issued = Arc::clone(&other.certs[0].key);
        let managed = Arc::new(ManagedCerts::new(&["m.test".to_owned()]));
        assert!(matches!(managed.lookup("m.test"), Managed::Pending));
        assert!(matches!(managed.lookup("d.test"), Managed::No));
        managed.set("m.test", Arc::clone(&issued));
        assert!(matches!(managed.lookup("m.test"), Managed::Ready(k) if Arc::ptr_eq(&k, &issued)));
        managed.set_challenge("m.test", Arc::clone(&default));
        assert!(managed.challenge("m.test").is_some());
        managed.clear_challenge("m.test");
        assert!(managed.challenge("m.test").is_none());
        // No files at all: nothing to offer a name ACME does not manage.
        assert!(CertStore::empty().choose(Some("x.test")).is_none());
        assert!(CertStore::empty().choose(None).is_none());
    }

    /// Each bad input names its file and its fault.
    #[test]
    fn bad_pairs() {
        let pki = Pki::new();
        let a = pki.leaf("a", &["a.test"], KeyKind::EcdsaP256);
        let b = pki.leaf("b", &["b.test"], KeyKind::EcdsaP256);
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let err = |cert: &Path, key: &Path| {
            CertStore::load(
                &[CertPaths {
                    cert: cert.to_owned(),
                    key: key.to_owned(),
                }],
                &provider,
            )
            .unwrap_err()
            .to_string()
        };
        let e = err(&a.cert, &b.key);
        assert!(e.contains("does not match") && e.contains("a.crt"), "{e}");
        let missing = pki.dir().join("missing.crt");
        let e = err(&missing, &a.key);
        assert!(e.contains("missing.crt"), "{e}");
        // A key file given as the certificate, and the other way round.
        let e = err(&a.key, &a.key);
        assert!(e.contains("no CERTIFICATE"), "{e}");
        let e = err(&a.cert, &a.cert);
        assert!(e.contains("no PRIVATE KEY"), "{e}");
        let expired = pki.expired_leaf("old", &["old.test"]);
        let store = CertStore::load(&[paths(&expired)], &provider).unwrap();
        assert!(store.certs[0].expired);
    }
}
