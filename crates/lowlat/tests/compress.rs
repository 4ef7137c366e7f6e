//! Compression on the fly (`--compress`), through real `lowlat serve` processes and curl: each
//! coding decoded back to the file, q-values and the server's order, the minimum size and the
//! types left alone, `Vary`, ranges, HEAD and 304, a changed file compressed anew under a
//! bounded cache, precompressed siblings first, dynamic responses, HTTP/2, per-site settings.

use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

mod support;
use support::BIN;

/// A `lowlat serve` process, its address and its metrics address.
struct Serve {
    child: Child,
    addr: SocketAddr,
    metrics: SocketAddr,
}

impl Serve {
    fn start(args: &[&str]) -> Self {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--h2c",
            "--metrics",
            "127.0.0.1:0",
        ])
        .args(args);
        let (child, _, seen) = support::spawn_serve(cmd);
        let addr = support::address(&seen, "http://");
        let metrics = support::metrics_addr(&seen);
        Self {
            child,
            addr,
            metrics,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The value of a metric line (`name{labels}`), once the worker has published.
    fn metric(&self, series: &str) -> u64 {
        // Published at the worker's sweep, at most a second behind.
        std::thread::sleep(Duration::from_millis(1300));
        let text = curl(&[&format!("http://{}/metrics", self.metrics)]).body;
        let text = String::from_utf8(text).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no {series} in {text}"))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One response as curl received it.
#[derive(Debug)]
struct Reply {
    status: u16,
    /// Names lower-cased.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn varies(&self) -> bool {
        self.all("vary")
            .iter()
            .any(|v| v.to_ascii_lowercase().contains("accept-encoding"))
    }

    /// The body decoded by its `Content-Encoding`, with a decoder of the test's own.
    fn decoded(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self.header("content-encoding") {
            None => out.clone_from(&self.body),
            Some("gzip") => {
                flate2::read::GzDecoder::new(&self.body[..])
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Some("br") => {
                brotli::Decompressor::new(&self.body[..], 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Some("zstd") => out = zstd::stream::decode_all(&self.body[..]).unwrap(),
            Some(other) => panic!("unexpected coding {other}"),
        }
        out
    }
}

/// Runs curl (`-i`: the head, then the body as sent) and splits its output.
fn curl(args: &[&str]) -> Reply {
    let out = Command::new("curl")
        .args(["-s", "-i", "--max-time", "10"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "curl {args:?}: {out:?}");
    let raw = out.stdout;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: raw[end + 4..].to_vec(),
    }
}

/// GET `url` with this `Accept-Encoding` (none for `None`), then any more curl arguments.
fn get(url: &str, accept: Option<&str>, more: &[&str]) -> Reply {
    let ae = accept.map(|a| format!("Accept-Encoding: {a}"));
    let mut args: Vec<&str> = Vec::new();
    if let Some(ae) = &ae {
        args.extend(["-H", ae]);
    }
    args.extend(more);
    args.push(url);
    curl(&args)
}

/// About 10 KiB of HTML, as compressible as a real page.
fn page(seed: u32) -> Vec<u8> {
    let mut s = String::from("<!doctype html><html><head><title>lowlat</title></head><body><ul>\n");
    let mut i = seed;
    while s.len() < 10 * 1024 {
        i = i.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        s.push_str(&format!(
            "<li class=\"item\"><a href=\"/items/{}\">Item number {}</a></li>\n",
            i % 1000,
            i % 97
        ));
    }
    s.push_str("</ul></body></html>\n");
    s.into_bytes()
}

fn root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("index.html"), page(1)).unwrap();
    std::fs::write(d.join("small.html"), b"<p>short</p>\n".repeat(8)).unwrap();
    // Text bytes, but a type that is not compressed (as if a PNG).
    std::fs::write(d.join("picture.png"), page(2)).unwrap();
    std::fs::write(d.join("data.json"), format!("[{}0]", "1,".repeat(3000))).unwrap();
    dir
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Each coding, over HTTP/1.1 and HTTP/2: Content-Encoding, Vary, the compressed length, a
/// suffixed ETag, and the body decoding to the file — by the test's decoders and by curl's.
#[test]
fn each_coding_decodes_to_the_file() {
    let dir = root();
    let server = Serve::start(&["--root", path_str(dir.path()), "--compress"]);
    let file = std::fs::read(dir.path().join("index.html")).unwrap();
    let plain = get(&server.url("/index.html"), None, &[]);
    let identity_etag = plain.header("etag").unwrap().to_owned();
    for proto in ["--http1.1", "--http2-prior-knowledge"] {
        for coding in ["gzip", "br", "zstd"] {
            let r = get(&server.url("/index.html"), Some(coding), &[proto]);
            assert_eq!(r.status, 200, "{proto} {coding}");
            assert_eq!(r.header("content-encoding"), Some(coding), "{proto}");
            assert!(r.varies(), "{proto} {coding}: {:?}", r.headers);
            assert_eq!(
                r.header("content-length")
                    .unwrap()
                    .parse::<usize>()
                    .unwrap(),
                r.body.len()
            );
            assert!(r.body.len() < file.len() / 3, "{coding}: {}", r.body.len());
            assert_eq!(r.decoded(), file, "{proto} {coding}");
            assert_eq!(
                r.header("etag").unwrap(),
                format!("{}-{coding}\"", identity_etag.trim_end_matches('"'))
            );
            assert_eq!(r.header("accept-ranges"), None);
            assert!(r.header("content-type").unwrap().starts_with("text/html"));
            // curl's own decoders agree.
            let out = Command::new("curl")
                .args(["-s", "--compressed", proto, "-H"])
                .arg(format!("Accept-Encoding: {coding}"))
                .arg(server.url("/index.html"))
                .output()
                .unwrap();
            assert_eq!(out.stdout, file, "curl --compressed {proto} {coding}");
        }
    }
    // The uncompressed answer says it could have been compressed.
    assert!(plain.varies());
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.body, file);
    assert!(server.metric("lowlat_compressed_responses_total{encoding=\"gzip\"}") >= 2);
    assert!(
        server.metric("lowlat_compression_saved_bytes_total{encoding=\"zstd\"}")
            > 2 * (file.len() as u64 / 2)
    );
}

/// q-values, refusals and the server's order of preference.
#[test]
fn qvalues_and_order() {
    let dir = root();
    let server = Serve::start(&["--root", path_str(dir.path()), "--compress"]);
    let gzip_br = Serve::start(&[
        "--root",
        path_str(dir.path()),
        "--compress",
        "--compress-encodings",
        "gzip,br",
    ]);
    for (s, accept, want) in [
        (&server, "gzip, deflate, br, zstd", Some("zstd")),
        (&server, "gzip;q=0.5, br;q=0.9", Some("br")),
        (&server, "gzip, br;q=0.9, zstd;q=0", Some("gzip")),
        (&server, "*", Some("zstd")),
        (&server, "*;q=0", None),
        (&server, "identity;q=0, gzip;q=0, br;q=0, zstd;q=0", None),
        (&server, "identity, gzip;q=0.5", None),
        (&server, "deflate", None),
        (&gzip_br, "zstd, br, gzip", Some("gzip")),
        (&gzip_br, "zstd", None),
        (&gzip_br, "br;q=1, gzip;q=0.1", Some("br")),
    ] {
        let r = get(&s.url("/index.html"), Some(accept), &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), want, "{accept}");
        assert!(r.varies(), "{accept}");
        assert_eq!(
            r.decoded(),
            std::fs::read(dir.path().join("index.html")).unwrap()
        );
    }
}

/// Below the minimum size, or of a type not listed: sent as they are, without Vary; compression
/// off by default.
#[test]
fn small_and_other_types_untouched() {
    let dir = root();
    let server = Serve::start(&["--root", path_str(dir.path()), "--compress"]);
    for path in ["/small.html", "/picture.png"] {
        let r = get(&server.url(path), Some("gzip, br, zstd"), &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), None, "{path}");
        assert!(!r.varies(), "{path}: {:?}", r.headers);
        assert_eq!(r.body, std::fs::read(dir.path().join(&path[1..])).unwrap());
    }
    let json = get(&server.url("/data.json"), Some("gzip"), &[]);
    assert_eq!(json.header("content-encoding"), Some("gzip"));
    // A smaller minimum compresses the small file; compression off compresses nothing.
    let low = Serve::start(&[
        "--root",
        path_str(dir.path()),
        "--compress",
        "--compress-min-size",
        "20",
    ]);
    let r = get(&low.url("/small.html"), Some("gzip"), &[]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    // Above the maximum: sent as it is, without Vary.
    let capped = Serve::start(&[
        "--root",
        path_str(dir.path()),
        "--compress",
        "--compress-max-size",
        "4k",
    ]);
    let r = get(&capped.url("/index.html"), Some("gzip"), &[]);
    assert_eq!(r.header("content-encoding"), None);
    assert!(!r.varies());
    let off = Serve::start(&["--root", path_str(dir.path())]);
    let r = get(&off.url("/index.html"), Some("gzip"), &[]);
    assert_eq!(r.header("content-encoding"), None);
    assert!(!r.varies());
}

/// A Range is answered from the identity body; HEAD gets the encoded length; 304 and 412 use
/// the encoded representation's own tag.
#[test]
fn ranges_head_and_conditionals() {
    let dir = root();
    let server = Serve::start(&["--root", path_str(dir.path()), "--compress"]);
    let url = server.url("/index.html");
    let file = std::fs::read(dir.path().join("index.html")).unwrap();
    for proto in ["--http1.1", "--http2-prior-knowledge"] {
        let r = get(&url, Some("gzip"), &[proto, "-H", "Range: bytes=10-109"]);
        assert_eq!(r.status, 206, "{proto}");
        assert_eq!(r.header("content-encoding"), None);
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes 10-109/{}", file.len()).as_str())
        );
        assert_eq!(r.body, &file[10..110]);
        assert!(r.varies());

        let full = get(&url, Some("gzip"), &[proto]);
        let head = get(&url, Some("gzip"), &[proto, "-I"]);
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-encoding"), Some("gzip"));
        assert_eq!(
            head.header("content-length")
                .unwrap()
                .parse::<usize>()
                .unwrap(),
            full.body.len()
        );
        assert!(head.body.is_empty());
        assert_eq!(head.header("etag"), full.header("etag"));

        let etag = full.header("etag").unwrap();
        let inm = format!("If-None-Match: {etag}");
        let r = get(&url, Some("gzip"), &[proto, "-H", &inm]);
        assert_eq!(r.status, 304, "{proto}");
        assert_eq!(r.header("etag"), Some(etag));
        assert!(r.varies());
        // The gzip tag does not validate the zstd representation, nor identity.
        let r = get(&url, Some("zstd"), &[proto, "-H", &inm]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), Some("zstd"));
        let r = get(&url, None, &[proto, "-H", &inm]);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, file);
        let r = get(&url, Some("gzip"), &[proto, "-H", "If-Match: \"other\""]);
        assert_eq!(r.status, 412);
        assert!(r.varies());
    }
}

/// A file changed on disk is compressed anew; the cache of compressed files stays within its
/// bound while files are compressed past it.
#[test]
fn changed_file_is_recompressed_and_cache_is_bounded() {
    let dir = root();
    for i in 0..6 {
        std::fs::write(dir.path().join(format!("p{i}.html")), page(10 + i)).unwrap();
    }
    let server = Serve::start(&[
        "--root",
        path_str(dir.path()),
        "--compress",
        "--cache-valid",
        "10ms",
        "--compress-cache-bytes",
        "6k",
    ]);
    let url = server.url("/index.html");
    assert_eq!(get(&url, Some("gzip"), &[]).decoded(), page(1));
    std::thread::sleep(Duration::from_millis(50));
    std::fs::write(dir.path().join("index.html"), page(7)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..2 {
        let r = get(&url, Some("gzip"), &[]);
        assert_eq!(r.decoded(), page(7), "the new version, compressed");
    }
    for round in 0..2 {
        for i in 0..6 {
            let r = get(&server.url(&format!("/p{i}.html")), Some("br"), &[]);
            assert_eq!(r.decoded(), page(10 + i), "round {round}");
        }
    }
    let held = server.metric("lowlat_compress_cache_bytes");
    assert!(held > 0 && held <= 6 * 1024, "{held}");
}

/// A file too large for the file cache's memory (sent with sendfile as it is) is read whole to
/// be compressed, within the maximum.
#[test]
fn large_file_read_to_compress() {
    let dir = root();
    let big: Vec<u8> = (0..12).flat_map(page).collect();
    assert!(big.len() > 100 * 1024);
    std::fs::write(dir.path().join("big.html"), &big).unwrap();
    let server = Serve::start(&[
        "--root",
        path_str(dir.path()),
        "--compress",
        "--cache-file-max",
        "16k",
    ]);
    for proto in ["--http1.1", "--http2-prior-knowledge"] {
        for coding in ["zstd", "gzip"] {
            let r = get(&server.url("/big.html"), Some(coding), &[proto]);
            assert_eq!(r.header("content-encoding"), Some(coding), "{proto}");
            assert_eq!(r.decoded(), big, "{proto} {coding}");
        }
        let plain = get(&server.url("/big.html"), None, &[proto]);
        assert_eq!(plain.body, big);
        assert!(plain.varies());
    }
}

/// A precompressed sibling the client accepts is sent before any compression on the fly.
#[test]
fn precompressed_sibling_first() {
    let dir = root();
    let file = std::fs::read(dir.path().join("index.html")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &file).unwrap();
    let sibling = gz.finish().unwrap();
    std::fs::write(dir.path().join("index.html.gz"), &sibling).unwrap();
    let server = Serve::start(&["--root", path_str(dir.path()), "--compress"]);
    let r = get(&server.url("/index.html"), Some("zstd, br, gzip"), &[]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.body, sibling, "the sibling's own bytes");
    assert!(!r.header("etag").unwrap().ends_with("-gzip\""));
    // Not accepted: compressed here with what is.
    let r = get(&server.url("/index.html"), Some("br"), &[]);
    assert_eq!(r.header("content-encoding"), Some("br"));
    assert_eq!(r.decoded(), file);
}

/// Dynamic responses (the app's HTML and JSON, the embedded site) are compressed per response;
/// the app's own Vary is kept beside ours.
#[test]
fn dynamic_responses_are_compressed() {
    // The app's pages are about 250 bytes: a lower minimum takes them in.
    let server = Serve::start(&["--compress", "--compress-min-size", "100"]);
    for proto in ["--http1.1", "--http2-prior-knowledge"] {
        let stats = get(&server.url("/app/_stats"), Some("br"), &[proto]);
        assert_eq!(stats.header("content-encoding"), Some("br"), "{proto}");
        let json: serde_json::Value = serde_json::from_slice(&stats.decoded()).unwrap();
        assert!(json.is_object() || json.is_array());
        let plain = get(&server.url("/app/"), None, &[proto]);
        let r = get(&server.url("/app/"), Some("gzip"), &[proto]);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), Some("gzip"), "{proto}");
        assert!(r.varies() && plain.varies());
        assert!(r
            .all("vary")
            .iter()
            .any(|v| v.contains("Accept") && !v.contains("Encoding")));
        let html = String::from_utf8(r.decoded()).unwrap();
        assert!(html.contains("<html"), "{html}");
        assert_eq!(
            r.header("content-length")
                .unwrap()
                .parse::<usize>()
                .unwrap(),
            r.body.len()
        );
        let welcome = get(&server.url("/"), Some("zstd"), &[proto]);
        assert_eq!(welcome.header("content-encoding"), Some("zstd"));
        assert_eq!(
            welcome.decoded(),
            get(&server.url("/"), None, &[proto]).body
        );
    }
    // Tiny dynamic bodies are not.
    let r = get(&server.url("/plaintext"), Some("gzip"), &[]);
    assert_eq!(r.header("content-encoding"), None);
    assert!(!r.varies());
}

/// Compression is a site's setting; bad values are refused with their line.
#[test]
fn per_site_and_checked() {
    let dir = root();
    let conf = dir.path().join("lowlat.toml");
    let root = path_str(dir.path());
    std::fs::write(
        &conf,
        format!(
            "workers = 1\nroot = \"{root}\"\ncompress = true\n\n[[site]]\nserver_names = [\"a.test\"]\n\n[[site]]\nserver_names = [\"b.test\"]\ncompress = false\n"
        ),
    )
    .unwrap();
    let server = Serve::start(&["--config", path_str(&conf)]);
    let a = get(
        &server.url("/index.html"),
        Some("gzip"),
        &["-H", "Host: a.test"],
    );
    assert_eq!(a.header("content-encoding"), Some("gzip"));
    let b = get(
        &server.url("/index.html"),
        Some("gzip"),
        &["-H", "Host: b.test"],
    );
    assert_eq!(b.header("content-encoding"), None);

    std::fs::write(
        &conf,
        "compress = true\ncompress_encodings = [\"deflate\"]\ncompress_gzip_level = 12\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config", path_str(&conf), "--check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":2: compress_encodings"), "{err}");
    assert!(err.contains(":3: compress_gzip_level"), "{err}");
}
