//! TLS for `serve`: the rustls configuration every worker shares, the certificates it presents
//! (chosen by SNI, re-read on SIGHUP), and the errors a bad certificate setup gives.
//!
//! What this module does not do: moving bytes. A connection's encryption is driven by the
//! transport layer (`crate::transport`) from the worker's own event loop — rustls is a sans-I/O
//! state machine, so there is no second runtime and no thread hop. kTLS would slot in there as a
//! third transport once a handshake is done; this machine's kernel does not offer the `tls` ULP,
//! so it is not built.
//!
//! Choices, each a deliberate default:
//! - TLS 1.3 and 1.2 only, with rustls's cipher suites (AEADs with forward secrecy only: AES-GCM
//!   and ChaCha20-Poly1305).
//! - ALPN offers `h2` then `http/1.1` (or `http/1.1` alone with `--no-h2`).
//! - Resumption: stateless tickets whose key rotates (every 6 hours, the previous key still
//!   accepted) and lives only in this process — a restart invalidates them, nothing is written to
//!   disk. TLS 1.2 session IDs use a bounded in-memory cache. No 0-RTT data (replayable).
//! - One TLS 1.3 ticket per full handshake instead of rustls's two: browsers reuse one, and each
//!   costs an encryption and a record on every full handshake.

mod certs;
mod error;
mod managed;

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::ServerSessionMemoryCache;

use certs::SniResolver;
pub use certs::{CertPaths, CertStore, LoadedCert};
pub use error::TlsError;
pub use managed::{Managed, ManagedCerts, ACME_TLS_ALPN};

/// ALPN for a server that speaks HTTP/1.1 only.
pub const ALPN_HTTP1: &[&[u8]] = &[b"http/1.1"];
/// ALPN offering HTTP/2 first (rustls picks the server's first protocol the client lists).
pub const ALPN_H2_HTTP1: &[&[u8]] = &[b"h2", b"http/1.1"];

/// TLS 1.2 sessions remembered for ID-based resumption (about 100 bytes each).
const SESSION_CACHE_ENTRIES: usize = 10_240;

/// Which cryptography library rustls uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CryptoBackend {
    /// AWS-LC (BoringSSL's descendant): assembly for AES-GCM and P-256 on x86-64 and ARM.
    #[default]
    AwsLcRs,
    /// *ring*.
    Ring,
}

impl CryptoBackend {
    fn provider(self) -> CryptoProvider {
        match self {
            Self::AwsLcRs => rustls::crypto::aws_lc_rs::default_provider(),
            Self::Ring => rustls::crypto::ring::default_provider(),
        }
    }

    fn ticketer(self) -> Result<Arc<dyn rustls::server::ProducesTickets>, rustls::Error> {
        match self {
            Self::AwsLcRs => rustls::crypto::aws_lc_rs::Ticketer::new(),
            Self::Ring => rustls::crypto::ring::Ticketer::new(),
        }
    }

    /// The name used on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::AwsLcRs => "aws-lc-rs",
            Self::Ring => "ring",
        }
    }
}

/// The TLS state shared by every worker: one rustls configuration, its certificates, and the
/// files to re-read them from.
#[derive(Debug)]
pub struct TlsContext {
    config: Arc<rustls::ServerConfig>,
    resolver: Arc<SniResolver>,
    provider: Arc<CryptoProvider>,
    pairs: Vec<CertPaths>,
}

impl TlsContext {
    /// Loads the certificates and builds the configuration.
    ///
    /// # Errors
    /// [`TlsError`] for an unusable certificate or key.
    pub fn new(
        pairs: &[CertPaths],
        backend: CryptoBackend,
        alpn: &[&[u8]],
    ) -> Result<Self, TlsError> {
        Self::with_managed(pairs, backend, alpn, None)
    }

    /// [`TlsContext::new`], with certificates ACME obtains for `managed`'s names (looked up
    /// before the files'; `pairs` may then be empty) and `acme-tls/1` accepted in ALPN for
    /// TLS-ALPN-01 validations.
    ///
    /// # Errors
    /// As [`TlsContext::new`].
    pub fn with_managed(
        pairs: &[CertPaths],
        backend: CryptoBackend,
        alpn: &[&[u8]],
        managed: Option<Arc<ManagedCerts>>,
    ) -> Result<Self, TlsError> {
        let provider = Arc::new(backend.provider());
        let store = Self::load(pairs, &provider, managed.is_some())?;
        let acme = managed.is_some();
        let resolver = Arc::new(SniResolver::new(store, managed));
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(
                Arc::clone(&resolver) as Arc<dyn rustls::server::ResolvesServerCert>
            );
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        if acme {
            // Last: rustls picks its own first protocol the client offers, and only a CA's
            // validation offers this one.
            config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
        }
        config.ticketer = backend.ticketer()?;
        config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
        config.send_tls13_tickets = 1;
        Ok(Self {
            config: Arc::new(config),
            resolver,
            provider,
            pairs: pairs.to_vec(),
        })
    }

    fn load(
        pairs: &[CertPaths],
        provider: &CryptoProvider,
        managed: bool,
    ) -> Result<CertStore, TlsError> {
        if pairs.is_empty() && managed {
            Ok(CertStore::empty())
        } else {
            CertStore::load(pairs, provider)
        }
    }

    /// ACME's certificates, when `--acme` is on.
    #[must_use]
    pub fn managed(&self) -> Option<&Arc<ManagedCerts>> {
        self.resolver.managed()
    }

    /// The cryptography provider the certificates' keys are loaded with.
    #[must_use]
    pub fn provider(&self) -> &Arc<CryptoProvider> {
        &self.provider
    }

    /// The certificates now in use.
    #[must_use]
    pub fn certificates(&self) -> Arc<CertStore> {
        self.resolver.current()
    }

    /// Re-reads every certificate and key from the same files. On success new handshakes get
    /// them (connections already open keep theirs); on failure the old ones stay in use.
    ///
    /// # Errors
    /// As [`TlsContext::new`], for the first unusable pair.
    pub fn reload(&self) -> Result<Arc<CertStore>, TlsError> {
        let store = Self::load(&self.pairs, &self.provider, self.managed().is_some())?;
        self.resolver.replace(store);
        Ok(self.resolver.current())
    }

    /// The rustls configuration for QUIC (`--h3-listen`): the same certificates (chosen by SNI,
    /// re-read on reload) and cryptography provider, TLS 1.3 only (RFC 9001 §4.2), ALPN `alpn`,
    /// no 0-RTT (replayable requests), its own ticket key.
    ///
    /// # Errors
    /// When the provider offers no TLS 1.3 or no ticket key can be made.
    pub fn quic_config(&self, alpn: &[&[u8]]) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_cert_resolver(
                Arc::clone(&self.resolver) as Arc<dyn rustls::server::ResolvesServerCert>
            );
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        // Resumption by session id kept here (a bounded cache, each id usable once), not by
        // stateless ticket: rustls allows 0-RTT only then (RFC 8446 §8.1, a ticket that can be
        // used once cannot be replayed against this process).
        config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
        config.send_tls13_tickets = 1;
        // 0-RTT (QUIC asks for all or nothing: u32::MAX). What comes in it can still be replayed
        // against another server sharing nothing with this one, so the HTTP/3 layer answers only
        // safe methods before the handshake completes (`crate::h3`).
        config.max_early_data_size = u32::MAX;
        Ok(Arc::new(config))
    }

    /// A server-side TLS state machine for a connection just accepted.
    pub(crate) fn accept(&self) -> Result<rustls::ServerConnection, rustls::Error> {
        rustls::ServerConnection::new(Arc::clone(&self.config))
    }
}
