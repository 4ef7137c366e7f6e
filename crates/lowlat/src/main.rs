//! `lowlat`: one binary, three jobs. This file only parses the command line and dispatches;
//! each subcommand's flags and its one-line error reporting live in its own crate, the manual
//! pages in `man`, the guides those pages name in `guides`.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

mod guides;
mod man;

#[derive(Parser)]
#[command(
    name = "lowlat",
    version = env!("LOWLAT_LONG_VERSION"),
    about = "A low-latency HTTP/1.1, HTTP/2 and HTTP/3 server and reverse proxy (clear, TLS, QUIC; \
             automatic HTTPS), a load generator and a benchmark harness"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve HTTP/1.1, HTTP/2 and HTTP/3 (clear, TLS, QUIC): static files and sites, a reverse
    /// proxy, automatic HTTPS (ACME), redirects, the built-in endpoints and the dynamic app.
    Serve(Box<lowlat_server::settings::ServeArgs>),
    /// Generate HTTP/1.1, HTTP/2, HTTP/3 or WebSocket load (wrk's flags and Lua scripts, wrk2's
    /// constant rate, pipelining).
    Load(Box<lowlat_load::cli::LoadArgs>),
    /// Run benchmark sweeps of servers side by side from a spec; report and compare the results.
    Bench(lowlat_bench::cli::BenchArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff): `lowlat man` the top one, `lowlat man load` a command's;
    /// `lowlat man --dir /usr/local/share/man/man1` writes them all.
    Man {
        /// The command whose page to print (serve, load, load merge, bench, …); none: lowlat's.
        #[arg(value_name = "COMMAND", conflicts_with = "dir")]
        command: Vec<String>,
        /// Write every page (lowlat.1, lowlat-serve.1, lowlat-load.1, …) into this directory
        /// instead, and print their paths.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
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
        Command::Man { command, dir } => man::run(
            <Cli as clap::CommandFactory>::command(),
            &command,
            dir.as_deref(),
        ),
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
        Some(sub @ ("serve" | "load" | "bench" | "completions" | "man")) => format!("lowlat {sub}"),
        _ => "lowlat".to_owned(),
    };
    // A value outside a fixed list (`--log-level verbose`, `completions tcsh`): say the list,
    // which clap prints only in the lines dropped above.
    if let Some(clap::error::ContextValue::Strings(accepted)) =
        e.get(clap::error::ContextKind::ValidValue)
    {
        reason = format!("{reason}; accepted values: {}", accepted.join(", "));
    }
    eprintln!("{cmd}: {reason} (see `{cmd} --help`)");
    ExitCode::from(2)
}
