//! The reverse proxy's flags (`--proxy`, `--proxy-*`) and `[[upstream]]` groups, parsed and
//! checked into the runtime's [`ProxyConfig`]: every server address resolved, every timeout
//! positive, every rule pointing at a group that exists.

use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use lowlat_http::units::{parse_nonzero_size, parse_positive_duration};

use crate::proxy::config::{
    Balance, Cidr, HashKey, HealthCheck, ProxyConfig, ProxyRoute, UpstreamAddr, UpstreamGroup,
    UpstreamServer, UpstreamTimeouts,
};
use crate::proxy::upstream_tls::{client_config, TlsTarget, UpstreamTlsOptions};

/// How a group behaves: the `--proxy-*` flags for groups made by `--proxy`, the keys of an
/// `[[upstream]]` table (without the `proxy_` prefix) for a named one.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = "Reverse proxy")]
pub struct GroupArgs {
    /// How requests are shared among a group's servers: round-robin (weighted), least-conn, or
    /// hash:client, hash:header:NAME, hash:cookie:NAME (consistent hashing)
    #[arg(id = "proxy_balance", long = "proxy-balance", value_name = "HOW", default_value = "round-robin", value_parser = parse_balance)]
    pub balance: Balance,
    /// Time allowed to connect to an upstream server (504 after)
    #[arg(id = "proxy_connect_timeout", long = "proxy-connect-timeout", value_name = "DURATION", default_value = "5s", value_parser = parse_positive_duration)]
    pub connect_timeout: Duration,
    /// Time allowed from the request sent to the first byte of the response (504 after)
    #[arg(id = "proxy_first_byte_timeout", long = "proxy-first-byte-timeout", value_name = "DURATION", default_value = "60s", value_parser = parse_positive_duration)]
    pub first_byte_timeout: Duration,
    /// Longest pause between two reads of an upstream's response (the response is cut after)
    #[arg(id = "proxy_read_timeout", long = "proxy-read-timeout", value_name = "DURATION", default_value = "60s", value_parser = parse_positive_duration)]
    pub read_timeout: Duration,
    /// Longest pause while writing a request to an upstream (504 after)
    #[arg(id = "proxy_write_timeout", long = "proxy-write-timeout", value_name = "DURATION", default_value = "60s", value_parser = parse_positive_duration)]
    pub write_timeout: Duration,
    /// Largest request body forwarded (413 beyond); a body that is still arriving streams to the
    /// upstream as it comes, so this bounds no memory, only what an upstream is asked to take
    #[arg(id = "proxy_max_body", long = "proxy-max-body", value_name = "SIZE", default_value = "1g", value_parser = parse_nonzero_size)]
    pub max_body: u64,
    /// Longest time a WebSocket tunnel may pass no byte either way (it is closed after)
    #[arg(id = "proxy_tunnel_idle_timeout", long = "proxy-tunnel-idle-timeout", value_name = "DURATION", default_value = "60s", value_parser = parse_positive_duration)]
    pub tunnel_idle_timeout: Duration,
    /// Idle keep-alive connections kept per upstream server and worker (0: a connection per
    /// request)
    #[arg(
        id = "proxy_keepalive",
        long = "proxy-keepalive",
        value_name = "N",
        default_value_t = 512
    )]
    pub keepalive: usize,
    /// How long an idle upstream connection is kept
    #[arg(id = "proxy_keepalive_timeout", long = "proxy-keepalive-timeout", value_name = "DURATION", default_value = "60s", value_parser = parse_positive_duration)]
    pub keepalive_timeout: Duration,
    /// Failures within --proxy-fail-timeout that take a server out for that long (0: never;
    /// a group of one server is never taken out)
    #[arg(
        id = "proxy_max_fails",
        long = "proxy-max-fails",
        value_name = "N",
        default_value_t = 1
    )]
    pub max_fails: u32,
    /// See --proxy-max-fails
    #[arg(id = "proxy_fail_timeout", long = "proxy-fail-timeout", value_name = "DURATION", default_value = "10s", value_parser = parse_positive_duration)]
    pub fail_timeout: Duration,
    /// Check each server actively: GET this path every --proxy-health-interval [default: off]
    #[arg(
        id = "proxy_health_check",
        long = "proxy-health-check",
        value_name = "PATH"
    )]
    pub health_check: Option<String>,
    /// How often the active check runs
    #[arg(id = "proxy_health_interval", long = "proxy-health-interval", value_name = "DURATION", default_value = "5s", value_parser = parse_positive_duration)]
    pub health_interval: Duration,
    /// How long a check may take
    #[arg(id = "proxy_health_timeout", long = "proxy-health-timeout", value_name = "DURATION", default_value = "2s", value_parser = parse_positive_duration)]
    pub health_timeout: Duration,
    /// Statuses that count as up (ranges and codes: 200-399,401)
    #[arg(id = "proxy_health_status", long = "proxy-health-status", value_name = "LIST", default_value = "200-399", value_parser = parse_statuses)]
    pub health_status: Statuses,
    /// The protocol spoken to http:// and https:// upstreams: h1 (HTTP/1.1, a connection per
    /// request in flight) or h2 (HTTP/2: requests as streams over few connections; over TLS by
    /// ALPN, in clear by prior knowledge, as h2c:// URLs always are)
    #[arg(id = "proxy_protocol", long = "proxy-protocol", value_name = "PROTOCOL", default_value = "h1", value_parser = ["h1", "h2"])]
    pub protocol: String,
    /// Start each connection to the servers with a PROXY protocol header naming the client, v1
    /// or v2 (haproxy's send-proxy, send-proxy-v2), for servers that expect one; such a
    /// connection carries one client's requests and is not kept for others. HTTP/1.1 and
    /// FastCGI servers [default: none]
    #[arg(id = "proxy_send_proxy_protocol", long = "proxy-send-proxy-protocol", value_name = "VERSION", value_parser = ["v1", "v2"])]
    pub send_proxy_protocol: Option<String>,
    /// https:// upstreams: trust only the CAs in this PEM file [default: the system's roots]
    #[arg(
        id = "proxy_tls_ca",
        long = "proxy-tls-ca",
        value_name = "FILE",
        conflicts_with = "proxy_tls_insecure_skip_verify"
    )]
    pub tls_ca: Option<PathBuf>,
    /// https:// upstreams: the name their certificate must have, sent as SNI [default: the
    /// URL's host]
    #[arg(
        id = "proxy_tls_server_name",
        long = "proxy-tls-server-name",
        value_name = "NAME"
    )]
    pub tls_server_name: Option<String>,
    /// https:// upstreams: accept any certificate — who the server is goes unchecked (insecure:
    /// for tests only)
    #[arg(
        id = "proxy_tls_insecure_skip_verify",
        long = "proxy-tls-insecure-skip-verify"
    )]
    pub tls_insecure_skip_verify: bool,
    /// https:// upstreams: a client certificate chain (PEM) shown to servers that ask (mTLS)
    #[arg(
        id = "proxy_tls_cert",
        long = "proxy-tls-cert",
        value_name = "FILE",
        requires = "proxy_tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The key of --proxy-tls-cert (PEM)
    #[arg(
        id = "proxy_tls_key",
        long = "proxy-tls-key",
        value_name = "FILE",
        requires = "proxy_tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// fastcgi:// upstreams: a parameter set on every request, over the CGI/1.1 variables the
    /// request gives, as nginx's fastcgi_param (repeatable; e.g. SCRIPT_FILENAME=/srv/app/index.php)
    #[arg(
        id = "proxy_fastcgi_param",
        long = "proxy-fastcgi-param",
        value_name = "NAME=VALUE",
        value_parser = crate::proxy::cgi_request::parse_fastcgi_param
    )]
    pub fastcgi_param: Vec<(String, String)>,
}

impl GroupArgs {
    /// The `tls_*` settings, as the TLS client takes them.
    #[must_use]
    pub fn tls_options(&self) -> UpstreamTlsOptions {
        UpstreamTlsOptions {
            ca: self.tls_ca.clone(),
            server_name: self.tls_server_name.clone(),
            insecure_skip_verify: self.tls_insecure_skip_verify,
            client_cert: self.tls_cert.clone().zip(self.tls_key.clone()),
        }
    }
}

/// Inclusive status ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statuses(pub Vec<(u16, u16)>);

fn parse_statuses(text: &str) -> Result<Statuses, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let code = |c: &str| {
            c.trim()
                .parse::<u16>()
                .ok()
                .filter(|c| (100..=599).contains(c))
                .ok_or_else(|| format!("{text:?}: {c:?} is not a status (100 to 599)"))
        };
        let (lo, hi) = (code(lo)?, code(hi)?);
        if lo > hi {
            return Err(format!("{text:?}: {lo}-{hi} is empty"));
        }
        out.push((lo, hi));
    }
    Ok(Statuses(out))
}

fn parse_balance(text: &str) -> Result<Balance, String> {
    match text {
        "round-robin" => Ok(Balance::RoundRobin),
        "least-conn" => Ok(Balance::LeastConn),
        "hash:client" => Ok(Balance::Hash(HashKey::Client)),
        _ => {
            if let Some(name) = text.strip_prefix("hash:header:").filter(|n| token(n)) {
                return Ok(Balance::Hash(HashKey::Header(name.to_ascii_lowercase())));
            }
            if let Some(name) = text.strip_prefix("hash:cookie:").filter(|n| token(n)) {
                return Ok(Balance::Hash(HashKey::Cookie(name.to_owned())));
            }
            Err(format!(
                "{text:?}: use round-robin, least-conn, hash:client, hash:header:NAME or hash:cookie:NAME"
            ))
        }
    }
}

fn token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// One `--proxy PREFIX=TARGET` rule, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRule {
    pub prefix: String,
    /// A group's name (`app`, or `app/path/` to replace the prefix), or servers
    /// (`http://host:port[/path]`, `unix:/path`), comma-separated.
    pub target: String,
    /// The rule's own cache settings (a config file's `proxy` table); none: its site's.
    pub cache: Option<super::cache::RuleCache>,
}

/// Parses `PREFIX=TARGET` (`/api/=http://127.0.0.1:3000`, `/=app`).
///
/// # Errors
/// A message for clap naming what is wrong.
pub fn parse_proxy_rule(text: &str) -> Result<ProxyRule, String> {
    let (prefix, target) = text.split_once('=').ok_or_else(|| {
        format!("{text:?} is not PREFIX=TARGET (e.g. /api/=http://127.0.0.1:3000)")
    })?;
    if !prefix.starts_with('/')
        || prefix.contains(['?', '#', '{', '}', ' '])
        || prefix.split('/').any(|seg| seg == "." || seg == "..")
    {
        return Err(format!("{text:?}: the prefix must be a path such as /api/"));
    }
    if target.trim().is_empty() {
        return Err(format!("{text:?}: no upstream after ="));
    }
    for url in target.split(',').map(str::trim).filter(|t| t.contains(':')) {
        parse_server(url).map_err(|e| format!("{text:?}: {e}"))?;
    }
    Ok(ProxyRule {
        prefix: prefix.to_owned(),
        target: target.trim().to_owned(),
        cache: None,
    })
}

/// A server as its URL gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ParsedServer {
    addr: UpstreamAddr,
    /// As logs and metrics name it (`127.0.0.1:3000`, `unix:/run/app.sock`).
    label: String,
    /// The path after the authority, which replaces the rule's prefix.
    path: Option<String>,
    /// For `https://`: the URL's host, the name the certificate is checked against.
    tls_host: Option<String>,
    /// `h2c://`: HTTP/2 in clear, whatever the group's protocol.
    h2c: bool,
    /// `fastcgi://`, `fastcgi+unix:`: FastCGI.
    fastcgi: bool,
}

/// A server address: `http://host:port[/path]`, `https://host:port[/path]` (the path replaces
/// the rule's prefix), `unix:/path/to.sock`, or a FastCGI server: `fastcgi://host:port`,
/// `fastcgi+unix:/path/to.sock`.
fn parse_server(url: &str) -> Result<ParsedServer, String> {
    let fastcgi_unix = url.strip_prefix("fastcgi+unix:");
    if let Some(path) = url.strip_prefix("unix:").or(fastcgi_unix) {
        if !path.starts_with('/') {
            return Err(format!(
                "{url:?}: a Unix socket's path is absolute (unix:/run/app.sock)"
            ));
        }
        return Ok(ParsedServer {
            addr: UpstreamAddr::Unix(PathBuf::from(path)),
            label: url.to_owned(),
            path: None,
            tls_host: None,
            h2c: false,
            fastcgi: fastcgi_unix.is_some(),
        });
    }
    // php-fpm's usual port, where a fastcgi:// URL names none.
    let (rest, tls, default_port) = if let Some(rest) = url.strip_prefix("fastcgi://") {
        (rest, false, 9000)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (rest, false, 80)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (rest, true, 443)
    } else if let Some(rest) = url.strip_prefix("h2c://") {
        (rest, false, 80)
    } else {
        return Err(format!(
            "{url:?}: an upstream is http://HOST:PORT, https://HOST:PORT, h2c://HOST:PORT, unix:/PATH, fastcgi://HOST:PORT or fastcgi+unix:/PATH"
        ));
    };
    let fastcgi = url.starts_with("fastcgi://");
    let (authority, path) = match rest.find('/') {
        Some(_) if fastcgi => {
            return Err(format!(
                "{url:?}: a FastCGI server has no path (the script is a parameter: SCRIPT_FILENAME)"
            ))
        }
        Some(i) => (&rest[..i], Some(rest[i..].to_owned())),
        None => (rest, None),
    };
    let has_port = authority.rsplit_once(':').is_some_and(|(h, p)| {
        !h.is_empty() && !h.ends_with(':') && p.bytes().all(|b| b.is_ascii_digit())
    });
    let (host, with_port) = if has_port {
        let (h, _) = authority.rsplit_once(':').unwrap_or((authority, ""));
        (h, authority.to_owned())
    } else {
        (authority, format!("{authority}:{default_port}"))
    };
    if host.is_empty() {
        return Err(format!("{url:?}: no host"));
    }
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| format!("{url:?}: cannot resolve {authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{url:?}: {authority} resolves to no address"))?;
    Ok(ParsedServer {
        addr: UpstreamAddr::Tcp(addr),
        label: with_port,
        path,
        tls_host: tls.then(|| host.to_owned()),
        h2c: url.starts_with("h2c://"),
        fastcgi,
    })
}

/// The servers of a group, with a TLS client (made once for the group, only if one of them is
/// `https://`) for those that need it.
fn servers_of(
    parsed: Vec<(ParsedServer, u32)>,
    g: &GroupArgs,
) -> Result<Vec<UpstreamServer>, String> {
    let options = g.tls_options();
    let h2 = g.protocol == "h2";
    let config = if parsed.iter().any(|(p, _)| p.tls_host.is_some()) {
        Some(client_config(&options, h2).map_err(|e| format!("TLS to upstreams: {e}"))?)
    } else {
        None
    };
    parsed
        .into_iter()
        .map(|(p, weight)| {
            let tls = match (&p.tls_host, &config) {
                (Some(host), Some(config)) => Some(
                    TlsTarget::new(std::sync::Arc::clone(config), host, &options)
                        .map_err(|e| e.to_string())?,
                ),
                _ => None,
            };
            Ok(UpstreamServer {
                h2: !p.fastcgi && (p.h2c || (h2 && matches!(p.addr, UpstreamAddr::Tcp(_)))),
                fastcgi: p.fastcgi,
                addr: p.addr,
                label: p.label,
                weight,
                tls,
            })
        })
        .collect()
}

/// The warnings a start and `--check-config` give about the proxy's TLS settings: a group whose
/// `https://` servers' certificates go unchecked.
#[must_use]
pub fn tls_warnings(tables: &[UpstreamTable], defaults: &GroupArgs) -> Vec<String> {
    const WHY: &str = "the certificates of https:// upstreams are not checked: anyone on the path can pose as them";
    let mut out = Vec::new();
    if defaults.tls_insecure_skip_verify {
        out.push(format!("proxy_tls_insecure_skip_verify: {WHY}"));
    }
    for t in tables {
        if t.group.tls_insecure_skip_verify && !defaults.tls_insecure_skip_verify {
            out.push(format!(
                "upstream {}: tls_insecure_skip_verify: {WHY}",
                t.name
            ));
        }
    }
    out
}

/// An `[[upstream]]` table, as the config file gives it.
#[derive(Debug, Clone)]
pub struct UpstreamTable {
    pub name: String,
    /// (URL, weight)
    pub servers: Vec<(String, u32)>,
    pub group: GroupArgs,
}

/// Parses `--proxy-trusted`: an address or a network (`10.0.0.0/8`, `::1`).
///
/// # Errors
/// A message for clap.
pub fn parse_cidr(text: &str) -> Result<Cidr, String> {
    let (addr, bits) = match text.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (text, None),
    };
    let addr: IpAddr = addr
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not an address or network (e.g. 10.0.0.0/8, ::1)"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        Some(b) => b
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|&b| b <= max)
            .ok_or_else(|| format!("{text:?}: the prefix length is 0 to {max}"))?,
        None => max,
    };
    Ok(Cidr { addr, bits })
}

/// The group of `servers`, which must all speak FastCGI or none of them: a request is written in
/// its protocol by the rule's handler, before a server is chosen.
fn group(
    name: String,
    servers: Vec<UpstreamServer>,
    g: &GroupArgs,
) -> Result<UpstreamGroup, String> {
    let fastcgi = servers.first().is_some_and(|s| s.fastcgi);
    if servers.iter().any(|s| s.fastcgi != fastcgi) {
        return Err(
            "fastcgi:// servers and HTTP servers cannot share a group (a request is written in one protocol)"
                .into(),
        );
    }
    let send_proxy_protocol = match g.send_proxy_protocol.as_deref() {
        Some("v1") => 1,
        Some("v2") => 2,
        _ => 0,
    };
    if send_proxy_protocol != 0 && servers.iter().any(|s| s.h2) {
        return Err(
            "--proxy-send-proxy-protocol is for HTTP/1.1 servers: an HTTP/2 connection carries many clients' requests"
                .into(),
        );
    }
    Ok(UpstreamGroup {
        fastcgi,
        fastcgi_params: g.fastcgi_param.clone(),
        send_proxy_protocol,
        name,
        servers,
        balance: g.balance.clone(),
        timeouts: UpstreamTimeouts {
            connect: g.connect_timeout,
            first_byte: g.first_byte_timeout,
            read: g.read_timeout,
            write: g.write_timeout,
            tunnel_idle: g.tunnel_idle_timeout,
        },
        max_body: g.max_body,
        keepalive: g.keepalive,
        keepalive_timeout: g.keepalive_timeout,
        max_fails: g.max_fails,
        fail_timeout: g.fail_timeout,
        health: g.health_check.as_ref().map(|path| HealthCheck {
            path: path.clone(),
            interval: g.health_interval,
            timeout: g.health_timeout,
            statuses: g.health_status.0.clone(),
        }),
    })
}

/// The proxy's configuration and each site's routes: the named groups first, then one group per
/// rule that names servers itself.
///
/// # Errors
/// One line: a rule naming no known group, a server that does not resolve.
pub fn build(
    tables: &[UpstreamTable],
    defaults: &GroupArgs,
    trusted: &[Cidr],
    sites: &[&[ProxyRule]],
) -> Result<(ProxyConfig, Vec<Vec<ProxyRoute>>), String> {
    let mut cfg = ProxyConfig {
        groups: Vec::new(),
        trusted: trusted.to_vec(),
    };
    for t in tables {
        if cfg.groups.iter().any(|g| g.name == t.name) {
            return Err(format!("upstream {:?} is defined twice", t.name));
        }
        let mut parsed = Vec::new();
        for (url, weight) in &t.servers {
            let p = parse_server(url).map_err(|e| format!("upstream {}: {e}", t.name))?;
            if p.path.is_some() {
                return Err(format!(
                    "upstream {}: {url:?}: a group's servers have no path (put it in the --proxy rule)",
                    t.name
                ));
            }
            parsed.push((p, *weight));
        }
        let servers =
            servers_of(parsed, &t.group).map_err(|e| format!("upstream {}: {e}", t.name))?;
        if servers.is_empty() {
            return Err(format!("upstream {}: no servers", t.name));
        }
        cfg.groups.push(
            group(t.name.clone(), servers, &t.group)
                .map_err(|e| format!("upstream {}: {e}", t.name))?,
        );
    }
    let mut routes = Vec::new();
    for rules in sites {
        let mut site = Vec::new();
        for rule in *rules {
            // `app` or `app/path/` (the path replaces the prefix, as nginx's
            // `proxy_pass http://app/path/;`).
            let (name, path) = match rule.target.find('/') {
                Some(i) if !rule.target.contains(':') => {
                    (&rule.target[..i], Some(rule.target[i..].to_owned()))
                }
                _ => (rule.target.as_str(), None),
            };
            let (group_index, rewrite) =
                if let Some(i) = cfg.groups.iter().position(|g| g.name == name) {
                    (i, path)
                } else if rule.target.contains(':') {
                    let mut parsed = Vec::new();
                    let mut rewrite = None;
                    for url in rule.target.split(',').map(str::trim) {
                        let mut p = parse_server(url)?;
                        if p.path.is_some() {
                            rewrite = p.path.take();
                        }
                        parsed.push((p, 1));
                    }
                    let servers = servers_of(parsed, defaults)
                        .map_err(|e| format!("--proxy {}={}: {e}", rule.prefix, rule.target))?;
                    let name = format!("{}={}", rule.prefix, rule.target);
                    cfg.groups
                        .push(group(name, servers, defaults).map_err(|e| {
                            format!("--proxy {}={}: {e}", rule.prefix, rule.target)
                        })?);
                    (cfg.groups.len() - 1, rewrite)
                } else {
                    return Err(format!(
                        "--proxy {}={}: no [[upstream]] named {name:?}",
                        rule.prefix, rule.target
                    ));
                };
            site.push(ProxyRoute {
                prefix: rule.prefix.clone(),
                group: group_index,
                rewrite,
            });
        }
        routes.push(site);
    }
    Ok((cfg, routes))
}

/// The group a site's `--php` names: an `[[upstream]]` group of FastCGI servers by its name, or
/// one made for the address (`unix:/PATH`, `HOST:PORT`, `fastcgi://HOST:PORT`,
/// `fastcgi+unix:/PATH`), shared by the sites that give the same address. Returns its index.
///
/// # Errors
/// One line: a group that does not speak FastCGI, an address that does not resolve.
pub fn php_group(
    cfg: &mut ProxyConfig,
    target: &str,
    defaults: &GroupArgs,
) -> Result<usize, String> {
    if let Some(i) = cfg.groups.iter().position(|g| g.name == target) {
        if !cfg.groups[i].fastcgi {
            return Err(format!(
                "--php {target}: the [[upstream]] group's servers are not fastcgi:// ones"
            ));
        }
        return Ok(i);
    }
    let url = if target.starts_with("fastcgi://") || target.starts_with("fastcgi+unix:") {
        target.to_owned()
    } else if let Some(path) = target.strip_prefix("unix:") {
        format!("fastcgi+unix:{path}")
    } else if target.contains(':') {
        format!("fastcgi://{target}")
    } else {
        return Err(format!(
            "--php {target}: no [[upstream]] has this name, and it is not an address (unix:/run/php/php-fpm.sock, 127.0.0.1:9000)"
        ));
    };
    let name = format!("php={target}");
    if let Some(i) = cfg.groups.iter().position(|g| g.name == name) {
        return Ok(i);
    }
    let p = parse_server(&url).map_err(|e| format!("--php {target}: {e}"))?;
    let servers = servers_of(vec![(p, 1)], defaults).map_err(|e| format!("--php {target}: {e}"))?;
    let mut made = group(name, servers, defaults).map_err(|e| format!("--php {target}: {e}"))?;
    // The --proxy-fastcgi-param defaults are for --proxy rules (a SCRIPT_FILENAME there names
    // one script); a site's PHP application has its own, --php-param.
    made.fastcgi_params.clear();
    cfg.groups.push(made);
    Ok(cfg.groups.len() - 1)
}

/// The group of a `--forward-auth` rule's auth service (made once per URL and timeout), with
/// the path the subrequest asks for and its `Host`. HTTP/1.1 always (the subrequest is one
/// short exchange), the rule's timeout for every step of it, never taken out of service (a
/// group of one server never is), no PROXY header, no health checks.
///
/// # Errors
/// A URL that is no server, named with the rule.
pub fn auth_group(
    cfg: &mut ProxyConfig,
    (url, timeout): (&str, Duration),
    label: &str,
    defaults: &GroupArgs,
) -> Result<(usize, String, String), String> {
    let at = |e: String| format!("--forward-auth {label}: {e}");
    let p = parse_server(url).map_err(at)?;
    let path = p.path.clone().unwrap_or_else(|| "/".to_owned());
    let host = match &p.addr {
        UpstreamAddr::Unix(_) => "localhost".to_owned(),
        UpstreamAddr::Tcp(_) => p.label.clone(),
    };
    let name = format!("auth={url},timeout={timeout:?}");
    if let Some(i) = cfg.groups.iter().position(|g| g.name == name) {
        return Ok((i, path, host));
    }
    let mut servers = servers_of(vec![(p, 1)], defaults).map_err(at)?;
    for s in &mut servers {
        s.h2 = false;
    }
    let mut made = group(name, servers, defaults).map_err(at)?;
    made.fastcgi_params.clear();
    made.send_proxy_protocol = 0;
    made.health = None;
    made.max_fails = 0;
    let t = timeout;
    made.timeouts = UpstreamTimeouts {
        connect: t,
        first_byte: t,
        read: t,
        write: t,
        tunnel_idle: t,
    };
    cfg.groups.push(made);
    Ok((cfg.groups.len() - 1, path, host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastcgi_servers_and_groups() {
        let p = parse_server("fastcgi://127.0.0.1").unwrap();
        assert!(p.fastcgi);
        assert_eq!(p.label, "127.0.0.1:9000");
        let p = parse_server("fastcgi+unix:/run/php/php-fpm.sock").unwrap();
        assert!(p.fastcgi);
        assert_eq!(p.addr, UpstreamAddr::Unix("/run/php/php-fpm.sock".into()));
        assert!(parse_server("fastcgi://127.0.0.1:9000/x.php").is_err());
        assert!(parse_server("fastcgi+unix:run.sock").is_err());
        use clap::Args;
        let defaults = GroupArgs::augment_args(clap::Command::new("t"))
            .try_get_matches_from(["t"])
            .and_then(|m| <GroupArgs as clap::FromArgMatches>::from_arg_matches(&m))
            .unwrap();
        let mixed = UpstreamTable {
            name: "mixed".into(),
            servers: vec![
                ("fastcgi://127.0.0.1:9000".into(), 1),
                ("http://127.0.0.1:80".into(), 1),
            ],
            group: defaults.clone(),
        };
        assert!(build(&[mixed], &defaults, &[], &[])
            .unwrap_err()
            .contains("cannot share a group"));
        let (mut cfg, _) = build(&[], &defaults, &[], &[]).unwrap();
        let a = php_group(&mut cfg, "unix:/run/php/php-fpm.sock", &defaults).unwrap();
        let b = php_group(&mut cfg, "unix:/run/php/php-fpm.sock", &defaults).unwrap();
        assert_eq!(a, b, "one group per address");
        assert!(cfg.groups[a].fastcgi && cfg.groups[a].servers[0].fastcgi);
        let c = php_group(&mut cfg, "127.0.0.1:9000", &defaults).unwrap();
        assert_eq!(cfg.groups[c].servers[0].label, "127.0.0.1:9000");
        assert!(php_group(&mut cfg, "nothing", &defaults).is_err());
    }

    #[test]
    fn rules_and_servers() {
        let r = parse_proxy_rule("/api/=http://127.0.0.1:3000").unwrap();
        assert_eq!(
            (r.prefix.as_str(), r.target.as_str()),
            ("/api/", "http://127.0.0.1:3000")
        );
        for bad in [
            "api=http://x:1",
            "/api/",
            "/a/../b=http://x:1",
            "/x=ftp://y:1",
            "/x=http://127.0.0.1:99999",
            "/x=unix:run.sock",
        ] {
            assert!(parse_proxy_rule(bad).is_err(), "{bad}");
        }
        let p = parse_server("http://127.0.0.1:3000/v2/").unwrap();
        assert_eq!(p.addr, UpstreamAddr::Tcp("127.0.0.1:3000".parse().unwrap()));
        assert_eq!(
            (p.label.as_str(), p.path.as_deref(), p.tls_host),
            ("127.0.0.1:3000", Some("/v2/"), None)
        );
        let p = parse_server("https://localhost").unwrap();
        assert_eq!(
            (p.label.as_str(), p.tls_host.as_deref()),
            ("localhost:443", Some("localhost"))
        );
        let p = parse_server("https://[::1]:8443/x").unwrap();
        assert_eq!(p.tls_host.as_deref(), Some("[::1]"));
        assert!(parse_server("https://:1").is_err());
        assert_eq!(
            parse_server("unix:/run/app.sock").unwrap().addr,
            UpstreamAddr::Unix("/run/app.sock".into())
        );
    }

    #[test]
    fn balance_statuses_and_networks() {
        assert_eq!(parse_balance("least-conn"), Ok(Balance::LeastConn));
        assert_eq!(
            parse_balance("hash:header:X-User"),
            Ok(Balance::Hash(HashKey::Header("x-user".into())))
        );
        assert!(parse_balance("random").is_err());
        assert_eq!(
            parse_statuses("200-399,401").unwrap().0,
            vec![(200, 399), (401, 401)]
        );
        assert!(parse_statuses("399-200").is_err());
        assert_eq!(parse_cidr("10.0.0.0/8").unwrap().bits, 8);
        assert_eq!(parse_cidr("::1").unwrap().bits, 128);
        assert!(parse_cidr("10.0.0.0/33").is_err());
    }
}
