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
//! - No client certificates, unless a site asks for them (`--client-ca`): then that site's
//!   handshakes, chosen by SNI, get a configuration of their own ([`client_auth`]).

mod certs;
mod client_auth;
mod error;
mod managed;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::ServerSessionMemoryCache;

use certs::SniResolver;
pub use certs::{CertPaths, CertStore, LoadedCert};
pub use client_auth::{load_client_ca, CaTag, ClientAuthConfigs, ClientAuthSite, ClientCaRule};
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
/// files to re-read them from; and, when sites ask for client certificates, their own
/// configurations.
#[derive(Debug)]
pub struct TlsContext {
    config: Arc<rustls::ServerConfig>,
    resolver: Arc<SniResolver>,
    provider: Arc<CryptoProvider>,
    backend: CryptoBackend,
    alpn: Vec<Vec<u8>>,
    pairs: Vec<CertPaths>,
    /// The sites' client-certificate rules, to build (and on reload re-build) `by_name` from.
    sites: Mutex<Vec<ClientAuthSite>>,
    /// Some site asks for a certificate: connections are accepted by name (`by_name`). A
    /// flag read before the lock, so that a server whose sites ask for none takes no lock.
    asks: AtomicBool,
    by_name: RwLock<Option<Arc<ClientAuthConfigs>>>,
}

/// How a connection just accepted starts its TLS.
// Returned once per connection and moved at once into its transport's box, as the bare
// `ServerConnection` was before: boxing it here would be a second allocation per connection.
#[allow(clippy::large_enum_variant)]
pub enum Accept {
    /// At once, under the shared configuration.
    Session(rustls::ServerConnection),
    /// After its ClientHello, under the configuration its server name chooses.
    ByName(Arc<ClientAuthConfigs>),
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
        let resolver = Arc::new(SniResolver::new(store, managed));
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let config = server_config(&provider, backend, &resolver, &alpn, None)?;
        Ok(Self {
            config: Arc::new(config),
            resolver,
            provider,
            backend,
            alpn,
            pairs: pairs.to_vec(),
            sites: Mutex::new(Vec::new()),
            asks: AtomicBool::new(false),
            by_name: RwLock::new(None),
        })
    }

    /// Asks for client certificates as `sites` say (in the router's order, the default site
    /// first), from the next handshake on; every CA file is read now. On failure nothing
    /// changes.
    ///
    /// # Errors
    /// A CA file that cannot be read or used, named.
    pub fn set_client_auth(&self, sites: Vec<ClientAuthSite>) -> Result<(), TlsError> {
        let built = self.client_auth_configs(&sites)?;
        self.install(built);
        *self.sites.lock().unwrap_or_else(PoisonError::into_inner) = sites;
        Ok(())
    }

    fn client_auth_configs(
        &self,
        sites: &[ClientAuthSite],
    ) -> Result<Option<Arc<ClientAuthConfigs>>, TlsError> {
        let make = |verifier: Arc<dyn ClientCertVerifier>| {
            server_config(
                &self.provider,
                self.backend,
                &self.resolver,
                &self.alpn,
                Some(verifier),
            )
        };
        Ok(ClientAuthConfigs::build(sites, &self.config, &self.provider, &make)?.map(Arc::new))
    }

    fn install(&self, built: Option<Arc<ClientAuthConfigs>>) {
        let asks = built.is_some();
        *self.by_name.write().unwrap_or_else(PoisonError::into_inner) = built;
        self.asks.store(asks, Ordering::Release);
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
        // The CA files too, checked before anything is replaced.
        let sites = self
            .sites
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let client_auth = self.client_auth_configs(&sites)?;
        self.resolver.replace(store);
        self.install(client_auth);
        Ok(self.resolver.current())
    }

    /// Whether some site asks for client certificates.
    #[must_use]
    pub fn asks_client_certs(&self) -> bool {
        self.asks.load(Ordering::Acquire)
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

    /// How a connection just accepted starts: a server-side TLS state machine at once, or —
    /// when sites ask for client certificates — once its ClientHello has named a site.
    pub(crate) fn accept(&self) -> Result<Accept, rustls::Error> {
        // One relaxed-cost load per connection when no site asks; the lock only when one does.
        if self.asks.load(Ordering::Acquire) {
            let by_name = self
                .by_name
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if let Some(by_name) = by_name {
                return Ok(Accept::ByName(by_name));
            }
        }
        rustls::ServerConnection::new(Arc::clone(&self.config)).map(Accept::Session)
    }
}

/// The server configuration every handshake gets (`verifier: None`), or the one of the sites that
/// ask for client certificates verified by `verifier`: the same certificates, versions and
/// ALPN, and a ticket key and session cache of its own.
fn server_config(
    provider: &Arc<CryptoProvider>,
    backend: CryptoBackend,
    resolver: &Arc<SniResolver>,
    alpn: &[Vec<u8>],
    verifier: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<rustls::ServerConfig, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match verifier {
        None => builder.with_no_client_auth(),
        Some(v) => builder.with_client_cert_verifier(v),
    };
    let mut config = builder
        .with_cert_resolver(Arc::clone(resolver) as Arc<dyn rustls::server::ResolvesServerCert>);
    config.alpn_protocols = alpn.to_vec();
    if resolver.managed().is_some() {
        // Last: rustls picks its own first protocol the client offers, and only a CA's
        // validation offers this one.
        config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
    config.ticketer = backend.ticketer()?;
    config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
    config.send_tls13_tickets = 1;
    Ok(config)
}
