//! lowlat-bench: `lowlat bench` — benchmark sweeps from a TOML spec, with the server's CPU and
//! memory measured from /proc, an environment check, and reports with charts.
//!
//! It starts each target in its own process group, pinned to its cores, waits until it is
//! ready, drives `lowlat load`'s engine in-process at every connection level × round, samples
//! the server's process tree and every core every 100 ms, and writes JSON + CSV as it goes.
//! It does not serve HTTP or generate load itself.
//!
//! # Layout
//! - [`spec`]: the TOML spec — parsing, validation with file/line/field errors, `${var}` expansion.
//! - [`target`]: starting, readiness-checking and always stopping one target.
//! - [`service`]: the processes the targets need but that are not measured (an upstream),
//!   started before the first target and stopped after the last.
//! - [`procfs`]: /proc readers (process tree ticks and memory, per-core busy time, neighbours).
//! - [`sampler`]: the 100 ms sampling thread and its time series.
//! - [`syscalls`]: the server's system calls by kind, counted through the kernel's syscall
//!   tracepoints (what /proc's read/write counts miss).
//! - [`load`]: the boundary to the load generator ([`load::LoadDriver`]) and its `lowlat load` engine.
//! - [`runner`]: the sweep — warm-up, levels × rounds, rows, "bound by", progress bar.
//! - [`results`]: the results file format, written incrementally (JSON + CSV), and its reader.
//! - [`machine`] and [`doctor`]: the machine description and the environment check.
//! - [`report`]: charts (SVG, PNG) and the self-contained HTML report.
//! - [`compare`]: two runs cell by cell, with bootstrap intervals and a verdict (a CI gate).
//! - [`cli`]: `lowlat bench` flags, subcommands and one-line errors.
//! - `sys`: the few system calls std lacks; all of the crate's `unsafe`.
//! - [`error`]: the [`BenchError`] type.

pub mod cli;
pub mod compare;
pub mod doctor;
pub mod error;
pub mod load;
pub mod machine;
pub mod procfs;
pub mod report;
pub mod results;
pub mod runner;
pub mod sampler;
pub mod service;
pub mod spec;
mod sys;
pub mod syscalls;
pub mod target;

pub use error::BenchError;
