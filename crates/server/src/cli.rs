//! Running `lowlat serve`: reading its settings (flags, then the config file under them),
//! starting the server, and handling signals — SIGINT/SIGTERM (graceful shutdown), SIGHUP
//! (reload), SIGUSR1 (reopen the access log) — with one-line errors.

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
    match serve_with(&args, service, upstreams, inherited) {
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
    serve_with(args, service, Vec::new(), Vec::new())
}

/// Handed-over sockets that no listen address names are listened on as their names say
/// (`http`, `https`, `quic`): a `.socket` unit alone can then say where lowlat listens.
fn listen_on_inherited(args: &mut ServeArgs, inherited: &[crate::inherit::InheritedSocket]) {
    use crate::inherit::Kind;
    use crate::settings::ListenAddr;
    let named = |list: &[ListenAddr], addr| list.iter().any(|l| l.addrs.contains(&addr));
    for sock in inherited {
        let addr = sock.addr;
        if named(&args.listen, addr) || named(&args.tls_listen, addr) {
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
            Kind::Quic | Kind::Stream => {}
        }
    }
}

/// [`serve`], with the reverse proxy's groups reported on `/metrics`.
fn serve_with(
    args: &ServeArgs,
    service: Service,
    upstreams: Vec<GroupView>,
    inherited: Vec<crate::inherit::InheritedSocket>,
) -> Result<(), ServerError> {
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
    ])
    .map_err(ServerError::Signals)?;
    if let (Some(addr), Some(registry)) = (args.metrics, registry.clone()) {
        let bound = crate::metrics::serve(addr, registry)
            .map_err(|source| ServerError::MetricsBind { addr, source })?;
        tracing::info!("metrics on http://{bound}/metrics");
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
    let handle = running.shutdown_handle();
    let reloader = running.reload_handle();
    let config_path = args.config.clone();
    let old_args = restart_settings(args);
    let grace = args.grace;
    std::thread::Builder::new()
        .name("lowlat-signals".into())
        .spawn(move || {
            let mut count = 0;
            for signal in signals.forever() {
                if signal == signal_hook::consts::SIGHUP {
                    if let Some(path) = &config_path {
                        reload_config(path, &reloader, &old_args, registry.as_deref());
                    }
                    reload(tls.as_deref());
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
                    tracing::info!(
                        "shutting down: no new connections; requests in flight get up to {:?}",
                        grace
                    );
                    handle.shutdown();
                } else {
                    tracing::warn!("second signal: exiting at once");
                    std::process::exit(1);
                }
            }
        })
        .map_err(ServerError::Signals)?;
    let result = running.wait();
    tracing::info!("stopped");
    result
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
    ]
}

/// SIGHUP with `--config`: re-reads the file (under the same command line) and serves the new
/// files and app settings from the next request on; a file that does not check is refused and
/// the configuration in use stays.
fn reload_config(
    path: &std::path::Path,
    reloader: &crate::ReloadHandle,
    old: &[(&'static str, String)],
    registry: Option<&crate::metrics::Registry>,
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
    match service_with_upstreams(&new) {
        Ok((svc, upstreams)) => {
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
        Err(e) => tracing::error!(
            "SIGHUP: {}: {e}; the configuration in use is kept",
            path.display()
        ),
    }
}

/// SIGHUP: re-reads the certificates; connections already open keep theirs.
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
