//! Hot binary upgrade (`kill -USR2`, as nginx's): this process starts its binary again — the
//! file installed at its path now, with the same arguments — and hands the new process every
//! listening socket it has (each worker's TCP sockets, the QUIC sockets, the metrics and health
//! listeners), and the channels through which it passes on the datagrams of this process's QUIC
//! connections (`crate::quic`'s hand-off). The new one starts accepting on them and says so;
//! only then does this one stop accepting (and reading the QUIC sockets) and drain. Connections waiting in the sockets' queues are never reset, because
//! the sockets themselves never close: the new process holds them before this one lets go.
//!
//! The hand-over speaks systemd's convention ([`crate::inherit`]): the sockets at descriptors
//! 3, 4 … in the new process, `LISTEN_FDS`, `LISTEN_FDNAMES`, and `LISTEN_PID` set to the new
//! process's own pid (by a `sh -c 'LISTEN_PID=$$ exec …'`: a process with threads cannot
//! safely change its environment between fork and exec, and `exec` keeps the shell's pid).
//! Readiness comes back through a pipe whose write end is `LOWLAT_READY_FD`: one byte once the
//! new process's workers run. End of file first (the new binary failed: bad config, a port it
//! could not bind, a crash) or no byte within [`READY_TIMEOUT`] leaves this process serving as
//! if nothing happened.

use std::ffi::OsString;
use std::io::Read as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::inherit::LISTEN_FDS_START;

/// How long the new process may take to report that its workers run (certificates loaded,
/// sockets taken, workers started: well under a second in practice).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The environment variable naming the descriptor the new process reports readiness on.
pub const READY_FD_VAR: &str = "LOWLAT_READY_FD";

/// Why an upgrade did not happen; this process keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("cannot start {path}: {source}")]
    Spawn {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot make the readiness pipe: {0}")]
    Pipe(std::io::Error),
    #[error("the new process (pid {0}) exited before it was ready")]
    Failed(u32),
    #[error("the new process (pid {0}) was not ready within 30 s; stopped it")]
    Timeout(u32),
}

/// What this process was started as: its binary's path and its arguments, read at start (the
/// path then still names the file that was run; after an install it names the new one).
#[derive(Debug, Clone)]
pub struct Invocation {
    pub exe: PathBuf,
    pub args: Vec<OsString>,
}

impl Invocation {
    /// This process's own.
    #[must_use]
    pub fn current() -> Option<Self> {
        let exe = std::env::current_exe().ok()?;
        Some(Self {
            exe,
            args: std::env::args_os().skip(1).collect(),
        })
    }
}

/// A listening socket to hand over, and its name (`http`, `https`, `quic`, `metrics`,
/// `health`; `quic-handoff.G.W` for a QUIC hand-off channel).
#[derive(Debug, Clone)]
pub struct HandedSocket {
    pub fd: RawFd,
    pub name: std::borrow::Cow<'static, str>,
}

/// Starts the new process with `sockets` and waits until it is ready. Returns its pid.
///
/// # Errors
/// [`UpgradeError`]; the new process, if it was started and is not ready, is stopped.
pub fn start(inv: &Invocation, sockets: &[HandedSocket]) -> Result<u32, UpgradeError> {
    // A QUIC hand-off channel whose process has exited since (its other end closed) is left
    // out: the new process would pass that process's datagrams to nobody, and keep its
    // generation from being used again.
    let sockets: Vec<&HandedSocket> = sockets
        .iter()
        .filter(|s| !s.name.starts_with(crate::quic::HANDOFF_PREFIX) || peer_alive(s.fd))
        .collect();
    let (ready_read, ready_write) = pipe().map_err(UpgradeError::Pipe)?;
    let n = sockets.len();
    let ready_target = LISTEN_FDS_START + RawFd::try_from(n).unwrap_or(RawFd::MAX - 4);
    let mut sources: Vec<RawFd> = sockets.iter().map(|s| s.fd).collect();
    sources.push(ready_write.as_raw_fd());
    let names: Vec<&str> = sockets.iter().map(|s| s.name.as_ref()).collect();
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("LISTEN_PID=$$ exec \"$0\" \"$@\"")
        .arg(&inv.exe)
        .args(&inv.args)
        .env("LISTEN_FDS", n.to_string())
        .env("LISTEN_FDNAMES", names.join(":"))
        .env(READY_FD_VAR, ready_target.to_string());
    // Every target is above the standard streams and below… whatever the sources are: each
    // source is first copied above all the targets, so that placing one never overwrites
    // another still to be placed.
    let above = LISTEN_FDS_START + RawFd::try_from(sources.len()).unwrap_or(0) + 1;
    // SAFETY: between fork and exec the closure calls only fcntl and dup2 (async-signal-safe)
    // and reads `sources`, allocated before the fork; it allocates nothing. dup2's copies are
    // not close-on-exec, so exactly the targets reach the new binary.
    unsafe {
        cmd.pre_exec(move || {
            let mut moved = [0 as RawFd; 1025];
            if sources.len() > moved.len() {
                return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
            }
            for (i, &fd) in sources.iter().enumerate() {
                let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, above);
                if high < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                moved[i] = high;
            }
            for (target, &fd) in (LISTEN_FDS_START..).zip(&moved[..sources.len()]) {
                if libc::dup2(fd, target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| UpgradeError::Spawn {
        path: inv.exe.display().to_string(),
        source,
    })?;
    let pid = child.id();
    // Only the child may hold the write end: its exit is then our end of file.
    drop(ready_write);
    match wait_ready(&ready_read, READY_TIMEOUT) {
        Ok(true) => {
            // The new process outlives this one; its exit status is nobody's business here
            // (a thread reaps it should this process live on).
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            Ok(pid)
        }
        Ok(false) => {
            let _ = child.wait();
            Err(UpgradeError::Failed(pid))
        }
        Err(()) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(UpgradeError::Timeout(pid))
        }
    }
}

/// Whether the other end of the connected socket `fd` is still open (`POLLHUP` not reported).
fn peer_alive(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the length given; a zero timeout does not block.
    let rc = unsafe { libc::poll(&raw mut pfd, 1, 0) };
    rc >= 0 && pfd.revents & (libc::POLLHUP | libc::POLLNVAL) == 0
}

/// `Ok(true)`: a byte came; `Ok(false)`: end of file; `Err`: nothing within `timeout`.
fn wait_ready(read: &OwnedFd, timeout: Duration) -> Result<bool, ()> {
    let mut pfd = libc::pollfd {
        fd: read.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(());
        }
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd, for the length given.
        let rc = unsafe { libc::poll(&raw mut pfd, 1, ms) };
        if rc < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(());
        }
        if rc == 0 {
            return Err(());
        }
        let mut byte = [0u8; 1];
        let mut file = std::fs::File::from(read.try_clone().map_err(|_| ())?);
        return match file.read(&mut byte) {
            Ok(1) => Ok(true),
            _ => Ok(false),
        };
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The new process's side: the readiness descriptor it was given, taken from the environment
/// at start (before any thread) and marked close-on-exec.
#[must_use]
pub fn take_ready_fd() -> Option<OwnedFd> {
    let value = std::env::var(READY_FD_VAR).ok()?;
    std::env::remove_var(READY_FD_VAR);
    let fd: RawFd = value.trim().parse().ok().filter(|&fd| fd > 2)?;
    // SAFETY: F_GETFD only reads flags; -1 for a descriptor that is not open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: open (checked above) and handed to this process for it alone.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sets FD_CLOEXEC on a descriptor this process owns.
    unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    Some(owned)
}

/// Tells the old process that this one serves: one byte, then the pipe closes.
pub fn report_ready(fd: OwnedFd) {
    let mut file = std::fs::File::from(fd);
    let _ = std::io::Write::write_all(&mut file, b"1");
}
