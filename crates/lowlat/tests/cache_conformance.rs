//! The HTTP caching test suite (npm's `http-cache-tests`, at the version pinned in
//! `scripts/cache-tests.py`) against `lowlat serve --proxy /=http://ORIGIN --cache`: the
//! suite's own origin server behind lowlat's cache and the suite's own client in front of it,
//! run by `scripts/cache-tests.py` (which `scripts/test-deps.sh` also uses to install the suite),
//! as the suite's README runs it against a reverse proxy.
//!
//! The bars hold what the cache reaches today, so that no change loses a test it passes: at most
//! 8 tests of kind "required" not passed and at least 75 of the 88 tests of kind "optimal"
//! passed. docs/PERFORMANCE.md, "Cache conformance", argues each of the 8: 4 no cache can pass
//! (`stale-close-*`: the origin closes the connection, and the test wants a field of the answer
//! it never sent), 2 follow from not storing `Set-Cookie` responses by default, 1 RFC 9111
//! §4.3.4 forbids (`304-etag-update-response-ETag`), 1 contradicts its neighbours
//! (`age-parse-prefix`). The cache was built for at most 5 and at least 70; the first is out of
//! reach without giving up one of those rules. For scale, the peers measured on this kind of
//! machine with the same script: squid 23 required not passed, Apache Traffic Server 32, varnish
//! 38, nginx 61; optimal passed ATS 69, nginx 57, squid 49, varnish 44.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_lowlat");
const MAX_REQUIRED_NOT_PASSED: usize = 8;
const MIN_OPTIMAL_PASSED: usize = 75;
/// The suite's client takes about 20 s against a cache that answers at once; a request the cache
/// holds open must not hold the test for ever.
const CLIENT_TIMEOUT_S: &str = "300";

/// The suite's result through lowlat's cache, within the bars above.
#[test]
fn http_cache_tests_through_the_cache() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/cache-tests.py");
    let results = tempfile::NamedTempFile::new().expect("a file for the results");
    let command = format!(
        "{BIN} serve --workers 1 --listen 127.0.0.1:{{port}} --proxy /=http://{{origin}} --cache"
    );
    let out = Command::new("python3")
        .arg(&script)
        .args(["--cache", &command, "--name", "lowlat", "--timeout"])
        .arg(CLIENT_TIMEOUT_S)
        .arg("--json")
        .arg(results.path())
        .output()
        .expect("run python3 scripts/cache-tests.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/cache-tests.py could not run the suite through lowlat:\n{stderr}{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(results.path()).expect("read the results"))
            .expect("the results are JSON");
    let ids = |key: &str| -> Vec<String> {
        report["counts"][key]
            .as_array()
            .unwrap_or_else(|| panic!("no counts.{key} in the results"))
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let required_failed = ids("required_not_passed");
    let optimal_passed = ids("optimal_passed");
    println!("{stdout}");
    assert!(
        required_failed.len() <= MAX_REQUIRED_NOT_PASSED,
        "{} required tests not passed (at most {MAX_REQUIRED_NOT_PASSED}): {}",
        required_failed.len(),
        required_failed.join(" ")
    );
    assert!(
        optimal_passed.len() >= MIN_OPTIMAL_PASSED,
        "{} optimal tests passed (at least {MIN_OPTIMAL_PASSED}); not passed: {}",
        optimal_passed.len(),
        ids("optimal_not_passed").join(" ")
    );
}
