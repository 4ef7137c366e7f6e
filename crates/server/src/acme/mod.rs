//! Automatic HTTPS: certificates obtained from an ACME CA (RFC 8555; Let's Encrypt by default),
//! stored, served and renewed by `lowlat serve` itself, as Caddy does — name the sites, and the
//! server does the rest.
//!
//! One background thread (`lowlat-acme`) runs the ACME client (instant-acme, on a
//! current-thread tokio runtime of its own); nothing on the workers' path waits on it. It talks
//! to the rest of the server through three things only:
//! - [`crate::tls::ManagedCerts`]: the certificates it obtains, looked up by the TLS resolver
//!   before the files' (a name still without one is refused), and the TLS-ALPN-01 challenge
//!   certificates (RFC 8737) shown to a validation that offers ALPN `acme-tls/1`;
//! - the HTTP-01 answers (`challenges`), served by every worker's router before any route;
//! - the state directory (`store`): account, certificates, locks shared with other processes.
//!
//! What it does not do: DNS-01, and so wildcard names (refused when the settings are checked);
//! IP address identifiers; revocation; External Account Binding.
//!
//! # Layout
//! - `client`: the thread: load, order, validate, finalize, store, publish, renew, back off.
//! - [`store`]: the state directory, atomic 0600 files, flock locks.
//! - [`challenges`]: HTTP-01 answers and TLS-ALPN-01 certificates.
//! - [`schedule`]: when to renew and when to retry.
//! - [`error`]: why an attempt failed, with the CA's problem document.

pub mod challenges;
mod client;
pub mod error;
pub mod schedule;
pub mod store;

use std::path::PathBuf;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;

use crate::tls::ManagedCerts;
pub use error::AcmeError;

/// Let's Encrypt's production directory, the default CA.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// The default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/lowlat";

/// A challenge type this server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    /// HTTP-01: a file under `/.well-known/acme-challenge/` on port 80 (the `--listen` one).
    Http01,
    /// TLS-ALPN-01: a special certificate on port 443 (the `--tls-listen` one).
    TlsAlpn01,
}

impl ChallengeKind {
    /// The name ACME gives it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Http01 => "http-01",
            Self::TlsAlpn01 => "tls-alpn-01",
        }
    }

    fn acme_type(self) -> instant_acme::ChallengeType {
        match self {
            Self::Http01 => instant_acme::ChallengeType::Http01,
            Self::TlsAlpn01 => instant_acme::ChallengeType::TlsAlpn01,
        }
    }
}

/// What the ACME client needs to know.
#[derive(Debug, Clone)]
pub struct AcmeConfig {
    /// The CA's directory URL.
    pub directory: String,
    /// Contact for the account (`mailto:` is added), optional.
    pub email: Option<String>,
    /// Where the account and the certificates are kept.
    pub state_dir: PathBuf,
    /// A root certificate (PEM) to trust for the CA's own HTTPS, instead of the system's: a
    /// staging or internal CA.
    pub ca_root: Option<PathBuf>,
    /// The challenge types to answer, in order of preference.
    pub challenges: Vec<ChallengeKind>,
    /// The names to obtain certificates for, one certificate each (lower case, no wildcard).
    pub names: Vec<String>,
}

/// Starts ACME: publishes the certificates already in the state directory (so they are served
/// from the first handshake, without asking the CA), then starts the thread that obtains the
/// missing ones and renews them all.
///
/// # Errors
/// [`AcmeError::State`] when the state directory cannot be made or used.
pub fn start(
    config: AcmeConfig,
    managed: Arc<ManagedCerts>,
    provider: Arc<CryptoProvider>,
) -> Result<(), AcmeError> {
    let manager = client::Manager::new(config, managed, provider)?;
    std::thread::Builder::new()
        .name("lowlat-acme".into())
        .spawn(move || manager.run())
        .map_err(|e| AcmeError::Other(format!("cannot start the ACME thread: {e}")))?;
    Ok(())
}
