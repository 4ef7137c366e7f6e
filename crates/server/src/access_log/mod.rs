//! The access log: one line per answered request, in nginx's `combined` format (which goaccess
//! and every log tool read), as one JSON object a line, or in a `log_format` of the config file
//! (compiled once into segments by [`crate::log_format`], walked per line here).
//!
//! Each worker writes its own lines into its own buffer and hands them to the file in one
//! `write(2)` when the buffer passes [`FLUSH_BYTES`] or at least once a second — never a write
//! per request. Every worker opens the file with `O_APPEND`, so the kernel appends each of
//! those writes whole. SIGUSR1 (as nginx's `reopen`, for logrotate's `postrotate`) bumps a
//! shared generation; each worker reopens the file at its next flush. A write that fails (a full
//! disk, a file that became unwritable) never stops serving: the lines are dropped, counted,
//! and said once on the error log.
//!
//! # Layout
//! - `config`: where the log goes and in which format; the reopen generation SIGUSR1 bumps.
//! - `entry`: what one line says about one request, and a forwarded request's fields held
//!   until its answer is known.
//! - `writer`: one worker's buffer: filled a line at a time, flushed, the file reopened.
//! - `line`: the three line formats (combined, JSON, a `log_format`) written into that buffer.
//! - `text`: the pieces of a line written by hand: escaped fields, addresses, times, numbers,
//!   the Basic user.
//!
//! This file only names the parts; callers reach them as `access_log::…`.

mod config;
mod entry;
mod line;
mod text;
mod writer;

pub use config::{AccessLogConfig, Format};
pub(crate) use entry::{Entry, Fields, HeldRequest, UpstreamFields};
pub(crate) use writer::WorkerLog;
pub use writer::{FLUSH_BYTES, FLUSH_EVERY};
