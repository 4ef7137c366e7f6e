//! What a packager and an operator use: the version (with the git revision from a checkout),
//! shell completions, the man page, and the systemd unit (checked by systemd-analyze where the
//! machine has it).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_lowlat");

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn version_completions_and_man_page() {
    let (code, v) = run(&["--version"]);
    assert_eq!(code, Some(0));
    assert!(
        v.starts_with(&format!("lowlat {}", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    for shell in ["bash", "zsh", "fish"] {
        let (code, script) = run(&["completions", shell]);
        assert_eq!(code, Some(0), "{shell}");
        assert!(
            script.contains("serve") && script.contains("tls-listen"),
            "{shell}"
        );
    }
    let (code, man) = run(&["man"]);
    assert_eq!(code, Some(0));
    assert!(man.contains(".TH lowlat 1"), "{man}");
    let (code, _) = run(&["completions", "tcsh"]);
    assert_eq!(code, Some(2), "an unknown shell is a usage error");
}

/// The shipped unit passes `systemd-analyze verify` (with ExecStart pointed at this build).
#[test]
fn systemd_unit_verifies() {
    let Ok(out) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("systemd-analyze is not installed here; the unit is not verified");
        return;
    };
    assert!(out.status.success());
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/systemd/lowlat.service"
    ))
    .unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/lowlat serve"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lowlat.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/lowlat", BIN)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        !err.contains("lowlat.service:"),
        "warnings about the unit: {err}"
    );
}
