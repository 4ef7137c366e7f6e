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
