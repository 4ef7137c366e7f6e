//! Where the access log goes and in which format, shared by every worker; and the reopen
//! generation SIGUSR1 bumps, which each worker's writer (`super::writer`) checks at its flush.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Line format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// `$remote_addr - - [$time_local] "$request" $status $body_bytes_sent "$http_referer"
    /// "$http_user_agent"`, times in UTC.
    Combined,
    /// `{"time":…,"remote":…,"method":…,"target":…,"protocol":…,"status":…,"bytes":…,
    /// "duration_us":…,"user_agent":…,"referer":…,"worker":…,"site":…}`.
    Json,
    /// A `log_format`, compiled.
    Custom(Arc<crate::log_format::LogFormat>),
}

/// The access log every worker writes to: where, how, and the reopen generation.
#[derive(Debug)]
pub struct AccessLogConfig {
    pub path: PathBuf,
    pub format: Format,
    /// Each site's name (`$site`, the JSON `site`), by the index the router gives it.
    pub sites: Vec<String>,
    /// Bumped by [`Self::reopen`]; read by each worker's writer at its flush.
    pub(super) generation: AtomicU64,
}

impl AccessLogConfig {
    #[must_use]
    pub fn new(path: PathBuf, format: Format) -> Self {
        Self {
            path,
            format,
            sites: vec!["default".to_owned()],
            generation: AtomicU64::new(0),
        }
    }

    /// The sites' names, by router index (the first is the default site).
    #[must_use]
    pub fn with_sites(mut self, sites: Vec<String>) -> Self {
        self.sites = sites;
        self
    }

    /// Whether proxied requests must keep all their fields for their line.
    pub(super) fn needs_fields(&self) -> bool {
        matches!(self.format, Format::Custom(_))
    }

    /// Asks every worker to reopen the file at its next flush (SIGUSR1).
    pub fn reopen(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub(super) fn open(&self) -> std::io::Result<File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o644)
            .open(&self.path)
    }

    /// Opens the file once, so that an unusable path is an error at start.
    ///
    /// # Errors
    /// The open error.
    pub fn check(&self) -> std::io::Result<()> {
        self.open().map(drop)
    }
}
