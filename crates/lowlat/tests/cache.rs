//! `lowlat serve --proxy … --cache` as a real process in front of an origin written for these
//! tests (`support::origin`), which counts the requests it gets per path and answers each path
//! with the head and body a test gave it. Every test asserts what the client got (status, `Age`, `Cache-Status`, body) and
//! exactly how many requests reached the origin: a hit is one that did not.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

mod support;
use support::origin::{get, request, request_to, Framing, Got, Origin};
use support::{curl, metric, Served};

fn proxy(origin: &Origin, more: &[&str]) -> Served {
    let rule = format!("/={}", origin.url());
    let mut args = vec!["--proxy", &rule, "--cache"];
    args.extend_from_slice(more);
    Served::start(args)
}

/// Waits until the response stored for `path` is stale by `by` seconds or more, as a request
/// asking for it with `max-stale` is told (`Cache-Status`'s `ttl` at `-by` or below): such a
/// request is answered from the store, fresh or stale, without reaching the origin or
/// refreshing anything. Ages count in whole seconds, so a `max-age=1` response is stale within
/// a second of being stored (`by` 0) and stale by a second within two; a fixed sleep would
/// always wait the longest. The next request to the same worker finds it at least as old (one
/// worker: the clock is that worker's).
fn await_stale(addr: SocketAddr, path: &str, by: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = request(addr, "GET", path, &["Cache-Control: max-stale"]);
        assert!(
            got.cache_status().contains("hit"),
            "{path} with max-stale: {}",
            got.head
        );
        if got.ttl().is_some_and(|ttl| ttl <= -by) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path} still fresh: {}",
            got.head
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A fresh response is fetched once and then served from memory: `Age` and `Cache-Status`
/// say so, the body is the same bytes, and a `HEAD` is answered from the stored `GET`.
#[test]
fn miss_then_hits_with_age_and_cache_status() {
    let origin = Origin::start();
    origin.set(
        "/a",
        200,
        "Cache-Control: max-age=60\nContent-Type: text/plain\nX-Origin: yes",
        b"hello, cache\n",
    );
    let p = proxy(&origin, &[]);
    let first = get(p.addr, "/a");
    assert_eq!(first.status, 200);
    assert_eq!(first.body, b"hello, cache\n");
    assert!(
        first.cache_status().contains("fwd=uri-miss"),
        "{}",
        first.head
    );
    assert!(first.cache_status().contains("stored"), "{}", first.head);
    for _ in 0..3 {
        let hit = get(p.addr, "/a");
        assert_eq!(hit.status, 200, "{}", hit.head);
        assert_eq!(hit.body, b"hello, cache\n");
        assert!(
            hit.cache_status().starts_with("lowlat; hit"),
            "{}",
            hit.head
        );
        assert!(
            hit.field("age").is_some_and(|a| a.parse::<u64>().is_ok()),
            "{}",
            hit.head
        );
        assert_eq!(hit.field("x-origin"), Some("yes"));
        assert_eq!(hit.field("content-type"), Some("text/plain"));
        assert_eq!(hit.field("content-length"), Some("13"));
    }
    let head = request(p.addr, "HEAD", "/a", &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.field("content-length"), Some("13"));
    assert!(head.cache_status().contains("hit"), "{}", head.head);
    assert_eq!(origin.count("GET /a"), 1);
    assert_eq!(origin.count("HEAD /a"), 0);
    // The query is part of the key.
    assert_eq!(get(p.addr, "/a?x=1").body, b"hello, cache\n");
    assert_eq!(get(p.addr, "/a?x=1").body, b"hello, cache\n");
    assert_eq!(origin.count("GET /a"), 2);
}

/// An origin's own `Cache-Status` (from a cache nearer the origin) is kept, and ours follows
/// it as the list's last member (RFC 9211 §2): on the miss that stores the response as on its
/// hits.
#[test]
fn cache_status_members_from_nearer_the_origin_are_kept() {
    let origin = Origin::start();
    origin.set(
        "/cs",
        200,
        "Cache-Control: max-age=60\nCache-Status: origin-cdn; hit",
        b"x",
    );
    let p = proxy(&origin, &[]);
    for ours in ["lowlat; fwd=uri-miss", "lowlat; hit"] {
        let got = get(p.addr, "/cs");
        let members: Vec<&str> = got
            .head
            .lines()
            .filter_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("cache-status")
                    .then_some(value.trim())
            })
            .collect();
        assert_eq!(members.len(), 2, "{}", got.head);
        assert_eq!(members[0], "origin-cdn; hit", "{}", got.head);
        assert!(members[1].starts_with(ours), "{}", got.head);
    }
    assert_eq!(origin.count("GET /cs"), 1);
}

/// A body that reaches the proxy after its head (on a later read), or that ends when the origin
/// closes the connection (complete, RFC 9111 §3.3), is stored like one read at once; the
/// hop-by-hop `Transfer-Encoding` of the latter is not kept (§3.1).
#[test]
fn bodies_read_over_several_events_are_stored() {
    let origin = Origin::start();
    origin.set_framed(
        "/late",
        200,
        "Cache-Control: max-age=60",
        b"late body",
        Framing::Late,
    );
    origin.set_framed(
        "/close",
        200,
        "Cache-Control: max-age=60\nTransfer-Encoding: x-unknown",
        b"until close",
        Framing::Close,
    );
    let p = proxy(&origin, &[]);
    for (path, body) in [("/late", &b"late body"[..]), ("/close", b"until close")] {
        let first = get(p.addr, path);
        assert_eq!(first.status, 200, "{path}: {}", first.head);
        assert!(first.cache_status().contains("stored"), "{}", first.head);
        let hit = get(p.addr, path);
        assert!(hit.cache_status().contains("hit"), "{path}: {}", hit.head);
        assert_eq!(hit.body, body, "{path}");
        assert_eq!(hit.field("transfer-encoding"), None, "{}", hit.head);
        assert_eq!(origin.count(&format!("GET {path}")), 1, "{path}");
    }
}

/// An upstream's valid `Age` counts in the stored response's age; one that is not a single
/// delta-seconds (a list, two lines, a sign, a fraction) leaves the age unknown, so the
/// response is stored stale and revalidated before any reuse (with its validators, when it
/// has them).
#[test]
fn an_invalid_age_makes_the_response_stale() {
    let origin = Origin::start();
    origin.set("/aged", 200, "Cache-Control: max-age=60\nAge: 30", b"aged");
    let p = proxy(&origin, &[]);
    get(p.addr, "/aged");
    let hit = get(p.addr, "/aged");
    assert!(hit.cache_status().contains("hit"), "{}", hit.head);
    let age: u64 = hit.field("age").unwrap().parse().unwrap();
    assert!((30..40).contains(&age), "{}", hit.head);
    for (i, age) in ["0, 0", "0\nAge: 0", "-1", "1.0", "0;a=b", "abc"]
        .iter()
        .enumerate()
    {
        let path = format!("/bad{i}");
        origin.set(
            &path,
            200,
            &format!("Cache-Control: max-age=3600\nETag: \"b{i}\"\nAge: {age}"),
            b"unknown age",
        );
        let first = get(p.addr, &path);
        assert!(first.cache_status().contains("stored"), "{}", first.head);
        let again = get(p.addr, &path);
        assert!(
            again.cache_status().contains("fwd=stale"),
            "Age: {age}: {}",
            again.head
        );
        assert_eq!(origin.count(&format!("GET {path}")), 2, "Age: {age}");
        let sent = origin.last(&path);
        assert!(
            sent.contains(&format!("If-None-Match: \"b{i}\"\r\n")),
            "{sent}"
        );
    }
}

/// What must not be stored is fetched every time: `no-store`, `private`, `Set-Cookie`, a
/// request with `Authorization` (without `public`), a status without freshness, `Vary: *`.
#[test]
fn what_is_not_stored_goes_to_the_origin_every_time() {
    let origin = Origin::start();
    let cases = [
        (
            "/no-store",
            200,
            "Cache-Control: max-age=60, no-store",
            "no-store",
        ),
        (
            "/private",
            200,
            "Cache-Control: max-age=60, private",
            "private",
        ),
        (
            "/cookie",
            200,
            "Cache-Control: max-age=60\nSet-Cookie: id=1",
            "set-cookie",
        ),
        (
            "/vary-star",
            200,
            "Cache-Control: max-age=60\nVary: *",
            "vary-star",
        ),
        ("/found", 302, "Location: /elsewhere", "no-freshness"),
    ];
    for (path, status, lines, _) in cases {
        origin.set(path, status, lines, b"x");
    }
    let p = proxy(&origin, &[]);
    for (path, status, _, detail) in cases {
        for _ in 0..2 {
            let got = get(p.addr, path);
            assert_eq!(got.status, status, "{path}");
            assert!(
                got.cache_status().contains(&format!("detail={detail}")),
                "{path}: {}",
                got.head
            );
        }
        assert_eq!(origin.count(&format!("GET {path}")), 2, "{path}");
    }
    origin.set("/auth", 200, "Cache-Control: max-age=60", b"secret");
    for _ in 0..2 {
        request(p.addr, "GET", "/auth", &["Authorization: Basic YTpi"]);
    }
    assert_eq!(origin.count("GET /auth"), 2);
    // With `public`, a response to an authorised request may be shared (RFC 9111 §3.5).
    origin.set(
        "/auth-public",
        200,
        "Cache-Control: max-age=60, public",
        b"shared",
    );
    for _ in 0..2 {
        request(
            p.addr,
            "GET",
            "/auth-public",
            &["Authorization: Basic YTpi"],
        );
    }
    assert_eq!(origin.count("GET /auth-public"), 1);
}

/// `Vary: Accept-Encoding` keeps one variant per set of accepted codings, however the
/// request writes it.
#[test]
fn vary_keeps_variants_apart() {
    let origin = Origin::start();
    origin.set(
        "/v",
        200,
        "Cache-Control: max-age=60\nVary: Accept-Encoding",
        b"variant",
    );
    let p = proxy(&origin, &[]);
    let ask = |ae: &str| request(p.addr, "GET", "/v", &[&format!("Accept-Encoding: {ae}")]);
    assert!(ask("gzip").cache_status().contains("fwd=uri-miss"));
    assert!(ask("gzip").cache_status().contains("hit"));
    assert!(ask("br").cache_status().contains("fwd=vary-miss"));
    assert!(ask("br").cache_status().contains("hit"));
    assert!(ask("gzip, br").cache_status().contains("fwd=vary-miss"));
    assert!(ask("BR;q=1, gzip").cache_status().contains("hit"));
    assert!(ask("gzip").cache_status().contains("hit"));
    assert_eq!(origin.count("GET /v"), 3);
}

/// A successful unsafe request invalidates the stored response of its target and of its
/// `Location` on the same host (RFC 9111 §4.4); a failed one does not.
#[test]
fn unsafe_methods_invalidate() {
    let origin = Origin::start();
    origin.set("/item", 200, "Cache-Control: max-age=60", b"item");
    origin.set("/list", 200, "Cache-Control: max-age=60", b"list");
    let p = proxy(&origin, &[]);
    get(p.addr, "/item");
    get(p.addr, "/list");
    assert!(get(p.addr, "/item").cache_status().contains("hit"));
    // The origin answers POST /item with the 200 set for the path, and Location: /list.
    origin.set(
        "/item",
        200,
        "Cache-Control: max-age=60\nLocation: http://cache.test/list",
        b"item",
    );
    assert_eq!(request(p.addr, "POST", "/item", &[]).status, 200);
    assert!(get(p.addr, "/item").cache_status().contains("fwd=uri-miss"));
    assert!(get(p.addr, "/list").cache_status().contains("fwd=uri-miss"));
    assert_eq!(origin.count("GET /item"), 2);
    assert_eq!(origin.count("GET /list"), 2);
    // An error answer invalidates nothing.
    origin.set("/fails", 200, "Cache-Control: max-age=60", b"ok");
    get(p.addr, "/fails");
    origin.set("/fails", 500, "", b"no");
    request(p.addr, "DELETE", "/fails", &[]);
    assert!(get(p.addr, "/fails").cache_status().contains("hit"));
}

/// Fields that change what an application answers without being in the key make the request
/// bypass the cache: the poisoned answer is neither stored nor served to anyone else.
#[test]
fn unkeyed_fields_cannot_poison() {
    let origin = Origin::start();
    origin.set("/p", 200, "Cache-Control: max-age=60", b"clean");
    let p = proxy(&origin, &[]);
    for poison in [
        "X-Original-URL: /admin",
        "X-Rewrite-URL: /admin",
        "X-Host: evil.test",
    ] {
        let got = request(p.addr, "GET", "/p", &[poison]);
        assert_eq!(got.status, 200);
        assert!(
            got.field("cache-status").is_none(),
            "{poison}: {}",
            got.head
        );
    }
    assert_eq!(origin.count("GET /p"), 3);
    assert!(get(p.addr, "/p").cache_status().contains("fwd=uri-miss"));
    assert!(get(p.addr, "/p").cache_status().contains("hit"));
    // X-Forwarded-Host from an untrusted client is not forwarded at all.
    request(p.addr, "GET", "/p", &["X-Forwarded-Host: evil.test"]);
    assert!(!origin.last("/p").to_ascii_lowercase().contains("evil.test"));
}

/// A stale response is fetched again; request directives are honoured: `no-cache` goes to
/// the origin, `only-if-cached` with nothing stored is 504.
#[test]
fn stale_and_request_directives() {
    let origin = Origin::start();
    origin.set("/s", 200, "Cache-Control: max-age=1", b"short");
    origin.set("/f", 200, "Cache-Control: max-age=60", b"long");
    let p = proxy(&origin, &[]);
    get(p.addr, "/s");
    assert!(get(p.addr, "/s").cache_status().contains("hit"));
    await_stale(p.addr, "/s", 0);
    assert!(get(p.addr, "/s").cache_status().contains("fwd=stale"));
    assert_eq!(origin.count("GET /s"), 2);
    get(p.addr, "/f");
    let forced = request(p.addr, "GET", "/f", &["Cache-Control: no-cache"]);
    assert!(
        forced.cache_status().contains("fwd=request"),
        "{}",
        forced.head
    );
    assert_eq!(origin.count("GET /f"), 2);
    let only = request(
        p.addr,
        "GET",
        "/nothing",
        &["Cache-Control: only-if-cached"],
    );
    assert_eq!(only.status, 504);
    assert_eq!(origin.count("GET /nothing"), 0);
}

/// HTTP/2 clients are served from the same store: a miss over HTTP/1.1 is a hit over h2c.
#[test]
fn http2_clients_hit_the_same_store() {
    let origin = Origin::start();
    origin.set("/h2", 200, "Cache-Control: max-age=60", b"over h2\n");
    let p = proxy(&origin, &["--h2c"]);
    get(p.addr, "/h2");
    let url = format!("http://{}/h2", p.addr);
    let out = curl(&[
        "--http2-prior-knowledge",
        "-i",
        "-H",
        "Host: cache.test",
        &url,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/2 200"), "{text}");
    assert!(text.contains("cache-status: lowlat; hit"), "{text}");
    assert!(text.ends_with("over h2\n"), "{text}");
    assert_eq!(origin.count("GET /h2"), 1);
}

/// A response larger than `--cache-max-object` streams through whole and is not stored.
#[test]
fn large_objects_stream_through_unstored() {
    let origin = Origin::start();
    let big = vec![b'z'; 3 << 20];
    origin.set("/big", 200, "Cache-Control: max-age=60", &big);
    origin.set("/small", 200, "Cache-Control: max-age=60", b"small");
    let p = proxy(&origin, &["--cache-max-object", "1m"]);
    for _ in 0..2 {
        let got = get(p.addr, "/big");
        assert_eq!(got.body.len(), big.len());
        assert!(got.body == big);
    }
    assert_eq!(origin.count("GET /big"), 2);
    get(p.addr, "/small");
    assert!(get(p.addr, "/small").cache_status().contains("hit"));
}

/// Without `--cache`, nothing is cached and no `Cache-Status` is added.
#[test]
fn without_the_flag_nothing_is_cached() {
    let origin = Origin::start();
    origin.set("/n", 200, "Cache-Control: max-age=60", b"n");
    let rule = format!("/={}", origin.url());
    let p = Served::start(["--proxy", rule.as_str()]);
    for _ in 0..2 {
        assert!(get(p.addr, "/n").field("cache-status").is_none());
    }
    assert_eq!(origin.count("GET /n"), 2);
}

/// `PURGE` removes by URL, by prefix and by tag, from loopback; what it removed is fetched
/// again, what it did not is still a hit.
#[test]
fn purge_by_url_prefix_and_tag() {
    let origin = Origin::start();
    for (path, tag) in [
        ("/a/1", "red"),
        ("/a/2", "blue"),
        ("/b/1", "red"),
        ("/b/2", "green"),
    ] {
        origin.set(
            path,
            200,
            &format!("Cache-Control: max-age=60\nCache-Tag: {tag}, all"),
            b"x",
        );
    }
    let p = proxy(&origin, &[]);
    let warm = || {
        for path in ["/a/1", "/a/2", "/b/1", "/b/2"] {
            get(p.addr, path);
        }
    };
    let hit = |path: &str| get(p.addr, path).cache_status().contains("hit");
    warm();
    let by_url = request(p.addr, "PURGE", "/b/2", &[]);
    assert_eq!(by_url.status, 200);
    assert_eq!(by_url.body, b"{\"purged\": 1}\n");
    assert!(!hit("/b/2"));
    assert!(hit("/a/1") && hit("/a/2") && hit("/b/1"));
    let by_prefix = request(p.addr, "PURGE", "/a/*", &[]);
    assert_eq!(by_prefix.body, b"{\"purged\": 2}\n");
    assert!(!hit("/a/1") && !hit("/a/2"));
    assert!(hit("/b/1"));
    let by_tag = request(p.addr, "PURGE", "/", &["Cache-Tag: red"]);
    assert_eq!(by_tag.body, b"{\"purged\": 2}\n");
    assert!(!hit("/b/1") && !hit("/a/1"));
    assert!(hit("/a/2"));
    assert_eq!(origin.count("GET /a/1"), 3);
    assert_eq!(origin.count("GET /a/2"), 2);
    assert_eq!(origin.count("GET /b/1"), 2);
    assert_eq!(origin.count("PURGE /b/2"), 0);
}

/// `PURGE` from a network not trusted is refused.
#[test]
fn purge_from_elsewhere_is_refused() {
    let origin = Origin::start();
    origin.set("/k", 200, "Cache-Control: max-age=60", b"kept");
    let p = proxy(&origin, &["--cache-purge-from", "10.9.9.0/24"]);
    get(p.addr, "/k");
    assert_eq!(request(p.addr, "PURGE", "/k", &[]).status, 403);
    assert!(get(p.addr, "/k").cache_status().contains("hit"));
}

/// A stale response with validators is revalidated: the origin gets `If-None-Match` and
/// `If-Modified-Since`, its 304 refreshes the stored head (new fields, new lifetime) and the
/// client gets the whole stored response.
#[test]
fn revalidation_with_304_refreshes_the_stored_response() {
    let origin = Origin::start();
    let lm = "Sun, 06 Nov 1994 08:49:37 GMT";
    origin.set(
        "/r",
        200,
        &format!(
            "Cache-Control: max-age=1\nETag: \"v1\"\nLast-Modified: {lm}\nX-Gen: 1\n\
             Content-MD5: AAAA"
        ),
        b"revalidated body",
    );
    let p = proxy(&origin, &[]);
    get(p.addr, "/r");
    await_stale(p.addr, "/r", 0);
    origin.set(
        "/r",
        304,
        "Cache-Control: max-age=60\nETag: \"v1\"\nX-Gen: 2\nContent-MD5: BBBB",
        b"",
    );
    let got = get(p.addr, "/r");
    assert_eq!(got.status, 200, "{}", got.head);
    assert_eq!(got.body, b"revalidated body");
    assert!(
        got.cache_status().contains("fwd=stale; fwd-status=304"),
        "{}",
        got.head
    );
    assert_eq!(got.field("x-gen"), Some("2"));
    // The checksum is the stored body's, which the 304 does not replace.
    assert_eq!(got.field("content-md5"), Some("AAAA"));
    let sent = origin.last("/r");
    assert!(sent.contains("If-None-Match: \"v1\"\r\n"), "{sent}");
    assert!(
        sent.contains(&format!("If-Modified-Since: {lm}\r\n")),
        "{sent}"
    );
    // Fresh again for a minute: a hit, with the refreshed field.
    let hit = get(p.addr, "/r");
    assert!(hit.cache_status().contains("hit"), "{}", hit.head);
    assert_eq!(hit.field("x-gen"), Some("2"));
    assert_eq!(hit.body, b"revalidated body");
    assert_eq!(origin.count("GET /r"), 2);
}

/// A 304 whose entity-tag is not the stored response's updates nothing (RFC 9111 §4.3.4); the
/// client, whose request was not conditional, gets the stored response, never the 304.
#[test]
fn a_304_with_another_validator_updates_nothing() {
    let origin = Origin::start();
    origin.set(
        "/t",
        200,
        "Cache-Control: max-age=1\nETag: \"one\"\nX-Gen: 1",
        b"tagged body",
    );
    let p = proxy(&origin, &[]);
    get(p.addr, "/t");
    await_stale(p.addr, "/t", 0);
    origin.set(
        "/t",
        304,
        "Cache-Control: max-age=60\nETag: \"two\"\nX-Gen: 2",
        b"",
    );
    let got = get(p.addr, "/t");
    assert_eq!(got.status, 200, "{}", got.head);
    assert_eq!(got.body, b"tagged body");
    assert_eq!(got.field("etag"), Some("\"one\""));
    assert_eq!(got.field("x-gen"), Some("1"));
    assert!(
        got.cache_status().contains("fwd=stale; fwd-status=304"),
        "{}",
        got.head
    );
    assert!(origin.last("/t").contains("If-None-Match: \"one\"\r\n"));
    // Not refreshed: still stale, so asked again.
    let again = get(p.addr, "/t");
    assert_eq!(again.field("x-gen"), Some("1"), "{}", again.head);
    assert_eq!(origin.count("GET /t"), 3);
}

/// `stale-if-error`: a stale response stands in for a 5xx, and for an origin that is down;
/// without it (and without `--cache-grace`) the error goes through.
#[test]
fn stale_if_error_when_the_origin_fails_or_is_down() {
    let origin = Origin::start();
    origin.set(
        "/e",
        200,
        "Cache-Control: max-age=1, stale-if-error=60",
        b"still here",
    );
    origin.set("/plain", 200, "Cache-Control: max-age=1", b"gone soon");
    let p = proxy(&origin, &[]);
    get(p.addr, "/e");
    get(p.addr, "/plain");
    // Stored after /e with the same lifetime: stale, so is /e. A second past its lifetime, so
    // that /plain (no stale-if-error: 0 s) may not stand in for an error.
    await_stale(p.addr, "/plain", 1);
    origin.set("/e", 503, "", b"down");
    origin.set("/plain", 503, "", b"down");
    let got = get(p.addr, "/e");
    assert_eq!(got.status, 200, "{}", got.head);
    assert_eq!(got.body, b"still here");
    assert!(
        got.cache_status().contains("fwd-status=503"),
        "{}",
        got.head
    );
    assert_eq!(get(p.addr, "/plain").status, 503);
    // The origin goes down: connections closed without an answer (502 from the proxy).
    origin.go_down();
    let got = get(p.addr, "/e");
    assert_eq!(got.status, 200, "{}", got.head);
    assert_eq!(got.body, b"still here");
    assert!(
        got.cache_status().contains("fwd-status=502"),
        "{}",
        got.head
    );
    assert_eq!(get(p.addr, "/plain").status, 502);
}

/// `--cache-grace` lets a stale response without `stale-if-error` answer for a failing origin,
/// unless a directive forbids serving it stale (RFC 9111 §4.2.4): `must-revalidate`,
/// `no-cache`, `proxy-revalidate`, `s-maxage`; whether the origin answers 500 or closes.
#[test]
fn grace_serves_stale_for_errors() {
    let origin = Origin::start();
    origin.set("/g", 200, "Cache-Control: max-age=1", b"graceful");
    let p = proxy(&origin, &["--cache-grace", "60s"]);
    get(p.addr, "/g");
    await_stale(p.addr, "/g", 0);
    origin.set("/g", 500, "", b"broken");
    let got = get(p.addr, "/g");
    assert_eq!(got.status, 200, "{}", got.head);
    assert_eq!(got.body, b"graceful");
    origin.set(
        "/m",
        200,
        "Cache-Control: max-age=1, must-revalidate",
        b"strict",
    );
    get(p.addr, "/m");
    // must-revalidate is never served stale, not even for max-stale (asked, it would be
    // revalidated): an object of the same lifetime stored after it says when it is stale.
    origin.set("/clock-m", 200, "Cache-Control: max-age=1", b"clock");
    get(p.addr, "/clock-m");
    await_stale(p.addr, "/clock-m", 0);
    origin.set("/m", 500, "", b"broken");
    assert_eq!(get(p.addr, "/m").status, 500);
    let strict = [
        "max-age=1, no-cache",
        "max-age=1, proxy-revalidate",
        "s-maxage=1",
        "max-age=1, must-revalidate",
    ];
    for (i, cc) in strict.iter().enumerate() {
        origin.set(
            &format!("/x{i}"),
            200,
            &format!("Cache-Control: {cc}"),
            b"x",
        );
        get(p.addr, &format!("/x{i}"));
    }
    origin.set("/clock-x", 200, "Cache-Control: max-age=1", b"clock");
    get(p.addr, "/clock-x");
    await_stale(p.addr, "/clock-x", 0);
    origin.go_down();
    for (i, cc) in strict.iter().enumerate() {
        let got = get(p.addr, &format!("/x{i}"));
        assert_eq!(got.status, 502, "{cc}: {}", got.head);
    }
    assert_eq!(get(p.addr, "/g").status, 200);
}

/// A client's conditional request is answered 304 from the stored response when its copy is
/// current, and 200 with the body when not; neither reaches the origin.
#[test]
fn clients_conditional_requests_answered_from_the_cache() {
    let origin = Origin::start();
    let lm = "Sun, 06 Nov 1994 08:49:37 GMT";
    origin.set(
        "/c",
        200,
        &format!("Cache-Control: max-age=60\nETag: \"c1\"\nLast-Modified: {lm}"),
        b"conditional",
    );
    let p = proxy(&origin, &[]);
    get(p.addr, "/c");
    let cases: &[(&str, u16)] = &[
        ("If-None-Match: \"c1\"", 304),
        ("If-None-Match: W/\"c1\"", 304),
        ("If-None-Match: \"other\", \"c1\"", 304),
        ("If-None-Match: \"other\"", 200),
        ("If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT", 304),
        ("If-Modified-Since: Sat, 05 Nov 1994 08:49:37 GMT", 200),
    ];
    for (line, status) in cases {
        let got = request(p.addr, "GET", "/c", &[line]);
        assert_eq!(got.status, *status, "{line}: {}", got.head);
        assert!(got.cache_status().contains("hit"), "{line}: {}", got.head);
        let body: &[u8] = if *status == 304 { b"" } else { b"conditional" };
        assert_eq!(got.body, body, "{line}");
    }
    assert_eq!(origin.count("GET /c"), 1);
}

/// A `Range` is answered from a stored complete response: one range is a 206 with its slice,
/// none satisfiable a 416; several ranges, or an `If-Range` that does not hold, get the whole
/// response. None of them reaches the origin.
#[test]
fn ranges_answered_from_the_stored_response() {
    let origin = Origin::start();
    let lm = "Sun, 06 Nov 1994 08:49:37 GMT";
    origin.set(
        "/r",
        200,
        &format!("Cache-Control: max-age=60\nETag: \"r1\"\nLast-Modified: {lm}\nX-Kept: yes"),
        b"0123456789A",
    );
    origin.set(
        "/weak",
        200,
        "Cache-Control: max-age=60\nETag: W/\"w1\"",
        b"0123456789",
    );
    let p = proxy(&origin, &[]);
    get(p.addr, "/r");
    get(p.addr, "/weak");
    // (request lines, status, body, Content-Range)
    type Case<'a> = (&'a [&'a str], u16, &'a [u8], Option<&'a str>);
    let cases: &[Case<'_>] = &[
        (&["Range: bytes=0-1"], 206, b"01", Some("bytes 0-1/11")),
        (
            &["Range: bytes=1-"],
            206,
            b"123456789A",
            Some("bytes 1-10/11"),
        ),
        (&["Range: bytes=-1"], 206, b"A", Some("bytes 10-10/11")),
        (
            &["Range: bytes=5-100"],
            206,
            b"56789A",
            Some("bytes 5-10/11"),
        ),
        (&["Range: bytes=20-"], 416, b"", Some("bytes */11")),
        (&["Range: bytes=0-1,4-5"], 200, b"0123456789A", None),
        (&["Range: lines=1-2"], 200, b"0123456789A", None),
        (
            &["Range: bytes=0-1", "If-Range: \"r1\""],
            206,
            b"01",
            Some("bytes 0-1/11"),
        ),
        (
            &["Range: bytes=0-1", &*format!("If-Range: {lm}")],
            206,
            b"01",
            Some("bytes 0-1/11"),
        ),
        (
            &["Range: bytes=0-1", "If-Range: \"other\""],
            200,
            b"0123456789A",
            None,
        ),
        (
            &["Range: bytes=0-1", "If-Range: W/\"r1\""],
            200,
            b"0123456789A",
            None,
        ),
    ];
    for (lines, status, body, content_range) in cases {
        let got = request(p.addr, "GET", "/r", lines);
        assert_eq!(got.status, *status, "{lines:?}: {}", got.head);
        assert_eq!(got.body, *body, "{lines:?}");
        assert_eq!(got.field("content-range"), *content_range, "{lines:?}");
        assert_eq!(
            got.field("content-length"),
            Some(&*body.len().to_string()),
            "{lines:?}"
        );
        assert!(
            got.cache_status().contains("hit"),
            "{lines:?}: {}",
            got.head
        );
        if *status != 416 {
            assert_eq!(got.field("x-kept"), Some("yes"), "{lines:?}");
        }
    }
    // A weak validator never lets If-Range hold; HEAD ignores Range.
    let weak = request(
        p.addr,
        "GET",
        "/weak",
        &["Range: bytes=0-1", "If-Range: W/\"w1\""],
    );
    assert_eq!(weak.status, 200, "{}", weak.head);
    let head = request(p.addr, "HEAD", "/r", &["Range: bytes=0-1"]);
    assert_eq!(head.status, 200, "{}", head.head);
    assert_eq!(head.field("content-length"), Some("11"));
    assert_eq!(origin.count("GET /r"), 1);
    assert_eq!(origin.count("GET /weak"), 1);
}

/// `/metrics` counts the cache's hits, misses, stored responses and bytes.
#[test]
fn metrics_count_hits_and_misses() {
    let origin = Origin::start();
    origin.set("/m", 200, "Cache-Control: max-age=60", b"measured");
    let metrics_port = support::free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let p = proxy(&origin, &["--metrics", &metrics]);
    for _ in 0..3 {
        get(p.addr, "/m");
    }
    let out = curl(&[&format!("http://{metrics}/metrics")]);
    let text = String::from_utf8_lossy(&out.stdout);
    let value = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert_eq!(value("lowlat_cache_hits_total"), 2);
    assert_eq!(value("lowlat_cache_misses_total"), 1);
    assert_eq!(value("lowlat_cache_stored_total"), 1);
    assert_eq!(value("lowlat_cache_objects"), 1);
    assert!(value("lowlat_cache_bytes") > 8);
}

/// A body that arrives in more than one read (the head and half of it, a pause, the rest) is
/// stored whole, not only one that comes with its head.
#[test]
fn a_body_arriving_in_pieces_is_stored() {
    let origin = Origin::start();
    let body: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    origin.set_slow(
        "/pieces",
        200,
        "Cache-Control: max-age=60",
        &body,
        Duration::ZERO,
        Duration::from_millis(200),
    );
    let p = proxy(&origin, &[]);
    let first = get(p.addr, "/pieces");
    assert!(first.body == body, "{} bytes", first.body.len());
    assert!(first.cache_status().contains("stored"), "{}", first.head);
    let second = get(p.addr, "/pieces");
    assert!(second.cache_status().contains("hit"), "{}", second.head);
    assert!(second.body == body);
    assert_eq!(origin.count("GET /pieces"), 1);
}

/// `n` clients, each on its own thread and connection, ask for `target` at once (as near as
/// threads can); their answers, in no order.
fn at_once(addr: SocketAddr, target: &str, n: usize) -> Vec<Got> {
    at_once_with(addr, target, &[], n)
}

/// As [`at_once`], each request with these extra head lines.
fn at_once_with(addr: SocketAddr, target: &str, lines: &[&str], n: usize) -> Vec<Got> {
    let start = Arc::new(std::sync::Barrier::new(n));
    let lines: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let start = Arc::clone(&start);
            let target = target.to_owned();
            let lines = lines.clone();
            std::thread::spawn(move || {
                let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
                start.wait();
                request(addr, "GET", &target, &lines)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Request collapsing: 100 clients miss one URL at once, on two workers, while the origin takes
/// 300 ms to answer: the origin gets one request, every client the whole response — the one
/// that went forward stored it, the others waited for it (`collapsed` in `Cache-Status`).
#[test]
fn concurrent_misses_make_one_upstream_request() {
    let origin = Origin::start();
    let body: Vec<u8> = (0..50_000u32).map(|i| b'0' + (i % 10) as u8).collect();
    origin.set_slow(
        "/hot",
        200,
        "Cache-Control: max-age=60",
        &body,
        Duration::from_millis(300),
        Duration::ZERO,
    );
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let p = proxy(&origin, &["--workers", "2", "--metrics", &metrics]);
    let got = at_once(p.addr, "/hot", 100);
    for g in &got {
        assert_eq!(g.status, 200, "{}", g.head);
        assert!(g.body == body, "{} bytes: {}", g.body.len(), g.head);
    }
    assert_eq!(origin.count("GET /hot"), 1);
    let collapsed = got
        .iter()
        .filter(|g| g.cache_status().contains("collapsed"))
        .count();
    assert!(collapsed > 0, "none waited");
    for g in got
        .iter()
        .filter(|g| g.cache_status().contains("collapsed"))
    {
        let status = g.cache_status();
        assert!(
            status.starts_with("lowlat; fwd=uri-miss; ttl=") && status.ends_with("; collapsed"),
            "{}",
            g.head
        );
    }
    // Each request is one of: the fetch, a wait answered by it, a hit after it.
    assert_eq!(metric(&metrics, "lowlat_cache_misses_total"), 1);
    assert_eq!(
        metric(&metrics, "lowlat_cache_collapsed_total"),
        collapsed as u64
    );
    assert_eq!(
        metric(&metrics, "lowlat_cache_hits_total"),
        99 - collapsed as u64
    );
}

/// Once a URL's responses are known to vary, concurrent misses wait for a fetch of their own
/// variant only: after a first wave of one language (one request), a wave of two other
/// languages at once makes one request per language, not one plus one per request of the
/// language that did not lead.
#[test]
fn collapsing_keeps_variants_apart() {
    let origin = Origin::start();
    origin.set_slow(
        "/lang",
        200,
        "Cache-Control: max-age=60\nVary: Accept-Language",
        b"words",
        Duration::from_millis(300),
        Duration::ZERO,
    );
    let p = proxy(&origin, &["--workers", "2"]);
    for g in at_once_with(p.addr, "/lang", &["Accept-Language: en"], 20) {
        assert_eq!(g.status, 200, "{}", g.head);
    }
    assert_eq!(origin.count("GET /lang"), 1);
    let addr = p.addr;
    let de = std::thread::spawn(move || at_once_with(addr, "/lang", &["Accept-Language: de"], 10));
    let es = at_once_with(p.addr, "/lang", &["Accept-Language: es"], 10);
    for g in es.iter().chain(&de.join().unwrap()) {
        assert_eq!(g.status, 200, "{}", g.head);
        assert_eq!(g.body, b"words");
    }
    assert_eq!(origin.count("GET /lang"), 3);
}

/// Requests that waited for a response that could not be stored (`no-store`) go to the origin
/// themselves, each getting its own answer, at once: none hangs, none waits for another twice.
#[test]
fn waiters_for_what_is_not_stored_go_forward_themselves() {
    let origin = Origin::start();
    origin.set_slow(
        "/private",
        200,
        "Cache-Control: no-store",
        b"for you only",
        Duration::from_millis(300),
        Duration::ZERO,
    );
    let p = proxy(&origin, &["--workers", "2"]);
    let started = std::time::Instant::now();
    let got = at_once(p.addr, "/private", 20);
    let took = started.elapsed();
    for g in &got {
        assert_eq!(g.status, 200, "{}", g.head);
        assert_eq!(g.body, b"for you only");
        assert!(!g.cache_status().contains("collapsed"), "{}", g.head);
    }
    // The first fetch, then every waiter's own (in parallel): two rounds, not twenty.
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(origin.count("GET /private") >= 2);
    assert!(origin.count("GET /private") <= 20);
}

/// A fetch that fails (the origin is slower than the first-byte timeout) releases its waiters,
/// which try on their own and get their own answer (504 here) within their time limit.
#[test]
fn waiters_of_a_failed_fetch_are_answered_in_time() {
    let origin = Origin::start();
    origin.set_slow(
        "/slow",
        200,
        "Cache-Control: max-age=60",
        b"too late",
        Duration::from_secs(3),
        Duration::ZERO,
    );
    let p = proxy(
        &origin,
        &["--workers", "2", "--proxy-first-byte-timeout", "1s"],
    );
    let started = std::time::Instant::now();
    let got = at_once(p.addr, "/slow", 10);
    let took = started.elapsed();
    for g in &got {
        assert_eq!(g.status, 504, "{}", g.head);
    }
    // The fetch times out after 1 s, its waiters' own after 1 s more; timeouts are found by
    // the worker's sweep, up to a second apart: at most 4 s, never the origin's 3 s each.
    assert!(took < Duration::from_millis(5500), "took {took:?}");
}

/// `stale-while-revalidate` (RFC 5861 §3): within the window a stale response is sent at once
/// while one conditional request refreshes it in the background; later requests in the
/// meantime are sent the stale response too, without another refresh; once the refresh is in,
/// the new response is a hit.
#[test]
fn stale_while_revalidate_refreshes_in_the_background() {
    let origin = Origin::start();
    origin.set(
        "/swr",
        200,
        "Cache-Control: max-age=1, stale-while-revalidate=30\nETag: \"v1\"",
        b"version 1",
    );
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let p = proxy(&origin, &["--workers", "2", "--metrics", &metrics]);
    assert_eq!(get(p.addr, "/swr").body, b"version 1");
    std::thread::sleep(Duration::from_millis(2100));
    origin.set_slow(
        "/swr",
        200,
        "Cache-Control: max-age=60, stale-while-revalidate=30\nETag: \"v2\"",
        b"version 2",
        Duration::from_millis(500),
        Duration::ZERO,
    );
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let stale = get(p.addr, "/swr");
        let took = started.elapsed();
        assert_eq!(stale.status, 200);
        assert_eq!(stale.body, b"version 1");
        assert!(took < Duration::from_millis(250), "took {took:?}");
        let status = stale.cache_status();
        assert!(status.starts_with("lowlat; hit; ttl=-"), "{}", stale.head);
        assert!(status.contains("detail=stale-while-revalidate"), "{status}");
    }
    // The refresh reached the origin once, with the stored validator.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(origin.count("GET /swr"), 2);
    assert!(
        origin.last("/swr").contains("If-None-Match: \"v1\"\r\n"),
        "{}",
        origin.last("/swr")
    );
    std::thread::sleep(Duration::from_millis(800));
    let fresh = get(p.addr, "/swr");
    assert_eq!(fresh.body, b"version 2");
    assert!(
        fresh.cache_status().starts_with("lowlat; hit"),
        "{}",
        fresh.head
    );
    assert_eq!(fresh.field("etag"), Some("\"v2\""));
    assert_eq!(origin.count("GET /swr"), 2);
    assert_eq!(metric(&metrics, "lowlat_cache_refreshes_total"), 1);
}

/// A background refresh answered 304 refreshes the stored response in place: the body stays,
/// the head takes the 304's fields and lifetime.
#[test]
fn stale_while_revalidate_with_a_304() {
    let origin = Origin::start();
    origin.set(
        "/swr304",
        200,
        "Cache-Control: max-age=1, stale-while-revalidate=30\nETag: \"same\"\nX-Gen: 1",
        b"kept body",
    );
    let p = proxy(&origin, &[]);
    get(p.addr, "/swr304");
    await_stale(p.addr, "/swr304", 0);
    origin.set(
        "/swr304",
        304,
        "Cache-Control: max-age=60\nETag: \"same\"\nX-Gen: 2",
        b"",
    );
    let stale = get(p.addr, "/swr304");
    assert_eq!(stale.body, b"kept body");
    assert_eq!(stale.field("x-gen"), Some("1"));
    std::thread::sleep(Duration::from_millis(300));
    let fresh = get(p.addr, "/swr304");
    assert_eq!(fresh.body, b"kept body");
    assert_eq!(fresh.field("x-gen"), Some("2"), "{}", fresh.head);
    assert!(fresh.cache_status().contains("hit"), "{}", fresh.head);
    assert!(!fresh.cache_status().contains("ttl=-"), "{}", fresh.head);
    assert_eq!(origin.count("GET /swr304"), 2);
}

/// `--cache-key`: a key template that leaves the query out makes `/k?x=1` and `/k?x=2` one
/// entry; one that names a cookie keeps its values apart.
#[test]
fn a_key_template_decides_what_is_one_entry() {
    let origin = Origin::start();
    origin.set("/k", 200, "Cache-Control: max-age=60", b"keyed");
    let p = proxy(&origin, &["--cache-key", "$scheme$host$uri|$cookie_lang"]);
    for q in ["/k?x=1", "/k?x=2", "/k"] {
        assert_eq!(get(p.addr, q).body, b"keyed");
    }
    assert_eq!(origin.count("GET /k"), 1, "the query is not in the key");
    let fr = request(p.addr, "GET", "/k", &["Cookie: lang=fr"]);
    assert!(fr.cache_status().contains("fwd=uri-miss"), "{}", fr.head);
    let fr = request(p.addr, "GET", "/k?y", &["Cookie: a=1; lang=fr"]);
    assert!(fr.cache_status().contains("hit"), "{}", fr.head);
    assert_eq!(origin.count("GET /k"), 2, "the cookie is in the key");
    // No host for `$host`: the request goes past the cache, and a purge names nothing.
    let raw = |text: &str| {
        let mut s = TcpStream::connect(p.addr).unwrap();
        s.write_all(text.as_bytes()).unwrap();
        let mut all = String::new();
        s.read_to_string(&mut all).unwrap();
        all
    };
    let hostless = raw("GET /k HTTP/1.0\r\n\r\n");
    assert!(hostless.starts_with("HTTP/1.1 200"), "{hostless}");
    assert!(!hostless.contains("Cache-Status"), "{hostless}");
    assert_eq!(origin.count("GET /k"), 3);
    let purge = raw("PURGE /k HTTP/1.0\r\n\r\n");
    assert!(purge.starts_with("HTTP/1.1 400"), "{purge}");
    assert_eq!(origin.count("PURGE /k"), 0);
    // A prefix purge finds the template's keys, whatever follows the path in them.
    origin.set("/k/1", 200, "Cache-Control: max-age=60", b"one");
    for lang in ["lang=fr", "lang=en"] {
        request(p.addr, "GET", "/k/1", &[&format!("Cookie: {lang}")]);
    }
    let purged = request(p.addr, "PURGE", "/k/*", &[]);
    assert_eq!(purged.body, b"{\"purged\": 2}\n");
    let fr = request(p.addr, "GET", "/k/1", &["Cookie: lang=fr"]);
    assert!(fr.cache_status().contains("fwd=uri-miss"), "{}", fr.head);
    assert!(get(p.addr, "/k").cache_status().contains("hit"));
}

/// `--cache-bypass`: a request with the cookie (or the method) goes to the origin and its
/// answer is not stored; others are answered from the cache. `--cache-no-store`: the answer
/// to a request with `?nostore=1` is not stored, but that request is answered from the cache
/// when there is something to answer with.
#[test]
fn bypass_and_no_store_conditions() {
    let origin = Origin::start();
    origin.set("/b", 200, "Cache-Control: max-age=60", b"shared");
    let p = proxy(
        &origin,
        &[
            "--cache-bypass",
            "$cookie_nocache",
            "--cache-bypass",
            "$request_method==HEAD",
            "--cache-no-store",
            "$arg_nostore",
        ],
    );
    for _ in 0..2 {
        let b = request(p.addr, "GET", "/b", &["Cookie: nocache=1"]);
        assert_eq!(b.body, b"shared");
        assert!(b.cache_status().is_empty(), "{}", b.head);
    }
    assert_eq!(origin.count("GET /b"), 2);
    // `nocache=0` is no reason to bypass (nginx's rule: empty or 0 is false).
    let stored = request(p.addr, "GET", "/b", &["Cookie: nocache=0"]);
    assert!(stored.cache_status().contains("stored"), "{}", stored.head);
    assert!(get(p.addr, "/b").cache_status().contains("hit"));
    assert_eq!(origin.count("GET /b"), 3);
    assert!(request(p.addr, "HEAD", "/b", &[]).cache_status().is_empty());
    assert_eq!(origin.count("HEAD /b"), 1);

    origin.set("/n", 200, "Cache-Control: max-age=60", b"not kept");
    for _ in 0..2 {
        let n = get(p.addr, "/n?nostore=1");
        assert!(
            n.cache_status().contains("detail=no-store-rule"),
            "{}",
            n.head
        );
    }
    assert_eq!(origin.count("GET /n"), 2);
    origin.set("/s", 200, "Cache-Control: max-age=60", b"kept");
    let mut key = get(p.addr, "/s");
    assert!(key.cache_status().contains("stored"), "{}", key.head);
    key = get(p.addr, "/s?nostore=1");
    assert!(
        key.cache_status().contains("fwd=uri-miss"),
        "another key: {}",
        key.head
    );
    assert_eq!(origin.count("GET /s"), 2);
}

/// `--cache-ttl`: a response without explicit freshness is fresh for its status's lifetime
/// (a 302 and a 404 too, which are not stored without one), explicit freshness still wins;
/// `--cache-ignore`: `Cache-Control: no-cache, private` and `Set-Cookie` no longer keep a
/// response out, and the stored copy has no `Set-Cookie`.
#[test]
fn lifetimes_per_status_and_ignored_fields() {
    let origin = Origin::start();
    origin.set("/plain", 200, "Content-Type: text/plain", b"no freshness");
    origin.set("/moved", 302, "Location: /plain", b"");
    origin.set("/gone", 404, "", b"gone");
    origin.set("/short", 200, "Cache-Control: max-age=0", b"explicit");
    let p = proxy(
        &origin,
        &["--cache-ttl", "200 302 1h", "--cache-ttl", "any 1m"],
    );
    for path in ["/plain", "/moved", "/gone", "/short"] {
        let first = get(p.addr, path);
        assert!(
            first.cache_status().contains("stored"),
            "{path}: {}",
            first.head
        );
        get(p.addr, path);
    }
    assert_eq!(origin.count("GET /plain"), 1);
    assert_eq!(origin.count("GET /moved"), 1);
    assert_eq!(origin.count("GET /gone"), 1);
    let ttl = get(p.addr, "/plain");
    assert!(ttl.ttl().is_some_and(|t| t > 3500), "an hour: {}", ttl.head);
    let ttl = get(p.addr, "/gone");
    assert!(
        ttl.ttl().is_some_and(|t| (50..=60).contains(&t)),
        "a minute: {}",
        ttl.head
    );
    assert_eq!(
        origin.count("GET /short"),
        2,
        "max-age=0 wins over the rule"
    );

    let origin = Origin::start();
    origin.set(
        "/private",
        200,
        "Cache-Control: private, no-cache\nSet-Cookie: session=one\nX-Kept: yes",
        b"for all",
    );
    let p = proxy(
        &origin,
        &[
            "--cache-ignore",
            "Cache-Control,Set-Cookie",
            "--cache-ttl",
            "any 1m",
        ],
    );
    let first = get(p.addr, "/private");
    assert_eq!(
        first.field("set-cookie"),
        Some("session=one"),
        "{}",
        first.head
    );
    assert!(first.cache_status().contains("stored"), "{}", first.head);
    let hit = get(p.addr, "/private");
    assert!(hit.cache_status().contains("hit"), "{}", hit.head);
    assert_eq!(hit.field("set-cookie"), None, "{}", hit.head);
    assert_eq!(hit.field("x-kept"), Some("yes"));
    assert_eq!(hit.body, b"for all");
    assert_eq!(origin.count("GET /private"), 1);
}

/// Config file: a site turns its cache on or off, a rule table turns its own on or off and
/// sets its own lifetimes over its site's.
#[test]
fn per_site_and_per_rule_settings_in_the_config_file() {
    let origin = Origin::start();
    for path in ["/a", "/off/a", "/ttl/a"] {
        origin.set(path, 200, "X-Path: yes", b"body");
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("lowlat.toml");
    let url = origin.url();
    let metrics = format!("127.0.0.1:{}", support::free_port());
    std::fs::write(
        &cfg,
        format!(
            r#"listen = ["127.0.0.1:0"]
workers = 1
metrics = "{metrics}"
cache_ttl = ["200 1m"]

[[site]]
server_names = ["on.test"]
cache = true
proxy = [
  "/={url}",
  {{ prefix = "/off/", target = "{url}", cache = false }},
  {{ prefix = "/ttl/", target = "{url}", cache_ttl = ["200 2h"] }},
]

[[site]]
server_names = ["off.test"]
proxy = ["/={url}", {{ prefix = "/ttl/", target = "{url}", cache = true }}]
"#
        ),
    )
    .unwrap();
    let p = Served::start(["--config", cfg.to_str().unwrap()]);
    let twice = |host: &str, path: &str| {
        request_to(p.addr, host, "GET", path, &[]);
        request_to(p.addr, host, "GET", path, &[])
    };
    let hit = twice("on.test", "/a");
    assert!(
        hit.ttl().is_some_and(|t| (50..=60).contains(&t)),
        "the top level's 1m: {}",
        hit.head
    );
    let off = twice("on.test", "/off/a");
    assert!(off.cache_status().is_empty(), "{}", off.head);
    let ttl = twice("on.test", "/ttl/a");
    assert!(
        ttl.ttl().is_some_and(|t| t > 7000),
        "the rule's 2h: {}",
        ttl.head
    );
    assert_eq!(origin.count("GET /a"), 1);
    assert_eq!(origin.count("GET /off/a"), 2);
    assert_eq!(origin.count("GET /ttl/a"), 1);
    let off = twice("off.test", "/a");
    assert!(off.cache_status().is_empty(), "{}", off.head);
    assert_eq!(origin.count("GET /a"), 3);
    // The rule that turns its cache on in a site without one: the key has the host, so the
    // first site's entry is not this one's.
    let on = twice("off.test", "/ttl/a");
    assert!(on.cache_status().contains("hit"), "{}", on.head);
    assert_eq!(origin.count("GET /ttl/a"), 2);
    // Each site's counts under its first server name; the totals keep their names.
    let site = |name: &str, site: &str| {
        metric(
            &metrics,
            &format!("lowlat_cache_site_{name}_total{{site=\"{site}\"}}"),
        )
    };
    assert_eq!((site("hits", "on.test"), site("misses", "on.test")), (2, 2));
    assert_eq!(
        (site("hits", "off.test"), site("misses", "off.test")),
        (1, 1)
    );
    assert_eq!(metric(&metrics, "lowlat_cache_hits_total"), 3);
}

/// `--check-config` names the line and key of each bad cache setting, at the top level, in a
/// site and in a rule table, one line each.
#[test]
fn check_config_names_bad_cache_settings() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        r#"cache_ttl = ["200 soon"]

[[site]]
server_names = ["a.test"]
cache = "yes"
cache_key = "$host$nope"
proxy = [
  "/=http://127.0.0.1:9",
  { prefix = "/x/", target = "http://127.0.0.1:9",
    cache_ignore = ["Age"] },
  { prefix = "/y/", target = "http://127.0.0.1:9", cache_bypas = ["$cookie_a"] },
]
"#,
    )
    .unwrap();
    let out = std::process::Command::new(support::BIN)
        .args(["serve", "--check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    for want in [
        "bad.toml:1: cache_ttl: ",
        "bad.toml:5: site[0].cache: is a switch",
        "bad.toml:6: site[0].cache_key: ",
        "bad.toml:10: site[0].proxy[1].cache_ignore: ",
        "bad.toml:11: site[0].proxy[2].cache_bypas: unknown key in a proxy rule",
    ] {
        assert!(lines.iter().any(|l| l.contains(want)), "{want:?} in {err}");
    }
    assert_eq!(lines.len(), 5, "{err}");
}

/// The access log's `$upstream_cache_status` says what the cache did, in nginx's words, for
/// each request; `/metrics` has the same counts per site.
#[test]
fn the_access_log_and_metrics_say_what_the_cache_did() {
    let origin = Origin::start();
    // Stale as soon as stored (`Age` past `max-age`), each with what lets it be used stale.
    origin.set("/h", 200, "Cache-Control: max-age=60", b"h");
    origin.set(
        "/r",
        200,
        "Cache-Control: max-age=10\nAge: 100\nETag: \"1\"",
        b"r",
    );
    origin.set(
        "/e",
        200,
        "Cache-Control: max-age=10, stale-if-error=600\nAge: 100",
        b"e",
    );
    origin.set(
        "/u",
        200,
        "Cache-Control: max-age=10, stale-while-revalidate=600\nAge: 100",
        b"u",
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let rule = format!("/={}", origin.url());
    let p = Served::start([
        "--proxy".as_ref(),
        rule.as_ref(),
        "--cache".as_ref(),
        "--cache-bypass".as_ref(),
        "$cookie_nocache".as_ref(),
        "--metrics".as_ref(),
        metrics.as_ref(),
        "--access-log".as_ref(),
        log.as_os_str(),
        "--access-log-format".as_ref(),
        "$request_uri $upstream_cache_status".as_ref(),
    ]);
    get(p.addr, "/h");
    get(p.addr, "/h");
    request(p.addr, "GET", "/h", &["Cookie: nocache=1"]);
    get(p.addr, "/r");
    origin.set("/r", 304, "Cache-Control: max-age=60\nETag: \"1\"", b"");
    get(p.addr, "/r?");
    get(p.addr, "/e");
    origin.set("/e", 500, "", b"down");
    let stale = get(p.addr, "/e");
    assert_eq!(stale.body, b"e", "{}", stale.head);
    get(p.addr, "/u");
    get(p.addr, "/u");
    get(p.addr, "/x");
    get(p.addr, "/x");
    // The key has the query: `/r?` is another entry. Revalidate the one stored.
    let revalidated = get(p.addr, "/r");
    assert!(
        revalidated.cache_status().contains("fwd-status=304"),
        "{}",
        revalidated.head
    );
    let site = |name: &str| {
        metric(
            &metrics,
            &format!("lowlat_cache_site_{name}_total{{site=\"default\"}}"),
        )
    };
    assert_eq!(site("hits"), 2, "/h and /u");
    assert_eq!(site("bypass"), 1);
    assert_eq!(site("revalidated"), 1);
    assert_eq!(site("stale"), 2, "/e and /u");
    assert_eq!(metric(&metrics, "lowlat_cache_hits_total"), 2);
    p.stop();
    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines
        .lines()
        .filter(|l| !l.starts_with("/metrics"))
        .collect();
    assert_eq!(
        lines,
        [
            "/h MISS",
            "/h HIT",
            "/h BYPASS",
            "/r MISS",
            "/r? MISS",
            "/e MISS",
            "/e STALE",
            "/u MISS",
            "/u UPDATING",
            "/x MISS",
            "/x EXPIRED",
            "/r REVALIDATED",
        ]
    );
}
