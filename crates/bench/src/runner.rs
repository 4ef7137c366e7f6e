//! The sweep: for each target, start it, wait until it is ready, and for each scenario it
//! serves run a warm-up and then every level × round, measuring with the sampler while the
//! load driver runs; write each row as soon as it is measured; stop the target. A progress bar
//! with an ETA covers the whole sweep.
//!
//! Targets are started one at a time and always stopped ([`RunningTarget`] stops on drop), on
//! success, on error and on Ctrl-C (the `stop` flag ends the current measurement early; its
//! partial row is discarded). The spec's services are started before the first target and
//! stopped after the last, the same way ([`RunningServices`]); a service that exits stops the
//! sweep, and the CPU its processes use is not counted as a neighbour's.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::doctor::{self, Needs};
use crate::error::BenchError;
use crate::load::{LoadDriver, LoadOutcome, LoadPlan};
use crate::machine::Machine;
use crate::procfs;
use crate::results::{self, BoundBy, Header, Row, Writer};
use crate::sampler::{Measured, Sampler, Watch};
use crate::service::{self, RunningServices};
use crate::spec::{Scenario, Spec, Target};
use crate::syscalls::{SyscallCounters, Tracepoints, Unavailable};
use crate::target::{preflight, target_vars, RunningTarget};

/// How a sweep is run (beyond the spec).
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where results.json, results.csv and the targets' logs go.
    pub out_dir: PathBuf,
    /// Draw the progress bar (on stderr, when it is a terminal).
    pub progress: bool,
    /// Run even when the environment check fails.
    pub force: bool,
    /// Count the server's instructions and cycles per request (`--perf-counters`).
    pub perf_counters: bool,
    /// Count the server's system calls by kind through the kernel's syscall tracepoints (on
    /// unless `--no-syscalls`).
    pub syscalls: bool,
    /// Where tracefs is mounted, when not at one of [`crate::syscalls::TRACEFS_DIRS`] (`--tracefs`).
    pub tracefs: Option<PathBuf>,
}

/// Warm-up connections: enough to touch every worker's code paths, few enough not to need the
/// tuning the higher levels need.
const WARMUP_CONNECTIONS: u32 = 64;

/// Runs the whole sweep; returns the path of results.json.
///
/// # Errors
/// The first thing that stopped the sweep; rows measured before it are kept in the files.
pub fn run(
    spec: &Spec,
    driver: &dyn LoadDriver,
    opts: &RunOptions,
    stop: &AtomicBool,
) -> Result<PathBuf, BenchError> {
    let out = &opts.out_dir;
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, e))?;
    let out = out.canonicalize().map_err(|e| BenchError::io(out, e))?;
    let max_conns = spec
        .scenarios
        .iter()
        .flat_map(|s| s.levels.iter().copied())
        .max()
        .unwrap_or(1);
    // Started targets inherit this limit, so raise it before anything starts. Beyond the
    // connections: the syscall counters, one descriptor per counted call per server thread.
    let _ = crate::sys::raise_nofile(u64::from(max_conns) + 4096);

    let machine = Machine::detect();
    let mut needs = Needs::of(spec);
    needs.syscalls = opts.syscalls.then(|| opts.tracefs.clone());
    let checks = doctor::run(&needs, &machine);
    let pb = progress_bar(spec, opts.progress);
    if doctor::has_failures(&checks) {
        let failed: Vec<&str> = checks
            .iter()
            .filter(|c| c.status == doctor::Status::Fail)
            .map(|c| c.name.as_str())
            .collect();
        if !opts.force {
            pb.finish_and_clear();
            eprint!("{}", doctor::render(&checks));
            return Err(BenchError::Doctor(failed.join(", ")));
        }
        say(
            &pb,
            format!(
                "environment check failed ({}); running anyway (--force)",
                failed.join(", ")
            ),
        );
    }
    let vars = spec.vars();
    let spec_dir = spec
        .spec_dir
        .canonicalize()
        .unwrap_or(spec.spec_dir.clone());
    let services = spec
        .services
        .iter()
        .map(|sv| {
            let dir = service::run_dir(&out, sv);
            service::record(sv, &service::service_vars(&vars, &spec_dir, &dir, &out))
        })
        .collect();
    let header = Header {
        format: results::FORMAT.into(),
        lowlat_version: env!("CARGO_PKG_VERSION").into(),
        started: results::now_utc(),
        spec_name: spec.name.clone(),
        spec_description: spec.description.clone(),
        spec_file: spec.file.display().to_string(),
        spec_text: spec.text.clone(),
        baseline: spec.run.baseline.clone(),
        targets: spec.targets.iter().map(|t| t.name.clone()).collect(),
        services,
        scenarios: spec.scenarios.iter().map(|s| s.name.clone()).collect(),
        machine: machine.clone(),
        doctor: checks,
        duration_s: spec.run.duration.as_secs_f64(),
        rounds: spec.run.rounds,
    };
    let mut writer = Writer::create(&out, &header)?;
    let outcome = sweep(
        spec,
        driver,
        &out,
        &machine,
        &mut writer,
        &pb,
        stop,
        max_conns,
        opts,
    );
    pb.finish_and_clear();
    match outcome {
        Ok(()) => {
            writer.finish("complete")?;
            Ok(writer.json_path().to_path_buf())
        }
        Err(e) => {
            let status = if matches!(e, BenchError::Interrupted { .. }) {
                "interrupted".to_string()
            } else {
                format!("failed: {e}")
            };
            let _ = writer.finish(&status);
            Err(e)
        }
    }
}

fn progress_bar(spec: &Spec, show: bool) -> ProgressBar {
    let total: u64 = spec
        .scenarios
        .iter()
        .map(|s| (s.targets.len() * s.levels.len()) as u64 * u64::from(spec.run.rounds))
        .sum();
    let pb = ProgressBar::with_draw_target(
        Some(total),
        if show {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        },
    );
    if let Ok(style) = ProgressStyle::with_template(
        "{elapsed_precise} [{wide_bar}] {pos}/{len} ETA {eta_precise}  {msg}",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename these
fn sweep(
    spec: &Spec,
    driver: &dyn LoadDriver,
    out: &Path,
    machine: &Machine,
    writer: &mut Writer,
    pb: &ProgressBar,
    stop: &AtomicBool,
    max_conns: u32,
    opts: &RunOptions,
) -> Result<(), BenchError> {
    let mut perf = PerfState {
        on: opts.perf_counters,
        said: false,
    };
    let tracepoints = opts
        .syscalls
        .then(|| Tracepoints::find(opts.tracefs.as_deref()));
    let spec_dir = spec
        .spec_dir
        .canonicalize()
        .map_err(|e| BenchError::io(&spec.spec_dir, e))?;
    let vars = spec.vars();
    // Every target's and service's variables, templates and directories, before the first
    // one starts.
    for target in &spec.targets {
        let run_dir = out.join("run").join(&target.name);
        preflight(
            target,
            &target_vars(&vars, &spec_dir, &run_dir, out, &target.name),
        )?;
    }
    for sv in &spec.services {
        let run_dir = service::run_dir(out, sv);
        service::preflight(sv, &service::service_vars(&vars, &spec_dir, &run_dir, out))?;
    }
    if !spec.services.is_empty() {
        pb.set_message("starting services");
    }
    let mut services = RunningServices::start(spec, &vars, &spec_dir, out, stop)?;
    for (sv, running) in spec.services.iter().zip(services.iter()) {
        writer.add_target_check(service_check(sv, running, spec))?;
    }
    for target in &spec.targets {
        let scenarios: Vec<&Scenario> = spec
            .scenarios
            .iter()
            .filter(|s| s.targets.contains(&target.name))
            .collect();
        if scenarios.is_empty() {
            continue;
        }
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted {
                out: out.to_path_buf(),
            });
        }
        let run_dir = out.join("run").join(&target.name);
        std::fs::create_dir_all(&run_dir).map_err(|e| BenchError::io(&run_dir, e))?;
        let vars = target_vars(&vars, &spec_dir, &run_dir, out, &target.name);
        pb.set_message(format!("starting {}", target.name));
        let mut running = RunningTarget::start(target, &vars, &run_dir)?;
        running.wait_ready(&target.ready, target.ready_timeout, stop, out)?;
        services.check_alive()?;
        writer.add_target_check(doctor::target_nofile(
            &target.name,
            procfs::nofile_of(running.pid),
            u64::from(max_conns) + 256,
        ))?;
        // Opened once the target is ready, so that every thread it has is counted; threads it
        // starts later are counted through `inherit`.
        let counters = tracepoints.as_ref().map(|tp| {
            let tp = tp.as_ref().map_err(Clone::clone)?;
            SyscallCounters::open(tp, running.pid).map(|c| (c, tp))
        });
        if let Some(c) = &counters {
            writer.add_target_check(syscall_check(&target.name, c))?;
            if let Err(why) = c {
                say(
                    pb,
                    format!(
                        "  {}: system calls not counted: {} (fix: {})",
                        target.name, why.reason, why.fix
                    ),
                );
            }
        }
        let counters = counters.map(|c| c.map(|(c, _)| c));
        let cores = Cores::of(target, &running, spec, machine);
        for scenario in scenarios {
            run_scenario(
                &mut perf,
                counters.as_ref(),
                spec,
                driver,
                target,
                &mut running,
                &mut services,
                scenario,
                &cores,
                writer,
                pb,
                stop,
                out,
            )?;
        }
        running.stop();
    }
    services.stop();
    Ok(())
}

/// The record of a running service in the results: where it runs, and that it is not measured.
fn service_check(sv: &crate::spec::Service, running: &RunningTarget, spec: &Spec) -> doctor::Check {
    let cpus = &sv.process.cpus;
    let beside = if cpus.iter().any(|c| spec.loader.cpus.contains(c)) {
        " (shared with the loader: its busy share counts both)"
    } else {
        ""
    };
    doctor::Check {
        name: format!("service ({})", sv.process.name),
        value: format!(
            "pid {} on {}, CPUs {cpus:?}{beside}",
            running.pid,
            running.url.trim_start_matches("http://")
        ),
        need: "not measured: its CPU is neither the server's nor a neighbour's".into(),
        status: doctor::Status::Info,
        fix: None,
    }
}

/// The record of how a target's system calls were counted, or why they were not.
fn syscall_check(
    target: &str,
    counters: &Result<(SyscallCounters, &Tracepoints), Unavailable>,
) -> doctor::Check {
    let name = format!("syscall counts ({target})");
    let need = "the kernel's syscall tracepoints through perf_event_open".to_string();
    match counters {
        Ok((c, tp)) => doctor::Check {
            name,
            value: format!("{} on {} thread(s)", tp.describe(), c.threads()),
            need,
            status: doctor::Status::Ok,
            fix: None,
        },
        Err(why) => doctor::Check {
            name,
            value: why.reason.clone(),
            need,
            status: doctor::Status::Warn,
            fix: Some(why.fix.clone()),
        },
    }
}

/// Which cores count as the server's and the loader's.
struct Cores {
    server: Vec<usize>,
    loader: Vec<usize>,
    /// The server's share is judged on its pinned cores; unpinned, on its process CPU.
    server_pinned: bool,
    loader_pinned: bool,
}

impl Cores {
    fn of(target: &Target, running: &RunningTarget, spec: &Spec, machine: &Machine) -> Self {
        let all: Vec<usize> = (0..machine.cpus).collect();
        let loader = if spec.loader.cpus.is_empty() {
            all.clone()
        } else {
            spec.loader.cpus.clone()
        };
        let server = if !target.cpus.is_empty() {
            target.cpus.clone()
        } else {
            let allowed = procfs::cpus_allowed(running.pid).unwrap_or_else(|| all.clone());
            let rest: Vec<usize> = allowed
                .iter()
                .copied()
                .filter(|c| !spec.loader.cpus.contains(c))
                .filter(|c| !spec.services.iter().any(|s| s.process.cpus.contains(c)))
                .collect();
            if rest.is_empty() {
                allowed
            } else {
                rest
            }
        };
        Self {
            server,
            loader,
            server_pinned: !target.cpus.is_empty(),
            loader_pinned: !spec.loader.cpus.is_empty(),
        }
    }
}

#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename these
/// `--perf-counters`: asked for, and whether their absence was already said.
struct PerfState {
    on: bool,
    said: bool,
}

#[allow(clippy::too_many_arguments)] // one call site
fn run_scenario(
    perf: &mut PerfState,
    syscalls: Option<&Result<SyscallCounters, Unavailable>>,
    spec: &Spec,
    driver: &dyn LoadDriver,
    target: &Target,
    running: &mut RunningTarget,
    services: &mut RunningServices,
    scenario: &Scenario,
    cores: &Cores,
    writer: &mut Writer,
    pb: &ProgressBar,
    stop: &AtomicBool,
    out: &Path,
) -> Result<(), BenchError> {
    let url = format!("{}{}", running.url.trim_end_matches('/'), scenario.path);
    let tls = lowlat_load::TlsOptions {
        resume: scenario.tls_resume,
        ..running.tls.clone()
    };
    let plan_for = |connections: u32, duration: Duration| LoadPlan {
        url: url.clone(),
        threads: spec.loader.threads as usize,
        connections: connections as usize,
        duration,
        pipeline: scenario.h2.or(scenario.h3).unwrap_or(scenario.pipeline),
        method: scenario.method.clone(),
        headers: scenario.headers.clone(),
        body: scenario.body.as_ref().map(|b| b.as_bytes().to_vec()),
        timeout: spec.loader.timeout,
        keepalive: scenario.keepalive,
        pin_cpus: spec.loader.cpus.clone(),
        tls: tls.clone(),
        h2: scenario.h2.is_some(),
        h3: scenario.h3.is_some(),
    };
    let load_err = |connections: u32, message: String| BenchError::Load {
        target: target.name.clone(),
        scenario: scenario.name.clone(),
        connections,
        message,
    };
    let interrupted = || BenchError::Interrupted {
        out: out.to_path_buf(),
    };

    if !spec.run.warmup.is_zero() {
        let level = scenario
            .levels
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .min(WARMUP_CONNECTIONS);
        pb.set_message(format!("{} {}: warm-up", target.name, scenario.name));
        driver
            .run(&plan_for(level, spec.run.warmup), stop)
            .map_err(|m| load_err(level, m))?;
        running.check_alive()?;
        services.check_alive()?;
        pause(spec.run.pause, stop);
    }
    for &level in &scenario.levels {
        for round in 0..spec.run.rounds {
            if stop.load(Ordering::Relaxed) {
                return Err(interrupted());
            }
            pb.set_message(format!(
                "{} {} c={level} round {}",
                target.name,
                scenario.name,
                round + 1
            ));
            let mut attempts = 0;
            let row = loop {
                attempts += 1;
                let (outcome, mut measured, foreign) = measure_once(
                    perf.on,
                    syscalls,
                    driver,
                    &plan_for(level, spec.run.duration),
                    running,
                    services,
                    cores,
                    stop,
                )
                .map_err(|m| load_err(level, m))?;
                if stop.load(Ordering::Relaxed) {
                    return Err(interrupted());
                }
                running.check_alive()?;
                services.check_alive()?;
                if let Some(Err(why)) = &measured.perf {
                    if !perf.said {
                        perf.said = true;
                        say(pb, format!(
                            "  --perf-counters: no instructions or cycles here ({why}); the rows go without them"
                        ));
                        writer.add_target_check(crate::doctor::Check {
                            name: "perf counters".into(),
                            value: why.clone(),
                            need: "hardware counters through perf_event_open (--perf-counters)".into(),
                            status: crate::doctor::Status::Info,
                            fix: Some("run on a machine (or VM) that exposes the CPU's performance counters, with kernel.perf_event_paranoid ≤ 2".into()),
                        })?;
                    }
                    measured.perf = None;
                }
                let row = make_row(
                    target, scenario, level, round, attempts, spec, cores, &outcome, measured,
                    foreign,
                );
                if row.foreign_cpu_pct > spec.run.foreign_max_pct && attempts <= spec.run.retries {
                    say(pb, format!(
                        "  {} {} c={level}: other processes used {:.0}% of a CPU ({}); measuring again",
                        target.name,
                        scenario.name,
                        row.foreign_cpu_pct,
                        row.foreign_top.join(", ")
                    ));
                    pause(spec.run.pause.max(Duration::from_secs(1)), stop);
                    continue;
                }
                break row;
            };
            say(pb, format!(
                "  {:<12} {:<14} c={:<5} req/s={:<10.0} p99={:.2}ms server µs/req={} syscalls/req={} cpu={:.0}% rss={}kB errors={} {}",
                row.target,
                row.scenario,
                row.connections,
                row.rps,
                row.p99_us as f64 / 1000.0,
                row.server_us_per_req.map_or_else(|| "-".into(), |v| format!("{v:.2}")),
                row.syscalls_per_req.as_ref().map_or_else(|| "-".into(), |s| format!("{:.2}", s.total)),
                row.server_cpu_pct,
                row.rss_peak_kb,
                row.errors,
                row.bound_by.as_str()
            ));
            writer.add(&row)?;
            pb.inc(1);
            pause(spec.run.pause, stop);
        }
    }
    Ok(())
}

/// Prints a line above the progress bar, or plainly to stderr when there is no bar (not a
/// terminal, or `--quiet`), so that a log of the run shows every row either way.
fn say(pb: &ProgressBar, line: String) {
    if pb.is_hidden() {
        eprintln!("{line}");
    } else {
        pb.println(line);
    }
}

/// Sleeps, waking early when asked to stop.
fn pause(d: Duration, stop: &AtomicBool) {
    let end = Instant::now() + d;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20).min(end - Instant::now()));
    }
}

/// CPU used by other processes during a measurement: (% of one CPU, top users).
type Foreign = (f64, Vec<String>);

#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename these
fn measure_once(
    perf_counters: bool,
    syscalls: Option<&Result<SyscallCounters, Unavailable>>,
    driver: &dyn LoadDriver,
    plan: &LoadPlan,
    running: &RunningTarget,
    services: &RunningServices,
    cores: &Cores,
    stop: &AtomicBool,
) -> Result<(LoadOutcome, Measured, Foreign), String> {
    let a0 = procfs::all_user_ticks();
    let cpu0 = crate::sys::self_cpu_us();
    // Read just outside the sampler and the load, so the window covers the whole measurement.
    let sys0 = syscalls.map(|c| match c {
        Ok(c) => c.read(),
        Err(why) => Err(why.reason.clone()),
    });
    let sampler = Sampler::start(Watch {
        root: running.pid,
        rss_exclude: running.rss_exclude.clone(),
        server_cpus: cores.server.clone(),
        loader_cpus: cores.loader.clone(),
        perf: perf_counters,
    });
    let t0 = Instant::now();
    let outcome = driver.run(plan, stop);
    let wall = t0.elapsed();
    let mut measured = sampler.finish();
    measured.syscalls = sys0.map(|before| match syscalls {
        Some(Ok(c)) => Ok(c.read()?.since(&before?)),
        _ => before,
    });
    let cpu1 = crate::sys::self_cpu_us();
    let a1 = procfs::all_user_ticks();
    let mut outcome = outcome?;
    if outcome.client_cpu.is_zero() {
        outcome.client_cpu = Duration::from_micros(cpu1.saturating_sub(cpu0));
    }
    // Neither the server's, nor the loader's (this process), nor the services' is a neighbour's.
    let mut exclude = measured.pids.clone();
    exclude.push(std::process::id());
    exclude.extend(services.pids());
    let (ticks, top) = procfs::foreign_ticks(&a0, &a1, &exclude);
    let hz = crate::sys::clock_ticks() as f64;
    let pct = 100.0 * ticks as f64 / hz / wall.as_secs_f64().max(1e-3);
    let top = top
        .into_iter()
        .map(|(t, c)| {
            format!(
                "{c} {:.0}%",
                100.0 * t as f64 / hz / wall.as_secs_f64().max(1e-3)
            )
        })
        .collect();
    Ok((outcome, measured, (pct, top)))
}

#[allow(clippy::too_many_arguments)] // one call site; a struct would only rename these
fn make_row(
    target: &Target,
    scenario: &Scenario,
    level: u32,
    round: u32,
    attempts: u32,
    spec: &Spec,
    cores: &Cores,
    o: &LoadOutcome,
    m: Measured,
    foreign: Foreign,
) -> Row {
    let secs = o.elapsed.as_secs_f64().max(1e-9);
    let wall = m.wall.as_secs_f64().max(1e-9);
    let per_req =
        |d: Duration| (o.responses > 0).then(|| d.as_secs_f64() * 1e6 / o.responses as f64);
    let server_cpu_pct = 100.0 * m.tree_cpu.as_secs_f64() / wall;
    let client_cpu_pct = 100.0 * o.client_cpu.as_secs_f64() / secs;
    let loader_sat = if cores.loader_pinned {
        m.loader_cores_pct
    } else {
        client_cpu_pct / f64::from(spec.loader.threads)
    };
    let server_sat = if cores.server_pinned {
        m.server_cores_pct
    } else {
        server_cpu_pct / cores.server.len().max(1) as f64
    };
    let h = &o.latency_us;
    Row {
        target: target.name.clone(),
        scenario: scenario.name.clone(),
        connections: level,
        round,
        pipeline: scenario.h2.or(scenario.h3).unwrap_or(scenario.pipeline),
        keepalive: scenario.keepalive,
        seconds: secs,
        requests: o.responses,
        rps: o.rps(),
        mb_s: o.bytes as f64 / secs / 1e6,
        p50_us: h.value_at_quantile(0.50),
        p90_us: h.value_at_quantile(0.90),
        p99_us: h.value_at_quantile(0.99),
        p999_us: h.value_at_quantile(0.999),
        max_us: h.max(),
        mean_us: h.mean(),
        errors: o.error_total(),
        errors_by_kind: o.errors.clone(),
        status_classes: o.status_classes,
        server_cpu_pct,
        server_us_per_req: per_req(m.server_cores_busy),
        server_proc_us_per_req: per_req(m.tree_cpu),
        server_cores: cores.server.clone(),
        server_cores_pct: m.server_cores_pct,
        loader_cores: cores.loader.clone(),
        loader_cores_pct: m.loader_cores_pct,
        rss_peak_kb: m.rss_peak_kb,
        rss_mean_kb: m.rss_mean_kb,
        client_cpu_pct,
        foreign_cpu_pct: foreign.0,
        foreign_top: foreign.1,
        bound_by: BoundBy::decide(loader_sat, server_sat),
        attempts,
        instructions_per_req: match m.perf {
            Some(Ok((i, _))) if o.responses > 0 => Some(i as f64 / o.responses as f64),
            _ => None,
        },
        cycles_per_req: match m.perf {
            Some(Ok((_, c))) if o.responses > 0 => Some(c as f64 / o.responses as f64),
            _ => None,
        },
        kernel_per_req: m.kernel.filter(|_| o.responses > 0).map(|k| {
            let n = o.responses as f64;
            crate::results::KernelPerReq {
                voluntary_switches: k.voluntary_switches as f64 / n,
                involuntary_switches: k.involuntary_switches as f64 / n,
                minor_faults: k.minor_faults as f64 / n,
            }
        }),
        syscalls_per_req: match &m.syscalls {
            Some(Ok(counts)) => counts.per_request(o.responses),
            _ => None,
        },
        syscalls_unavailable: match m.syscalls {
            Some(Err(why)) => Some(why),
            _ => None,
        },
        samples: m.samples,
        tls: o.tls.clone(),
    }
}
