//! The dynamic app end to end over real sockets, built from `lowlat serve` flags exactly as the
//! binary builds it: routes, negotiation, bodies parsed as a browser and a JSON client would,
//! escaping of hostile words, the embedded word list when the system has none, and counters
//! that stay exact under concurrent clients on every worker.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use clap::Parser;
use lowlat_server::settings::ServeArgs;
use scraper::{Html, Selector};
use serde_json::Value;
use support::{Reader, Reply, TestServer};

/// `lowlat serve`'s flags, parsed as the binary parses them.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn parse(args: &[&str]) -> Cli {
    let base = ["serve", "--workers", "2", "--listen", "127.0.0.1:0"];
    Cli::try_parse_from(base.iter().chain(args)).expect("valid flags")
}

/// Starts `lowlat serve` with two workers on an ephemeral port and `args`.
fn start(args: &[&str]) -> TestServer {
    let cli = parse(args);
    let service = lowlat_server::settings::service(&cli.serve).expect("service");
    let cfg = cli.serve.to_config().expect("config");
    TestServer::start(cfg, service)
}

/// A word list file holding `words`, one a line.
fn word_file(words: &[&str]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    for w in words {
        writeln!(file, "{w}").unwrap();
    }
    file
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("temporary paths are UTF-8")
}

/// One request with optional `Accept`, on its own connection.
fn request(server: &TestServer, method: &str, path: &str, accept: Option<&str>) -> Reply {
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let raw = format!("{method} {path} HTTP/1.1\r\nHost: t\r\n{accept}\r\n");
    let mut r = Reader::new(server.connect());
    r.send(raw.as_bytes());
    r.reply_to(method).expect("a reply")
}

fn json(reply: &Reply) -> Value {
    serde_json::from_slice(&reply.body).expect("valid JSON")
}

fn stats(server: &TestServer) -> Value {
    let reply = request(server, "GET", "/app/_stats", None);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    json(&reply)
}

/// The page's word, count and worker, read from the parsed document as a browser sees them.
fn html_fields(reply: &Reply) -> (String, u64, u64, String) {
    let text = std::str::from_utf8(&reply.body).expect("UTF-8 page");
    let doc = Html::parse_document(text);
    assert!(doc.errors.is_empty(), "HTML parse errors {:?}", doc.errors);
    let pick = |css: &str| {
        let selector = Selector::parse(css).unwrap();
        let mut found = doc.select(&selector);
        let text: String = found.next().expect(css).text().collect();
        assert!(found.next().is_none(), "one {css}");
        text
    };
    (
        pick("#word"),
        pick("#count").parse().expect("numeric count"),
        pick("#worker").parse().expect("numeric worker"),
        pick("title"),
    )
}

/// HTML by default and JSON on request, both naming the word, its count after this call and
/// the worker; counts go up by one per call whatever the representation.
#[test]
fn html_and_json_bodies() {
    let words = word_file(&["apple", "apricot", "banana"]);
    let server = start(&["--words", path_str(words.path())]);

    let page = request(&server, "GET", "/app/apple", None);
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.header("vary"), Some("Accept"));
    let (word, count, worker, title) = html_fields(&page);
    assert_eq!((word.as_str(), count), ("apple", 1));
    assert!(worker < 2);
    assert!(title.starts_with("apple"), "{title}");

    let reply = request(&server, "GET", "/app/apple", Some("application/json"));
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.header("vary"), Some("Accept"));
    let body = json(&reply);
    assert_eq!(body["word"], "apple");
    assert_eq!(body["count"], 2);
    assert!(body["worker"].as_u64().is_some_and(|w| w < 2));
    assert_eq!(body.as_object().map(serde_json::Map::len), Some(3));

    // A browser's Accept gets HTML; a q-value preference for JSON gets JSON.
    let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    let (_, count, _, _) = html_fields(&request(&server, "GET", "/app/apple", Some(browser)));
    assert_eq!(count, 3);
    let prefers_json = "text/html;q=0.5, APPLICATION/JSON;q=0.9";
    let reply = request(&server, "GET", "/app/apple", Some(prefers_json));
    assert_eq!(json(&reply)["count"], 4);

    // Neither named: HTML, the default (the header is disregarded, not refused).
    let reply = request(&server, "GET", "/app/apple", Some("image/png"));
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("vary"), Some("Accept"));
    let (_, count, _, _) = html_fields(&reply);
    assert_eq!(count, 5);
    // A parameter on application/json does not stop it matching.
    let reply = request(
        &server,
        "GET",
        "/app/apple",
        Some("application/json;indent=2"),
    );
    assert_eq!(json(&reply)["count"], 6);
    let s = stats(&server);
    assert_eq!(s["counters"]["apple"], 6);
    assert_eq!(s["total"], 6);
    assert_eq!(s["words"], 3);

    // HEAD: the same head, no body; it is a call.
    let head = request(&server, "HEAD", "/app/apple", None);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert!(head
        .header("content-length")
        .is_some_and(|l| l.parse::<usize>().is_ok_and(|n| n > 100)));
    assert_eq!(stats(&server)["counters"]["apple"], 7);
}

/// Prefix routing: the first word in byte order with that prefix; 404 when none; the random
/// route reaches every word; `_stats`, redirects, methods.
#[test]
fn prefix_and_random_routing() {
    let words = word_file(&["apple", "apricot", "banana", "bandana", "cherry"]);
    let server = start(&["--words", path_str(words.path()), "--seed", "5"]);
    let word_of = |path: &str| {
        let reply = request(&server, "GET", path, Some("application/json"));
        assert_eq!(reply.status, 200, "{path}");
        json(&reply)["word"].as_str().unwrap_or_default().to_owned()
    };
    for (path, word) in [
        ("/app/a", "apple"),
        ("/app/ap", "apple"),
        ("/app/apr", "apricot"),
        ("/app/b", "banana"),
        ("/app/band", "bandana"),
        ("/app/cherry", "cherry"),
        ("/app/%63herry", "cherry"),
        ("/app/apple?x=1", "apple"),
    ] {
        assert_eq!(word_of(path), word, "{path}");
    }
    for (method, path, status) in [
        ("GET", "/app/cherries", 404),
        ("GET", "/app/zebra", 404),
        ("GET", "/app/A", 404),
        ("GET", "/app/%zz", 400),
        ("GET", "/app/a/b", 404),
        ("GET", "/app", 308),
        ("GET", "/app/apple/", 308),
        ("POST", "/app/", 405),
        ("DELETE", "/app/apple", 405),
        ("POST", "/app/_stats", 405),
    ] {
        assert_eq!(
            request(&server, method, path, None).status,
            status,
            "{method} {path}"
        );
    }
    assert_eq!(
        request(&server, "GET", "/app", None).header("location"),
        Some("/app/")
    );

    // 500 random requests over one keep-alive connection: every word is reached.
    let before = stats(&server)["total"].as_u64().unwrap_or(0);
    let mut r = Reader::new(server.connect());
    let batch = "GET /app/ HTTP/1.1\r\nHost: t\r\nAccept: application/json\r\n\r\n".repeat(100);
    let mut seen = BTreeSet::new();
    for _ in 0..5 {
        r.send(batch.as_bytes());
        for _ in 0..100 {
            let reply = r.reply().expect("reply");
            assert_eq!(reply.status, 200);
            seen.insert(json(&reply)["word"].as_str().unwrap_or_default().to_owned());
        }
    }
    let all: BTreeSet<String> = ["apple", "apricot", "banana", "bandana", "cherry"]
        .map(String::from)
        .into();
    assert_eq!(seen, all);
    let s = stats(&server);
    assert_eq!(s["total"].as_u64(), Some(before + 500));
    assert_eq!(s["seed"], 5);
    assert_eq!(s["source"], path_str(words.path()));
}

/// Words that are not safe as a URL path segment are dropped; the rest are served, and escaped
/// where HTML needs it (`&`, `'`), with non-ASCII intact in HTML and JSON.
#[test]
fn hostile_and_non_ascii_words() {
    let words = word_file(&[
        "AT&T",
        "rock'n'roll",
        "café",
        "日本語",
        "Zürich",
        "a<b",
        "<script>alert(1)</script>",
        "\"quoted\"",
        "x>y",
        "with space",
        "slash/word",
        "100%",
        "_hidden",
    ]);
    let server = start(&["--words", path_str(words.path())]);
    let s = stats(&server);
    let kept: Vec<&str> = s["counters"]
        .as_object()
        .expect("counters object")
        .keys()
        .map(String::as_str)
        .collect();
    // serde_json's map is sorted by key, as the app's byte order is.
    assert_eq!(kept, ["AT&T", "Zürich", "café", "rock'n'roll", "日本語"]);

    for (path, word, raw) in [
        ("/app/AT&T", "AT&T", "AT&amp;T"),
        ("/app/rock'n'roll", "rock'n'roll", "rock&#039;n&#039;roll"),
        ("/app/caf%C3%A9", "café", "café"),
        ("/app/%E6%97%A5", "日本語", "日本語"),
        ("/app/Z%C3%BC", "Zürich", "Zürich"),
    ] {
        let page = request(&server, "GET", path, None);
        assert_eq!(page.status, 200, "{path}");
        let text = String::from_utf8(page.body.clone()).expect("UTF-8");
        assert!(
            text.contains(&format!("<h1 id=\"word\">{raw}</h1>")),
            "{text}"
        );
        assert_eq!(html_fields(&page).0, word);
        let body = json(&request(&server, "GET", path, Some("application/json")));
        assert_eq!(body["word"], word);
    }
    // Nothing reaches a dropped word, encoded or not.
    for path in [
        "/app/a%3Cb",
        "/app/%3Cscript%3E",
        "/app/%22quoted",
        "/app/_hidden",
    ] {
        assert_eq!(request(&server, "GET", path, None).status, 404, "{path}");
    }
}

/// Without a system dictionary the embedded list is used: N distinct words from it, the same
/// ones for the same seed; a present dictionary is used instead.
#[test]
fn embedded_list_when_no_dictionary() {
    let embedded: BTreeSet<&str> = include_str!("../src/app/words.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect();
    assert!(embedded.len() >= 5000);
    let missing = tempfile::tempdir().unwrap();
    let dict = missing.path().join("words");
    let chosen = |seed: &str| -> BTreeMap<String, Value> {
        let server = start(&["--system-words", path_str(&dict), "--seed", seed]);
        let s = stats(&server);
        assert_eq!(s["source"], "embedded");
        assert_eq!(s["words"], 1000);
        s["counters"]
            .as_object()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .collect()
    };
    let a = chosen("11");
    assert_eq!(a.len(), 1000);
    assert!(a.keys().all(|w| embedded.contains(w.as_str())));
    assert_eq!(a, chosen("11"), "same seed, same words");
    assert_ne!(a, chosen("12"), "another seed, other words");

    // When the dictionary exists it is the source, and fewer words than asked is fine.
    std::fs::write(&dict, "one\ntwo\nthree\n").unwrap();
    let server = start(&["--system-words", path_str(&dict)]);
    let s = stats(&server);
    assert_eq!(s["source"], path_str(&dict));
    assert_eq!(s["words"], 3);
}

/// 8 clients × 5,000 pipelined keep-alive requests on 4 words (two clients per word) across both
/// workers: every client sees its word's count strictly increase, and the counts each word
/// handed out are exactly 1..=10,000, none lost, none repeated.
#[test]
fn counters_exact_under_concurrency() {
    const CLIENTS: usize = 8;
    const PER_CLIENT: usize = 5000;
    const BATCH: usize = 100;
    let words = word_file(&["alpha", "bravo", "charlie", "delta", "echo"]);
    let server = start(&["--words", path_str(words.path())]);
    let targets = ["alpha", "bravo", "charlie", "delta"];

    let results: Vec<(usize, Vec<u64>, BTreeSet<u64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let server = &server;
                scope.spawn(move || {
                    let word = targets[client % targets.len()];
                    let one = format!(
                        "GET /app/{word} HTTP/1.1\r\nHost: t\r\nAccept: application/json\r\n\r\n"
                    );
                    let batch = one.repeat(BATCH);
                    let mut r = Reader::new(server.connect());
                    let mut counts = Vec::with_capacity(PER_CLIENT);
                    let mut workers = BTreeSet::new();
                    for _ in 0..PER_CLIENT / BATCH {
                        r.send(batch.as_bytes());
                        for _ in 0..BATCH {
                            let reply = r.reply().expect("reply");
                            assert_eq!(reply.status, 200);
                            let body = json(&reply);
                            assert_eq!(body["word"], word);
                            counts.push(body["count"].as_u64().expect("count"));
                            workers.insert(body["worker"].as_u64().expect("worker"));
                        }
                    }
                    assert_eq!(workers.len(), 1, "one connection, one worker");
                    (client, counts, workers)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });

    let mut per_word: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut workers: BTreeSet<u64> = BTreeSet::new();
    for (client, counts, w) in &results {
        assert!(
            counts.windows(2).all(|p| p[0] < p[1]),
            "client {client}: counts went backwards"
        );
        per_word
            .entry(targets[client % targets.len()])
            .or_default()
            .extend(counts);
        workers.extend(w);
    }
    let expected: Vec<u64> = (1..=(2 * PER_CLIENT) as u64).collect();
    for (word, mut counts) in per_word {
        counts.sort_unstable();
        assert_eq!(
            counts, expected,
            "{word}: every count handed out exactly once"
        );
    }
    let s = stats(&server);
    assert_eq!(s["total"].as_u64(), Some((CLIENTS * PER_CLIENT) as u64));
    assert_eq!(s["counters"]["echo"], 0);
    // Connections spread over the workers by SO_REUSEPORT's hash; with 8 of them both workers
    // serve unless the hash is unlucky (about 1 in 128), so this is reported, not asserted.
    if workers.len() < 2 {
        eprintln!("note: every connection landed on one worker this run");
    }
}

/// `--no-app` removes the routes; `--app-prefix` moves them.
#[test]
fn mount_point_flags() {
    let server = start(&["--no-app"]);
    assert_eq!(request(&server, "GET", "/app/", None).status, 404);
    assert_eq!(request(&server, "GET", "/plaintext", None).status, 200);
    drop(server);

    let words = word_file(&["apple"]);
    let server = start(&[
        "--words",
        path_str(words.path()),
        "--app-prefix",
        "/dyn/app/",
    ]);
    assert_eq!(request(&server, "GET", "/app/", None).status, 404);
    let reply = request(&server, "GET", "/dyn/app/", Some("application/json"));
    assert_eq!(json(&reply)["word"], "apple");
    assert_eq!(request(&server, "GET", "/dyn/app/_stats", None).status, 200);
}

/// Unusable flags fail at start with a one-line reason.
#[test]
fn bad_flags_are_one_line_errors() {
    let empty = word_file(&["<nope>", "a b", ""]);
    let missing = tempfile::tempdir().unwrap();
    let missing_file = missing.path().join("none");
    for (args, wanted) in [
        (
            vec!["--words", path_str(&missing_file)],
            "cannot read --words",
        ),
        (vec!["--words", path_str(empty.path())], "no usable word"),
        (vec!["--app-prefix", "app"], "--app-prefix"),
        (vec!["--app-prefix", "/a//b"], "--app-prefix"),
    ] {
        let cli = parse(&args);
        match lowlat_server::settings::service(&cli.serve) {
            Ok(_) => panic!("{args:?} accepted"),
            Err(e) => {
                assert!(e.contains(wanted), "{args:?}: {e}");
                assert!(!e.contains('\n'), "{args:?}: {e}");
            }
        }
    }
    for args in [
        vec!["--app-words", "0"],
        vec!["--no-app", "--seed", "1"],
        vec!["--seed", "-1"],
    ] {
        let base = ["serve", "--listen", "127.0.0.1:0"];
        assert!(
            Cli::try_parse_from(base.iter().chain(&args)).is_err(),
            "{args:?}"
        );
    }
}
