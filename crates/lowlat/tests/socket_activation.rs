//! `lowlat serve` started on sockets it is handed (systemd's socket activation): by
//! `systemd-socket-activate` itself, and by a launcher of the test's own that sets
//! `LISTEN_FDS`, `LISTEN_PID` and `LISTEN_FDNAMES` the same way. The sockets are used, not
//! re-bound: connections made before lowlat starts wait in their backlog and are answered.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

mod support;
use support::{free_port, Served, BIN};

/// `lowlat serve` as a socket-activating launcher starts it, for more flags: `fds` at
/// descriptors 3, 4 …, named `names` (`LISTEN_FDNAMES`), through a shell that execs lowlat, so
/// that `LISTEN_PID` (the shell's pid, kept by the exec) names lowlat itself.
fn launched<const N: usize>(fds: [std::os::fd::RawFd; N], names: &str) -> Command {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg("LISTEN_PID=$$ exec \"$0\" \"$@\"")
        .arg(BIN)
        .arg("serve")
        .env("LISTEN_FDS", N.to_string())
        .env("LISTEN_FDNAMES", names);
    // SAFETY: between fork and exec only fcntl and dup2, which are async-signal-safe. Each
    // socket is first moved above the targets, so that none is overwritten before it is moved;
    // dup2's copy is not close-on-exec.
    unsafe {
        sh.pre_exec(move || {
            let mut high = [0; N];
            for (i, fd) in fds.iter().enumerate() {
                high[i] = libc::fcntl(*fd, libc::F_DUPFD, 100);
                if high[i] < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (target, fd) in (3..).zip(high) {
                if libc::dup2(fd, target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    sh
}

fn get(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// `systemd-socket-activate -l ADDR --fdname=http lowlat serve`: no --listen at all, the
/// socket's name says it is clear text.
#[test]
fn systemd_socket_activate_hands_a_named_socket() {
    if Command::new("systemd-socket-activate")
        .arg("--help")
        .output()
        .is_err()
    {
        panic!("systemd-socket-activate is missing (scripts/test-deps.sh installs systemd)");
    }
    let port = free_port();
    let mut cmd = Command::new("systemd-socket-activate");
    cmd.arg("-l")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--fdname=http")
        .args([BIN, "serve", "--workers", "2"]);
    // systemd-socket-activate starts the service at the first connection, which then waits in
    // the socket's backlog until lowlat answers it.
    let first = std::thread::spawn(move || {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        for _ in 0..500 {
            if TcpStream::connect(addr).is_ok() {
                return get(addr);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("systemd-socket-activate never listened on {addr}");
    });
    let served = Served::spawn(cmd);
    assert_eq!(served.addr.port(), port, "{}", served.log());
    assert!(first.join().unwrap().ends_with("Hello, World!"));
    assert!(get(served.addr).ends_with("Hello, World!"));
    served.stop();
}

/// The test's own launcher: a clear and a TLS socket bound (and listening) before lowlat starts,
/// a connection already waiting in the clear one's backlog; the clear one named by its
/// --listen address, the TLS one by its name.
#[test]
fn listen_fds_from_a_launcher() {
    let pki = lowlat_testkit::pki::Pki::new();
    let cert = pki.leaf(
        "sa",
        &["localhost"],
        lowlat_testkit::pki::KeyKind::EcdsaP256,
    );
    let clear = TcpListener::bind("127.0.0.1:0").unwrap();
    let tls = TcpListener::bind("127.0.0.1:0").unwrap();
    let clear_addr = clear.local_addr().unwrap();
    let tls_addr = tls.local_addr().unwrap();
    // Before lowlat runs: the kernel completes the handshake, the request waits.
    let mut early = TcpStream::connect(clear_addr).unwrap();
    early
        .write_all(b"GET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut sh = launched([clear.as_raw_fd(), tls.as_raw_fd()], "whatever:https");
    sh.args(["--workers", "2", "--listen"])
        .arg(clear_addr.to_string())
        .arg("--cert")
        .arg(&cert.cert)
        .arg("--key")
        .arg(&cert.key);
    let served = Served::spawn(sh);
    drop((clear, tls));
    assert_eq!(served.addr, clear_addr, "{}", served.log());
    assert_eq!(served.tls_addr, Some(tls_addr), "{}", served.log());
    let mut out = String::new();
    early
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = early.read_to_string(&mut out);
    assert!(out.ends_with("Hello, World!"), "{out}");
    let curl = support::curl(&[
        "-sk",
        &format!("https://localhost:{}/plaintext", tls_addr.port()),
    ]);
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "Hello, World!");
    served.stop();
}

/// `LISTEN_PID` of another process: the variables are not for lowlat, which binds its own.
/// A `LISTEN_FDS` that names no socket: one line, exit 1.
#[test]
fn variables_for_someone_else_or_wrong() {
    let port = free_port();
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--workers", "1", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .env("LISTEN_FDS", "1")
        .env("LISTEN_PID", "1");
    let served = Served::spawn(cmd);
    assert!(get(served.addr).ends_with("Hello, World!"));
    served.stop();

    let out = Command::new("sh")
        .arg("-c")
        .arg("LISTEN_PID=$$ LISTEN_FDS=3 exec \"$0\" serve --listen 127.0.0.1:0 ")
        .arg(BIN)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("lowlat serve: inherited descriptor") && err.lines().count() == 1,
        "{err}"
    );
}

/// HTTP/3 on a handed-over UDP socket: a TLS socket named `https` and a UDP one on the same
/// port, no listen flag at all; `lowlat load --h3` is answered on it.
#[test]
fn quic_socket_handed_over() {
    let pki = lowlat_testkit::pki::Pki::new();
    let cert = pki.leaf(
        "sa",
        &["localhost"],
        lowlat_testkit::pki::KeyKind::EcdsaP256,
    );
    let tls = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tls.local_addr().unwrap().port();
    // SO_REUSEPORT, as a .socket unit's ReusePort=yes: each further worker binds its own.
    let udp = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    udp.set_reuse_port(true).unwrap();
    let at: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    udp.bind(&at.into()).unwrap();
    let udp: std::net::UdpSocket = udp.into();
    let mut sh = launched([tls.as_raw_fd(), udp.as_raw_fd()], "https:quic");
    sh.args(["--workers", "2", "--cert"])
        .arg(&cert.cert)
        .arg("--key")
        .arg(&cert.key);
    let (mut child, _stderr, banner) = support::spawn_serve(sh);
    drop((tls, udp));
    assert!(
        banner.contains(&format!("h3://127.0.0.1:{port}")),
        "{banner}"
    );
    let out = Command::new(BIN)
        .args(["load", "--h3", "-k", "-n", "20", "-c", "2", "--json", "-q"])
        .arg(format!("https://127.0.0.1:{port}/plaintext"))
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["responses"], 20, "{report}");
    assert_eq!(report["errors"]["total"], 0, "{report}");
    let _ = child.kill();
    let _ = child.wait();
}
