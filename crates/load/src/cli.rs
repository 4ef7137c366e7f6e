//! Command-line arguments of `lowlat load`.

/// Arguments of `lowlat load`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {}

/// Runs `lowlat load`; returns the process exit code.
#[must_use]
pub fn run(_args: LoadArgs) -> std::process::ExitCode {
    eprintln!("lowlat load: not available yet");
    std::process::ExitCode::from(1)
}
