//! The one error type of lowlat-bench. Each variant carries what the CLI needs to print one
//! line that says what failed and what to do about it.

use std::path::PathBuf;
use std::time::Duration;

use crate::spec::{Role, SpecError};

/// Everything that can stop a sweep, a report or a doctor run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The spec is invalid; the message names file, line and field.
    #[error("{0}")]
    Spec(#[from] Box<SpecError>),

    /// Two runs that cannot be compared (other spec, other machine).
    #[error("cannot compare: {0}")]
    Compare(String),

    /// A target's (or a service's) command could not be started.
    #[error("{role} {target}: cannot start {program:?}: {source}")]
    Start {
        role: Role,
        target: String,
        program: String,
        #[source]
        source: std::io::Error,
    },

    /// A template or variable in a target (or a service) could not be expanded or rendered.
    #[error("{role} {target}: {message}")]
    Prepare {
        role: Role,
        target: String,
        message: String,
    },

    /// The target (or a service) did not answer its readiness check in time.
    #[error("{role} {target} was not ready within {:.1} s ({check}; last attempt: {last}); its output is in {}", timeout.as_secs_f64(), log.display())]
    NotReady {
        role: Role,
        target: String,
        check: String,
        timeout: Duration,
        last: String,
        log: PathBuf,
    },

    /// The target (or a service) exited on its own (before or during the sweep).
    #[error("{role} {target} exited ({status}); its output is in {}", log.display())]
    Exited {
        role: Role,
        target: String,
        status: String,
        log: PathBuf,
    },

    /// An already-running target's PID does not exist.
    #[error("target {target}: no process with pid {pid}")]
    NoSuchPid { target: String, pid: u32 },

    /// The load generator failed (not a server error: those are counted in the row).
    #[error("load generator against {target} ({scenario}, {connections} connections): {message}")]
    Load {
        target: String,
        scenario: String,
        connections: u32,
        message: String,
    },

    /// The run was interrupted (Ctrl-C or SIGTERM); finished rows are kept.
    #[error("interrupted; the finished rows are kept in {}", out.display())]
    Interrupted { out: PathBuf },

    /// A results file could not be read or is not one lowlat bench wrote.
    #[error("{}: {message}", path.display())]
    Results { path: PathBuf, message: String },

    /// Chart rendering failed.
    #[error("chart {chart}: {message}")]
    Chart { chart: String, message: String },

    /// The environment check found a setting that would make the run fail or mislead.
    #[error(
        "the environment check failed ({0}); fix it (see `lowlat bench doctor`) or pass --force"
    )]
    Doctor(String),

    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<SpecError> for BenchError {
    fn from(e: SpecError) -> Self {
        Self::Spec(Box::new(e))
    }
}

impl BenchError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
