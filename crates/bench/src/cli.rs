//! Command-line arguments of `lowlat bench`, its subcommands (`report`, `doctor`), and the
//! turning of every error into one line on stderr with an exit code: 0 success, 1 failure
//! (including an interrupted run and a failed environment check), 2 usage (bad flags or an
//! invalid spec).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::error::BenchError;
use crate::report::ReportOptions;
use crate::runner::RunOptions;

/// Arguments of `lowlat bench`.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  lowlat bench bench/specs/plaintext.toml\n  lowlat bench report bench-results/plaintext-20240501-120000/results.json\n  lowlat bench doctor bench/specs/static-100b.toml"
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
}

/// `lowlat bench` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Draw charts (SVG, PNG) and an HTML page from a results file.
    Report(ReportArgs),
    /// Check the kernel and process settings a sweep needs.
    Doctor(DoctorArgs),
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
}

/// Runs `lowlat bench`; returns the process exit code.
#[must_use]
pub fn run(args: BenchArgs) -> ExitCode {
    let result = match args.command {
        Some(BenchCommand::Report(r)) => report(&r),
        Some(BenchCommand::Doctor(d)) => doctor(&d),
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

fn report(r: &ReportArgs) -> Result<ExitCode, BenchError> {
    let opts = ReportOptions {
        out_dir: r.out.clone(),
        baseline: r.baseline.clone(),
        level: r.level,
        png: !r.no_png,
    };
    let files = crate::report::render(&r.results, &opts)?;
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
    let needs = match &d.spec {
        Some(p) => crate::doctor::Needs::of(&crate::spec::load(p)?),
        None => crate::doctor::Needs::default_sweep(),
    };
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
    let spec = crate::spec::load(path)?;
    if args.check {
        print!("{}", plan_text(&spec));
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
        println!("report: {}", files.html.display());
    }
    Ok(ExitCode::SUCCESS)
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
            "  scenario {}: {} {} pipeline {} keepalive {} targets {} levels {:?}",
            sc.name,
            sc.method,
            sc.path,
            sc.pipeline,
            sc.keepalive,
            sc.targets.join(","),
            sc.levels
        );
    }
    s
}
