//! The `lowlat bench` command line: exit codes (0 success, 1 failure, 2 usage or invalid spec),
//! `--check` starting nothing, `doctor`, and `report` on a file that is not a results file.

mod common;

use clap::Parser;
use lowlat_bench::cli::{run, BenchArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn code(argv: &[&str]) -> String {
    let cli = Cli::try_parse_from(std::iter::once("lowlat-bench").chain(argv.iter().copied()))
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    format!("{:?}", run(cli.args))
}

fn exit(n: u8) -> String {
    format!("{:?}", std::process::ExitCode::from(n))
}

/// `--check` validates a shipped spec and starts nothing.
#[test]
fn check_validates_without_starting() {
    let spec = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/specs/plaintext.toml"
    );
    assert_eq!(code(&["--check", spec]), exit(0));
}

/// An invalid spec is a usage error (2); a results file that is not one is a failure (1).
#[test]
fn exit_codes() {
    let dir = common::scratch("cli");
    let bad = common::write_spec(&dir, "bad.toml", "[run]\nduration = \"forever\"\n");
    assert_eq!(code(&["--check", bad.to_str().unwrap()]), exit(2));
    assert_eq!(code(&["--check", "/nonexistent.toml"]), exit(2));
    let junk = common::write_spec(&dir, "results.json", "{\"not\": \"results\"}");
    assert_eq!(code(&["report", junk.to_str().unwrap()]), exit(1));
    // A --level the results do not have is refused, not replaced by another.
    let results = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/results/plaintext/results.json"
    );
    let out = dir.join("report");
    let out = out.to_str().unwrap();
    let report = |level: &str| {
        code(&[
            "report", results, "--level", level, "--out", out, "--no-png",
        ])
    };
    assert_eq!(report("7"), exit(1));
    assert_eq!(report("256"), exit(0));
}

/// `--check` expands every target's variables, reads its templates and finds its working
/// directory, so that a mistake in any target is reported before a run starts any of them.
#[test]
fn check_prepares_every_target() {
    let dir = common::scratch("cli-preflight");
    std::fs::write(dir.join("ok.conf.in"), "port ${port}\n").unwrap();
    let spec = |target: &str| {
        format!(
            "name = \"pre\"\n[vars]\nport = \"18999\"\n[run]\nlevels = [1]\nduration = \"1s\"\n\
             [[target]]\nname = \"first\"\ncommand = [\"true\"]\nurl = \"http://127.0.0.1:${{port}}\"\n\
             [[target]]\nname = \"second\"\nurl = \"http://127.0.0.1:18998\"\n{target}\n\
             [[scenario]]\nname = \"s\"\npath = \"/\"\n"
        )
    };
    let check = |name: &str, target: &str| {
        let path = common::write_spec(&dir, name, &spec(target));
        code(&["--check", path.to_str().unwrap()])
    };
    let good = "command = [\"true\", \"${run_dir}\"]\ncwd = \"${spec_dir}\"\n\
                templates = { \"a.conf\" = \"${spec_dir}/ok.conf.in\" }";
    assert_eq!(check("good.toml", good), exit(0));
    for (name, target) in [
        (
            "undefined.toml",
            "command = [\"true\", \"${undefined_thing}\"]",
        ),
        (
            "template.toml",
            "command = [\"true\"]\ntemplates = { \"a.conf\" = \"/nonexistent/t.in\" }",
        ),
        ("cwd.toml", "command = [\"true\"]\ncwd = \"/nonexistent\""),
        (
            "env.toml",
            "command = [\"true\"]\nenv = { A = \"${nope}\" }",
        ),
    ] {
        assert_ne!(check(name, target), exit(0), "{name}");
    }
}

/// `--check` prepares every service as it does every target — its command, its templates, its
/// address once expanded — and a target may use a service's address as `${NAME_addr}`.
#[test]
fn check_prepares_every_service() {
    let dir = common::scratch("cli-service");
    let spec = |service: &str, target_arg: &str| {
        format!(
            "name = \"svc\"\n[vars]\nup_port = \"18997\"\n[run]\nlevels = [1]\nduration = \"1s\"\n\
             [[service]]\nname = \"up\"\ncpus = [0]\n{service}\n\
             [[target]]\nname = \"t\"\ncommand = [\"true\", \"{target_arg}\"]\nurl = \"http://127.0.0.1:18996\"\n\
             [[scenario]]\nname = \"s\"\npath = \"/\"\n"
        )
    };
    let check = |name: &str, service: &str, target_arg: &str| {
        let path = common::write_spec(&dir, name, &spec(service, target_arg));
        code(&["--check", path.to_str().unwrap()])
    };
    let good =
        "command = [\"true\", \"${up_port}\", \"${run_dir}\"]\naddr = \"127.0.0.1:${up_port}\"";
    assert_eq!(
        check("good.toml", good, "--proxy=/up/=http://${up_addr}"),
        exit(0)
    );
    for (name, service, target_arg) in [
        ("target-var.toml", good, "${down_addr}"),
        (
            "command.toml",
            "command = [\"true\", \"${nope}\"]\naddr = \"127.0.0.1:1\"",
            "",
        ),
        (
            "addr-var.toml",
            "command = [\"true\"]\naddr = \"127.0.0.1:${nope}\"",
            "",
        ),
        (
            "addr-shape.toml",
            "command = [\"true\"]\naddr = \"${up_port}\"",
            "",
        ),
        (
            "template.toml",
            "command = [\"true\"]\naddr = \"127.0.0.1:1\"\ntemplates = { \"u.conf\" = \"/nonexistent/u.in\" }",
            "",
        ),
    ] {
        assert_eq!(check(name, service, target_arg), exit(1), "{name}");
    }
}

/// `doctor` runs every check; it fails (1) only when a check fails.
#[test]
fn doctor_runs() {
    let c = code(&["doctor"]);
    assert!(c == exit(0) || c == exit(1), "{c}");
}

/// `report` and `doctor` are subcommands; a spec and a subcommand together are refused.
#[test]
fn subcommands_parse() {
    assert!(Cli::try_parse_from([
        "x",
        "report",
        "r.json",
        "--baseline",
        "nginx",
        "--level",
        "256",
        "--no-png"
    ])
    .is_ok());
    assert!(Cli::try_parse_from(["x", "doctor", "s.toml"]).is_ok());
    assert!(
        Cli::try_parse_from(["x"]).is_err(),
        "a spec or a subcommand is required"
    );
}

/// `--levels`, `--rounds` and `--duration` replace the spec's settings in every scenario, and
/// the spec text recorded in the results says so; bad values are refused before anything runs.
#[test]
fn run_overrides() {
    let spec_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/specs/static-100b.toml"
    );
    let cli = Cli::try_parse_from([
        "x",
        spec_path,
        "--levels",
        "16, 256,0-1000/500",
        "--rounds",
        "1",
        "--duration",
        "1500ms",
    ])
    .unwrap();
    let mut spec = lowlat_bench::spec::load(std::path::Path::new(spec_path)).unwrap();
    assert!(
        spec.run.levels.len() > 50,
        "the shipped sweep is 10–1000 step 10"
    );
    cli.args.apply_overrides(&mut spec);
    assert_eq!(spec.run.levels, [16, 256, 500, 1000]);
    assert!(spec
        .scenarios
        .iter()
        .all(|s| s.levels == [16, 256, 500, 1000]));
    assert_eq!(spec.run.rounds, 1);
    assert_eq!(spec.run.duration, std::time::Duration::from_millis(1500));
    assert!(
        spec.text
            .ends_with("--levels 16,256,500,1000 --rounds 1 --duration 1.5s\n"),
        "{}",
        spec.text
    );
    assert_eq!(
        code(&["--check", spec_path, "--levels", "16,1024"]),
        exit(0)
    );

    for bad in [
        ["--levels", "0"],
        ["--levels", "abc"],
        ["--levels", "1000-10/10"],
        ["--levels", "10-100/0"],
        ["--levels", "2000000"],
        ["--rounds", "0"],
        ["--duration", "0s"],
        ["--duration", "forever"],
    ] {
        assert!(
            Cli::try_parse_from(["x", spec_path, bad[0], bad[1]]).is_err(),
            "{bad:?} accepted"
        );
    }
}
