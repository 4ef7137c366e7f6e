//! Command-line arguments of `lowlat serve`.

/// Arguments of `lowlat serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {}

/// Runs `lowlat serve`; returns the process exit code.
#[must_use]
pub fn run(_args: ServeArgs) -> std::process::ExitCode {
    std::process::ExitCode::from(1)
}
