//! The transport layer: how a connection's bytes cross the socket — in clear, or through TLS.
//!
//! The HTTP/1.1 protocol layer (`conn`) sees plaintext only: [`Transport::read`] gives request
//! bytes, [`Transport::write`] takes response bytes, [`Transport::send_file`] sends a file region.
//! In clear these are `read(2)`, `write(2)`/`send(2)` and `sendfile(2)`. Over TLS a rustls
//! [`ServerConnection`] sits between: records read from the socket are decrypted into the
//! caller's buffer, plaintext written is encrypted into records that leave in one vectored write.
//!
//! Invariants the protocol layer relies on:
//! - [`Transport::read`] tells whether more may be readable without a new readiness event
//!   (`ReadResult::more`). Under edge-triggered epoll a short socket read means drained; over TLS the
//!   decrypted length says nothing about the socket, so the TLS side tracks the socket's reads.
//! - A write that is not complete means the socket is full: nothing is left undone that only
//!   another call (rather than a writable event) would do. [`Transport::has_pending`] tells
//!   whether encrypted bytes still wait for the socket.
//! - A client that speaks plain HTTP to a TLS port is detected on its first byte (a TLS record
//!   starts with 0x16, a request line with a letter); the transport then switches to clear text
//!   so that the protocol layer can answer 400 in words the client reads, as nginx does.
//!
//! When sites ask for client certificates (`crate::tls::ClientAuthConfigs`), a TLS connection is
//! first *accepting*: a rustls `Acceptor` reads its ClientHello, whose server name chooses the
//! configuration the handshake then goes on under, and the stream records which CA file
//! verified the client's certificate ([`Transport::client_cert`]). Reading goes through the
//! same one test as before (`detour`, which clear text also takes), so a server whose sites ask
//! for no certificate runs the very path it ran without this.

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::server::Acceptor;
use rustls::ServerConnection;

use crate::client_cert::ClientCert;
use crate::tls::{CaTag, ClientAuthConfigs};

/// The first byte of a TLS handshake record (RFC 8446 §5.1, `ContentType.handshake`).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Plaintext taken from a file per TLS turn: four full records, encrypted and written together.
pub(crate) const TLS_FILE_CHUNK: usize = 64 * 1024;

/// Encrypted bytes rustls may hold for a connection before `write` accepts no more: two file
/// chunks. A client that does not read is held at this, not at the size of what it asked for.
const TLS_BUFFER_LIMIT: usize = 2 * TLS_FILE_CHUNK;

/// What one [`Transport::read`] got.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadResult {
    /// Plaintext bytes placed in the buffer; 0 means the client ended the stream.
    pub(crate) n: usize,
    /// More may be readable now, without waiting for an event.
    pub(crate) more: bool,
}

/// Why a read failed in a way the protocol layer answers differently from a plain error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadFailure {
    /// Plain HTTP arrived on a TLS port; the transport is now in clear text.
    PlainHttpOnTls,
    /// Anything else: the connection is over.
    Broken,
}

/// What [`Transport::write_from`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Everything was taken.
    Done,
    /// The socket is full: wait for a writable event.
    Blocked,
    /// The connection is over.
    Failed,
}

/// A connection's socket, in clear or under TLS.
pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

/// A socket and the TLS state machine over it.
pub(crate) struct TlsStream {
    sock: TcpStream,
    tls: ServerConnection,
    /// Nothing read yet: the first byte decides between TLS and a plain-HTTP mistake.
    first_read: bool,
    /// rustls may hold decrypted plaintext not yet read: set whenever records are processed,
    /// cleared when a read leaves the caller's buffer unfilled (rustls hands out all it has)
    /// or finds nothing. When clear a read goes straight to the socket, sparing the request's
    /// second trip through rustls's reader and its `WouldBlock` (~90 instructions a request:
    /// callgrind, TLS `/plaintext`).
    buffered: bool,
    /// The client spoke plain HTTP: bypass TLS from now on (to answer 400 and close).
    cleartext: bool,
    /// Reads take another way than TLS records: `cleartext`, or `accepting`. One flag, so that
    /// the ordinary read pays the one test it paid before client certificates existed.
    detour: bool,
    /// The ClientHello is being read to choose the configuration (`tls` stands in meanwhile).
    accepting: Option<Box<Accepting>>,
    /// The configuration asked for a client certificate, verified against this CA file.
    client_ca: Option<Arc<CaTag>>,
}

/// A connection's ClientHello being read, before its configuration is chosen by name.
struct Accepting {
    acceptor: Acceptor,
    configs: Arc<ClientAuthConfigs>,
}

impl Transport {
    /// A TLS transport over a socket just accepted.
    pub(crate) fn tls(sock: TcpStream, mut tls: ServerConnection) -> Self {
        tls.set_buffer_limit(Some(TLS_BUFFER_LIMIT));
        Self::Tls(Box::new(TlsStream {
            sock,
            tls,
            first_read: true,
            buffered: true,
            cleartext: false,
            detour: false,
            accepting: None,
            client_ca: None,
        }))
    }

    /// A TLS transport whose configuration its ClientHello's server name chooses among
    /// `configs`. The shared configuration's state machine stands in until then: it is
    /// handshaking and has nothing to write, which is what the protocol layer must see.
    ///
    /// # Errors
    /// When rustls cannot start a session.
    pub(crate) fn tls_by_name(
        sock: TcpStream,
        configs: Arc<ClientAuthConfigs>,
    ) -> Result<Self, rustls::Error> {
        let stand_in = ServerConnection::new(configs.plain())?;
        Ok(Self::Tls(Box::new(TlsStream {
            sock,
            tls: stand_in,
            first_read: true,
            buffered: true,
            cleartext: false,
            detour: true,
            accepting: Some(Box::new(Accepting {
                acceptor: Acceptor::default(),
                configs,
            })),
            client_ca: None,
        })))
    }

    /// Whether the client may have presented a certificate: the connection was accepted by
    /// name (some site asks for client certificates). Only such a connection is asked for
    /// [`Transport::client_cert`], once, when its handshake is done.
    pub(crate) fn by_name(&self) -> bool {
        matches!(self, Self::Tls(t) if t.accepting.is_some() || t.client_ca.is_some())
    }

    /// The client's certificate, once the handshake is done, when its configuration asked for
    /// one and the client sent one (rustls verified it, against the CA file the description
    /// records). Worked out anew at each call: a connection asks once.
    pub(crate) fn client_cert(&self) -> Option<Rc<ClientCert>> {
        let Self::Tls(t) = self else {
            return None;
        };
        let tag = t.client_ca.as_ref()?;
        if t.detour || t.tls.is_handshaking() {
            return None;
        }
        let leaf = t.tls.peer_certificates()?.first()?;
        Some(Rc::new(ClientCert::new(
            leaf.as_ref(),
            Arc::clone(&tag.ca),
            &|data| tag.sha256(data),
        )))
    }

    /// The socket, for registering with the event loop and for shutdown.
    pub(crate) fn socket(&mut self) -> &mut TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(t) => &mut t.sock,
        }
    }

    /// Whether a TLS handshake is still under way (its own deadline applies).
    pub(crate) fn is_handshaking(&self) -> bool {
        match self {
            Self::Plain(_) => false,
            Self::Tls(t) => !t.cleartext && t.tls.is_handshaking(),
        }
    }

    /// Encrypted output waits for the socket.
    pub(crate) fn has_pending(&self) -> bool {
        match self {
            Self::Plain(_) => false,
            Self::Tls(t) => !t.cleartext && t.tls.wants_write(),
        }
    }

    /// Whether file bodies go through `sendfile(2)` (in clear) or are read and encrypted here.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(t) if !t.cleartext)
    }

    /// Reads plaintext into `buf`.
    ///
    /// # Errors
    /// `WouldBlock` when nothing is readable now; [`ReadFailure`] otherwise (through
    /// [`Transport::classify`]).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<ReadResult> {
        match self {
            Self::Plain(s) => read_plain(s, buf),
            Self::Tls(t) if t.detour => t.read_detour(buf),
            Self::Tls(t) => t.read(buf),
        }
    }

    /// What a read error means for the protocol layer.
    pub(crate) fn classify(&self, err: &io::Error) -> ReadFailure {
        match self {
            Self::Tls(t) if t.cleartext && err.kind() == io::ErrorKind::InvalidData => {
                ReadFailure::PlainHttpOnTls
            }
            _ => ReadFailure::Broken,
        }
    }

    /// Writes plaintext; `more` says that more output (a file body) follows at once, so it may
    /// wait to leave in the same segments. Returns the bytes taken; fewer than given only when
    /// the socket is full.
    ///
    /// # Errors
    /// `WouldBlock` when nothing could be taken; any other error ends the connection.
    pub(crate) fn write(&mut self, buf: &[u8], more: bool) -> io::Result<usize> {
        match self {
            Self::Plain(s) => write_plain(s, buf, more),
            Self::Tls(t) if t.cleartext => write_plain(&mut t.sock, buf, false),
            Self::Tls(t) => t.write(buf, more),
        }
    }

    /// Writes `buf[*pos..]`, after any encrypted bytes still waiting, advancing `pos`: until
    /// all of it is taken, the socket is full, or it fails. `more` as for [`Transport::write`].
    /// The one write loop of both protocols.
    pub(crate) fn write_from(&mut self, buf: &[u8], pos: &mut usize, more: bool) -> Flushed {
        match self.flush_pending() {
            Ok(true) => {}
            Ok(false) => return Flushed::Blocked,
            Err(_) => return Flushed::Failed,
        }
        while *pos < buf.len() {
            match self.write(&buf[*pos..], more) {
                Ok(0) => return Flushed::Failed,
                Ok(n) => {
                    *pos += n;
                    if *pos < buf.len() {
                        // A short write means the send buffer is full: wait for writable.
                        return Flushed::Blocked;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flushed::Blocked,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Flushed::Failed,
            }
        }
        Flushed::Done
    }

    /// Writes what TLS has encrypted but the socket did not take yet. Returns true when nothing
    /// is left.
    ///
    /// # Errors
    /// A socket error: the connection is over.
    pub(crate) fn flush_pending(&mut self) -> io::Result<bool> {
        match self {
            Self::Plain(_) => Ok(true),
            Self::Tls(t) if t.cleartext => Ok(true),
            Self::Tls(t) => t.write_pending(),
        }
    }

    /// Sends up to `len` bytes of `file` from `offset`; in clear by `sendfile(2)`, over TLS by
    /// reading a chunk into `chunk_buf` and encrypting it. Returns the bytes sent (taken, over
    /// TLS); 0 means the file ended early.
    ///
    /// # Errors
    /// `WouldBlock` when the socket is full; anything else ends the connection.
    pub(crate) fn send_file(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
        chunk_buf: &mut Vec<u8>,
    ) -> io::Result<u64> {
        match self {
            Self::Plain(s) => sendfile(s, file, offset, len),
            Self::Tls(t) if t.cleartext => sendfile(&t.sock, file, offset, len),
            Self::Tls(t) => t.send_file(file, offset, len, chunk_buf),
        }
    }

    /// Over TLS, queues a `close_notify` alert and tries once to write it: the client learns
    /// that the stream ended where we meant it to (RFC 8446 §6.1). No-op in clear.
    pub(crate) fn close_notify(&mut self) {
        if let Self::Tls(t) = self {
            if !t.cleartext {
                t.tls.send_close_notify();
                let _ = t.write_pending();
            }
        }
    }

    /// Half-closes the socket's sending side.
    pub(crate) fn shutdown_write(&mut self) {
        let _ = self.socket().shutdown(std::net::Shutdown::Write);
    }

    /// The ALPN protocol agreed, if any (`None` in clear).
    #[must_use]
    #[allow(dead_code)] // read once a second protocol is offered
    pub(crate) fn alpn(&self) -> Option<&[u8]> {
        match self {
            Self::Plain(_) => None,
            Self::Tls(t) => t.tls.alpn_protocol(),
        }
    }
}

fn read_plain(s: &mut TcpStream, buf: &mut [u8]) -> io::Result<ReadResult> {
    let n = s.read(buf)?;
    Ok(ReadResult {
        n,
        more: n == buf.len() && n > 0,
    })
}

fn write_plain(s: &mut TcpStream, buf: &[u8], more: bool) -> io::Result<usize> {
    if more {
        // The head of a file response: MSG_MORE lets it leave in the same segments as the
        // file's first bytes (nginx's `tcp_nopush`), instead of a small segment of its own.
        send_more(s, buf)
    } else {
        s.write(buf)
    }
}

/// `send(2)` with `MSG_MORE`: more data (the file) follows at once.
fn send_more(stream: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid slice for the duration of the call and the descriptor is open.
    let n = unsafe {
        libc::send(
            stream.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_MORE | libc::MSG_NOSIGNAL,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

fn sendfile(s: &TcpStream, file: &File, offset: u64, len: u64) -> io::Result<u64> {
    let mut off = libc::off_t::try_from(offset)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file offset too large"))?;
    // SAFETY: both descriptors are open for the duration of the call (borrowed here), `off` is a
    // valid `off_t` we own, and `sendfile` keeps no pointer after returning.
    let n = unsafe {
        libc::sendfile(
            s.as_raw_fd(),
            file.as_raw_fd(),
            &raw mut off,
            usize::try_from(len).unwrap_or(usize::MAX),
        )
    };
    u64::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Where reading a ClientHello got.
enum Hello {
    /// Not all of it yet: wait for the socket.
    Waiting,
    /// The client closed first.
    Closed,
    /// The handshake goes on under the configuration chosen.
    Started,
    /// The client spoke plain HTTP.
    PlainHttp,
}

impl TlsStream {
    /// A read while `detour` is set: in clear, or the ClientHello still to be read.
    #[cold]
    fn read_detour(&mut self, buf: &mut [u8]) -> io::Result<ReadResult> {
        if self.cleartext {
            return read_plain(&mut self.sock, buf);
        }
        match self.read_hello()? {
            Hello::Waiting => Err(io::ErrorKind::WouldBlock.into()),
            Hello::Closed => Ok(ReadResult { n: 0, more: false }),
            // The handshake's next records may be in the socket already.
            Hello::Started => self.read(buf),
            Hello::PlainHttp => {
                self.cleartext = true;
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "plain HTTP on a TLS port",
                ))
            }
        }
    }

    /// Reads what the socket has of the ClientHello; once it is whole, starts the handshake
    /// under the configuration its server name chooses.
    fn read_hello(&mut self) -> io::Result<Hello> {
        let Some(accepting) = self.accepting.as_deref_mut() else {
            self.detour = self.cleartext;
            return Ok(Hello::Started);
        };
        loop {
            let mut rd = SocketReader {
                sock: &mut self.sock,
                short: false,
                first: None,
            };
            let got = accepting.acceptor.read_tls(&mut rd);
            let (short, first) = (rd.short, rd.first);
            match got {
                Ok(0) => return Ok(Hello::Closed),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Hello::Waiting),
                Err(e) => return Err(e),
            }
            if self.first_read {
                if let Some(byte) = first {
                    self.first_read = false;
                    if byte != TLS_HANDSHAKE_RECORD && byte.is_ascii_alphabetic() {
                        // Answered in clear (400), as on any TLS port.
                        self.accepting = None;
                        return Ok(Hello::PlainHttp);
                    }
                }
            }
            match accepting.acceptor.accept() {
                Ok(None) if short => return Ok(Hello::Waiting),
                Ok(None) => {}
                Ok(Some(hello)) => {
                    let (config, client_ca) = accepting.configs.choose(&hello.client_hello());
                    match hello.into_connection(config) {
                        Ok(mut tls) => {
                            tls.set_buffer_limit(Some(TLS_BUFFER_LIMIT));
                            self.tls = tls;
                        }
                        Err((e, mut alert)) => {
                            let _ = alert.write_all(&mut self.sock);
                            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                        }
                    }
                    self.client_ca = client_ca;
                    self.accepting = None;
                    self.detour = false;
                    // Records after the ClientHello (a compatibility ChangeCipherSpec), then
                    // the server's flight.
                    self.buffered = true;
                    if let Err(e) = self.tls.process_new_packets() {
                        let _ = self.write_pending();
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                    self.write_pending()?;
                    return Ok(Hello::Started);
                }
                Err((e, mut alert)) => {
                    let _ = alert.write_all(&mut self.sock);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            }
        }
    }
}

/// Reads the socket for rustls, noting a short read (the socket is drained: edge-triggered
/// epoll will announce the next bytes) and the first byte of the stream.
struct SocketReader<'a> {
    sock: &'a mut TcpStream,
    short: bool,
    first: Option<u8>,
}

impl io::Read for SocketReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = self.sock.read(buf);
        match &r {
            Ok(n) => {
                self.short = *n < buf.len();
                if *n > 0 && self.first.is_none() {
                    self.first = Some(buf[0]);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.short = true,
            Err(_) => {}
        }
        r
    }
}

impl TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<ReadResult> {
        let mut socket_drained = false;
        loop {
            // Plaintext already decrypted comes first.
            if self.buffered {
                match self.tls.reader().read(buf) {
                    Ok(0) if !buf.is_empty() => return Ok(ReadResult { n: 0, more: false }),
                    Ok(n) => {
                        // A full buffer may leave plaintext behind; otherwise it is all out, and
                        // the socket decides.
                        self.buffered = n == buf.len();
                        return Ok(ReadResult {
                            n,
                            more: self.buffered || !socket_drained,
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.buffered = false,
                    // The client closed without close_notify: a truncation only matters to a
                    // peer that would act on a partial message, and a partial request is never
                    // answered.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        return Ok(ReadResult { n: 0, more: false })
                    }
                    Err(e) => return Err(e),
                }
            }
            if socket_drained {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut rd = SocketReader {
                sock: &mut self.sock,
                short: false,
                first: None,
            };
            let got = self.tls.read_tls(&mut rd);
            socket_drained = rd.short;
            let first = rd.first;
            match got {
                Ok(0) => {
                    // End of stream. Records already read are processed below; the reader then
                    // reports the close (clean or not).
                    socket_drained = true;
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            if self.first_read {
                if let Some(byte) = first {
                    self.first_read = false;
                    if byte != TLS_HANDSHAKE_RECORD && byte.is_ascii_alphabetic() {
                        self.cleartext = true;
                        self.detour = true;
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "plain HTTP on a TLS port",
                        ));
                    }
                }
            }
            self.buffered = true;
            if let Err(e) = self.tls.process_new_packets() {
                // rustls queued the alert that says why; let it out before closing.
                let _ = self.write_pending();
                if self.client_ca.is_some() {
                    // A certificate refused (unknown CA, expired, none where one is required)
                    // is the operator's question more often than any other handshake failure.
                    tracing::debug!("TLS handshake refused: {e}");
                }
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            // Handshake replies, tickets, key updates.
            self.write_pending()?;
        }
    }

    fn write(&mut self, buf: &[u8], more: bool) -> io::Result<usize> {
        let mut taken = 0;
        loop {
            taken += self.tls.writer().write(&buf[taken..])?;
            if taken == buf.len() && more {
                return Ok(taken);
            }
            if !self.write_pending()? {
                return if taken == 0 {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(taken)
                };
            }
            if taken == buf.len() {
                return Ok(taken);
            }
            // rustls stopped at its buffer limit and the socket took everything: go on.
        }
    }

    fn write_pending(&mut self) -> io::Result<bool> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn send_file(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
        chunk_buf: &mut Vec<u8>,
    ) -> io::Result<u64> {
        // Read only what rustls will take now: encrypted output still waiting means the socket
        // is full, and a chunk read now would be read again later.
        if !self.write_pending()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if chunk_buf.len() < TLS_FILE_CHUNK {
            chunk_buf.resize(TLS_FILE_CHUNK, 0);
        }
        let want = usize::try_from(len)
            .unwrap_or(usize::MAX)
            .min(TLS_FILE_CHUNK);
        let n = loop {
            match file.read_at(&mut chunk_buf[..want], offset) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            return Ok(0);
        }
        let taken = self.write(&chunk_buf[..n], false)?;
        Ok(taken as u64)
    }
}
