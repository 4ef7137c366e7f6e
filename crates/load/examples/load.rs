//! `lowlat load` as a stand-alone program, for benchmarking the load generator without building
//! the server and the harness: `cargo run --release -p lowlat-load --example load -- -c16 URL`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "lowlat-load")]
struct Cli {
    #[command(flatten)]
    args: lowlat_load::cli::LoadArgs,
}

fn main() -> std::process::ExitCode {
    lowlat_load::cli::run(Cli::parse().args)
}
