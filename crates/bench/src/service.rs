//! Services: the processes a spec's targets need but that are not measured (`[[service]]`) — the
//! upstream behind a reverse proxy, an origin behind a cache. They are started once, in spec
//! order, before the first target, each pinned to its CPUs and waited for until its readiness
//! check passes; they serve every target's measurements and are stopped, in reverse order,
//! after the last one, on an error and on Ctrl-C ([`RunningServices`] stops them when dropped;
//! the kernel kills them when `lowlat bench` itself is killed).
//!
//! What they cost stays out of the figures: their CPUs are never a target's (the spec refuses
//! that), and the runner leaves their processes out of the CPU it charges to neighbours. A
//! service beside the loader shares the loader's core, whose busy share then counts both.
//!
//! Starting, the readiness check and stopping are a target's ([`RunningTarget`]); this module
//! adds the order, the variables and the record of what ran.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use crate::error::BenchError;
use crate::results::ServiceRecord;
use crate::spec::{check_addr, expand, Launch, Readiness, Service, Spec};
use crate::target::{preflight as preflight_process, socket_addr, RunningTarget};

/// The variables a service's fields may use: the spec's (`[vars]` and every service's
/// `${NAME_addr}`, see [`Spec::vars`]) and the run's own `${spec_dir}`, `${run_dir}` (its own
/// directory) and `${out_dir}`.
#[must_use]
pub fn service_vars(
    spec_vars: &BTreeMap<String, String>,
    spec_dir: &Path,
    run_dir: &Path,
    out_dir: &Path,
) -> BTreeMap<String, String> {
    let mut vars = spec_vars.clone();
    vars.insert("spec_dir".into(), spec_dir.display().to_string());
    vars.insert("run_dir".into(), run_dir.display().to_string());
    vars.insert("out_dir".into(), out_dir.display().to_string());
    vars
}

/// Where a service's log and rendered templates go: `OUT/run/NAME`, as a target's.
#[must_use]
pub fn run_dir(out: &Path, service: &Service) -> std::path::PathBuf {
    out.join("run").join(&service.process.name)
}

/// What can be checked without starting the service: every `${var}` of its command, working
/// directory, environment and templates (as for a target), and its address, expanded, is a
/// `host:port` that resolves.
///
/// # Errors
/// [`BenchError::Prepare`] naming the service and the field.
pub fn preflight(service: &Service, vars: &BTreeMap<String, String>) -> Result<(), BenchError> {
    preflight_process(&service.process, vars)?;
    let prep = |message: String| BenchError::Prepare {
        role: service.process.role,
        target: service.process.name.clone(),
        message: format!("addr: {message}"),
    };
    let addr = expand(&service.addr, vars).map_err(prep)?;
    check_addr(&addr).map_err(prep)?;
    socket_addr(&format!("http://{addr}")).map_err(prep)?;
    Ok(())
}

/// What the results header says of a service: its command and address as run (expanded where
/// they can be), its CPUs and its readiness check.
#[must_use]
pub fn record(service: &Service, vars: &BTreeMap<String, String>) -> ServiceRecord {
    let expanded = |s: &str| expand(s, vars).unwrap_or_else(|_| s.to_string());
    let command = match &service.process.launch {
        Launch::Command { argv, .. } => argv.iter().map(|a| expanded(a)).collect(),
        Launch::Pid(p) => vec![format!("pid {p}")],
    };
    ServiceRecord {
        name: service.process.name.clone(),
        command,
        addr: expanded(&service.addr),
        cpus: service.process.cpus.clone(),
        ready: match &service.process.ready {
            Readiness::Tcp => "tcp".into(),
            Readiness::Http(path) => format!("http {path}"),
        },
    }
}

/// The spec's services, running; stopped (last started first) when dropped.
#[derive(Debug, Default)]
pub struct RunningServices {
    running: Vec<RunningTarget>,
}

impl RunningServices {
    /// Starts every service of `spec` in order, each waited for until ready before the next
    /// starts (a later one may need an earlier one). `vars` are the spec's ([`Spec::vars`]);
    /// `spec_dir` is canonical and `out` the results directory.
    ///
    /// # Errors
    /// The first service that could not be started or was not ready in time; those already
    /// started are stopped.
    pub fn start(
        spec: &Spec,
        vars: &BTreeMap<String, String>,
        spec_dir: &Path,
        out: &Path,
        stop: &AtomicBool,
    ) -> Result<Self, BenchError> {
        let mut started = Self::default();
        for service in &spec.services {
            let dir = run_dir(out, service);
            std::fs::create_dir_all(&dir).map_err(|e| BenchError::io(&dir, e))?;
            let vars = service_vars(vars, spec_dir, &dir, out);
            let mut running = RunningTarget::start(&service.process, &vars, &dir)?;
            let ready = running.wait_ready(
                &service.process.ready,
                service.process.ready_timeout,
                stop,
                out,
            );
            started.running.push(running);
            ready?;
        }
        Ok(started)
    }

    /// Every process of every service's tree now (left out of the neighbours' CPU).
    #[must_use]
    pub fn pids(&self) -> Vec<u32> {
        self.running.iter().flat_map(RunningTarget::pids).collect()
    }

    /// The running services, in the order they started (each with its root pid and its
    /// expanded `url`, `http://` and its address).
    pub fn iter(&self) -> impl Iterator<Item = &RunningTarget> {
        self.running.iter()
    }

    /// Fails when a service has exited: what the targets measured since then went to nothing.
    ///
    /// # Errors
    /// [`BenchError::Exited`] naming the service, its exit status and its log.
    pub fn check_alive(&mut self) -> Result<(), BenchError> {
        self.running
            .iter_mut()
            .try_for_each(RunningTarget::check_alive)
    }

    /// Stops every service, the last started first. Idempotent.
    pub fn stop(&mut self) {
        while let Some(mut s) = self.running.pop() {
            s.stop();
        }
    }
}

impl Drop for RunningServices {
    fn drop(&mut self) {
        self.stop();
    }
}
