//! The results of a sweep: one [`Row`] per target × scenario × level × round, the machine,
//! the environment check and the spec, written as JSON and CSV while the sweep runs.
//!
//! The JSON file is valid after every row: rows go at the end of the document, and each new
//! row overwrites only the closing tail (`], "status": ...}`), so a killed run keeps its
//! finished rows and `lowlat bench report` can draw them. A file cut mid-write is recovered
//! row by row (each row is one line). The CSV gets one flushed line per row.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::doctor::Check;
use crate::error::BenchError;
use crate::machine::Machine;
use crate::sampler::Sample;

/// The JSON Schema of results.json (`crates/bench/schema/results.schema.json`).
pub const SCHEMA: &str = include_str!("../schema/results.schema.json");

/// Identifies the file format; bumped when a field changes meaning.
pub const FORMAT: &str = "lowlat-bench-results/1";

/// What bounded a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BoundBy {
    /// The loader's cores were saturated: req/s understates the server.
    ClientBound,
    /// The server's cores were saturated.
    ServerBound,
    /// Neither (few connections, latency-bound, or a server waiting on something else).
    Neither,
}

impl BoundBy {
    /// Cores at or above this busy share count as saturated (as `compare.py` decides).
    pub const SATURATED_PCT: f64 = 97.0;

    /// Decides from the busy shares of the loader's and the server's cores.
    #[must_use]
    pub fn decide(loader_pct: f64, server_pct: f64) -> Self {
        if loader_pct >= Self::SATURATED_PCT {
            Self::ClientBound
        } else if server_pct >= Self::SATURATED_PCT {
            Self::ServerBound
        } else {
            Self::Neither
        }
    }

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientBound => "client-bound",
            Self::ServerBound => "server-bound",
            Self::Neither => "neither",
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub target: String,
    pub scenario: String,
    pub connections: u32,
    /// 0-based round at this level.
    pub round: u32,
    pub pipeline: u32,
    pub keepalive: bool,
    /// Measured seconds.
    pub seconds: f64,
    pub requests: u64,
    pub rps: f64,
    /// Response bytes per second / 10^6.
    pub mb_s: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
    /// Failed requests plus 1xx/4xx/5xx responses.
    pub errors: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Responses by status class, 1xx … 5xx.
    pub status_classes: [u64; 5],
    /// Server process tree CPU, % of one core.
    pub server_cpu_pct: f64,
    /// Busy time of the server's cores per response, µs (kernel work included).
    pub server_us_per_req: Option<f64>,
    /// Server process tree CPU per response, µs.
    pub server_proc_us_per_req: Option<f64>,
    pub server_cores: Vec<usize>,
    pub server_cores_pct: f64,
    pub loader_cores: Vec<usize>,
    pub loader_cores_pct: f64,
    pub rss_peak_kb: u64,
    pub rss_mean_kb: u64,
    /// Loader CPU, % of one core.
    pub client_cpu_pct: f64,
    /// CPU used by other processes on the machine, % of one core.
    pub foreign_cpu_pct: f64,
    pub foreign_top: Vec<String>,
    pub bound_by: BoundBy,
    /// Measurements made for this row (more than one when a neighbour disturbed it).
    pub attempts: u32,
    /// The 100 ms time series.
    pub samples: Vec<Sample>,
    /// Over https: the TLS protocol and cipher suite negotiated (absent in clear, and in
    /// results written before TLS was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    /// What the server's process tree asked of the kernel, per response (absent where
    /// /proc/PID/io could not be read, and in older results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_per_req: Option<KernelPerReq>,
    /// The server tree's system calls per response, counted through the kernel's syscall
    /// tracepoints (absent where they could not be counted: then `syscalls_unavailable` says
    /// why; absent too with `--no-syscalls` and in older results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls_per_req: Option<SyscallsPerReq>,
    /// Why this row has no `syscalls_per_req` (tracefs not mounted, `perf_event_open` refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscalls_unavailable: Option<String>,
    /// `--perf-counters`: the server tree's instructions and CPU cycles per response (absent
    /// where the machine has no hardware counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_per_req: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles_per_req: Option<f64>,
}

/// Kernel work per response, from /proc (see [`crate::procfs::KernelCounters`]): context
/// switches and page faults. System calls are [`SyscallsPerReq`]'s alone: results before it
/// also carried /proc/PID/io's `syscr`/`syscw` here, which count only the VFS's read and write
/// calls (0 for a server that uses `recvfrom`/`sendto`) and read as "no system calls"; such
/// files still load, those two fields ignored.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct KernelPerReq {
    pub voluntary_switches: f64,
    pub involuntary_switches: f64,
    pub minor_faults: f64,
}

pub use crate::syscalls::SyscallsPerReq;

/// Everything but the rows: written once at the start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub lowlat_version: String,
    /// UTC, ISO 8601.
    pub started: String,
    pub spec_name: String,
    pub spec_description: String,
    pub spec_file: String,
    pub spec_text: String,
    pub baseline: String,
    /// Target names in spec order (so reports keep it).
    pub targets: Vec<String>,
    /// The services the targets needed (`[[service]]`), not measured; absent when none, and
    /// in older results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceRecord>,
    pub scenarios: Vec<String>,
    pub machine: Machine,
    pub doctor: Vec<Check>,
    pub duration_s: f64,
    pub rounds: u32,
}

/// A service as it ran beside the targets (see [`crate::service`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServiceRecord {
    pub name: String,
    /// Its command, `${…}` expanded.
    pub command: Vec<String>,
    /// The `host:port` it listened on (`${NAME_addr}`).
    pub addr: String,
    /// The CPUs it was pinned to.
    pub cpus: Vec<usize>,
    /// Its readiness check: `tcp`, or `http /path`.
    pub ready: String,
}

/// A whole results file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    #[serde(flatten)]
    pub header: Header,
    pub rows: Vec<Row>,
    /// Checks made once targets ran (their open-file limits).
    #[serde(default)]
    pub target_checks: Vec<Check>,
    /// "running", "complete", "interrupted", or "failed: ...".
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub finished: String,
}

/// Writes results.json and results.csv as rows arrive.
pub struct Writer {
    json: File,
    json_path: PathBuf,
    csv: csv::Writer<File>,
    /// Byte offset where the rows array currently ends (where the tail starts).
    rows_end: u64,
    rows: usize,
    target_checks: Vec<Check>,
}

/// The CSV's columns before the system calls (see [`csv_columns`]).
const CSV_FIXED: [&str; 34] = [
    "target",
    "scenario",
    "connections",
    "round",
    "pipeline",
    "keepalive",
    "seconds",
    "requests",
    "rps",
    "mb_s",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "max_us",
    "mean_us",
    "errors",
    "server_cpu_pct",
    "server_us_per_req",
    "server_proc_us_per_req",
    "server_cores_pct",
    "loader_cores_pct",
    "rss_peak_kb",
    "rss_mean_kb",
    "client_cpu_pct",
    "foreign_cpu_pct",
    "bound_by",
    "attempts",
    "tls",
    "voluntary_switches_per_req",
    "involuntary_switches_per_req",
    "minor_faults_per_req",
    "instructions_per_req",
    "cycles_per_req",
];

/// Every CSV column: [`CSV_FIXED`], then the system calls per response counted through
/// tracepoints (`syscalls_per_req` the total, `sys_NAME_per_req` one per counted call,
/// `sys_other_per_req` the rest), and why they are missing when they are.
#[must_use]
pub fn csv_columns() -> Vec<String> {
    let mut v: Vec<String> = CSV_FIXED.iter().map(|c| (*c).to_string()).collect();
    v.push("syscalls_per_req".into());
    v.extend(
        crate::syscalls::CALLS
            .iter()
            .map(|c| format!("sys_{}_per_req", c.name)),
    );
    v.push("sys_other_per_req".into());
    v.push("syscalls_unavailable".into());
    v
}

impl Writer {
    /// Creates `dir/results.json` and `dir/results.csv`.
    ///
    /// # Errors
    /// [`BenchError::Io`] when a file cannot be written.
    pub fn create(dir: &Path, header: &Header) -> Result<Self, BenchError> {
        let json_path = dir.join("results.json");
        let csv_path = dir.join("results.csv");
        let mut json = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&json_path)
            .map_err(|e| BenchError::io(&json_path, e))?;
        let csv_file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&csv_path)
            .map_err(|e| BenchError::io(&csv_path, e))?;
        // RFC 4180 quoting (a name holding a comma, a quote, CR or LF is quoted) by the csv crate.
        let mut csv = csv::Writer::from_writer(csv_file);
        let head = serde_json::to_string_pretty(header).map_err(|e| BenchError::Results {
            path: json_path.clone(),
            message: e.to_string(),
        })?;
        // `{ ...fields }` → `{ ...fields, "rows": [` and the tail after it.
        let head = head
            .trim_end()
            .strip_suffix('}')
            .unwrap_or(&head)
            .trim_end();
        let start = format!("{head},\n  \"rows\": [");
        json.write_all(start.as_bytes())
            .map_err(|e| BenchError::io(&json_path, e))?;
        csv.write_record(csv_columns())
            .and_then(|()| csv.flush().map_err(csv::Error::from))
            .map_err(|e| BenchError::io(&csv_path, std::io::Error::other(e)))?;
        let mut w = Self {
            json,
            json_path,
            csv,
            rows_end: start.len() as u64,
            rows: 0,
            target_checks: Vec::new(),
        };
        w.write_tail("running", "")?;
        Ok(w)
    }

    /// Where the JSON goes.
    #[must_use]
    pub fn json_path(&self) -> &Path {
        &self.json_path
    }

    fn write_tail(&mut self, status: &str, finished: &str) -> Result<(), BenchError> {
        let checks = serde_json::to_string(&self.target_checks).unwrap_or_else(|_| "[]".into());
        let tail = format!(
            "\n  ],\n  \"target_checks\": {checks},\n  \"status\": {},\n  \"finished\": {}\n}}\n",
            serde_json::Value::from(status),
            serde_json::Value::from(finished)
        );
        let io = |e| BenchError::io(&self.json_path, e);
        self.json.seek(SeekFrom::Start(self.rows_end)).map_err(io)?;
        self.json.write_all(tail.as_bytes()).map_err(io)?;
        let end = self.rows_end + tail.len() as u64;
        self.json.set_len(end).map_err(io)?;
        self.json.flush().map_err(io)
    }

    /// Appends one row to both files.
    ///
    /// # Errors
    /// [`BenchError::Io`] when a file cannot be written.
    pub fn add(&mut self, row: &Row) -> Result<(), BenchError> {
        let line = serde_json::to_string(row).map_err(|e| BenchError::Results {
            path: self.json_path.clone(),
            message: e.to_string(),
        })?;
        let sep = if self.rows == 0 { "\n    " } else { ",\n    " };
        let io = |e| BenchError::io(&self.json_path, e);
        self.json.seek(SeekFrom::Start(self.rows_end)).map_err(io)?;
        self.json.write_all(sep.as_bytes()).map_err(io)?;
        self.json.write_all(line.as_bytes()).map_err(io)?;
        self.rows_end += (sep.len() + line.len()) as u64;
        self.rows += 1;
        self.write_tail("running", "")?;
        self.csv
            .write_record(csv_record(row))
            .and_then(|()| self.csv.flush().map_err(csv::Error::from))
            .map_err(|e| {
                BenchError::io(
                    self.json_path.with_extension("csv"),
                    std::io::Error::other(e),
                )
            })
    }

    /// Records a check made once a target ran.
    ///
    /// # Errors
    /// [`BenchError::Io`] when the file cannot be written.
    pub fn add_target_check(&mut self, check: Check) -> Result<(), BenchError> {
        self.target_checks.push(check);
        self.write_tail("running", "")
    }

    /// Closes the document with its final status.
    ///
    /// # Errors
    /// [`BenchError::Io`] when the file cannot be written.
    pub fn finish(&mut self, status: &str) -> Result<(), BenchError> {
        self.write_tail(status, &now_utc())
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.3}"))
}

/// One row's fields, in [`csv_columns`] order.
fn csv_record(r: &Row) -> Vec<String> {
    let k = |f: fn(&KernelPerReq) -> f64| opt(r.kernel_per_req.as_ref().map(f));
    let s = r.syscalls_per_req.as_ref();
    let mut v = vec![
        r.target.clone(),
        r.scenario.clone(),
        r.connections.to_string(),
        r.round.to_string(),
        r.pipeline.to_string(),
        r.keepalive.to_string(),
        format!("{:.3}", r.seconds),
        r.requests.to_string(),
        format!("{:.1}", r.rps),
        format!("{:.3}", r.mb_s),
        r.p50_us.to_string(),
        r.p90_us.to_string(),
        r.p99_us.to_string(),
        r.p999_us.to_string(),
        r.max_us.to_string(),
        format!("{:.1}", r.mean_us),
        r.errors.to_string(),
        format!("{:.1}", r.server_cpu_pct),
        opt(r.server_us_per_req),
        opt(r.server_proc_us_per_req),
        format!("{:.1}", r.server_cores_pct),
        format!("{:.1}", r.loader_cores_pct),
        r.rss_peak_kb.to_string(),
        r.rss_mean_kb.to_string(),
        format!("{:.1}", r.client_cpu_pct),
        format!("{:.1}", r.foreign_cpu_pct),
        r.bound_by.as_str().to_string(),
        r.attempts.to_string(),
        r.tls.clone().unwrap_or_default(),
        k(|k| k.voluntary_switches),
        k(|k| k.involuntary_switches),
        k(|k| k.minor_faults),
        opt(r.instructions_per_req),
        opt(r.cycles_per_req),
    ];
    v.push(opt(s.map(|s| s.total)));
    v.extend(
        crate::syscalls::CALLS
            .iter()
            .map(|c| opt(s.and_then(|s| s.call(c.name)))),
    );
    v.push(opt(s.map(|s| s.other)));
    v.push(r.syscalls_unavailable.clone().unwrap_or_default());
    v
}

/// Reads a results file; a file cut off mid-write keeps every complete row.
///
/// # Errors
/// [`BenchError::Results`] when the file is not a lowlat bench results file.
pub fn read(path: &Path) -> Result<Results, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::io(path, e))?;
    let bad = |message: String| BenchError::Results {
        path: path.to_path_buf(),
        message,
    };
    let doc = match serde_json::from_str::<Results>(&text) {
        Ok(doc) => doc,
        Err(first) => recover(&text)
            .ok_or_else(|| bad(format!("not a lowlat bench results file ({first})")))?,
    };
    if doc.header.format != FORMAT {
        return Err(bad(format!(
            "format {:?}; this lowlat reads {FORMAT:?}",
            doc.header.format
        )));
    }
    Ok(doc)
}

fn recover(text: &str) -> Option<Results> {
    let at = text.find("\"rows\": [")?;
    let header: Header = serde_json::from_str(&format!(
        "{}}}",
        text[..at].trim_end().trim_end_matches(',')
    ))
    .ok()?;
    let rows = text[at..]
        .lines()
        .skip(1)
        .map_while(|l| serde_json::from_str::<Row>(l.trim().trim_end_matches(',')).ok())
        .collect();
    Some(Results {
        header,
        rows,
        target_checks: Vec::new(),
        status: "cut off (recovered)".into(),
        finished: String::new(),
    })
}

/// Now, UTC, as `2024-05-01T12:00:00Z`.
#[must_use]
pub fn now_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    /// A name holding a comma, a quote, CR and LF survives the CSV round trip in one field.
    #[test]
    fn csv_quotes_every_special_character() {
        let row: Row = serde_json::from_value(serde_json::json!({
            "target": "a,b \"c\"\r\nd", "scenario": "s", "connections": 1, "round": 0,
            "pipeline": 1, "keepalive": true, "seconds": 1.0, "requests": 2, "rps": 2.0,
            "mb_s": 0.0, "p50_us": 1, "p90_us": 1, "p99_us": 1, "p999_us": 1, "max_us": 1,
            "mean_us": 1.0, "errors": 0, "errors_by_kind": {}, "status_classes": [0, 2, 0, 0, 0],
            "server_cpu_pct": 1.0, "server_us_per_req": null, "server_proc_us_per_req": 3.0,
            "server_cores": [0], "server_cores_pct": 1.0, "loader_cores": [1],
            "loader_cores_pct": 1.0, "rss_peak_kb": 1, "rss_mean_kb": 1, "client_cpu_pct": 1.0,
            "foreign_cpu_pct": 0.0, "foreign_top": [], "bound_by": "neither", "attempts": 1,
            "samples": [], "tls": "TLSv1.3 TLS13_AES_128_GCM_SHA256"
        }))
        .unwrap();
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(csv_columns()).unwrap();
        w.write_record(csv_record(&row)).unwrap();
        let bytes = w.into_inner().unwrap();
        let mut r = csv::Reader::from_reader(&bytes[..]);
        let rec = r.records().next().unwrap().unwrap();
        assert_eq!(rec.len(), csv_columns().len());
        assert_eq!(&rec[0], "a,b \"c\"\r\nd");
        assert_eq!(&rec[18], "", "no server µs/req");
        assert_eq!(&rec[28], "TLSv1.3 TLS13_AES_128_GCM_SHA256");
        let cols = csv_columns();
        let at = |name: &str| cols.iter().position(|c| c == name).unwrap();
        assert_eq!(
            &rec[at("syscalls_per_req")],
            "",
            "not counted: empty, not 0"
        );

        // Counted: the total, a column per call (empty where the kernel had no tracepoint for
        // it), the rest; or the reason they were not.
        let mut counted = row.clone();
        counted.syscalls_per_req = Some(SyscallsPerReq {
            total: 2.5,
            calls: [("recvfrom".to_string(), 1.0), ("sendto".to_string(), 1.0)].into(),
            other: 0.5,
        });
        let mut refused = row;
        refused.syscalls_unavailable = Some("tracefs is not mounted".into());
        let (c, r) = (csv_record(&counted), csv_record(&refused));
        assert_eq!(c.len(), cols.len());
        assert_eq!(&c[at("syscalls_per_req")], "2.500");
        assert_eq!(&c[at("sys_recvfrom_per_req")], "1.000");
        assert_eq!(&c[at("sys_epoll_wait_per_req")], "");
        assert_eq!(&c[at("sys_other_per_req")], "0.500");
        assert_eq!(&r[at("sys_other_per_req")], "");
        assert_eq!(&r[at("syscalls_unavailable")], "tracefs is not mounted");
    }

    #[test]
    fn bound_by() {
        assert_eq!(BoundBy::decide(99.0, 99.0), BoundBy::ClientBound);
        assert_eq!(BoundBy::decide(50.0, 98.0), BoundBy::ServerBound);
        assert_eq!(BoundBy::decide(50.0, 50.0), BoundBy::Neither);
    }
}
