//! One connection's bytes on the socket: in clear, or through a rustls client session.
//!
//! The loop in `worker` sees plaintext only. [`Stream::read`] returns decrypted response bytes
//! and whether the socket may hold more without a new event (a short *socket* read means
//! drained under edge-triggered epoll, whatever the plaintext length); [`Stream::write`] takes a
//! batch of requests and sends it as one vectored write of TLS records. Encrypted bytes the
//! socket did not take wait in rustls ([`Stream::has_pending`]) for the next writable event.

use std::io::{self, Read as _, Write as _};

use mio::net::TcpStream;
use rustls::ClientConnection;

/// Encrypted output rustls may hold for one connection: a full pipelined batch at the largest
/// depth fits, and a server that stops reading holds the loader at this.
const TLS_BUFFER_LIMIT: usize = 256 * 1024;

/// What one [`Stream::read`] got.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadResult {
    /// Plaintext bytes; 0 means the server ended the stream.
    pub n: usize,
    /// More may be readable now.
    pub more: bool,
}

/// Where a handshake stands after some progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// Waiting for the server.
    Pending,
    /// Done: requests may be sent.
    Done,
}

pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<(TcpStream, ClientConnection)>),
}

impl Stream {
    pub(crate) fn tls(sock: TcpStream, mut conn: ClientConnection) -> Self {
        conn.set_buffer_limit(Some(TLS_BUFFER_LIMIT));
        Self::Tls(Box::new((sock, conn)))
    }

    pub(crate) fn socket(&mut self) -> &mut TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(t) => &mut t.0,
        }
    }

    /// The TLS session, once there is one.
    pub(crate) fn session(&self) -> Option<&ClientConnection> {
        match self {
            Self::Plain(_) => None,
            Self::Tls(t) => Some(&t.1),
        }
    }

    pub(crate) fn has_pending(&self) -> bool {
        matches!(self, Self::Tls(t) if t.1.wants_write())
    }

    /// Makes handshake progress: writes what rustls has to say, reads and processes what the
    /// server sent.
    ///
    /// # Errors
    /// The socket failed, or the handshake did (bad certificate, alert, not TLS at all).
    pub(crate) fn handshake(&mut self) -> io::Result<Handshake> {
        let Self::Tls(t) = self else {
            return Ok(Handshake::Done);
        };
        let (sock, conn) = &mut **t;
        loop {
            write_pending(sock, conn)?;
            if !conn.is_handshaking() {
                return Ok(Handshake::Done);
            }
            match conn.read_tls(sock) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {
                    if let Err(e) = conn.process_new_packets() {
                        let _ = write_pending(sock, conn);
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(if conn.is_handshaking() {
                        Handshake::Pending
                    } else {
                        Handshake::Done
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads response bytes.
    ///
    /// # Errors
    /// `WouldBlock` when nothing is readable now; anything else ends the connection.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<ReadResult> {
        match self {
            Self::Plain(s) => {
                let n = s.read(buf)?;
                Ok(ReadResult {
                    n,
                    more: n == buf.len(),
                })
            }
            Self::Tls(t) => {
                let (sock, conn) = &mut **t;
                read_tls(sock, conn, buf)
            }
        }
    }

    /// Writes a batch of requests; returns the bytes taken (fewer only when the socket is full).
    ///
    /// # Errors
    /// `WouldBlock` when nothing could be taken; anything else ends the connection.
    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(t) => {
                let (sock, conn) = &mut **t;
                if !write_pending(sock, conn)? {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                let mut taken = 0;
                loop {
                    taken += conn.writer().write(&buf[taken..])?;
                    if !write_pending(sock, conn)? || taken == buf.len() {
                        return Ok(taken);
                    }
                }
            }
        }
    }

    /// Writes encrypted bytes waiting for the socket; true when none are left.
    ///
    /// # Errors
    /// A socket error.
    pub(crate) fn flush_pending(&mut self) -> io::Result<bool> {
        match self {
            Self::Plain(_) => Ok(true),
            Self::Tls(t) => {
                let (sock, conn) = &mut **t;
                write_pending(sock, conn)
            }
        }
    }
}

fn write_pending(sock: &mut TcpStream, conn: &mut ClientConnection) -> io::Result<bool> {
    while conn.wants_write() {
        match conn.write_tls(sock) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads the socket for rustls, noting whether a read came back short (drained).
struct SocketReader<'a> {
    sock: &'a mut TcpStream,
    short: bool,
}

impl io::Read for SocketReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = self.sock.read(buf);
        match &r {
            Ok(n) => self.short = *n < buf.len(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.short = true,
            Err(_) => {}
        }
        r
    }
}

fn read_tls(
    sock: &mut TcpStream,
    conn: &mut ClientConnection,
    buf: &mut [u8],
) -> io::Result<ReadResult> {
    let mut drained = false;
    loop {
        match conn.reader().read(buf) {
            Ok(0) if !buf.is_empty() => return Ok(ReadResult { n: 0, more: false }),
            Ok(n) => {
                return Ok(ReadResult {
                    n,
                    more: n == buf.len() || !drained,
                })
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            // A TCP close without close_notify: for HTTP/1.1 with framed bodies, an end of
            // stream like any other (the response reader decides whether it came too early).
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Ok(ReadResult { n: 0, more: false })
            }
            Err(e) => return Err(e),
        }
        if drained {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut rd = SocketReader { sock, short: false };
        let got = conn.read_tls(&mut rd);
        drained = rd.short;
        match got {
            Ok(0) => drained = true,
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        if let Err(e) = conn.process_new_packets() {
            let _ = write_pending(sock, conn);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        // Key updates, alerts.
        write_pending(sock, conn)?;
    }
}
