//! Starting, watching and stopping one target. A started target runs in its own process group,
//! pinned to its CPUs, with its output in `<run_dir>/<name>.log`; [`RunningTarget`] stops the
//! whole group when dropped, so every exit path of the runner (an error, Ctrl-C, the end)
//! stops it. If `lowlat bench` itself is killed, the kernel sends the target SIGKILL (a
//! parent-death signal set before exec).
//!
//! An already-running target (`pid = N`) is measured but never signalled.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::BenchError;
use crate::procfs;
use crate::spec::{expand, Launch, Readiness, Role, Target};

/// How long a target gets to exit after SIGTERM before its group is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Settling time after the readiness check passes, so that every worker is up.
pub const SETTLE: Duration = Duration::from_millis(300);

/// A target that is running (started by us, or found by pid).
#[derive(Debug)]
pub struct RunningTarget {
    pub name: String,
    /// A target, or a service's process (for messages).
    pub role: Role,
    /// Root of the process tree that is measured.
    pub pid: u32,
    /// Our child, when we started it (its pid is also its process group id).
    child: Option<Child>,
    /// Where the target's stdout and stderr go.
    pub log: PathBuf,
    /// The base URL, expanded.
    pub url: String,
    /// Process names not counted in the server's memory.
    pub rss_exclude: Vec<String>,
    /// For `https://`: how the certificate is checked (`cacert` expanded).
    pub tls: lowlat_load::TlsOptions,
}

/// Host and port of an `http://host[:port]` or `https://…` URL, resolved.
///
/// # Errors
/// A message when the URL has no usable address.
pub fn socket_addr(url: &str) -> Result<SocketAddr, String> {
    let (rest, default_port) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (rest, 80),
        (_, Some(rest)) => (rest, 443),
        _ => return Err(format!("{url}: not an http:// or https:// URL")),
    };
    let authority = rest.split('/').next().unwrap_or("");
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        && !authority.ends_with(']')
    {
        authority.to_string()
    } else {
        format!("{authority}:{default_port}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("{authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority}: no address"))
}

/// The variables a target's fields may use: the spec's `[vars]` and the run's own.
#[must_use]
pub fn target_vars(
    spec_vars: &BTreeMap<String, String>,
    spec_dir: &Path,
    run_dir: &Path,
    out_dir: &Path,
    target: &str,
) -> BTreeMap<String, String> {
    let mut vars = spec_vars.clone();
    vars.insert("spec_dir".into(), spec_dir.display().to_string());
    vars.insert("run_dir".into(), run_dir.display().to_string());
    vars.insert("out_dir".into(), out_dir.display().to_string());
    vars.insert("target".into(), target.to_owned());
    vars
}

/// Everything about starting `target` that can be checked without starting it: every `${var}`
/// of its URL, command, working directory, environment and templates is defined, its templates
/// can be read, and its working directory exists (unless it is made by the run). Run for every
/// target by `--check` and before a run starts any, so that a mistake in the last target does
/// not surface after the first one has been measured.
///
/// # Errors
/// [`BenchError::Prepare`] naming the target and the field.
pub fn preflight(target: &Target, vars: &BTreeMap<String, String>) -> Result<(), BenchError> {
    let prep = |field: &str, message: String| BenchError::Prepare {
        role: target.role,
        target: target.name.clone(),
        message: format!("{field}: {message}"),
    };
    expand(&target.url, vars).map_err(|m| prep("url", m))?;
    let tls = tls_options(target, vars).map_err(|m| prep("tls", m))?;
    if target.url.starts_with("https://") && (tls.cacert.is_some() || !tls.insecure) {
        // The trust anchors load now (a missing or empty --cacert file is found before any
        // target starts); the system's roots when none is given.
        lowlat_load::tls::client_config(&tls, false).map_err(|e| prep("tls", e.to_string()))?;
    }
    let Launch::Command {
        argv,
        cwd,
        env,
        templates,
    } = &target.launch
    else {
        return Ok(());
    };
    for a in argv {
        expand(a, vars).map_err(|m| prep("cmd", m))?;
    }
    if let Some(cwd) = cwd {
        let dir = expand(cwd, vars).map_err(|m| prep("cwd", m))?;
        let made_by_run = ["${run_dir}", "${out_dir}"].iter().any(|v| cwd.contains(v));
        if !made_by_run && !Path::new(&dir).is_dir() {
            return Err(prep("cwd", format!("{dir} is not a directory")));
        }
    }
    for (k, v) in env {
        expand(v, vars).map_err(|m| prep(&format!("env.{k}"), m))?;
    }
    for (out, template) in templates {
        let field = format!("templates.{out}");
        let src = expand(template, vars).map_err(|m| prep(&field, m))?;
        let text = fs::read_to_string(&src).map_err(|e| prep(&field, format!("{src}: {e}")))?;
        expand(&text, vars).map_err(|m| prep(&field, format!("{src}: {m}")))?;
    }
    Ok(())
}

impl RunningTarget {
    /// Starts `target` (or attaches to its pid). `vars` holds `${...}` values, including
    /// `run_dir`, which must exist.
    ///
    /// # Errors
    /// [`BenchError::Prepare`] for an undefined variable, an unreadable template, or a port
    /// already taken by another process; [`BenchError::Start`] when the command cannot run.
    pub fn start(
        target: &Target,
        vars: &BTreeMap<String, String>,
        run_dir: &Path,
    ) -> Result<Self, BenchError> {
        let prep = |message: String| BenchError::Prepare {
            role: target.role,
            target: target.name.clone(),
            message,
        };
        let url = expand(&target.url, vars).map_err(prep)?;
        let tls = tls_options(target, vars).map_err(prep)?;
        let log = run_dir.join(format!("{}.log", target.name));
        match &target.launch {
            Launch::Pid(pid) => {
                if procfs::proc_sample(*pid).is_none() {
                    return Err(BenchError::NoSuchPid {
                        target: target.name.clone(),
                        pid: *pid,
                    });
                }
                Ok(Self {
                    name: target.name.clone(),
                    role: target.role,
                    pid: *pid,
                    child: None,
                    log,
                    url,
                    rss_exclude: target.rss_exclude.clone(),
                    tls: tls.clone(),
                })
            }
            Launch::Command {
                argv,
                cwd,
                env,
                templates,
            } => {
                for (out, template) in templates {
                    let src = expand(template, vars).map_err(prep)?;
                    let text = fs::read_to_string(&src)
                        .map_err(|e| prep(format!("template {src}: {e}")))?;
                    let rendered =
                        expand(&text, vars).map_err(|m| prep(format!("template {src}: {m}")))?;
                    let dst = run_dir.join(out);
                    fs::write(&dst, rendered)
                        .map_err(|e| prep(format!("{}: {e}", dst.display())))?;
                }
                let argv: Vec<String> = argv
                    .iter()
                    .map(|a| expand(a, vars))
                    .collect::<Result<_, _>>()
                    .map_err(prep)?;
                // A server already listening on the port would pass the readiness check and be
                // measured in place of this one.
                if let Ok(addr) = socket_addr(&url) {
                    if TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok() {
                        return Err(prep(format!("{addr} is already in use by another process; stop it or change the port")));
                    }
                }
                let logf = fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .map_err(|e| BenchError::io(&log, e))?;
                let logf2 = logf.try_clone().map_err(|e| BenchError::io(&log, e))?;
                let mut cmd = Command::new(&argv[0]);
                cmd.args(&argv[1..])
                    .stdin(Stdio::null())
                    .stdout(logf)
                    .stderr(logf2);
                if let Some(cwd) = cwd {
                    cmd.current_dir(expand(cwd, vars).map_err(prep)?);
                }
                for (k, v) in env {
                    cmd.env(k, expand(v, vars).map_err(prep)?);
                }
                std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
                crate::sys::prepare_child(&mut cmd, &target.cpus);
                let child = cmd.spawn().map_err(|source| BenchError::Start {
                    role: target.role,
                    target: target.name.clone(),
                    program: argv[0].clone(),
                    source,
                })?;
                Ok(Self {
                    name: target.name.clone(),
                    role: target.role,
                    pid: child.id(),
                    child: Some(child),
                    log,
                    url,
                    rss_exclude: target.rss_exclude.clone(),
                    tls: tls.clone(),
                })
            }
        }
    }

    /// Waits until the readiness check passes, the target exits, `timeout` passes, or `stop`
    /// is set.
    ///
    /// # Errors
    /// [`BenchError::NotReady`], [`BenchError::Exited`] or [`BenchError::Interrupted`] (with
    /// `out` naming where results are).
    pub fn wait_ready(
        &mut self,
        ready: &Readiness,
        timeout: Duration,
        stop: &AtomicBool,
        out: &Path,
    ) -> Result<(), BenchError> {
        let check = match ready {
            Readiness::Tcp => format!("TCP connect to {}", self.url),
            Readiness::Http(p) => format!("GET {}{p} answering below 500", self.url),
        };
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            if stop.load(Ordering::Relaxed) {
                return Err(BenchError::Interrupted {
                    out: out.to_path_buf(),
                });
            }
            let last = match probe(&self.url, ready, &self.tls) {
                Ok(()) => {
                    std::thread::sleep(SETTLE);
                    return self.check_alive();
                }
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(BenchError::NotReady {
                    role: self.role,
                    target: self.name.clone(),
                    check,
                    timeout,
                    last,
                    log: self.log.clone(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Fails when the target has exited.
    ///
    /// # Errors
    /// [`BenchError::Exited`] with the exit status.
    pub fn check_alive(&mut self) -> Result<(), BenchError> {
        let status = match &mut self.child {
            Some(c) => match c.try_wait() {
                Ok(Some(s)) => Some(s.to_string()),
                Ok(None) => None,
                Err(e) => Some(format!("cannot wait: {e}")),
            },
            None => procfs::proc_sample(self.pid)
                .is_none()
                .then(|| "process gone".to_string()),
        };
        match status {
            Some(status) => Err(BenchError::Exited {
                role: self.role,
                target: self.name.clone(),
                status,
                log: self.log.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Every process of the target's tree that exists now.
    #[must_use]
    pub fn pids(&self) -> Vec<u32> {
        procfs::proc_tree(self.pid)
    }

    /// Whether we started it (and so will stop it).
    #[must_use]
    pub fn is_managed(&self) -> bool {
        self.child.is_some()
    }

    /// Stops a started target: SIGTERM to its process group, SIGKILL after [`STOP_GRACE`],
    /// and SIGKILL to any process of its tree that left the group. Idempotent; a no-op for
    /// an attached pid.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pgid = child.id();
        let tree = procfs::proc_tree(pgid);
        let _ = crate::sys::kill_group(pgid, libc::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        loop {
            let _ = child.try_wait();
            // Signal 0 probes the group: ESRCH once every member has exited and been reaped.
            let group_alive = crate::sys::kill_group(pgid, 0).is_ok();
            if !group_alive || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = crate::sys::kill_group(pgid, libc::SIGKILL);
        for p in tree {
            if p != pgid && procfs::proc_sample(p).is_some() {
                let _ = kill_pid(p);
            }
        }
        let _ = child.wait();
    }
}

/// A process that left the group (a daemon calling setsid) but was in the tree we saw: after
/// setsid its group id is its own pid, so the group kill addresses it.
fn kill_pid(pid: u32) -> std::io::Result<()> {
    crate::sys::kill_group(pid, libc::SIGKILL)
}

impl Drop for RunningTarget {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The load generator's TLS settings for `target`, its `cacert` expanded.
///
/// # Errors
/// An undefined variable in `cacert`.
pub fn tls_options(
    target: &Target,
    vars: &BTreeMap<String, String>,
) -> Result<lowlat_load::TlsOptions, String> {
    Ok(lowlat_load::TlsOptions {
        insecure: target.tls.insecure,
        cacert: match &target.tls.cacert {
            Some(c) => Some(expand(c, vars)?.into()),
            None => None,
        },
        resume: false,
    })
}

/// One readiness probe. Over https it completes a TLS handshake that verifies the certificate
/// as the measurement will (so a wrong `cacert` fails here, named, rather than as a run full of
/// TLS errors), then asks for the path.
fn probe(url: &str, ready: &Readiness, tls: &lowlat_load::TlsOptions) -> Result<(), String> {
    let addr = socket_addr(url)?;
    let s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let https = url.starts_with("https://");
    if matches!(ready, Readiness::Tcp) && !https {
        return Ok(());
    }
    let host = url
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap_or("");
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    if https {
        let cfg = lowlat_load::tls::client_config(tls, false).map_err(|e| e.to_string())?;
        let name = lowlat_load::tls::server_name(
            host.rsplit_once(':')
                .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
                .map_or(host, |(h, _)| h),
        )?;
        let conn = rustls::ClientConnection::new(cfg, name).map_err(|e| e.to_string())?;
        let mut stream = rustls::StreamOwned::new(conn, s);
        while stream.conn.is_handshaking() {
            stream
                .conn
                .complete_io(&mut stream.sock)
                .map_err(|e| format!("TLS handshake: {e}"))?;
        }
        let Readiness::Http(path) = ready else {
            return Ok(());
        };
        return http_probe(&mut stream, host, path);
    }
    let Readiness::Http(path) = ready else {
        return Ok(());
    };
    let mut s = s;
    http_probe(&mut s, host, path)
}

/// Sends `GET path` and accepts any status below 500.
fn http_probe(s: &mut (impl Read + Write), host: &str, path: &str) -> Result<(), String> {
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < 12 {
        match s.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let head = String::from_utf8_lossy(&buf[..got]);
    let status: u16 = head
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {head:?}"))?;
    if status < 500 {
        Ok(())
    } else {
        Err(format!("GET {path} answered {status}"))
    }
}
