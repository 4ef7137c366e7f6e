//! Access rules and rate limits of `lowlat serve` as clients meet them: `--allow`/`--deny` in
//! order (IPv4, IPv6, IPv4-mapped, per path, behind a trusted proxy, per site in a config
//! file, over HTTP/1.1, HTTP/2 and HTTP/3), and `--rate-limit` zones holding their rate against
//! a client far over it while another client is never refused, a bounded number of keys under a
//! flood of distinct ones, and their counts on `/metrics`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

mod support;
use support::{curl, Served, BIN};

/// The status of `GET path` sent to `addr` with extra head lines.
fn status(addr: SocketAddr, path: &str, lines: &[&str]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: guard.test\r\nConnection: close\r\n");
    for l in lines {
        req.push_str(l);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {reply:?}"))
}

/// `lowlat serve` on both loopbacks, with `args`.
fn serve_dual(args: &[&str]) -> (Served, u16) {
    let port = support::free_port();
    let v4 = format!("127.0.0.1:{port}");
    let v6 = format!("[::1]:{port}");
    let mut all = vec!["--listen", &v6, "--listen", &v4];
    all.extend_from_slice(args);
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--workers", "1"]).args(&all);
    (Served::spawn(cmd), port)
}

/// nginx's example order: one host denied inside an allowed network, an IPv6 network
/// allowed, everyone else denied — the first match decides, over both address families.
#[test]
fn allow_and_deny_in_order_over_ipv4_and_ipv6() {
    let (_s, port) = serve_dual(&[
        "--deny",
        "127.0.0.1",
        "--allow",
        "127.0.0.0/8",
        "--deny",
        "all",
    ]);
    let v4: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let v6: SocketAddr = format!("[::1]:{port}").parse().unwrap();
    assert_eq!(status(v4, "/plaintext", &[]), 403);
    assert_eq!(
        status(v6, "/plaintext", &[]),
        403,
        "::1 matches only `deny all`"
    );
    let (_s, port) = serve_dual(&["--allow", "::1/128", "--deny", "127.0.0.1"]);
    let v4: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let v6: SocketAddr = format!("[::1]:{port}").parse().unwrap();
    assert_eq!(status(v6, "/plaintext", &[]), 200);
    assert_eq!(status(v4, "/plaintext", &[]), 403);
}

/// An IPv4-mapped IPv6 address (as a dual-stack proxy in front writes its IPv4 clients) is
/// the IPv4 address it maps, for the rules.
#[test]
fn ipv4_mapped_addresses_match_ipv4_rules() {
    let s = Served::start([
        "--allow",
        "10.0.0.0/8",
        "--deny",
        "all",
        "--proxy-trusted",
        "127.0.0.1",
    ]);
    let mapped = "X-Forwarded-For: ::ffff:10.1.2.3";
    assert_eq!(status(s.addr, "/plaintext", &[mapped]), 200);
    let outside = "X-Forwarded-For: ::ffff:192.0.2.1";
    assert_eq!(status(s.addr, "/plaintext", &[outside]), 403);
}

/// Rules under a path prefix apply there only; behind a trusted proxy the client is the one
/// `X-Forwarded-For` names, and an untrusted peer's `X-Forwarded-For` proves nothing.
#[test]
fn per_path_rules_and_the_address_behind_a_trusted_proxy() {
    let s = Served::start([
        "--allow",
        "/json=10.0.0.0/8",
        "--deny",
        "/json=all",
        "--proxy-trusted",
        "127.0.0.1",
    ]);
    assert_eq!(status(s.addr, "/plaintext", &[]), 200);
    assert_eq!(status(s.addr, "/json", &[]), 403);
    assert_eq!(status(s.addr, "/json", &["X-Forwarded-For: 10.1.2.3"]), 200);
    assert_eq!(
        status(s.addr, "/json", &["X-Forwarded-For: 10.1.2.3, 203.0.113.5"]),
        403,
        "the rightmost untrusted hop is the client"
    );
    let untrusted = Served::start(["--allow", "/json=10.0.0.0/8", "--deny", "/json=all"]);
    assert_eq!(
        status(untrusted.addr, "/json", &["X-Forwarded-For: 10.1.2.3"]),
        403
    );
}

/// HTTP/2 and HTTP/3 requests meet the same rules (the one request path).
#[test]
fn rules_hold_over_http2_and_http3() {
    let s = Served::start(["--h2c", "--deny", "/json=all"]);
    let url = |p: &str| format!("http://{}{p}", s.addr);
    let code = |p: &str| {
        let out = curl(&[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--http2-prior-knowledge",
            &url(p),
        ]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(code("/json"), "403");
    assert_eq!(code("/plaintext"), "200");
    let (_pki, cert) = support::h3::cert();
    let served = support::h3::serve(&cert, &["--deny", "/json=all"]);
    let got = support::h3::client(&served, &["get", "GET", "/json", "/plaintext"]);
    assert_eq!(got["responses"][0]["status"], 403, "{got}");
    assert_eq!(got["responses"][1]["status"], 200, "{got}");
}

/// Per site in a config file: `allow` and `deny` keys apply in the file's order, and `access`
/// holds rules that alternate.
#[test]
fn rules_per_site_in_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("lowlat.toml");
    std::fs::write(
        &cfg,
        "workers = 1\n\
         proxy_trusted = [\"127.0.0.1\"]\n\
         [[site]]\nserver_names = [\"open.test\"]\n\
         [[site]]\nserver_names = [\"closed.test\"]\nallow = [\"10.0.0.0/8\"]\ndeny = [\"all\"]\n\
         [[site]]\nserver_names = [\"mixed.test\"]\naccess = [\"deny 10.0.0.1\", \"allow 10.0.0.0/8\", \"deny all\"]\n",
    )
    .unwrap();
    let config = cfg.display().to_string();
    let s = Served::start(["--config", &config]);
    let code = |host: &str, from: &str| {
        let mut c = TcpStream::connect(s.addr).unwrap();
        write!(
            c,
            "GET /plaintext HTTP/1.1\r\nHost: {host}\r\nX-Forwarded-For: {from}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        reply.split(' ').nth(1).unwrap_or_default().to_owned()
    };
    assert_eq!(code("open.test", "192.0.2.1"), "200");
    assert_eq!(code("closed.test", "192.0.2.1"), "403");
    assert_eq!(code("closed.test", "10.0.0.1"), "200");
    assert_eq!(code("mixed.test", "10.0.0.1"), "403");
    assert_eq!(code("mixed.test", "10.0.0.2"), "200");
    assert_eq!(code("mixed.test", "192.0.2.1"), "403");
}

/// A `lowlat load` run: (2xx, 429) responses.
fn load(url: &str, rate: &str, seconds: &str, header: &str) -> (u64, u64) {
    let out = Command::new(BIN)
        .args([
            "load", "-t1", "-c4", "-R", rate, "-d", seconds, "--json", "-H", header, url,
        ])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let ok = report["status"]["2xx"].as_u64().unwrap();
    let refused = report["status_codes"]["429"].as_u64().unwrap_or(0);
    (ok, refused)
}

/// 100 r/s with a burst of 20 against one client asking 2,000 r/s for 5 s: what passes is the
/// rate times the time plus the burst, within 10%; a second client (another address behind
/// the trusted proxy) at 50 r/s meanwhile is never refused. `/metrics` counts the refusals.
/// (`nodelay`: the burst passes at once, so the loader's connections are never held back.)
#[test]
fn a_rate_limit_holds_against_one_client_and_spares_another() {
    let (s, metrics) = with_metrics(&[
        "--rate-limit",
        "100r/s,burst=20,nodelay",
        "--proxy-trusted",
        "127.0.0.1",
    ]);
    let url = format!("http://{}/plaintext", s.addr);
    let quiet_url = url.clone();
    let quiet =
        std::thread::spawn(move || load(&quiet_url, "50", "5s", "X-Forwarded-For: 10.0.0.2"));
    let (passed, refused) = load(&url, "2000", "5s", "X-Forwarded-For: 10.0.0.1");
    let (quiet_passed, quiet_refused) = quiet.join().unwrap();
    let expected = 100.0 * 5.0 + 20.0;
    assert!(
        (passed as f64 - expected).abs() <= expected * 0.1,
        "{passed} passed, {refused} refused; {expected} expected"
    );
    assert!(refused > 5000, "{refused}");
    assert_eq!(quiet_refused, 0, "{quiet_passed} passed");
    assert!(quiet_passed >= 200, "{quiet_passed}");
    std::thread::sleep(Duration::from_millis(1200));
    let out = curl(&["-s", &format!("http://{metrics}/metrics")]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("lowlat_rate_limit_refused_total{"))
        .unwrap_or_else(|| panic!("{text}"));
    let counted: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    // The server also counts what was in flight when the loader stopped counting (4
    // connections each).
    assert!(
        (refused..=refused + 8).contains(&counted),
        "{line}: the loader saw {refused}"
    );
}

/// A flood of distinct keys (spoofed addresses behind a trusted proxy) keeps the zone within
/// its `keys=` bound; a dry run refuses nothing but counts what it would have.
#[test]
fn keys_stay_bounded_and_a_dry_run_refuses_nothing() {
    let (s, metrics) = with_metrics(&[
        "--rate-limit",
        "1r/m,keys=500,dry-run",
        "--proxy-trusted",
        "127.0.0.1",
    ]);
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_nodelay(true).unwrap();
    let mut reader = std::io::BufReader::new(c.try_clone().unwrap());
    for i in 0..5000u32 {
        let [_, a, b, d] = i.to_be_bytes();
        let req = format!(
            "GET /plaintext HTTP/1.1\r\nHost: g\r\nX-Forwarded-For: 10.{a}.{b}.{d}\r\n\r\n"
        );
        c.write_all(req.as_bytes()).unwrap();
        // Two requests from one address: the second is over 1r/m.
        c.write_all(req.as_bytes()).unwrap();
        for _ in 0..2 {
            let mut head = String::new();
            loop {
                let mut line = String::new();
                std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
                head.push_str(&line);
                if line == "\r\n" {
                    break;
                }
            }
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            let mut body = [0u8; 13];
            reader.read_exact(&mut body).unwrap();
        }
    }
    std::thread::sleep(Duration::from_millis(1200));
    let keys = zone_metric(&metrics, "lowlat_rate_limit_keys{");
    assert!(keys <= 600, "{keys} keys held for a bound of 500");
    assert_eq!(
        zone_metric(&metrics, "lowlat_rate_limit_refused_total{"),
        5000
    );
}

/// `lowlat serve` with `args` and a metrics listener on a free port, and that port's address.
fn with_metrics(args: &[&str]) -> (Served, String) {
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let s = Served::start(args.iter().copied().chain(["--metrics", &metrics]));
    (s, metrics)
}

/// The value of the first series starting with `prefix` (a zone's, labels and all) on the
/// `/metrics` of `addr`, scraped now.
fn zone_metric(addr: &str, prefix: &str) -> u64 {
    let out = curl(&["-s", &format!("http://{addr}/metrics")]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in {text}"))
}

/// `--check-config` takes `delay=` and `nodelay` in a config file's `rate_limit`, and names
/// the line of a zone that writes both or a delay that is no count.
#[test]
fn check_config_reads_delays() {
    let dir = tempfile::tempdir().unwrap();
    let good = "rate_limit = [\"10r/s,burst=5,delay=2\", \"/api/=1r/s,burst=3,nodelay\"]\n";
    let out = support::check_config_text(dir.path(), "good.toml", good);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let bad = "workers = 1\nrate_limit = [\"10r/s,burst=5,delay=2,nodelay\"]\n\n\
               [[site]]\nserver_names = [\"a.test\"]\nrate_limit = [\"10r/s,delay=some\"]\n";
    let out = support::check_config_text(dir.path(), "bad.toml", bad);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stderr);
    for (line, want) in lines.iter().zip([
        ["bad.toml:2: rate_limit:", "nodelay and delay="],
        ["bad.toml:6: site[0].rate_limit:", "delay=some: a count"],
    ]) {
        assert!(want.iter().all(|w| line.contains(w)), "{want:?} in {line}");
    }
    let out = support::check_config(None, &["--rate-limit", "10r/s,burst=5,delay=2"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

/// Bad rules are one-line errors naming the flag.
#[test]
fn bad_rules_are_refused_at_start() {
    for args in [
        ["--deny", "10.0.0.0/40"],
        ["--allow", "nowhere"],
        ["--rate-limit", "10r/h"],
        ["--rate-limit", "10r/s,burst=-1"],
        ["--rate-limit", "10r/s,key=ip"],
    ] {
        let out = Command::new(BIN).arg("serve").args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains(args[0]), "{text}");
    }
}

/// `GET path` with an `Authorization: Basic` for `user:password` (none when `None`): the
/// status and the head.
fn with_basic(addr: SocketAddr, path: &str, cred: Option<&str>) -> (u16, String) {
    use base64::Engine as _;
    let line = cred.map(|c| {
        format!(
            "Authorization: Basic {}",
            base64::engine::general_purpose::STANDARD.encode(c)
        )
    });
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: g\r\nConnection: close\r\n");
    if let Some(l) = &line {
        req.push_str(l);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let code = reply
        .split(' ')
        .nth(1)
        .unwrap_or_default()
        .parse()
        .unwrap_or(0);
    (code, reply)
}

/// Apache's own `htpasswd` writes the file, in each of its formats.
fn htpasswd(file: &std::path::Path, flags: &[&str], user: &str, password: &str) {
    let mut args = vec!["-b"];
    if !file.exists() {
        args.push("-c");
    }
    args.extend_from_slice(flags);
    let ok = Command::new("htpasswd")
        .args(&args)
        .arg(file)
        .args([user, password])
        .output()
        .expect("htpasswd (apache2-utils): run scripts/test-deps.sh");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

/// Basic authentication under a prefix, against users `htpasswd` wrote with bcrypt, APR1-MD5
/// and SHA-1: no or bad credentials get 401 with the challenge, good ones pass; paths outside
/// the prefix ask for nothing; a flood of wrong passwords from one client turns to 429 after a
/// few checks; a user added to the file counts after SIGHUP.
#[test]
fn basic_auth_against_apache_htpasswd_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir_all(root.join("private")).unwrap();
    std::fs::write(root.join("private/secret.txt"), "secret\n").unwrap();
    std::fs::write(root.join("open.txt"), "open\n").unwrap();
    let file = dir.path().join("users");
    htpasswd(&file, &["-B", "-C", "4"], "bee", "bcrypt-pass");
    htpasswd(&file, &["-m"], "em", "md5-pass");
    htpasswd(&file, &["-s"], "es", "sha-pass");
    let cfg = dir.path().join("lowlat.toml");
    std::fs::write(
        &cfg,
        format!(
            "workers = 1\nroot = \"{}\"\nbasic_auth = [\"/private/={},realm=Staff only\"]\n",
            root.display(),
            file.display()
        ),
    )
    .unwrap();
    let config = cfg.display().to_string();
    let s = Served::start(["--config", &config]);
    let secret = "/private/secret.txt";
    let (code, head) = with_basic(s.addr, secret, None);
    assert_eq!(code, 401);
    assert!(
        head.contains("WWW-Authenticate: Basic realm=\"Staff only\", charset=\"UTF-8\""),
        "{head}"
    );
    assert_eq!(with_basic(s.addr, "/open.txt", None).0, 200);
    for good in ["bee:bcrypt-pass", "em:md5-pass", "es:sha-pass"] {
        let (code, reply) = with_basic(s.addr, secret, Some(good));
        assert_eq!(code, 200, "{good}: {reply}");
        assert!(reply.ends_with("secret\n"));
    }
    assert_eq!(with_basic(s.addr, secret, Some("bee:wrong")).0, 401);
    assert_eq!(
        with_basic(s.addr, secret, Some("nobody:bcrypt-pass")).0,
        401
    );
    // Not Basic, not base64, no colon: 401, never an error.
    for bad in ["Bearer abc", "Basic !!!", "Basic Zm9v", "Basic"] {
        let mut c = TcpStream::connect(s.addr).unwrap();
        write!(
            c,
            "GET {secret} HTTP/1.1\r\nHost: g\r\nAuthorization: {bad}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 401"), "{bad}: {reply}");
    }
    // A flood of wrong passwords: checks stop within the burst, then 429.
    let codes: Vec<u16> = (0..40)
        .map(|i| with_basic(s.addr, secret, Some(&format!("bee:guess{i}"))).0)
        .collect();
    assert!(
        codes.iter().filter(|&&c| c == 401).count() <= 12,
        "{codes:?}"
    );
    assert!(
        codes.iter().filter(|&&c| c == 429).count() >= 28,
        "{codes:?}"
    );
    let (_, refused) = with_basic(s.addr, secret, Some("bee:again"));
    assert!(refused.contains("Retry-After: "), "{refused}");
    // A user remembered from before still passes from memory, without a check.
    assert_eq!(with_basic(s.addr, secret, Some("em:md5-pass")).0, 200);
    // A user added, a reload: the new file counts (a new rule: its own attempts).
    htpasswd(&file, &["-B", "-C", "4"], "new", "new-pass");
    std::fs::write(
        &cfg,
        format!(
            "workers = 1\nroot = \"{}\"\nbasic_auth = [\"/private/={},realm=Staff\"]\n",
            root.display(),
            file.display()
        ),
    )
    .unwrap();
    s.signal("HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !with_basic(s.addr, secret, None)
        .1
        .contains("realm=\"Staff\"")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the reload did not apply"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The flood's client may check again once its bucket has drained one (30 a minute).
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(with_basic(s.addr, secret, Some("new:new-pass")).0, 200);
}

/// The access log says what the rate limits did, as nginx's `$limit_req_status`: `PASSED`,
/// `REJECTED`, `DELAYED_DRY_RUN` (a dry run's burst passes at once), `REJECTED_DRY_RUN`, and
/// `-` where no zone applies; the JSON log as `limit_req_status`.
/// A rule's prefix covers every spelling of the paths under it: percent-encoded, with empty
/// or dot segments. The file handler normalises `/%70rivate/secret.txt` to
/// `/private/secret.txt` and would serve it; so would an application that decodes its path.
#[test]
fn aliases_of_a_guarded_path_meet_its_rules() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir_all(root.join("private")).unwrap();
    std::fs::write(root.join("private/secret.txt"), "secret\n").unwrap();
    std::fs::write(root.join("open.txt"), "open\n").unwrap();
    let users = dir.path().join("users");
    htpasswd(&users, &["-B", "-C", "4"], "bee", "bcrypt-pass");
    let basic = format!("/private/={}", users.display());
    let s = Served::start([
        "--root",
        root.to_str().unwrap(),
        "--basic-auth",
        &basic,
        "--deny",
        "/open.txt=all",
    ]);
    for alias in [
        "/private/secret.txt",
        "/%70rivate/secret.txt",
        "/%70%72%69%76%61%74%65/secret.txt",
        "//private/secret.txt",
        "/./private/secret.txt",
        "/open.txt/../private/secret.txt",
        "/x/%2e%2e/private/secret.txt",
    ] {
        assert_eq!(with_basic(s.addr, alias, None).0, 401, "{alias}");
        let (code, reply) = with_basic(s.addr, alias, Some("bee:bcrypt-pass"));
        assert_eq!(code, 200, "{alias}: {reply}");
        assert!(reply.ends_with("secret\n"), "{alias}: {reply}");
    }
    for alias in [
        "/open.txt",
        "/%6fpen.txt",
        "//open.txt",
        "/private/../open.txt",
    ] {
        assert_eq!(status(s.addr, alias, &[]), 403, "{alias}");
    }
    // Nothing to match: above the root, a broken escape.
    for bad in ["/../private/secret.txt", "/%zzprivate/secret.txt"] {
        assert_eq!(with_basic(s.addr, bad, None).0, 400, "{bad}");
    }
}

/// A zone keyed by path counts every spelling of a path as that path: the limit is not one
/// per spelling.
#[test]
fn a_path_keyed_zone_counts_aliases_as_their_path() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "a\n").unwrap();
    std::fs::write(root.path().join("b.txt"), "b\n").unwrap();
    let s = Served::start([
        "--root",
        root.path().to_str().unwrap(),
        "--rate-limit",
        "1r/m,key=path",
    ]);
    assert_eq!(status(s.addr, "/a.txt", &[]), 200);
    for alias in ["/%61.txt", "//a.txt", "/./a.txt", "/b.txt/../a.txt"] {
        assert_eq!(status(s.addr, alias, &[]), 429, "{alias}");
    }
    // Another path has a key of its own.
    assert_eq!(status(s.addr, "/b.txt", &[]), 200);
}

/// A guard whose rules all cover every path and key on no path reads no path: a path not in
/// its normal form gets the answer it gets without the guard (the router's: a redirect, a
/// refusal above the root, the file), after the limits counted it.
#[test]
fn a_whole_site_guard_leaves_paths_to_the_router() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "a\n").unwrap();
    let root_arg = root.path().to_str().unwrap();
    let plain = Served::start(["--root", root_arg]);
    let guarded = Served::start([
        "--root",
        root_arg,
        "--allow",
        "127.0.0.0/8",
        "--deny",
        "all",
        "--rate-limit",
        "1000r/s,burst=1000",
    ]);
    for path in [
        "/a.txt",
        "/%61.txt",
        "//a.txt",
        "/./a.txt",
        "/b/../a.txt",
        "/../a.txt",
        "/%zza.txt",
        "/../../etc/passwd",
    ] {
        let want = status(plain.addr, path, &[]);
        assert_eq!(status(guarded.addr, path, &[]), want, "{path}");
    }
    assert_eq!(status(guarded.addr, "/../a.txt", &[]), 400);
}

#[test]
fn the_access_log_says_what_the_limits_did() {
    let dir = tempfile::tempdir().unwrap();
    for json in [false, true] {
        let log = dir.path().join(if json { "json.log" } else { "text.log" });
        let log_arg = log.display().to_string();
        let mut args = vec![
            "--rate-limit",
            "/plaintext=1r/m",
            "--rate-limit",
            "/json=1r/m,burst=1,dry-run",
            "--access-log",
            &log_arg,
        ];
        if json {
            args.extend_from_slice(&["--access-log-format", "json"]);
        } else {
            args.extend_from_slice(&[
                "--access-log-format",
                "$request_uri $status $limit_req_status",
            ]);
        }
        let s = Served::start(args);
        for path in [
            "/plaintext",
            "/plaintext",
            "/json",
            "/json",
            "/json",
            "/100.html",
        ] {
            status(s.addr, path, &[]);
        }
        s.stop();
        let text = std::fs::read_to_string(&log).unwrap();
        let got: Vec<String> = if json {
            text.lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    format!(
                        "{} {} {}",
                        v["target"].as_str().unwrap(),
                        v["status"],
                        v["limit_req_status"].as_str().unwrap_or("-")
                    )
                })
                .collect()
        } else {
            text.lines().map(str::to_owned).collect()
        };
        assert_eq!(
            got,
            [
                "/plaintext 200 PASSED",
                "/plaintext 429 REJECTED",
                "/json 200 PASSED",
                "/json 200 DELAYED_DRY_RUN",
                "/json 200 REJECTED_DRY_RUN",
                "/100.html 200 -",
            ],
            "{text}"
        );
    }
}

/// `GET path` on a new connection: its status, and the connection (the rest unread).
fn open_get(addr: SocketAddr, path: &str) -> (u16, TcpStream) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: guard.test\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "head of {path}");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
    (code, s)
}

/// `--limit-conn`: a zone counts a key's requests in progress — a forwarded request until its
/// answer is relayed, a file until it is sent, each HTTP/2 stream — refuses one more (503), and
/// gives each place back when its answer is done or its client leaves.
#[test]
fn a_connection_limit_counts_requests_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("files")).unwrap();
    // Far more than the socket buffers hold: a client that reads none keeps it in progress.
    std::fs::File::create(dir.path().join("files/big"))
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    let origin = support::origin::Origin::start();
    let slow = Duration::from_millis(1500);
    origin.set_slow("/slow/a", 200, "", b"slow", slow, Duration::ZERO);
    origin.set("/fast", 200, "", b"fast");
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let root = dir.path().display().to_string();
    let s = Served::start([
        "--h2c",
        "--root",
        &root,
        "--proxy",
        &format!("/slow/={}", origin.url()),
        "--proxy",
        &format!("/fast={}", origin.url()),
        "--limit-conn",
        "/slow/=2",
        "--limit-conn",
        "/files/=1",
        "--metrics",
        &metrics,
    ]);
    let addr = s.addr;

    // Two forwarded requests wait for the slow origin; a third is refused at once, a path
    // outside the zone is not.
    let waiting: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || status(addr, "/slow/a", &[])))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let started = std::time::Instant::now();
    assert_eq!(status(addr, "/slow/a", &[]), 503);
    assert!(started.elapsed() < slow / 2, "the refusal waited");
    assert_eq!(status(addr, "/fast", &[]), 200);
    for w in waiting {
        assert_eq!(w.join().unwrap(), 200);
    }
    // Their places are given back with their answers.
    assert_eq!(status(addr, "/slow/a", &[]), 200);

    // Each HTTP/2 stream counts: three at once on one connection, one refused.
    let url = format!("http://{addr}/slow/a");
    let out = curl(&[
        "-s",
        "--http2-prior-knowledge",
        "--parallel",
        "--parallel-immediate",
        "-o",
        "/dev/null",
        "-o",
        "/dev/null",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}\n",
        &url,
        &url,
        &url,
    ]);
    let mut codes: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    codes.sort();
    assert_eq!(codes, ["200", "200", "503"], "{out:?}");

    // A file in progress holds its place until its client leaves.
    let (code, reader) = open_get(addr, "/files/big");
    assert_eq!(code, 200);
    let (code, _) = open_get(addr, "/files/big");
    assert_eq!(code, 503);
    drop(reader);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _) = open_get(addr, "/files/big");
        if code == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the place was not given back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let refused = |zone: &str| {
        support::metric(
            &metrics,
            &format!("lowlat_conn_limit_refused_total{{zone=\"{zone}\",dry_run=\"false\"}}"),
        )
    };
    assert_eq!(refused("/slow/=2"), 2);
    assert!(refused("/files/=1") >= 1);
    assert_eq!(
        support::metric(&metrics, "lowlat_conn_limit_in_progress{zone=\"/slow/=2\"}"),
        0
    );
}

/// `count` requests for `path` sent at once — over HTTP/1.1 with curl (`--parallel`, a
/// connection each), over HTTP/2 with nghttp (streams of one connection) — each one's status
/// and how long its answer took, in seconds from its start as the client measured it, sorted
/// by that time.
fn at_once(addr: SocketAddr, path: &str, count: usize, h2: bool) -> Vec<(u16, f64)> {
    let urls: Vec<String> = (0..count)
        .map(|i| format!("http://{addr}{path}?{i}"))
        .collect();
    let mut got: Vec<(u16, f64)> = if h2 {
        // nghttp's statistics: `id responseEnd requestStart process code size path`.
        let out = Command::new("nghttp")
            .arg("-ns")
            .args(&urls)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let seconds = |t: &str| -> f64 {
            let (n, scale) = if let Some(n) = t.strip_suffix("us") {
                (n, 1e-6)
            } else if let Some(n) = t.strip_suffix("ms") {
                (n, 1e-3)
            } else {
                (t.strip_suffix('s').unwrap(), 1.0)
            };
            n.parse::<f64>().unwrap() * scale
        };
        text.lines()
            .skip_while(|l| !l.starts_with("id "))
            .skip(1)
            .map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                (cols[4].parse().unwrap(), seconds(cols[3]))
            })
            .collect()
    } else {
        let mut args = vec![
            "--parallel",
            "--parallel-immediate",
            "--parallel-max",
            "50",
            "-w",
            "%{http_code} %{time_total}\n",
        ];
        for url in &urls {
            args.extend_from_slice(&["-o", "/dev/null", url]);
        }
        let out = curl(&args);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let (code, time) = l.split_once(' ').unwrap();
                (code.parse().unwrap(), time.parse().unwrap())
            })
            .collect()
    };
    assert_eq!(got.len(), count, "{got:?}");
    got.sort_by(|a, b| a.1.total_cmp(&b.1));
    got
}

/// The times of the answers that passed (200), and how many were refused (429).
fn passed_and_refused(got: &[(u16, f64)]) -> (Vec<f64>, usize) {
    let passed = got.iter().filter(|g| g.0 == 200).map(|g| g.1).collect();
    let refused = got.iter().filter(|g| g.0 == 429).count();
    assert_eq!(
        got.len(),
        got.iter().filter(|g| g.0 == 200 || g.0 == 429).count(),
        "{got:?}"
    );
    (passed, refused)
}

/// nginx's two stages, over HTTP/1.1 or HTTP/2 (`h2`): a zone of 10 r/s with a burst of 5
/// meets 7 requests at once. Six pass, the seventh (beyond the burst) is refused at once; of
/// the six, the first pass at once — one without `nodelay`, three with `delay=2`, all six with
/// `nodelay` — and the rest go through at the rate, 100 ms apart as the client sees them.
fn two_stages(h2: bool) {
    for (zone, at_first) in [
        ("10r/s,burst=5", 1),
        ("10r/s,burst=5,delay=2", 3),
        ("10r/s,burst=5,nodelay", 6),
    ] {
        let s = Served::start(["--h2c", "--rate-limit", zone]);
        let got = at_once(s.addr, "/plaintext", 7, h2);
        paced(&got, at_first, zone);
        s.stop();
    }
}

/// Checks 7 answers to a zone of 10 r/s with a burst of 5 (`what`): six passed, the first
/// `at_first` of them at once and the rest one each 100 ms, never sooner; the seventh refused
/// at once. Late is allowed some slack (a loaded machine's scheduling), early none but the
/// clock's.
fn paced(got: &[(u16, f64)], at_first: usize, what: &str) {
    let (passed, refused) = passed_and_refused(got);
    assert_eq!((passed.len(), refused), (6, 1), "{what}: {got:?}");
    let refused_at = got.iter().find(|g| g.0 == 429).unwrap().1;
    assert!(refused_at < 0.15, "{what}: {got:?}");
    for (i, &t) in passed.iter().enumerate() {
        let due = 0.1 * i.saturating_sub(at_first - 1) as f64;
        assert!(
            t >= due - 0.03 && t < due + 0.3,
            "{what}: answer {i} at {t:.3}s, due at {due:.1}s: {got:?}"
        );
    }
}

#[test]
fn requests_within_the_burst_are_held_back_to_the_rate() {
    two_stages(false);
}

#[test]
fn requests_within_the_burst_are_held_back_over_http2() {
    two_stages(true);
}

/// Over HTTP/3 the same: streams of one QUIC connection, held back each in its turn.
#[test]
fn requests_within_the_burst_are_held_back_over_http3() {
    let (_pki, cert) = support::h3::cert();
    let served = support::h3::serve(&cert, &["--rate-limit", "10r/s,burst=5"]);
    let mut scenario = vec!["get", "GET"];
    scenario.extend(["/plaintext"; 7]);
    let got = support::h3::client(&served, &scenario);
    let mut got: Vec<(u16, f64)> = got["responses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let status = u16::try_from(r["status"].as_u64().unwrap()).unwrap();
            (status, r["elapsed"].as_f64().unwrap())
        })
        .collect();
    got.sort_by(|a, b| a.1.total_cmp(&b.1));
    paced(&got, 1, "10r/s,burst=5 over HTTP/3");
}

/// A held request whose client leaves gives its place back at once (the zone's count of held
/// requests drops, long before the delay would have ended) and is logged 499; `/metrics`
/// counts what was held back, and the access log says `DELAYED`.
#[test]
fn a_held_request_whose_client_leaves_frees_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let (s, metrics) = with_metrics(&[
        "--h2c",
        "--rate-limit",
        "1r/s,burst=5",
        "--access-log",
        &log.display().to_string(),
        "--access-log-format",
        "$request_uri $status $limit_req_status",
    ]);
    let value = |prefix: &str| zone_metric(&metrics, prefix);
    // The first passes; the next two are held back 1 s and 2 s, then their clients leave.
    assert_eq!(status(s.addr, "/plaintext", &[]), 200);
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.write_all(b"GET /json HTTP/1.1\r\nHost: g\r\n\r\n")
            .unwrap();
        held.push(c);
    }
    // Over HTTP/2 too: a stream held back, then its connection gone.
    let mut h2 = Command::new("nghttp")
        .arg("-n")
        .arg(format!("http://{}/100.html", s.addr))
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(value("lowlat_rate_limit_waiting{"), 3);
    drop(held);
    h2.kill().unwrap();
    h2.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(value("lowlat_rate_limit_waiting{"), 0);
    assert_eq!(value("lowlat_rate_limit_delayed_total{"), 3);
    assert_eq!(value("lowlat_rate_limit_refused_total{"), 0);
    // The zone goes on (its four requests drained): one passes, the next is held back a
    // second and answered, logged DELAYED.
    std::thread::sleep(Duration::from_millis(4000));
    assert_eq!(status(s.addr, "/plaintext", &[]), 200);
    let started = std::time::Instant::now();
    assert_eq!(status(s.addr, "/plaintext", &[]), 200);
    assert!(
        started.elapsed() > Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    s.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // The requests whose clients left are logged 499, as nginx logs a request its client
    // closed (in whichever order the worker saw them go).
    assert_eq!(lines.len(), 6, "{text}");
    let mut left = lines[1..4].to_vec();
    left.sort_unstable();
    assert_eq!(
        (lines[0], left, &lines[4..]),
        (
            "/plaintext 200 PASSED",
            vec![
                "/100.html 499 DELAYED",
                "/json 499 DELAYED",
                "/json 499 DELAYED"
            ],
            &["/plaintext 200 PASSED", "/plaintext 200 DELAYED"][..]
        ),
        "{text}"
    );
}
