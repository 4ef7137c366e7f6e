//! lowlat's rustls client setup, written once for the two clients the workspace has: the proxy's
//! `https://` upstreams (`lowlat-server`) and the load generator's `https://` targets
//! (`lowlat-load`). It makes a [`rustls::ClientConfig`] from what the caller's flags or keys
//! said: whose certificates are trusted (the system's roots, a CA file that replaces them, or —
//! for tests and emergencies — any certificate, its handshake signatures still checked), the
//! protocol versions, ALPN, resumption and an optional client certificate.
//!
//! It is a crate of its own because the server and the load generator share only `lowlat-http`,
//! which is I/O-free: this reads files (a CA file, a client key, the system's root store).
//!
//! What it does not do: move bytes (each caller drives rustls's state machine from its own
//! event loop), word errors for a command line or a config file (each caller does, from the
//! typed [`ClientTlsError`]), or choose the crypto provider: AWS-LC, which both callers use.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Whose certificates a client trusts.
#[derive(Debug, Clone, Copy)]
pub enum Trust<'a> {
    /// The system's root store (`rustls-native-certs`: the distribution's bundle, or
    /// `SSL_CERT_FILE`/`SSL_CERT_DIR`), read when the configuration is made.
    System,
    /// Only the CA certificates in this PEM file: a private CA should not also let a public
    /// one vouch for the server.
    CaFile(&'a Path),
    /// Any certificate for any name; the handshake's signatures are still checked, so the
    /// session is bound to the key the server presented. For tests and emergencies.
    AnyCertificate,
}

/// What a client configuration is made of.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    pub trust: Trust<'a>,
    /// TLS 1.3 alone (QUIC's), instead of rustls's safe defaults (1.2 and 1.3).
    pub tls13_only: bool,
    /// The protocols offered by ALPN, in order of preference.
    pub alpn: Vec<Vec<u8>>,
    /// How sessions are resumed (rustls's default: an in-memory cache of 256 sessions).
    pub resumption: Resumption,
    /// A client certificate chain and its key (PEM files), presented when the server asks.
    pub client_cert: Option<(&'a Path, &'a Path)>,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Self {
            trust: Trust::System,
            tls13_only: false,
            alpn: Vec::new(),
            resumption: Resumption::default(),
            client_cert: None,
        }
    }
}

/// Why a client configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// A PEM file without what it should hold, or with something unusable in it.
    #[error("{path}: {reason}")]
    Pem { path: PathBuf, reason: String },
    /// The system's root store gave no certificate rustls can use (why, when it said).
    #[error("no usable system root certificates ({0})")]
    NoRoots(String),
    #[error("{0}")]
    Setup(#[from] rustls::Error),
}

/// The rustls client configuration `setup` describes, with AWS-LC's crypto.
///
/// # Errors
/// An unreadable or empty CA file, no system roots, a client certificate or key that does not
/// load or match.
pub fn client_config(setup: &Setup<'_>) -> Result<ClientConfig, ClientTlsError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    // AWS-LC seeds its random generator on first use from CPU jitter, a tenth of a second or
    // more of work once per process: paid here, at setup, rather than by the first handshake
    // (which `lowlat load` would charge to the first requests' latency).
    provider
        .secure_random
        .fill(&mut [0; 1])
        .map_err(rustls::Error::from)?;
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider));
    let builder = if setup.tls13_only {
        builder.with_protocol_versions(&[&rustls::version::TLS13])?
    } else {
        builder.with_safe_default_protocol_versions()?
    };
    let builder = match setup.trust {
        Trust::AnyCertificate => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate { provider })),
        Trust::System => builder.with_root_certificates(roots(None)?),
        Trust::CaFile(path) => builder.with_root_certificates(roots(Some(path))?),
    };
    let mut config = match setup.client_cert {
        Some((cert, key)) => {
            let chain = read_certs(cert)?;
            let pem = read(key)?;
            let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| ClientTlsError::Pem {
                path: key.to_owned(),
                reason: format!("no private key: {e}"),
            })?;
            builder.with_client_auth_cert(chain, key)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols.clone_from(&setup.alpn);
    config.resumption = setup.resumption.clone();
    Ok(config)
}

/// The name a connection sends (SNI) and checks the certificate against, from a URL's host:
/// `[::1]` is `::1` to the certificate, and an IP address is checked against the
/// certificate's IP entries and sends no SNI (RFC 6066 §3). `None` for a host that is neither
/// a DNS name nor an IP address.
#[must_use]
pub fn server_name(host: &str) -> Option<ServerName<'static>> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_owned()).ok()
}

fn read(path: &Path) -> Result<Vec<u8>, ClientTlsError> {
    std::fs::read(path).map_err(|source| ClientTlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The certificates of a PEM file, at least one.
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ClientTlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ClientTlsError::Pem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(ClientTlsError::Pem {
            path: path.to_owned(),
            reason: "no certificate in it (expected PEM: -----BEGIN CERTIFICATE-----)".into(),
        });
    }
    Ok(certs)
}

/// The CA file's certificates, or the system's roots.
fn roots(ca: Option<&Path>) -> Result<RootCertStore, ClientTlsError> {
    let mut store = RootCertStore::empty();
    if let Some(path) = ca {
        for cert in read_certs(path)? {
            store.add(cert).map_err(|e| ClientTlsError::Pem {
                path: path.to_owned(),
                reason: format!("not a usable CA certificate: {e}"),
            })?;
        }
        return Ok(store);
    }
    let found = rustls_native_certs::load_native_certs();
    let (added, _ignored) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_owned(), ToString::to_string);
        return Err(ClientTlsError::NoRoots(why));
    }
    Ok(store)
}

/// [`Trust::AnyCertificate`]: any certificate for any name, but signatures made with the
/// presented key.
#[derive(Debug)]
struct AcceptAnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_testkit::pki::{KeyKind, Pki};

    /// A CA file is read (its certificates replace the system's), ALPN is as asked; a file
    /// without a certificate and a missing file are told by path.
    #[test]
    fn setups() {
        let pki = Pki::new();
        let ca = pki.ca_path();
        let config = client_config(&Setup {
            trust: Trust::CaFile(&ca),
            tls13_only: true,
            alpn: vec![b"h3".to_vec()],
            ..Setup::default()
        })
        .unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h3".to_vec()]);

        let empty = pki.dir().join("empty.pem");
        std::fs::write(&empty, "nothing here\n").unwrap();
        let e = client_config(&Setup {
            trust: Trust::CaFile(&empty),
            ..Setup::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("no certificate in it"), "{e}");
        assert!(e.to_string().contains("empty.pem"), "{e}");

        let missing = pki.dir().join("missing.pem");
        let e = client_config(&Setup {
            trust: Trust::CaFile(&missing),
            ..Setup::default()
        })
        .unwrap_err();
        assert!(matches!(e, ClientTlsError::Read { .. }), "{e}");

        // Nothing to read: no CA file, and the system's store is not asked.
        let any = client_config(&Setup {
            trust: Trust::AnyCertificate,
            alpn: vec![b"h2".to_vec()],
            ..Setup::default()
        })
        .unwrap();
        assert_eq!(any.alpn_protocols, vec![b"h2".to_vec()]);
    }

    /// A client certificate and its key are loaded together; a key file without a key is told.
    #[test]
    fn client_certificates() {
        let pki = Pki::new();
        let ca = pki.ca_path();
        let leaf = pki.leaf("client", &["client.test"], KeyKind::EcdsaP256);
        let ok = client_config(&Setup {
            trust: Trust::CaFile(&ca),
            client_cert: Some((&leaf.cert, &leaf.key)),
            ..Setup::default()
        });
        assert!(ok.is_ok(), "{:?}", ok.err());
        let e = client_config(&Setup {
            trust: Trust::CaFile(&ca),
            client_cert: Some((&leaf.cert, &leaf.cert)),
            ..Setup::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("no private key"), "{e}");
    }

    /// Host names and addresses, bracketed or not; a name that is neither is refused.
    #[test]
    fn server_names() {
        assert!(matches!(
            server_name("example.com"),
            Some(ServerName::DnsName(_))
        ));
        assert!(matches!(
            server_name("[::1]"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("127.0.0.1"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(server_name("bad name").is_none());
    }
}
