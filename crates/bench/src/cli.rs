//! Command-line arguments of `lowlat bench`, its subcommands (`report`, `doctor`, `compare`),
//! and the turning of every error into one line on stderr with an exit code: 0 success, 1
//! failure (including an interrupted run and a failed environment check), 2 usage (bad flags or
//! an invalid spec); `compare` adds 3 (a cell is slower) and 4 (no cell could be judged).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crate::error::BenchError;
use crate::report::ReportOptions;
use crate::runner::RunOptions;
use crate::spec::{Spec, MAX_CONNECTIONS, MAX_LEVELS};

/// Arguments of `lowlat bench`.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  lowlat bench bench/specs/plaintext.toml\n  lowlat bench bench/specs/static-100b.toml --levels 16,256,1024 --rounds 1 --duration 5s\n  lowlat bench report bench-results/plaintext-20240501-120000/results.json\n  lowlat bench doctor bench/specs/static-100b.toml"
)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,

    /// The spec to run (TOML; see bench/specs/example.toml).
    #[arg(value_name = "SPEC.toml", required = true)]
    pub spec: Option<PathBuf>,

    /// Where results, logs and the report go [default: bench-results/NAME-DATE-TIME].
    #[arg(short, long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Run even when the environment check fails.
    #[arg(long)]
    pub force: bool,

    /// Only validate the spec and print the plan; start nothing.
    #[arg(long)]
    pub check: bool,

    /// Do not render the report after the run.
    #[arg(long)]
    pub no_report: bool,

    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,

    /// Measure these connection levels in every scenario instead of the spec's
    /// ("16,256,1024", or "100-1000/100" for a range with its step).
    #[arg(long, value_name = "LIST", value_parser = parse_levels)]
    pub levels: Option<Levels>,

    /// Measurements per level instead of the spec's `[run] rounds`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: Option<u32>,

    /// Also count the server's instructions and CPU cycles per request (perf_event_open;
    /// where the machine has no hardware counters, the report says so and goes on).
    #[arg(long)]
    pub perf_counters: bool,

    /// Length of each measurement instead of the spec's `[run] duration` ("5s", "500ms").
    #[arg(long, value_name = "DURATION", value_parser = parse_measure_duration)]
    pub duration: Option<Duration>,

    /// Do not count the server's system calls by kind (kernel tracepoints: while they count,
    /// every system call is dearer, ×1.11 server CPU per request for lowlat's /plaintext).
    #[arg(long)]
    pub no_syscalls: bool,

    /// Where tracefs is mounted [default: /sys/kernel/tracing, then /sys/kernel/debug/tracing].
    #[arg(long, value_name = "DIR", conflicts_with = "no_syscalls")]
    pub tracefs: Option<PathBuf>,
}

/// Connection levels given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Levels(pub Vec<u32>);

fn parse_levels(text: &str) -> Result<Levels, String> {
    let bad = |n: i64| format!("{n} connections: each level must be 1–{MAX_CONNECTIONS}");
    let level = |t: &str| -> Result<u32, String> {
        let n: i64 = t
            .trim()
            .parse()
            .map_err(|_| format!("`{t}` is not a number of connections"))?;
        u32::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_CONNECTIONS).contains(n))
            .ok_or_else(|| bad(n))
    };
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        if let Some((range, step)) = part.split_once('/') {
            let (from, to) = range
                .split_once('-')
                .ok_or_else(|| format!("`{part}`: a range is FROM-TO/STEP"))?;
            let step: u32 = step
                .trim()
                .parse()
                .ok()
                .filter(|s| *s >= 1)
                .ok_or_else(|| format!("`{part}`: the step must be at least 1"))?;
            // As in a spec's range, a range from 0 starts at its first step.
            let from = if from.trim() == "0" {
                step
            } else {
                level(from)?
            };
            let to = level(to)?;
            if to < from {
                return Err(format!("`{part}`: {to} is below {from}"));
            }
            if ((to - from) / step) as usize >= MAX_LEVELS {
                return Err(format!("more than {MAX_LEVELS} levels"));
            }
            out.extend((from..=to).step_by(step as usize));
        } else {
            out.push(level(part)?);
        }
        if out.len() > MAX_LEVELS {
            return Err(format!("more than {MAX_LEVELS} levels"));
        }
    }
    if out.is_empty() {
        return Err("no connection levels".into());
    }
    Ok(Levels(out))
}

fn parse_measure_duration(text: &str) -> Result<Duration, String> {
    crate::spec::parse_duration(text)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("`{text}` is not a duration above 0 (10s, 500ms, 2m)"))
}

impl BenchArgs {
    /// Applies `--levels`, `--rounds` and `--duration` to a loaded spec, and notes them at the
    /// end of the spec's text, so that results and reports say what was actually run.
    pub fn apply_overrides(&self, spec: &mut Spec) {
        let mut note = Vec::new();
        if let Some(Levels(levels)) = &self.levels {
            spec.run.levels.clone_from(levels);
            for sc in &mut spec.scenarios {
                sc.levels.clone_from(levels);
            }
            let list: Vec<String> = levels.iter().map(u32::to_string).collect();
            note.push(format!("--levels {}", list.join(",")));
        }
        if let Some(rounds) = self.rounds {
            spec.run.rounds = rounds;
            note.push(format!("--rounds {rounds}"));
        }
        if let Some(d) = self.duration {
            spec.run.duration = d;
            note.push(format!("--duration {}s", d.as_secs_f64()));
        }
        if !note.is_empty() {
            if !spec.text.ends_with('\n') {
                spec.text.push('\n');
            }
            spec.text.push_str(&format!(
                "\n# run with, from the command line: {}\n",
                note.join(" ")
            ));
        }
    }
}

/// `lowlat bench` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Draw charts (SVG, PNG) and an HTML page from a results file.
    Report(ReportArgs),
    /// Check the kernel and process settings a sweep needs.
    Doctor(DoctorArgs),
    /// Compare two runs cell by cell (NEW ÷ BASE with intervals; exit 3 when slower, 4 when
    /// no cell could be judged).
    Compare(CompareArgs),
}

/// Arguments of `lowlat bench compare`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status:\n  0  no cell slower beyond the threshold (at least one cell judged)\n  1  a results file could not be read, or the runs are of different specs or machines (without --force)\n  2  usage error\n  3  a cell is slower beyond the threshold\n  4  no cell could be judged: fewer than 3 rounds on a side in every cell (run with --rounds 3 or more), or no cell in common"
)]
pub struct CompareArgs {
    /// The reference run's results.json.
    #[arg(value_name = "BASE.json")]
    pub base: PathBuf,
    /// The run to judge against it.
    #[arg(value_name = "NEW.json")]
    pub new: PathBuf,
    /// Smallest change in cost that counts (5%), beyond the interval.
    #[arg(long, value_name = "RATE", default_value = "5%", value_parser = lowlat_load::thresholds::parse_rate)]
    pub threshold: f64,
    /// Compare runs of different specs or machines anyway.
    #[arg(long)]
    pub force: bool,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write an HTML page: the table and each scenario's charts with both runs on them.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// Arguments of `lowlat bench report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// results.json written by `lowlat bench SPEC.toml`.
    #[arg(value_name = "RESULTS.json")]
    pub results: PathBuf,
    /// Output directory [default: beside the results file].
    #[arg(short, long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Target the ratios compare against [default: the spec's baseline].
    #[arg(long, value_name = "TARGET")]
    pub baseline: Option<String>,
    /// Connection level of the CPU/RSS-over-time charts [default: the highest].
    #[arg(long, value_name = "N")]
    pub level: Option<u32>,
    /// Write SVG charts only.
    #[arg(long)]
    pub no_png: bool,
}

/// Arguments of `lowlat bench doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Check against what this spec needs [default: 1,000 connections, keep-alive and not].
    #[arg(value_name = "SPEC.toml")]
    pub spec: Option<PathBuf>,
    /// Where tracefs is mounted [default: /sys/kernel/tracing, then /sys/kernel/debug/tracing].
    #[arg(long, value_name = "DIR")]
    pub tracefs: Option<PathBuf>,
}

/// Runs `lowlat bench`; returns the process exit code.
#[must_use]
pub fn run(args: BenchArgs) -> ExitCode {
    let result = match args.command {
        Some(BenchCommand::Report(r)) => report(&r),
        Some(BenchCommand::Doctor(d)) => doctor(&d),
        Some(BenchCommand::Compare(c)) => compare(&c),
        None => sweep(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lowlat bench: {e}");
            ExitCode::from(if matches!(e, BenchError::Spec(_)) {
                2
            } else {
                1
            })
        }
    }
}

fn compare(c: &CompareArgs) -> Result<ExitCode, BenchError> {
    let base = crate::results::read(&c.base)?;
    let new = crate::results::read(&c.new)?;
    let notes = crate::compare::compatible(&base, &new, c.force)?;
    let cmp = crate::compare::compare(&base, &new, c.threshold, notes);
    if let Some(path) = &c.html {
        let page = crate::compare::html(
            &base,
            &new,
            &c.base.display().to_string(),
            &c.new.display().to_string(),
            &cmp,
        )?;
        std::fs::write(path, page).map_err(|e| BenchError::io(path, e))?;
    }
    if c.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&cmp).unwrap_or_else(|_| "{}".into())
        );
    } else {
        print!("{}", crate::compare::render_text(&cmp));
    }
    if cmp.regressed() {
        eprintln!(
            "lowlat bench: slower beyond the {:.1}% threshold in {} cell(s)",
            c.threshold * 100.0,
            cmp.cells
                .iter()
                .filter(|x| x.verdict == crate::compare::Verdict::Slower)
                .count()
        );
        return Ok(ExitCode::from(crate::compare::EXIT_SLOWER));
    }
    if let Some(why) = cmp.undecided() {
        eprintln!("lowlat bench: {why}");
        return Ok(ExitCode::from(crate::compare::EXIT_UNDECIDED));
    }
    Ok(ExitCode::SUCCESS)
}

fn report(r: &ReportArgs) -> Result<ExitCode, BenchError> {
    let opts = ReportOptions {
        out_dir: r.out.clone(),
        baseline: r.baseline.clone(),
        level: r.level,
        png: !r.no_png,
    };
    let files = crate::report::render(&r.results, &opts)?;
    print_syscalls(&files);
    println!("report: {}", files.html.display());
    println!(
        "charts: {} SVG, {} PNG in {}",
        files.svg.len(),
        files.png.len(),
        files
            .html
            .parent()
            .map_or_else(String::new, |p| p.join("charts").display().to_string())
    );
    Ok(ExitCode::SUCCESS)
}

fn doctor(d: &DoctorArgs) -> Result<ExitCode, BenchError> {
    let mut needs = match &d.spec {
        Some(p) => crate::doctor::Needs::of(&crate::spec::load(p)?),
        None => crate::doctor::Needs::default_sweep(),
    };
    needs.syscalls = Some(d.tracefs.clone());
    let machine = crate::machine::Machine::detect();
    let checks = crate::doctor::run(&needs, &machine);
    print!("{}", crate::doctor::render(&checks));
    Ok(if crate::doctor::has_failures(&checks) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn sweep(args: &BenchArgs) -> Result<ExitCode, BenchError> {
    let Some(path) = &args.spec else {
        eprintln!("lowlat bench: give a SPEC.toml, or `report` / `doctor`");
        return Ok(ExitCode::from(2));
    };
    let mut spec = crate::spec::load(path)?;
    args.apply_overrides(&mut spec);
    if args.check {
        // The run's own directories do not exist yet; anything under them is made by the run.
        let spec_dir = spec
            .spec_dir
            .canonicalize()
            .unwrap_or(spec.spec_dir.clone());
        let out = std::env::temp_dir().join("lowlat-bench-check");
        let spec_vars = spec.vars();
        for t in &spec.targets {
            let run_dir = out.join("run").join(&t.name);
            let vars = crate::target::target_vars(&spec_vars, &spec_dir, &run_dir, &out, &t.name);
            crate::target::preflight(t, &vars)?;
        }
        for sv in &spec.services {
            let run_dir = crate::service::run_dir(&out, sv);
            let vars = crate::service::service_vars(&spec_vars, &spec_dir, &run_dir, &out);
            crate::service::preflight(sv, &vars)?;
        }
        print!("{}", plan_text(&spec));
        println!("{}", syscall_plan(args));
        return Ok(ExitCode::SUCCESS);
    }
    let out_dir = args.out.clone().unwrap_or_else(|| {
        let stamp = crate::results::now_utc()
            .replace([':', '-'], "")
            .replace('T', "-")
            .trim_end_matches('Z')
            .to_string();
        // The default directory ignores itself, so that runs in a checkout never show up as
        // files to commit; results worth keeping are copied to docs/results/ on purpose.
        let root = PathBuf::from("bench-results");
        if std::fs::create_dir_all(&root).is_ok() && !root.join(".gitignore").exists() {
            let _ = std::fs::write(root.join(".gitignore"), "*\n");
        }
        root.join(format!("{}-{stamp}", spec.name))
    });
    let stop = Arc::new(AtomicBool::new(false));
    // First Ctrl-C: finish cleanly (stop targets, keep rows). Second: exit at once; the
    // targets then get SIGKILL from their parent-death signal.
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop));
        let _ = signal_hook::flag::register(sig, Arc::clone(&stop));
    }
    let opts = RunOptions {
        out_dir,
        progress: !args.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        force: args.force,
        perf_counters: args.perf_counters,
        syscalls: !args.no_syscalls,
        tracefs: args.tracefs.clone(),
    };
    eprintln!(
        "lowlat bench: {} — {} measurements, about {}; results in {}",
        spec.name,
        measurements(&spec),
        human(estimate_secs(&spec)),
        opts.out_dir.display()
    );
    let results = crate::runner::run(&spec, &crate::load::Engine, &opts, &stop)?;
    println!("results: {}", results.display());
    if !args.no_report {
        let files = crate::report::render(
            &results,
            &ReportOptions {
                png: true,
                ..ReportOptions::default()
            },
        )?;
        print_syscalls(&files);
        println!("report: {}", files.html.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The report's syscall table on stdout, ready to paste into Markdown.
fn print_syscalls(files: &crate::report::ReportFiles) {
    if let Some(table) = &files.syscalls {
        println!("system calls per request (kernel tracepoints; medians over rounds):\n{table}");
    }
}

fn measurements(spec: &crate::spec::Spec) -> u64 {
    spec.scenarios
        .iter()
        .map(|s| (s.targets.len() * s.levels.len()) as u64 * u64::from(spec.run.rounds))
        .sum()
}

/// Seconds a sweep takes, roughly: measurements, pauses, warm-ups, and a few seconds per target start.
fn estimate_secs(spec: &crate::spec::Spec) -> f64 {
    let per = spec.run.duration.as_secs_f64() + spec.run.pause.as_secs_f64();
    let warm: usize = spec.scenarios.iter().map(|s| s.targets.len()).sum();
    measurements(spec) as f64 * per
        + warm as f64 * (spec.run.warmup.as_secs_f64() + spec.run.pause.as_secs_f64())
        + spec.targets.len() as f64 * 2.0
}

fn human(secs: f64) -> String {
    if secs >= 3600.0 {
        format!("{:.1} h", secs / 3600.0)
    } else if secs >= 60.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{secs:.0} s")
    }
}

/// What `--check` says about counting system calls: how, or why not and the fix.
fn syscall_plan(args: &BenchArgs) -> String {
    if args.no_syscalls {
        return "  system calls: not counted (--no-syscalls)".into();
    }
    match crate::syscalls::probe(args.tracefs.as_deref()) {
        Ok(tp) => format!(
            "  system calls: counted per request by kind ({})",
            tp.describe()
        ),
        Err(why) => format!(
            "  system calls: cannot be counted here: {}; rows will say so (fix: {})",
            why.reason, why.fix
        ),
    }
}

/// What `--check` prints: the plan, without starting anything.
fn plan_text(spec: &crate::spec::Spec) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "spec {} ({}): {} measurements, about {}",
        spec.name,
        spec.file.display(),
        measurements(spec),
        human(estimate_secs(spec))
    );
    // Started first, so listed first.
    for sv in &spec.services {
        if let crate::spec::Launch::Command { argv, .. } = &sv.process.launch {
            let _ = writeln!(
                s,
                "  service {}: {} at {} cpus {:?} (${{{}}}; not measured)",
                sv.process.name,
                argv.join(" "),
                sv.addr,
                sv.process.cpus,
                sv.addr_var()
            );
        }
    }
    for t in &spec.targets {
        let how = match &t.launch {
            crate::spec::Launch::Command { argv, .. } => argv.join(" "),
            crate::spec::Launch::Pid(p) => format!("pid {p}"),
        };
        let _ = writeln!(
            s,
            "  target {}: {} at {} cpus {:?}",
            t.name, how, t.url, t.cpus
        );
    }
    for sc in &spec.scenarios {
        let _ = writeln!(
            s,
            "  scenario {}: {} {} {} keepalive {} targets {} levels {:?}",
            sc.name,
            sc.method,
            sc.path,
            match (sc.h2, sc.h3) {
                (Some(m), _) => format!("HTTP/2 {m} streams"),
                (_, Some(m)) => format!("HTTP/3 {m} streams"),
                _ => format!("pipeline {}", sc.pipeline),
            },
            sc.keepalive,
            sc.targets.join(","),
            sc.levels
        );
    }
    s
}
