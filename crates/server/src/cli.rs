//! Running `lowlat serve`: reading its settings (flags, then the config file under them),
//! starting the server, and handling signals — SIGINT/SIGTERM (graceful shutdown), SIGHUP
//! (reload), SIGUSR1 (reopen the access log), SIGUSR2 (binary upgrade) — with one-line errors,
//! and telling systemd each step (`crate::notify`) when it runs under `Type=notify`.

use std::process::ExitCode;
use std::sync::Arc;

use crate::proxy::health::GroupView;
use crate::settings::{check_config, merged, site_labels};
use crate::settings::{service_with_upstreams, ServeArgs};
use crate::tls::TlsContext;
use crate::{Server, ServerError, Service};

/// Warns, once per certificate, about one that has expired (it is served anyway: the operator
/// may be about to replace it, and a server that refuses to start is worse than a warning).
fn warn_expired(ctx: &TlsContext) {
    for cert in &ctx.certificates().certs {
        if cert.is_ca {
            tracing::warn!("{}", crate::settings::ca_warning(&cert.paths.cert));
        }
        if cert.expired {
            tracing::warn!(
                "the certificate in {} expired on {} (served anyway)",
                cert.paths.cert.display(),
                cert.not_after
            );
        }
    }
}

/// Starts the error log on stderr: `--log-level` (else `RUST_LOG`, else info), text or JSON.
/// Nothing on the request path is logged above debug level.
fn init_logging(args: &ServeArgs) {
    use tracing_subscriber::EnvFilter;
    let filter = match &args.log_level {
        Some(level) => EnvFilter::new(level),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // An error log nobody reads any more (a closed pipe) must not stop the server: the
        // subscriber would otherwise report the failed write with `eprintln!`, which panics.
        .log_internal_errors(false)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // A second start in one process (tests) keeps the first subscriber.
    let _ = if args.log_format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Runs `lowlat serve`; returns the process exit code.
#[must_use]
pub fn run(args: ServeArgs) -> ExitCode {
    if args.check_config {
        return check_config(args, &command_line());
    }
    // First, while this process has one thread: the environment that hands sockets over is
    // read and cleared.
    let inherited = match crate::inherit::from_env() {
        Ok(sockets) => sockets,
        Err(e) => {
            eprintln!("lowlat serve: {e}");
            return ExitCode::from(1);
        }
    };
    // Likewise the descriptor a USR2 upgrade's new process reports readiness on.
    let ready = crate::upgrade::take_ready_fd();
    let args = match &args.config {
        Some(path) => match merged(path, &command_line()) {
            Ok(mut merged) => {
                merged.check_config = args.check_config;
                merged.config.clone_from(&args.config);
                merged
            }
            Err(errors) => {
                for e in &errors {
                    eprintln!("lowlat serve: {e}");
                }
                return ExitCode::from(1);
            }
        },
        None => args,
    };
    let mut args = args;
    listen_on_inherited(&mut args, &inherited);
    init_logging(&args);
    raise_fd_limit();
    let (service, upstreams) = match service_with_upstreams(&args) {
        Ok(built) => built,
        Err(e) => {
            eprintln!("lowlat serve: {e}");
            return ExitCode::from(1);
        }
    };
    let start = Start {
        inherited,
        ready,
        invocation: crate::upgrade::Invocation::current(),
    };
    match serve_with(&args, service, upstreams, start) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lowlat serve: {e}");
            ExitCode::from(1)
        }
    }
}

/// This process's own `lowlat serve` arguments: everything after `serve` (or after the
/// program's name, for a binary that is only `serve`).
fn command_line() -> Vec<String> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    match all.iter().position(|a| a == "serve") {
        Some(i) => all[i + 1..].to_vec(),
        None => all,
    }
}

/// Raises the soft limit on open descriptors to the hard one, as nginx's
/// `worker_rlimit_nofile` and Go's runtime do: the soft default (often 1024) is what caps
/// connections, and the hard one is what the administrator allowed. Best effort.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct they are given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim);
        }
    }
}

/// Binds, starts, and serves until SIGINT/SIGTERM, then shuts down gracefully. A second signal
/// exits at once.
///
/// # Errors
/// Bind failures, bad configuration, a worker that failed.
pub fn serve(args: &ServeArgs, service: Service) -> Result<(), ServerError> {
    serve_with(
        args,
        service,
        Vec::new(),
        Start {
            inherited: Vec::new(),
            ready: None,
            invocation: None,
        },
    )
}

/// What this process was handed when it started, beyond its settings.
struct Start {
    /// Listening sockets (socket activation, or the previous process on USR2).
    inherited: Vec<crate::inherit::InheritedSocket>,
    /// Where to report that the workers run, when the previous process waits for it.
    ready: Option<std::os::fd::OwnedFd>,
    /// How to start this binary again on USR2.
    invocation: Option<crate::upgrade::Invocation>,
}

/// The handed-over listener of `kind` (metrics, health), taken out of `inherited`.
fn take_kind(
    inherited: &mut Vec<crate::inherit::InheritedSocket>,
    kind: crate::inherit::Kind,
) -> Option<std::net::TcpListener> {
    let at = inherited.iter().position(|s| s.kind == kind)?;
    Some(std::net::TcpListener::from(inherited.swap_remove(at).fd))
}

/// A listener of the CLI's own (metrics, health): the handed-over one, or bound to `addr`; and
/// the descriptor a USR2 hands on (a duplicate, owned here for the process's life).
fn side_listener(
    handed: Option<std::net::TcpListener>,
    addr: std::net::SocketAddr,
) -> std::io::Result<(std::net::TcpListener, std::net::TcpListener)> {
    let listener = match handed {
        Some(l) if l.local_addr().ok() == Some(addr) || addr.port() == 0 => l,
        _ => std::net::TcpListener::bind(addr)?,
    };
    let kept = listener.try_clone()?;
    Ok((listener, kept))
}

/// Handed-over sockets that no listen address names are listened on as their names say
/// (`http`, `https`, `quic`): a `.socket` unit alone can then say where lowlat listens.
fn listen_on_inherited(args: &mut ServeArgs, inherited: &[crate::inherit::InheritedSocket]) {
    use crate::inherit::Kind;
    use crate::settings::ListenAddr;
    let named = |list: &[ListenAddr], addr| list.iter().any(|l| l.addrs.contains(&addr));
    for sock in inherited {
        // A hand-off channel listens on nothing.
        let Some(addr) = sock.addr else {
            continue;
        };
        // A UDP socket may share its address with a TCP one (HTTP/3 beside TLS on 443).
        let tcp = !matches!(sock.kind, Kind::Quic);
        if tcp && (named(&args.listen, addr) || named(&args.tls_listen, addr)) {
            continue;
        }
        let entry = ListenAddr {
            addrs: vec![addr],
            proxy_protocol: false,
        };
        match sock.kind {
            Kind::Clear => args.listen.push(entry),
            Kind::Tls => args.tls_listen.push(entry),
            Kind::Quic if args.quic.h3_listen.is_none() => {
                args.quic.h3_listen = Some(crate::settings::quic::H3Listen {
                    addr,
                    port_given: true,
                });
            }
            Kind::Quic | Kind::Stream | Kind::Metrics | Kind::Health => {}
            Kind::QuicHandoff { .. } => {}
        }
    }
}

/// [`serve`], with the reverse proxy's groups reported on `/metrics`.
fn serve_with(
    args: &ServeArgs,
    service: Service,
    upstreams: Vec<GroupView>,
    start: Start,
) -> Result<(), ServerError> {
    let Start {
        mut inherited,
        ready,
        invocation,
    } = start;
    let handed_metrics = take_kind(&mut inherited, crate::inherit::Kind::Metrics);
    let handed_health = take_kind(&mut inherited, crate::inherit::Kind::Health);
    let mut cfg = args.to_config().map_err(ServerError::Config)?;
    let tls = args.tls_context().map_err(ServerError::Config)?;
    if let Some(tls) = &tls {
        warn_expired(tls);
    }
    for warning in crate::settings::proxy::tls_warnings(&args.upstreams, &args.proxy_group) {
        tracing::warn!("{warning}");
    }
    cfg.tls.clone_from(&tls);
    if let Some(log) = &cfg.access_log {
        log.check()
            .map_err(|e| ServerError::Config(format!("cannot open {}: {e}", log.path.display())))?;
    }
    let access_log = cfg.access_log.clone();
    let workers = cfg.workers;
    let registry = args
        .metrics
        .map(|_| Arc::new(crate::metrics::Registry::new(workers)));
    if let Some(r) = &registry {
        r.set_sites(site_labels(args));
        r.set_upstreams(upstreams);
    }
    cfg.metrics.clone_from(&registry);
    let server = Server::bind_inherited(cfg, service, inherited)?;
    // After the sockets are bound (a CA's validation waits in their backlogs until the workers
    // start), before the workers: the stored certificates are in place for the first handshake.
    let managed = tls
        .as_ref()
        .and_then(|t| t.managed().map(|m| (m, t.provider())));
    if let (Some(acme), Some((managed, provider))) =
        (args.acme_config().map_err(ServerError::Config)?, managed)
    {
        let names = acme.names.join(", ");
        let directory = acme.directory.clone();
        crate::acme::start(acme, Arc::clone(managed), Arc::clone(provider))
            .map_err(|e| ServerError::Config(format!("--acme: {e}")))?;
        tracing::info!("acme: certificates for {names} from {directory}");
    }
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGUSR1,
        signal_hook::consts::SIGUSR2,
    ])
    .map_err(ServerError::Signals)?;
    // What /health reports, on its own listener and on the metrics one.
    let health = Arc::new(crate::health::Health::default());
    // The CLI's own listeners, kept (as duplicates) for a USR2 to hand over.
    let mut side: Vec<(std::net::TcpListener, &'static str)> = Vec::new();
    if let (Some(addr), Some(registry)) = (args.metrics, registry.clone()) {
        let (listener, kept) = side_listener(handed_metrics, addr)
            .map_err(|source| ServerError::MetricsBind { addr, source })?;
        let bound = crate::metrics::serve_on(listener, registry, Some(Arc::clone(&health)))
            .map_err(|source| ServerError::MetricsBind { addr, source })?;
        side.push((kept, "metrics"));
        tracing::info!("metrics on http://{bound}/metrics");
    }
    if let Some(addr) = args.health {
        let (listener, kept) = side_listener(handed_health, addr)
            .map_err(|source| ServerError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| ServerError::Bind { addr, source })?;
        crate::health::serve(listener, Arc::clone(&health)).map_err(ServerError::Worker)?;
        side.push((kept, "health"));
        tracing::info!("health on http://{bound}/health");
    }
    let running = server.start()?;
    let addrs: Vec<String> = running
        .local_addrs()
        .iter()
        .map(|a| format!("http://{a}"))
        .chain(running.tls_addrs().iter().map(|a| format!("https://{a}")))
        .chain(running.h3_addr().map(|a| format!("h3://{a}")))
        .collect();
    tracing::info!(
        "listening on {} ({workers} worker{})",
        addrs.join(" "),
        if workers == 1 { "" } else { "s" }
    );
    if let Some(path) = &args.pid_file {
        write_pid_file(path);
    }
    // The previous process (USR2) waits for this before it stops accepting.
    // Under systemd: a process a USR2 started is announced by the one it replaces (MAINPID=),
    // which systemd hears from its main process; any other says it is ready itself.
    let notifier = notifier();
    if let Some(fd) = ready {
        crate::upgrade::report_ready(fd);
    } else if let Some(n) = &notifier {
        n.ready();
    }
    let handle = running.shutdown_handle();
    let reloader = running.reload_handle();
    let config_path = args.config.clone();
    let old_args = restart_settings(args);
    let grace = args.grace;
    let shutdown_delay = args.shutdown_delay;
    let mut handover: Vec<crate::upgrade::HandedSocket> = running.handover().to_vec();
    handover.extend(side.iter().map(|(l, name)| crate::upgrade::HandedSocket {
        fd: std::os::fd::AsRawFd::as_raw_fd(l),
        name: (*name).into(),
    }));
    let upgrading = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Set once a new process serves: this one is no longer the service's main process, and
    // tells systemd nothing more.
    let handed_over = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let draining = Arc::clone(&health);
    std::thread::Builder::new()
        .name("lowlat-signals".into())
        .spawn(move || {
            let mut count = 0;
            for signal in signals.forever() {
                if signal == signal_hook::consts::SIGUSR2 {
                    upgrade(
                        invocation.as_ref(),
                        &handover,
                        &Upgrading {
                            busy: Arc::clone(&upgrading),
                            done: Arc::clone(&handed_over),
                            notifier: notifier.clone(),
                        },
                        &handle,
                        grace,
                    );
                    continue;
                }
                let main = !handed_over.load(std::sync::atomic::Ordering::Acquire);
                let systemd = notifier.as_deref().filter(|_| main);
                if signal == signal_hook::consts::SIGHUP {
                    if let Some(n) = systemd {
                        n.reloading();
                    }
                    if let Some(path) = &config_path {
                        reload_config(
                            path,
                            &reloader,
                            &old_args,
                            registry.as_deref(),
                            tls.as_deref(),
                        );
                    }
                    reload(tls.as_deref());
                    if let Some(n) = systemd {
                        n.ready();
                    }
                    continue;
                }
                if signal == signal_hook::consts::SIGUSR1 {
                    if let Some(log) = &access_log {
                        tracing::info!("SIGUSR1: reopening {}", log.path.display());
                        log.reopen();
                    }
                    continue;
                }
                count += 1;
                if count == 1 {
                    if let Some(n) = systemd {
                        n.stopping();
                    }
                    draining.set_draining();
                    if shutdown_delay.is_zero() {
                        tracing::info!(
                            "shutting down: no new connections; requests in flight get up to {:?}",
                            grace
                        );
                        handle.shutdown();
                    } else {
                        tracing::info!(
                            "shutting down: /health says draining; accepting for {shutdown_delay:?} more, then requests in flight get up to {grace:?}"
                        );
                        let handle = handle.clone();
                        std::thread::spawn(move || {
                            std::thread::sleep(shutdown_delay);
                            handle.shutdown();
                        });
                    }
                } else {
                    tracing::warn!("second signal: exiting at once");
                    std::process::exit(1);
                }
            }
        })
        .map_err(ServerError::Signals)?;
    let result = running.wait();
    if let Some(path) = &args.pid_file {
        remove_pid_file(path);
    }
    tracing::info!("stopped");
    result
}

/// `NOTIFY_SOCKET`'s notifier, when systemd (or another service manager) listens; a value
/// that is not an address is reported once and ignored.
fn notifier() -> Option<Arc<crate::notify::Notifier>> {
    match crate::notify::Notifier::from_env() {
        Ok(n) => n.map(Arc::new),
        Err(e) => {
            tracing::warn!("{e}; systemd is not told when this process is ready");
            None
        }
    }
}

/// An upgrade's state, shared between the signal thread and the thread that waits for the new
/// process.
struct Upgrading {
    /// An upgrade is under way (or done): another USR2 is refused.
    busy: Arc<std::sync::atomic::AtomicBool>,
    /// The new process serves: this one drains.
    done: Arc<std::sync::atomic::AtomicBool>,
    /// Told the new process's pid, when systemd listens.
    notifier: Option<Arc<crate::notify::Notifier>>,
}

/// SIGUSR2: the binary started again with every listening socket; once it reports that it
/// serves, systemd (when it listens) is told that the new process is the main one, and this
/// process stops accepting and drains. One upgrade at a time; a failed one leaves this process
/// serving, and may be tried again.
fn upgrade(
    invocation: Option<&crate::upgrade::Invocation>,
    sockets: &[crate::upgrade::HandedSocket],
    upgrading: &Upgrading,
    handle: &crate::ShutdownHandle,
    grace: std::time::Duration,
) {
    use std::sync::atomic::Ordering;
    let Some(inv) = invocation.cloned() else {
        tracing::error!("SIGUSR2: this process's binary path is unknown; not upgraded");
        return;
    };
    if upgrading.busy.swap(true, Ordering::AcqRel) {
        tracing::warn!("SIGUSR2: an upgrade is already under way");
        return;
    }
    tracing::info!(
        "SIGUSR2: starting {} with {} listening sockets",
        inv.exe.display(),
        sockets.len()
    );
    let sockets = sockets.to_vec();
    let busy = Arc::clone(&upgrading.busy);
    let done = Arc::clone(&upgrading.done);
    let notifier = upgrading.notifier.clone();
    let handle = handle.clone();
    // Off the signal thread: a SIGTERM while the new process starts is still heard.
    std::thread::spawn(move || match crate::upgrade::start(&inv, &sockets) {
        Ok(pid) => {
            tracing::info!(
                "SIGUSR2: the new process (pid {pid}) serves; this one stops accepting and drains (up to {grace:?})"
            );
            // Before anything else: systemd must know the new main process before this one,
            // draining, can exit.
            done.store(true, Ordering::Release);
            if let Some(n) = &notifier {
                n.main_pid(pid);
            }
            handle.hand_over();
        }
        Err(e) => {
            tracing::error!("SIGUSR2: {e}; this process keeps serving");
            busy.store(false, Ordering::Release);
        }
    });
}

/// Writes this process's id, replacing the file atomically (a reader never sees it half written).
fn write_pid_file(path: &std::path::Path) {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = std::fs::write(&tmp, format!("{}\n", std::process::id()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!("--pid-file: cannot write {}: {e}", path.display());
    }
}

/// Removes the pid file if it still names this process (after an upgrade it names the new one).
fn remove_pid_file(path: &std::path::Path) {
    let ours =
        std::fs::read_to_string(path).is_ok_and(|t| t.trim() == std::process::id().to_string());
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

/// The settings a reload cannot change (sockets, threads, limits, logs): a change to one is kept
/// for the next start.
fn restart_settings(a: &ServeArgs) -> Vec<(&'static str, String)> {
    let d = |v: &dyn std::fmt::Debug| format!("{v:?}");
    vec![
        ("listen", d(&a.listen)),
        ("tls_listen", d(&a.tls_listen)),
        ("accept_proxy_protocol", d(&a.accept_proxy_protocol)),
        ("workers", d(&a.workers)),
        ("pin", d(&a.pin)),
        ("backlog", d(&a.backlog)),
        ("max_conns", d(&a.max_conns)),
        ("max_uri", d(&a.max_uri)),
        ("max_head", d(&a.max_head)),
        ("max_headers", d(&a.max_headers)),
        ("max_body", d(&a.max_body)),
        ("keepalive_timeout", d(&a.keepalive_timeout)),
        ("header_timeout", d(&a.header_timeout)),
        ("body_timeout", d(&a.body_timeout)),
        ("write_timeout", d(&a.write_timeout)),
        ("grace", d(&a.grace)),
        ("cert", d(&a.cert)),
        ("key", d(&a.key)),
        ("tls_handshake_timeout", d(&a.tls_handshake_timeout)),
        ("tls_crypto", d(&a.tls_crypto)),
        ("acme_*", d(&a.acme_config())),
        ("h2_*", d(&a.h2)),
        ("log_level", d(&a.log_level)),
        ("log_format", d(&a.log_format)),
        ("access_log", d(&a.access_log)),
        ("access_log_format", d(&a.access_log_format)),
        ("metrics", d(&a.metrics)),
        ("health", d(&a.health)),
        ("pid_file", d(&a.pid_file)),
    ]
}

/// SIGHUP with `--config`: re-reads the file (under the same command line) and serves the new
/// files and app settings from the next request on; a file that does not check is refused and
/// the configuration in use stays. The sites' client-certificate rules go to the TLS layer
/// first, so that no request is answered under a rule its handshakes were not asked under.
fn reload_config(
    path: &std::path::Path,
    reloader: &crate::ReloadHandle,
    old: &[(&'static str, String)],
    registry: Option<&crate::metrics::Registry>,
    tls: Option<&TlsContext>,
) {
    let new = match merged(path, &command_line()) {
        Ok(new) => new,
        Err(errors) => {
            for e in errors {
                tracing::error!("SIGHUP: {e}");
            }
            tracing::error!(
                "SIGHUP: {}: not reloaded; the configuration in use is kept",
                path.display()
            );
            return;
        }
    };
    let kept = |e: &dyn std::fmt::Display| {
        tracing::error!(
            "SIGHUP: {}: {e}; the configuration in use is kept",
            path.display()
        );
    };
    let client_auth = match new.client_auth_sites() {
        Ok(sites) => sites,
        Err(e) => return kept(&e),
    };
    match service_with_upstreams(&new) {
        Ok((svc, upstreams)) => {
            if let Some(tls) = tls {
                if let Err(e) = tls.set_client_auth(client_auth) {
                    return kept(&e);
                }
            }
            reloader.set_service(svc);
            if let Some(r) = registry {
                r.set_sites(site_labels(&new));
                r.set_upstreams(upstreams);
            }
            tracing::info!(
                "SIGHUP: {}: reloaded (files, the app and the built-in routes)",
                path.display()
            );
            let changed: Vec<&str> = restart_settings(&new)
                .iter()
                .zip(old)
                .filter(|(n, o)| n.1 != o.1)
                .map(|(n, _)| n.0)
                .collect();
            if !changed.is_empty() {
                tracing::warn!(
                    "SIGHUP: {}: {} changed: kept as they were until a restart (addresses, workers, limits, timeouts, certificates' paths and logs change only at a restart)",
                    path.display(),
                    changed.join(", ")
                );
            }
        }
        Err(e) => kept(&e),
    }
}

/// SIGHUP: re-reads the certificates and the client CA files; connections already open keep
/// theirs.
fn reload(tls: Option<&TlsContext>) {
    let Some(tls) = tls else {
        return;
    };
    match tls.reload() {
        Ok(store) => {
            tracing::info!(
                "SIGHUP: reloaded {} certificate{}",
                store.certs.len(),
                if store.certs.len() == 1 { "" } else { "s" }
            );
            warn_expired(tls);
        }
        Err(e) => tracing::error!("SIGHUP: {e}; the certificates in use are kept"),
    }
}
