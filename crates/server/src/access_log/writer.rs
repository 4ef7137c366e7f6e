//! One worker's side of the access log: its buffer, filled a line at a time and handed to the
//! file in one `write(2)` when full or once a second; the file reopened when SIGUSR1 asked; a
//! failed write counted and said once. The cached timestamps live here too, refreshed once a
//! second. The lines themselves are written by `super::line`.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::config::{AccessLogConfig, Format};
use super::entry::Entry;
use super::text::civil_from_days;

/// A worker's buffer is written out once it holds this much.
pub const FLUSH_BYTES: usize = 64 * 1024;
/// ... and at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// One worker's side of the log.
pub(crate) struct WorkerLog {
    pub(super) cfg: Arc<AccessLogConfig>,
    file: Option<File>,
    generation: u64,
    pub(super) buf: Vec<u8>,
    next_flush: Instant,
    /// The second the cached timestamps are for, and their text.
    second: u64,
    pub(super) combined_time: [u8; 26],
    pub(super) iso_time: [u8; 20],
    dropped: u64,
    said_dropped: bool,
    /// This worker's `$request_id` prefix (random per start) and count: ids unique across
    /// workers and restarts without a clock read or a lock per request.
    pub(super) id_seed: u64,
    pub(super) ids: u64,
}

impl WorkerLog {
    pub(crate) fn new(cfg: Arc<AccessLogConfig>, now: Instant) -> Self {
        let file = cfg.open().ok();
        let generation = cfg.generation.load(Ordering::Acquire);
        Self {
            cfg,
            file,
            generation,
            buf: Vec::with_capacity(FLUSH_BYTES + 4096),
            next_flush: now + FLUSH_EVERY,
            second: u64::MAX,
            combined_time: [0; 26],
            iso_time: [0; 20],
            dropped: 0,
            said_dropped: false,
            id_seed: {
                use std::hash::{BuildHasher, Hasher};
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u64(now.elapsed().as_nanos() as u64);
                h.finish()
            },
            ids: 0,
        }
    }

    /// The log's settings.
    pub(crate) fn config(&self) -> &AccessLogConfig {
        &self.cfg
    }

    /// Appends one line; writes the buffer out when it is full.
    pub(crate) fn record(&mut self, e: &Entry<'_>) {
        self.refresh_time();
        match &self.cfg.format {
            Format::Combined => self.combined(e),
            Format::Json => self.json(e),
            Format::Custom(_) => self.custom(e),
        }
        if self.buf.len() >= FLUSH_BYTES {
            self.flush();
        }
    }

    /// Writes the buffer out if a second has passed since the last time.
    pub(crate) fn tick(&mut self, now: Instant) {
        if now >= self.next_flush {
            self.next_flush = now + FLUSH_EVERY;
            self.flush();
        }
    }

    /// Writes the buffer out (reopening first when SIGUSR1 asked for it).
    pub(crate) fn flush(&mut self) {
        let generation = self.cfg.generation.load(Ordering::Acquire);
        if generation != self.generation || self.file.is_none() {
            self.generation = generation;
            self.file = self.cfg.open().ok();
        }
        if self.buf.is_empty() {
            return;
        }
        let written = match &mut self.file {
            Some(f) => f.write_all(&self.buf),
            None => Err(std::io::Error::other("the file could not be opened")),
        };
        if let Err(e) = written {
            self.dropped += self.buf.iter().filter(|&&b| b == b'\n').count() as u64;
            if !self.said_dropped {
                self.said_dropped = true;
                tracing::error!(
                    path = %self.cfg.path.display(),
                    "access log: cannot write ({e}); lines are dropped, serving goes on"
                );
            }
        }
        self.buf.clear();
    }

    fn refresh_time(&mut self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if now == self.second {
            return;
        }
        self.second = now;
        let (y, mo, d) = civil_from_days(now / 86_400);
        let s = now % 86_400;
        let (h, mi, se) = (s / 3600, s / 60 % 60, s % 60);
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let combined = format!(
            "{d:02}/{}/{y:04}:{h:02}:{mi:02}:{se:02} +0000",
            MONTHS[(mo - 1) as usize]
        );
        let iso = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{se:02}Z");
        self.combined_time
            .copy_from_slice(&combined.as_bytes()[..26]);
        self.iso_time.copy_from_slice(&iso.as_bytes()[..20]);
    }
}

impl Drop for WorkerLog {
    fn drop(&mut self) {
        self.flush();
    }
}
