//! Why TLS could not be set up ([`TlsError`]): each variant names the file at fault.

use std::path::PathBuf;

/// Why TLS could not be set up. Every variant names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("no certificate: --tls-listen needs --cert and --key")]
    NoCertificate,
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    BadPem { path: PathBuf, reason: String },
    #[error("{}: unusable private key: {reason}", path.display())]
    BadKey { path: PathBuf, reason: String },
    #[error("the key in {} does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("--client-ca {}: {reason}", path.display())]
    ClientCa { path: PathBuf, reason: String },
    #[error("TLS setup failed: {0}")]
    Setup(#[from] rustls::Error),
}
