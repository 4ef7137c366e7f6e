//! A server's system calls, counted by kind through the kernel's syscall tracepoints: the
//! total (`raw_syscalls:sys_enter`) and the calls a server's request path is made of
//! (`syscalls:sys_enter_<name>`: reads, writes, sends, receives, `sendfile`, the epoll and poll
//! waits, `accept4`, `setsockopt`, `close`, `openat`, `io_uring_enter`). Everything else is the
//! rest of the total.
//!
//! Why not /proc: `/proc/PID/io`'s `syscr`/`syscw` count only the VFS's read and write calls, so
//! a server that answers with `recvfrom`/`sendto` and waits in `epoll_wait` shows none at all.
//! A tracepoint fires on every entry into a system call, whatever the call.
//!
//! How: one counting-only perf event (`PERF_TYPE_TRACEPOINT`, the id read from tracefs; no
//! hardware counter, no sampling, no ring buffer) per tracepoint per thread of the server's
//! process tree, opened once the server is ready, with `inherit` so that the threads and
//! processes a counted thread starts later (a thread pool growing under load) add to its
//! counter. `inherit` covers only tasks created after the counter opens, which is why every
//! thread that exists at that moment gets its own. A measurement reads every counter before
//! and after and keeps the difference. This module owns the tracepoint lookup, the counters
//! and the arithmetic; the system call itself is `sys::perf_counter`, where the crate's
//! `unsafe` lives.
//!
//! It never reports a zero it did not count: when tracefs is not mounted, the kernel lacks the
//! tracepoints, or `perf_event_open` is refused, [`Unavailable`] says why and how to fix it,
//! and the rows carry that reason instead of figures.
//!
//! The cost: with any syscall tracepoint enabled, every system call on the machine takes the
//! kernel's slower traced entry path, and each counted call also bumps its counters (measured
//! in docs/PERFORMANCE.md; `--no-syscalls` turns counting off).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sys::{perf_counter, PerfCounter, PerfEvent};

/// System calls per response, from the kernel's syscall tracepoints (see this module).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SyscallsPerReq {
    /// Every system call (`raw_syscalls:sys_enter`).
    pub total: f64,
    /// By call, for each of [`CALLS`] this kernel has a tracepoint for.
    pub calls: BTreeMap<String, f64>,
    /// Calls of no kind in `calls` (the total less their sum).
    pub other: f64,
}

impl SyscallsPerReq {
    /// One call's figure; `None` where the kernel could not count it.
    #[must_use]
    pub fn call(&self, name: &str) -> Option<f64> {
        self.calls.get(name).copied()
    }
}

/// One kind of system call counted on its own: its name in the results and the tracepoints
/// (under tracefs `events/syscalls/`) whose counts add up to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub name: &'static str,
    pub tracepoints: &'static [&'static str],
}

/// The calls counted one by one, in the order reports show them: receive, send, wait, then
/// connection and file calls. Beyond the calls every event loop makes, `pread` (lighttpd and
/// h2o read a small file into memory with it), `setsockopt` (nginx corks and uncorks each
/// response for `tcp_nopush`) and `poll` (varnish's thread per connection waits in it) are
/// here because the seed's static peers make one or two of them per request.
pub const CALLS: [Call; 17] = [
    Call {
        name: "read",
        tracepoints: &["sys_enter_read"],
    },
    Call {
        name: "pread",
        tracepoints: &["sys_enter_pread64"],
    },
    Call {
        name: "recvfrom",
        tracepoints: &["sys_enter_recvfrom"],
    },
    Call {
        name: "recvmsg",
        tracepoints: &["sys_enter_recvmsg"],
    },
    Call {
        name: "write",
        tracepoints: &["sys_enter_write"],
    },
    Call {
        name: "writev",
        tracepoints: &["sys_enter_writev"],
    },
    Call {
        name: "sendto",
        tracepoints: &["sys_enter_sendto"],
    },
    Call {
        name: "sendmsg",
        tracepoints: &["sys_enter_sendmsg"],
    },
    // sendfile(2) enters the kernel as sendfile64 on 64-bit machines.
    Call {
        name: "sendfile",
        tracepoints: &["sys_enter_sendfile64"],
    },
    Call {
        name: "epoll_wait",
        tracepoints: &["sys_enter_epoll_wait"],
    },
    Call {
        name: "epoll_pwait",
        tracepoints: &["sys_enter_epoll_pwait", "sys_enter_epoll_pwait2"],
    },
    Call {
        name: "poll",
        tracepoints: &["sys_enter_poll", "sys_enter_ppoll"],
    },
    Call {
        name: "accept4",
        tracepoints: &["sys_enter_accept4"],
    },
    Call {
        name: "setsockopt",
        tracepoints: &["sys_enter_setsockopt"],
    },
    Call {
        name: "close",
        tracepoints: &["sys_enter_close"],
    },
    Call {
        name: "openat",
        tracepoints: &["sys_enter_openat"],
    },
    Call {
        name: "io_uring_enter",
        tracepoints: &["sys_enter_io_uring_enter"],
    },
];

/// Where tracefs is looked for, in order, unless a directory is given.
pub const TRACEFS_DIRS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The one-line fix for an unmounted tracefs.
pub const MOUNT_FIX: &str = "mount -t tracefs nodev /sys/kernel/tracing";

/// Why system calls cannot be counted here, and what would let them be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    pub reason: String,
    pub fix: String,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// The tracepoint ids of this kernel, read from tracefs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracepoints {
    /// The tracefs directory they were read from.
    pub dir: PathBuf,
    /// `raw_syscalls:sys_enter`: every system call.
    total: u64,
    /// (index into [`CALLS`], tracepoint id) for every tracepoint this kernel has.
    calls: Vec<(usize, u64)>,
    /// Tracepoints of [`CALLS`] this kernel does not have (a call its architecture lacks, or
    /// one newer than the kernel): those calls are left out, not counted as zero.
    pub missing: Vec<&'static str>,
}

impl Tracepoints {
    /// Reads the ids from tracefs: `dir` when given, else the first of [`TRACEFS_DIRS`] that
    /// has them.
    ///
    /// # Errors
    /// [`Unavailable`]: tracefs not mounted, not readable, or without syscall tracepoints.
    pub fn find(dir: Option<&Path>) -> Result<Self, Unavailable> {
        let dirs: Vec<PathBuf> = match dir {
            Some(d) => vec![d.to_path_buf()],
            None => TRACEFS_DIRS.iter().map(PathBuf::from).collect(),
        };
        for d in &dirs {
            let id_file = d.join("events/raw_syscalls/sys_enter/id");
            match read_id(&id_file) {
                Ok(total) => return Ok(Self::with_total(d, total)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    return Err(Unavailable {
                        reason: format!("cannot read {}: permission denied", id_file.display()),
                        fix: "run lowlat bench as root (tracefs is root's alone by default)".into(),
                    })
                }
                Err(e) => {
                    return Err(Unavailable {
                        reason: format!("cannot read {}: {e}", id_file.display()),
                        fix: format!("check that tracefs is mounted at {}", d.display()),
                    })
                }
            }
        }
        // Nothing found: tell an unmounted tracefs from a kernel without syscall tracepoints.
        if let Some(d) = dirs.iter().find(|d| d.join("events").is_dir()) {
            return Err(Unavailable {
                reason: format!(
                    "this kernel has no syscall tracepoints ({} has no raw_syscalls/sys_enter)",
                    d.join("events").display()
                ),
                fix: "a kernel built with CONFIG_FTRACE_SYSCALLS=y".into(),
            });
        }
        let tried: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        Err(Unavailable {
            reason: format!(
                "tracefs is not mounted (no events/ in {})",
                tried.join(" or ")
            ),
            fix: match dir {
                Some(d) => format!("mount -t tracefs nodev {}", d.display()),
                None => MOUNT_FIX.into(),
            },
        })
    }

    fn with_total(dir: &Path, total: u64) -> Self {
        let mut calls = Vec::new();
        let mut missing = Vec::new();
        for (i, call) in CALLS.iter().enumerate() {
            for tp in call.tracepoints {
                match read_id(&dir.join("events/syscalls").join(tp).join("id")) {
                    Ok(id) => calls.push((i, id)),
                    Err(_) => missing.push(*tp),
                }
            }
        }
        Self {
            dir: dir.to_path_buf(),
            total,
            calls,
            missing,
        }
    }

    /// Counters per thread: the total and one per tracepoint found.
    #[must_use]
    pub fn per_thread(&self) -> usize {
        1 + self.calls.len()
    }

    /// One line for the environment check and `--check`.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut s = format!(
            "raw_syscalls:sys_enter and {} syscalls:sys_enter_* tracepoints in {}",
            self.calls.len(),
            self.dir.display()
        );
        if !self.missing.is_empty() {
            let _ = write!(s, " (not in this kernel: {})", self.missing.join(", "));
        }
        s
    }
}

fn read_id(path: &Path) -> io::Result<u64> {
    std::fs::read_to_string(path)?
        .trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not a tracepoint id"))
}

/// Whether system calls can be counted here: the tracepoints are found and this process may
/// count them on one of its own threads. The environment check and `--check` call it.
///
/// # Errors
/// [`Unavailable`], as [`SyscallCounters::open`] would fail.
pub fn probe(dir: Option<&Path>) -> Result<Tracepoints, Unavailable> {
    let tp = Tracepoints::find(dir)?;
    perf_counter(0, PerfEvent::Tracepoint(tp.total)).map_err(|e| refused(&e, 0))?;
    Ok(tp)
}

/// What a refused `perf_event_open` means, in words.
fn refused(e: &io::Error, tid: i32) -> Unavailable {
    let whom = if tid == 0 {
        "this process".to_string()
    } else {
        format!("thread {tid}")
    };
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => {
            let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .map_or_else(|_| "?".into(), |s| s.trim().to_string());
            Unavailable {
                reason: format!(
                    "perf_event_open on {whom}: permission denied (kernel.perf_event_paranoid = {paranoid})"
                ),
                fix: "run lowlat bench as root (or with CAP_PERFMON), or sysctl -w kernel.perf_event_paranoid=-1".into(),
            }
        }
        Some(libc::EMFILE | libc::ENFILE) => Unavailable {
            reason: format!("perf_event_open on {whom}: out of file descriptors ({e})"),
            fix: "raise the open-file limit (ulimit -n): one descriptor per counted call per server thread".into(),
        },
        _ => Unavailable {
            reason: format!("perf_event_open on {whom}: {e}"),
            fix: "a kernel with CONFIG_PERF_EVENTS and CONFIG_FTRACE_SYSCALLS".into(),
        },
    }
}

/// System calls made, in total and by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyscallCounts {
    pub total: u64,
    /// By [`CALLS`] index; `None` where the kernel has none of the call's tracepoints.
    pub calls: [Option<u64>; CALLS.len()],
}

impl SyscallCounts {
    /// `self - earlier`, each count at least 0.
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        let mut calls = self.calls;
        for (now, then) in calls.iter_mut().zip(earlier.calls) {
            *now = now.map(|n| n.saturating_sub(then.unwrap_or(0)));
        }
        Self {
            total: self.total.saturating_sub(earlier.total),
            calls,
        }
    }

    /// Calls of no kind in [`CALLS`]: the total less the calls counted by kind.
    #[must_use]
    pub fn other(&self) -> u64 {
        // The counters are read one after the other, so a call made between two reads can make
        // the kinds add up to a little more than the total: never below zero.
        self.total
            .saturating_sub(self.calls.iter().flatten().sum::<u64>())
    }

    /// Per response: `None` without responses to divide by.
    #[must_use]
    pub fn per_request(&self, responses: u64) -> Option<SyscallsPerReq> {
        if responses == 0 {
            return None;
        }
        let n = responses as f64;
        Some(SyscallsPerReq {
            total: self.total as f64 / n,
            calls: CALLS
                .iter()
                .zip(self.calls)
                .filter_map(|(c, v)| Some((c.name.to_string(), v? as f64 / n)))
                .collect(),
            other: self.other() as f64 / n,
        })
    }
}

/// Open counters on every thread of a server's process tree.
#[derive(Debug)]
pub struct SyscallCounters {
    /// `raw_syscalls:sys_enter`, one per thread.
    total: Vec<PerfCounter>,
    /// (index into [`CALLS`], counter), every tracepoint on every thread.
    calls: Vec<(usize, PerfCounter)>,
    /// Whether each [`CALLS`] entry has a tracepoint in this kernel.
    present: [bool; CALLS.len()],
    threads: usize,
}

impl SyscallCounters {
    /// Opens the counters on every thread of `root` and its descendants that exists now; the
    /// threads and processes they start from now on count too (`inherit`).
    ///
    /// # Errors
    /// [`Unavailable`] when a counter is refused, or the tree has no thread left to count.
    pub fn open(tp: &Tracepoints, root: u32) -> Result<Self, Unavailable> {
        let mut present = [false; CALLS.len()];
        for &(i, _) in &tp.calls {
            present[i] = true;
        }
        let mut out = Self {
            total: Vec::new(),
            calls: Vec::new(),
            present,
            threads: 0,
        };
        for pid in crate::procfs::proc_tree(root) {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for t in tasks.flatten() {
                let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                    continue;
                };
                match perf_counter(tid, PerfEvent::Tracepoint(tp.total)) {
                    Ok(c) => out.total.push(c),
                    // The thread ended between the listing and now: nothing more to count.
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                    Err(e) => return Err(refused(&e, tid)),
                }
                for &(i, id) in &tp.calls {
                    match perf_counter(tid, PerfEvent::Tracepoint(id)) {
                        Ok(c) => out.calls.push((i, c)),
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => break,
                        Err(e) => return Err(refused(&e, tid)),
                    }
                }
                out.threads += 1;
            }
        }
        if out.threads == 0 {
            return Err(Unavailable {
                reason: format!("process {root} has no thread left to count"),
                fix: "the server exited; see its log".into(),
            });
        }
        Ok(out)
    }

    /// Threads counters were opened on.
    #[must_use]
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The counts so far (since the counters opened).
    ///
    /// # Errors
    /// A counter that cannot be read, in words.
    pub fn read(&self) -> Result<SyscallCounts, String> {
        let err = |e: io::Error| format!("reading a syscall counter: {e}");
        let mut counts = SyscallCounts::default();
        for c in &self.total {
            counts.total += c.value().map_err(err)?;
        }
        for (i, present) in self.present.iter().enumerate() {
            if *present {
                counts.calls[i] = Some(0);
            }
        }
        for (i, c) in &self.calls {
            let v = c.value().map_err(err)?;
            if let Some(slot) = &mut counts.calls[*i] {
                *slot += v;
            }
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory with no tracefs in it is "not mounted", with the mount command as the fix;
    /// one with `events/` but no syscall tracepoints is a kernel without them.
    #[test]
    fn unavailable_says_why() {
        let dir = std::env::temp_dir().join(format!("lowlat-tracefs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let e = Tracepoints::find(Some(&dir)).unwrap_err();
        assert!(e.reason.contains("tracefs is not mounted"), "{e:?}");
        assert!(e.fix.starts_with("mount -t tracefs nodev"), "{e:?}");
        std::fs::create_dir_all(dir.join("events/sched")).unwrap();
        let e = Tracepoints::find(Some(&dir)).unwrap_err();
        assert!(e.reason.contains("no syscall tracepoints"), "{e:?}");
        // A fake tree with the total and one call: the rest are missing, not zero.
        std::fs::create_dir_all(dir.join("events/raw_syscalls/sys_enter")).unwrap();
        std::fs::write(dir.join("events/raw_syscalls/sys_enter/id"), "17\n").unwrap();
        std::fs::create_dir_all(dir.join("events/syscalls/sys_enter_close")).unwrap();
        std::fs::write(dir.join("events/syscalls/sys_enter_close/id"), "42\n").unwrap();
        let tp = Tracepoints::find(Some(&dir)).unwrap();
        let close = CALLS.iter().position(|c| c.name == "close").unwrap();
        assert_eq!((tp.total, tp.calls.clone()), (17, vec![(close, 42)]));
        let tracepoints: usize = CALLS.iter().map(|c| c.tracepoints.len()).sum();
        assert_eq!(tp.missing.len(), tracepoints - 1);
        assert_eq!(tp.per_thread(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn per_request_and_other() {
        let at = |name| CALLS.iter().position(|c| c.name == name).unwrap();
        let mut calls = [None; CALLS.len()];
        calls[at("recvfrom")] = Some(100);
        calls[at("sendto")] = Some(100);
        calls[at("epoll_wait")] = Some(40);
        let c = SyscallCounts { total: 250, calls };
        let earlier = SyscallCounts {
            total: 10,
            calls: [None; CALLS.len()],
        };
        let d = c.since(&earlier);
        assert_eq!(d.total, 240);
        assert_eq!(d.other(), 0, "the kinds add up to more: clamped");
        let p = c.per_request(100).unwrap();
        assert!((p.total - 2.5).abs() < 1e-12);
        assert!((p.other - 0.1).abs() < 1e-12);
        assert_eq!(p.calls.len(), 3, "absent tracepoints are left out: {p:?}");
        assert!((p.calls["epoll_wait"] - 0.4).abs() < 1e-12);
        assert!(c.per_request(0).is_none());
    }
}
