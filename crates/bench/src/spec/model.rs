//! What a checked spec says: the targets, services and scenarios of a run and its settings, as
//! the rest of `lowlat bench` reads them (the TOML's own shape is `RawSpec`, in `spec.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// A parsed and validated spec.
#[derive(Debug, Clone, Serialize)]
pub struct Spec {
    /// Name of the sweep (the file stem unless `name` is given).
    pub name: String,
    /// Free text shown on the report.
    pub description: String,
    /// The spec file and its directory (`${spec_dir}`).
    pub file: PathBuf,
    pub spec_dir: PathBuf,
    /// The spec's text, recorded in the results and shown on the report.
    pub text: String,
    /// `[vars]`: user-defined `${name}` substitutions.
    pub vars: BTreeMap<String, String>,
    pub run: RunSettings,
    pub loader: LoaderSettings,
    pub targets: Vec<Target>,
    /// `[[service]]`: started before the first target, stopped after the last.
    pub services: Vec<Service>,
    pub scenarios: Vec<Scenario>,
}

impl Spec {
    /// The `${name}`s every target and service may use besides the builtins: `[vars]`, and
    /// each service's address as `${NAME_addr}` (its `${…}` expanded where it is used).
    #[must_use]
    pub fn vars(&self) -> BTreeMap<String, String> {
        let mut vars = self.vars.clone();
        for s in &self.services {
            vars.insert(s.addr_var(), s.addr.clone());
        }
        vars
    }
}

/// How long and how often each level is measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunSettings {
    pub duration: Duration,
    pub rounds: u32,
    /// Load sent to a target before the first measured level of each scenario.
    pub warmup: Duration,
    /// Pause between measurements, so that sockets in TIME_WAIT and queued work drain.
    pub pause: Duration,
    pub levels: Vec<u32>,
    /// Target that the report's ratios compare against (default: the first target).
    pub baseline: String,
    /// A measurement during which other processes used more than this share of one CPU (in %)
    /// is repeated, at most `retries` times.
    pub foreign_max_pct: f64,
    pub retries: u32,
}

/// The in-process load generator's settings.
#[derive(Debug, Clone, Serialize)]
pub struct LoaderSettings {
    pub threads: u32,
    /// CPUs the loader's threads are pinned to (empty: not pinned).
    pub cpus: Vec<usize>,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// How the runner decides that a started target is ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Readiness {
    /// A TCP connection to the URL's host and port succeeds.
    Tcp,
    /// `GET path` answers with any status below 500.
    Http(String),
}

/// How a target comes to exist.
#[derive(Debug, Clone, Serialize)]
pub enum Launch {
    /// Started by the runner: argv (or one shell line run with `sh -c`).
    Command {
        argv: Vec<String>,
        cwd: Option<String>,
        env: BTreeMap<String, String>,
        /// Files rendered into `${run_dir}` before start: output name → template path.
        templates: BTreeMap<String, String>,
    },
    /// Already running; measured, never started or stopped.
    Pid(u32),
}

/// What a started process is to the sweep, as its messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A server under test (`[[target]]`).
    Target,
    /// A process the targets need, not measured (`[[service]]`).
    Service,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Target => "target",
            Self::Service => "service",
        })
    }
}

/// One server under test.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub name: String,
    /// [`Role::Target`], or [`Role::Service`] for the process of a [`Service`].
    pub role: Role,
    pub launch: Launch,
    /// Base URL (`http://127.0.0.1:8090`); the scenario's path is appended.
    pub url: String,
    /// CPUs the target's process tree is pinned to (empty: not pinned).
    pub cpus: Vec<usize>,
    pub ready: Readiness,
    pub ready_timeout: Duration,
    /// Process names in the target's tree whose memory is not the server's (a throw-away
    /// origin behind a cache, a shell wrapper).
    pub rss_exclude: Vec<String>,
    /// For an `https://` URL: how its certificate is checked.
    pub tls: TargetTls,
}

/// A process the targets need but that is not measured (`[[service]]`): the upstream behind a
/// reverse proxy, an origin behind a cache. Started once before the first target, pinned to its
/// CPUs (never a target's), checked for readiness, and stopped after the last target, on an
/// error and on Ctrl-C. Its CPU time is neither the server's nor a neighbour's.
#[derive(Debug, Clone, Serialize)]
pub struct Service {
    /// Started, checked and stopped as a target is: its name, command, CPUs and readiness
    /// check, `url` the `http://` of [`Service::addr`], role [`Role::Service`].
    pub process: Target,
    /// `host:port` it listens on, unexpanded; `${NAME_addr}` to the others.
    pub addr: String,
}

impl Service {
    /// The variable holding its address: `upstream_addr` for a service named `upstream`.
    #[must_use]
    pub fn addr_var(&self) -> String {
        format!("{}_addr", self.process.name)
    }
}

/// How an `https://` target's certificate is checked (`tls = { … }` in the spec).
#[derive(Debug, Clone, Default, Serialize)]
pub struct TargetTls {
    /// Accept any certificate (a self-signed one made for the run).
    pub insecure: bool,
    /// Trust only the certificates in this PEM file (`${var}`s expanded when the run starts).
    pub cacert: Option<String>,
}

/// One kind of request sent to every target that serves it.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    pub path: String,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
    pub pipeline: u32,
    pub keepalive: bool,
    /// Targets that serve this scenario (default: all).
    pub targets: Vec<String>,
    /// Levels for this scenario (default: `[run].levels`).
    pub levels: Vec<u32>,
    /// Over https, resume TLS sessions on reconnects (matters with `keepalive = false`).
    pub tls_resume: bool,
    /// HTTP/2 with this many streams in flight per connection (ALPN h2 for https, h2c for
    /// http); `None`: HTTP/1.1.
    pub h2: Option<u32>,
    /// HTTP/3 over QUIC with this many request streams in flight per connection (https only,
    /// the target's QUIC port being its TLS port); `None`: not HTTP/3.
    pub h3: Option<u32>,
}
