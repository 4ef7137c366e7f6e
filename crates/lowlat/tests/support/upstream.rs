//! Upstream servers for the proxy's tests, as processes: real servers from maintained libraries
//! (gunicorn, uvicorn, websockets, grpcio) and one that misbehaves on purpose, each a small
//! Python file in `tests/upstreams/` run by the virtual environment that `scripts/test-deps.sh`
//! makes; and the outside programs the proxy is compared with or driven by (grpcurl, HAProxy,
//! Caddy).
//!
//! An upstream prints `listening on <address>` on stdout when it accepts connections; [`Upstream`]
//! waits for that line, exposes the address, and ends the process (and gunicorn's workers) when
//! dropped. It also dies with the test binary: it watches its stdin, whose other end only this
//! process holds. Its stderr (the server's log) goes to a file, printed when a test fails.
//!
//! Nothing here skips a test: a missing environment or program fails with what to run.

use std::ffi::OsString;
use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long an upstream may take to print its ready line: Python's start-up, imports and (for
/// gRPC) compiling the .proto take 0.3–1.5 s on an idle machine; this leaves room for a loaded one.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a dropped upstream has to die once its stdin closes before it is killed outright.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// The directory of the upstreams' Python files and `echo.proto`.
pub fn upstreams_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/upstreams")
}

/// The virtual environment `scripts/test-deps.sh` makes: `$LOWLAT_TEST_VENV`, else
/// `lowlat-test-venv` in `$XDG_CACHE_HOME` (by default `~/.cache`).
pub fn venv() -> PathBuf {
    if let Some(dir) = std::env::var_os("LOWLAT_TEST_VENV") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is not set")).join(".cache")
        });
    cache.join("lowlat-test-venv")
}

/// The environment's Python, after checking that the environment was made from this checkout's
/// `scripts/upstreams/requirements.txt` (it keeps a copy).
pub fn python() -> PathBuf {
    let venv = venv();
    let python = venv.join("bin/python");
    let wanted =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/upstreams/requirements.txt");
    let wanted = std::fs::read(&wanted).unwrap_or_else(|e| panic!("{}: {e}", wanted.display()));
    match std::fs::read(venv.join("requirements.txt")) {
        Ok(had) if had == wanted && python.is_file() => python,
        Ok(_) if python.is_file() => panic!(
            "the Python environment at {} holds other versions than \
             scripts/upstreams/requirements.txt asks for: run scripts/test-deps.sh",
            venv.display()
        ),
        _ => panic!(
            "no Python environment for the upstreams at {}: run scripts/test-deps.sh",
            venv.display()
        ),
    }
}

/// Which upstream to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum App {
    /// `wsgi_app.py`: the WSGI app under gunicorn with this kind of worker.
    Gunicorn(GunicornWorker),
    /// `asgi_app.py`: the ASGI app under uvicorn (h11).
    Uvicorn,
    /// `ws_echo.py`: the `websockets` echo server.
    WebSocketEcho,
    /// `grpc_server.py`: grpcio serving `lowlat.test.Echo` (`echo.proto`) in clear (h2c).
    Grpc,
    /// `h2_recorder.py`: an HTTP/2 server (h2c) recording request fields, bodies, trailers and
    /// resets.
    H2Recorder,
    /// `bad_upstream.py`: a raw-socket server sending one shape of bad (or unusual) response.
    Bad(BadKind),
}

/// gunicorn's worker classes, which handle connections differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GunicornWorker {
    /// One process, 32 threads; keeps connections alive (gunicorn's 2 s keep-alive).
    Gthread,
    /// Four processes, one request at a time each; closes every connection after its response.
    Sync,
}

/// Where an upstream listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bind {
    /// 127.0.0.1, a free port the upstream picks.
    Ephemeral,
    /// 127.0.0.1 at this port.
    Port(u16),
    /// A unix socket at this path (replaced if it exists).
    Unix(PathBuf),
}

/// Where an upstream listens, as it said when ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// The shapes `bad_upstream.py` sends, one per process. Each reads a request head (and its
/// `Content-Length` body) first; [`BadKind::response`] is what it writes then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadKind {
    /// `Content-Length` and `Transfer-Encoding: chunked` together (RFC 9112 §6.1: a request
    /// smuggling vector a proxy must not pass on as it is).
    ContentLengthAndChunked,
    /// Two `Content-Length` fields that disagree (RFC 9112 §6.3: unrecoverable).
    TwoContentLengths,
    /// A head of more than 1 MiB: 1024 fields of 1 KiB each.
    OversizedHead,
    /// `HTTP/1.1 2x0 OK`.
    MalformedStatusLine,
    /// A bare CR inside a field value, before `Set-Cookie: injected=1`.
    CrInHeaderValue,
    /// A bare LF inside a field value, before `Set-Cookie: injected=1`.
    LfInHeaderValue,
    /// Closes (FIN) without sending a byte.
    CloseBeforeResponse,
    /// Sends nothing and keeps the connection open until the peer closes it.
    NeverAnswers,
    /// A complete keep-alive response (no `Connection: close`), then FIN at once: a pooled
    /// connection that is closed when next used.
    CloseAfterResponse,
    /// Declares 1024 body bytes, sends 512 (the pattern), then resets (RST).
    ResetMidBody,
    /// Valid: no length, the body ends when the connection closes.
    CloseDelimited,
    /// Valid: a chunked body with a trailer field (which neither gunicorn nor uvicorn's HTTP/1.1
    /// sends); the connection stays open for more requests.
    ChunkedTrailers,
    /// `101 Switching Protocols` to any request, then a second response as raw bytes: what a
    /// proxy that tunnelled an unasked 101 would relay (response splitting).
    UnaskedSwitch,
}

impl BadKind {
    pub const ALL: [BadKind; 13] = [
        BadKind::ContentLengthAndChunked,
        BadKind::TwoContentLengths,
        BadKind::OversizedHead,
        BadKind::MalformedStatusLine,
        BadKind::CrInHeaderValue,
        BadKind::LfInHeaderValue,
        BadKind::CloseBeforeResponse,
        BadKind::NeverAnswers,
        BadKind::CloseAfterResponse,
        BadKind::ResetMidBody,
        BadKind::CloseDelimited,
        BadKind::ChunkedTrailers,
        BadKind::UnaskedSwitch,
    ];

    /// The name `bad_upstream.py` takes.
    pub fn name(self) -> &'static str {
        match self {
            BadKind::ContentLengthAndChunked => "cl-and-te",
            BadKind::TwoContentLengths => "two-content-lengths",
            BadKind::OversizedHead => "oversized-head",
            BadKind::MalformedStatusLine => "malformed-status-line",
            BadKind::CrInHeaderValue => "cr-in-header-value",
            BadKind::LfInHeaderValue => "lf-in-header-value",
            BadKind::CloseBeforeResponse => "close-before-response",
            BadKind::NeverAnswers => "never-answers",
            BadKind::CloseAfterResponse => "close-after-response",
            BadKind::ResetMidBody => "reset-mid-body",
            BadKind::CloseDelimited => "close-delimited",
            BadKind::ChunkedTrailers => "chunked-trailers",
            BadKind::UnaskedSwitch => "unasked-101",
        }
    }

    /// The bytes written in answer to each request (empty: none). After them the connection is
    /// closed (FIN), except [`BadKind::ResetMidBody`] (RST), [`BadKind::NeverAnswers`] (kept
    /// open) and [`BadKind::ChunkedTrailers`] (kept for the next request).
    pub fn response(self) -> Vec<u8> {
        const OK: &[u8] = b"HTTP/1.1 200 OK\r\n";
        let ok = |rest: &[u8]| [OK, rest].concat();
        match self {
            BadKind::ContentLengthAndChunked => ok(
                b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            ),
            BadKind::TwoContentLengths => {
                ok(b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!")
            }
            BadKind::OversizedHead => {
                let mut head = OK.to_vec();
                for i in 0..1024 {
                    head.extend_from_slice(format!("X-Filler-{i:04}: ").as_bytes());
                    head.extend_from_slice(&[b'a'; 1024]);
                    head.extend_from_slice(b"\r\n");
                }
                head.extend_from_slice(b"Content-Length: 2\r\n\r\nok");
                head
            }
            BadKind::MalformedStatusLine => {
                b"HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
            }
            BadKind::CrInHeaderValue => {
                ok(b"X-Injected: a\rSet-Cookie: injected=1\r\nContent-Length: 2\r\n\r\nok")
            }
            BadKind::LfInHeaderValue => {
                ok(b"X-Injected: a\nSet-Cookie: injected=1\r\nContent-Length: 2\r\n\r\nok")
            }
            BadKind::CloseBeforeResponse | BadKind::NeverAnswers => Vec::new(),
            BadKind::CloseAfterResponse => ok(b"Content-Length: 2\r\n\r\nok"),
            BadKind::ResetMidBody => {
                [ok(b"Content-Length: 1024\r\n\r\n"), pattern(0, 512)].concat()
            }
            BadKind::CloseDelimited => ok(b"Connection: close\r\n\r\nthe end is the close\n"),
            BadKind::ChunkedTrailers => {
                ok(b"Transfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n\
                 5\r\nhello\r\n0\r\nX-Checksum: 5d41402a\r\n\r\n")
            }
            BadKind::UnaskedSwitch => [
                &b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"[..],
                OK,
                b"Content-Length: 8\r\n\r\nsmuggled",
            ]
            .concat(),
        }
    }
}

/// `len` bytes of the upstreams' download pattern from `offset`: byte `i` is `i % 251`. One
/// period is computed and the rest copied from what is already there (a byte at a time, the
/// debug build took over five seconds for 256 MiB).
pub fn pattern(offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    out.extend((offset..offset + len.min(251) as u64).map(|i| (i % 251) as u8));
    while out.len() < len {
        // Whole periods of what is there, so the copy continues the pattern.
        let k = (out.len() / 251 * 251).min(len - out.len());
        out.extend_from_within(..k);
    }
    out
}

/// SHA-256 in hex of the first `len` bytes of [`pattern`] from offset 0, by Python's hashlib
/// (fast where a debug-built digest of a gibibyte would not be), once per length in a test
/// binary: a test asks for the same lengths over and over (each framing, each protocol), and
/// Python takes a good part of a second to start on a loaded machine.
pub fn pattern_sha256(len: u64) -> String {
    static KNOWN: std::sync::Mutex<Vec<(u64, String)>> = std::sync::Mutex::new(Vec::new());
    let known = |len| {
        KNOWN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|(n, _)| *n == len)
            .map(|(_, sha)| sha.clone())
    };
    if let Some(sha) = known(len) {
        return sha;
    }
    let sha = pattern_sha256_by_python(len);
    KNOWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push((len, sha.clone()));
    sha
}

fn pattern_sha256_by_python(len: u64) -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import hashlib, sys\n\
             n = int(sys.argv[1]); block = bytes(i % 251 for i in range(251 * 4096))\n\
             h = hashlib.sha256()\n\
             for _ in range(n // len(block)): h.update(block)\n\
             h.update(block[: n % len(block)]); print(h.hexdigest())",
            &len.to_string(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// SHA-256 in hex, by coreutils' sha256sum: independent of the upstreams' own digests, which
/// are compared with it.
pub fn sha256_hex(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// `curl --http2-prior-knowledge -T -` uploading `len` bytes of [`pattern`] from its stdin (no
/// length declared: a proxy forwards it chunked) to `url`; the child, its stdin fed by a thread.
pub fn curl_h2_upload(
    url: &str,
    len: u64,
) -> (Child, std::thread::JoinHandle<std::io::Result<()>>) {
    let mut child = Command::new("curl")
        .args(["-sS", "--http2-prior-knowledge", "-T", "-", url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || send_pattern(&mut stdin, len, 0));
    (child, writer)
}

/// An upload to an upstream that reads nothing: writes `head` (which declares `len` bytes) on
/// `s`, sends `len` bytes of [`pattern`] after it from a thread, and asserts that `proxy` holds
/// the client back ([`super::Served::assert_held_back`]). Returns the writing thread.
pub fn upload_held_back(
    proxy: &super::Served,
    s: &std::net::TcpStream,
    head: &str,
    len: u64,
    warm_kib: u64,
) -> std::thread::JoinHandle<std::io::Result<()>> {
    let mut w = s.try_clone().unwrap();
    w.write_all(head.as_bytes()).unwrap();
    let writer = std::thread::spawn(move || send_pattern(&mut w, len, 0));
    proxy.assert_held_back(warm_kib, "an HTTP/1.1 client");
    writer
}

/// Writes `len` bytes of [`pattern`] to `s`, as chunks of `chunk` bytes when `chunk` is not 0.
pub fn send_pattern(s: &mut impl Write, len: u64, chunk: usize) -> std::io::Result<()> {
    let block = pattern(0, 251 * 4096);
    let mut left = len;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        if chunk == 0 {
            s.write_all(&block[..n])?;
        } else {
            for piece in block[..n].chunks(chunk) {
                let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
                framed.extend_from_slice(piece);
                framed.extend_from_slice(b"\r\n");
                s.write_all(&framed)?;
            }
        }
        left -= n as u64;
    }
    if chunk != 0 {
        s.write_all(b"0\r\n\r\n")?;
    }
    Ok(())
}

/// A running upstream process.
pub struct Upstream {
    child: Child,
    /// The upstream's stdin: it ends itself (and its process group) when this closes.
    stdin: Option<ChildStdin>,
    listen: Listen,
    /// The upstream's stderr, for [`Upstream::log`] and a failing test's output.
    log: tempfile::NamedTempFile,
    app: App,
}

impl Upstream {
    /// gunicorn with gthread workers (1 × 32 threads, keep-alive) on 127.0.0.1, a free port.
    pub fn gunicorn() -> Upstream {
        Upstream::start(App::Gunicorn(GunicornWorker::Gthread), Bind::Ephemeral, &[])
    }

    /// gunicorn with sync workers (4, one request each at a time, `Connection: close`).
    pub fn gunicorn_sync() -> Upstream {
        Upstream::start(App::Gunicorn(GunicornWorker::Sync), Bind::Ephemeral, &[])
    }

    /// uvicorn on 127.0.0.1, a free port.
    pub fn uvicorn() -> Upstream {
        Upstream::start(App::Uvicorn, Bind::Ephemeral, &[])
    }

    /// The WebSocket echo server on 127.0.0.1, a free port.
    pub fn websocket_echo() -> Upstream {
        Upstream::start(App::WebSocketEcho, Bind::Ephemeral, &[])
    }

    /// The gRPC server on 127.0.0.1, a free port (h2c).
    pub fn grpc() -> Upstream {
        Upstream::start(App::Grpc, Bind::Ephemeral, &[])
    }

    /// The HTTP/2 recorder on 127.0.0.1, a free port (h2c).
    pub fn h2_recorder() -> Upstream {
        Upstream::start(App::H2Recorder, Bind::Ephemeral, &[])
    }

    /// The misbehaving upstream, sending `kind`, on 127.0.0.1, a free port.
    pub fn bad(kind: BadKind) -> Upstream {
        Upstream::start(App::Bad(kind), Bind::Ephemeral, &[])
    }

    /// Starts `app` listening at `bind`, with `extra` arguments for its script (e.g.
    /// `["--timeout", "5"]` for gunicorn; each script's `--help` lists them), and waits until it
    /// accepts connections. Panics, with the upstream's log, if it does not start.
    // The child is waited for in Drop.
    #[allow(clippy::zombie_processes)]
    pub fn start(app: App, bind: Bind, extra: &[&str]) -> Upstream {
        let mut args: Vec<OsString> = Vec::new();
        let script = match &app {
            App::Gunicorn(worker) => {
                args.push("--worker".into());
                args.push(match worker {
                    GunicornWorker::Gthread => "gthread".into(),
                    GunicornWorker::Sync => "sync".into(),
                });
                "wsgi_app.py"
            }
            App::Uvicorn => "asgi_app.py",
            App::WebSocketEcho => "ws_echo.py",
            App::Grpc => "grpc_server.py",
            App::H2Recorder => "h2_recorder.py",
            App::Bad(kind) => {
                args.push(kind.name().into());
                "bad_upstream.py"
            }
        };
        match &bind {
            Bind::Ephemeral => {}
            Bind::Port(port) => args.extend(["--port".into(), port.to_string().into()]),
            Bind::Unix(path) => args.extend(["--unix".into(), path.into()]),
        }
        args.extend(extra.iter().map(OsString::from));

        let log = tempfile::NamedTempFile::new().expect("create the upstream's log file");
        let mut child = Command::new(python())
            .arg("-u")
            .arg(upstreams_dir().join(script))
            .args(&args)
            .current_dir(upstreams_dir())
            // No __pycache__ left in the source tree.
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log.reopen().expect("reopen the upstream's log file"))
            // Its own process group, which its watchdog ends whole (gunicorn's workers too).
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {script}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");

        // The ready line is read on a thread so that a hung start-up times out; the thread then
        // drains stdout (nothing more is expected) until the upstream exits.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for _ in lines {}
        });
        let mut upstream = Upstream {
            child,
            stdin,
            listen: Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 0))),
            log,
            app,
        };
        let line = match rx.recv_timeout(READY_TIMEOUT) {
            Ok(Some(Ok(line))) => line,
            // Dropping `upstream` while panicking prints its log.
            Ok(_) => panic!("{upstream} exited before it was ready"),
            Err(_) => panic!("{upstream} was not ready after {READY_TIMEOUT:?}"),
        };
        upstream.listen = parse_ready_line(&line)
            .unwrap_or_else(|| panic!("{upstream}: not a ready line: {line:?}"));
        upstream
    }

    /// The TCP address. Panics for an upstream on a unix socket.
    pub fn addr(&self) -> SocketAddr {
        match &self.listen {
            Listen::Tcp(addr) => *addr,
            Listen::Unix(path) => panic!("{self} listens on {}, not TCP", path.display()),
        }
    }

    /// The unix socket's path, for an upstream started with [`Bind::Unix`].
    pub fn unix_path(&self) -> Option<&Path> {
        match &self.listen {
            Listen::Tcp(_) => None,
            Listen::Unix(path) => Some(path),
        }
    }

    pub fn listen(&self) -> &Listen {
        &self.listen
    }

    /// The upstream as `lowlat serve --proxy` names one: `http://127.0.0.1:PORT` or
    /// `unix:/path` (`ws://…` is not used: WebSocket upstreams are http:// ones).
    pub fn url(&self) -> String {
        match &self.listen {
            Listen::Tcp(addr) => format!("http://{addr}"),
            Listen::Unix(path) => format!("unix:{}", path.display()),
        }
    }

    /// The upstream's process id, which is also its process group's (gunicorn's workers are in
    /// it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the upstream has written to stderr so far (its server's log).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// The processes of the upstream's process group: itself, and gunicorn's workers.
    pub fn group_pids(&self) -> Vec<u32> {
        let group = self.pid().to_string();
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // The fields after the command name (which may hold spaces, so it is skipped up to
            // its closing parenthesis) are state, ppid, pgrp.
            let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            if after_name.split_whitespace().nth(2) == Some(group.as_str()) {
                pids.push(pid);
            }
        }
        pids
    }

    /// The resident memory of the upstream's process group now, in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.group_status_kib("VmRSS:")
    }

    /// The sum of each of the group's processes' peak resident memory, in KiB: what a body
    /// streamed through the upstream made it hold at most, with no need to sample while it flows.
    pub fn peak_rss_kib(&self) -> u64 {
        self.group_status_kib("VmHWM:")
    }

    fn group_status_kib(&self, field: &str) -> u64 {
        self.group_pids()
            .into_iter()
            .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .filter_map(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(field))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .sum()
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.app {
            App::Gunicorn(GunicornWorker::Gthread) => f.write_str("gunicorn (gthread)"),
            App::Gunicorn(GunicornWorker::Sync) => f.write_str("gunicorn (sync)"),
            App::Uvicorn => f.write_str("uvicorn"),
            App::WebSocketEcho => f.write_str("the WebSocket echo server"),
            App::Grpc => f.write_str("the gRPC server"),
            App::H2Recorder => f.write_str("the HTTP/2 recorder"),
            App::Bad(kind) => write!(f, "the bad upstream ({})", kind.name()),
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        // Closing stdin makes the upstream's watchdog kill its whole process group at once.
        drop(self.stdin.take());
        let deadline = Instant::now() + EXIT_TIMEOUT;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Listen::Unix(path) = &self.listen {
            let _ = std::fs::remove_file(path);
        }
        if std::thread::panicking() {
            eprintln!("--- log of {self} ---\n{}", self.log());
        }
    }
}

/// `listening on http://127.0.0.1:PORT` (or `ws://`) → TCP; `listening on unix:/path` → unix.
fn parse_ready_line(line: &str) -> Option<Listen> {
    let address = line.trim().strip_prefix("listening on ")?;
    if let Some(path) = address.strip_prefix("unix:") {
        return Some(Listen::Unix(PathBuf::from(path)));
    }
    let (_, host_port) = address.split_once("://")?;
    host_port
        .trim_end_matches('/')
        .parse()
        .ok()
        .map(Listen::Tcp)
}

/// grpcurl, which `scripts/test-deps.sh` builds into `$(go env GOPATH)/bin`.
pub fn grpcurl() -> PathBuf {
    tool("grpcurl")
}

/// A grpcurl command that knows `lowlat.test.Echo` (from `echo.proto`; the gRPC upstream has no
/// reflection). Add `-plaintext`, `-d`, the address and the method.
pub fn grpcurl_echo() -> Command {
    let mut cmd = Command::new(grpcurl());
    cmd.arg("-import-path")
        .arg(upstreams_dir())
        .args(["-proto", "echo.proto"]);
    cmd
}

/// HAProxy, from Debian's package (`/usr/sbin`, which a user's PATH may lack).
pub fn haproxy() -> PathBuf {
    tool("haproxy")
}

/// Caddy, from Debian's package.
pub fn caddy() -> PathBuf {
    tool("caddy")
}

/// oha built with HTTP/3, which `scripts/test-deps.sh` installs into the cache (Debian has no
/// oha, and the released binaries are built without HTTP/3).
pub fn oha() -> PathBuf {
    tool("oha")
}

/// Finds `name` in PATH, the sbin directories, Go's bin directory and the test tools' cache; fails the test with what
/// to run when it is in none of them (a test that cannot run must not pass).
pub fn tool(name: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin"].map(PathBuf::from));
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")));
    if let Some(cache) = cache {
        dirs.push(cache.join("lowlat-oha/bin"));
    }
    if let Ok(out) = Command::new("go").args(["env", "GOPATH"]).output() {
        let gopath = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !gopath.is_empty() {
            dirs.push(Path::new(&gopath).join("bin"));
        }
    }
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not installed: run scripts/test-deps.sh"))
}
