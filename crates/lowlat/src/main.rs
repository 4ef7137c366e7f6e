//! `lowlat`: one binary, three jobs. This file only parses the command line and dispatches;
//! each subcommand's flags and its one-line error reporting live in its own crate.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "lowlat",
    version = env!("LOWLAT_LONG_VERSION"),
    about = "A fast, low-latency HTTP/1.1 server, load generator and benchmark harness"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve HTTP/1.1: built-in endpoints, static files, the dynamic app.
    Serve(Box<lowlat_server::settings::ServeArgs>),
    /// Generate HTTP load (wrk's flags and Lua scripts, wrk2's constant rate, pipelining).
    Load(Box<lowlat_load::cli::LoadArgs>),
    /// Run benchmark sweeps from a spec and render reports.
    Bench(lowlat_bench::cli::BenchArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `lowlat man > /usr/local/share/man/man1/lowlat.1`.
    Man,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    match cli.command {
        Command::Serve(args) => lowlat_server::cli::run(*args),
        Command::Load(args) => lowlat_load::cli::run(*args),
        Command::Bench(args) => lowlat_bench::cli::run(args),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "lowlat", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man => {
            let cmd = <Cli as clap::CommandFactory>::command();
            match clap_mangen::Man::new(cmd).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("lowlat man: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// Help and version go out as clap writes them; a usage error becomes one line on stderr
/// (clap's first line, which names the flag and the reason, without its tips and usage block)
/// and exit code 2.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return if e.use_stderr() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("invalid arguments");
    let mut reason = first.strip_prefix("error: ").unwrap_or(first).to_owned();
    if reason.ends_with(':') {
        // "the following required arguments were not provided:" — the next line names them.
        if let Some(what) = lines.next() {
            reason = format!("{reason} {what}");
        }
    }
    let mut words = std::env::args().skip(1).take(1);
    let cmd = match words.next().as_deref() {
        Some(sub @ ("serve" | "load" | "bench")) => format!("lowlat {sub}"),
        _ => "lowlat".to_owned(),
    };
    eprintln!("{cmd}: {reason} (see `{cmd} --help`)");
    ExitCode::from(2)
}
