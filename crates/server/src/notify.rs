//! systemd's service notification protocol (`sd_notify(3)`), for a unit with `Type=notify`: the
//! process says when it serves (`READY=1`), when it reloads (`RELOADING=1`, then `READY=1`),
//! when it stops (`STOPPING=1`), and — on a USR2 upgrade — which process is now the service's
//! main one (`MAINPID=`).
//!
//! The protocol is one Unix datagram per notification, `KEY=VALUE` lines, sent to the socket
//! `NOTIFY_SOCKET` names: a path, or an abstract address written with a leading `@`. Nothing
//! answers; a lost notification is the service manager's to time out, so sending is best effort
//! and never blocks the server.
//!
//! Why `MAINPID`: systemd watches one main process; when it exits, the service is over (and its
//! other processes are killed). A USR2 upgrade starts the new binary as a child of the old one,
//! which then drains and exits. So the old process, once the new one reports that it serves,
//! tells systemd that the new one is the main process — it may, being the main process still,
//! under the default `NotifyAccess=main` — and from then on only the new one notifies: the old
//! one, draining, says nothing more (a `STOPPING=1` from it would read as the service stopping).
//!
//! `NOTIFY_SOCKET` is left in the environment (unlike `sd_notify`'s `unset_environment`): the
//! process a USR2 starts inherits it and notifies in its turn.
//!
//! What it does not do: the watchdog (`WATCHDOG=1`), or any protocol but a Unix socket (systemd
//! 254's `vsock:` addresses are ignored, with a warning).

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable naming the service manager's socket.
pub const NOTIFY_SOCKET_VAR: &str = "NOTIFY_SOCKET";

/// Why `NOTIFY_SOCKET` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("NOTIFY_SOCKET={0:?} is neither a path nor an abstract address (@name)")]
    Address(String),
    #[error("cannot make a socket for NOTIFY_SOCKET: {0}")]
    Socket(std::io::Error),
}

/// Where notifications go: the service manager's socket, and an unbound socket to send from.
#[derive(Debug)]
pub struct Notifier {
    sock: UnixDatagram,
    to: SocketAddr,
}

impl Notifier {
    /// The notifier `NOTIFY_SOCKET` names, or `None` when it is not set (not under a service
    /// manager that listens).
    ///
    /// # Errors
    /// [`NotifyError`]: an address that is not a Unix one, or no socket to send from.
    pub fn from_env() -> Result<Option<Self>, NotifyError> {
        match std::env::var_os(NOTIFY_SOCKET_VAR) {
            Some(value) if !value.is_empty() => Self::to(&value.to_string_lossy()).map(Some),
            _ => Ok(None),
        }
    }

    /// A notifier sending to `address`: a path, or `@name` for an abstract address.
    ///
    /// # Errors
    /// [`NotifyError`].
    pub fn to(address: &str) -> Result<Self, NotifyError> {
        let bad = || NotifyError::Address(address.to_owned());
        let to = if let Some(name) = address.strip_prefix('@') {
            SocketAddr::from_abstract_name(name.as_bytes()).map_err(|_| bad())?
        } else if address.starts_with('/') {
            SocketAddr::from_pathname(address).map_err(|_| bad())?
        } else {
            return Err(bad());
        };
        let sock = UnixDatagram::unbound().map_err(NotifyError::Socket)?;
        // A service manager that stopped reading must not stall the thread that notifies.
        sock.set_nonblocking(true).map_err(NotifyError::Socket)?;
        Ok(Self { sock, to })
    }

    /// Sends `state` (`KEY=VALUE` lines) as one datagram; a failure is logged at debug level and
    /// otherwise ignored, as `sd_notify`'s callers do.
    pub fn send(&self, state: &str) {
        if let Err(e) = self.sock.send_to_addr(state.as_bytes(), &self.to) {
            tracing::debug!("NOTIFY_SOCKET: cannot send {state:?}: {e}");
        }
    }

    /// The workers serve.
    pub fn ready(&self) {
        self.send("READY=1\nSTATUS=serving");
    }

    /// A reload begins (SIGHUP); [`Notifier::ready`] follows once it is done. The clock reading
    /// lets systemd tell this reload from one it asked for earlier (`Type=notify-reload`).
    pub fn reloading(&self) {
        let usec = monotonic_usec();
        self.send(&format!(
            "RELOADING=1\nSTATUS=reloading\nMONOTONIC_USEC={usec}"
        ));
    }

    /// The graceful shutdown begins.
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=draining");
    }

    /// The process `pid` (started by a USR2 upgrade, and serving) is the main process from now
    /// on; this one drains.
    pub fn main_pid(&self, pid: u32) {
        self.send(&format!(
            "MAINPID={pid}\nREADY=1\nSTATUS=serving (upgraded from pid {})",
            std::process::id()
        ));
    }
}

/// `CLOCK_MONOTONIC` in microseconds, as `MONOTONIC_USEC=` wants it.
fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn recv(sock: &UnixDatagram) -> String {
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 256];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// A socket at a path, as systemd's `/run/systemd/notify`, gets each notification as one
    /// datagram.
    #[test]
    fn notifications_reach_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::to(path.to_str().unwrap()).unwrap();
        n.ready();
        assert_eq!(recv(&listener), "READY=1\nSTATUS=serving");
        n.main_pid(4711);
        assert!(recv(&listener).starts_with("MAINPID=4711\nREADY=1\n"));
        n.reloading();
        let reloading = recv(&listener);
        assert!(reloading.starts_with("RELOADING=1\n"), "{reloading}");
        let usec: u64 = reloading
            .lines()
            .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
            .unwrap()
            .parse()
            .unwrap();
        assert!(usec > 0);
        n.stopping();
        assert!(recv(&listener).starts_with("STOPPING=1"));
    }

    /// `@name` is an abstract address (systemd's user manager may use one).
    #[test]
    fn notifications_reach_an_abstract_address() {
        let name = format!("lowlat-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        Notifier::to(&format!("@{name}")).unwrap().stopping();
        assert!(recv(&listener).starts_with("STOPPING=1"));
    }

    /// Anything else is refused with its value.
    #[test]
    fn other_addresses_are_refused() {
        for bad in ["vsock:2:1234", "relative/path"] {
            match Notifier::to(bad) {
                Err(NotifyError::Address(a)) => assert_eq!(a, bad),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
