//! Hot binary upgrade: `kill -USR2` ten times in a row while `lowlat load` (HTTP/1.1 keep-alive
//! and a new connection per request, TLS, HTTP/2) and h2load run — no error, no reset, every
//! request answered — and while a 1 GiB download and a WebSocket tunnel are in flight on the
//! first process, which complete. A new binary that cannot start leaves the old one serving.
//! Under systemd (`NOTIFY_SOCKET`), each new process is announced as the main one. HTTP/3
//! requests made the whole time across five upgrades are all answered: each process keeps its
//! QUIC connections, passed their datagrams by the newest.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{free_port, Served, BIN};

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by whoever adopted it) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn kill(sig: &str, pid: u32) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// The processes a test's upgrades started (the first is `Served`'s, which kills it when
/// dropped): killed when the test ends, so that one that fails leaves none serving.
#[derive(Debug)]
struct Processes(Vec<u32>);

impl std::ops::Deref for Processes {
    type Target = Vec<u32>;
    fn deref(&self) -> &Vec<u32> {
        &self.0
    }
}

impl std::ops::DerefMut for Processes {
    fn deref_mut(&mut self) -> &mut Vec<u32> {
        &mut self.0
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if alive(pid) {
                kill("KILL", pid);
            }
        }
    }
}

/// Sends USR2 to the process in the pid file and waits until a new one has replaced it there.
fn upgrade(pid_file: &Path, served: &Served) -> u32 {
    let old = read_pid(pid_file).expect("a pid file");
    kill("USR2", old);
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match read_pid(pid_file) {
            Some(new) if new != old => return new,
            _ => {}
        }
        assert!(
            Instant::now() < until,
            "no new process after USR2 to {old}: {}",
            served.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An upstream that answers one upgrade request with 101 and then echoes bytes.
fn tunnel_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut byte).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let key = support::field(&head, "sec-websocket-key")
                    .unwrap_or("")
                    .to_owned();
                let accept = lowlat_http::ws::accept_for(&key);
                let _ = write!(
                    s,
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                );
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Opens a tunnel through lowlat; returns the stream after the 101.
fn open_tunnel(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (key, _) = lowlat_http::ws::handshake_key();
    write!(
        s,
        "GET /ws/ HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "tunnel head");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

fn start(dir: &Path, http: u16, https: u16, extra: &[&str]) -> (Served, PathBuf) {
    let (cmd, pid_file) = command(dir, http, https, extra);
    let served = Served::spawn(cmd);
    wait_for_pid_file(&pid_file, &served);
    (served, pid_file)
}

/// Waits until the pid file names `served` (it is written just after the banner).
fn wait_for_pid_file(pid_file: &Path, served: &Served) {
    let until = Instant::now() + Duration::from_secs(10);
    while read_pid(pid_file) != Some(served.pid()) {
        assert!(Instant::now() < until, "no pid file: {}", served.log());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `lowlat serve` [`start`] runs, not yet started.
fn command(dir: &Path, http: u16, https: u16, extra: &[&str]) -> (Command, PathBuf) {
    let pki = lowlat_testkit::pki::Pki::new();
    let cert = pki.leaf(
        "up",
        &["localhost"],
        lowlat_testkit::pki::KeyKind::EcdsaP256,
    );
    // The certificate outlives the Pki's directory: it is read again by every new process.
    let (crt, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::copy(&cert.cert, &crt).unwrap();
    std::fs::copy(&cert.key, &key).unwrap();
    let pid_file = dir.join("lowlat.pid");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--workers", "2", "--listen"])
        .arg(format!("127.0.0.1:{http}"))
        .arg("--tls-listen")
        .arg(format!("127.0.0.1:{https}"))
        .arg("--cert")
        .arg(&crt)
        .arg("--key")
        .arg(&key)
        .arg("--pid-file")
        .arg(&pid_file)
        .args(["--grace", "60s"])
        .args(extra);
    (cmd, pid_file)
}

fn lowlat_load(args: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .arg("load")
        .args(["--json", "-q", "-T", "5s"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Ten upgrades under load, with a download and a tunnel held by the first process.
#[test]
fn ten_upgrades_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    // A gibibyte without writing one: a sparse file reads as zeros.
    let big = std::fs::File::create(root.join("big")).unwrap();
    big.set_len(1 << 30).unwrap();
    drop(big);
    let upstream = tunnel_upstream();
    let (http, https) = (free_port(), free_port());
    let root_arg = root.display().to_string();
    let ws_arg = format!("/ws/=http://{upstream}");
    let (served, pid_file) = start(
        dir.path(),
        http,
        https,
        &["--root", &root_arg, "--proxy", &ws_arg],
    );
    let first = read_pid(&pid_file).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();

    // The download, read at a bounded pace so that it spans the upgrades.
    let download = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut head = Vec::new();
        let mut body = 0u64;
        loop {
            let n = match s.read(&mut buf) {
                Ok(0) => return body,
                Ok(n) => n,
                Err(e) => panic!("download after {body} bytes of body: {e}"),
            };
            if let Some(end) = support::find(&head, b"\r\n\r\n") {
                let _ = end;
                body += n as u64;
            } else {
                head.extend_from_slice(&buf[..n]);
                if let Some(end) = support::find(&head, b"\r\n\r\n") {
                    assert!(head.starts_with(b"HTTP/1.1 200"));
                    body += (head.len() - end - 4) as u64;
                }
            }
            std::thread::sleep(Duration::from_micros(1500));
        }
    });
    let mut tunnel = open_tunnel(addr);

    let url = format!("http://127.0.0.1:{http}/plaintext");
    let tls_url = format!("https://127.0.0.1:{https}/plaintext");
    let loads = vec![
        ("keep-alive", lowlat_load(&["-c", "8", "-d", "8s", &url])),
        (
            "new connections",
            lowlat_load(&["-c", "4", "-d", "8s", "--no-keepalive", &url]),
        ),
        ("tls", lowlat_load(&["-c", "4", "-d", "8s", "-k", &tls_url])),
        (
            "h2",
            lowlat_load(&["-c", "4", "-m", "4", "-d", "8s", "--h2", "-k", &tls_url]),
        ),
    ];
    let h2load_log = dir.path().join("h2load.log");
    let h2load = Command::new("h2load")
        .args(["-D", "8", "-c", "4", "-m", "4", "--log-file"])
        .arg(&h2load_log)
        .arg(&tls_url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("h2load (scripts/test-deps.sh installs nghttp2-client)");

    std::thread::sleep(Duration::from_millis(500));
    let mut pids = Processes(vec![first]);
    for i in 0..10 {
        pids.push(upgrade(&pid_file, &served));
        // The tunnel, still on the first process, carries bytes both ways.
        let msg = format!("ping {i}\n");
        tunnel.write_all(msg.as_bytes()).unwrap();
        let mut echo = vec![0u8; msg.len()];
        tunnel.read_exact(&mut echo).unwrap();
        assert_eq!(echo, msg.as_bytes());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(alive(first), "the first process left with its tunnel open");

    for (name, load) in loads {
        let out = load.wait_with_output().unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(report["errors"]["total"], 0, "{name}: {}", report["errors"]);
        assert!(report["responses"].as_u64().unwrap() > 0, "{name}");
        // Every request answered: the only ones without a response are those still in flight
        // when the run's time was up (at most one per stream).
        let unanswered =
            report["requests"].as_u64().unwrap() - report["responses"].as_u64().unwrap();
        assert!(unanswered <= 16, "{name}: {unanswered} unanswered");
        let codes = report["status_codes"].to_string();
        assert!(!codes.contains("\"5"), "{name}: {codes}");
    }
    let out = h2load.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(" 0 timeout"), "h2load: {text}");
    // h2load counts as failed the requests it queued in the read that brought the first
    // GOAWAY: its HTTP/2 library then refuses to send them. Its log tells them apart: a request
    // never sent has no start time. Every request that reached the server was answered 2xx.
    let log = std::fs::read_to_string(&h2load_log).unwrap();
    let mut sent = 0;
    for line in log.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 3, "h2load log line {line:?}");
        if fields[0] == "0" {
            assert_eq!(fields[1], "-1", "h2load log line {line:?}");
            continue;
        }
        sent += 1;
        assert!(
            fields[1].starts_with('2'),
            "h2load: a sent request got {line:?}: {text}"
        );
    }
    assert!(sent > 0, "h2load sent nothing: {text}");

    assert_eq!(download.join().unwrap(), 1 << 30, "download");
    tunnel.write_all(b"last\n").unwrap();
    let mut echo = [0u8; 5];
    tunnel.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"last\n");
    drop(tunnel);
    // With its last connection gone, the first process exits; so do the others.
    let until = Instant::now() + Duration::from_secs(20);
    for &pid in &pids[..pids.len() - 1] {
        while alive(pid) {
            assert!(Instant::now() < until, "{pid} is still running");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let last = *pids.last().unwrap();
    assert_eq!(read_pid(&pid_file), Some(last));
    kill("TERM", last);
    while alive(last) {
        assert!(Instant::now() < until, "{last} is still running");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!pid_file.exists(), "the last process removes its pid file");
}

/// A new binary that cannot start (its config broken since the old one read it) leaves the
/// old process serving, which says why in one line; a later USR2 with the config fixed works.
#[test]
fn failed_start_keeps_the_old_process() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("lowlat.toml");
    std::fs::write(&config, "max_body = \"1m\"\n").unwrap();
    let (http, https) = (free_port(), free_port());
    let config_arg = config.display().to_string();
    let (served, pid_file) = start(dir.path(), http, https, &["--config", &config_arg]);
    let old = read_pid(&pid_file).unwrap();
    std::fs::write(&config, "max_body = \"lots\"\n").unwrap();
    kill("USR2", old);
    let until = Instant::now() + Duration::from_secs(30);
    while !served.log().contains("keeps serving") {
        assert!(Instant::now() < until, "{}", served.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(read_pid(&pid_file), Some(old));
    let ok = support::curl(&["-s", &format!("http://127.0.0.1:{http}/plaintext")]);
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "Hello, World!");
    std::fs::write(&config, "max_body = \"2m\"\n").unwrap();
    let new = upgrade(&pid_file, &served);
    let _started = Processes(vec![new]);
    assert_ne!(new, old);
    let ok = support::curl(&["-s", &format!("http://127.0.0.1:{http}/plaintext")]);
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "Hello, World!");
    kill("TERM", new);
    let until = Instant::now() + Duration::from_secs(20);
    while alive(new) || alive(old) {
        assert!(Instant::now() < until);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A socket standing for systemd's notification socket: it receives each datagram with the
/// sender's pid (`SO_PASSCRED`), as systemd does to decide whom to believe.
struct NotifySocket(std::os::unix::net::UnixDatagram);

impl NotifySocket {
    fn bind(path: &Path) -> Self {
        use std::os::fd::AsRawFd;
        let sock = std::os::unix::net::UnixDatagram::bind(path).unwrap();
        let on: libc::c_int = 1;
        // SAFETY: `on` is a live c_int and its size is passed; the kernel only reads it.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&raw const on).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_PASSCRED");
        Self(sock)
    }

    /// The next notification and its sender's pid, within `wait`.
    fn recv(&self, wait: Duration) -> Option<(u32, String)> {
        use std::os::fd::AsRawFd;
        let fd = self.0.as_raw_fd();
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd, for the length given.
        if unsafe { libc::poll(&raw mut pfd, 1, ms) } != 1 {
            return None;
        }
        let mut buf = [0u8; 512];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        #[repr(C, align(8))]
        struct Control([u8; 64]);
        let mut control = Control([0; 64]);
        // SAFETY: all-zero is a valid (empty) msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len() as _;
        // SAFETY: every pointer in `msg` points at a live buffer of the length beside it.
        let n = unsafe { libc::recvmsg(fd, &raw mut msg, 0) };
        assert!(n >= 0, "recvmsg: {}", std::io::Error::last_os_error());
        let mut pid = 0;
        // SAFETY: `msg` was just filled by the kernel; the CMSG macros stay within
        // `msg_controllen`, and SCM_CREDENTIALS data is a `ucred`.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET
                    && (*cmsg).cmsg_type == libc::SCM_CREDENTIALS
                {
                    let cred =
                        std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::ucred>());
                    pid = u32::try_from(cred.pid).unwrap_or(0);
                }
                cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
            }
        }
        let text = String::from_utf8_lossy(&buf[..usize::try_from(n).unwrap_or(0)]).into_owned();
        Some((pid, text))
    }

    /// The next notification, which must come from `pid` and start with `start`.
    fn expect(&self, pid: u32, start: &str, served: &Served) -> String {
        let (from, text) = self
            .recv(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("no {start:?} from {pid}: {}", served.log()));
        assert_eq!(from, pid, "{text:?} from {from}, not {pid}");
        assert!(text.starts_with(start), "{text:?}, not {start:?}…");
        text
    }
}

/// Under systemd (`Type=notify`): READY=1 once serving; on each USR2 the process being
/// replaced, still the main one, says `MAINPID=<new>` (with READY=1) once the new one serves,
/// and then nothing more — not even STOPPING=1 as it drains and exits; the new one then
/// notifies in its turn: RELOADING=1 and READY=1 around a SIGHUP, STOPPING=1 at SIGTERM. Every
/// notification comes from the process systemd takes as the main one at that moment, so none
/// would be dropped under the default `NotifyAccess=main`.
#[test]
fn systemd_is_told_the_new_main_pid() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify");
    let notify = NotifySocket::bind(&socket_path);
    let (http, https) = (free_port(), free_port());
    let (mut cmd, pid_file) = command(dir.path(), http, https, &[]);
    cmd.env("NOTIFY_SOCKET", &socket_path);
    let served = Served::spawn(cmd);
    wait_for_pid_file(&pid_file, &served);
    let mut main = read_pid(&pid_file).unwrap();
    assert_eq!(main, served.pid());
    notify.expect(main, "READY=1", &served);
    let mut pids = Processes(vec![main]);
    for _ in 0..2 {
        let new = upgrade(&pid_file, &served);
        let text = notify.expect(main, &format!("MAINPID={new}\n"), &served);
        assert!(text.contains("\nREADY=1"), "{text:?}");
        // The one replaced has no connection left: it exits at once.
        let until = Instant::now() + Duration::from_secs(20);
        while alive(main) {
            assert!(Instant::now() < until, "{main} is still running");
            std::thread::sleep(Duration::from_millis(50));
        }
        let ok = support::curl(&["-s", &format!("http://127.0.0.1:{http}/plaintext")]);
        assert_eq!(String::from_utf8_lossy(&ok.stdout), "Hello, World!");
        main = new;
        pids.push(new);
    }
    kill("HUP", main);
    notify.expect(main, "RELOADING=1\n", &served);
    notify.expect(main, "READY=1", &served);
    kill("TERM", main);
    notify.expect(main, "STOPPING=1", &served);
    let until = Instant::now() + Duration::from_secs(20);
    while alive(main) {
        assert!(Instant::now() < until, "{main} is still running");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Nothing else was said: no STOPPING=1 from a process that was drained after an upgrade.
    assert_eq!(notify.recv(Duration::from_millis(200)), None, "{pids:?}");
}

/// HTTP/3 across five upgrades in a row: `lowlat load --h3` makes requests the whole time, on
/// connections that begin on each process in turn. Every old process keeps answering its own
/// connections until they end (GOAWAY, then closed once their requests are answered) while the
/// newest reads the shared UDP sockets and passes it their datagrams: no request lost or
/// refused, no handshake timed out.
#[test]
fn h3_connections_survive_upgrades() {
    let dir = tempfile::tempdir().unwrap();
    let (http, https) = (free_port(), free_port());
    let h3 = format!("127.0.0.1:{https}");
    let (served, pid_file) = start(dir.path(), http, https, &["--h3-listen", &h3]);
    let first = read_pid(&pid_file).unwrap();
    let url = format!("https://127.0.0.1:{https}/plaintext");
    let load = lowlat_load(&["-c", "4", "-d", "9s", "--h3", "-k", &url]);
    std::thread::sleep(Duration::from_millis(1000));
    let mut pids = Processes(vec![first]);
    for _ in 0..5 {
        pids.push(upgrade(&pid_file, &served));
        std::thread::sleep(Duration::from_millis(1200));
    }
    let out = load.wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("h3: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let responses = report["responses"].as_u64().unwrap();
    assert_eq!(
        report["errors"]["total"],
        0,
        "h3: {} of {responses}: {report}; {}; {}",
        report["errors"],
        String::from_utf8_lossy(&out.stderr),
        served.log()
    );
    assert!(responses > 100, "h3: {report}");
    // Every request answered but those in flight when the run's time was up (one per
    // connection): none refused by a GOAWAY either (the first names every stream).
    let unanswered = report["requests"].as_u64().unwrap() - responses;
    assert!(unanswered <= 4, "h3: {unanswered} unanswered: {report}");
    let codes = report["status_codes"].to_string();
    assert!(!codes.contains("\"5"), "h3: {codes}");
    let last = *pids.last().unwrap();
    let until = Instant::now() + Duration::from_secs(40);
    for &pid in &pids[..pids.len() - 1] {
        while alive(pid) {
            assert!(Instant::now() < until, "{pid} is still running");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    kill("TERM", last);
    while alive(last) {
        assert!(Instant::now() < until, "{last} is still running");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The old processes were passed datagrams of their connections by the newer ones (each
    // worker says how many as it exits).
    std::thread::sleep(Duration::from_millis(200));
    let log = served.log();
    let passed: u64 = log
        .lines()
        .filter(|l| l.contains(" passed in by a newer one"))
        .filter_map(|l| {
            l.split(" passed in by a newer one")
                .next()?
                .rsplit(", ")
                .next()
        })
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum();
    assert!(passed > 0, "no datagram passed to an older process: {log}");
}
