//! The access log for real: requests over sockets to a server on 127.0.0.1:0, the file read
//! back — combined lines matched by the pattern goaccess's COMBINED format describes, JSON lines
//! parsed, a reopen after a rename (logrotate), and a full disk (/dev/full) that never stops
//! serving.

mod support;

use std::path::Path;
use std::sync::Arc;

use lowlat_server::access_log::{AccessLogConfig, Format};
use support::{roundtrip, TestServer};

fn server(path: &Path, format: Format) -> (TestServer, Arc<AccessLogConfig>) {
    let log = Arc::new(AccessLogConfig::new(path.to_owned(), format));
    let cfg = lowlat_server::ServerConfig {
        access_log: Some(Arc::clone(&log)),
        ..support::config(1)
    };
    (
        TestServer::start(cfg, lowlat_server::builtin_service()),
        log,
    )
}

fn request(s: &TestServer, target: &str, ua: &str) {
    let req = format!(
        "GET {target} HTTP/1.1\r\nHost: test\r\nUser-Agent: {ua}\r\nReferer: http://r/\r\n\r\n"
    );
    roundtrip(s.addr, req.as_bytes()).expect("reply");
}

/// nginx's combined format, line by line; quotes in a header are escaped, not copied.
#[test]
fn combined_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let (s, _) = server(&path, Format::Combined);
    request(&s, "/plaintext", "agent/1.0");
    request(&s, "/missing?x=1", "evil\" agent");
    s.stop(); // flushes
    let text = std::fs::read_to_string(&path).unwrap();
    let re = regex::Regex::new(
        r#"^(\S+) - - \[(\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} \+0000)\] "(\S+) (\S+) (HTTP/1\.[01])" (\d{3}) (\d+) "([^"]*)" "([^"]*)"$"#,
    )
    .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let c = re
        .captures(lines[0])
        .unwrap_or_else(|| panic!("{}", lines[0]));
    assert_eq!(&c[1], "127.0.0.1");
    assert_eq!((&c[3], &c[4], &c[5]), ("GET", "/plaintext", "HTTP/1.1"));
    assert_eq!((&c[6], &c[7]), ("200", "13"));
    assert_eq!((&c[8], &c[9]), ("http://r/", "agent/1.0"));
    let c = re
        .captures(lines[1])
        .unwrap_or_else(|| panic!("{}", lines[1]));
    assert_eq!((&c[4], &c[6]), ("/missing?x=1", "404"));
    assert_eq!(&c[9], r"evil\x22 agent");
}

/// One JSON object a line, with every field.
#[test]
fn json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.json");
    let (s, _) = server(&path, Format::Json);
    request(&s, "/json", "agent/2.0");
    s.stop();
    let text = std::fs::read_to_string(&path).unwrap();
    let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(v["method"], "GET");
    assert_eq!(v["target"], "/json");
    assert_eq!(v["protocol"], "HTTP/1.1");
    assert_eq!(v["status"], 200);
    assert_eq!(v["bytes"], 27);
    assert_eq!(v["user_agent"], "agent/2.0");
    assert_eq!(v["referer"], "http://r/");
    assert_eq!(v["remote"], "127.0.0.1");
    assert_eq!(v["worker"], 0);
    // The request's time off the clock, with nanoseconds: never the zero of a loop turn.
    assert!(v["duration_us"].as_f64().is_some_and(|d| d > 0.0), "{v}");
    assert!(v["time"].as_str().unwrap().ends_with('Z'));
}

/// logrotate: the file is renamed, a reopen is asked for (SIGUSR1 in `lowlat serve`), and the
/// lines after it go to a new file at the old path.
#[test]
fn reopen_after_rename() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let (s, log) = server(&path, Format::Combined);
    request(&s, "/plaintext", "before");
    // Wait for the once-a-second flush, so the first line is in the file being rotated.
    std::thread::sleep(std::time::Duration::from_millis(1300));
    std::fs::rename(&path, dir.path().join("access.log.1")).unwrap();
    log.reopen();
    request(&s, "/json", "after");
    s.stop();
    let old = std::fs::read_to_string(dir.path().join("access.log.1")).unwrap();
    let new = std::fs::read_to_string(&path).unwrap();
    assert!(
        old.contains("\"before\"") && !old.contains("\"after\""),
        "{old}"
    );
    assert!(
        new.contains("\"after\"") && !new.contains("\"before\""),
        "{new}"
    );
}

/// A log that cannot be written (a full disk: /dev/full) drops its lines; requests are served.
#[test]
fn full_disk_does_not_stop_serving() {
    let (s, _) = server(Path::new("/dev/full"), Format::Combined);
    for _ in 0..2000 {
        request(&s, "/plaintext", "x");
    }
    s.stop();
}

/// Refused requests get their line too, as nginx writes one for every answer: a control byte in
/// a field (400), an over-long target (414), a body over the limit (413), bytes that are no
/// request at all (400, its first bytes escaped as the method).
#[test]
fn refused_requests_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let (s, _) = server(&path, Format::Combined);
    let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9000));
    for (raw, status) in [
        (
            &b"GET /ctl HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n"[..],
            "400",
        ),
        (long.as_bytes(), "414"),
        (
            b"POST /big HTTP/1.0\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
            "413",
        ),
        (b"\x16\x03\x01\x02\x00\r\n\r\n", "400"),
    ] {
        let reply = roundtrip(s.addr, raw).expect("reply");
        assert_eq!(reply.status.to_string(), status);
    }
    s.stop();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].contains("\"GET /ctl HTTP/1.1\" 400 0"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains(&format!("\"GET /{} HTTP/1.1\" 414 0", "a".repeat(9000))));
    assert!(
        lines[2].contains("\"POST /big HTTP/1.0\" 413 0"),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].contains("\"\\x16\\x03\\x01\\x02\\x00 - HTTP/1.1\" 400 0"),
        "{}",
        lines[3]
    );
}
