//! Kernel work per request, from /proc: a server known to make exactly one `read(2)` and one
//! `write(2)` per request (a few lines of Python on raw descriptors) is measured at one of each.

mod common;

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

fn sweep(name: &str, perf_counters: bool) -> results::Results {
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
    };
    let path = runner::run(
        &spec,
        &lowlat_bench::load::Engine,
        &opts,
        &AtomicBool::new(false),
    )
    .unwrap_or_else(|e| panic!("sweep failed: {e}"));
    results::read(&path).unwrap()
}

#[test]
fn one_read_and_one_write_per_request() {
    let res = sweep("kernel", false);
    assert_eq!(res.rows.len(), 2);
    for r in &res.rows {
        assert!(r.requests > 200, "{} requests", r.requests);
        let k = r.kernel_per_req.expect("kernel counters");
        assert!(
            (0.9..1.1).contains(&k.syscr),
            "read-class per request {}",
            k.syscr
        );
        assert!(
            (0.9..1.1).contains(&k.syscw),
            "write-class per request {}",
            k.syscw
        );
        // It blocks in read(2) for each request: about one voluntary switch each.
        assert!(k.voluntary_switches > 0.5, "{k:?}");
        assert!(k.minor_faults < 1.0, "{k:?}");
    }
}

/// `--perf-counters`: instructions and cycles per request where the machine has hardware
/// counters; elsewhere (most VMs) a note in the results says why, and the rows go without.
#[test]
fn perf_counters_or_a_note() {
    let res = sweep("perf", true);
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
