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
//! - `config`: what the client is told: the CA, the names, the challenge types, the state dir.
//! - [`schedule`]: when to renew and when to retry.
//! - [`error`]: why an attempt failed, with the CA's problem document.
//! - `http`: the client's HTTPS, which keeps the CA's `Retry-After`.

pub mod challenges;
mod client;
mod config;
pub mod error;
mod http;
pub mod schedule;
pub mod store;

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

use crate::tls::ManagedCerts;
pub use config::{AcmeConfig, ChallengeKind};
pub use error::AcmeError;

/// Let's Encrypt's production directory, the default CA.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// The default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/lowlat";

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
