//! `-s script.lua`: wrk's own example scripts (tests/wrk-scripts/, unchanged) run against a
//! server that records what arrives, each checked for what it promises; the same scripts run by
//! wrk give the same requests on the wire; errors in a script end the run with one line.
//!
//! Runs through the library where the report says enough, and as a `lowlat load` process where
//! the output or the exit status is the point (this test binary run again as the CLI: see
//! [`cli`]).

mod common;

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TestServer;
use lowlat_load::{LoadConfig, LoadError, ScriptOptions, Target};

/// A request as the recording server saw it.
#[derive(Debug, Clone)]
struct Arrived {
    method: String,
    target: String,
    /// Header fields in arrival order.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    at: Instant,
    /// How many requests arrived together with this one (pipelined in one batch).
    batch: usize,
}

impl Arrived {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// What two clients must agree on: method, target, the header fields in any order, body.
    fn wire(&self) -> (String, String, Vec<(String, String)>, Vec<u8>) {
        let mut headers = self.headers.clone();
        headers.sort();
        (
            self.method.clone(),
            self.target.clone(),
            headers,
            self.body.clone(),
        )
    }
}

type Log = Arc<Mutex<Vec<Arrived>>>;

/// A server recording every request, answering each batch of pipelined requests with one
/// write: `/authenticate` with an `X-Token` (for auth.lua), anything else with "hello".
fn recorder() -> (TestServer, Log) {
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    let server = TestServer::start(move |c| {
        while let Some(first) = c.next_request() {
            let mut batch = vec![(first, Instant::now())];
            while c.has_buffered_request() {
                match c.next_request() {
                    Some(r) => batch.push((r, Instant::now())),
                    None => return,
                }
            }
            let mut out = Vec::new();
            let n = batch.len();
            // One batch is logged in one piece, not interleaved with another connection's.
            let mut seen = seen.lock().unwrap();
            for (r, at) in batch {
                out.extend_from_slice(&if r.target == "/authenticate" {
                    b"HTTP/1.1 200 OK\r\nX-Token: t0k3n\r\nContent-Length: 2\r\n\r\nok".to_vec()
                } else {
                    common::ok_response("hello")
                });
                let headers = r
                    .head
                    .lines()
                    .skip(1)
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
                    .collect();
                seen.push(Arrived {
                    method: r.method,
                    target: r.target,
                    headers,
                    body: r.body,
                    at,
                    batch: n,
                });
            }
            drop(seen);
            if !c.send(&out) {
                return;
            }
        }
    });
    (server, log)
}

fn wrk_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/wrk-scripts")
        .join(name)
}

/// `n` requests of `script` on one connection of one thread.
fn scripted(url: &str, script: PathBuf, n: u64) -> LoadConfig {
    LoadConfig {
        targets: vec![Target::new(url)],
        threads: 1,
        connections: 1,
        requests: Some(n),
        duration: Some(Duration::from_secs(20)),
        timeout: Duration::from_secs(5),
        script: Some(ScriptOptions {
            path: script,
            args: Vec::new(),
        }),
        ..LoadConfig::default()
    }
}

fn run(cfg: &LoadConfig) -> lowlat_load::Report {
    lowlat_load::run(cfg, &AtomicBool::new(false)).expect("the run starts and ends")
}

fn arrived(log: &Log) -> Vec<Arrived> {
    log.lock().unwrap().clone()
}

/// A script written for one test.
fn temp_script(source: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".lua").tempfile().unwrap();
    std::io::Write::write_all(&mut f, source.as_bytes()).unwrap();
    f
}

/// post.lua: method, body and a header set in the `wrk` table go out with every request, built
/// once (no `request()`), with the `Content-Length` of the body.
#[test]
fn post_sends_its_body_and_header() {
    let (server, log) = recorder();
    let url = server.url("/form");
    let mut cfg = scripted(&url, wrk_script("post.lua"), 20);
    cfg.connections = 2;
    let r = run(&cfg);
    assert_eq!(r.responses, 20);
    let seen = arrived(&log);
    assert_eq!(seen.len(), 20);
    for a in &seen {
        assert_eq!((a.method.as_str(), a.target.as_str()), ("POST", "/form"));
        assert_eq!(a.body, b"foo=bar&baz=quux");
        assert_eq!(
            a.header("Content-Type"),
            Some("application/x-www-form-urlencoded")
        );
        assert_eq!(a.header("Content-Length"), Some("16"));
        assert_eq!(a.header("Host"), Some(&url[7..url.len() - 5]));
    }
}

/// counter.lua: a new path and `X-Counter` on every request. As in wrk, the first `request()`
/// is called once to check it and not sent, so the wire starts at `/1`.
#[test]
fn counter_changes_path_and_header_per_request() {
    let (server, log) = recorder();
    let r = run(&scripted(&server.url("/"), wrk_script("counter.lua"), 50));
    assert_eq!(r.responses, 50);
    let seen = arrived(&log);
    let targets: Vec<&str> = seen.iter().map(|a| a.target.as_str()).collect();
    let want: Vec<String> = (1..=50).map(|i| format!("/{i}")).collect();
    assert_eq!(targets, want);
    for (i, a) in seen.iter().enumerate() {
        assert_eq!(a.header("X-Counter"), Some((i + 1).to_string().as_str()));
        assert_eq!(a.batch, 1);
    }
}

/// pipeline.lua: `request()` returns three requests at once; they go out together (the server
/// sees batches of exactly three) and the next batch waits for all three responses.
#[test]
fn pipeline_sends_its_batch_of_three() {
    let (server, log) = recorder();
    let mut cfg = scripted(&server.url("/"), wrk_script("pipeline.lua"), 60);
    cfg.connections = 2;
    let r = run(&cfg);
    assert_eq!(r.responses, 60);
    let seen = arrived(&log);
    assert_eq!(seen.len(), 60);
    assert!(seen.iter().all(|a| a.batch == 3), "{seen:?}");
    for batch in seen.chunks(3) {
        let t: Vec<&str> = batch.iter().map(|a| a.target.as_str()).collect();
        assert_eq!(t, ["/?foo", "/?bar", "/?baz"]);
    }
}

/// `--pipeline N` with a `request()` script: N of its batches in flight per connection.
#[test]
fn pipeline_flag_counts_batches() {
    let (server, log) = recorder();
    let mut cfg = scripted(&server.url("/"), wrk_script("pipeline.lua"), 60);
    cfg.pipeline = 2;
    run(&cfg);
    let seen = arrived(&log);
    assert_eq!(seen.len(), 60);
    assert!(
        seen.iter().all(|a| a.batch % 3 == 0 && a.batch <= 6),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|a| a.batch == 6),
        "never two batches in flight"
    );
}

/// auth.lua: `response()` sees the status and headers; once the token came, every request goes
/// to `/resource` with it.
#[test]
fn auth_uses_the_token_from_a_response() {
    let (server, log) = recorder();
    let mut cfg = scripted(&server.url("/"), wrk_script("auth.lua"), 40);
    cfg.connections = 2;
    let r = run(&cfg);
    assert_eq!(r.responses, 40);
    let seen = arrived(&log);
    let (auths, resources): (Vec<&Arrived>, Vec<&Arrived>) =
        seen.iter().partition(|a| a.target == "/authenticate");
    // One per connection at most: both ask before the first token arrives, none after.
    assert!((1..=2).contains(&auths.len()), "{seen:?}");
    assert!(auths.iter().all(|a| a.header("X-Token").is_none()));
    assert_eq!(resources.len(), 40 - auths.len());
    for a in resources {
        assert_eq!(a.target, "/resource");
        assert_eq!(a.header("X-Token"), Some("t0k3n"));
    }
}

/// `response()` gets a fresh header table and the body with every response, the same whether
/// the table is copied (the first responses with a head) or made by the compiled maker (once
/// the head has repeated): 100 responses, each checked and its table marked.
#[test]
fn response_tables_stay_fresh_and_whole() {
    let (server, _log) = recorder();
    let script = temp_script(
        r#"
request = function() return wrk.format("GET", "/authenticate") end
response = function(status, headers, body)
  assert(status == 200 and headers["X-Token"] == "t0k3n", "headers")
  assert(headers["Content-Length"] == "2" and body == "ok", "length and body")
  assert(headers.seen == nil, "a table seen before")
  headers.seen = true
  kept = kept or headers
  assert(kept.seen)
end
"#,
    );
    let r = run(&scripted(&server.url("/"), script.path().to_owned(), 100));
    assert_eq!(r.responses, 100);
}

/// delay.lua: every request waits 10–50 ms (random) after the previous response.
#[test]
fn delay_spaces_requests() {
    let (server, log) = recorder();
    let started = Instant::now();
    let r = run(&scripted(&server.url("/"), wrk_script("delay.lua"), 12));
    assert_eq!(r.responses, 12);
    assert!(started.elapsed() >= Duration::from_millis(120));
    let seen = arrived(&log);
    let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_millis(9)),
        "{gaps:?}"
    );
    let mean = gaps.iter().sum::<Duration>() / u32::try_from(gaps.len()).unwrap();
    assert!(
        mean >= Duration::from_millis(15) && mean <= Duration::from_millis(80),
        "{gaps:?}"
    );
}

/// stop.lua: `wrk.thread:stop()` in the 100th `response()` ends that thread at once: nothing
/// more is sent, and a run of two threads ends with 200 responses long before its duration.
#[test]
fn stop_ends_each_thread_after_its_hundredth_response() {
    let (server, log) = recorder();
    let mut cfg = scripted(&server.url("/"), wrk_script("stop.lua"), 1);
    cfg.requests = None;
    cfg.threads = 2;
    cfg.connections = 2;
    let started = Instant::now();
    let r = run(&cfg);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(r.responses, 200);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(arrived(&log).len(), 200);
}

/// setup.lua: `setup()` numbers the threads with `thread:set()`, each thread counts its
/// requests and responses, and `done()` reads them back with `thread:get()`; output in wrk's
/// order (the threads' lines before the report, `done()`'s after).
#[test]
fn setup_passes_values_to_threads_and_back() {
    let (server, _log) = recorder();
    let script = wrk_script("setup.lua");
    let out = cli(&[
        "-t2",
        "-c2",
        "-n",
        "100",
        "-q",
        "-s",
        script.to_str().unwrap(),
        &server.url("/"),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    let pos = |s: &str| lines.iter().position(|l| l.contains(s));
    let created = [pos("thread 1 created"), pos("thread 2 created")];
    let banner = pos("Running").expect("banner");
    let report = pos("Requests/sec:").expect("report");
    assert!(
        created.iter().all(|p| p.is_some_and(|p| p < banner)),
        "{out:?}"
    );
    let mut responses = 0;
    for id in 1..=2 {
        let line = lines
            .iter()
            .find(|l| l.starts_with(&format!("thread {id} made ")))
            .unwrap_or_else(|| panic!("no line for thread {id}: {out:?}"));
        assert!(lines.iter().position(|l| l == line).unwrap() > report);
        // "thread 1 made 51 requests and got 50 responses"
        let words: Vec<&str> = line.split(' ').collect();
        let (made, got): (u64, u64) = (words[3].parse().unwrap(), words[7].parse().unwrap());
        // Thread 1's first request() was the check, not sent (as in wrk).
        assert_eq!(made, got + u64::from(id == 1), "{line}");
        responses += got;
    }
    assert_eq!(responses, 100);
}

/// report.lua: `done()` prints the latency percentiles as CSV after the report.
#[test]
fn report_prints_percentiles_in_done() {
    let server = common::hello_server();
    let script = wrk_script("report.lua");
    let out = cli(&[
        "-t1",
        "-c2",
        "-n",
        "500",
        "-q",
        "-s",
        script.to_str().unwrap(),
        &server.url("/"),
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let tail: Vec<&str> = out
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("-----"))
        .collect();
    assert_eq!(tail.len(), 5, "{out:?}");
    let mut last = 0;
    for (line, p) in tail[1..].iter().zip(["50%", "90%", "99%", "99.999%"]) {
        let (pct, us) = line.split_once(',').unwrap();
        assert_eq!(pct, p);
        let us: u64 = us.parse().unwrap();
        assert!(us >= last && us > 0, "{line}");
        last = us;
    }
    assert!(
        out.stdout.find("Requests/sec:").unwrap() < out.stdout.find("-----").unwrap(),
        "{out:?}"
    );
}

/// `init(args)` gets the URL as `args[0]` and the arguments after `--` from 1 on, as in wrk
/// (bench/kit/pipeline.lua reads its depth from `args[1]`).
#[test]
fn init_gets_the_arguments_after_dashes() {
    let server = common::hello_server();
    let script =
        temp_script("function init(args) print('args', args[0], args[1], args[2], #args) end");
    let url = server.url("/");
    let out = cli(&[
        "-t1",
        "-c1",
        "-n",
        "3",
        "-q",
        "-s",
        script.path().to_str().unwrap(),
        &url,
        "--",
        "16",
        "x y",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains(&format!("args\t{url}\t16\tx y\t2")),
        "{out:?}"
    );
    // bench/kit/pipeline.lua: 16 requests per batch, from its argument.
    let kit = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/kit/pipeline.lua");
    let mut cfg = scripted(&url, kit, 160);
    cfg.script.as_mut().unwrap().args = vec!["16".into()];
    assert_eq!(run(&cfg).responses, 160);
}

/// A script's error ends the run with one line naming the file and line, exit status 1 —
/// while loading, in `init()`, or in a `request()` during the run.
#[test]
fn script_errors_end_the_run_with_file_and_line() {
    let server = common::hello_server();
    let url = server.url("/");
    let cases = [
        ("x = = 1\n", ":1: unexpected symbol near '='"),
        (
            "function init(args)\n  local t = nil\n  return t.x\nend\n",
            ":3: attempt to index local 't' (a nil value)",
        ),
        (
            "n = 0\nfunction request()\n  n = n + 1\n  if n == 50 then error('the fiftieth') end\n  return wrk.format()\nend\n",
            ":4: the fiftieth",
        ),
        (
            "function response(status)\n  if status == 200 then undefined_function() end\nend\n",
            ":2: attempt to call global 'undefined_function' (a nil value)",
        ),
    ];
    for (source, want) in cases {
        let script = temp_script(source);
        let path = script.path().to_str().unwrap();
        let out = cli(&["-t1", "-c2", "-d", "5s", "-q", "-s", path, &url]);
        assert_eq!(out.code, 1, "{source}: {out:?}");
        let err = out.stderr.trim();
        assert_eq!(err.lines().count(), 1, "{source}: {err}");
        assert!(
            err.starts_with(&format!("lowlat load: {path}")) && err.ends_with(want),
            "{source}: {err}"
        );
    }
}

/// A `request()` that returns something other than complete requests is refused before a byte
/// is sent, with where it went wrong.
#[test]
fn malformed_requests_are_refused_before_sending() {
    let (server, log) = recorder();
    let cases = [
        (
            "return 'GET / HTTP/1.1\\r\\nHost: a\\r\\n'",
            "incomplete request at 3:1",
        ),
        ("return 'hello'", "incomplete request at 1:6"),
        (
            "return 'GET / HTTP/1.1\\r\\nHost a\\r\\n\\r\\n'",
            "malformed request at 2:1",
        ),
        ("return nil", "not nil, not a string"),
        ("return true", "not boolean, not a string"),
        (
            "n = (n or 0) + 1 if n < 3 then return wrk.format() end return 'GET /x HTTP/1.1\\r\\n'",
            "incomplete request at 2:1",
        ),
    ];
    for (body, want) in cases {
        let script = temp_script(&format!("function request() {body} end"));
        let cfg = scripted(&server.url("/"), script.path().to_owned(), 100);
        let err = lowlat_load::run(&cfg, &AtomicBool::new(false)).unwrap_err();
        let LoadError::Script(msg) = err else {
            panic!("{body}: {err:?}");
        };
        assert!(
            msg.contains("request() must return complete HTTP/1.1 requests"),
            "{msg}"
        );
        assert!(msg.ends_with(want), "{body}: {msg}");
    }
    // The last case sent its first good request only (the first call was the check).
    let seen = arrived(&log);
    assert_eq!(seen.len(), 1, "{seen:?}");
}

/// With `-R`, `request()` is called when each request is due: counter.lua at 400 requests/s.
#[test]
fn request_follows_the_rate() {
    let (server, log) = recorder();
    let mut cfg = scripted(&server.url("/"), wrk_script("counter.lua"), 80);
    cfg.rate = Some(400.0);
    cfg.connections = 2;
    let started = Instant::now();
    let r = run(&cfg);
    let took = started.elapsed();
    assert_eq!(r.responses, 80);
    assert!(took >= Duration::from_millis(180), "{took:?}");
    let mut targets: Vec<u32> = arrived(&log)
        .iter()
        .map(|a| a.target[1..].parse().unwrap())
        .collect();
    targets.sort_unstable();
    assert_eq!(targets, (1..=80).collect::<Vec<_>>());
}

/// `delay()` and `-R` both say when to send: refused.
#[test]
fn delay_with_rate_is_refused() {
    let server = common::hello_server();
    let mut cfg = scripted(&server.url("/"), wrk_script("delay.lua"), 10);
    cfg.rate = Some(100.0);
    let err = lowlat_load::run(&cfg, &AtomicBool::new(false)).unwrap_err();
    assert!(err.to_string().contains("delay()"), "{err}");
}

/// A script that defines only `init()`, or nothing per request, sends the request built once
/// from the `wrk` table, modified by `init()` (and `-H`, `-X`, `--body` fill the table first).
#[test]
fn static_scripts_send_the_table_request() {
    let (server, log) = recorder();
    let script = temp_script(
        "function init(args)\n  wrk.path = '/from-init'\n  wrk.headers['X-Init'] = 'yes'\nend\n",
    );
    let mut cfg = scripted(&server.url("/"), script.path().to_owned(), 10);
    cfg.headers = vec![("X-Cli".into(), "1".into())];
    cfg.method = "PUT".into();
    cfg.body = Some(b"abc".to_vec());
    cfg.pipeline = 2;
    run(&cfg);
    let seen = arrived(&log);
    assert_eq!(seen.len(), 10);
    for a in &seen {
        assert_eq!(
            (a.method.as_str(), a.target.as_str()),
            ("PUT", "/from-init")
        );
        assert_eq!(a.header("X-Init"), Some("yes"));
        assert_eq!(a.header("X-Cli"), Some("1"));
        assert_eq!(a.body, b"abc");
    }
    assert!(seen.iter().any(|a| a.batch == 2), "--pipeline 2 applies");
}

/// Over TLS, and over HTTP/2 with TLS (ALPN) or in clear (h2c), against `lowlat serve`'s engine:
/// what `request()` returns is sent (over HTTP/2 parsed and sent as streams) and `response()`
/// gets each response's status, header fields and body (the script fails the run otherwise).
#[test]
fn scripts_over_tls_and_h2() {
    let pki = lowlat_testkit::pki::Pki::new();
    let (server, https, http) = common::lowlat::serve(&pki, lowlat_server::tls::ALPN_H2_HTTP1);
    let script = temp_script(
        r#"
n = 0
function request()
  n = n + 1
  return wrk.format(nil, n % 2 == 0 and "/plaintext" or "/nope")
end
function response(status, headers, body)
  local ct = headers["content-type"] or headers["Content-Type"]
  if status == 200 and (body ~= "Hello, World!" or ct ~= "text/plain") then
    error("unexpected 200: " .. tostring(ct) .. " " .. body)
  end
  if status ~= 200 and status ~= 404 then error("status " .. status) end
end
"#,
    );
    for (base, h2) in [(&https, false), (&https, true), (&http, true)] {
        let mut cfg = scripted(&format!("{base}/"), script.path().to_owned(), 100);
        cfg.h2 = h2;
        cfg.tls = common::lowlat::trusting(&pki);
        cfg.connections = 2;
        cfg.pipeline = if h2 { 4 } else { 1 };
        let r = run(&cfg);
        assert_eq!(r.responses, 100, "{base} h2 {h2}");
        // The first request() is the check (n = 1, not sent): 50 of each after it.
        assert_eq!(r.status.success, 50, "{base} h2 {h2}");
        assert_eq!(r.status.client_error, 50, "{base} h2 {h2}");
    }
    // A script without request(): its request, built once, as streams.
    let post = wrk_script("post.lua");
    let mut cfg = scripted(&format!("{http}/plaintext"), post, 20);
    cfg.h2 = true;
    let r = run(&cfg);
    assert_eq!(r.responses, 20);
    assert_eq!(r.status.client_error, 20, "POST /plaintext is 405");
    common::lowlat::stop(server);
}

/// `wrk.lookup()` and `wrk.connect()` in `setup()`, and `thread.addr`: a thread sent elsewhere
/// connects there (every request arrives at the second server), and reads its address back.
#[test]
fn setup_chooses_the_thread_address() {
    let (first, first_log) = recorder();
    let (second, second_log) = recorder();
    let script = temp_script(&format!(
        r#"
function setup(thread)
  local addrs = wrk.lookup("127.0.0.1", "{port}")
  assert(#addrs >= 1 and wrk.connect(addrs[1]), "lookup or connect failed")
  assert(not wrk.connect(wrk.lookup("127.0.0.1", 1)[1]), "port 1 accepted a connection")
  thread.addr = addrs[1]
end
function request()
  return wrk.format(nil, "/" .. tostring(wrk.thread.addr))
end
"#,
        port = second.addr.port()
    ));
    let r = run(&scripted(&first.url("/"), script.path().to_owned(), 10));
    assert_eq!(r.responses, 10);
    assert!(arrived(&first_log).is_empty());
    let seen = arrived(&second_log);
    assert_eq!(seen.len(), 10);
    assert!(seen.iter().all(|a| a.target == format!("/{}", second.addr)));
}

/// addr.lua: `setup()` looks the URL's host up once, keeps the addresses that accept a
/// connection and gives each thread one of them; each thread's `init()` prints its address. Run
/// against `localhost`, every thread gets the server's address (whatever else `localhost`
/// resolves to refuses connections and is dropped), prints it as wrk does — the same lines as
/// wrk with the same script — and every request arrives there.
#[test]
fn addr_gives_each_thread_a_live_address() {
    let Some(wrk) = ["/usr/bin/wrk", "/usr/local/bin/wrk"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
    else {
        panic!("wrk is not installed: run scripts/test-deps.sh");
    };
    let (server, log) = recorder();
    let url = format!("http://localhost:{}/", server.addr.port());
    let script = wrk_script("addr.lua");
    let out = cli(&[
        "-t2",
        "-c2",
        "-n",
        "20",
        "-q",
        "-s",
        script.to_str().unwrap(),
        &url,
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let printed = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .filter(|l| l.starts_with("thread addr:"))
            .map(str::to_owned)
            .collect()
    };
    let want = format!("thread addr: 127.0.0.1:{}", server.addr.port());
    assert_eq!(printed(&out.stdout), [want.clone(), want], "{out:?}");
    assert_eq!(arrived(&log).len(), 20);
    let by_wrk = Command::new(wrk)
        .args(["-t2", "-c2", "-d1s", "-s", script.to_str().unwrap(), &url])
        .output()
        .unwrap();
    assert!(by_wrk.status.success(), "{by_wrk:?}");
    assert_eq!(
        printed(&String::from_utf8_lossy(&by_wrk.stdout)),
        printed(&out.stdout)
    );
}

/// What the same script sends through wrk and through lowlat load, on one connection: the same
/// requests in the same order (method, target, header fields in any order, body). wrk's
/// `pairs()` order of the header table is its own, so only the order of fields may differ.
#[test]
fn wire_matches_wrk() {
    let Some(wrk) = ["/usr/bin/wrk", "/usr/local/bin/wrk"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
    else {
        panic!("wrk is not installed: run scripts/test-deps.sh");
    };
    for name in [
        "post.lua",
        "counter.lua",
        "pipeline.lua",
        "auth.lua",
        "setup.lua",
    ] {
        let (server, log) = recorder();
        let url = server.url("/");
        let script = wrk_script(name);
        let status = Command::new(wrk)
            .args(["-t1", "-c1", "-d1s", "-s", script.to_str().unwrap(), &url])
            .output()
            .unwrap();
        assert!(status.status.success(), "{name}: {status:?}");
        let by_wrk: Vec<_> = arrived(&log).iter().map(Arrived::wire).collect();
        drop(server);
        let (server, log) = recorder();
        let url = server.url("/");
        run(&scripted(&url, wrk_script(name), 30));
        let by_lowlat: Vec<_> = arrived(&log).iter().map(Arrived::wire).collect();
        assert!(by_wrk.len() >= 30, "{name}: wrk sent {}", by_wrk.len());
        // The two servers listened on different ports: Host differs by the port only.
        let normal = |mut w: (String, String, Vec<(String, String)>, Vec<u8>)| {
            for (k, v) in &mut w.2 {
                if k == "Host" {
                    *v = "HOST".into();
                }
            }
            w
        };
        let a: Vec<_> = by_wrk[..30].iter().cloned().map(normal).collect();
        let b: Vec<_> = by_lowlat.into_iter().map(normal).collect();
        assert_eq!(a, b, "{name}");
    }
}

/// What a `lowlat load` process printed, and its exit status.
#[derive(Debug)]
struct Output {
    code: u8,
    stdout: String,
    stderr: String,
}

/// Marks where the CLI's output starts, after the test harness's own lines.
const MARK: &str = "--- lowlat load ---";

/// Runs `lowlat load ARGS` as a process: this test binary again, running only [`cli_child`],
/// which hands the arguments to the CLI. (The CLI's own output, and what Lua prints through C's
/// stdio, are only seen from outside the process.)
fn cli(args: &[&str]) -> Output {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["cli_child", "--exact", "--nocapture", "--test-threads", "1"])
        .env("LOWLAT_LOAD_CLI_ARGS", args.join("\u{1f}"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stdout = stdout
        .split_once(&format!("{MARK}\n"))
        .map_or(stdout.to_string(), |(_, rest)| rest.to_owned());
    Output {
        code: out
            .status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(255),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[derive(clap::Parser)]
struct Cli {
    #[command(flatten)]
    args: lowlat_load::cli::LoadArgs,
}

/// Not a test of its own: the `lowlat load` process of [`cli`] (does nothing otherwise).
#[test]
fn cli_child() {
    let Ok(args) = std::env::var("LOWLAT_LOAD_CLI_ARGS") else {
        return;
    };
    println!("{MARK}");
    let args = std::iter::once("lowlat-load").chain(args.split('\u{1f}'));
    let code = match <Cli as clap::Parser>::try_parse_from(args) {
        Ok(cli) => lowlat_load::cli::run(cli.args),
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    };
    let code = (0..=255u8)
        .find(|&c| ExitCode::from(c) == code)
        .unwrap_or(255);
    std::process::exit(i32::from(code));
}
