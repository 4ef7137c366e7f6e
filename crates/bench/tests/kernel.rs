//! Kernel work per request: a server known to make exactly one `read(2)` and one `write(2)`
//! per request (a few lines of Python on raw descriptors) is measured at one of each through
//! the syscall tracepoints, and at about one context switch per request from /proc (which
//! reports no system-call figure of its own beside them); `lowlat serve` answering a known number of
//! requests is counted by kind; and where the tracepoints cannot be opened, the rows say why
//! instead of carrying zeros.

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use lowlat_bench::results;
use lowlat_bench::runner::{self, RunOptions};

const SERVER: &str = r#"
import os, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
while True:
    c, _ = s.accept()
    fd = c.fileno()
    try:
        while True:
            # One read(2) per request (it arrives whole) and one write(2) per response.
            if not os.read(fd, 65536):
                break
            os.write(fd, resp)
    except OSError:
        pass  # a client that reset the connection
    c.close()
"#;

/// How a test sweep counts system calls: not at all, or through tracefs at this directory
/// (`None`: the usual places).
type Syscalls = Option<Option<PathBuf>>;

fn sweep(name: &str, perf_counters: bool, syscalls: Syscalls) -> (PathBuf, results::Results) {
    let dir = common::scratch(name);
    let script = dir.join("server.py");
    std::fs::write(&script, SERVER).unwrap();
    let port = common::free_port();
    let text = format!(
        r#"
name = "ci-kernel"
[run]
retries = 0
duration = "1s"
rounds = 2
warmup = "200ms"
pause = "100ms"
levels = [1]
[loader]
threads = 1
cpus = [1]
timeout = "3s"
[[target]]
name = "py"
command = ["python3", "{script}", "{port}"]
url = "http://127.0.0.1:{port}"
cpus = [0]
[[scenario]]
name = "hello"
path = "/"
"#,
        script = script.display()
    );
    let spec = lowlat_bench::spec::load(&common::write_spec(&dir, "k.toml", &text))
        .unwrap_or_else(|e| panic!("{e}"));
    let opts = RunOptions {
        out_dir: dir.join("out"),
        progress: false,
        force: true,
        perf_counters,
        syscalls: syscalls.is_some(),
        tracefs: syscalls.flatten(),
    };
    let path = runner::run(
        &spec,
        &lowlat_bench::load::Engine,
        &opts,
        &AtomicBool::new(false),
    )
    .unwrap_or_else(|e| panic!("sweep failed: {e}"));
    let res = results::read(&path).unwrap();
    (path, res)
}

/// From /proc, context switches and page faults per request; no system-call count beside
/// `syscalls_per_req` (the VFS's `syscr`/`syscw` read 0 for servers that use `recvfrom` and
/// `sendto`), neither in results.json nor in the CSV.
#[test]
fn context_switches_from_proc_and_no_vfs_call_counts() {
    let (path, res) = sweep("kernel", false, None);
    assert_eq!(res.rows.len(), 2);
    for r in &res.rows {
        assert!(r.requests > 200, "{} requests", r.requests);
        let k = r.kernel_per_req.expect("kernel counters");
        // It blocks in read(2) for each request: about one voluntary switch each.
        assert!(k.voluntary_switches > 0.5, "{k:?}");
        assert!(k.minor_faults < 1.0, "{k:?}");
    }
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(json.contains("\"voluntary_switches\""), "{json}");
    for gone in ["syscr", "syscw"] {
        assert!(!json.contains(gone), "{gone} in results.json");
    }
    let csv = std::fs::read_to_string(path.with_file_name("results.csv")).unwrap();
    let head = csv.lines().next().unwrap();
    assert!(!head.contains("syscr") && !head.contains("syscw"), "{head}");
}

/// `--perf-counters`: instructions and cycles per request where the machine has hardware
/// counters; elsewhere (most VMs) a note in the results says why, and the rows go without.
#[test]
fn perf_counters_or_a_note() {
    let (_, res) = sweep("perf", true, None);
    let note = res.target_checks.iter().find(|c| c.name == "perf counters");
    match note {
        Some(c) => {
            assert!(c.value.contains("perf_event_open"), "{c:?}");
            assert!(res.rows.iter().all(|r| r.instructions_per_req.is_none()));
        }
        None => {
            for r in &res.rows {
                let i = r.instructions_per_req.expect("instructions");
                let c = r.cycles_per_req.expect("cycles");
                // A Python loop spends thousands of instructions per request.
                assert!(i > 1000.0 && c > 1000.0, "{i} {c}");
            }
        }
    }
}

/// Through the tracepoints, the same server is counted call by call: one `read` and one
/// `write` per request and next to nothing else (its `accept4` and `close` are per
/// connection); no socket call of another kind. The CSV carries the same figures, a column
/// per call.
#[test]
fn syscalls_counted_by_kind() {
    common::tracefs();
    let (path, res) = sweep("syscalls", false, Some(None));
    assert_eq!(res.rows.len(), 2);
    for r in &res.rows {
        assert!(r.syscalls_unavailable.is_none(), "{r:?}");
        let s = r.syscalls_per_req.as_ref().expect("syscalls counted");
        let call = |name| {
            s.call(name)
                .unwrap_or_else(|| panic!("{name} not counted: {s:?}"))
        };
        assert!((0.98..1.02).contains(&call("read")), "{s:?}");
        assert!((0.98..1.02).contains(&call("write")), "{s:?}");
        for none in [
            "recvfrom",
            "sendto",
            "sendfile",
            "epoll_wait",
            "io_uring_enter",
        ] {
            assert!(call(none) < 0.001, "{none}: {s:?}");
        }
        // read + write, and a little for the connection and the interpreter's own calls.
        assert!((2.0..2.2).contains(&s.total), "{s:?}");
        assert!(s.other < 0.2, "{s:?}");
    }
    let check = res
        .target_checks
        .iter()
        .find(|c| c.name == "syscall counts (py)")
        .expect("how the calls were counted is recorded");
    assert!(check.value.contains("raw_syscalls:sys_enter"), "{check:?}");
    let mut csv = csv::Reader::from_path(path.with_file_name("results.csv")).unwrap();
    let head = csv.headers().unwrap().clone();
    let col = |name: &str| {
        head.iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no {name} column"))
    };
    for rec in csv.records() {
        let rec = rec.unwrap();
        let read: f64 = rec[col("sys_read_per_req")].parse().unwrap();
        let total: f64 = rec[col("syscalls_per_req")].parse().unwrap();
        assert!((0.98..1.02).contains(&read) && total >= 2.0, "{rec:?}");
        assert_eq!(&rec[col("syscalls_unavailable")], "");
    }
}

/// Where the tracepoints cannot be opened (here: tracefs looked for in an empty directory),
/// every row says why and carries no syscall figure — not a zero — and the CSV, the
/// environment check and the report say so too.
#[test]
fn syscalls_unavailable_is_a_reason_not_zeros() {
    let empty = common::scratch("no-tracefs");
    let (path, res) = sweep("no-syscalls", false, Some(Some(empty.clone())));
    for r in &res.rows {
        assert!(r.syscalls_per_req.is_none(), "{r:?}");
        let why = r.syscalls_unavailable.as_deref().expect("a reason");
        assert!(why.contains("tracefs is not mounted"), "{why}");
        assert!(r.requests > 100, "the run itself goes on");
    }
    let check = res
        .target_checks
        .iter()
        .find(|c| c.name == "syscall counts (py)")
        .expect("recorded");
    assert_eq!(check.status, lowlat_bench::doctor::Status::Warn);
    assert!(
        check
            .fix
            .as_deref()
            .unwrap_or("")
            .starts_with("mount -t tracefs"),
        "{check:?}"
    );
    let doctor = lowlat_bench::doctor::syscall_tracepoints(Some(&empty));
    assert_eq!(doctor.status, lowlat_bench::doctor::Status::Warn);
    let mut csv = csv::Reader::from_path(path.with_file_name("results.csv")).unwrap();
    let head = csv.headers().unwrap().clone();
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    for rec in csv.records() {
        let rec = rec.unwrap();
        assert_eq!(&rec[col("syscalls_per_req")], "", "no figure");
        assert_eq!(&rec[col("sys_recvfrom_per_req")], "", "no figure");
        assert!(
            rec[col("syscalls_unavailable")].contains("tracefs"),
            "{rec:?}"
        );
    }
    let files =
        lowlat_bench::report::render(&path, &lowlat_bench::report::ReportOptions::default())
            .unwrap();
    let html = std::fs::read_to_string(&files.html).unwrap();
    assert!(
        html.contains("not counted: tracefs is not mounted"),
        "the report says why"
    );
    assert!(files.syscalls.unwrap().contains("not counted: tracefs"));
}

/// `lowlat serve`, a real server process, answers a known number of keep-alive requests one
/// at a time: its receives and its sends are each about one per request, its epoll waits at
/// most about one, and the total is a handful per request (not zero, not hundreds).
#[test]
fn lowlat_serve_counted_per_request() {
    common::tracefs();
    const N: u64 = 2000;
    let port = common::free_port();
    let mut child = std::process::Command::new(common::lowlat_serve())
        .args(["--workers", "1", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start lowlat-serve");
    let mut conn = connect(port);
    get(&mut conn); // the worker is up and has accepted
    let tp = lowlat_bench::syscalls::Tracepoints::find(None).unwrap();
    let counters = lowlat_bench::syscalls::SyscallCounters::open(&tp, child.id())
        .unwrap_or_else(|e| panic!("{e}: {}", e.fix));
    assert!(counters.threads() >= 1);
    let before = counters.read().unwrap();
    for _ in 0..N {
        get(&mut conn);
    }
    let n = counters.read().unwrap().since(&before);
    let _ = child.kill();
    let _ = child.wait();
    let s = n.per_request(N).unwrap();
    let sum = |names: &[&str]| names.iter().filter_map(|c| s.call(c)).sum::<f64>();
    let receives = sum(&["read", "recvfrom", "recvmsg"]);
    let sends = sum(&["write", "writev", "sendto", "sendmsg", "sendfile"]);
    let waits = sum(&["epoll_wait", "epoll_pwait", "io_uring_enter"]);
    assert!(
        (0.95..2.1).contains(&receives),
        "receives {receives}: {s:?}"
    );
    assert!((0.95..1.1).contains(&sends), "sends {sends}: {s:?}");
    assert!(waits <= 2.1, "waits {waits}: {s:?}");
    assert!(s.total >= receives + sends && s.total < 10.0, "{s:?}");
}

fn connect(port: u16) -> std::net::TcpStream {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => return c,
            Err(e) if std::time::Instant::now() > deadline => panic!("lowlat-serve: {e}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// One keep-alive GET /plaintext, its whole response read.
fn get(c: &mut std::net::TcpStream) {
    c.write_all(b"GET /plaintext HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                return;
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
