//! TLS settings for `https://` targets: the rustls client configuration a run uses (trust
//! anchors, verification, resumption, ALPN), made from [`TlsOptions`] before the run starts.
//!
//! What this module does not do: moving bytes (the `transport` module drives each connection's
//! rustls state machine from the thread's event loop), or counting what the sessions negotiated
//! ([`crate::report::TlsSummary`]).
//!
//! - Trust: the system's root store (`rustls-native-certs`: the distribution's bundle, or
//!   `SSL_CERT_FILE`/`SSL_CERT_DIR`), or only the certificates of `--cacert`.
//! - `--insecure` (curl's `-k`) accepts any certificate and name; the handshake's signatures are
//!   still checked, so the session is at least bound to the key the server presented.
//! - Resumption: with `--tls-resume` each thread keeps a session cache shared by its
//!   connections, so every reconnect resumes (TLS 1.3 tickets, TLS 1.2 tickets or IDs); without
//!   it every connection is a full handshake.
//! - `--h3`: the same trust, TLS 1.3 only (QUIC's), ALPN `h3`, and always a session cache with
//!   early data, so that a reconnection resumes and may send its first requests as 0-RTT.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::config::TlsOptions;
use crate::error::LoadError;

/// Sessions a thread remembers for resumption: one per connection is plenty.
const SESSION_CACHE: usize = 4096;

/// Builds the client configuration for a run (ALPN `h2` with `h2`, else `http/1.1`) (one per thread, so session caches are not shared
/// across threads).
///
/// # Errors
/// [`LoadError::Tls`] for an unusable `--cacert` or an empty system root store.
pub fn client_config(opts: &TlsOptions, h2: bool) -> Result<Arc<ClientConfig>, LoadError> {
    Ok(Arc::new(rustls_config(opts, h2, false)?))
}

/// Builds the QUIC client configuration of an `--h3` run: rustls as for TLS (same provider,
/// same trust), TLS 1.3 only, ALPN `h3`, a session cache whatever `--tls-resume` says (a
/// reconnection resumes; the first handshake of each connection is a full one), and with
/// `early_data` (safe methods only) 0-RTT offered on resumption.
///
/// # Errors
/// [`LoadError::Tls`] as [`client_config`].
pub fn h3_client_config(
    opts: &TlsOptions,
    early_data: bool,
) -> Result<quinn_proto::ClientConfig, LoadError> {
    let mut cfg = rustls_config(opts, false, true)?;
    cfg.alpn_protocols = vec![b"h3".to_vec()];
    cfg.resumption = Resumption::in_memory_sessions(SESSION_CACHE);
    cfg.enable_early_data = early_data;
    let quic = quinn_proto::crypto::rustls::QuicClientConfig::try_from(cfg)
        .map_err(|e| LoadError::Tls(format!("no QUIC with this TLS configuration: {e}")))?;
    let mut client = quinn_proto::ClientConfig::new(Arc::new(quic));
    let mut transport = quinn_proto::TransportConfig::default();
    // A client is never sent requests: no bidirectional streams from the server; its
    // unidirectional ones are the control and QPACK streams (pushes are never asked for).
    transport.max_concurrent_bidi_streams(0u32.into());
    transport.max_concurrent_uni_streams(16u32.into());
    client.transport_config(Arc::new(transport));
    Ok(client)
}

fn rustls_config(opts: &TlsOptions, h2: bool, tls13_only: bool) -> Result<ClientConfig, LoadError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider));
    let builder = if tls13_only {
        builder.with_protocol_versions(&[&rustls::version::TLS13])
    } else {
        builder.with_safe_default_protocol_versions()
    }
    .map_err(|e| LoadError::Tls(e.to_string()))?;
    let mut cfg = if opts.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate { provider }))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(roots(opts.cacert.as_deref())?)
            .with_no_client_auth()
    };
    // With --h2 only h2 is offered: a server that cannot speak it fails the run clearly
    // rather than measuring HTTP/1.1 under an HTTP/2 label.
    cfg.alpn_protocols = vec![if h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    cfg.resumption = if opts.resume {
        Resumption::in_memory_sessions(SESSION_CACHE)
    } else {
        Resumption::disabled()
    };
    Ok(cfg)
}

/// The name a connection asks for (SNI) and verifies the certificate against: the URL's host.
/// An IP address is verified against the certificate's IP entries and sends no SNI.
///
/// # Errors
/// A host that is neither a DNS name nor an IP address.
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_owned()).map_err(|e| e.to_string())
}

fn roots(cacert: Option<&Path>) -> Result<RootCertStore, LoadError> {
    let mut store = RootCertStore::empty();
    if let Some(path) = cacert {
        let bytes = std::fs::read(path)
            .map_err(|e| LoadError::Tls(format!("cannot read --cacert {}: {e}", path.display())))?;
        for cert in CertificateDer::pem_slice_iter(&bytes) {
            let cert =
                cert.map_err(|e| LoadError::Tls(format!("--cacert {}: {e}", path.display())))?;
            store.add(cert).map_err(|e| {
                LoadError::Tls(format!(
                    "--cacert {}: unusable certificate: {e}",
                    path.display()
                ))
            })?;
        }
        if store.is_empty() {
            return Err(LoadError::Tls(format!(
                "--cacert {}: no CERTIFICATE in it",
                path.display()
            )));
        }
        return Ok(store);
    }
    let found = rustls_native_certs::load_native_certs();
    let (added, _ignored) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(LoadError::Tls(
            "no trusted root certificates on this system (give --cacert FILE, or --insecure)"
                .into(),
        ));
    }
    Ok(store)
}

/// `--insecure`: any certificate for any name, but signatures made with the presented key.
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
