//! Command-line arguments of `lowlat bench`.

/// Arguments of `lowlat bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

/// Runs `lowlat bench`; returns the process exit code.
#[must_use]
pub fn run(_args: BenchArgs) -> std::process::ExitCode {
    eprintln!("lowlat bench: not available yet");
    std::process::ExitCode::from(1)
}
