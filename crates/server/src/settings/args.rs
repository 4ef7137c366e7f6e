//! The flags of `lowlat serve` ([`ServeArgs`]), each with its parser, and the server
//! configuration they describe ([`ServeArgs::to_config`]). A config file's keys are these same
//! flags (`super::file`), so both are checked by one parser per setting.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lowlat_http::units::{parse_nonzero_size, parse_positive_duration};

use super::proxy::{parse_cidr, parse_proxy_rule, GroupArgs, ProxyRule, UpstreamTable};
use crate::acme::{AcmeConfig, ChallengeKind};
use crate::config::{self, ServerConfig};
use crate::proxy::config::Cidr;
use crate::tls::{CertPaths, CryptoBackend, TlsContext};

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
    /// Address to listen on in clear, IPv4 or IPv6 (repeatable; 'ADDR:PORT proxy_protocol':
    /// connections from --accept-proxy-protocol networks start with a PROXY header)
    /// [default: 127.0.0.1:8080 unless --tls-listen is given]
    #[arg(short, long = "listen", value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub listen: Vec<ListenAddr>,
    /// Address to listen on with TLS (repeatable; needs --cert and --key; 'ADDR:PORT
    /// proxy_protocol' as for --listen: the header comes before TLS)
    #[arg(long = "tls-listen", value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub tls_listen: Vec<ListenAddr>,
    /// A balancer's network (ADDR or ADDR/BITS, repeatable) whose connections must start with a
    /// PROXY protocol header (v1 or v2), whose client address then stands for the connection's;
    /// on the listen addresses marked proxy_protocol, or on every TCP one when none is
    #[arg(long = "accept-proxy-protocol", value_name = "NETWORK", value_parser = parse_cidr)]
    pub accept_proxy_protocol: Vec<Cidr>,
    /// TLS certificate chain, PEM, leaf first (repeatable: each serves the names it lists, chosen
    /// by SNI; the first is the default)
    #[arg(long = "cert", value_name = "FILE")]
    pub cert: Vec<PathBuf>,
    /// Private key (PEM) of the --cert in the same position
    #[arg(long = "key", value_name = "FILE")]
    pub key: Vec<PathBuf>,
    /// Time allowed from accept to a finished TLS handshake
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_positive_duration)]
    pub tls_handshake_timeout: Duration,
    /// Cryptography library under TLS
    #[arg(long, value_name = "LIB", default_value = "aws-lc-rs", value_parser = parse_crypto)]
    pub tls_crypto: CryptoBackend,
    /// Obtain and renew the certificates of every site without cert and key from an ACME CA
    /// (automatic HTTPS; a [[site]] may say acme = true or false itself)
    #[arg(long)]
    pub acme: bool,
    /// Contact email of the ACME account (optional; the CA may write about the certificates)
    #[arg(long, value_name = "EMAIL", value_parser = parse_email)]
    pub acme_email: Option<String>,
    /// ACME directory URL of the CA (a staging or internal CA's for tests)
    #[arg(long, value_name = "URL", default_value = crate::acme::LETS_ENCRYPT, value_parser = parse_directory)]
    pub acme_directory: String,
    /// Trust this root certificate (PEM) for the ACME directory's HTTPS instead of the system's
    #[arg(long, value_name = "FILE")]
    pub acme_ca_root: Option<PathBuf>,
    /// Challenge types to answer, in order of preference (repeatable): http-01 (on --listen,
    /// port 80 for a public CA), tls-alpn-01 (on --tls-listen, port 443) [default: both,
    /// http-01 first when there is a --listen]
    #[arg(long = "acme-challenge", value_name = "TYPE", value_parser = parse_challenge)]
    pub acme_challenge: Vec<ChallengeKind>,
    /// A name to obtain a certificate for, besides the sites' (repeatable; implies --acme)
    #[arg(long = "acme-domain", value_name = "NAME")]
    pub acme_domain: Vec<String>,
    /// Where the ACME account and certificates are kept (several lowlat processes may share it)
    #[arg(long, value_name = "DIR", default_value = crate::acme::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
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
    /// Answer load balancers' and orchestrators' probes at http://ADDR:PORT/health: 200 ok, or
    /// 503 draining once shutdown begins (a listener of its own; off by default)
    #[arg(long, value_name = "ADDR:PORT")]
    pub health: Option<SocketAddr>,
    /// On SIGTERM/SIGINT, keep accepting this long while /health says draining, so that
    /// balancers stop sending first; then stop accepting and drain (--grace)
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = lowlat_http::units::parse_duration)]
    pub shutdown_delay: Duration,
    /// Write the process id to this file (rewritten by the new process after a USR2 upgrade)
    #[arg(long, value_name = "PATH")]
    pub pid_file: Option<PathBuf>,
    /// Log every request to this file (off by default; SIGUSR1 reopens it)
    #[arg(long, value_name = "PATH")]
    pub access_log: Option<PathBuf>,
    /// Access log format: combined (nginx's), json (one object a line), the name of a
    /// [log_format] of the config file, or a format itself ('$remote_addr "$request" $status')
    #[arg(long, value_name = "FORMAT", default_value = "combined", value_parser = parse_access_log_format, requires = "access_log")]
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
    #[arg(long, value_name = "SIZE", default_value = "8k", value_parser = parse_nonzero_size)]
    pub max_uri: u64,
    /// Largest request head, else 431
    #[arg(long, value_name = "SIZE", default_value = "16k", value_parser = parse_nonzero_size)]
    pub max_head: u64,
    /// Most header fields per request (at most 100), else 431
    #[arg(long, value_name = "N", default_value_t = lowlat_http::limits::MAX_HEADERS, value_parser = parse_max_headers)]
    pub max_headers: usize,
    /// Largest request body, else 413
    #[arg(long, value_name = "SIZE", default_value = "1m", value_parser = parse_nonzero_size)]
    pub max_body: u64,
    /// Close idle keep-alive connections after this long
    #[arg(long, value_name = "DURATION", default_value = "75s", value_parser = parse_positive_duration)]
    pub keepalive_timeout: Duration,
    /// Time allowed for a whole request head, from its first byte (408 after)
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_positive_duration)]
    pub header_timeout: Duration,
    /// Longest pause while reading a request body (408 after)
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration)]
    pub body_timeout: Duration,
    /// Longest pause while the client does not read our response
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration)]
    pub write_timeout: Duration,
    /// On SIGINT/SIGTERM, how long requests in flight may take to finish
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_positive_duration)]
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
    /// Forward requests under PREFIX to TARGET: http://HOST:PORT[/PATH] (the path replaces the
    /// prefix; several servers, comma-separated, are balanced), unix:/PATH, or the name of an
    /// [[upstream]] group of the config file (repeatable)
    #[arg(long = "proxy", value_name = "PREFIX=TARGET", value_parser = parse_proxy_rule)]
    pub proxy: Vec<ProxyRule>,
    /// Answer requests under PREFIX with STATUS, as nginx's `return`: a redirect to URL (301,
    /// 302, 303, 307, 308), or TEXT (or the status page) for another status; URL and TEXT may
    /// use $scheme $host $request_uri $uri $args $server_port (repeatable; the longest prefix
    /// among --return and --proxy rules wins)
    #[arg(long = "return", value_name = "PREFIX=STATUS [URL|TEXT]", value_parser = crate::returns::parse_return_rule)]
    pub returns: Vec<crate::returns::ReturnRule>,
    /// Redirect requests that came in clear to HTTPS (308, same host, path and query; the port
    /// of the first --tls-listen unless 443), except ACME challenges under
    /// /.well-known/acme-challenge/
    #[arg(long)]
    pub https_redirect: bool,
    /// A proxy in front of this server whose X-Forwarded-* and Forwarded values are kept and
    /// extended, ADDR or ADDR/BITS (repeatable); from others they are replaced
    #[arg(long = "proxy-trusted", value_name = "NETWORK", value_parser = parse_cidr)]
    pub proxy_trusted: Vec<Cidr>,
    /// Sites chosen by `Host` (`[[site]]` tables of a config file; no flag): the first is the
    /// default, for a request naming no listed site.
    #[arg(skip)]
    pub sites: Vec<SiteArgs>,
    /// Named upstream groups (`[[upstream]]` tables of a config file; no flag).
    #[arg(skip)]
    pub upstreams: Vec<UpstreamTable>,
    /// Named access log formats (the `[log_format]` table of a config file; no flag), each
    /// checked to compile when the file was read.
    #[arg(skip)]
    pub log_formats: Vec<(String, String)>,
    #[command(flatten)]
    pub h2: crate::h2::config::H2Args,
    #[command(flatten)]
    pub quic: super::quic::QuicArgs,
    #[command(flatten)]
    pub files: crate::files::FilesArgs,
    #[command(flatten)]
    pub app: crate::app::AppArgs,
    #[command(flatten)]
    pub php: crate::php::PhpArgs,
    #[command(flatten)]
    pub proxy_group: GroupArgs,
    #[command(flatten)]
    pub cache: super::cache::CacheArgs,
    #[command(flatten)]
    pub guard: super::guard::GuardArgs,
    #[command(flatten)]
    pub client_cert: super::client_cert::ClientCertArgs,
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
        let acme = self.acme_config()?;
        if !self.tls_listen.is_empty() && self.cert.is_empty() && acme.is_none() {
            return Err(
                "--tls-listen needs a certificate (--cert FILE --key FILE, or --acme)".into(),
            );
        }
        if self.quic.h3_listen.is_some() && self.tls_listen.is_empty() {
            return Err(
                "--h3-listen needs TLS: a --tls-listen with its certificate (--cert FILE --key FILE, or --acme); QUIC uses the same certificates"
                    .into(),
            );
        }
        let tls_ports: Vec<u16> = ListenAddr::flatten(&self.tls_listen)
            .iter()
            .map(SocketAddr::port)
            .collect();
        let quic = self.quic.to_config(&tls_ports)?;
        let proxy_protocol = self.proxy_protocol()?;
        let access_log = match &self.access_log {
            None => None,
            Some(path) => Some(Arc::new(
                crate::access_log::AccessLogConfig::new(path.clone(), self.access_log_format()?)
                    .with_sites(self.site_labels()),
            )),
        };
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
            quic,
            proxy_protocol,
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

    /// Which listeners read a PROXY header, and from whom: the addresses marked `proxy_protocol`
    /// (every TCP one when none is but --accept-proxy-protocol is given).
    ///
    /// # Errors
    /// A listener marked `proxy_protocol` with no network to accept it from.
    pub fn proxy_protocol(&self) -> Result<config::ProxyProtocolIn, String> {
        let marked = |list: &[ListenAddr]| -> Vec<SocketAddr> {
            let only: Vec<ListenAddr> = list.iter().filter(|l| l.proxy_protocol).cloned().collect();
            ListenAddr::flatten(&only)
        };
        let (mut clear, mut tls) = (marked(&self.listen), marked(&self.tls_listen));
        if clear.is_empty() && tls.is_empty() {
            if self.accept_proxy_protocol.is_empty() {
                return Ok(config::ProxyProtocolIn::default());
            }
            clear = ListenAddr::flatten(&self.listen);
            tls = ListenAddr::flatten(&self.tls_listen);
        } else if self.accept_proxy_protocol.is_empty() {
            return Err("a listen address marked proxy_protocol needs --accept-proxy-protocol NETWORK: the balancers whose PROXY headers are believed".into());
        }
        Ok(config::ProxyProtocolIn {
            from: self.accept_proxy_protocol.clone(),
            clear,
            tls,
        })
    }

    /// The access log's format: built in, named in `[log_format]`, or given inline.
    ///
    /// # Errors
    /// A name no `[log_format]` defines.
    pub fn access_log_format(&self) -> Result<crate::access_log::Format, String> {
        use crate::access_log::Format;
        use crate::log_format::LogFormat;
        let name = self.access_log_format.as_str();
        let text = match name {
            "combined" => return Ok(Format::Combined),
            "json" => return Ok(Format::Json),
            inline if inline.contains('$') => inline,
            name => self
                .log_formats
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, text)| text.as_str())
                .ok_or_else(|| {
                    format!(
                        "--access-log-format {name}: no [log_format] has this name (built in: combined, json)"
                    )
                })?,
        };
        LogFormat::compile(text)
            .map(|f| Format::Custom(Arc::new(f)))
            .map_err(|e| format!("--access-log-format {name}: {e}"))
    }

    /// The `site` label of each router index (on `/metrics`, in the access log): a site's
    /// first server name, in the order the router numbers them (the first is the default).
    pub(crate) fn site_labels(&self) -> Vec<String> {
        if self.sites.is_empty() {
            return vec!["default".to_owned()];
        }
        self.sites
            .iter()
            .map(|s| {
                s.server_names
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "default".to_owned())
            })
            .collect()
    }

    /// Loads the certificates, when TLS is asked for.
    ///
    /// # Errors
    /// One line naming the file at fault.
    pub fn tls_context(&self) -> Result<Option<Arc<TlsContext>>, String> {
        let client_auth = self.client_auth_sites()?;
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
        let managed = self
            .acme_config()?
            .map(|acme| Arc::new(crate::tls::ManagedCerts::new(&acme.names)));
        let ctx = TlsContext::with_managed(&pairs, self.tls_crypto, alpn, managed)
            .map_err(|e| e.to_string())?;
        ctx.set_client_auth(client_auth)
            .map_err(|e| e.to_string())?;
        Ok(Some(Arc::new(ctx)))
    }

    /// The sites' client-certificate rules, as the TLS layer takes them (`--client-ca`).
    ///
    /// # Errors
    /// Flags that do not fit together, or a rule without a TLS listener.
    pub fn client_auth_sites(&self) -> Result<Vec<crate::tls::ClientAuthSite>, String> {
        let has_tls = !self.tls_listen.is_empty();
        if self.sites.is_empty() {
            return super::client_cert::sites([(&[][..], &self.client_cert)], has_tls);
        }
        let sites = self
            .sites
            .iter()
            .map(|s| (&s.server_names[..], &s.client_cert));
        super::client_cert::sites(sites, has_tls)
    }

    /// What ACME is to do, when it is on: `--acme`, `--acme-domain`, or a site's `acme = true`.
    ///
    /// # Errors
    /// One line: a wildcard name (DNS-01, not done), no name at all, no TLS listener, a
    /// challenge type without its listener.
    pub fn acme_config(&self) -> Result<Option<AcmeConfig>, String> {
        let mut names: Vec<String> = Vec::new();
        for site in &self.sites {
            if site.acme.unwrap_or(self.acme && !site.own_cert) {
                names.extend(site.server_names.iter().cloned());
            }
        }
        names.extend(self.acme_domain.iter().cloned());
        let on = self.acme || !names.is_empty();
        if !on {
            return Ok(None);
        }
        let mut clean: Vec<String> = Vec::new();
        for name in &names {
            let name = check_acme_name(name)?;
            if !clean.contains(&name) {
                clean.push(name);
            }
        }
        if clean.is_empty() {
            return Err("--acme: no name to obtain a certificate for: give [[site]] tables their server_names, or --acme-domain NAME".into());
        }
        if self.tls_listen.is_empty() {
            return Err(
                "--acme needs --tls-listen (:443): the certificates it obtains are served there"
                    .into(),
            );
        }
        let has_clear = !self.listen.is_empty();
        let challenges = if self.acme_challenge.is_empty() {
            let mut c = Vec::new();
            if has_clear {
                c.push(ChallengeKind::Http01);
            }
            c.push(ChallengeKind::TlsAlpn01);
            c
        } else {
            let mut c: Vec<ChallengeKind> = Vec::new();
            for k in &self.acme_challenge {
                if !c.contains(k) {
                    c.push(*k);
                }
            }
            c
        };
        if challenges.contains(&ChallengeKind::Http01) && !has_clear {
            return Err("--acme-challenge http-01 is answered on a --listen address (port 80 for a public CA), and none is given".into());
        }
        Ok(Some(AcmeConfig {
            directory: self.acme_directory.clone(),
            email: self.acme_email.clone(),
            state_dir: self.state_dir.clone(),
            ca_root: self.acme_ca_root.clone(),
            challenges,
            names: clean,
        }))
    }
}

/// A name ACME may ask for: a DNS name, lower-cased, without a trailing dot.
fn check_acme_name(name: &str) -> Result<String, String> {
    let lower = name.trim_end_matches('.').to_ascii_lowercase();
    if lower.starts_with("*.") {
        return Err(format!(
            "{name}: a wildcard certificate needs the DNS-01 challenge, which lowlat does not answer; give this site a cert and key (from another ACME client) or acme = false, or list its names one by one"
        ));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if lower.len() > 253
        || !lower.split('.').all(label_ok)
        || lower.parse::<std::net::IpAddr>().is_ok()
    {
        return Err(format!(
            "{name}: not a DNS name ACME can certify (letters, digits and hyphens in dot-separated labels; no IP address)"
        ));
    }
    Ok(lower)
}

fn parse_email(text: &str) -> Result<String, String> {
    let t = text.trim().trim_start_matches("mailto:");
    match t.split_once('@') {
        Some((user, domain))
            if !user.is_empty() && domain.contains('.') && !t.contains([' ', ',', '<', '>']) =>
        {
            Ok(t.to_owned())
        }
        _ => Err(format!("{text:?} is not an email address")),
    }
}

fn parse_directory(text: &str) -> Result<String, String> {
    if text.starts_with("https://") && text.len() > "https://".len() {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not an ACME directory URL (https://…, e.g. {})",
            crate::acme::LETS_ENCRYPT
        ))
    }
}

fn parse_challenge(text: &str) -> Result<ChallengeKind, String> {
    match text {
        "http-01" => Ok(ChallengeKind::Http01),
        "tls-alpn-01" => Ok(ChallengeKind::TlsAlpn01),
        "dns-01" => Err("dns-01 is not answered by lowlat (it needs the DNS provider's API): http-01 or tls-alpn-01".into()),
        _ => Err(format!("{text:?} is not a challenge type (http-01 or tls-alpn-01)")),
    }
}

/// One `--listen` value: the addresses it stands for (a host name may resolve to several), and
/// whether connections from a balancer start with a PROXY header there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr {
    pub addrs: Vec<SocketAddr>,
    /// `proxy_protocol` followed the address (nginx's `listen 80 proxy_protocol`).
    pub proxy_protocol: bool,
}

impl ListenAddr {
    fn flatten(list: &[Self]) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = Vec::new();
        for addr in list.iter().flat_map(|l| &l.addrs) {
            if !out.contains(addr) {
                out.push(*addr);
            }
        }
        out
    }
}

/// Parses a listen address as nginx's `listen` takes it: `127.0.0.1:8080`, `[::1]:8080`,
/// `:8080` or `8080` (every IPv4 address, nginx's `listen 8080`), or `localhost:8080` (every
/// address the name resolves to, once each), optionally followed by `proxy_protocol`.
///
/// # Errors
/// A message for clap naming what is wrong.
pub fn parse_listen(text: &str) -> Result<ListenAddr, String> {
    let mut words = text.split_whitespace();
    let addr = words.next().unwrap_or("");
    let mut proxy_protocol = false;
    for word in words {
        if word == "proxy_protocol" {
            proxy_protocol = true;
        } else {
            return Err(format!(
                "{text:?}: {word:?} is not a listen parameter (proxy_protocol is)"
            ));
        }
    }
    let addrs = parse_listen_addr(text, addr)?;
    Ok(ListenAddr {
        addrs,
        proxy_protocol,
    })
}

/// The addresses of a listen value's first word.
fn parse_listen_addr(text: &str, t: &str) -> Result<Vec<SocketAddr>, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = t.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let port_only = t.strip_prefix(':').unwrap_or(t);
    if !port_only.is_empty() && port_only.bytes().all(|b| b.is_ascii_digit()) {
        let port: u16 = port_only
            .parse()
            .map_err(|_| format!("{text:?}: port {port_only} is above 65535"))?;
        return Ok(vec![SocketAddr::from(([0, 0, 0, 0], port))]);
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
    Ok(addrs)
}

fn parse_crypto(text: &str) -> Result<CryptoBackend, String> {
    match text {
        "aws-lc-rs" => Ok(CryptoBackend::AwsLcRs),
        "ring" => Ok(CryptoBackend::Ring),
        _ => Err(format!("{text:?} is not a TLS library (aws-lc-rs or ring)")),
    }
}

/// One site's settings: the names it answers to and what it serves.
#[derive(Debug, Clone)]
pub struct SiteArgs {
    /// Host names (`example.com`, `*.example.com`).
    pub server_names: Vec<String>,
    pub files: crate::files::FilesArgs,
    pub app: crate::app::AppArgs,
    /// The site's PHP application, when it has one.
    pub php: crate::php::PhpArgs,
    pub no_plaintext: bool,
    pub no_json: bool,
    /// Header lines added to every response of the site.
    pub add_header: Vec<String>,
    /// The site's forwarding rules.
    pub proxy: Vec<ProxyRule>,
    /// The site's `acme` key: its certificate from ACME (`true`) or not (`false`); unset, it
    /// follows `--acme` unless the site has its own cert and key.
    pub acme: Option<bool>,
    /// The site gives its own cert and key.
    pub own_cert: bool,
    /// The site's `return` rules.
    pub returns: Vec<crate::returns::ReturnRule>,
    /// Redirect the site's clear-text requests to HTTPS.
    pub https_redirect: bool,
    /// The site's access rules and rate limits.
    pub guard: super::guard::GuardArgs,
    /// The site's `cache` key: its rules cache (`true`) or not (`false`); unset, as `--cache`.
    pub cache: Option<bool>,
    /// The site's cache settings (over the top level's, which fill what it does not set).
    pub cache_policy: super::cache::CachePolicyArgs,
    /// The site's client certificates (mTLS).
    pub client_cert: super::client_cert::ClientCertArgs,
}

impl ServeArgs {
    /// The one site the top-level settings describe, when there are no `[[site]]` tables.
    #[must_use]
    pub fn default_site(&self) -> SiteArgs {
        SiteArgs {
            server_names: Vec::new(),
            files: self.files.clone(),
            app: self.app.clone(),
            php: self.php.clone(),
            no_plaintext: self.no_plaintext,
            no_json: self.no_json,
            add_header: self.add_header.clone(),
            proxy: self.proxy.clone(),
            acme: None,
            own_cert: false,
            returns: self.returns.clone(),
            https_redirect: self.https_redirect,
            guard: self.guard.clone(),
            cache: None,
            cache_policy: self.cache.policy.clone(),
            client_cert: self.client_cert.clone(),
        }
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

/// `--access-log-format`: a built-in or `[log_format]` name, or a format text (with a `$`),
/// which is compiled here so that an unknown variable is said at once.
fn parse_access_log_format(text: &str) -> Result<String, String> {
    if text.contains('$') {
        crate::log_format::LogFormat::compile(text)?;
    } else if text.is_empty()
        || !text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "{text:?} is neither a format name (combined, json, a [log_format] key) nor a format ($remote_addr …)"
        ));
    }
    Ok(text.to_owned())
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

    /// Which names ACME is asked for, and each setting it refuses with its reason.
    #[test]
    fn acme_names() {
        let args = |text: &str| {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
            super::super::file::merged(f.path(), &[]).unwrap()
        };
        let listeners = "listen = [\"127.0.0.1:80\"]\ntls_listen = [\"127.0.0.1:443\"]\n";
        let sites = "[[site]]\nserver_names = [\"A.test\", \"www.a.test.\"]\n\
                     [[site]]\nserver_names = [\"own.test\"]\ncert = \"c.pem\"\nkey = \"k.pem\"\n\
                     [[site]]\nserver_names = [\"off.test\"]\nacme = false\n\
                     [[site]]\nserver_names = [\"on.test\"]\nacme = true\n";
        // Off: only the sites that ask.
        let a = args(&format!("{listeners}{sites}"));
        let acme = a.acme_config().unwrap().unwrap();
        assert_eq!(acme.names, ["on.test"]);
        // --acme: every site without its own cert, unless it says no; --acme-domain adds.
        let a = args(&format!(
            "{listeners}acme = true\nacme_domain = [\"extra.test\", \"a.test\"]\n{sites}"
        ));
        let acme = a.acme_config().unwrap().unwrap();
        assert_eq!(
            acme.names,
            ["a.test", "www.a.test", "on.test", "extra.test"]
        );
        assert_eq!(
            acme.challenges,
            [ChallengeKind::Http01, ChallengeKind::TlsAlpn01]
        );
        assert!(a.to_config().is_ok());
        // Nothing asked: off, and --tls-listen still needs a certificate.
        let a = args(listeners);
        assert!(a.acme_config().unwrap().is_none());
        assert!(a.to_config().unwrap_err().contains("needs a certificate"));
        for (text, words) in [
            (
                format!("{listeners}acme_domain = [\"*.a.test\"]\n"),
                "DNS-01",
            ),
            (
                format!("{listeners}acme_domain = [\"10.0.0.1\"]\n"),
                "not a DNS name",
            ),
            (format!("{listeners}acme = true\n"), "no name"),
            (
                "listen = [\"127.0.0.1:80\"]\nacme_domain = [\"a.test\"]\n".to_owned(),
                "needs --tls-listen",
            ),
            (
                "tls_listen = [\"127.0.0.1:443\"]\nacme_domain = [\"a.test\"]\nacme_challenge = [\"http-01\"]\n"
                    .to_owned(),
                "http-01 is answered on a --listen",
            ),
        ] {
            let e = args(&text).acme_config().unwrap_err();
            assert!(e.contains(words), "{text}: {e}");
        }
        // Without a clear-text listener, TLS-ALPN-01 alone.
        let a = args("tls_listen = [\"127.0.0.1:443\"]\nacme_domain = [\"a.test\"]\n");
        assert_eq!(
            a.acme_config().unwrap().unwrap().challenges,
            [ChallengeKind::TlsAlpn01]
        );
        for bad in ["dns-01", "http01"] {
            assert!(parse_challenge(bad).is_err());
        }
        assert!(parse_directory("http://ca.test/dir").is_err());
        assert!(parse_email("nobody").is_err());
        assert_eq!(parse_email("mailto:a@b.test").unwrap(), "a@b.test");
    }

    #[test]
    fn listen_addresses() {
        let one = |t: &str| parse_listen(t).unwrap().addrs;
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
        let marked = parse_listen("127.0.0.1:80 proxy_protocol").unwrap();
        assert!(marked.proxy_protocol && marked.addrs == one("127.0.0.1:80"));
        assert!(!parse_listen("127.0.0.1:80").unwrap().proxy_protocol);
        for bad in [
            "",
            ":",
            "nonsense",
            ":99999",
            "localhost:",
            "localhost:http",
            "::1:8080",
            "127.0.0.1:80 ssl",
        ] {
            let err = parse_listen(bad).unwrap_err();
            assert!(err.starts_with(&format!("{bad:?}")), "{bad}: {err}");
        }
    }
}
