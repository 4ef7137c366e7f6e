//! `lowlat`: one binary, three jobs. This file only parses the command line and dispatches;
//! each subcommand's flags and its one-line error reporting live in its own crate.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "lowlat",
    version,
    about = "A fast, low-latency HTTP/1.1 server, load generator and benchmark harness"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve HTTP/1.1: built-in endpoints, static files, the dynamic app.
    Serve(lowlat_server::cli::ServeArgs),
    /// Generate HTTP load (wrk's flags, wrk2's constant rate, pipelining).
    Load(lowlat_load::cli::LoadArgs),
    /// Run benchmark sweeps from a spec and render reports.
    Bench(lowlat_bench::cli::BenchArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve(args) => lowlat_server::cli::run(args),
        Command::Load(args) => lowlat_load::cli::run(args),
        Command::Bench(args) => lowlat_bench::cli::run(args),
    }
}
