//! `lowlat serve` as a program of its own, with exactly its flags, for lowlat-bench's tests:
//! `cargo test` builds examples, so the sweep test can start a real lowlat server as a
//! separate process without building the whole `lowlat` binary.

use clap::Parser;

#[derive(Parser)]
#[command(name = "lowlat-serve")]
struct Cli {
    #[command(flatten)]
    args: lowlat_server::settings::ServeArgs,
}

fn main() -> std::process::ExitCode {
    lowlat_server::cli::run(Cli::parse().args)
}
