//! Listening sockets this process was handed when it started instead of binding them: by
//! systemd's socket activation, or by the `lowlat serve` it replaces on `kill -USR2`. Both speak
//! systemd's convention (`sd_listen_fds(3)`): descriptors from 3 on, `LISTEN_FDS` of them,
//! `LISTEN_PID` naming the process they are for, `LISTEN_FDNAMES` a colon-separated name each.
//!
//! A socket is used for the listen address it is bound to (a `--listen`, `--tls-listen` or
//! `--h3-listen` with that very address takes it instead of binding); a socket no address names
//! is added as a listener of the kind its name says — `http` (clear), `https` (TLS), `quic`
//! (HTTP/3) — so that a `.socket` unit alone can say where lowlat listens. Several sockets may be
//! bound to one address (the previous process hands over each of its workers' `SO_REUSEPORT`
//! sockets): all of them are kept, for a socket of a `SO_REUSEPORT` group that nobody accepts
//! from still gets its share of new connections.
//!
//! Beside the sockets, a USR2 hands over the QUIC hand-off channels (Unix socket pairs' ends,
//! named `quic-handoff.GENERATION.WORKER`): through them this process passes the datagrams of
//! older processes' QUIC connections to their owners (`crate::quic`).
//!
//! What it does not do: bind, or decide which worker gets which socket (`listener`).

use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The first descriptor handed over (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// The most descriptors taken: far more than any listener list, and a bound on what a bad
/// `LISTEN_FDS` can make this process touch.
const MAX_FDS: usize = 1024;

/// What a handed-over socket carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A TCP listener whose connections speak HTTP in clear.
    Clear,
    /// A TCP listener whose connections speak TLS.
    Tls,
    /// A TCP listener its name does not classify: used only where a listen address names it.
    Stream,
    /// A UDP socket (QUIC, HTTP/3), whatever its name: UDP carries nothing else here.
    Quic,
    /// The `--metrics` listener (named `metrics`), handed over on USR2.
    Metrics,
    /// The `--health` listener (named `health`), likewise.
    Health,
    /// A QUIC hand-off channel to worker `worker` of the process of generation `generation`
    /// (a Unix `SOCK_SEQPACKET` socket), handed over on USR2.
    QuicHandoff { generation: u8, worker: usize },
}

/// One handed-over socket.
#[derive(Debug)]
pub struct InheritedSocket {
    pub fd: OwnedFd,
    /// Its `LISTEN_FDNAMES` entry (`""` when none).
    pub name: String,
    pub kind: Kind,
    /// The address it is bound to (`None` for a hand-off channel: a Unix socket).
    pub addr: Option<SocketAddr>,
}

/// Why the handed-over sockets cannot be used: one line for the CLI.
#[derive(Debug, thiserror::Error)]
pub enum InheritError {
    #[error("LISTEN_FDS={0:?} is not a number of descriptors (at most 1024)")]
    BadCount(String),
    #[error("inherited descriptor {fd} ({name:?}): {reason}")]
    BadSocket {
        fd: RawFd,
        name: String,
        reason: String,
    },
}

/// The sockets handed to this process, if any: empty when `LISTEN_PID` is not this process
/// (the variables were meant for another, e.g. a parent shell). The variables are removed, so
/// that nothing this process starts takes them for its own.
///
/// # Errors
/// A `LISTEN_FDS` that is not a count, or a descriptor that is not a listening TCP socket or a
/// UDP socket.
pub fn from_env() -> Result<Vec<InheritedSocket>, InheritError> {
    let Ok(pid) = std::env::var("LISTEN_PID") else {
        return Ok(Vec::new());
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(Vec::new());
    }
    let count = std::env::var("LISTEN_FDS").unwrap_or_default();
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    // At start-up, before any thread of this process is spawned (the environment is not
    // thread-safe to change).
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    let n: usize = count
        .trim()
        .parse()
        .ok()
        .filter(|&n| n <= MAX_FDS)
        .ok_or_else(|| InheritError::BadCount(count.clone()))?;
    let names: Vec<&str> = names.split(':').collect();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let fd = LISTEN_FDS_START + RawFd::try_from(i).unwrap_or(RawFd::MAX - LISTEN_FDS_START);
        let name = names.get(i).copied().unwrap_or("").to_owned();
        out.push(take(fd, name)?);
    }
    Ok(out)
}

/// Takes descriptor `fd`: checks what it is, marks it close-on-exec (it goes to a new binary only
/// when handed over on purpose), and classifies it.
fn take(fd: RawFd, name: String) -> Result<InheritedSocket, InheritError> {
    let bad = |reason: String| InheritError::BadSocket {
        fd,
        name: name.clone(),
        reason,
    };
    // SAFETY: F_GETFD only reads the flags of `fd`; an invalid descriptor gives -1.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(bad("not open".into()));
    }
    // SAFETY: `fd` is open (checked above) and was handed to this process to own: nothing else
    // in it knows the number, so this is its only owner.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let sock = socket2::SockRef::from(&owned);
    sock.set_cloexec(true)
        .map_err(|e| bad(format!("cannot mark close-on-exec: {e}")))?;
    let ty = sock
        .r#type()
        .map_err(|e| bad(format!("not a socket: {e}")))?;
    if let Some((generation, worker)) = crate::quic::parse_handoff_name(&name) {
        if ty != socket2::Type::SEQPACKET {
            return Err(bad(
                "a QUIC hand-off channel that is not a SOCK_SEQPACKET socket".into(),
            ));
        }
        return Ok(InheritedSocket {
            fd: owned,
            name,
            kind: Kind::QuicHandoff { generation, worker },
            addr: None,
        });
    }
    let addr = sock
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .ok_or_else(|| bad("not bound to an IP address".into()))?;
    let kind = if ty == socket2::Type::DGRAM {
        Kind::Quic
    } else if ty == socket2::Type::STREAM {
        if !sock.is_listener().unwrap_or(false) {
            return Err(bad(format!("a TCP socket on {addr} that does not listen")));
        }
        match name.as_str() {
            "https" | "tls" => Kind::Tls,
            "http" | "clear" => Kind::Clear,
            "metrics" => Kind::Metrics,
            "health" => Kind::Health,
            _ => Kind::Stream,
        }
    } else {
        return Err(bad("neither a TCP nor a UDP socket".into()));
    };
    Ok(InheritedSocket {
        fd: owned,
        name,
        kind,
        addr: Some(addr),
    })
}
