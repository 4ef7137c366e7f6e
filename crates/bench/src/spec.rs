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
//!
//! # Layout
//! This file holds the TOML's shape (`Raw*`) and the checking context; `model.rs` what a checked
//! spec says, `validate.rs` and `scenario.rs` the checks of targets and services and of
//! scenarios, `text.rs` the text forms values take (durations, CPU lists, `${…}`).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

mod model;
mod scenario;
mod text;
mod validate;

pub use model::{
    Launch, LoaderSettings, Readiness, Role, RunSettings, Scenario, Service, Spec, Target,
    TargetTls,
};
use text::check_url;
pub use text::{check_addr, expand, parse_cpu_list, parse_duration};

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

    /// Line of the first occurrence of `needle`, for errors on map keys (which carry no span).
    fn find_line(&self, needle: &str) -> Option<usize> {
        let at = self.text.find(needle)?;
        Some(self.text[..at].bytes().filter(|&b| b == b'\n').count() + 1)
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
