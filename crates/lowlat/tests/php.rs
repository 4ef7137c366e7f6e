//! PHP through FastCGI: `lowlat serve --root DIR --php ADDRESS` in front of a real php-fpm
//! (Debian's, `scripts/test-deps.sh` installs it), started by each test with a pool of its own
//! on a Unix socket and one on TCP, running the scripts of `tests/php/` copied into a fresh
//! document root: the CGI variables, bodies both ways, status and redirects, stderr, scripts
//! that stop or hang, the picture that must never run, the front controller, keep-alive,
//! aborts, files sent for the application, and HTTP/2 and HTTP/3 clients.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::upstream::{pattern_sha256, send_pattern};
use support::{curl, field, free_port, Served};

/// The php-fpm binary Debian installs (`php-fpm8.2`, or whichever version is current).
fn fpm_binary() -> PathBuf {
    let found = std::fs::read_dir("/usr/sbin")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("php-fpm"))
        })
        .max();
    found.expect("no php-fpm in /usr/sbin: run scripts/test-deps.sh")
}

/// A php-fpm of the test's own: two pools of `children` processes each, one on a Unix socket,
/// one on TCP, logging into its directory; stopped when dropped.
struct Fpm {
    child: Child,
    dir: tempfile::TempDir,
    sock: PathBuf,
    port: u16,
}

impl Fpm {
    fn start(children: u32) -> Fpm {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("fpm.sock");
        let port = free_port();
        Self::start_in(dir, sock, port, children)
    }

    fn start_in(dir: tempfile::TempDir, sock: PathBuf, port: u16, children: u32) -> Fpm {
        let root = running_as_root();
        let user = if root {
            "user = root\ngroup = root\n"
        } else {
            ""
        };
        let pool = |name: &str, listen: &str| {
            format!(
                "[{name}]\n{user}listen = {listen}\npm = static\npm.max_children = {children}\n\
                 pm.status_path = /fpm-status\nping.path = /ping\ncatch_workers_output = no\n\
                 php_admin_value[display_errors] = Off\nphp_admin_flag[log_errors] = On\n\
                 php_admin_value[post_max_size] = 0\nphp_admin_value[memory_limit] = 64M\n\
                 php_admin_value[output_buffering] = 0\n"
            )
        };
        let conf = format!(
            "[global]\nerror_log = {}/fpm.log\ndaemonize = no\n{}{}",
            dir.path().display(),
            pool("unix", &sock.display().to_string()),
            pool("tcp", &format!("127.0.0.1:{port}")),
        );
        let conf_path = dir.path().join("fpm.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let mut cmd = Command::new(fpm_binary());
        // Debian's php.ini and its conf.d (the extensions: mysqli for WordPress), the pool's
        // own values over them.
        cmd.arg("-y").arg(&conf_path).arg("-F");
        if root {
            cmd.arg("-R");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start php-fpm");
        let fpm = Fpm {
            child,
            dir,
            sock,
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(fpm.sock.exists() && TcpStream::connect(("127.0.0.1", fpm.port)).is_ok()) {
            assert!(
                Instant::now() < deadline,
                "php-fpm did not start: {}",
                fpm.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        fpm
    }

    /// `--php` for the pool on the Unix socket.
    fn unix(&self) -> String {
        format!("unix:{}", self.sock.display())
    }

    /// `--php` for the pool on TCP.
    fn tcp(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("fpm.log")).unwrap_or_default()
    }

    /// Stops it (SIGTERM, then waits), keeping its directory: [`Fpm::restart`] starts it again
    /// on the same addresses.
    fn stop(mut self) -> (tempfile::TempDir, PathBuf, u16) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.sock);
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        (dir, self.sock.clone(), self.port)
    }
}

impl Drop for Fpm {
    fn drop(&mut self) {
        // SIGTERM: the master stops its pools' processes too (SIGKILL would leave them behind).
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the tests run as root (php-fpm then needs `-R` and a user to run its pools as).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A document root holding the scripts of `tests/php/`, a static file, a directory with its
/// own index, and an upload folder with a "picture" that is PHP code.
fn docroot() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/php");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    std::fs::write(dir.path().join("hello.txt"), "static hello\n").unwrap();
    std::fs::create_dir_all(dir.path().join("blog")).unwrap();
    std::fs::write(
        dir.path().join("blog/index.php"),
        "<?php echo 'blog index ', $_SERVER['SCRIPT_NAME'];",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("uploads")).unwrap();
    let ran = dir.path().join("picture-ran");
    std::fs::write(
        dir.path().join("uploads/evil.jpg"),
        format!("<?php file_put_contents('{}', 'ran');", ran.display()),
    )
    .unwrap();
    dir
}

/// `lowlat serve --root ROOT --php TARGET` plus `extra`.
fn serve(root: &Path, target: &str, extra: &[&str]) -> Served {
    let mut args = vec![
        "--root".to_owned(),
        root.display().to_string(),
        "--php".to_owned(),
        target.to_owned(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    Served::start(args)
}

/// GET `path`: status, head, body.
fn get(served: &Served, path: &str, args: &[&str]) -> (u16, String, Vec<u8>) {
    let url = format!("http://{}{path}", served.addr);
    let mut all = vec!["-i"];
    all.extend_from_slice(args);
    all.push(&url);
    let out = curl(&all);
    split_response(&out.stdout)
}

fn split_response(mut raw: &[u8]) -> (u16, String, Vec<u8>) {
    // Interim heads (curl's `Expect: 100-continue` is answered) come first.
    while raw.starts_with(b"HTTP/1.1 1") {
        let end = support::find(raw, b"\r\n\r\n").expect("an interim head");
        raw = &raw[end + 4..];
    }
    let end = support::find(raw, b"\r\n\r\n").unwrap_or_else(|| {
        panic!("no head in {:?}", String::from_utf8_lossy(raw));
    });
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head, raw[end + 4..].to_vec())
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(body)))
}

/// Waits until `served`'s error log holds `needle`.
fn wait_for_log(served: &Served, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = served.log();
        if log.contains(needle) {
            return log;
        }
        assert!(Instant::now() < deadline, "no {needle:?} in {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn scripts_static_files_and_the_front_controller_over_a_unix_socket_and_tcp() {
    let fpm = Fpm::start(2);
    let root = docroot();
    for target in [fpm.unix(), fpm.tcp()] {
        let served = serve(root.path(), &target, &[]);
        let (status, head, body) = get(&served, "/hello.txt", &[]);
        assert_eq!((status, &body[..]), (200, &b"static hello\n"[..]), "{head}");
        assert!(
            field(&head, "content-type").is_some_and(|t| t.starts_with("text/plain")),
            "{head}"
        );
        assert!(
            field(&head, "x-powered-by").is_none(),
            "not through PHP: {head}"
        );

        // The root runs its index.php, a pretty URL the front controller.
        let (status, _, body) = get(&served, "/", &[]);
        assert_eq!(status, 200);
        let v = json(&body);
        assert_eq!(v["script_name"], "/index.php", "{v}");
        let (status, _, body) = get(&served, "/2024/05/hello-world/?replytocom=7", &[]);
        assert_eq!(status, 200);
        let v = json(&body);
        assert_eq!(v["front"], true);
        assert_eq!(v["uri"], "/2024/05/hello-world/?replytocom=7", "{v}");
        assert_eq!(v["script_name"], "/index.php");
        assert_eq!(v["get"]["replytocom"], "7", "{v}");

        // A directory: redirected to its slash (the query kept), then its own index.php.
        let (status, head, _) = get(&served, "/blog?x=1", &[]);
        assert_eq!(status, 301);
        assert_eq!(field(&head, "location"), Some("/blog/?x=1"));
        let (status, _, body) = get(&served, "/blog/", &[]);
        assert_eq!(
            (status, &body[..]),
            (200, &b"blog index /blog/index.php"[..])
        );

        // A script that does not exist is 404, not the front controller.
        let (status, _, _) = get(&served, "/missing.php", &[]);
        assert_eq!(status, 404);
        // Dotfiles stay hidden, as for static files.
        let (status, _, _) = get(&served, "/.env", &[]);
        assert_eq!(status, 404);
    }
    // The php-fpm log says nothing went wrong.
    assert!(!fpm.log().contains("ERROR"), "{}", fpm.log());
}

#[test]
fn the_cgi_variables_are_nginx_fastcgi_params() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let served = serve(
        root.path(),
        &fpm.unix(),
        &[
            "--php-param",
            "APP_ENV=test",
            "--php-param",
            "HTTP_X_FORCED=yes",
        ],
    );
    let (status, _, body) = get(
        &served,
        "/params.php/extra/p%20ath?a=1&b=two",
        &[
            "-H",
            "Proxy: http://evil.example:8080",
            "-H",
            "X-Custom-Thing: hello",
            "-H",
            "X-Forced: no",
            "-H",
            "Cookie: a=1",
            "-H",
            "Cookie: b=2",
        ],
    );
    assert_eq!(status, 200);
    let v = json(&body);
    let s = &v["server"];
    let root_path = std::fs::canonicalize(root.path()).unwrap();
    let root_text = root_path.display().to_string();
    for (name, want) in [
        ("SCRIPT_FILENAME", format!("{root_text}/params.php")),
        ("SCRIPT_NAME", "/params.php".to_owned()),
        ("PATH_INFO", "/extra/p ath".to_owned()),
        ("PATH_TRANSLATED", format!("{root_text}/extra/p ath")),
        ("DOCUMENT_ROOT", root_text.clone()),
        (
            "REQUEST_URI",
            "/params.php/extra/p%20ath?a=1&b=two".to_owned(),
        ),
        ("QUERY_STRING", "a=1&b=two".to_owned()),
        ("REQUEST_METHOD", "GET".to_owned()),
        ("SERVER_PROTOCOL", "HTTP/1.1".to_owned()),
        ("SERVER_PORT", served.port().to_string()),
        ("SERVER_ADDR", "127.0.0.1".to_owned()),
        ("SERVER_NAME", "127.0.0.1".to_owned()),
        ("REMOTE_ADDR", "127.0.0.1".to_owned()),
        ("REQUEST_SCHEME", "http".to_owned()),
        ("GATEWAY_INTERFACE", "CGI/1.1".to_owned()),
        ("HTTP_HOST", served.addr.to_string()),
        ("HTTP_X_CUSTOM_THING", "hello".to_owned()),
        ("HTTP_X_FORCED", "yes".to_owned()),
        ("APP_ENV", "test".to_owned()),
    ] {
        assert_eq!(s[name], want.as_str(), "{name}: {s}");
    }
    assert!(s.get("HTTP_PROXY").is_none(), "httpoxy: {s}");
    assert!(s.get("HTTPS").is_none(), "{s}");
    assert!(s["REMOTE_PORT"].as_str().unwrap().parse::<u16>().is_ok());
    assert_eq!(v["get"]["b"], "two");
    assert_eq!(v["cookie"]["a"], "1", "{v}");
    assert_eq!(v["cookie"]["b"], "2", "{v}");

    // A form post: CONTENT_TYPE, CONTENT_LENGTH and $_POST.
    let (status, _, body) = get(&served, "/params.php", &["-d", "name=value&x=%C3%A9"]);
    assert_eq!(status, 200);
    let v = json(&body);
    assert_eq!(v["server"]["REQUEST_METHOD"], "POST");
    assert_eq!(v["server"]["CONTENT_LENGTH"], "19");
    assert_eq!(
        v["server"]["CONTENT_TYPE"],
        "application/x-www-form-urlencoded"
    );
    assert_eq!(v["post"]["name"], "value");
    assert_eq!(v["post"]["x"], "é");
}

#[test]
fn request_bodies_whole_chunked_and_streamed() {
    let fpm = Fpm::start(2);
    let root = docroot();
    // Chunked bodies are read whole (up to --max-body) before they go: CGI needs a length.
    let served = serve(root.path(), &fpm.unix(), &["--max-body", "4m"]);
    let dir = tempfile::tempdir().unwrap();
    for size in [0usize, 1000, 70_000, 3_000_000, 5_000_000] {
        let file = dir.path().join(format!("body-{size}"));
        std::fs::write(&file, support::upstream::pattern(0, size)).unwrap();
        let at = format!("@{}", file.display());
        for chunked in [false, true] {
            let mut args = vec![
                "-H",
                "Content-Type: application/octet-stream",
                "--data-binary",
                &at,
            ];
            if chunked {
                args.extend(["-H", "Transfer-Encoding: chunked"]);
            }
            let (status, head, body) = get(&served, "/echo.php", &args);
            if chunked && size > 4 << 20 {
                assert_eq!(status, 413, "{size} chunked: {head}");
                continue;
            }
            assert_eq!(status, 200, "{size} chunked={chunked}: {head}");
            let v = json(&body);
            assert_eq!(v["length"], size, "{v}");
            assert_eq!(v["sha256"], pattern_sha256(size as u64), "{v}");
            // A body of unknown length is read whole first: CGI needs its length.
            assert_eq!(v["content_length"], size.to_string(), "{v}");
        }
    }
}

#[test]
fn status_location_and_lengths() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let served = serve(root.path(), &fpm.tcp(), &[]);
    let (status, head, body) = get(&served, "/status.php?case=teapot", &[]);
    assert_eq!((status, &body[..]), (418, &b"teapot\n"[..]), "{head}");
    assert!(head.starts_with("HTTP/1.1 418 Short And Stout"), "{head}");
    assert!(field(&head, "status").is_none(), "{head}");
    let (status, head, _) = get(&served, "/status.php?case=created", &[]);
    assert_eq!(status, 201);
    assert_eq!(field(&head, "location"), Some("/things/1"));
    let (status, head, _) = get(&served, "/status.php?case=redirect", &[]);
    assert_eq!(status, 302);
    assert_eq!(
        field(&head, "location"),
        Some("https://example.com/elsewhere")
    );
    let (status, head, _) = get(&served, "/status.php?case=local", &[]);
    assert_eq!(
        status, 302,
        "PHP sends its own Status with a Location: {head}"
    );
    let (status, head, body) = get(&served, "/status.php?case=nocontent", &[]);
    assert_eq!(status, 204, "{head}");
    assert!(body.is_empty());
    // A length the application gives is the one the client gets; without one, chunks.
    let (status, head, body) = get(&served, "/status.php?case=length", &[]);
    assert_eq!((status, &body[..]), (200, &b"12345"[..]));
    assert_eq!(field(&head, "content-length"), Some("5"), "{head}");
    assert!(field(&head, "transfer-encoding").is_none(), "{head}");
    let (_, head, _) = get(&served, "/status.php", &[]);
    assert_eq!(field(&head, "transfer-encoding"), Some("chunked"), "{head}");
    // HEAD: the head only.
    let (status, _, body) = get(&served, "/status.php?case=length", &["-I"]);
    assert_eq!(status, 200);
    assert!(body.is_empty());
}

#[test]
fn stderr_reaches_the_error_log_and_failing_scripts_end_cleanly() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let served = serve(
        root.path(),
        &fpm.unix(),
        &["--proxy-first-byte-timeout", "1s"],
    );
    let (status, _, body) = get(&served, "/stderr.php?tag=abc123", &[]);
    assert_eq!((status, &body[..]), (200, &b"logged\n"[..]));
    let log = wait_for_log(&served, "stderr-marker abc123");
    assert!(log.contains("FastCGI stderr"), "{log}");

    // exit() midway: what was written is the whole response.
    let (status, _, body) = get(&served, "/exit.php", &[]);
    assert_eq!((status, &body[..]), (200, &b"before\n"[..]));
    // A fatal error after output: the response ends there, the error goes to the log.
    let (status, _, body) = get(&served, "/exit.php?how=fatal", &[]);
    assert_eq!((status, &body[..]), (200, &b"before\n"[..]));
    wait_for_log(&served, "no_such_function");
    // A fatal error before any output: PHP's own 500.
    let (status, _, _) = get(&served, "/fatal.php", &[]);
    assert_eq!(status, 500);

    // Past the first-byte timeout: 504, and the next request is served.
    let started = Instant::now();
    let (status, _, _) = get(&served, "/sleep.php?s=4", &[]);
    assert_eq!(status, 504);
    assert!(started.elapsed() < Duration::from_secs(3));
    let (status, _, body) = get(&served, "/hello.txt", &[]);
    assert_eq!((status, &body[..]), (200, &b"static hello\n"[..]));
    let (status, _, _) = get(&served, "/exit.php", &[]);
    assert_eq!(status, 200);
}

#[test]
fn a_picture_under_uploads_never_runs() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let served = serve(root.path(), &fpm.unix(), &[]);
    for path in [
        "/uploads/evil.jpg/x.php",
        "/uploads/evil.jpg/.php",
        "/uploads/evil.jpg%2Fx.php",
        "/uploads/evil.jpg/x.php/more",
    ] {
        let (status, _, _) = get(&served, path, &[]);
        assert!(status == 404 || status == 400, "{path}: {status}");
    }
    // The picture itself is a static file, sent as it is.
    let (status, head, body) = get(&served, "/uploads/evil.jpg", &[]);
    assert_eq!(status, 200);
    assert_eq!(field(&head, "content-type"), Some("image/jpeg"), "{head}");
    assert!(body.starts_with(b"<?php"));
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !root.path().join("picture-ran").exists(),
        "the picture was run"
    );
}

/// [`serve`] over `fpm`'s Unix socket, with php-fpm's status page at `/fpm-status` through a
/// `--proxy` rule to the same pool (a FastCGI group of its own), and `extra`.
fn serve_with_status_page(fpm: &Fpm, root: &Path, extra: &[&str]) -> Served {
    let status_rule = format!("/fpm-status=fastcgi+unix:{}", fpm.sock.display());
    let mut args = vec![
        "--proxy",
        &status_rule,
        "--proxy-fastcgi-param",
        "SCRIPT_FILENAME=/fpm-status",
    ];
    args.extend_from_slice(extra);
    serve(root, &fpm.unix(), &args)
}

#[test]
fn php_fpm_keeps_one_connection_for_many_requests() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let served = serve_with_status_page(&fpm, root.path(), &[]);
    let mut pids = std::collections::HashSet::new();
    for _ in 0..20 {
        let (status, _, body) = get(&served, "/pid.php", &[]);
        assert_eq!(status, 200);
        pids.insert(String::from_utf8(body).unwrap());
    }
    assert_eq!(
        pids.len(),
        1,
        "one connection, one php-fpm process: {pids:?}"
    );
    assert_eq!(
        connected_unix(&fpm.sock),
        1,
        "php-fpm holds one connection after 20 requests"
    );
    // The status page through a --proxy rule to a FastCGI group, with its SCRIPT_FILENAME set.
    let (status, _, body) = get(&served, "/fpm-status?json", &[]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v = json(&body);
    assert_eq!(v["pool"], "unix", "{v}");
}

/// `curl` asking for `path` `n` times over one keep-alive connection: the statuses.
fn statuses_over_one_connection(addr: std::net::SocketAddr, path: &str, n: usize) -> Vec<u16> {
    let url = format!("http://{addr}{path}");
    let mut args = vec!["-s", "-w", "%{http_code}\n"];
    for _ in 0..n {
        args.extend_from_slice(&["-o", "/dev/null", &url]);
    }
    let out = curl(&args);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap_or(0))
        .collect()
}

/// The statuses `clients` clients at once get, each asking for `path` `each` times over one
/// connection of its own.
fn statuses_of_clients(
    addr: std::net::SocketAddr,
    path: &'static str,
    clients: usize,
    each: usize,
) -> Vec<u16> {
    let threads: Vec<_> = (0..clients)
        .map(|_| std::thread::spawn(move || statuses_over_one_connection(addr, path, each)))
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect()
}

/// Requests that overlap in time keep their php-fpm connections, and more clients at once than
/// php-fpm has processes are all answered: a connection waiting in php-fpm's backlog gets the
/// process of the next one to finish, or — when nothing else is running to finish — of an idle
/// one the sweep closes, instead of waiting behind connections kept idle in the pool.
#[test]
fn overlapping_requests_keep_their_connections_and_a_backlog_is_served() {
    // Two processes, both held by the scripts' connections once two clients have run: the
    // status page's request (a group of its own) then waits in php-fpm's backlog until the
    // sweep closes one of them.
    let fpm = Fpm::start(2);
    let root = docroot();
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let served = serve_with_status_page(
        &fpm,
        root.path(),
        &["--proxy-first-byte-timeout", "5s", "--metrics", &metrics],
    );
    let addr = served.addr;
    let run = |clients: usize, each: usize| statuses_of_clients(addr, "/pid.php", clients, each);
    // Two clients: two connections, kept — after a few more while lowlat learns that php-fpm
    // serves two at once (a new connection's request still unread when another's is answered
    // may be queued). php-fpm counts requests, not connections, so the connections are told
    // apart by their sockets' inodes, sampled while the requests run; a connection a request
    // would make over a hundred.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (stop, sock) = (std::sync::Arc::clone(&stop), fpm.sock.clone());
        std::thread::spawn(move || {
            let mut seen = std::collections::HashSet::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                seen.extend(connected_unix_inodes(&sock));
                std::thread::sleep(Duration::from_millis(1));
            }
            seen
        })
    };
    let statuses = run(2, 60);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = sampler.join().unwrap();
    assert_eq!(statuses.len(), 120);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert!(
        (1..=40).contains(&seen.len()),
        "{} php-fpm connections seen for 120 requests from two clients",
        seen.len()
    );
    // Both processes are held by those two idle connections: the status page's request waits
    // in php-fpm's backlog until the sweep closes one.
    let asked = Instant::now();
    let (status, _, body) = get(&served, "/fpm-status?json", &[]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "the status page waited {:?} for a process",
        asked.elapsed()
    );
    // Three times as many clients as processes: once one request was seen queued in php-fpm's
    // backlog, the others wait their turn in lowlat, each taking the next connection that
    // comes free — not a connection each, queued in php-fpm's backlog.
    let connects_before = connects(&metrics);
    let start = Instant::now();
    let statuses = run(6, 60);
    assert_eq!(statuses.len(), 360);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let opened = connects(&metrics) - connects_before;
    assert!(
        opened <= 12,
        "{opened} php-fpm connections opened for 360 requests from six clients"
    );
}

/// Scripts that run longer than lowlat's check for a queued connection (20 ms) keep every
/// php-fpm process busy: a running script has not read its request's last record, which must
/// not make its connection look queued in php-fpm's backlog (a connection closed for it, what
/// was learnt of php-fpm's size forgotten, and about half the processes left idle). 24 clients
/// on 8 processes, 100 ms a script: 120 requests take 1.5 s when every process always runs one.
#[test]
fn scripts_longer_than_the_queue_check_keep_every_process_busy() {
    let fpm = Fpm::start(8);
    let root = docroot();
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let served = serve(
        root.path(),
        &fpm.unix(),
        &["--proxy-first-byte-timeout", "10s", "--metrics", &metrics],
    );
    let addr = served.addr;
    let start = Instant::now();
    let statuses = statuses_of_clients(addr, "/nap.php", 24, 5);
    let took = start.elapsed();
    assert_eq!(statuses.len(), 120);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    // Sleeping, not computing, sets the pace: 1.5 s with all eight running; the build before
    // took 4.0 s. The bound leaves room for a machine busy with other tests.
    assert!(
        took < Duration::from_millis(3000),
        "120 naps of 100 ms on eight processes took {took:?}"
    );
    let opened = connects(&metrics);
    assert!(
        opened <= 48,
        "{opened} php-fpm connections opened for 120 requests"
    );
}

/// A request waiting in lowlat for a php-fpm connection waits no longer than its first-byte
/// timeout (504), and the queue goes on serving after it.
#[test]
fn a_request_waiting_for_a_php_fpm_connection_times_out() {
    let fpm = Fpm::start(1);
    let root = docroot();
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let served = serve(
        root.path(),
        &fpm.unix(),
        &["--proxy-first-byte-timeout", "3s", "--metrics", &metrics],
    );
    let addr = served.addr;
    let timed = move |path: &'static str| {
        std::thread::spawn(move || {
            let started = Instant::now();
            let code = statuses_over_one_connection(addr, path, 1)[0];
            (code, started.elapsed())
        })
    };
    // Two at once for one process: the second is queued in php-fpm's backlog, which the
    // worker sees when the first is answered (two seconds in). From then on requests beyond
    // one wait in lowlat.
    let x = timed("/sleep.php?s=2");
    std::thread::sleep(Duration::from_millis(200));
    let y = timed("/sleep.php?s=1");
    assert_eq!(x.join().unwrap().0, 200);
    // The second runs for a second more: a request sent now waits for it, and one after that
    // waits behind both past its first-byte timeout — in lowlat, opening no connection. The
    // first is written from here, and the second half a second later, so that lowlat has read
    // the first before the second comes however busy the machine is (each from a thread of its
    // own, they could arrive the other way round).
    let connects_before = connects(&metrics);
    let mut first = TcpStream::connect(addr).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    send_get(&mut first, "/sleep.php?s=5");
    let a = std::thread::spawn(move || read_response(&mut first).0);
    std::thread::sleep(Duration::from_millis(500));
    let b = timed("/pid.php");
    assert_eq!(y.join().unwrap().0, 200);
    let (code, waited) = b.join().unwrap();
    assert_eq!(code, 504, "after {waited:?}");
    assert_eq!(
        connects(&metrics),
        connects_before,
        "a waiting request connected"
    );
    assert!(
        waited > Duration::from_millis(2500) && waited < Duration::from_millis(4500),
        "answered after {waited:?}"
    );
    // The first waiter got the process, and then its own first-byte timeout.
    assert_eq!(a.join().unwrap(), 504);
    // Once its script is done, the process answers again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while statuses_over_one_connection(addr, "/pid.php", 1)[0] != 200 {
        assert!(Instant::now() < deadline, "php-fpm is not answering again");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One GET of `path` on a kept-alive connection: the status and the body (by its length, or
/// dechunked).
fn get_on(conn: &mut TcpStream, path: &str) -> (u16, Vec<u8>) {
    send_get(conn, path);
    read_response(conn)
}

/// Writes a GET of `path` on `conn`.
fn send_get(conn: &mut TcpStream, path: &str) {
    write!(conn, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
}

/// Reads one response from `conn`: the status and the body (by its length, or dechunked).
fn read_response(conn: &mut TcpStream) -> (u16, Vec<u8>) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = support::find(&raw, b"\r\n\r\n") {
            let (status, head, body) = split_response(&raw);
            if let Some(len) = field(&head, "content-length").and_then(|v| v.parse().ok()) {
                if body.len() >= len {
                    return (status, body[..len].to_vec());
                }
            } else if raw.len() > end + 4 && raw.ends_with(b"0\r\n\r\n") {
                return (status, dechunk(&body));
            }
        }
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&raw));
        raw.extend_from_slice(&buf[..n]);
    }
}

/// Kept-alive client connections to `served` grouped by the worker that accepted each: opened
/// until one worker has two and the other one (the access log says which is which).
fn connections_by_worker(served: &Served, log: &Path) -> [Vec<TcpStream>; 2] {
    let mut conns: Vec<TcpStream> = Vec::new();
    let mut by_worker: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
    while conns.len() < 64 {
        for _ in 0..4 {
            let mut c = TcpStream::connect(served.addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let (status, _) = get_on(&mut c, &format!("/hello.txt?c={}", conns.len()));
            assert_eq!(status, 200);
            conns.push(c);
        }
        // Each worker writes its lines out once a second.
        let deadline = Instant::now() + Duration::from_secs(5);
        let lines = loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<(usize, usize)> = text
                .lines()
                .filter_map(|l| {
                    let (uri, worker) = l.split_once(' ')?;
                    Some((
                        uri.strip_prefix("/hello.txt?c=")?.parse().ok()?,
                        worker.parse().ok()?,
                    ))
                })
                .collect();
            if lines.len() == conns.len() {
                break lines;
            }
            assert!(Instant::now() < deadline, "the access log: {text}");
            std::thread::sleep(Duration::from_millis(100));
        };
        by_worker = [Vec::new(), Vec::new()];
        for (c, worker) in lines {
            by_worker[worker].push(c);
        }
        let (a, b) = (&by_worker[0], &by_worker[1]);
        if (a.len() >= 2 && !b.is_empty()) || (b.len() >= 2 && !a.is_empty()) {
            break;
        }
    }
    if by_worker[0].len() < 2 {
        by_worker.swap(0, 1);
    }
    let mut slots: Vec<Option<TcpStream>> = conns.into_iter().map(Some).collect();
    by_worker.map(|keys| keys.into_iter().map(|k| slots[k].take().unwrap()).collect())
}

/// With two workers and two php-fpm processes, one worker's idle connections can hold both
/// processes: a request through the other worker is answered within a second all the same —
/// that worker, seeing at its sweep its request wait in php-fpm's backlog with no idle
/// connection of its own to close, asks the other for a process back (proxy/fcgi_share.rs) —
/// rather than waiting until the idle connections time out (a minute) or its first-byte
/// timeout gives it a 504. And back:
/// two requests at once through the first worker, with a process held by the second's idle
/// connection, are both served.
#[test]
fn one_workers_idle_connections_do_not_starve_another_worker() {
    let fpm = Fpm::start(2);
    let root = docroot();
    // Answers at once, then holds its process half a second: each connection is seen to hold
    // one from its first bytes on.
    std::fs::write(
        root.path().join("hold.php"),
        "<?php echo 'held'; flush(); usleep(500000); echo ' done';",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let log_arg = log.display().to_string();
    let served = serve(
        root.path(),
        &fpm.unix(),
        &[
            "--workers",
            "2",
            "--proxy-first-byte-timeout",
            "8s",
            "--access-log",
            &log_arg,
            "--access-log-format",
            "$request_uri $worker",
        ],
    );
    let [mut a, mut b] = connections_by_worker(&served, &log);
    // Two requests at once through worker A: two connections, each holding a process, both
    // pooled when their scripts end.
    let at_once = |conns: &mut [TcpStream]| {
        std::thread::scope(|s| {
            let runs: Vec<_> = conns
                .iter_mut()
                .take(2)
                .map(|c| {
                    s.spawn(move || {
                        let started = Instant::now();
                        let (status, body) = get_on(c, "/hold.php");
                        (status, body, started.elapsed())
                    })
                })
                .collect();
            for r in runs {
                let (status, body, took) = r.join().unwrap();
                assert_eq!((status, &body[..]), (200, &b"held done"[..]));
                assert!(took < Duration::from_millis(2500), "took {took:?}");
            }
        });
    };
    at_once(&mut a);
    assert_eq!(
        connected_unix(&fpm.sock),
        2,
        "worker A pools both processes"
    );
    for round in 0..3 {
        // Worker B has no connection to php-fpm of its own to close.
        let asked = Instant::now();
        let (status, _) = get_on(&mut b[0], "/pid.php");
        let waited = asked.elapsed();
        assert_eq!(status, 200, "round {round}, after {waited:?}");
        assert!(
            waited < Duration::from_secs(2),
            "round {round}: worker B waited {waited:?} for a process"
        );
        // Worker A needs both processes again: one is held by B's idle connection.
        at_once(&mut a);
    }
    assert!(
        !served.log().contains("FastCGI response refused"),
        "{}",
        served.log()
    );
}

/// Connections opened to every upstream server, from `/metrics` at `addr`.
fn connects(addr: &str) -> u64 {
    let out = curl(&[&format!("http://{addr}/metrics")]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("lowlat_upstream_connects_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The inodes of the connected sockets whose name is `path` (the server's ends of a Unix
/// socket's connections), from /proc/net/unix.
fn connected_unix_inodes(path: &Path) -> Vec<u64> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let name = path.display().to_string();
    table
        .lines()
        .filter(|l| l.ends_with(&name))
        // Num RefCount Protocol Flags Type St Inode Path: St 03 is connected.
        .filter(|l| l.split_whitespace().nth(5) == Some("03"))
        .filter_map(|l| l.split_whitespace().nth(6)?.parse().ok())
        .collect()
}

/// How many sockets whose name is `path` are connected (the server's ends of a Unix socket's
/// connections).
fn connected_unix(path: &Path) -> usize {
    connected_unix_inodes(path).len()
}

#[test]
fn large_bodies_both_ways_hold_little_memory() {
    const SIZE: u64 = 64 << 20;
    let fpm = Fpm::start(2);
    let root = docroot();
    let served = serve(root.path(), &fpm.unix(), &["--proxy-max-body", "2g"]);
    let warm = served.status_kib("VmRSS:");

    // Download: generated by PHP as it goes, chunked to the client.
    let mut s = TcpStream::connect(served.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET /big.php?size={SIZE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let (status, head, body) = split_response(&raw);
    assert_eq!(status, 200, "{head}");
    assert_eq!(field(&head, "transfer-encoding"), Some("chunked"));
    let body = dechunk(&body);
    assert_eq!(body.len() as u64, SIZE);
    if let Some(at) = (0..body.len()).find(|&i| body[i] != (i % 251) as u8) {
        panic!("byte {at} differs");
    }
    drop(body);
    drop(raw);

    // Upload: streamed to FCGI_STDIN as it arrives.
    let mut s = TcpStream::connect(served.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "POST /echo.php HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {SIZE}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    send_pattern(&mut s, SIZE, 0).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let (status, head, body) = split_response(&raw);
    assert_eq!(status, 200, "{head}");
    let v = json(&dechunk(&body));
    assert_eq!(v["length"], SIZE, "{v}");
    assert_eq!(v["sha256"], pattern_sha256(SIZE));

    let grew = served.status_kib("VmHWM:").saturating_sub(warm);
    assert!(
        grew < 32 * 1024,
        "lowlat grew by {grew} KiB moving {} MiB each way",
        SIZE >> 20
    );
}

/// A chunked body's bytes.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = support::find(raw, b"\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap().trim(), 16)
            .unwrap();
        raw = &raw[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

#[test]
fn a_client_that_leaves_aborts_the_script() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let served = serve(root.path(), &fpm.unix(), &[]);
    let mut s = TcpStream::connect(served.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /slow.php?tag=gone HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 2048];
    let n = s.read(&mut first).unwrap();
    assert!(n > 0 && first.starts_with(b"HTTP/1.1 200"));
    drop(s);
    let end = root.path().join("slow-gone.end");
    let deadline = Instant::now() + Duration::from_secs(4);
    // file_put_contents creates the file before it writes: awaited until it holds something.
    let said = loop {
        let said = std::fs::read_to_string(&end).unwrap_or_default();
        if !said.is_empty() {
            break said;
        }
        assert!(
            Instant::now() < deadline,
            "the script did not stop: {}",
            fpm.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(said, "aborted");
    assert!(!root.path().join("slow-gone.done").exists());
    // The pool is whole again: the next request runs.
    let (status, _, _) = get(&served, "/pid.php", &[]);
    assert_eq!(status, 200);
}

#[test]
fn files_sent_for_the_application_from_an_internal_location() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let private = tempfile::tempdir().unwrap();
    let report = support::upstream::pattern(0, 300_000);
    std::fs::write(private.path().join("report.txt"), &report).unwrap();
    let internal = format!("/protected/={}", private.path().display());
    let served = serve(root.path(), &fpm.unix(), &["--php-internal", &internal]);
    let (status, head, body) = get(&served, "/sendfile.php", &[]);
    assert_eq!(status, 200, "{head}");
    assert!(body == report, "{} bytes, not the file's", body.len());
    assert_eq!(field(&head, "content-length"), Some("300000"), "{head}");
    assert!(
        field(&head, "content-type").is_some_and(|t| t.starts_with("text/plain")),
        "{head}"
    );
    assert_eq!(
        field(&head, "content-disposition"),
        Some("attachment; filename=\"report.txt\"")
    );
    assert!(field(&head, "x-accel-redirect").is_none(), "{head}");
    // X-Sendfile: a file under the internal directory, and nothing outside it.
    let path = private.path().join("report.txt");
    let (status, _, body) = get(
        &served,
        &format!("/sendfile.php?how=sendfile&path={}", path.display()),
        &[],
    );
    assert_eq!((status, body.len()), (200, report.len()));
    let (status, _, _) = get(&served, "/sendfile.php?how=sendfile&path=/etc/passwd", &[]);
    assert_eq!(status, 404);
    let (status, _, _) = get(&served, "/sendfile.php?name=../../etc/passwd", &[]);
    assert_eq!(status, 404);
    // Clients cannot ask for the internal location themselves.
    let (status, _, _) = get(&served, "/protected/report.txt", &[]);
    assert_eq!(status, 404);
    // HEAD: the file's head only.
    let (status, head, body) = get(&served, "/sendfile.php", &["-I"]);
    assert_eq!((status, body.len()), (200, 0));
    assert_eq!(field(&head, "content-length"), Some("300000"), "{head}");
}

#[test]
fn over_http2_as_over_http1() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let served = serve(root.path(), &fpm.unix(), &["--h2c"]);
    let (status, head, body) = get(
        &served,
        "/params.php/p?x=1",
        &[
            "--http2-prior-knowledge",
            "-H",
            "Cookie: a=1",
            "-H",
            "Cookie: b=2",
        ],
    );
    assert_eq!(status, 200, "{head}");
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    let v = json(&body);
    assert_eq!(v["server"]["SERVER_PROTOCOL"], "HTTP/2.0");
    assert_eq!(v["server"]["PATH_INFO"], "/p");
    assert_eq!(v["cookie"]["b"], "2", "HTTP/2's split cookies joined: {v}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body");
    std::fs::write(&file, support::upstream::pattern(0, 500_000)).unwrap();
    let at = format!("@{}", file.display());
    let (status, _, body) = get(
        &served,
        "/echo.php",
        &[
            "--http2-prior-knowledge",
            "-H",
            "Content-Type: application/octet-stream",
            "--data-binary",
            &at,
        ],
    );
    assert_eq!(status, 200);
    let v = json(&body);
    assert_eq!(v["sha256"], pattern_sha256(500_000), "{v}");
    let (status, _, body) = get(
        &served,
        "/big.php?size=2000000",
        &["--http2-prior-knowledge"],
    );
    assert_eq!((status, body.len()), (200, 2_000_000));
    assert_eq!(
        support::upstream::sha256_hex(&body),
        pattern_sha256(2_000_000)
    );
    let (status, _, body) = get(&served, "/hello.txt", &["--http2-prior-knowledge"]);
    assert_eq!((status, &body[..]), (200, &b"static hello\n"[..]));
}

#[test]
fn over_http3_as_over_http1() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let (_pki, cert) = support::h3::cert();
    let root_arg = root.path().display().to_string();
    let target = fpm.unix();
    let served = support::h3::serve(&cert, &["--root", &root_arg, "--php", &target]);
    let spec = |method: &str, path: &str| format!(r#"{{"method": "{method}", "path": "{path}"}}"#);
    let post = serde_json::json!({"method": "POST", "path": "/echo.php", "body_pattern": 300_000,
        "headers": [["content-type", "application/octet-stream"], ["content-length", "300000"]]});
    let got = support::h3::client(
        &served,
        &[
            "fetch",
            &spec("GET", "/params.php/h3?x=1"),
            &post.to_string(),
            &spec("GET", "/big.php?size=1000000"),
            &spec("GET", "/hello.txt"),
            &spec("GET", "/missing.php"),
        ],
    );
    let r = &got["responses"];
    assert_eq!(r[0]["status"], 200, "{got}");
    let s = &r[0]["json"]["server"];
    assert_eq!(s["SERVER_PROTOCOL"], "HTTP/3.0", "{s}");
    assert_eq!(s["HTTPS"], "on", "{s}");
    assert_eq!(s["REQUEST_SCHEME"], "https");
    assert_eq!(s["PATH_INFO"], "/h3");
    assert_eq!(r[1]["status"], 200, "{got}");
    assert_eq!(r[1]["json"]["length"], 300_000, "{got}");
    assert_eq!(r[2]["status"], 200);
    assert_eq!(r[2]["length"], 1_000_000);
    assert_eq!(r[2]["sha256"], pattern_sha256(1_000_000));
    assert_eq!(r[3]["status"], 200);
    assert_eq!(r[4]["status"], 404);
}

#[test]
fn php_fpm_restarted_under_load_is_missed_only_while_it_is_down() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let served = serve(root.path(), &fpm.unix(), &["--proxy-fail-timeout", "1s"]);
    let addr = served.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = std::sync::Arc::clone(&stop);
    let client = std::thread::spawn(move || {
        // (sent, answered, status)
        let mut results: Vec<(Instant, Instant, u16)> = Vec::new();
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let sent = Instant::now();
            let out = curl(&[
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("http://{addr}/pid.php"),
            ]);
            let code = String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0);
            results.push((sent, Instant::now(), code));
        }
        results
    });
    std::thread::sleep(Duration::from_millis(700));
    let down_at = Instant::now();
    let (dir, sock, port) = fpm.stop();
    std::thread::sleep(Duration::from_millis(700));
    let fpm = Fpm::start_in(dir, sock, port, 2);
    let up_at = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let results = client.join().unwrap();
    let before: Vec<u16> = results
        .iter()
        .filter(|(_, answered, _)| *answered < down_at)
        .map(|r| r.2)
        .collect();
    assert!(!before.is_empty());
    assert!(
        before.iter().all(|&c| c == 200),
        "errors before the stop: {before:?}"
    );
    assert!(
        results.iter().any(|r| r.2 == 502),
        "never down: {results:?}"
    );
    // Once php-fpm is back (and a moment for a pooled connection found closed), only 200s.
    let settled = up_at + Duration::from_millis(300);
    let after: Vec<u16> = results
        .iter()
        .filter(|(sent, _, _)| *sent > settled)
        .map(|r| r.2)
        .collect();
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|&c| c == 200),
        "errors after the restart: {after:?}"
    );
    drop(fpm);
}

#[test]
fn an_upstream_group_of_php_fpm_pools_with_active_health_checks() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let dead = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("lowlat.toml");
    std::fs::write(
        &config,
        format!(
            "root = \"{}\"\nphp = \"fpm\"\n\n[[upstream]]\nname = \"fpm\"\n\
             servers = [\"fastcgi+unix:{}\", \"fastcgi://127.0.0.1:{}\", \"fastcgi://127.0.0.1:{dead}\"]\n\
             health_check = \"/ping\"\nhealth_interval = \"200ms\"\n",
            root.path().display(),
            fpm.sock.display(),
            fpm.port,
        ),
    )
    .unwrap();
    let served = Served::start(["--config", config.to_str().unwrap()]);
    wait_for_log(&served, &format!("127.0.0.1:{dead}"));
    let log = served.log();
    let downs: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("health check: down"))
        .collect();
    assert_eq!(downs.len(), 1, "{log}");
    assert!(downs[0].contains(&format!("127.0.0.1:{dead}")), "{log}");
    // Posts are not retried elsewhere: every one answered shows the dead server is skipped.
    for _ in 0..12 {
        let (status, _, body) = get(&served, "/echo.php", &["-d", "x=1"]);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
}

/// DokuWiki from Debian's package, copied with its configuration and data into a temporary
/// directory (the installed wiki is left alone), served by `--php` with doku.php as the index
/// and DokuWiki's own rewriting of paths (`userewrite = 2`: `/doku.php/page`, through
/// PATH_INFO): a page created, shown, edited, shown again, its history listed.
#[test]
fn dokuwiki_page_created_edited_and_shown() {
    let installed = Path::new("/usr/share/dokuwiki");
    assert!(
        installed.join("doku.php").exists(),
        "no DokuWiki in /usr/share/dokuwiki: run scripts/test-deps.sh"
    );
    let fpm = Fpm::start(2);
    let dir = tempfile::tempdir().unwrap();
    let (www, conf, data) = (
        dir.path().join("www"),
        dir.path().join("conf"),
        dir.path().join("data"),
    );
    for (from, to) in [
        ("/usr/share/dokuwiki", &www),
        ("/etc/dokuwiki", &conf),
        ("/var/lib/dokuwiki/data", &data),
    ] {
        let ok = Command::new("cp")
            .arg("-rL")
            .arg(from)
            .arg(to)
            .status()
            .unwrap()
            .success();
        assert!(ok, "cp -rL {from}");
    }
    // This copy's configuration and data, not the system's.
    std::fs::write(
        www.join("inc/preload.php"),
        format!("<?php\ndefine('DOKU_CONF', '{}/');\n", conf.display()),
    )
    .unwrap();
    std::fs::write(
        conf.join("local.php"),
        format!(
            "<?php\n$conf['title'] = 'lowlat wiki';\n$conf['savedir'] = '{}';\n\
             $conf['useacl'] = 0;\n$conf['userewrite'] = 2;\n$conf['baseurl'] = '';\n",
            data.display()
        ),
    )
    .unwrap();
    let served = serve(&www, &fpm.unix(), &["--php-index", "doku.php"]);
    let jar = dir.path().join("cookies");
    let jar = jar.to_str().unwrap();
    let page = "/doku.php/wiki:lowlat_test";

    // The start page, a stylesheet DokuWiki builds in PHP, and a static picture.
    let (status, _, body) = get(&served, "/", &["-c", jar]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("lowlat wiki"));
    let (status, head, _) = get(&served, "/lib/exe/css.php", &[]);
    assert_eq!(status, 200);
    assert!(field(&head, "content-type").is_some_and(|t| t.starts_with("text/css")));
    let (status, head, _) = get(&served, "/lib/tpl/dokuwiki/images/logo.png", &[]);
    assert_eq!(status, 200);
    assert_eq!(field(&head, "content-type"), Some("image/png"), "{head}");

    let hidden = regex::Regex::new(r#"<input[^>]*type="hidden"[^>]*>"#).unwrap();
    let (name_re, value_re) = (
        regex::Regex::new(r#"name="([^"]*)""#).unwrap(),
        regex::Regex::new(r#"value="([^"]*)""#).unwrap(),
    );
    let attr = |re: &regex::Regex, tag: &str| re.captures(tag).map(|c| c[1].to_owned());
    for (text, summary) in [
        (
            "====== Hello from lowlat ======\n\nFirst version of the page.\n",
            "created",
        ),
        (
            "====== Hello from lowlat ======\n\nSecond version, edited.\n",
            "edited",
        ),
    ] {
        let (status, _, body) = get(&served, &format!("{page}?do=edit"), &["-b", jar, "-c", jar]);
        assert_eq!(status, 200);
        let form = String::from_utf8_lossy(&body).into_owned();
        let mut args: Vec<String> = vec!["-b".into(), jar.into(), "-c".into(), jar.into()];
        for tag in hidden.find_iter(&form) {
            let (Some(name), Some(value)) =
                (attr(&name_re, tag.as_str()), attr(&value_re, tag.as_str()))
            else {
                continue;
            };
            if name == "do" {
                continue;
            }
            args.push("--data-urlencode".into());
            args.push(format!("{name}={}", value.replace("&amp;", "&")));
        }
        for (name, value) in [
            ("wikitext", text),
            ("summary", summary),
            ("do[save]", "Save"),
        ] {
            args.push("--data-urlencode".into());
            args.push(format!("{name}={value}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, head, _) = get(&served, page, &args);
        assert!(
            status == 200 || status == 302 || status == 303,
            "saving: {head}"
        );
        let (status, _, body) = get(&served, page, &["-b", jar]);
        assert_eq!(status, 200);
        let shown = String::from_utf8_lossy(&body);
        assert!(shown.contains("Hello from lowlat"), "not saved");
        let version = text.lines().nth(2).unwrap().trim();
        assert!(shown.contains(version), "{version:?} not shown");
        // DokuWiki names revisions by the second: the next one in a second of its own.
        std::thread::sleep(Duration::from_millis(1100));
    }
    let (status, _, body) = get(&served, &format!("{page}?do=revisions"), &["-b", jar]);
    assert_eq!(status, 200);
    let history = String::from_utf8_lossy(&body);
    assert!(history.contains("created") && history.contains("edited"));
    assert!(data.join("pages/wiki/lowlat_test.txt").exists());
    assert!(
        !served.log().contains("FastCGI response refused"),
        "{}",
        served.log()
    );
}

/// A MariaDB of the tests' own: a data directory made by `mariadb-install-db`, the server on a
/// Unix socket only, stopped when dropped.
struct Mariadb {
    child: Child,
    sock: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mariadb {
    /// The MariaDB of the tests running now, started by the first that asks and stopped when
    /// the last of them is done: the WordPress tests (clear and TLS) run side by side, each
    /// with a database of its own ([`Mariadb::database`]) in one server, instead of bootstrapping
    /// a data directory and starting a server each (seconds each, one after the other).
    fn shared() -> std::sync::Arc<Mariadb> {
        static SHARED: std::sync::Mutex<std::sync::Weak<Mariadb>> =
            std::sync::Mutex::new(std::sync::Weak::new());
        let mut shared = SHARED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(db) = shared.upgrade() {
            return db;
        }
        let db = std::sync::Arc::new(Mariadb::start());
        *shared = std::sync::Arc::downgrade(&db);
        db
    }

    /// Creates the database `name` (empty) and returns its name.
    fn database(&self, name: &str) -> String {
        let out = Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.sock.display()))
            .args(["-uroot", "-e"])
            .arg(format!(
                "DROP DATABASE IF EXISTS {name}; CREATE DATABASE {name}"
            ))
            .output()
            .expect("mariadb (scripts/test-deps.sh)");
        assert!(
            out.status.success(),
            "CREATE DATABASE {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        name.to_owned()
    }

    fn start() -> Mariadb {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let sock = dir.path().join("mysqld.sock");
        let user = if running_as_root() { "root" } else { "" };
        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db");
        if !user.is_empty() {
            install.arg(format!("--user={user}"));
        }
        // One at a time ([`Mariadb::shared`] starts one for the tests running together): two
        // bootstraps at once on a loaded machine failed once in a full run here.
        static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = INSTALLING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let out = install
            .output()
            .expect("mariadb-install-db (scripts/test-deps.sh)");
        drop(guard);
        assert!(
            out.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut server = Command::new("/usr/sbin/mariadbd");
        server
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", sock.display()))
            .arg(format!(
                "--pid-file={}",
                dir.path().join("mysqld.pid").display()
            ))
            .arg(format!(
                "--log-error={}",
                dir.path().join("mysqld.err").display()
            ))
            .arg("--skip-networking")
            .arg("--innodb-buffer-pool-size=32M");
        if !user.is_empty() {
            server.arg(format!("--user={user}"));
        }
        let child = server
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mariadbd");
        let db = Mariadb {
            child,
            sock,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = Command::new("mariadb")
                .arg("--no-defaults")
                .arg(format!("--socket={}", db.sock.display()))
                .args(["-uroot", "-e", "SELECT 1"])
                .output()
                .is_ok_and(|o| o.status.success());
            if ok {
                return db;
            }
            assert!(Instant::now() < deadline, "MariaDB did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Mariadb {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// An XML-RPC call's body (WordPress's xmlrpc.php): the method and its parameters, each an XML
/// value already written.
fn xmlrpc(method: &str, params: &[String]) -> String {
    let params: String = params
        .iter()
        .map(|p| format!("<param><value>{p}</value></param>"))
        .collect();
    format!(
        "<?xml version=\"1.0\"?><methodCall><methodName>{method}</methodName><params>{params}</params></methodCall>"
    )
}

/// WordPress from Debian's package (a copy of it, its configuration of the test's own) with a
/// MariaDB of the test's own, driven as a person would: the web installer run to the end, a
/// login, the admin dashboard, pretty permalinks turned on in the settings form, a post
/// published and a picture uploaded (through XML-RPC, as the mobile apps do), the post shown
/// at its permalink over HTTP/1.1 and HTTP/2 (h2c), the picture served as a static file.
#[test]
fn wordpress_installed_a_post_published_and_shown_at_its_permalink() {
    wordpress_browsed(false);
}

/// The same over TLS: installed, browsed and published over HTTP/2 (ALPN `h2`), the post shown
/// over HTTP/1.1 and HTTP/2. WordPress learns the scheme only from the FastCGI `HTTPS=on` lowlat
/// sends: the address it records at installation (`siteurl`, `home`), its redirects, its
/// secure login cookies and every link of its pages are `https://`, with no `http://` one to
/// the site.
#[test]
fn wordpress_over_tls_sees_https_and_links_to_it() {
    wordpress_browsed(true);
}

/// `url`'s answer by curl `-i` with `fixed` and `args`: status, head, body.
fn get_url(url: &str, fixed: &[String], args: &[&str]) -> (u16, String, Vec<u8>) {
    let mut all = vec!["-i"];
    all.extend(fixed.iter().map(String::as_str));
    all.extend_from_slice(args);
    all.push(url);
    let out = curl(&all);
    split_response(&out.stdout)
}

fn wordpress_browsed(tls: bool) {
    let installed = Path::new("/usr/share/wordpress/wp-settings.php");
    assert!(
        installed.exists() && Path::new("/usr/sbin/mariadbd").exists(),
        "no WordPress or MariaDB: run scripts/test-deps.sh"
    );
    let db = Mariadb::shared();
    let db_name = db.database(if tls { "wordpress_tls" } else { "wordpress" });
    let fpm = Fpm::start(4);
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    let ok = Command::new("cp")
        .arg("-rL")
        .arg("/usr/share/wordpress")
        .arg(&www)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -rL /usr/share/wordpress");
    std::fs::create_dir_all(www.join("wp-content/uploads")).unwrap();
    // WordPress offers pretty permalinks only on servers it knows to rewrite (Apache, nginx,
    // IIS, Caddy); a must-use plugin says lowlat does (its front controller): docs/php.md.
    std::fs::create_dir_all(www.join("wp-content/mu-plugins")).unwrap();
    std::fs::write(
        www.join("wp-content/mu-plugins/lowlat.php"),
        "<?php add_filter('got_url_rewrite', '__return_true');\n",
    )
    .unwrap();
    // This copy's configuration (Debian's reads /etc/wordpress): the test's database, no
    // request leaving the machine, no cron run by page views.
    std::fs::write(
        www.join("wp-config.php"),
        format!(
            "<?php\ndefine('DB_NAME', '{db_name}');\ndefine('DB_USER', 'root');\n\
             define('DB_PASSWORD', '');\ndefine('DB_HOST', 'localhost:{}');\n\
             define('DB_CHARSET', 'utf8mb4');\ndefine('DB_COLLATE', '');\n\
             $table_prefix = 'wp_';\ndefine('WP_HTTP_BLOCK_EXTERNAL', true);\n\
             define('DISABLE_WP_CRON', true);\ndefine('AUTOMATIC_UPDATER_DISABLED', true);\n\
             define('FS_METHOD', 'direct');\ndefine('WP_CONTENT_DIR', __DIR__ . '/wp-content');\n\
             if (!defined('ABSPATH')) define('ABSPATH', __DIR__ . '/');\n\
             require_once ABSPATH . 'wp-settings.php';\n",
            db.sock.display()
        ),
    )
    .unwrap();
    let pki = lowlat_testkit::pki::Pki::new();
    let leaf = pki.leaf(
        "wordpress",
        &["localhost"],
        lowlat_testkit::pki::KeyKind::EcdsaP256,
    );
    let (cert, key) = (
        leaf.cert.display().to_string(),
        leaf.key.display().to_string(),
    );
    let served = if tls {
        serve(
            &www,
            &fpm.unix(),
            &[
                "--tls-listen",
                "127.0.0.1:0",
                "--cert",
                &cert,
                "--key",
                &key,
            ],
        )
    } else {
        serve(&www, &fpm.unix(), &["--h2c"])
    };
    // Over TLS the site is https://localhost:PORT, its certificate's name, every request over
    // HTTP/2 unless said otherwise; in clear http://127.0.0.1:PORT over HTTP/1.1.
    let (site, fixed) = match served.tls_addr {
        Some(addr) if tls => (
            format!("https://localhost:{}", addr.port()),
            vec![
                "--cacert".to_owned(),
                pki.ca_path().display().to_string(),
                "--resolve".to_owned(),
                format!("localhost:{}:127.0.0.1", addr.port()),
                "--http2".to_owned(),
            ],
        ),
        _ => (format!("http://{}", served.addr), Vec::new()),
    };
    let get =
        |_: &Served, path: &str, args: &[&str]| get_url(&format!("{site}{path}"), &fixed, args);
    let jar = dir.path().join("cookies");
    let jar = jar.to_str().unwrap();
    let password = "Lowlat-Test-Pass-1234";

    // The installer, to its end.
    let (status, _, body) = get(&served, "/wp-admin/install.php", &[]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (status, _, body) = get(
        &served,
        "/wp-admin/install.php?step=2",
        &[
            "--data-urlencode",
            "weblog_title=lowlat blog",
            "--data-urlencode",
            "user_name=admin",
            "--data-urlencode",
            &format!("admin_password={password}"),
            "--data-urlencode",
            &format!("admin_password2={password}"),
            "--data-urlencode",
            "pw_weak=1",
            "--data-urlencode",
            "admin_email=admin@example.com",
            "--data-urlencode",
            "blog_public=0",
            "--data-urlencode",
            "Submit=Install WordPress",
        ],
    );
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 200);
    assert!(text.contains("Success!"), "the installer did not finish");

    // Log in (the test cookie first, as a browser gets it), then the dashboard.
    get(&served, "/wp-login.php", &["-c", jar]);
    let (status, head, _) = get(
        &served,
        "/wp-login.php",
        &[
            "-b",
            jar,
            "-c",
            jar,
            "--data-urlencode",
            "log=admin",
            "--data-urlencode",
            &format!("pwd={password}"),
            "--data-urlencode",
            "wp-submit=Log In",
            "--data-urlencode",
            "testcookie=1",
        ],
    );
    assert_eq!(status, 302, "{head}");
    assert!(
        field(&head, "location").is_some_and(|l| l.contains("/wp-admin/")),
        "{head}"
    );
    if tls {
        // WordPress's login cookie for https, sent by curl only over TLS
        let cookies = std::fs::read_to_string(jar).unwrap();
        assert!(cookies.contains("wordpress_sec_"), "{cookies}");
    }
    let (status, head, body) = get(&served, "/wp-admin/", &["-b", jar]);
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("Dashboard"));
    if tls {
        assert!(head.starts_with("HTTP/2 "), "ALPN h2: {head}");
    }

    // Pretty permalinks, through the settings form and its nonce.
    let (status, _, body) = get(&served, "/wp-admin/options-permalink.php", &["-b", jar]);
    assert_eq!(status, 200);
    let form = String::from_utf8_lossy(&body).into_owned();
    let nonce = regex::Regex::new(r#"name="_wpnonce" value="([0-9a-f]+)""#)
        .unwrap()
        .captures(&form)
        .map(|c| c[1].to_owned())
        .expect("the permalink form's nonce");
    let (status, head, _) = get(
        &served,
        "/wp-admin/options-permalink.php",
        &[
            "-b",
            jar,
            "--data-urlencode",
            &format!("_wpnonce={nonce}"),
            "--data-urlencode",
            "_wp_http_referer=/wp-admin/options-permalink.php",
            "--data-urlencode",
            "selection=/%postname%/",
            "--data-urlencode",
            "permalink_structure=/%postname%/",
            "--data-urlencode",
            "submit=Save Changes",
        ],
    );
    assert!(status == 200 || status == 302, "{head}");
    // Where the browser goes next: the page, which writes the new rewrite rules.
    let (status, _, _) = get(
        &served,
        "/wp-admin/options-permalink.php?settings-updated=true",
        &["-b", jar],
    );
    assert_eq!(status, 200);

    // A post and a picture, as the mobile apps publish them.
    let auth = [
        "<int>1</int>".to_owned(),
        "<string>admin</string>".to_owned(),
        format!("<string>{password}</string>"),
    ];
    let mut call = auth.to_vec();
    call.push(
        "<struct><member><name>post_title</name><value><string>Hello from lowlat</string></value></member>\
         <member><name>post_content</name><value><string>Served through php-fpm by lowlat.</string></value></member>\
         <member><name>post_status</name><value><string>publish</string></value></member></struct>"
            .to_owned(),
    );
    let body_file = dir.path().join("call.xml");
    std::fs::write(&body_file, xmlrpc("wp.newPost", &call)).unwrap();
    let at = format!("@{}", body_file.display());
    let (status, _, body) = get(
        &served,
        "/xmlrpc.php",
        &["-H", "Content-Type: text/xml", "--data-binary", &at],
    );
    let answer = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(status, 200);
    assert!(!answer.contains("<fault>"), "{answer}");
    let id = regex::Regex::new(r"<string>(\d+)</string>")
        .unwrap()
        .captures(&answer)
        .map(|c| c[1].to_owned())
        .unwrap_or_else(|| panic!("no post id in {answer}"));
    // Its short link redirects to the permalink.
    let (status, head, _) = get(&served, &format!("/?p={id}"), &[]);
    assert_eq!(status, 301, "{head}");
    assert_eq!(
        field(&head, "location"),
        Some(format!("{site}/hello-from-lowlat/").as_str()),
        "{head}"
    );
    // A 1×1 PNG.
    let png: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89\0\0\0\rIDATx\x9cc\xf8\x0f\0\0\x01\x01\0\x05\x18\xd8N\0\0\0\0IEND\xaeB`\x82";
    let bits = base64(png);
    let mut call = auth.to_vec();
    call.push(format!(
        "<struct><member><name>name</name><value><string>lowlat.png</string></value></member>\
         <member><name>type</name><value><string>image/png</string></value></member>\
         <member><name>bits</name><value><base64>{bits}</base64></value></member></struct>"
    ));
    std::fs::write(&body_file, xmlrpc("wp.uploadFile", &call)).unwrap();
    let (status, _, body) = get(
        &served,
        "/xmlrpc.php",
        &["-H", "Content-Type: text/xml", "--data-binary", &at],
    );
    let answer = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(status, 200);
    let url = regex::Regex::new(r"<name>url</name><value><string>([^<]+)</string>")
        .unwrap()
        .captures(&answer)
        .map(|c| c[1].to_owned())
        .unwrap_or_else(|| panic!("no url in {answer}"));
    let path = url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_owned()))
        .unwrap();
    assert!(path.starts_with("/wp-content/uploads/"), "{path}");
    assert!(url.starts_with(&site), "{url} is not on {site}");
    let (status, head, body) = get(&served, &path, &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(field(&head, "content-type"), Some("image/png"), "{head}");
    assert!(body == png, "the picture as uploaded");
    assert!(
        field(&head, "x-powered-by").is_none(),
        "a static file: {head}"
    );

    // The post at its pretty permalink (the front controller), over HTTP/1.1 and HTTP/2, its
    // links to the site by the scheme it was reached by.
    let h2 = if tls {
        ["--http2", "HTTP/2 "]
    } else {
        ["--http2-prior-knowledge", "HTTP/2 "]
    };
    let other = if tls {
        format!("http://localhost:{}", served.tls_addr.unwrap().port())
    } else {
        format!("https://{}", served.addr)
    };
    for [args, version] in [["--http1.1", "HTTP/1.1 "], h2] {
        let (status, head, body) = get(&served, "/hello-from-lowlat/", &[args]);
        assert_eq!(status, 200, "{head}");
        assert!(head.starts_with(version), "{args}: {head}");
        let page = String::from_utf8_lossy(&body);
        assert!(page.contains("Served through php-fpm by lowlat."), "{head}");
        assert!(page.contains("lowlat blog"));
        assert!(
            page.contains(&format!("href=\"{site}/hello-from-lowlat/\"")),
            "no link to the post on {site}"
        );
        assert!(!page.contains(&format!("{other}/")), "a link to {other}");
    }
    assert!(
        !served.log().contains("FastCGI response refused"),
        "{}",
        served.log()
    );
}

/// Standard base64 with padding.
fn base64(data: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `stale-while-revalidate` in front of a FastCGI application (a `--proxy` rule to php-fpm
/// with `--cache`): the stale response is sent at once and refreshed in the background — a
/// new body replaces it, and with an `ETag` the refresh is conditional (the script sees
/// `If-None-Match` and answers 304, whose fields refresh the stored response).
#[test]
fn stale_while_revalidate_refreshes_fastcgi_responses() {
    let fpm = Fpm::start(2);
    let dir = tempfile::tempdir().unwrap();
    // Stale as soon as stored (`Age` past `max-age`), within a minute's window.
    let swr = dir.path().join("swr.php");
    std::fs::write(
        &swr,
        "<?php header('Cache-Control: max-age=1, stale-while-revalidate=60'); header('Age: 10');\n\
         echo uniqid('', true);",
    )
    .unwrap();
    let etag = dir.path().join("etag.php");
    std::fs::write(
        &etag,
        "<?php header('Cache-Control: max-age=1, stale-while-revalidate=60'); header('Age: 10');\n\
         header('ETag: \"v1\"');\n\
         if (($_SERVER['HTTP_IF_NONE_MATCH'] ?? '') === '\"v1\"') {\n\
           http_response_code(304); header('X-Revalidated: ' . uniqid()); exit;\n\
         }\n\
         echo uniqid('', true);",
    )
    .unwrap();
    let sock = fpm.sock.display().to_string();
    let start = |script: &Path| {
        Served::start([
            "--proxy".to_owned(),
            format!("/=fastcgi+unix:{sock}"),
            "--proxy-fastcgi-param".to_owned(),
            format!("SCRIPT_FILENAME={}", script.display()),
            "--cache".to_owned(),
        ])
    };
    // Waits until a request's body (or its `X-Revalidated`) differs from `was`.
    let changed = |served: &Served, was: &str, part: &dyn Fn(&str, &[u8]) -> String| {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (status, head, body) = get(served, "/", &[]);
            assert_eq!(status, 200, "{head}");
            let now = part(&head, &body);
            if now != was {
                return (head, now);
            }
            assert!(Instant::now() < deadline, "never refreshed: {head}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    let served = start(&swr);
    let (_, head, first) = get(&served, "/", &[]);
    assert!(head.contains("stored"), "{head}");
    let (_, head, stale) = get(&served, "/", &[]);
    assert_eq!(stale, first, "the stale response, at once: {head}");
    assert!(head.contains("detail=stale-while-revalidate"), "{head}");
    let body = |_: &str, b: &[u8]| String::from_utf8_lossy(b).into_owned();
    changed(&served, &String::from_utf8_lossy(&first), &body);
    drop(served);

    let served = start(&etag);
    let (_, _, first) = get(&served, "/", &[]);
    let revalidated = |h: &str, _: &[u8]| field(h, "x-revalidated").unwrap_or("").to_owned();
    let (head, _) = changed(&served, "", &revalidated);
    let (_, _, body) = get(&served, "/", &[]);
    assert_eq!(body, first, "a 304 keeps the stored body: {head}");
}

/// A stale response of a FastCGI rule is revalidated as an HTTP upstream's is: the script gets
/// its `ETag` as `If-None-Match`, and its 304 refreshes the stored response, which the client
/// gets whole; and it stands in for the script's 500 while `stale-if-error` allows.
#[test]
fn fastcgi_responses_are_revalidated_and_stand_in_for_errors() {
    let fpm = Fpm::start(2);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("app.php");
    let broken = dir.path().join("broken");
    std::fs::write(
        &script,
        format!(
            "<?php header('Cache-Control: max-age=1, stale-if-error=60'); header('Age: 10');\n\
             header('ETag: \"v1\"');\n\
             if (file_exists('{}')) {{ http_response_code(500); exit; }}\n\
             if (($_SERVER['HTTP_IF_NONE_MATCH'] ?? '') === '\"v1\"') {{\n\
               http_response_code(304); header('X-Revalidated: yes'); exit;\n\
             }}\n\
             echo uniqid('', true);",
            broken.display()
        ),
    )
    .unwrap();
    let served = Served::start([
        "--proxy".to_owned(),
        format!("/=fastcgi+unix:{}", fpm.sock.display()),
        "--proxy-fastcgi-param".to_owned(),
        format!("SCRIPT_FILENAME={}", script.display()),
        "--cache".to_owned(),
    ]);
    let (_, head, first) = get(&served, "/", &[]);
    assert!(head.contains("stored"), "{head}");
    let (status, head, body) = get(&served, "/", &[]);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("fwd=stale; fwd-status=304"), "{head}");
    assert_eq!(field(&head, "x-revalidated"), Some("yes"), "{head}");
    assert_eq!(body, first);
    std::fs::write(&broken, "").unwrap();
    let (status, head, body) = get(&served, "/", &[]);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("fwd-status=500"), "{head}");
    assert_eq!(body, first);
}

/// Forward authentication in front of the PHP application: a script runs only when the auth
/// service says yes, and sees the user it named as `HTTP_X_AUTH_REQUEST_USER` (the client's own
/// such field dropped); a 401 is the client's; a static file under the guarded prefix, which
/// lowlat answers itself, is served only when the auth service says yes.
#[test]
fn forward_auth_guards_the_application() {
    let fpm = Fpm::start(2);
    let root = docroot();
    let auth = support::origin::Origin::start();
    auth.set("/check", 200, "X-Auth-Request-User: alice", b"");
    let served = serve(
        root.path(),
        &fpm.unix(),
        &[
            "--forward-auth",
            &format!("/={}/check,copy=X-Auth-Request-User", auth.url()),
        ],
    );
    let (status, _, body) = get(
        &served,
        "/params.php",
        &["-H", "X-Auth-Request-User: mallory"],
    );
    assert_eq!(status, 200);
    let v = json(&body);
    assert_eq!(v["server"]["HTTP_X_AUTH_REQUEST_USER"], "alice", "{v}");
    assert!(
        auth.last("/check")
            .contains("X-Forwarded-Uri: /params.php\r\n"),
        "{}",
        auth.last("/check")
    );
    auth.set("/check", 401, "WWW-Authenticate: Basic realm=\"php\"", b"");
    let (status, head, _) = get(&served, "/params.php", &[]);
    assert_eq!(status, 401, "{head}");
    assert_eq!(
        field(&head, "www-authenticate"),
        Some("Basic realm=\"php\"")
    );
    // A static file, which lowlat answers itself, waits for the verdict as well.
    let (status, _, _) = get(&served, "/hello.txt", &[]);
    assert_eq!(status, 401);
    auth.set("/check", 200, "", b"");
    let (status, _, body) = get(&served, "/hello.txt", &[]);
    assert_eq!(status, 200);
    assert_eq!(body, b"static hello\n");
}
