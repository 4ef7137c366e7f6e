//! The `lowlat serve` command line: flags, their parsing (sizes like `16k`, durations like
//! `75s`), assembling the service, signal handling, and the one-line errors.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use crate::config::{self, ServerConfig};
use crate::router::{RouteError, Router};
use crate::tls::{CertPaths, CryptoBackend, TlsContext};
use crate::{Server, ServerError, Service, WorkerInfo};

/// Arguments of `lowlat serve`.
#[derive(Debug, clap::Args)]
#[allow(clippy::struct_excessive_bools)] // independent on/off flags
pub struct ServeArgs {
    /// Read settings from this TOML file (every flag is a key named like it; flags on the
    /// command line override it; see lowlat.example.toml)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Check the configuration (file and flags), print one line per problem, and exit 0 or 1
    #[arg(long)]
    pub check_config: bool,
    /// Address to listen on in clear, IPv4 or IPv6 (repeatable) [default: 127.0.0.1:8080 unless
    /// --tls-listen is given]
    #[arg(short, long = "listen", value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub listen: Vec<ListenAddr>,
    /// Address to listen on with TLS (repeatable; needs --cert and --key)
    #[arg(long = "tls-listen", value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub tls_listen: Vec<ListenAddr>,
    /// TLS certificate chain, PEM, leaf first (repeatable: each serves the names it lists, chosen
    /// by SNI; the first is the default)
    #[arg(long = "cert", value_name = "FILE")]
    pub cert: Vec<PathBuf>,
    /// Private key (PEM) of the --cert in the same position
    #[arg(long = "key", value_name = "FILE")]
    pub key: Vec<PathBuf>,
    /// Time allowed from accept to a finished TLS handshake
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub tls_handshake_timeout: Duration,
    /// Cryptography library under TLS
    #[arg(long, value_name = "LIB", default_value = "aws-lc-rs", value_parser = parse_crypto)]
    pub tls_crypto: CryptoBackend,
    /// Error log level: error, warn, info, debug (every failed file open), trace [default:
    /// RUST_LOG, else info]
    #[arg(long, value_name = "LEVEL", value_parser = ["error", "warn", "info", "debug", "trace"])]
    pub log_level: Option<String>,
    /// Error log format on stderr
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (a listener of its own; off by
    /// default)
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Log every request to this file (off by default; SIGUSR1 reopens it)
    #[arg(long, value_name = "PATH")]
    pub access_log: Option<PathBuf>,
    /// Access log format: nginx's combined, or one JSON object a line
    #[arg(long, value_name = "FORMAT", default_value = "combined", value_parser = ["combined", "json"], requires = "access_log")]
    pub access_log_format: String,
    /// Worker threads, one event loop each [default: number of CPUs]
    #[arg(short, long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
    /// Pin worker i to the i-th CPU this process may use
    #[arg(long)]
    pub pin: bool,
    /// Listen backlog (capped by net.core.somaxconn)
    #[arg(long, default_value_t = config::DEFAULT_BACKLOG, value_parser = clap::value_parser!(u32).range(1..))]
    pub backlog: u32,
    /// Open connections per worker; more wait in the backlog
    #[arg(long, value_name = "N", default_value_t = config::DEFAULT_MAX_CONNS_PER_WORKER, value_parser = parse_count)]
    pub max_conns: usize,
    /// Longest request-target, else 414
    #[arg(long, value_name = "SIZE", default_value = "8k", value_parser = parse_size)]
    pub max_uri: u64,
    /// Largest request head, else 431
    #[arg(long, value_name = "SIZE", default_value = "16k", value_parser = parse_size)]
    pub max_head: u64,
    /// Most header fields per request (at most 100), else 431
    #[arg(long, value_name = "N", default_value_t = lowlat_http::limits::MAX_HEADERS, value_parser = parse_max_headers)]
    pub max_headers: usize,
    /// Largest request body, else 413
    #[arg(long, value_name = "SIZE", default_value = "1m", value_parser = parse_size)]
    pub max_body: u64,
    /// Close idle keep-alive connections after this long
    #[arg(long, value_name = "DURATION", default_value = "75s", value_parser = parse_duration)]
    pub keepalive_timeout: Duration,
    /// Time allowed for a whole request head, from its first byte (408 after)
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// Longest pause while reading a request body (408 after)
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// Longest pause while the client does not read our response
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub write_timeout: Duration,
    /// On SIGINT/SIGTERM, how long requests in flight may take to finish
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,
    /// Add this header line to every response, as nginx's add_header (repeatable)
    #[arg(long = "add-header", value_name = "NAME: VALUE", value_parser = parse_add_header)]
    pub add_header: Vec<String>,
    /// Do not mount the built-in GET /plaintext
    #[arg(long)]
    pub no_plaintext: bool,
    /// Do not mount the built-in GET /json
    #[arg(long)]
    pub no_json: bool,
    /// Sites chosen by `Host` (`[[site]]` tables of a config file; no flag): the first is the
    /// default, for a request naming no listed site.
    #[arg(skip)]
    pub sites: Vec<SiteArgs>,
    #[command(flatten)]
    pub h2: crate::h2::config::H2Args,
    #[command(flatten)]
    pub files: crate::files::FilesArgs,
    #[command(flatten)]
    pub app: crate::app::AppArgs,
}

impl ServeArgs {
    /// The server configuration these flags describe.
    ///
    /// # Errors
    /// When a size does not fit this machine's address space.
    pub fn to_config(&self) -> Result<ServerConfig, String> {
        let size =
            |v: u64, flag: &str| usize::try_from(v).map_err(|_| format!("{flag} {v} is too large"));
        let mut listen = ListenAddr::flatten(&self.listen);
        if listen.is_empty() && self.tls_listen.is_empty() {
            listen.push(
                config::DEFAULT_LISTEN
                    .parse()
                    .map_err(|_| "bad default address")?,
            );
        }
        if self.cert.len() != self.key.len() {
            return Err(format!(
                "--cert and --key come in pairs ({} --cert, {} --key)",
                self.cert.len(),
                self.key.len()
            ));
        }
        if self.tls_listen.is_empty() && !self.cert.is_empty() {
            return Err("--cert is for --tls-listen, which is not given".into());
        }
        if !self.tls_listen.is_empty() && self.cert.is_empty() {
            return Err("--tls-listen needs a certificate (--cert FILE --key FILE)".into());
        }
        let access_log = self.access_log.as_ref().map(|path| {
            Arc::new(crate::access_log::AccessLogConfig::new(
                path.clone(),
                if self.access_log_format == "json" {
                    crate::access_log::Format::Json
                } else {
                    crate::access_log::Format::Combined
                },
            ))
        });
        let mut cfg = ServerConfig {
            access_log,
            listen,
            tls_listen: ListenAddr::flatten(&self.tls_listen),
            tls_handshake_timeout: self.tls_handshake_timeout,
            pin: self.pin,
            backlog: self.backlog,
            max_conns_per_worker: self.max_conns,
            max_body_bytes: self.max_body,
            keepalive_timeout: self.keepalive_timeout,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            write_timeout: self.write_timeout,
            grace: self.grace,
            h2: self.h2.to_config(),
            ..ServerConfig::default()
        };
        if let Some(workers) = self.workers {
            cfg.workers = usize::from(workers);
        }
        cfg.head.max_uri_bytes = size(self.max_uri, "--max-uri")?;
        cfg.head.max_head_bytes = size(self.max_head, "--max-head")?;
        cfg.head.max_headers = self.max_headers;
        if cfg.head.max_uri_bytes >= cfg.head.max_head_bytes {
            return Err("--max-uri must be smaller than --max-head".into());
        }
        Ok(cfg)
    }

    /// Loads the certificates, when TLS is asked for.
    ///
    /// # Errors
    /// One line naming the file at fault.
    pub fn tls_context(&self) -> Result<Option<Arc<TlsContext>>, String> {
        if self.tls_listen.is_empty() {
            return Ok(None);
        }
        let pairs: Vec<CertPaths> = self
            .cert
            .iter()
            .zip(&self.key)
            .map(|(cert, key)| CertPaths {
                cert: cert.clone(),
                key: key.clone(),
            })
            .collect();
        let alpn = if self.h2.no_h2 {
            crate::tls::ALPN_HTTP1
        } else {
            crate::tls::ALPN_H2_HTTP1
        };
        let ctx = TlsContext::new(&pairs, self.tls_crypto, alpn).map_err(|e| e.to_string())?;
        Ok(Some(Arc::new(ctx)))
    }
}

/// One `--listen` value: the addresses it stands for (a host name may resolve to several).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr(pub Vec<SocketAddr>);

impl ListenAddr {
    fn flatten(list: &[Self]) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = Vec::new();
        for addr in list.iter().flat_map(|l| &l.0) {
            if !out.contains(addr) {
                out.push(*addr);
            }
        }
        out
    }
}

/// Parses a listen address as nginx's `listen` takes it: `127.0.0.1:8080`, `[::1]:8080`,
/// `:8080` or `8080` (every IPv4 address, nginx's `listen 8080`), or `localhost:8080` (every
/// address the name resolves to, once each).
///
/// # Errors
/// A message for clap naming what is wrong.
pub fn parse_listen(text: &str) -> Result<ListenAddr, String> {
    use std::net::ToSocketAddrs;
    let t = text.trim();
    if let Ok(addr) = t.parse::<SocketAddr>() {
        return Ok(ListenAddr(vec![addr]));
    }
    let port_only = t.strip_prefix(':').unwrap_or(t);
    if !port_only.is_empty() && port_only.bytes().all(|b| b.is_ascii_digit()) {
        let port: u16 = port_only
            .parse()
            .map_err(|_| format!("{text:?}: port {port_only} is above 65535"))?;
        return Ok(ListenAddr(vec![SocketAddr::from(([0, 0, 0, 0], port))]));
    }
    let Some((host, port)) = t.rsplit_once(':') else {
        return Err(format!(
            "{text:?} is not an address (e.g. 127.0.0.1:8080, [::]:8080, :8080, localhost:8080)"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{text:?}: {port:?} is not a port (0 to 65535)"))?;
    if host.is_empty() || host.contains(':') {
        return Err(format!(
            "{text:?} is not an address (an IPv6 address goes in brackets: [::1]:8080)"
        ));
    }
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for addr in (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{text:?}: cannot resolve {host}: {e}"))?
    {
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    if addrs.is_empty() {
        return Err(format!("{text:?}: {host} resolves to no address"));
    }
    Ok(ListenAddr(addrs))
}

fn parse_crypto(text: &str) -> Result<CryptoBackend, String> {
    match text {
        "aws-lc-rs" => Ok(CryptoBackend::AwsLcRs),
        "ring" => Ok(CryptoBackend::Ring),
        _ => Err(format!("{text:?} is not a TLS library (aws-lc-rs or ring)")),
    }
}

/// Warns, once per certificate, about one that has expired (it is served anyway: the operator
/// may be about to replace it, and a server that refuses to start is worse than a warning).
fn warn_expired(ctx: &TlsContext) {
    for cert in &ctx.certificates().certs {
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
    let args = match &args.config {
        Some(path) => match crate::config_file::merged(path, &command_line()) {
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
    if args.check_config {
        return check_config(&args);
    }
    init_logging(&args);
    raise_fd_limit();
    let service = match service(&args) {
        Ok(service) => service,
        Err(e) => {
            eprintln!("lowlat serve: {e}");
            return ExitCode::from(1);
        }
    };
    match serve(&args, service) {
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

/// `--check-config`: everything a start would check short of binding, one line per problem.
fn check_config(args: &ServeArgs) -> ExitCode {
    let mut problems = Vec::new();
    if let Err(e) = args.to_config() {
        problems.push(e);
    }
    if let Err(e) = args.tls_context() {
        problems.push(e);
    }
    if let Err(e) = service(args) {
        problems.push(e);
    }
    if let Some(path) = &args.access_log {
        if let Err(e) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            problems.push(format!("cannot open {}: {e}", path.display()));
        }
    }
    if problems.is_empty() {
        let what = args
            .config
            .as_ref()
            .map_or_else(|| "the flags".to_owned(), |p| p.display().to_string());
        println!("lowlat serve: {what}: configuration ok");
        ExitCode::SUCCESS
    } else {
        for p in problems {
            eprintln!("lowlat serve: {p}");
        }
        ExitCode::from(1)
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

/// The service `lowlat serve` runs: the built-in endpoints, the dynamic app (unless turned off),
/// and static files for every path no route claims.
///
/// The built-in routes are demo and benchmark routes, so the user's own files come first: with
/// `--root`, a file or directory at `/plaintext`, `/json` or the app's prefix keeps that route
/// unmounted (said once on stderr). The check is made at start, as nginx resolves its locations
/// at start: a file created later under such a path is served only after a restart.
///
/// # Errors
/// A one-line reason when the static or app flags are unusable.
pub fn service(args: &ServeArgs) -> Result<Service, String> {
    let workers = args.to_config().map_or(1, |c| c.workers);
    let default_site = SiteArgs {
        server_names: Vec::new(),
        files: args.files.clone(),
        app: args.app.clone(),
        no_plaintext: args.no_plaintext,
        no_json: args.no_json,
        add_header: args.add_header.clone(),
    };
    let sites: Vec<(Vec<String>, SiteService)> = if args.sites.is_empty() {
        vec![(Vec::new(), SiteService::new(&default_site, workers)?)]
    } else {
        args.sites
            .iter()
            .map(|s| {
                SiteService::new(s, workers)
                    .map(|svc| (s.server_names.clone(), svc))
                    .map_err(|e| format!("site {}: {e}", s.server_names.join(", ")))
            })
            .collect::<Result<_, _>>()?
    };
    // The first site is the default (a request naming no listed site goes to it); the others
    // are chosen by Host. Check once, here, that the routes fit together, so the per-worker
    // builds cannot fail.
    let build = move |info: &WorkerInfo| -> Result<Router, RouteError> {
        let mut router = sites[0].1.build(info)?;
        for (names, site) in &sites[1..] {
            router.add_site(names, site.build(info)?);
        }
        Ok(router)
    };
    build(&WorkerInfo { index: 0 }).map_err(|e| e.to_string())?;
    Ok(Arc::new(move |info: &WorkerInfo| {
        build(info).unwrap_or_else(|_| Router::new())
    }))
}

/// One site's settings: the names it answers to and what it serves.
#[derive(Debug, Clone)]
pub struct SiteArgs {
    /// Host names (`example.com`, `*.example.com`).
    pub server_names: Vec<String>,
    pub files: crate::files::FilesArgs,
    pub app: crate::app::AppArgs,
    pub no_plaintext: bool,
    pub no_json: bool,
    /// Header lines added to every response of the site.
    pub add_header: Vec<String>,
}

/// One site, ready to build a router on each worker.
struct SiteService {
    files: Arc<crate::files::FilesConfig>,
    app: Option<Arc<crate::app::AppShared>>,
    plaintext_on: bool,
    json_on: bool,
    add_header: Vec<String>,
}

impl SiteService {
    fn new(site: &SiteArgs, workers: usize) -> Result<Self, String> {
        let files = crate::files::FilesConfig::from_args(&site.files, workers)?;
        let mut app = crate::app::AppShared::from_args(&site.app)?;
        let root = site.files.root.as_deref();
        let plaintext_on = !site.no_plaintext && !shadowed(root, crate::builtin::PATHS[0]);
        let json_on = !site.no_json && !shadowed(root, crate::builtin::PATHS[1]);
        if app
            .as_ref()
            .is_some_and(|a| !a.prefix().is_empty() && shadowed(root, a.prefix()))
        {
            app = None;
        }
        Ok(Self {
            files,
            app,
            plaintext_on,
            json_on,
            add_header: site.add_header.clone(),
        })
    }

    fn build(&self, info: &WorkerInfo) -> Result<Router, RouteError> {
        let mut router = Router::new();
        crate::builtin::mount_some(&mut router, self.plaintext_on, self.json_on)?;
        if let Some(app) = &self.app {
            crate::app::mount(&mut router, app, info)?;
        }
        crate::files::mount(&mut router, &self.files);
        router.set_extra_headers(&self.add_header);
        Ok(router)
    }
}

/// Parses `Name: value` for `--add-header`: a token name, a value without CR or LF, and not a
/// header the server frames itself.
fn parse_add_header(text: &str) -> Result<String, String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not \"Name: value\""))?;
    let name = name.trim();
    let value = value.trim();
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(format!("{name:?} is not a header name"));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!("the value of {name} holds a line break"));
    }
    for framed in [
        "content-length",
        "transfer-encoding",
        "connection",
        "date",
        "server",
    ] {
        if name.eq_ignore_ascii_case(framed) {
            return Err(format!("{name} is set by the server itself"));
        }
    }
    Ok(format!("{name}: {value}"))
}

/// Whether the document root has something at `route` (a file or a directory), which then wins
/// over the built-in route of that path. Said on stderr when it does.
fn shadowed(root: Option<&std::path::Path>, route: &str) -> bool {
    let Some(root) = root else {
        return false;
    };
    let path = root.join(route.trim_start_matches('/'));
    let found = path.symlink_metadata().is_ok();
    if found {
        tracing::info!(
            "{route} is served from {} (a file there wins over the built-in route)",
            path.display()
        );
    }
    found
}

/// Binds, starts, and serves until SIGINT/SIGTERM, then shuts down gracefully. A second signal
/// exits at once.
///
/// # Errors
/// Bind failures, bad configuration, a worker that failed.
pub fn serve(args: &ServeArgs, service: Service) -> Result<(), ServerError> {
    let mut cfg = args.to_config().map_err(ServerError::Config)?;
    let tls = args.tls_context().map_err(ServerError::Config)?;
    if let Some(tls) = &tls {
        warn_expired(tls);
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
    }
    cfg.metrics.clone_from(&registry);
    let server = Server::bind(cfg, service)?;
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGUSR1,
    ])
    .map_err(ServerError::Signals)?;
    if let (Some(addr), Some(registry)) = (args.metrics, registry.clone()) {
        let bound = crate::metrics::serve(addr, registry)
            .map_err(|source| ServerError::Bind { addr, source })?;
        tracing::info!("metrics on http://{bound}/metrics");
    }
    let running = server.start()?;
    let addrs: Vec<String> = running
        .local_addrs()
        .iter()
        .map(|a| format!("http://{a}"))
        .chain(running.tls_addrs().iter().map(|a| format!("https://{a}")))
        .collect();
    tracing::info!(
        "listening on {} ({workers} worker{})",
        addrs.join(" "),
        if workers == 1 { "" } else { "s" }
    );
    let handle = running.shutdown_handle();
    let reloader = running.reload_handle();
    let config_path = args.config.clone();
    let old_args = format!("{:?}", restart_settings(args));
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

/// The `site` label of each router index on `/metrics`: a site's first server name, in the
/// order the router numbers them (the first site is the default).
fn site_labels(args: &ServeArgs) -> Vec<String> {
    if args.sites.is_empty() {
        return vec!["default".to_owned()];
    }
    args.sites
        .iter()
        .map(|s| {
            s.server_names
                .first()
                .cloned()
                .unwrap_or_else(|| "default".to_owned())
        })
        .collect()
}

/// The settings a reload cannot change (sockets, threads, limits, logs): a change to one is kept
/// for the next start.
fn restart_settings(a: &ServeArgs) -> impl std::fmt::Debug + '_ {
    (
        (
            &a.listen,
            &a.tls_listen,
            a.workers,
            a.pin,
            a.backlog,
            a.max_conns,
        ),
        (a.max_uri, a.max_head, a.max_headers, a.max_body),
        (
            a.keepalive_timeout,
            a.header_timeout,
            a.body_timeout,
            a.write_timeout,
            a.grace,
        ),
        (
            &a.cert,
            &a.key,
            a.tls_handshake_timeout,
            a.tls_crypto,
            &a.h2,
        ),
        (
            &a.log_level,
            &a.log_format,
            &a.access_log,
            &a.access_log_format,
            a.metrics,
        ),
    )
}

/// SIGHUP with `--config`: re-reads the file (under the same command line) and serves the new
/// files and app settings from the next request on; a file that does not check is refused and
/// the configuration in use stays.
fn reload_config(
    path: &std::path::Path,
    reloader: &crate::ReloadHandle,
    old: &str,
    registry: Option<&crate::metrics::Registry>,
) {
    let new = match crate::config_file::merged(path, &command_line()) {
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
    match service(&new) {
        Ok(svc) => {
            reloader.set_service(svc);
            if let Some(r) = registry {
                r.set_sites(site_labels(&new));
            }
            tracing::info!(
                "SIGHUP: {}: reloaded (files, the app and the built-in routes)",
                path.display()
            );
            if format!("{:?}", restart_settings(&new)) != old {
                tracing::warn!(
                    "SIGHUP: {}: addresses, workers, limits, timeouts, certificates' paths and logs change only at a restart",
                    path.display()
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

/// Parses a size for a flag that needs at least one byte (the shared parser:
/// [`lowlat_http::units::parse_size`]).
///
/// # Errors
/// A message for clap when the text is not a size, or is zero.
pub fn parse_size(text: &str) -> Result<u64, String> {
    match lowlat_http::units::parse_size(text)? {
        0 => Err(format!("{text:?} must be at least 1 byte")),
        n => Ok(n),
    }
}

/// Parses a duration for a flag that must be positive (the shared parser:
/// [`lowlat_http::units::parse_duration`]).
///
/// # Errors
/// A message for clap when the text is not a duration, or is zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = lowlat_http::units::parse_duration(text)?;
    if d.is_zero() {
        return Err(format!("{text:?} must be positive"));
    }
    Ok(d)
}

fn parse_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{text:?} is not a positive number")),
    }
}

fn parse_max_headers(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=lowlat_http::limits::MAX_HEADERS).contains(&n) => Ok(n),
        _ => Err(format!(
            "{text:?} is not a number from 1 to {}",
            lowlat_http::limits::MAX_HEADERS
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("16k"), Ok(16 * 1024));
        assert_eq!(parse_size("16KiB"), Ok(16 * 1024));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1.5m"), Ok(3 << 19));
        for bad in ["", "k", "1x", "-1", "0", "99999999999999g"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses() {
        let one = |t: &str| parse_listen(t).unwrap().0;
        assert_eq!(
            one("127.0.0.1:8080"),
            vec!["127.0.0.1:8080".parse().unwrap()]
        );
        assert_eq!(one("[::1]:8080"), vec!["[::1]:8080".parse().unwrap()]);
        assert_eq!(one(":8080"), vec!["0.0.0.0:8080".parse().unwrap()]);
        assert_eq!(one("8080"), vec!["0.0.0.0:8080".parse().unwrap()]);
        let local = one("localhost:8080");
        assert!(
            local.contains(&"127.0.0.1:8080".parse().unwrap()),
            "{local:?}"
        );
        assert!(local
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 8080));
        for bad in [
            "",
            ":",
            "nonsense",
            ":99999",
            "localhost:",
            "localhost:http",
            "::1:8080",
        ] {
            let err = parse_listen(bad).unwrap_err();
            assert!(err.starts_with(&format!("{bad:?}")), "{bad}: {err}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        for bad in ["", "s", "0", "0s", "1y", "-1s", "nan"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let long = parse_duration("99999999999").unwrap_err();
        assert!(long.contains("too long"), "{long}");
    }
}
