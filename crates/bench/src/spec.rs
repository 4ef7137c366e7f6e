//! The benchmark spec: a TOML file naming the targets to start, the scenarios to send them,
//! the connection levels to sweep and how long to measure each.
//!
//! This module owns parsing and validation only; it starts nothing. Every error names the file,
//! the line and the field (`bench/specs/x.toml:12: target[1].ready.timeout: ...`) so that a
//! typo is found without reading the parser. Strings may refer to `${spec_dir}`, `${run_dir}`,
//! `${out_dir}`, a `[vars]` entry, or an environment variable with an optional default
//! (`${LOWLAT:-target/release/lowlat}`, where the default may itself hold `${…}`); they are
//! expanded when a target is started, because `${run_dir}` exists only then.
//!
//! Besides the targets, a spec may name services (`[[service]]`): processes the targets need but
//! that are not measured, such as the upstream behind a reverse proxy. Each listens on an
//! address that every command and template may use as `${NAME_addr}`.
//!
//! A commented example of every field is
//! `bench/specs/example.toml`.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// Highest connection level a spec may ask for: far above what one machine's local port range
/// allows per destination, so only a typo reaches it.
pub const MAX_CONNECTIONS: u32 = 1_000_000;
/// Deepest pipeline a scenario may ask for; deeper ones only fill socket buffers.
pub const MAX_PIPELINE: u32 = 1024;
/// Most levels one sweep may have (the seed's 0–1000 step 10 has 100).
pub const MAX_LEVELS: usize = 10_000;

/// A spec error, pointing at the place in the file that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The spec file.
    pub file: PathBuf,
    /// 1-based line, when the error has a place in the file.
    pub line: Option<usize>,
    /// Dotted path of the field (`target[0].url`), when known.
    pub field: Option<String>,
    /// What is wrong, in one sentence.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for SpecError {}

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

// ------------------------------------------------------------------ raw TOML shapes

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    vars: BTreeMap<String, String>,
    run: Spanned<RawRun>,
    #[serde(default)]
    loader: Option<Spanned<RawLoader>>,
    #[serde(rename = "target")]
    targets: Spanned<Vec<Spanned<RawTarget>>>,
    #[serde(rename = "service", default)]
    services: Vec<Spanned<RawService>>,
    #[serde(rename = "scenario")]
    scenarios: Spanned<Vec<Spanned<RawScenario>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    duration: Spanned<RawDuration>,
    #[serde(default = "one")]
    rounds: Spanned<u32>,
    warmup: Option<Spanned<RawDuration>>,
    pause: Option<Spanned<RawDuration>>,
    levels: Spanned<RawLevels>,
    baseline: Option<Spanned<String>>,
    foreign_max: Option<f64>,
    retries: Option<u32>,
}

fn one() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLoader {
    #[serde(default)]
    threads: Option<Spanned<u32>>,
    #[serde(default)]
    cpus: Option<Spanned<RawCpus>>,
    timeout: Option<Spanned<RawDuration>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    name: Spanned<String>,
    command: Option<Spanned<RawCommand>>,
    pid: Option<Spanned<u32>>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    templates: BTreeMap<String, String>,
    url: Spanned<String>,
    cpus: Option<Spanned<RawCpus>>,
    ready: Option<Spanned<RawReady>>,
    #[serde(default)]
    rss_exclude: Vec<String>,
    tls: Option<Spanned<RawTls>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    name: Spanned<String>,
    command: Spanned<RawCommand>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    templates: BTreeMap<String, String>,
    addr: Spanned<String>,
    cpus: Option<Spanned<RawCpus>>,
    ready: Option<Spanned<RawReady>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    #[serde(default)]
    insecure: bool,
    cacert: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReady {
    #[serde(default)]
    tcp: Option<bool>,
    http: Option<Spanned<String>>,
    timeout: Option<Spanned<RawDuration>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Spanned<String>,
    path: Spanned<String>,
    #[serde(default)]
    method: Option<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
    #[serde(default)]
    pipeline: Option<Spanned<u32>>,
    #[serde(default)]
    keepalive: Option<bool>,
    targets: Option<Spanned<Vec<Spanned<String>>>>,
    levels: Option<Spanned<RawLevels>>,
    tls_resume: Option<bool>,
    #[serde(default)]
    h2: Option<Spanned<u32>>,
    #[serde(default)]
    h3: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawCommand {
    Shell(String),
    Argv(Vec<String>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawCpus {
    List(Vec<i64>),
    /// `"0-3,6"` as taskset writes it.
    Text(String),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Seconds(f64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawLevels {
    List(Vec<i64>),
    Range(RawRange),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRange {
    from: i64,
    to: i64,
    step: i64,
}

// ------------------------------------------------------------------ parsing

/// Reads and validates a spec file.
///
/// # Errors
/// A [`SpecError`] naming the file, line and field of the first problem found.
pub fn load(path: &Path) -> Result<Spec, SpecError> {
    let text = std::fs::read_to_string(path).map_err(|e| SpecError {
        file: path.to_path_buf(),
        line: None,
        field: None,
        message: format!("cannot read: {e}"),
    })?;
    parse(path, &text)
}

/// Parses and validates spec text; `path` names it in errors and anchors `${spec_dir}`.
///
/// # Errors
/// A [`SpecError`] naming the file, line and field of the first problem found.
pub fn parse(path: &Path, text: &str) -> Result<Spec, SpecError> {
    let cx = Cx { file: path, text };
    let de = toml::Deserializer::parse(text).map_err(|e| cx.toml_error(None, &e))?;
    let raw: RawSpec = serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let field = (field != ".").then(|| tidy_path(&field));
        cx.toml_error(field, e.inner())
    })?;
    cx.validate(raw)
}

/// serde_path_to_error writes `target[0].url`-style paths; `toml::Spanned` adds private
/// segments of its own, which mean nothing to the reader.
fn tidy_path(p: &str) -> String {
    let mut out = String::new();
    for seg in p.trim_start_matches('.').split('.') {
        // A segment may carry an index after the private name: `$__serde_spanned_private_value[1]`.
        let seg = match seg.strip_prefix("$__serde_spanned_private_") {
            Some(rest) => rest.find('[').map_or("", |i| &rest[i..]),
            None => seg,
        };
        if seg.is_empty() {
            continue;
        }
        if !out.is_empty() && !seg.starts_with('[') {
            out.push('.');
        }
        out.push_str(seg);
    }
    out
}

struct Cx<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Cx<'_> {
    fn line_of(&self, span: &Range<usize>) -> Option<usize> {
        if span.start == 0 && span.end == 0 {
            return None;
        }
        let upto = span.start.min(self.text.len());
        Some(self.text[..upto].bytes().filter(|&b| b == b'\n').count() + 1)
    }

    fn err(
        &self,
        span: &Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> SpecError {
        SpecError {
            file: self.file.to_path_buf(),
            line: self.line_of(span),
            field: Some(field.into()),
            message: message.into(),
        }
    }

    fn toml_error(&self, field: Option<String>, e: &toml::de::Error) -> SpecError {
        // toml's own message repeats the snippet; keep only the sentence.
        let message = e.message().trim().to_string();
        let message = untagged_hint(field.as_deref(), message);
        SpecError {
            file: self.file.to_path_buf(),
            line: e.span().and_then(|s| self.line_of(&s)).or(Some(1)),
            field,
            message,
        }
    }

    fn validate(&self, raw: RawSpec) -> Result<Spec, SpecError> {
        let name = raw.name.unwrap_or_else(|| {
            self.file
                .file_stem()
                .map_or_else(|| "bench".to_string(), |s| s.to_string_lossy().into_owned())
        });
        let run_span = raw.run.span();
        let run = raw.run.into_inner();
        let duration = self.duration(&run.duration, "run.duration")?;
        if duration.is_zero() {
            return Err(self.err(
                &run.duration.span(),
                "run.duration",
                "must be more than 0 s",
            ));
        }
        if *run.rounds.get_ref() == 0 {
            return Err(self.err(&run.rounds.span(), "run.rounds", "must be at least 1"));
        }
        let levels = self.levels(&run.levels, "run.levels")?;
        let warmup = match &run.warmup {
            Some(w) => self.duration(w, "run.warmup")?,
            None => Duration::from_secs(2),
        };
        let pause = match &run.pause {
            Some(p) => self.duration(p, "run.pause")?,
            None => Duration::from_millis(500),
        };
        let foreign_max_pct = run.foreign_max.unwrap_or(10.0);
        if !(0.0..=10_000.0).contains(&foreign_max_pct) {
            return Err(self.err(
                &run_span,
                "run.foreign_max",
                "must be a CPU share in % (0–10000)",
            ));
        }

        let loader = match raw.loader {
            None => LoaderSettings {
                threads: 1,
                cpus: vec![],
                timeout: Duration::from_secs(8),
            },
            Some(l) => {
                let l = l.into_inner();
                let threads = match &l.threads {
                    Some(t) if *t.get_ref() == 0 => {
                        return Err(self.err(&t.span(), "loader.threads", "must be at least 1"))
                    }
                    Some(t) => *t.get_ref(),
                    None => 1,
                };
                let cpus = match &l.cpus {
                    Some(c) => self.cpus(c, "loader.cpus")?,
                    None => vec![],
                };
                let timeout = match &l.timeout {
                    Some(t) => self.duration(t, "loader.timeout")?,
                    None => Duration::from_secs(8),
                };
                LoaderSettings {
                    threads,
                    cpus,
                    timeout,
                }
            }
        };

        let targets_span = raw.targets.span();
        let raw_targets = raw.targets.into_inner();
        if raw_targets.is_empty() {
            return Err(self.err(&targets_span, "target", "at least one [[target]] is needed"));
        }
        let mut targets: Vec<Target> = Vec::new();
        for (i, t) in raw_targets.into_iter().enumerate() {
            let target = self.target(i, t)?;
            targets.push(target);
        }
        for (i, t) in targets.iter().enumerate() {
            if targets[..i].iter().any(|o| o.name == t.name) {
                return Err(self.err(
                    &targets_span,
                    format!("target[{i}].name"),
                    format!("duplicate target name {:?}", t.name),
                ));
            }
        }

        let mut services: Vec<Service> = Vec::new();
        for (i, sv) in raw.services.into_iter().enumerate() {
            let service = self.service(i, sv, &targets, &services, &raw.vars)?;
            services.push(service);
        }

        let baseline = match &run.baseline {
            Some(b) => {
                if !targets.iter().any(|t| &t.name == b.get_ref()) {
                    return Err(self.err(
                        &b.span(),
                        "run.baseline",
                        format!(
                            "no target named {:?}; targets: {}",
                            b.get_ref(),
                            names(&targets)
                        ),
                    ));
                }
                b.get_ref().clone()
            }
            None => targets[0].name.clone(),
        };

        let scen_span = raw.scenarios.span();
        let raw_scenarios = raw.scenarios.into_inner();
        if raw_scenarios.is_empty() {
            return Err(self.err(
                &scen_span,
                "scenario",
                "at least one [[scenario]] is needed",
            ));
        }
        let mut scenarios: Vec<Scenario> = Vec::new();
        for (i, s) in raw_scenarios.into_iter().enumerate() {
            let s = self.scenario(i, s, &targets, &levels)?;
            if scenarios.iter().any(|o| o.name == s.name) {
                return Err(self.err(
                    &scen_span,
                    format!("scenario[{i}].name"),
                    format!("duplicate scenario name {:?}", s.name),
                ));
            }
            scenarios.push(s);
        }

        let spec_dir = self
            .file
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let spec_dir = if spec_dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            spec_dir
        };
        Ok(Spec {
            name,
            description: raw.description,
            file: self.file.to_path_buf(),
            spec_dir,
            text: self.text.to_string(),
            vars: raw.vars,
            run: RunSettings {
                duration,
                rounds: *run.rounds.get_ref(),
                warmup,
                pause,
                levels,
                baseline,
                foreign_max_pct,
                retries: run.retries.unwrap_or(2),
            },
            loader,
            targets,
            services,
            scenarios,
        })
    }

    fn target(&self, i: usize, t: Spanned<RawTarget>) -> Result<Target, SpecError> {
        let span = t.span();
        let t = t.into_inner();
        let f = |name: &str| format!("target[{i}].{name}");
        let name = t.name.get_ref().trim().to_string();
        if name.is_empty() || name.contains(['/', '\\', '\0']) {
            return Err(self.err(
                &t.name.span(),
                f("name"),
                "must be a non-empty name without slashes",
            ));
        }
        let launch = match (t.command, t.pid) {
            (Some(_), Some(p)) => {
                return Err(self.err(&p.span(), f("pid"), "give either command or pid, not both"));
            }
            (None, None) => {
                return Err(self.err(
                    &span,
                    f("command"),
                    "missing: give command (to start it) or pid (already running)",
                ));
            }
            (None, Some(p)) => {
                if !t.templates.is_empty() || t.cwd.is_some() || !t.env.is_empty() {
                    return Err(self.err(
                        &p.span(),
                        f("pid"),
                        "cwd, env and templates apply only to a started command",
                    ));
                }
                Launch::Pid(*p.get_ref())
            }
            (Some(c), None) => Launch::Command {
                argv: self.argv(&c, &f("command"))?,
                cwd: t.cwd,
                env: t.env,
                templates: t.templates,
            },
        };
        let url = t.url.get_ref().clone();
        if let Err(m) = check_url(&url) {
            return Err(self.err(&t.url.span(), f("url"), m));
        }
        let cpus = match &t.cpus {
            Some(c) => self.cpus(c, &f("cpus"))?,
            None => vec![],
        };
        let (ready, ready_timeout) = self.ready(t.ready, &f)?;
        let https = url.starts_with("https://");
        let tls = match t.tls {
            None => TargetTls::default(),
            Some(raw) if !https => {
                return Err(self.err(&raw.span(), f("tls"), "applies to https:// URLs only"));
            }
            Some(raw) => {
                let span = raw.span();
                let raw = raw.into_inner();
                if raw.insecure && raw.cacert.is_some() {
                    return Err(self.err(
                        &span,
                        f("tls"),
                        "give insecure = true or cacert, not both",
                    ));
                }
                TargetTls {
                    insecure: raw.insecure,
                    cacert: raw.cacert,
                }
            }
        };
        Ok(Target {
            name,
            role: Role::Target,
            launch,
            url,
            cpus,
            ready,
            ready_timeout,
            rss_exclude: t.rss_exclude,
            tls,
        })
    }

    /// One `[[service]]`: a command, the address it listens on, the CPUs it runs on (none of
    /// a target's: their busy time is the server's) and its readiness check.
    fn service(
        &self,
        i: usize,
        raw: Spanned<RawService>,
        targets: &[Target],
        earlier: &[Service],
        vars: &BTreeMap<String, String>,
    ) -> Result<Service, SpecError> {
        let span = raw.span();
        let s = raw.into_inner();
        let f = |name: &str| format!("service[{i}].{name}");
        let name = s.name.get_ref().trim().to_string();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(self.err(
                &s.name.span(),
                f("name"),
                "must be a non-empty name of letters, digits, _ and - (it names ${NAME_addr})",
            ));
        }
        if targets.iter().any(|t| t.name == name) || earlier.iter().any(|e| e.process.name == name)
        {
            return Err(self.err(
                &s.name.span(),
                f("name"),
                format!("{name:?} is already the name of a target or service (each has its own run directory)"),
            ));
        }
        let addr_var = format!("{name}_addr");
        if vars.contains_key(&addr_var) {
            return Err(self.err(
                &s.name.span(),
                f("name"),
                format!("[vars] already defines {addr_var}, which this service's address would be"),
            ));
        }
        let addr = s.addr.get_ref().trim().to_string();
        // Checked here when it holds no variable; otherwise once expanded, before the run.
        if !addr.contains("${") {
            if let Err(m) = check_addr(&addr) {
                return Err(self.err(&s.addr.span(), f("addr"), m));
            }
        }
        let cpus = match &s.cpus {
            Some(c) => self.cpus(c, &f("cpus"))?,
            None => {
                return Err(self.err(
                    &span,
                    f("cpus"),
                    "missing: the CPUs to pin it to, apart from the targets' (beside the loader on two cores: cpus = [1])",
                ))
            }
        };
        if let Some((t, c)) = targets
            .iter()
            .find_map(|t| t.cpus.iter().find(|c| cpus.contains(c)).map(|c| (t, c)))
        {
            return Err(self.err(
                &s.cpus.as_ref().map_or(span.clone(), Spanned::span),
                f("cpus"),
                format!(
                    "CPU {c} is target {:?}'s: the busy time of a target's CPUs is counted as the server's; pin the service elsewhere",
                    t.name
                ),
            ));
        }
        let (ready, ready_timeout) = self.ready(s.ready, &f)?;
        Ok(Service {
            process: Target {
                name,
                role: Role::Service,
                launch: Launch::Command {
                    argv: self.argv(&s.command, &f("command"))?,
                    cwd: s.cwd,
                    env: s.env,
                    templates: s.templates,
                },
                url: format!("http://{addr}"),
                cpus,
                ready,
                ready_timeout,
                rss_exclude: Vec::new(),
                tls: TargetTls::default(),
            },
            addr,
        })
    }

    /// A command: argv as a list, or one line run with `sh -c`.
    fn argv(&self, c: &Spanned<RawCommand>, field: &str) -> Result<Vec<String>, SpecError> {
        let argv = match c.get_ref() {
            RawCommand::Shell(s) => vec!["sh".to_string(), "-c".to_string(), s.clone()],
            RawCommand::Argv(v) => v.clone(),
        };
        if argv.is_empty() || argv[0].trim().is_empty() {
            return Err(self.err(&c.span(), field, "is empty"));
        }
        Ok(argv)
    }

    /// The readiness check and its timeout (default: a TCP connection within 15 s).
    fn ready(
        &self,
        ready: Option<Spanned<RawReady>>,
        f: &dyn Fn(&str) -> String,
    ) -> Result<(Readiness, Duration), SpecError> {
        Ok(match ready {
            None => (Readiness::Tcp, Duration::from_secs(15)),
            Some(r) => {
                let rspan = r.span();
                let r = r.into_inner();
                let timeout = match &r.timeout {
                    Some(d) => {
                        let t = self.duration(d, &f("ready.timeout"))?;
                        if t.is_zero() {
                            return Err(self.err(
                                &d.span(),
                                f("ready.timeout"),
                                "must be longer than 0 (the process gets this long to answer)",
                            ));
                        }
                        t
                    }
                    None => Duration::from_secs(15),
                };
                let ready = match (r.tcp, r.http) {
                    (Some(true), Some(h)) => {
                        return Err(self.err(
                            &h.span(),
                            f("ready.http"),
                            "give either tcp or http, not both",
                        ));
                    }
                    (_, Some(h)) => {
                        if !h.get_ref().starts_with('/') {
                            return Err(self.err(
                                &h.span(),
                                f("ready.http"),
                                "must be a path starting with /",
                            ));
                        }
                        Readiness::Http(h.into_inner())
                    }
                    (Some(false), None) => {
                        return Err(self.err(
                            &rspan,
                            f("ready.tcp"),
                            "a readiness check is needed: tcp = true or http = \"/path\"",
                        ));
                    }
                    (_, None) => Readiness::Tcp,
                };
                (ready, timeout)
            }
        })
    }

    fn scenario(
        &self,
        i: usize,
        s: Spanned<RawScenario>,
        targets: &[Target],
        run_levels: &[u32],
    ) -> Result<Scenario, SpecError> {
        let s = s.into_inner();
        let f = |name: &str| format!("scenario[{i}].{name}");
        let name = s.name.get_ref().trim().to_string();
        if name.is_empty() {
            return Err(self.err(&s.name.span(), f("name"), "must not be empty"));
        }
        let path = s.path.get_ref().clone();
        if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(self.err(
                &s.path.span(),
                f("path"),
                "must start with / and hold no spaces or control characters",
            ));
        }
        let method = match &s.method {
            Some(m) => {
                let m = m.get_ref().clone();
                if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
                    return Err(self.err(
                        &s.method.as_ref().map_or(0..0, Spanned::span),
                        f("method"),
                        "must be an upper-case HTTP method such as GET",
                    ));
                }
                m
            }
            None => "GET".to_string(),
        };
        for (k, v) in &s.headers {
            let bad_name = k.is_empty()
                || !k
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if bad_name || v.bytes().any(|b| b == b'\r' || b == b'\n') {
                return Err(SpecError {
                    file: self.file.to_path_buf(),
                    line: self.find_line(k),
                    field: Some(f(&format!("headers.{k}"))),
                    message: "header names are tokens and values hold no line breaks".into(),
                });
            }
            // The loader frames each request itself (from `body`).
            if k.eq_ignore_ascii_case("content-length")
                || k.eq_ignore_ascii_case("transfer-encoding")
            {
                return Err(SpecError {
                    file: self.file.to_path_buf(),
                    line: self.find_line(k),
                    field: Some(f(&format!("headers.{k}"))),
                    message: "the loader frames each request from its body; remove it".into(),
                });
            }
        }
        let pipeline = match &s.pipeline {
            Some(p) if *p.get_ref() == 0 || *p.get_ref() > MAX_PIPELINE => {
                return Err(self.err(
                    &p.span(),
                    f("pipeline"),
                    format!("must be 1–{MAX_PIPELINE} (1 = no pipelining)"),
                ));
            }
            Some(p) => *p.get_ref(),
            None => 1,
        };
        let keepalive = s.keepalive.unwrap_or(true);
        let h2 = match &s.h2 {
            Some(m) if *m.get_ref() == 0 || *m.get_ref() > 10_000 => {
                return Err(self.err(
                    &m.span(),
                    f("h2"),
                    "streams per connection: must be 1–10000",
                ));
            }
            Some(m) if pipeline > 1 || !keepalive => {
                return Err(self.err(
                    &m.span(),
                    f("h2"),
                    "HTTP/2 multiplexes streams on kept-alive connections: no pipeline, keepalive = true",
                ));
            }
            Some(m) => Some(*m.get_ref()),
            None => None,
        };
        let h3 = match &s.h3 {
            Some(m) if *m.get_ref() == 0 || *m.get_ref() > 10_000 => {
                return Err(self.err(
                    &m.span(),
                    f("h3"),
                    "streams per connection: must be 1–10000",
                ));
            }
            Some(m) if h2.is_some() => {
                return Err(self.err(
                    &m.span(),
                    f("h3"),
                    "a scenario is HTTP/2 or HTTP/3, not both",
                ));
            }
            Some(m) if pipeline > 1 || !keepalive => {
                return Err(self.err(
                    &m.span(),
                    f("h3"),
                    "HTTP/3 multiplexes streams on kept-alive connections: no pipeline, keepalive = true",
                ));
            }
            Some(m) => Some(*m.get_ref()),
            None => None,
        };
        if !keepalive && pipeline > 1 {
            return Err(self.err(
                &s.pipeline.as_ref().map_or(0..0, Spanned::span),
                f("pipeline"),
                "pipelining needs keepalive = true",
            ));
        }
        let chosen = match &s.targets {
            None => targets.iter().map(|t| t.name.clone()).collect(),
            Some(list) => {
                let mut out = Vec::new();
                for (j, t) in list.get_ref().iter().enumerate() {
                    if !targets.iter().any(|x| &x.name == t.get_ref()) {
                        return Err(self.err(
                            &t.span(),
                            f(&format!("targets[{j}]")),
                            format!(
                                "no target named {:?}; targets: {}",
                                t.get_ref(),
                                names(targets)
                            ),
                        ));
                    }
                    out.push(t.get_ref().clone());
                }
                if out.is_empty() {
                    return Err(self.err(
                        &list.span(),
                        f("targets"),
                        "is empty; leave it out to mean every target",
                    ));
                }
                out
            }
        };
        let levels = match &s.levels {
            Some(l) => self.levels(l, &f("levels"))?,
            None => run_levels.to_vec(),
        };
        Ok(Scenario {
            name,
            path,
            method,
            headers: s.headers.into_iter().collect(),
            body: s.body,
            pipeline,
            keepalive,
            targets: chosen,
            levels,
            tls_resume: s.tls_resume.unwrap_or(false),
            h2,
            h3,
        })
    }

    /// Line of the first occurrence of `needle`, for errors on map keys (which carry no span).
    fn find_line(&self, needle: &str) -> Option<usize> {
        let at = self.text.find(needle)?;
        Some(self.text[..at].bytes().filter(|&b| b == b'\n').count() + 1)
    }

    fn duration(&self, d: &Spanned<RawDuration>, field: &str) -> Result<Duration, SpecError> {
        match d.get_ref() {
            RawDuration::Seconds(s) if s.is_finite() && *s >= 0.0 && *s < 1e7 => {
                Ok(Duration::from_secs_f64(*s))
            }
            RawDuration::Seconds(_) => Err(self.err(
                &d.span(),
                field,
                "must be a duration such as 10 (seconds), \"10s\" or \"500ms\"",
            )),
            RawDuration::Text(t) => parse_duration(t).ok_or_else(|| {
                self.err(
                    &d.span(),
                    field,
                    format!("{t:?} is not a duration; write e.g. \"10s\", \"500ms\", \"2m\""),
                )
            }),
        }
    }

    fn cpus(&self, c: &Spanned<RawCpus>, field: &str) -> Result<Vec<usize>, SpecError> {
        let max = 4096;
        let list = match c.get_ref() {
            RawCpus::List(v) => v
                .iter()
                .map(|&n| usize::try_from(n).ok().filter(|&n| n < max))
                .collect::<Option<Vec<_>>>(),
            RawCpus::Text(t) => parse_cpu_list(t).filter(|v| v.iter().all(|&n| n < max)),
        };
        match list {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(self.err(&c.span(), field, "must be CPU numbers: [0, 1] or \"0-3,6\"")),
        }
    }

    fn levels(&self, l: &Spanned<RawLevels>, field: &str) -> Result<Vec<u32>, SpecError> {
        let bad = |m: String| self.err(&l.span(), field, m);
        let levels: Vec<i64> = match l.get_ref() {
            RawLevels::List(v) => v.clone(),
            RawLevels::Range(r) => {
                if r.step <= 0 {
                    return Err(bad("step must be at least 1".into()));
                }
                if r.to < r.from {
                    return Err(bad(format!("to ({}) is below from ({})", r.to, r.from)));
                }
                if (r.to - r.from) / r.step >= MAX_LEVELS as i64 {
                    return Err(bad(format!("more than {MAX_LEVELS} levels")));
                }
                // The seed sweeps "0–1000 step 10": a level of 0 connections measures nothing,
                // so a range starting at 0 starts at its first step instead.
                let from = if r.from == 0 { r.step } else { r.from };
                (from..=r.to)
                    .step_by(usize::try_from(r.step).unwrap_or(1))
                    .collect()
            }
        };
        if levels.is_empty() {
            return Err(bad("no connection levels".into()));
        }
        if levels.len() > MAX_LEVELS {
            return Err(bad(format!("more than {MAX_LEVELS} levels")));
        }
        let mut out = Vec::with_capacity(levels.len());
        for n in levels {
            match u32::try_from(n) {
                Ok(n) if (1..=MAX_CONNECTIONS).contains(&n) => out.push(n),
                _ => {
                    return Err(bad(format!(
                        "{n} connections: each level must be 1–{MAX_CONNECTIONS}"
                    )))
                }
            }
        }
        Ok(out)
    }
}

/// serde's untagged enums say only "data did not match any variant"; say what would.
fn untagged_hint(field: Option<&str>, message: String) -> String {
    if !message.contains("did not match any variant") {
        return message;
    }
    let last = field.and_then(|f| f.rsplit('.').next()).unwrap_or("");
    let want = match last {
        "levels" => "a list of connection counts [1, 16, 256] or a range { from = 10, to = 1000, step = 10 }",
        "cpus" => "CPU numbers: [0, 1] or \"0-3,6\"",
        "command" => "a list of arguments [\"nginx\", \"-c\", \"x.conf\"] or one shell line",
        _ if last.ends_with("duration") || last == "warmup" || last == "pause" || last == "timeout" => {
            "a duration such as 10 (seconds), \"10s\" or \"500ms\""
        }
        _ => return message,
    };
    format!("must be {want}")
}

fn names(targets: &[Target]) -> String {
    targets
        .iter()
        .map(|t| t.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("must start with http:// or https://")?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() {
        return Err("has no host".into());
    }
    if rest.contains('/')
        && !rest.ends_with('/')
        && rest.split_once('/').is_some_and(|(_, p)| !p.is_empty())
    {
        return Err("must be a base URL without a path; the scenario gives the path".into());
    }
    Ok(())
}

/// A service's address: `host:port`, the port a number (`127.0.0.1:8078`, `[::1]:8078`,
/// `localhost:8078`).
///
/// # Errors
/// What is wrong with it, in words.
pub fn check_addr(addr: &str) -> Result<(), String> {
    let bad = || format!("{addr:?} is not host:port (such as 127.0.0.1:8078)");
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || host.contains(['/', ' ']) || port.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(bad());
    }
    Ok(())
}

/// Parses a duration the way every lowlat command line does
/// ([`lowlat_http::units::parse_duration`]: `10s`, `500ms`, `250us`, `1.5s`, `2m`; a bare number
/// is seconds).
#[must_use]
pub fn parse_duration(text: &str) -> Option<Duration> {
    lowlat_http::units::parse_duration(text).ok()
}

/// Parses a CPU list as taskset and /proc write it: `"0-3,6"`.
#[must_use]
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Expands `${name}`, `${name:-default}` in `text`: `vars` first, then the environment. A
/// default may itself use `${…}` (`${CEILING:-${HOME}/.cache/ceiling}`), expanded only when
/// it is used.
///
/// # Errors
/// The name of the first variable that is neither defined nor given a default.
pub fn expand(text: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    expand_within(text, vars, 0)
}

/// How deep variables may refer to variables (`ceiling = "${anchors}/ceiling"`, `anchors =
/// "${HOME}/…"`): far more than a spec needs, few enough to stop a circle at once.
const MAX_NESTING: usize = 16;

fn expand_within(
    text: &str,
    vars: &BTreeMap<String, String>,
    depth: usize,
) -> Result<String, String> {
    if depth > MAX_NESTING {
        return Err(format!(
            "{text:?}: variables refer to each other in a circle (or more than {MAX_NESTING} deep)"
        ));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = closing_brace(after) else {
            return Err(format!("unclosed ${{ in {text:?}"));
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        let value = match vars
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok().filter(|v| !v.is_empty()))
        {
            Some(v) => Some(v),
            None => default
                .map(|d| expand_within(d, vars, depth + 1))
                .transpose()?,
        };
        match value {
            // A var may refer to the builtins (`www = "${run_dir}/www"`) and to other vars.
            Some(v) if v.contains("${") => out.push_str(&expand_within(&v, vars, depth + 1)?),
            Some(v) => out.push_str(&v),
            None => {
                return Err(format!(
                    "${{{name}}} is not defined (not in [vars], not in the environment)"
                ))
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Where the `}` that closes a `${` ends, in the text after the `${`: the first `}` not
/// closing a `${` nested in a default.
fn closing_brace(after: &str) -> Option<usize> {
    let mut depth = 0usize;
    let bytes = after.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'{' if i > 0 && bytes[i - 1] == b'$' => depth += 1,
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (t, ms) in [
            ("10s", 10_000),
            ("500ms", 500),
            ("2m", 120_000),
            ("1.5s", 1500),
            (" 3s ", 3000),
        ] {
            assert_eq!(parse_duration(t), Some(Duration::from_millis(ms)), "{t}");
        }
        assert_eq!(parse_duration("10"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("250us"), Some(Duration::from_micros(250)));
        for t in ["", "s", "10 parsecs", "-1s", "1e400s"] {
            assert_eq!(parse_duration(t), None, "{t}");
        }
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn expansion() {
        let vars: BTreeMap<String, String> = [
            ("run_dir".to_string(), "/r".to_string()),
            ("www".to_string(), "${run_dir}/www".to_string()),
        ]
        .into();
        assert_eq!(expand("${www}/x", &vars).unwrap(), "/r/www/x");
        assert_eq!(
            expand("${LOWLAT_BENCH_SURELY_UNSET:-dflt}", &vars).unwrap(),
            "dflt"
        );
        assert!(expand("${LOWLAT_BENCH_SURELY_UNSET}", &vars)
            .unwrap_err()
            .contains("not defined"));
        assert!(expand("${oops", &vars).is_err());
        // A default may use variables itself, expanded only when it is used.
        assert_eq!(
            expand("${LOWLAT_BENCH_SURELY_UNSET:-${run_dir}/c}/x", &vars).unwrap(),
            "/r/c/x"
        );
        assert_eq!(
            expand(
                "${LOWLAT_BENCH_SURELY_UNSET:-${LOWLAT_BENCH_ALSO_UNSET:-${www}}}",
                &vars
            )
            .unwrap(),
            "/r/www"
        );
        assert_eq!(
            expand("${www:-${LOWLAT_BENCH_SURELY_UNSET}}", &vars).unwrap(),
            "/r/www",
            "an unused default is not expanded"
        );
        assert!(expand("${LOWLAT_BENCH_SURELY_UNSET:-${run_dir}", &vars).is_err());
        // A var named like the start of another is not taken for a reference to itself.
        let mut vars = vars;
        vars.insert("up_addr".into(), "127.0.0.1:${up_port}".into());
        vars.insert("up_port".into(), "8078".into());
        vars.insert("up".into(), "${up_addr}".into());
        assert_eq!(
            expand("http://${up}/", &vars).unwrap(),
            "http://127.0.0.1:8078/"
        );
        // A circle is an error, not a stack overflow.
        vars.insert("a".into(), "x${b}".into());
        vars.insert("b".into(), "${a}".into());
        assert!(expand("${a}", &vars).unwrap_err().contains("circle"));
    }
}
