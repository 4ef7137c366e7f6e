//! Static files end to end: real files in temporary directories, a real server on 127.0.0.1:0
//! built from `lowlat serve` flags, raw sockets (and curl and ureq as real clients). Every rule of
//! the static module: traversal attempts, symlinks, dotfiles, MIME types, HEAD, ranges,
//! conditionals, precompressed siblings, directories, autoindex, the cache and its revalidation,
//! files changing under the server.

mod support;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use clap::Parser;
use support::{roundtrip, Reader, Reply, TestServer};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: lowlat_server::settings::ServeArgs,
}

/// Starts `lowlat serve --workers 1 [--root root] extra...` on an ephemeral port.
fn start(root: Option<&Path>, extra: &[&str]) -> TestServer {
    let mut argv = vec![
        "lowlat".to_owned(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--workers".into(),
        "1".into(),
    ];
    if let Some(root) = root {
        argv.push("--root".into());
        argv.push(root.display().to_string());
    }
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    let cli = Cli::try_parse_from(argv).expect("flags parse");
    let service = lowlat_server::settings::service(&cli.serve).expect("service");
    let mut cfg = cli.serve.to_config().expect("config");
    cfg.grace = Duration::from_secs(1);
    TestServer::start(cfg, service)
}

/// A request with extra header lines.
fn request(method: &str, target: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut r = format!("{method} {target} HTTP/1.1\r\nHost: test\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    r.into_bytes()
}

fn get(s: &TestServer, target: &str) -> Reply {
    get_with(s, target, &[])
}

fn get_with(s: &TestServer, target: &str, headers: &[(&str, &str)]) -> Reply {
    roundtrip(s.addr, &request("GET", target, headers)).expect("reply")
}

fn head_with(s: &TestServer, target: &str, headers: &[(&str, &str)]) -> Reply {
    roundtrip(s.addr, &request("HEAD", target, headers)).expect("reply")
}

/// A site: `www/` (the root) beside `secret.txt` (outside it).
struct Site {
    dir: tempfile::TempDir,
}

impl Site {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("www")).unwrap();
        fs::write(
            dir.path().join("secret.txt"),
            "TOPSECRET outside the root\n",
        )
        .unwrap();
        let site = Self { dir };
        site.write("100.html", &[b"X".repeat(99), b"\n".to_vec()].concat());
        site.write("index.html", b"<h1>home</h1>\n");
        site
    }

    fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("www")
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.root().join(rel)
    }

    fn write(&self, rel: &str, content: &[u8]) {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(p, content).unwrap();
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// With no flags, the embedded site: a welcome page and the seed benchmark's 100-byte file.
#[test]
fn embedded_default_site() {
    let s = start(None, &[]);
    let r = get(&s, "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(String::from_utf8_lossy(&r.body).contains("Welcome to lowlat"));
    assert_eq!(get(&s, "/index.html").body, r.body);
    let r = get(&s, "/100.html");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, [b"X".repeat(99), b"\n".to_vec()].concat());
    let etag = r.header("etag").unwrap().to_owned();
    let r = get_with(&s, "/100.html", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    let r = get_with(&s, "/100.html", &[("Range", "bytes=-1")]);
    assert_eq!((r.status, r.body.as_slice()), (206, &b"\n"[..]));
    let r = head_with(&s, "/100.html", &[]);
    assert_eq!(r.header("content-length"), Some("100"));
    assert!(r.body.is_empty());
    assert_eq!(get(&s, "/missing").status, 404);
    assert_eq!(get(&s, "/plaintext").body, b"Hello, World!");
}

/// Content-Type from the extension (charset for text), Last-Modified, a strong ETag,
/// Accept-Ranges, and the bytes of the file.
#[test]
fn types_and_validators() {
    let site = Site::new();
    for name in [
        "a.html",
        "a.css",
        "a.js",
        "a.json",
        "a.txt",
        "a.svg",
        "a.png",
        "a.wasm",
        "noext",
        "a b é.txt",
    ] {
        site.write(name, name.as_bytes());
    }
    let s = start(Some(&site.root()), &[]);
    for (name, ty) in [
        ("a.html", "text/html; charset=utf-8"),
        ("a.css", "text/css; charset=utf-8"),
        ("a.js", "text/javascript; charset=utf-8"),
        ("a.json", "application/json; charset=utf-8"),
        ("a.txt", "text/plain; charset=utf-8"),
        ("a.svg", "image/svg+xml; charset=utf-8"),
        ("a.png", "image/png"),
        ("a.wasm", "application/wasm"),
        ("noext", "application/octet-stream"),
        ("a%20b%20%C3%A9.txt", "text/plain; charset=utf-8"),
    ] {
        let r = get(&s, &format!("/{name}"));
        assert_eq!(r.status, 200, "{name}");
        assert_eq!(r.header("content-type"), Some(ty), "{name}");
        assert_eq!(r.header("accept-ranges"), Some("bytes"));
        let etag = r.header("etag").unwrap();
        assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
        let lm = r.header("last-modified").unwrap();
        assert!(httpdate::parse_http_date(lm).is_ok(), "{lm}");
        assert!(r.header("vary").is_none());
        assert!(r.header("cache-control").is_none());
    }
    assert_eq!(get(&s, "/a%20b%20%C3%A9.txt").body, "a b é.txt".as_bytes());
}

/// HEAD gets the GET's head and no body, for memory and sendfile files alike.
#[test]
fn head_has_no_body() {
    let site = Site::new();
    site.write("big.bin", &pattern(300_000));
    let s = start(Some(&site.root()), &[]);
    let mut r = Reader::new(s.connect());
    for (path, len) in [
        ("/100.html", "100"),
        ("/big.bin", "300000"),
        ("/", "14"),
        ("/100.html", "100"),
    ] {
        r.send(&request("HEAD", path, &[]));
        let reply = r.reply_to("HEAD").unwrap();
        assert_eq!(reply.status, 200);
        assert!(reply.body.is_empty());
        assert_eq!(reply.header("content-length"), Some(len), "{path}");
    }
    // The connection is still in step: a GET after the HEADs gets its body.
    r.send(&request("GET", "/100.html", &[]));
    assert_eq!(r.reply().unwrap().body.len(), 100);
}

/// Methods other than GET and HEAD: 405 with Allow on what exists, 404 on what does not.
#[test]
fn other_methods_405() {
    let site = Site::new();
    let s = start(Some(&site.root()), &[]);
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "PROPFIND"] {
        let raw = format!("{method} /100.html HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
        let r = roundtrip(s.addr, raw.as_bytes()).unwrap();
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"), "{method}");
        // What does not exist is 404 whatever the method, as nginx answers.
        let raw =
            format!("{method} /missing.html HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(
            roundtrip(s.addr, raw.as_bytes()).unwrap().status,
            404,
            "{method}"
        );
    }
    // The embedded site answers the same way.
    let s = start(None, &[]);
    let post = |path: &str| {
        let raw = format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
        roundtrip(s.addr, raw.as_bytes()).unwrap().status
    };
    assert_eq!(post("/100.html"), 405);
    assert_eq!(post("/nope"), 404);
}

/// Thirty-odd encoded traversal attempts: each gets 400 or 404, never the secret.
#[test]
fn traversal_attempts_refused() {
    let site = Site::new();
    fs::create_dir(site.path("sub")).unwrap();
    let s = start(Some(&site.root()), &[]);
    let long = format!("/{}", "a/".repeat(1500));
    let long_segment = format!("/{}", "a".repeat(300));
    let attempts: Vec<String> = [
        "/../secret.txt",
        "/../../secret.txt",
        "/sub/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/.%2e/secret.txt",
        "/%2e./secret.txt",
        "/sub/%2e%2e/%2e%2e/secret.txt",
        "/..%2fsecret.txt",
        "/..%2Fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/sub%2f..%2f..%2fsecret.txt",
        "/..%5csecret.txt",
        "/..%5Csecret.txt",
        "/%2e%2e%5csecret.txt",
        "/..\\secret.txt",
        "/sub/..\\..\\secret.txt",
        "/%c0%ae%c0%ae/secret.txt",
        "/%c0%2e%c0%2e/secret.txt",
        "/%e0%80%ae%e0%80%ae/secret.txt",
        "/%c0%af../secret.txt",
        "/%252e%252e/secret.txt",
        "/..%00/secret.txt",
        "/100.html%00.txt",
        "/%00",
        "/./../secret.txt",
        "/sub/./../../secret.txt",
        "/..;/secret.txt",
        "//../secret.txt",
        "/%2f%2e%2e%2fsecret.txt",
        "http://test/../secret.txt",
        "http://test/%2e%2e/secret.txt",
        "http://test/..%2fsecret.txt",
        "*",
        "/%",
        "/%zz/../secret.txt",
        "/.../secret.txt",
        "/..../secret.txt",
        &long,
        &long_segment,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    assert!(attempts.len() >= 30);
    for target in &attempts {
        let raw = format!("GET {target} HTTP/1.1\r\nHost: test\r\n\r\n");
        let r = roundtrip(s.addr, raw.as_bytes()).unwrap_or_else(|| panic!("{target}"));
        assert!(r.status == 400 || r.status == 404, "{target}: {}", r.status);
        assert!(!String::from_utf8_lossy(&r.body).contains("TOPSECRET"));
    }
    // Absolute-form is served like origin-form when it stays inside.
    assert_eq!(get(&s, "http://test/100.html").status, 200);
    // Dot-segments that stay inside the root are resolved, as nginx does.
    for inside in [
        "/sub/../100.html",
        "/./100.html",
        "/sub/%2e%2e/100.html",
        "/sub/./../100.html",
    ] {
        let r = get(&s, inside);
        assert_eq!((r.status, r.body.len()), (200, 100), "{inside}");
    }
    // The server is still alive and well.
    assert_eq!(get(&s, "/100.html").status, 200);
}

/// Symlinks leading outside the root are refused unless allowed; inside ones are followed.
#[test]
fn symlink_policy() {
    let site = Site::new();
    let outside = site.dir.path().join("secret.txt");
    symlink(&outside, site.path("out.txt")).unwrap();
    symlink(site.dir.path(), site.path("outdir")).unwrap();
    symlink(site.path("100.html"), site.path("in.html")).unwrap();
    site.write(".hidden", b"dot");
    symlink(site.path(".hidden"), site.path("to-dot.txt")).unwrap();
    symlink(site.path("nowhere"), site.path("dangling")).unwrap();
    let s = start(Some(&site.root()), &[]);
    assert_eq!(get(&s, "/out.txt").status, 404);
    assert_eq!(get(&s, "/outdir/secret.txt").status, 404);
    assert_eq!(get(&s, "/outdir/").status, 404);
    assert_eq!(get(&s, "/in.html").status, 200);
    assert_eq!(get(&s, "/in.html").body.len(), 100);
    assert_eq!(get(&s, "/to-dot.txt").status, 404);
    assert_eq!(get(&s, "/dangling").status, 404);
    drop(s);

    let s = start(Some(&site.root()), &["--follow-symlinks-outside"]);
    assert!(String::from_utf8_lossy(&get(&s, "/out.txt").body).contains("TOPSECRET"));
    assert_eq!(get(&s, "/outdir/secret.txt").status, 200);
}

/// Dotfiles and dot-directories are 404 unless `--dotfiles`.
#[test]
fn dotfiles() {
    let site = Site::new();
    site.write(".env", b"KEY=1");
    site.write(".git/config", b"[core]");
    site.write(".well-known/security.txt", b"Contact: x");
    let s = start(Some(&site.root()), &[]);
    for p in [
        "/.env",
        "/.git/config",
        "/.git/",
        "/.git",
        "/%2eenv",
        "/.well-known/security.txt",
    ] {
        assert_eq!(get(&s, p).status, 404, "{p}");
    }
    drop(s);
    let s = start(Some(&site.root()), &["--dotfiles"]);
    assert_eq!(get(&s, "/.env").body, b"KEY=1");
    assert_eq!(get(&s, "/.well-known/security.txt").status, 200);
    assert_eq!(get(&s, "/../secret.txt").status, 400);
}

/// Unreadable files are 403 (when not running as root, which reads everything); FIFOs and
/// other special files are 404 and never block the worker; an mtime past year 9999 is served.
#[test]
fn unreadable_and_special_files() {
    let site = Site::new();
    site.write("locked.txt", b"no");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(site.path("locked.txt"), fs::Permissions::from_mode(0o000)).unwrap();
    let fifo = site.path("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    // An mtime past year 9999 (`touch -d` allows it) cannot be written as an HTTP-date.
    site.write("future.txt", b"later");
    fs::File::options()
        .write(true)
        .open(site.path("future.txt"))
        .unwrap()
        .set_modified(std::time::UNIX_EPOCH + Duration::from_secs(300_000_000_000))
        .unwrap();
    let s = start(Some(&site.root()), &[]);
    let r = get(&s, "/future.txt");
    assert_eq!(r.body, b"later");
    // (File systems clamp it, ext4 to 2446; the date is whatever they kept, never a crash.)
    assert!(httpdate::parse_http_date(r.header("last-modified").unwrap()).is_ok());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert_eq!(get(&s, "/locked.txt").status, 403);
    }
    if made {
        assert_eq!(get(&s, "/pipe").status, 404);
    }
    assert_eq!(get(&s, "/100.html").status, 200);
}

/// Every Range form on a file held in memory and on one sent with sendfile.
#[test]
fn ranges() {
    let site = Site::new();
    let small = pattern(1000);
    let big = pattern(200_000);
    site.write("small.bin", &small);
    site.write("big.bin", &big);
    let s = start(Some(&site.root()), &["--cache-file-max", "64k"]);
    for (path, data) in [("/small.bin", &small), ("/big.bin", &big)] {
        let len = data.len() as u64;
        let n = data.len();
        for (range, start, end) in [
            ("bytes=0-9", 0, 9),
            ("bytes=10-", 10, n - 1),
            ("bytes=-10", n - 10, n - 1),
            ("bytes=-999999", 0, n - 1),
            ("bytes=500-9999999", 500, n - 1),
            ("bytes=0-0", 0, 0),
            (&format!("bytes={}-", n - 1), n - 1, n - 1),
        ] {
            let r = get_with(&s, path, &[("Range", range)]);
            assert_eq!(r.status, 206, "{path} {range}");
            assert_eq!(r.body, data[start..=end], "{path} {range}");
            assert_eq!(
                r.header("content-range"),
                Some(&*format!("bytes {start}-{end}/{len}")),
                "{path} {range}"
            );
            assert!(r.header("etag").is_some());
        }
        for range in [&*format!("bytes={n}-"), "bytes=-0", "bytes=99999999-"] {
            let r = get_with(&s, path, &[("Range", range)]);
            assert_eq!(r.status, 416, "{path} {range}");
            assert_eq!(r.header("content-range"), Some(&*format!("bytes */{len}")));
        }
        // Several ranges, junk, another unit: the whole file.
        for range in ["bytes=0-1,5-6", "bytes=abc", "items=0-1", "bytes=5-1"] {
            let r = get_with(&s, path, &[("Range", range)]);
            assert_eq!(r.status, 200, "{path} {range}");
            assert_eq!(r.body, *data);
        }
        // HEAD ignores Range (RFC 9110 §14.2: defined for GET only).
        let r = head_with(&s, path, &[("Range", "bytes=0-9")]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some(&*len.to_string()));
    }
}

/// If-Range: a matching strong tag or the exact date lets the range apply; anything else gets
/// the full file.
#[test]
fn if_range() {
    let site = Site::new();
    let s = start(Some(&site.root()), &[]);
    let full = get(&s, "/100.html");
    let etag = full.header("etag").unwrap().to_owned();
    let lm = full.header("last-modified").unwrap().to_owned();
    let weak = format!("W/{etag}");
    for (if_range, status) in [
        (&*etag, 206),
        (&*lm, 206),
        ("\"other\"", 200),
        (&*weak, 200),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 200),
        ("garbage", 200),
    ] {
        let r = get_with(
            &s,
            "/100.html",
            &[("Range", "bytes=0-4"), ("If-Range", if_range)],
        );
        assert_eq!(r.status, status, "{if_range}");
        assert_eq!(r.body.len(), if status == 206 { 5 } else { 100 });
    }
}

/// Every combination of the four preconditions, on the wire.
#[test]
fn conditionals() {
    let site = Site::new();
    let s = start(
        Some(&site.root()),
        &["--cache-control", "public, max-age=60"],
    );
    let full = get(&s, "/100.html");
    let etag = full.header("etag").unwrap().to_owned();
    let lm = full.header("last-modified").unwrap().to_owned();
    let mtime = httpdate::parse_http_date(&lm).unwrap();
    let earlier = httpdate::fmt_http_date(mtime - Duration::from_secs(10));
    let later = httpdate::fmt_http_date(mtime + Duration::from_secs(10));
    let weak = format!("W/{etag}");
    let list = format!("\"nope\", {etag}");
    let (im, ius, inm, ims) = (
        "If-Match",
        "If-Unmodified-Since",
        "If-None-Match",
        "If-Modified-Since",
    );
    let cases: Vec<(Vec<(&str, &str)>, u16)> = vec![
        (vec![], 200),
        (vec![(inm, &etag)], 304),
        (vec![(inm, &weak)], 304),
        (vec![(inm, &list)], 304),
        (vec![(inm, "*")], 304),
        (vec![(inm, "\"nope\"")], 200),
        (vec![(ims, &lm)], 304),
        (vec![(ims, &later)], 304),
        (vec![(ims, &earlier)], 200),
        (vec![(ims, "not a date")], 200),
        (vec![(inm, "\"nope\""), (ims, &lm)], 200),
        (vec![(inm, &etag), (ims, &earlier)], 304),
        (vec![(im, &etag)], 200),
        (vec![(im, "*")], 200),
        (vec![(im, &list)], 200),
        (vec![(im, &weak)], 412),
        (vec![(im, "\"nope\"")], 412),
        (vec![(ius, &lm)], 200),
        (vec![(ius, &later)], 200),
        (vec![(ius, &earlier)], 412),
        (vec![(ius, "junk")], 200),
        (vec![(im, &etag), (ius, &earlier)], 200),
        (vec![(im, "\"nope\""), (inm, &etag)], 412),
        (vec![(im, &etag), (inm, &etag)], 304),
        (vec![(ius, &earlier), (ims, &lm)], 412),
        (vec![(im, &etag), (ims, &lm)], 304),
    ];
    for (headers, status) in &cases {
        let r = get_with(&s, "/100.html", headers);
        assert_eq!(r.status, *status, "{headers:?}");
        match status {
            304 => {
                assert!(r.body.is_empty());
                assert!(r.header("content-length").is_none());
                assert_eq!(r.header("etag"), Some(&*etag));
                assert_eq!(r.header("cache-control"), Some("public, max-age=60"));
            }
            200 => {
                assert_eq!(r.body.len(), 100);
                assert_eq!(r.header("cache-control"), Some("public, max-age=60"));
            }
            _ => {}
        }
        let r = head_with(&s, "/100.html", headers);
        assert_eq!(r.status, *status, "HEAD {headers:?}");
        assert!(r.body.is_empty());
    }
}

/// Precompressed siblings by Accept-Encoding with q-values; Vary on every response of a file
/// that has siblings; none on one that has not, nor with `--no-precompressed`.
#[test]
fn precompressed_siblings() {
    let site = Site::new();
    site.write("app.css", b"identity body");
    site.write("app.css.gz", b"gzip body");
    site.write("app.css.br", b"br body");
    site.write("only-gz.js", b"plain js");
    site.write("only-gz.js.gz", b"gz js");
    let s = start(Some(&site.root()), &[]);
    for (ae, body, encoding) in [
        (None, "identity body", None),
        (Some("gzip, deflate, br"), "br body", Some("br")),
        (Some("gzip"), "gzip body", Some("gzip")),
        (Some("br;q=0.5, gzip;q=0.8"), "gzip body", Some("gzip")),
        (Some("br;q=0, gzip;q=0"), "identity body", None),
        (Some("*"), "br body", Some("br")),
        (Some("*;q=0, gzip"), "gzip body", Some("gzip")),
        (Some("identity;q=1, gzip;q=0.5"), "identity body", None),
        (Some("deflate"), "identity body", None),
        (Some("x-gzip"), "gzip body", Some("gzip")),
    ] {
        let headers: Vec<(&str, &str)> = ae.map(|v| ("Accept-Encoding", v)).into_iter().collect();
        let r = get_with(&s, "/app.css", &headers);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, body.as_bytes(), "{ae:?}");
        assert_eq!(r.header("content-encoding"), encoding, "{ae:?}");
        assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    }
    // Each representation has its own ETag, and revalidates against it.
    let id = get(&s, "/app.css");
    let br = get_with(&s, "/app.css", &[("Accept-Encoding", "br")]);
    assert_ne!(id.header("etag"), br.header("etag"));
    let r = get_with(
        &s,
        "/app.css",
        &[
            ("Accept-Encoding", "br"),
            ("If-None-Match", br.header("etag").unwrap()),
        ],
    );
    assert_eq!(r.status, 304);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    // A range applies to the encoded bytes.
    let r = get_with(
        &s,
        "/app.css",
        &[("Accept-Encoding", "br"), ("Range", "bytes=0-1")],
    );
    assert_eq!((r.status, r.body.as_slice()), (206, &b"br"[..]));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    // 416 and 412 depend on the representation chosen too (its length, its ETag).
    let r = get_with(
        &s,
        "/app.css",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=100-")],
    );
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */9"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let r = get_with(
        &s,
        "/app.css",
        &[("Accept-Encoding", "gzip"), ("If-Match", "\"x\"")],
    );
    assert_eq!(r.status, 412);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let r = get_with(&s, "/only-gz.js", &[("Accept-Encoding", "br, gzip")]);
    assert_eq!(r.body, b"gz js");
    assert!(get(&s, "/100.html").header("vary").is_none());
    drop(s);
    let s = start(Some(&site.root()), &["--no-precompressed"]);
    let r = get_with(&s, "/app.css", &[("Accept-Encoding", "br")]);
    assert_eq!(r.body, b"identity body");
    assert!(r.header("vary").is_none());
}

/// Directories: 301 to the slashed URL (query kept), the index file, 403 without one, a custom
/// index name.
#[test]
fn directories() {
    let site = Site::new();
    site.write("docs/index.html", b"docs index");
    site.write("empty/.keep", b"");
    site.write("a b/index.html", b"spaced");
    let s = start(Some(&site.root()), &[]);
    let r = get(&s, "/docs");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/docs/"));
    let r = get(&s, "/docs?x=1&y=2");
    assert_eq!(r.header("location"), Some("/docs/?x=1&y=2"));
    let r = get(&s, "//docs");
    assert_eq!(r.header("location"), Some("/docs/"));
    assert_eq!(get(&s, "/a%20b").header("location"), Some("/a%20b/"));
    assert_eq!(get(&s, "/docs/").body, b"docs index");
    assert_eq!(get(&s, "/a%20b/").body, b"spaced");
    assert_eq!(get(&s, "/").body, b"<h1>home</h1>\n");
    assert_eq!(get(&s, "/empty/").status, 403);
    assert_eq!(get(&s, "/100.html/").status, 404);
    drop(s);
    site.write("docs/start.htm", b"custom index");
    let s = start(Some(&site.root()), &["--index", "start.htm"]);
    let r = get(&s, "/docs/");
    assert_eq!(r.body, b"custom index");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
}

/// `--autoindex`: names HTML-escaped in the text, percent-encoded in the links, dotfiles hidden.
#[test]
fn autoindex_escapes() {
    let site = Site::new();
    site.write("list/<script>alert(1)<%2Fscript>.txt", b"x");
    site.write("list/a&b \"q\" #1?.txt", b"x");
    site.write("list/.secret", b"x");
    site.write("list/sub/file", b"x");
    let s = start(Some(&site.root()), &[]);
    assert_eq!(get(&s, "/list/").status, 403);
    drop(s);
    let s = start(Some(&site.root()), &["--autoindex"]);
    let r = get(&s, "/list/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let html = String::from_utf8(r.body).unwrap();
    assert!(!html.contains("<script>"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;%2Fscript&gt;.txt"));
    assert!(html.contains("href=\"%3Cscript%3Ealert(1)%3C%252Fscript%3E.txt\""));
    assert!(html.contains("href=\"a%26b%20%22q%22%20%231%3F.txt\""));
    assert!(html.contains("a&amp;b &quot;q&quot; #1?.txt"));
    assert!(html.contains("href=\"sub/\""));
    assert!(!html.contains("secret"));
    // The links work.
    assert_eq!(get(&s, "/list/a%26b%20%22q%22%20%231%3F.txt").status, 200);
    assert_eq!(get(&s, "/list/sub/").status, 200);
}

/// A listing shows only what a request could reach: not a symlink leading outside the root or
/// to a dotfile, not a name a URL path cannot carry; a symlink inside the root is listed.
#[test]
fn autoindex_lists_only_what_is_served() {
    let site = Site::new();
    site.write("list/plain.txt", b"x");
    site.write(".env", b"SECRET=1");
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret.txt"), b"outside secret").unwrap();
    symlink(
        outside.path().join("secret.txt"),
        site.path("list/out-link"),
    )
    .unwrap();
    symlink(site.path(".env"), site.path("list/env-link")).unwrap();
    symlink(site.path("list/plain.txt"), site.path("list/in-link")).unwrap();
    symlink(site.path("list/nowhere"), site.path("list/dangling")).unwrap();
    site.write("list/back\\slash.txt", b"x");
    site.write("list/new\nline.txt", b"x");
    let s = start(Some(&site.root()), &["--autoindex"]);
    let html = String::from_utf8(get(&s, "/list/").body).unwrap();
    assert!(
        html.contains("plain.txt") && html.contains("in-link"),
        "{html}"
    );
    for hidden in ["out-link", "env-link", "dangling", "slash", "line.txt"] {
        assert!(!html.contains(hidden), "{hidden} listed:\n{html}");
    }
    // What is left out is not served either.
    assert_eq!(get(&s, "/list/out-link").status, 404);
    assert_eq!(get(&s, "/list/in-link").status, 200);
    drop(s);
    // Followed when symlinks outside are allowed.
    let s = start(
        Some(&site.root()),
        &["--autoindex", "--follow-symlinks-outside"],
    );
    let html = String::from_utf8(get(&s, "/list/").body).unwrap();
    assert!(html.contains("out-link"), "{html}");
}

/// A file rewritten, truncated, or deleted between requests is seen once the entry is
/// revalidated (`--cache-valid`).
#[test]
fn file_changes_between_requests() {
    let site = Site::new();
    site.write("f.txt", b"version one");
    let s = start(Some(&site.root()), &["--cache-valid", "100ms"]);
    let first = get(&s, "/f.txt");
    assert_eq!(first.body, b"version one");
    std::thread::sleep(Duration::from_millis(20));
    site.write("f.txt", b"version two, longer");
    std::thread::sleep(Duration::from_millis(150));
    let second = get(&s, "/f.txt");
    assert_eq!(second.body, b"version two, longer");
    assert_ne!(first.header("etag"), second.header("etag"));
    fs::File::create(site.path("f.txt")).unwrap(); // truncate to 0
    std::thread::sleep(Duration::from_millis(150));
    let third = get(&s, "/f.txt");
    assert_eq!((third.status, third.body.len()), (200, 0));
    assert_eq!(third.header("content-length"), Some("0"));
    fs::remove_file(site.path("f.txt")).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(get(&s, "/f.txt").status, 404);
    site.write("f.txt", b"back");
    // A miss is never cached, so the new file is seen at once.
    assert_eq!(get(&s, "/f.txt").body, b"back");
}

/// A large file (sent from a cached descriptor) truncated between requests: the next response
/// announces the new length at once, even inside the revalidation interval.
#[test]
fn large_file_truncated_between_requests() {
    let site = Site::new();
    site.write("big.bin", &pattern(500_000));
    let s = start(Some(&site.root()), &["--cache-valid", "1h"]);
    assert_eq!(get(&s, "/big.bin").body.len(), 500_000);
    let f = fs::OpenOptions::new()
        .write(true)
        .open(site.path("big.bin"))
        .unwrap();
    f.set_len(100_000).unwrap();
    let r = get(&s, "/big.bin");
    assert_eq!(r.header("content-length"), Some("100000"));
    assert_eq!(r.body, pattern(100_000));
}

/// A large file truncated while it is being sent: the connection closes short of the announced
/// length; it never completes a body of another length.
#[test]
fn large_file_truncated_during_send() {
    let site = Site::new();
    let len = 32 << 20;
    site.write("huge.bin", &pattern(len));
    let s = start(Some(&site.root()), &[]);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(64 * 1024).unwrap();
    sock.connect(&s.addr.into()).unwrap();
    let mut stream: std::net::TcpStream = sock.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(&request("GET", "/huge.bin", &[])).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    let head_end = text.find("\r\n\r\n").expect("head in first read") + 4;
    assert!(text.contains(&format!("Content-Length: {len}")));
    // Truncate while the server is blocked on our full receive window.
    std::thread::sleep(Duration::from_millis(100));
    fs::OpenOptions::new()
        .write(true)
        .open(site.path("huge.bin"))
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let mut body = n - head_end;
    let reading = std::time::Instant::now();
    let end = loop {
        match stream.read(&mut buf) {
            Ok(0) => break "closed",
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break "closed",
            Err(e) => panic!("no close after {body} bytes ({e}): the server must not hang"),
            Ok(n) => body += n,
        }
    };
    assert_eq!(end, "closed");
    assert!(body < len, "got {body} of {len}: the body must stop short");
    assert!(
        reading.elapsed() < Duration::from_secs(5),
        "the close came late"
    );
}

/// A large file rewritten in place (same length, other bytes) while it is sent: what arrives is
/// exactly the announced length, or the connection closes short; never more, never a hang.
#[test]
fn large_file_rewritten_during_send() {
    let site = Site::new();
    let len = 8 << 20;
    site.write("huge.bin", &pattern(len));
    let s = start(Some(&site.root()), &[]);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(64 * 1024).unwrap();
    sock.connect(&s.addr.into()).unwrap();
    let mut stream: std::net::TcpStream = sock.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(&request("GET", "/huge.bin", &[])).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let n = stream.read(&mut buf).unwrap();
    got.extend_from_slice(&buf[..n]);
    std::thread::sleep(Duration::from_millis(100));
    fs::write(site.path("huge.bin"), vec![b'Z'; len]).unwrap();
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("read failed after {} bytes: {e}", got.len()),
        }
        let text_end = got.windows(4).position(|w| w == b"\r\n\r\n");
        if text_end.is_some_and(|h| got.len() - (h + 4) >= len) {
            break; // the whole body: stop before a keep-alive read would wait
        }
    }
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&got[..head_end]).into_owned();
    assert!(head.contains(&format!("Content-Length: {len}")), "{head}");
    assert!(got.len() - head_end <= len, "more body than announced");
}

/// The cache is bounded by `--cache-bytes`: an entry is served from memory (an in-place rewrite
/// that keeps size and mtime is not seen while it is cached), and once enough other files pass
/// through the cache it is evicted and the new content appears.
#[test]
fn cache_eviction_under_budget() {
    let site = Site::new();
    let size = 20_000;
    for i in 0..10 {
        site.write(&format!("f{i}.bin"), &vec![b'a' + i as u8; size]);
    }
    let s = start(
        Some(&site.root()),
        &["--cache-bytes", "64k", "--cache-valid", "1h"],
    );
    assert_eq!(get(&s, "/f0.bin").body, vec![b'a'; size]);
    // Rewrite f0 in place, same size, mtime put back: only a re-read can see it.
    let path = site.path("f0.bin");
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();
    let mut f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all(&vec![b'Z'; size]).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    assert_eq!(
        get(&s, "/f0.bin").body,
        vec![b'a'; size],
        "served from cache"
    );
    for i in 1..10 {
        assert_eq!(get(&s, &format!("/f{i}.bin")).body.len(), size);
    }
    assert_eq!(
        get(&s, "/f0.bin").body,
        vec![b'Z'; size],
        "evicted, re-read"
    );
}

/// Pipelined requests for cached files are all answered, in order, on one connection.
#[test]
fn pipelined_cached_files() {
    let site = Site::new();
    site.write("a.txt", b"aaa");
    let s = start(Some(&site.root()), &[]);
    let mut r = Reader::new(s.connect());
    let mut batch = Vec::new();
    for i in 0..32 {
        let path = ["/100.html", "/a.txt", "/missing", "/"][i % 4];
        batch.extend_from_slice(&request("GET", path, &[]));
    }
    r.send(&batch);
    for i in 0..32 {
        let reply = r.reply().unwrap();
        match i % 4 {
            0 => assert_eq!(reply.body.len(), 100),
            1 => assert_eq!(reply.body, b"aaa"),
            2 => assert_eq!(reply.status, 404),
            _ => assert_eq!(reply.body, b"<h1>home</h1>\n"),
        }
    }
}

/// Real clients: curl fetches a file and a range; ureq fetches a large file.
#[test]
fn real_clients() {
    let site = Site::new();
    site.write("big.bin", &pattern(300_000));
    let s = start(Some(&site.root()), &[]);
    let base = format!("http://{}", s.addr);
    let curl = |args: &[&str]| {
        std::process::Command::new("curl")
            .args(["-s", "--max-time", "10"])
            .args(args)
            .output()
    };
    match curl(&[&format!("{base}/100.html")]) {
        Ok(out) if out.status.success() => {
            assert_eq!(out.stdout.len(), 100);
            let out = curl(&["-r", "10-19", &format!("{base}/big.bin")]).unwrap();
            assert_eq!(out.stdout, pattern(300_000)[10..20]);
            let out = curl(&["-sI", &format!("{base}/big.bin")]).unwrap();
            let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
            assert!(head.contains("content-length: 300000"), "{head}");
        }
        _ => eprintln!("curl not installed (scripts/test-deps.sh installs it): skipped"),
    }
    let resp = ureq::get(&format!("{base}/big.bin")).call().unwrap();
    assert_eq!(
        resp.header("content-type"),
        Some("application/octet-stream")
    );
    let mut body = Vec::new();
    resp.into_reader().read_to_end(&mut body).unwrap();
    assert_eq!(body, pattern(300_000));
    let resp = ureq::get(&format!("{base}/big.bin"))
        .set("Range", "bytes=-5")
        .call()
        .unwrap();
    assert_eq!(resp.status(), 206);
    let mut body = Vec::new();
    resp.into_reader().read_to_end(&mut body).unwrap();
    assert_eq!(body, pattern(300_000)[299_995..]);
}

/// Bad flags fail at start with a one-line reason.
#[test]
fn bad_flags() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    for argv in [
        vec!["--root", missing.to_str().unwrap()],
        vec!["--index", "../x"],
        vec!["--cache-control", "x\r\nSet-Cookie: y"],
    ] {
        let mut full = vec!["lowlat"];
        full.extend(argv.iter().copied());
        let cli = Cli::try_parse_from(full).unwrap();
        assert!(
            lowlat_server::settings::service(&cli.serve).is_err(),
            "{argv:?}"
        );
    }
}

/// The user's files come first: a file `json` and a directory `app/` in the root are served in
/// place of the built-in `/json` and the dynamic app; `/plaintext`, with nothing in the way,
/// stays; `--no-plaintext` turns it off too.
#[test]
fn files_win_over_builtin_routes() {
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("json"), "my own json file\n").unwrap();
    fs::create_dir(root.path().join("app")).unwrap();
    fs::write(root.path().join("app/index.html"), "<p>my app</p>\n").unwrap();
    let s = start(Some(root.path()), &[]);
    let r = get(&s, "/json");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"my own json file\n");
    let r = get(&s, "/app/");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<p>my app</p>\n");
    let r = get(&s, "/plaintext");
    assert_eq!(r.body, b"Hello, World!");
    let s = start(Some(root.path()), &["--no-plaintext"]);
    assert_eq!(get(&s, "/plaintext").status, 404);
}
