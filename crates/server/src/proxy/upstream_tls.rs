//! TLS to `https://` upstream servers: the client configuration a group shares (whose roots
//! are trusted, the name checked, an optional client certificate, the session cache that makes
//! a pooled reconnect an abbreviated handshake; made by `lowlat-tlsclient`, which the load
//! generator uses too), the non-blocking TLS socket the engine drives beside TCP and Unix ones
//! ([`TlsSock`]), and the one-line reasons a handshake fails.
//!
//! What this module does not do: decide when to read or write — the engine does, from the
//! worker's event loop, exactly as for a clear connection. rustls is sans-I/O, so the handshake
//! is a few more turns of that loop, under the connect timeout.
//!
//! Choices:
//! - Roots: the system's (rustls-native-certs, read when the configuration is built: at start and
//!   on each reload) unless a CA file is given, which then replaces them (a private CA should not
//!   also let a public one vouch for the upstream).
//! - The name checked and sent as SNI is the URL's host unless `tls_server_name` says otherwise;
//!   an IP address is checked against the certificate's IP names and sends no SNI (RFC 6066 §3).
//! - Resumption: rustls's in-memory client cache (256 sessions per group, shared by the workers
//!   behind its own lock, touched only at a handshake). TLS 1.3 tickets and TLS 1.2 session IDs.
//! - Skipping verification is possible (`tls_insecure_skip_verify`) and loud: `--check-config`
//!   and the start warn about it. Signatures are still checked, so the handshake is real; only
//!   who the peer is goes unchecked.

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use lowlat_tlsclient::{ClientTlsError, Setup, Trust};
use mio::net::TcpStream;
use rustls::pki_types::ServerName;
use rustls::{CertificateError, ClientConfig, ClientConnection};

/// Most encrypted bytes rustls may hold unsent per upstream connection: the engine's request
/// writes stop there until the socket drains (the same bound the server side uses is 128 KiB;
/// a request rarely needs more than one record).
const SEND_BUFFER_LIMIT: usize = 64 * 1024;

/// ALPN for HTTP/1.1 upstreams: said explicitly, so that a server offering both never picks
/// HTTP/2 for a connection that will speak HTTP/1.1.
const ALPN_HTTP1: &[u8] = b"http/1.1";
/// ALPN for HTTP/2 upstreams: a server that cannot speak it refuses the handshake, which is
/// clearer than a connection that would fail at its first frame.
const ALPN_H2: &[u8] = b"h2";

/// How a group's `https://` servers are reached: from the `tls_*` keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamTlsOptions {
    /// Trust only the CAs in this PEM file, instead of the system's roots.
    pub ca: Option<PathBuf>,
    /// The name checked against the certificate and sent as SNI, instead of the URL's host.
    pub server_name: Option<String>,
    /// Accept any certificate (signatures still checked): for tests and emergencies only.
    pub insecure_skip_verify: bool,
    /// A client certificate chain and its key (PEM), presented when the upstream asks (mTLS).
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// Why a group's TLS client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamTlsError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: {reason}")]
    Pem { path: PathBuf, reason: String },
    #[error("no usable system root certificates ({0}); give a CA file with tls_ca")]
    NoRoots(String),
    #[error("{0:?} is not a valid server name for TLS")]
    ServerName(String),
    #[error("{0}")]
    Setup(#[from] rustls::Error),
}

/// What an `https://` server needs to connect: the group's configuration and the name to check.
#[derive(Debug, Clone)]
pub struct TlsTarget {
    pub config: Arc<ClientConfig>,
    pub name: ServerName<'static>,
}

impl TlsTarget {
    /// The target for a server whose URL named `host`, under `options` (`tls_server_name`
    /// replaces `host`).
    ///
    /// # Errors
    /// A name that is neither a DNS name nor an IP address.
    pub fn new(
        config: Arc<ClientConfig>,
        host: &str,
        options: &UpstreamTlsOptions,
    ) -> Result<Self, UpstreamTlsError> {
        let name = options.server_name.as_deref().unwrap_or(host);
        let name = lowlat_tlsclient::server_name(name)
            .ok_or_else(|| UpstreamTlsError::ServerName(name.to_owned()))?;
        Ok(Self { config, name })
    }
}

/// The rustls client configuration of a group's `https://` servers, offering HTTP/2 alone by
/// ALPN when `h2`, else HTTP/1.1 alone (the setup shared with the load generator,
/// `lowlat-tlsclient`).
///
/// # Errors
/// An unreadable or empty CA file, no system roots, a client certificate or key that does not
/// load or match.
pub fn client_config(
    options: &UpstreamTlsOptions,
    h2: bool,
) -> Result<Arc<ClientConfig>, UpstreamTlsError> {
    let trust = match (options.insecure_skip_verify, options.ca.as_deref()) {
        (true, _) => Trust::AnyCertificate,
        (false, Some(ca)) => Trust::CaFile(ca),
        (false, None) => Trust::System,
    };
    let config = lowlat_tlsclient::client_config(&Setup {
        trust,
        alpn: vec![if h2 { ALPN_H2 } else { ALPN_HTTP1 }.to_vec()],
        client_cert: options
            .client_cert
            .as_ref()
            .map(|(cert, key)| (cert.as_path(), key.as_path())),
        ..Setup::default()
    })?;
    Ok(Arc::new(config))
}

impl From<ClientTlsError> for UpstreamTlsError {
    fn from(e: ClientTlsError) -> Self {
        match e {
            ClientTlsError::Read { path, source } => Self::Read { path, source },
            ClientTlsError::Pem { path, reason } => Self::Pem { path, reason },
            ClientTlsError::NoRoots(why) => Self::NoRoots(why),
            ClientTlsError::Setup(e) => Self::Setup(e),
        }
    }
}

/// A TLS error as one line for the error log: what went wrong, in words, not a Rust value.
#[must_use]
pub fn describe(err: &rustls::Error) -> String {
    match err {
        rustls::Error::InvalidCertificate(e) => match e {
            CertificateError::UnknownIssuer => {
                "certificate signed by an unknown authority (not in tls_ca or the system roots)"
                    .into()
            }
            CertificateError::NotValidForName => "certificate not valid for the server name".into(),
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            } => format!(
                "certificate not valid for {expected:?} (it names {})",
                presented.join(", ")
            ),
            CertificateError::Expired => "certificate expired".into(),
            CertificateError::ExpiredContext { .. } => "certificate expired".into(),
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "certificate not valid yet".into()
            }
            CertificateError::Revoked => "certificate revoked".into(),
            CertificateError::BadSignature => {
                "bad signature on the certificate (not signed by the trusted CA of that name)"
                    .into()
            }
            CertificateError::BadEncoding => "certificate badly encoded".into(),
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                "certificate not meant for a TLS server".into()
            }
            other => format!("invalid certificate ({other})"),
        },
        rustls::Error::AlertReceived(alert) => {
            use rustls::AlertDescription as A;
            match alert {
                A::NoApplicationProtocol => "no protocol in common (ALPN): the server speaks neither the protocol asked (h2 or http/1.1)".into(),
                A::HandshakeFailure => "the server refused the handshake (no version or cipher suite in common)".into(),
                A::CertificateRequired => "the server requires a client certificate (tls_cert, tls_key)".into(),
                A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::AccessDenied => {
                    "the server refused our client certificate".into()
                }
                A::UnrecognisedName => "the server has no certificate for the name sent (SNI)".into(),
                other => format!("the server sent TLS alert {other:?}"),
            }
        }
        rustls::Error::NoApplicationProtocol => {
            "no protocol in common (ALPN): the server speaks neither the protocol asked (h2 or http/1.1)".into()
        }
        rustls::Error::PeerIncompatible(e) => format!("incompatible server: {e:?}"),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateHandshakeMessage { .. } => {
            "the server's reply is not TLS (is it an http:// server?)".into()
        }
        other => other.to_string(),
    }
}

/// A non-blocking TLS connection over TCP to an upstream server, driven by the engine.
#[derive(Debug)]
pub(crate) struct TlsSock {
    pub(crate) tcp: TcpStream,
    tls: ClientConnection,
    /// The last socket read returned less than rustls offered: the socket is drained and
    /// edge-triggered epoll will report more.
    drained: bool,
}

impl TlsSock {
    pub(crate) fn new(tcp: TcpStream, target: &TlsTarget) -> io::Result<Self> {
        let mut tls = ClientConnection::new(Arc::clone(&target.config), target.name.clone())
            .map_err(io::Error::other)?;
        tls.set_buffer_limit(Some(SEND_BUFFER_LIMIT));
        Ok(Self {
            tcp,
            tls,
            drained: false,
        })
    }

    /// Whether the handshake resumed an earlier session (no certificate sent or checked).
    pub(crate) fn resumed(&self) -> bool {
        self.tls.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
    }

    /// Advances the handshake as far as the socket allows: `Ok(true)` once it is complete,
    /// `Ok(false)` when it waits for the socket (readable or writable). A failure is an
    /// `io::Error` whose text is [`describe`]'s line.
    pub(crate) fn handshake(&mut self) -> io::Result<bool> {
        loop {
            while self.tls.wants_write() {
                match self.tls.write_tls(&mut self.tcp) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if !self.tls.is_handshaking() {
                return Ok(true);
            }
            match self.tls.read_tls(&mut self.tcp) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection during the TLS handshake",
                    ))
                }
                Ok(_) => self.process()?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Processes received records; a TLS error becomes an `io::Error` carrying its line, after
    /// the alert that tells the server why is sent (best effort).
    fn process(&mut self) -> io::Result<()> {
        if let Err(e) = self.tls.process_new_packets() {
            let _ = self.tls.write_tls(&mut self.tcp);
            return Err(io::Error::new(io::ErrorKind::InvalidData, describe(&e)));
        }
        Ok(())
    }

    /// Reads plaintext: what rustls holds, else what the socket brings. `WouldBlock` when
    /// neither has any; `Ok(0)` at the end (close_notify, or the server closing without one,
    /// which HTTP framing tells apart from a cut response as for clear connections).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            let mut counted = Counted {
                inner: &mut self.tcp,
                short: false,
            };
            match self.tls.read_tls(&mut counted) {
                Ok(0) => {
                    self.drained = true;
                    // The reader reports the end (or UnexpectedEof) on the next turn.
                    self.tls
                        .process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, describe(&e)))?;
                    return match self.tls.reader().read(buf) {
                        Ok(n) => Ok(n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                        Err(e) => Err(e),
                    };
                }
                Ok(_) => {
                    self.drained = counted.short;
                    self.process()?;
                    // Post-handshake messages (tickets, key updates) may ask for a reply.
                    if self.tls.wants_write() {
                        let _ = self.flush();
                    }
                }
                Err(e) => {
                    if e.kind() == io::ErrorKind::WouldBlock {
                        self.drained = true;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Whether a read must be tried again before waiting for the next edge: the last socket read
    /// filled what rustls offered. (Plaintext rustls still holds is not a reason: a read takes all
    /// of it that fits, so a read that did not fill the caller's buffer left none.)
    pub(crate) fn more_to_read(&self) -> bool {
        !self.drained
    }

    /// Encrypts as much of `buf` as rustls takes and sends what the socket takes. `WouldBlock`
    /// when rustls is full and the socket takes nothing.
    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            let n = self.tls.writer().write(buf)?;
            let flushed = self.flush();
            if n > 0 || buf.is_empty() {
                // Sent or buffered: a flush that blocks is finished by `flush` later.
                return match flushed {
                    Ok(_) => Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(n),
                    Err(e) => Err(e),
                };
            }
            match flushed {
                Ok(true) => {}
                Ok(false) => return Err(io::ErrorKind::WouldBlock.into()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Ends the sending side: `close_notify` (as far as the socket takes it now), then the FIN.
    pub(crate) fn shutdown_write(&mut self) {
        self.tls.send_close_notify();
        let _ = self.flush();
        let _ = self.tcp.shutdown(std::net::Shutdown::Write);
    }

    /// Sends the encrypted bytes rustls holds: `Ok(true)` when none is left.
    pub(crate) fn flush(&mut self) -> io::Result<bool> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

/// A reader that notes whether a read returned less than it was offered (the socket drained).
struct Counted<'a, R: Read> {
    inner: &'a mut R,
    short: bool,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
}
