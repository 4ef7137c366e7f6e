//! What a packager and an operator use: the version (with the git revision from a checkout),
//! shell completions, the help and a man page per command (each naming the guides for its
//! command), usage errors that list accepted values, and the systemd unit (checked by
//! systemd-analyze where the machine has it).

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

/// Runs `lowlat ARGS`: exit code and stderr.
fn stderr_of(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A value outside a fixed list is a usage error that lists the accepted values, in one line.
#[test]
fn unknown_values_list_the_accepted_ones() {
    for (args, said) in [
        (
            &["serve", "--log-level", "verbose"][..],
            "lowlat serve: invalid value 'verbose' for '--log-level <LEVEL>'; accepted values: \
             error, warn, info, debug, trace",
        ),
        (
            &["completions", "tcsh"],
            "lowlat completions: invalid value 'tcsh' for '<SHELL>'; accepted values: bash, \
             elvish, fish, powershell, zsh",
        ),
    ] {
        let (code, err) = stderr_of(args);
        assert_eq!(code, Some(2), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with(said), "{args:?}: {err}");
    }
}

/// `lowlat serve --help` puts each group of flags under its own heading: the static files'
/// and the app's are not listed under HTTP/2's; the help and the pages say what serve speaks.
#[test]
fn serve_help_groups_flags_under_their_headings() {
    let (code, help) = run(&["serve", "--help"]);
    assert_eq!(code, Some(0));
    let heading_of = |flag: &str| {
        let at = help
            .find(&format!("      {flag} "))
            .unwrap_or_else(|| panic!("{flag} missing:\n{help}"));
        help[..at]
            .lines()
            .rev()
            .find(|l| !l.starts_with(' ') && l.ends_with(':'))
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(heading_of("--h2-max-streams"), "HTTP/2:");
    for flag in [
        "--root",
        "--index",
        "--autoindex",
        "--cache-bytes",
        "--cache-valid",
    ] {
        assert_eq!(heading_of(flag), "Static files:", "{flag}");
    }
    for flag in [
        "--no-app",
        "--app-prefix",
        "--app-words",
        "--words",
        "--seed",
    ] {
        assert_eq!(heading_of(flag), "Dynamic app:", "{flag}");
    }
    let (_, top) = run(&["--help"]);
    let (_, man) = run(&["man"]);
    for text in [&top, &man] {
        assert!(
            text.contains("HTTP/1.1, HTTP/2 and HTTP/3 server"),
            "{text}"
        );
    }
}

/// Every page the top man page refers to (`lowlat-serve(1)`, …) exists: `lowlat man serve`
/// prints one, `lowlat man --dir DIR` writes them all, and each page they name is among them.
#[test]
fn man_pages_for_every_command() {
    let (code, page) = run(&["man", "serve"]);
    assert_eq!(code, Some(0));
    assert!(page.contains(".TH lowlat-serve 1"), "{page}");
    assert!(
        page.contains("\\-\\-root"),
        "the serve page has serve's flags"
    );
    assert!(page.contains(".SH \"STATIC FILES\"") || page.contains(".SH STATIC FILES"));
    let (code, page) = run(&["man", "load", "merge"]);
    assert_eq!(code, Some(0));
    assert!(page.contains(".TH lowlat-load-merge 1"), "{page}");
    let (code, err) = stderr_of(&["man", "nosuch"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("no page for `lowlat nosuch`; pages: serve, load"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (code, listed) = run(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(0));
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(listed.lines().count(), names.len(), "{listed}");
    for page in [
        "lowlat.1",
        "lowlat-serve.1",
        "lowlat-load.1",
        "lowlat-bench.1",
    ] {
        assert!(names.iter().any(|n| n == page), "{page} not in {names:?}");
    }
    for name in &names {
        let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
        for line in text.lines().filter(|l| l.ends_with("(1)")) {
            let referred = format!("{}.1", line.trim_end_matches("(1)").replace("\\-", "-"));
            assert!(
                names.contains(&referred),
                "{name} refers to {line}, not written"
            );
        }
    }
}

/// Each page ends with a SEE ALSO section naming the guides for its command, and every guide
/// it names is a file of the source tree; `--help` says what serve and load speak today.
#[test]
fn man_pages_name_the_guides() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for (page, guides) in [
        (
            &[][..],
            &[
                "serving",
                "tls",
                "proxy",
                "operations",
                "load",
                "bench",
                "DESIGN",
                "PERFORMANCE",
            ][..],
        ),
        (&["serve"], &["serving", "tls", "proxy", "operations"]),
        (&["load"], &["load"]),
        (&["load", "merge"], &["load"]),
        (&["bench", "compare"], &["bench"]),
    ] {
        let mut args = vec!["man"];
        args.extend_from_slice(page);
        let (code, text) = run(&args);
        assert_eq!(code, Some(0), "{page:?}");
        let see_also = &text[text
            .find(".SH \"SEE ALSO\"")
            .unwrap_or_else(|| panic!("{page:?}: {text}"))..];
        for guide in guides {
            let path = format!("docs/{guide}.md");
            assert!(
                see_also.contains(&format!("\\fB{path}\\fR")),
                "{page:?} lacks {path}: {see_also}"
            );
            assert!(std::path::Path::new(root).join(&path).is_file(), "{path}");
        }
    }
    let (_, top) = run(&["--help"]);
    let serve = top
        .lines()
        .find(|l| l.trim_start().starts_with("serve "))
        .unwrap();
    assert!(
        serve.contains("HTTP/3") && serve.contains("reverse proxy"),
        "{serve}"
    );
    let load = top
        .lines()
        .find(|l| l.trim_start().starts_with("load "))
        .unwrap();
    assert!(
        load.contains("HTTP/3") && load.contains("WebSocket"),
        "{load}"
    );
}

/// The shipped units (the service and its socket) pass `systemd-analyze verify` (with ExecStart
/// pointed at this build).
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
    // The socket unit beside it (socket activation), verified with the service it starts.
    let socket = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/systemd/lowlat.socket"
    ))
    .unwrap();
    assert!(socket.contains("FileDescriptorName=http"));
    let socket_path = dir.path().join("lowlat.socket");
    std::fs::write(&socket_path, socket).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .arg(&socket_path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        !err.contains("lowlat.service:") && !err.contains("lowlat.socket:"),
        "warnings about the units: {err}"
    );
}
