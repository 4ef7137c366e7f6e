//! TLS settings for `https://` targets: the rustls client configuration a run uses (trust
//! anchors, verification, resumption, ALPN), made from [`TlsOptions`] before the run starts by
//! the setup the server's proxy shares (`lowlat-tlsclient`).
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

use std::sync::Arc;

use lowlat_tlsclient::{ClientTlsError, Setup, Trust};
use rustls::client::Resumption;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;

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
    let trust = match (opts.insecure, opts.cacert.as_deref()) {
        (true, _) => Trust::AnyCertificate,
        (false, Some(ca)) => Trust::CaFile(ca),
        (false, None) => Trust::System,
    };
    lowlat_tlsclient::client_config(&Setup {
        trust,
        tls13_only,
        // With --h2 only h2 is offered: a server that cannot speak it fails the run clearly
        // rather than measuring HTTP/1.1 under an HTTP/2 label.
        alpn: vec![if h2 {
            b"h2".to_vec()
        } else {
            b"http/1.1".to_vec()
        }],
        resumption: if opts.resume {
            Resumption::in_memory_sessions(SESSION_CACHE)
        } else {
            Resumption::disabled()
        },
        client_cert: None,
    })
    .map_err(|e| {
        LoadError::Tls(match e {
            ClientTlsError::NoRoots(_) => {
                "no trusted root certificates on this system (give --cacert FILE, or --insecure)"
                    .to_owned()
            }
            ClientTlsError::Read { .. } | ClientTlsError::Pem { .. } => format!("--cacert {e}"),
            ClientTlsError::Setup(e) => e.to_string(),
        })
    })
}

/// The name a connection asks for (SNI) and verifies the certificate against: the URL's host.
/// An IP address is verified against the certificate's IP entries and sends no SNI.
///
/// # Errors
/// A host that is neither a DNS name nor an IP address.
pub fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    lowlat_tlsclient::server_name(host)
        .ok_or_else(|| format!("{host:?} is neither a DNS name nor an IP address"))
}
