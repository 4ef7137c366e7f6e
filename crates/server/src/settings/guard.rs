//! The protection flags: `--allow` / `--deny` (access rules, in the order given),
//! `--rate-limit` and `--limit-conn` (zones), `--basic-auth` and `--forward-auth`, for the
//! whole server or per `[[site]]`.
//!
//! `--allow` and `--deny` are two flags whose values make one list in command-line order (the
//! first match wins, as nginx's `allow`/`deny`), so this group reads them with their positions
//! rather than through the derive. A config file applies its `allow` and `deny` keys in the
//! order it writes them; rules that alternate (deny one host, allow its network, deny the
//! rest) are one list: `access = ["deny …", "allow …", "deny all"]`.

use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::guard::access::AccessRule;
use crate::guard::connlimit::ConnZoneSpec;
use crate::guard::fleet::RedisTarget;
use crate::guard::key::KeyPart;
use crate::guard::ratelimit::ZoneSpec;

/// The protection flags.
#[derive(Debug, Clone, Default)]
pub struct GuardArgs {
    /// Access rules, in order.
    pub access: Vec<AccessRule>,
    pub rate_limit: Vec<ZoneSpec>,
    pub limit_conn: Vec<ConnZoneSpec>,
    pub basic_auth: Vec<BasicAuthSpec>,
    pub forward_auth: Vec<ForwardAuthSpec>,
}

/// A `--forward-auth` rule as written: the paths, the auth service's URL, the fields copied
/// from its 2xx answer onto the forwarded request, how long it may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAuthSpec {
    pub prefix: String,
    /// `http://HOST:PORT/PATH` or `unix:/PATH` (then the path is `/`); `off` leaves the prefix
    /// unguarded inside a guarded one.
    pub url: String,
    pub copy: Vec<String>,
    /// For the connect, the answer and each read and write (504 after, the request refused).
    pub timeout: std::time::Duration,
}

impl ForwardAuthSpec {
    /// How `/metrics` names the rule.
    #[must_use]
    pub fn label(&self) -> String {
        format!("{}={}", self.prefix, self.url)
    }
}

/// Fields `copy=` may not name (see [`parse_forward_auth`]).
const FRAMING_FIELDS: [&str; 11] = [
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "content-type",
];

/// The auth service's time by default: a few seconds, not the proxy's minute (every request
/// under the prefix waits for it, and one that does not answer is refused).
const FORWARD_AUTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A `--basic-auth` rule as written: the paths, the htpasswd file, the realm, plain text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuthSpec {
    pub prefix: String,
    pub file: std::path::PathBuf,
    pub realm: String,
    pub plain: bool,
}

impl BasicAuthSpec {
    /// Reads the file into the rule the workers use, its checks rate-limited per client.
    ///
    /// # Errors
    /// The file cannot be read, or a line of it does not check (named with the file).
    pub fn build(&self) -> Result<crate::guard::basic::BasicAuth, String> {
        let shown = self.file.display();
        let text = std::fs::read_to_string(&self.file)
            .map_err(|e| format!("--basic-auth: cannot read {shown}: {e}"))?;
        let users = crate::guard::basic::Htpasswd::parse(&text, self.plain)
            .map_err(|e| format!("--basic-auth: {shown}: {e}"))?;
        if users.is_empty() {
            return Err(format!("--basic-auth: {shown} has no users"));
        }
        // Checks not answered from memory: 30 a minute per client, 10 at once.
        let attempts = crate::guard::metrics::zone(ZoneSpec {
            prefix: self.prefix.clone(),
            per_ks: 30 * 1000 / 60,
            burst: 10,
            delay: crate::guard::ratelimit::NODELAY,
            key: vec![KeyPart::Addr],
            status: 429,
            dry_run: false,
            keys: DEFAULT_KEYS,
            redis: None,
            text: format!("basic-auth {}={shown}", self.prefix),
        });
        Ok(crate::guard::basic::BasicAuth::new(
            self.prefix.clone(),
            &self.realm,
            users,
            attempts,
        ))
    }
}

/// The flags whose values join the ordered access list.
const ACCESS_FLAGS: [&str; 3] = ["allow", "deny", "access"];

impl clap::FromArgMatches for GuardArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = GuardArgs::default();
        args.update_from_arg_matches(m)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        let mut placed: Vec<(usize, AccessRule)> = Vec::new();
        for id in ACCESS_FLAGS {
            if let (Some(values), Some(at)) = (m.get_many::<AccessRule>(id), m.indices_of(id)) {
                placed.extend(at.zip(values.cloned()));
            }
        }
        if !placed.is_empty() {
            placed.sort_by_key(|(at, _)| *at);
            self.access = placed.into_iter().map(|(_, r)| r).collect();
        }
        if let Some(zones) = m.get_many::<ZoneSpec>("rate_limit") {
            self.rate_limit = zones.cloned().collect();
        }
        if let Some(zones) = m.get_many::<ConnZoneSpec>("limit_conn") {
            self.limit_conn = zones.cloned().collect();
        }
        if let Some(rules) = m.get_many::<BasicAuthSpec>("basic_auth") {
            self.basic_auth = rules.cloned().collect();
        }
        if let Some(rules) = m.get_many::<ForwardAuthSpec>("forward_auth") {
            self.forward_auth = rules.cloned().collect();
        }
        Ok(())
    }
}

impl clap::Args for GuardArgs {
    fn augment_args(cmd: Command) -> Command {
        cmd.arg(
            Arg::new("allow")
                .long("allow")
                .value_name("[PREFIX=]NETWORK")
                .action(ArgAction::Append)
                .value_parser(|s: &str| parse_access(s, Some(true)))
                .help("Allow clients in NETWORK (ADDR, ADDR/BITS or all), under PREFIX if given; with --deny, in order, the first match wins (repeatable)"),
        )
        .arg(
            Arg::new("deny")
                .long("deny")
                .value_name("[PREFIX=]NETWORK")
                .action(ArgAction::Append)
                .value_parser(|s: &str| parse_access(s, Some(false)))
                .help("Refuse clients in NETWORK (ADDR, ADDR/BITS or all) with 403, under PREFIX if given; in order with --allow (repeatable)"),
        )
        .arg(
            Arg::new("access")
                .long("access")
                .value_name("RULE")
                .action(ArgAction::Append)
                .value_parser(|s: &str| parse_access(s, None))
                .help("An access rule as a config file writes it: \"allow [PREFIX=]NETWORK\" or \"deny [PREFIX=]NETWORK\" (repeatable, in order with --allow and --deny)"),
        )
        .arg(
            Arg::new("rate_limit")
                .long("rate-limit")
                .value_name("[PREFIX=]RATE[,burst=N][,nodelay|,delay=N][,key=K][,status=S][,keys=N][,redis=ADDR][,dry-run]")
                .action(ArgAction::Append)
                .value_parser(RateLimitParser)
                .help("Limit requests per key, as nginx's limit_req: RATE is Nr/s or Nr/m, burst=N more beyond the rate (0), held back to go through at the rate unless nodelay (all at once) or delay=N (the first N at once), key= addr (default), host, path, header:NAME, cookie:NAME or several joined by +, status=429 (with Retry-After) or 503, keys= most keys kept (100k), redis=HOST:PORT or redis://[:PASSWORD@]HOST:PORT[/DB] counts with every instance using the same zone there (alone while it is unreachable), dry-run counts without refusing; under PREFIX if given (repeatable: every zone applies)"),
        )
        .arg(
            Arg::new("limit_conn")
                .long("limit-conn")
                .value_name("[PREFIX=]N[,key=K][,status=S][,dry-run]")
                .action(ArgAction::Append)
                .value_parser(parse_limit_conn)
                .help("Limit requests in progress at once per key, as nginx's limit_conn: N at most (a file until sent, a forwarded request until its answer or tunnel ends), key= as --rate-limit's (addr by default), status=503 (default) or 429, dry-run counts without refusing; under PREFIX if given (repeatable: every zone applies)"),
        )
        .arg(
            Arg::new("basic_auth")
                .long("basic-auth")
                .value_name("PREFIX=HTPASSWD[,realm=NAME][,plain]")
                .action(ArgAction::Append)
                .value_parser(parse_basic_auth)
                .help("Ask for a user and password (HTTP Basic) under PREFIX, checked against an htpasswd file as Apache's htpasswd writes it (bcrypt, APR1-MD5, SHA-1; plain text only with ,plain); re-read on SIGHUP (repeatable)"),
        )
        .arg(
            Arg::new("forward_auth")
                .long("forward-auth")
                .value_name("PREFIX=URL|off[,copy=FIELD,FIELD..][,timeout=DURATION]")
                .action(ArgAction::Append)
                .value_parser(parse_forward_auth)
                .help("Ask an auth service (http://HOST:PORT/PATH, https://HOST:PORT/PATH, its certificate checked as --proxy-tls-ca and --proxy-tls-server-name say, or unix:/PATH) before forwarding a request under PREFIX, as nginx's auth_request and caddy's forward_auth: a GET with the original method and URI (X-Forwarded-Method, X-Forwarded-Uri, X-Original-URI), X-Forwarded-Host, -Proto, -For, and the client's Cookie and Authorization; a 2xx lets the request through with the copy= fields of the answer (the client's own fields of those names dropped), a 401, 403 or redirect is the client's answer, anything else or nothing within timeout= (5s) refuses it (500, 502, 504). The longest PREFIX applies: PREFIX=off leaves a path unguarded (the sign-in pages). Guards every route: a forwarded or FastCGI request goes on when let through, a route lowlat answers itself (files, cache hits, redirects) has its answer held until then (a file kept open, unread) (repeatable)"),
        )
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// `[PREFIX=]NETWORK` for `--allow`/`--deny` (`allow` given), or `allow|deny [PREFIX=]NETWORK`.
fn parse_access(text: &str, allow: Option<bool>) -> Result<AccessRule, String> {
    let (allow, rest) = match allow {
        Some(a) => (a, text.trim()),
        None => match text.trim().split_once(char::is_whitespace) {
            Some(("allow", rest)) => (true, rest.trim()),
            Some(("deny", rest)) => (false, rest.trim()),
            _ => {
                return Err(format!(
                    "{text:?}: an access rule is \"allow NETWORK\" or \"deny NETWORK\" (NETWORK: ADDR, ADDR/BITS or all, after PREFIX= for some paths)"
                ))
            }
        },
    };
    let (prefix, net) = match rest.split_once('=') {
        Some((p, n)) if p.starts_with('/') => (p.to_owned(), n.trim()),
        Some((p, _)) => return Err(format!("{p:?}: a path prefix starts with /")),
        None => (String::new(), rest),
    };
    let net = if net == "all" {
        None
    } else {
        Some(super::proxy::parse_cidr(net)?)
    };
    Ok(AccessRule { prefix, allow, net })
}

/// `PREFIX=FILE[,realm=NAME][,plain]`.
fn parse_basic_auth(text: &str) -> Result<BasicAuthSpec, String> {
    let (prefix, rest) = text
        .split_once('=')
        .filter(|(p, _)| p.starts_with('/'))
        .ok_or_else(|| format!("{text:?}: PREFIX=HTPASSWD_FILE, the prefix starting with /"))?;
    let mut parts = rest.split(',');
    let file = parts.next().unwrap_or_default().trim();
    if file.is_empty() {
        return Err(format!("{text:?}: no htpasswd file"));
    }
    let mut spec = BasicAuthSpec {
        prefix: prefix.to_owned(),
        file: file.into(),
        realm: "restricted".to_owned(),
        plain: false,
    };
    for part in parts.map(str::trim) {
        match part.split_once('=') {
            Some(("realm", r)) if !r.is_empty() => spec.realm = r.to_owned(),
            None if part == "plain" => spec.plain = true,
            _ => {
                return Err(format!(
                    "{text:?}: unknown part {part:?} (realm=NAME, plain)"
                ))
            }
        }
    }
    Ok(spec)
}

/// `PREFIX=URL[,copy=A,B,..][,timeout=DURATION]`: the names after `copy=` run to the next
/// `name=value` part.
fn parse_forward_auth(text: &str) -> Result<ForwardAuthSpec, String> {
    let (prefix, rest) = text
        .split_once('=')
        .filter(|(p, _)| p.starts_with('/'))
        .ok_or_else(|| format!("{text:?}: PREFIX=URL, the prefix starting with /"))?;
    let mut parts = rest.split(',').map(str::trim);
    let url = parts.next().unwrap_or_default();
    if !(url.starts_with("http://")
        || url.starts_with("https://")
        || url.starts_with("unix:/")
        || url == "off")
    {
        return Err(format!(
            "{text:?}: the auth service is http://HOST:PORT/PATH, https://HOST:PORT/PATH or \
             unix:/PATH (HTTP/1.1), or off"
        ));
    }
    let mut spec = ForwardAuthSpec {
        prefix: prefix.to_owned(),
        url: url.to_owned(),
        copy: Vec::new(),
        timeout: FORWARD_AUTH_TIMEOUT,
    };
    let field = |name: &str| -> Result<String, String> {
        let token = |b: u8| b.is_ascii_alphanumeric() || b == b'-';
        if name.is_empty() || !name.bytes().all(token) {
            return Err(format!(
                "{text:?}: copy={name:?}: a field name (letters, digits and -)"
            ));
        }
        // Fields that frame or route the forwarded request are the proxy's to write: an auth
        // service's copy would be a second length, or another host.
        if FRAMING_FIELDS.iter().any(|f| f.eq_ignore_ascii_case(name)) {
            return Err(format!(
                "{text:?}: copy={name}: a field the proxy writes itself (framing, host, hop-by-hop)"
            ));
        }
        Ok(name.to_owned())
    };
    let mut copying = false;
    for part in parts {
        match part.split_once('=') {
            Some(("copy", name)) => {
                spec.copy.push(field(name)?);
                copying = true;
            }
            Some(("timeout", t)) => {
                spec.timeout = lowlat_http::units::parse_positive_duration(t)
                    .map_err(|e| format!("{text:?}: timeout={t}: {e}"))?;
                copying = false;
            }
            None if copying => spec.copy.push(field(part)?),
            _ => {
                return Err(format!(
                    "{text:?}: unknown part {part:?} (copy=FIELD,FIELD.., timeout=DURATION)"
                ))
            }
        }
    }
    Ok(spec)
}

/// Default and largest number of keys a zone keeps.
const DEFAULT_KEYS: usize = 100_000;
const MAX_KEYS: u64 = 100_000_000;

/// `[PREFIX=]RATE[,burst=N][,nodelay|,delay=N][,key=K][,status=S][,keys=N][,redis=ADDR][,dry-run]`.
fn parse_rate_limit(text: &str) -> Result<ZoneSpec, String> {
    let at = |reason: String| reason;
    let (prefix, rest) = match text.split_once('=') {
        Some((p, r)) if p.starts_with('/') => (p.to_owned(), r),
        _ => (String::new(), text),
    };
    let mut parts = rest.split(',').map(str::trim);
    let rate = parts.next().unwrap_or_default();
    let per_ks = parse_rate(rate).map_err(at)?;
    let mut spec = ZoneSpec {
        prefix,
        per_ks,
        burst: 0,
        delay: 0,
        key: vec![KeyPart::Addr],
        status: 429,
        dry_run: false,
        keys: DEFAULT_KEYS,
        redis: None,
        text: crate::guard::fleet::redact(text),
    };
    let mut delay_given = false;
    for part in parts {
        let (name, value) = part.split_once('=').unwrap_or((part, ""));
        match name {
            "burst" => {
                spec.burst = value
                    .parse()
                    .ok()
                    .filter(|&b| b <= 1_000_000)
                    .ok_or_else(|| at(format!("burst={value}: a count from 0 to 1000000")))?;
            }
            "key" => spec.key = parse_key(value).map_err(at)?,
            "status" => {
                spec.status = match value {
                    "429" => 429,
                    "503" => 503,
                    _ => return Err(at(format!("status={value}: 429 or 503"))),
                }
            }
            "keys" => {
                let n = lowlat_http::units::parse_count(value).map_err(at)?;
                if n == 0 || n > MAX_KEYS {
                    return Err(at(format!("keys={value}: from 1 to 100m")));
                }
                spec.keys = n as usize;
            }
            "redis" => spec.redis = Some(RedisTarget::parse(value)?),
            "dry-run" if value.is_empty() => spec.dry_run = true,
            // nginx's two stages: `delay=N` requests over the rate pass at once, the rest of
            // the burst is held back; `nodelay` lets the whole burst through at once.
            "nodelay" if value.is_empty() => {
                if delay_given {
                    return Err(at("nodelay and delay= together: one or the other".to_owned()));
                }
                delay_given = true;
                spec.delay = crate::guard::ratelimit::NODELAY;
            }
            "delay" => {
                if delay_given {
                    return Err(at("nodelay and delay= together: one or the other".to_owned()));
                }
                delay_given = true;
                spec.delay = value
                    .parse()
                    .ok()
                    .filter(|&d| d <= 1_000_000)
                    .ok_or_else(|| at(format!("delay={value}: a count from 0 to 1000000")))?;
            }
            _ => {
                return Err(at(format!(
                    "unknown part {:?} (burst=, nodelay, delay=, key=, status=, keys=, redis=, dry-run)",
                    crate::guard::fleet::redact(part)
                )))
            }
        }
    }
    Ok(spec)
}

/// `--rate-limit`'s parser: [`parse_rate_limit`], with the value shown in its error with a
/// Redis password masked (clap's own message would print the value as given).
#[derive(Clone)]
struct RateLimitParser;

impl clap::builder::TypedValueParser for RateLimitParser {
    type Value = ZoneSpec;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<ZoneSpec, clap::Error> {
        let text = value.to_string_lossy();
        parse_rate_limit(&text).map_err(|reason| {
            let arg = arg.map_or_else(|| "--rate-limit".to_owned(), ToString::to_string);
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "invalid value '{}' for '{arg}': {reason}\n",
                    crate::guard::fleet::redact(&text)
                ),
            )
            .with_cmd(cmd)
        })
    }
}

/// `[PREFIX=]N[,key=K][,status=S][,dry-run]`.
fn parse_limit_conn(text: &str) -> Result<ConnZoneSpec, String> {
    let (prefix, rest) = match text.split_once('=') {
        Some((p, r)) if p.starts_with('/') => (p.to_owned(), r),
        _ => (String::new(), text),
    };
    let mut parts = rest.split(',').map(str::trim);
    let n = parts.next().unwrap_or_default();
    let max = n
        .parse()
        .ok()
        .filter(|&n| n > 0 && n <= 1_000_000)
        .ok_or_else(|| format!("{n:?}: the most requests at once per key, from 1 to 1000000"))?;
    let mut spec = ConnZoneSpec {
        prefix,
        max,
        key: vec![KeyPart::Addr],
        status: 503,
        dry_run: false,
        text: text.to_owned(),
    };
    for part in parts {
        let (name, value) = part.split_once('=').unwrap_or((part, ""));
        match name {
            "key" => spec.key = parse_key(value)?,
            "status" => {
                spec.status = match value {
                    "429" => 429,
                    "503" => 503,
                    _ => return Err(format!("status={value}: 503 or 429")),
                }
            }
            "dry-run" if value.is_empty() => spec.dry_run = true,
            _ => return Err(format!("unknown part {part:?} (key=, status=, dry-run)")),
        }
    }
    Ok(spec)
}

/// `100r/s`, `30r/m` → thousandths of a request per second.
fn parse_rate(text: &str) -> Result<u64, String> {
    let (n, per) = text
        .strip_suffix("r/s")
        .map(|n| (n, 1000))
        .or_else(|| text.strip_suffix("r/m").map(|n| (n, 1000 / 60)))
        .ok_or_else(|| format!("{text:?}: a rate is Nr/s or Nr/m (e.g. 100r/s)"))?;
    let n: u64 = n
        .trim()
        .parse()
        .ok()
        .filter(|&n| n > 0 && n <= 10_000_000)
        .ok_or_else(|| format!("{text:?}: the count is from 1 to 10000000"))?;
    // 30r/m is 500 thousandths a second: n × 1000 / 60, not n × (1000 / 60).
    Ok(if per == 1000 {
        n * 1000
    } else {
        (n * 1000 / 60).max(1)
    })
}

/// `addr`, `host`, `path`, `header:NAME`, `cookie:NAME`, joined by `+`.
fn parse_key(text: &str) -> Result<Vec<KeyPart>, String> {
    text.split('+')
        .map(|part| match part.trim() {
            "addr" => Ok(KeyPart::Addr),
            "host" => Ok(KeyPart::Host),
            "path" => Ok(KeyPart::Path),
            p => match p.split_once(':') {
                Some(("header", n)) if !n.is_empty() => Ok(KeyPart::Header(n.to_ascii_lowercase())),
                Some(("cookie", n)) if !n.is_empty() => Ok(KeyPart::Cookie(n.to_owned())),
                _ => Err(format!(
                    "key={text}: the key is addr, host, path, header:NAME or cookie:NAME, joined by +"
                )),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};

    fn parse(argv: &[&str]) -> Result<GuardArgs, String> {
        let cmd = GuardArgs::augment_args(Command::new("t").no_binary_name(true));
        cmd.try_get_matches_from(argv)
            .map_err(|e| e.to_string())
            .and_then(|m| GuardArgs::from_arg_matches(&m).map_err(|e| e.to_string()))
    }

    #[test]
    fn forward_auth_rules_parse() {
        let args = parse(&[
            "--forward-auth",
            "/app/=http://127.0.0.1:4180/oauth2/auth,copy=X-Auth-Request-User,X-Auth-Request-Email,timeout=2s",
            "--forward-auth",
            "/oauth2/=off",
        ])
        .unwrap();
        let rule = &args.forward_auth[0];
        assert_eq!(rule.prefix, "/app/");
        assert_eq!(rule.url, "http://127.0.0.1:4180/oauth2/auth");
        assert_eq!(rule.copy, ["X-Auth-Request-User", "X-Auth-Request-Email"]);
        assert_eq!(rule.timeout, std::time::Duration::from_secs(2));
        assert_eq!(args.forward_auth[1].url, "off");
        let plain = parse_forward_auth("/=unix:/run/auth.sock").unwrap();
        assert!(parse_forward_auth("/=https://auth.example/check").is_ok());
        assert_eq!((plain.copy.len(), plain.timeout), (0, FORWARD_AUTH_TIMEOUT));
        for bad in [
            "app=http://x/auth",
            "/=h2c://x/auth",
            "/=fastcgi://x/auth",
            "/=http://x/auth,copy=X_Bad",
            "/=http://x/auth,copy=X-User,Content-Length",
            "/=http://x/auth,copy=",
            "/=http://x/auth,timeout=0s",
            "/=http://x/auth,realm=x",
            "/=http://x/auth,X-After-Timeout",
        ] {
            assert!(parse_forward_auth(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn allow_and_deny_keep_their_order() {
        let g = parse(&[
            "--deny",
            "192.168.1.1",
            "--allow",
            "192.168.1.0/24",
            "--access",
            "allow /admin/=10.0.0.0/8",
            "--deny",
            "all",
        ])
        .unwrap();
        let order: Vec<(bool, &str)> = g
            .access
            .iter()
            .map(|r| (r.allow, r.prefix.as_str()))
            .collect();
        assert_eq!(
            order,
            [(false, ""), (true, ""), (true, "/admin/"), (false, "")]
        );
        assert!(g.access[3].net.is_none());
        assert!(parse(&["--allow", "10.0.0.0/33"]).is_err());
        assert!(parse(&["--access", "permit 10.0.0.1"]).is_err());
        assert!(parse(&["--deny", "admin=all"]).is_err());
    }

    #[test]
    fn rate_limits() {
        let g = parse(&[
            "--rate-limit",
            "100r/s,burst=20",
            "--rate-limit",
            "/login=30r/m,key=addr+cookie:session,status=503,keys=1k,dry-run",
        ])
        .unwrap();
        let (a, b) = (&g.rate_limit[0], &g.rate_limit[1]);
        assert_eq!(
            (a.per_ks, a.burst, a.status, a.prefix.as_str()),
            (100_000, 20, 429, "")
        );
        assert_eq!(a.key, [KeyPart::Addr]);
        assert_eq!(
            (b.per_ks, b.status, b.keys, b.dry_run),
            (500, 503, 1000, true)
        );
        assert_eq!(b.prefix, "/login");
        assert_eq!(b.key, [KeyPart::Addr, KeyPart::Cookie("session".into())]);
        // nginx's two stages: held back by default, the first N at once, or all at once.
        assert_eq!(a.delay, 0);
        let delay = |text: &str| parse(&["--rate-limit", text]).unwrap().rate_limit[0].delay;
        assert_eq!(delay("10r/s,burst=5,delay=2"), 2);
        assert_eq!(
            delay("10r/s,burst=5,nodelay"),
            crate::guard::ratelimit::NODELAY
        );
        for bad in [
            "100",
            "0r/s",
            "10r/h",
            "10r/s,burst=x",
            "10r/s,key=ip",
            "10r/s,status=404",
            "10r/s,delay=x",
            "10r/s,delay=-1",
            "10r/s,burst=5,delay=2,nodelay",
            "10r/s,nodelay,delay=2",
            "10r/s,keys=0",
            "10r/s,what",
        ] {
            assert!(parse(&["--rate-limit", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn rate_limits_kept_in_redis() {
        let g = parse(&[
            "--rate-limit",
            "100r/s,burst=20,redis=127.0.0.1:6380",
            "--rate-limit",
            "/api/=10r/s,redis=redis://app:secret@redis.internal:6379/2,key=header:x-api-key",
        ])
        .unwrap();
        let (a, b) = (&g.rate_limit[0], &g.rate_limit[1]);
        assert_eq!(a.redis.as_ref().unwrap().shown, "127.0.0.1:6380");
        assert_eq!(b.redis.as_ref().unwrap().shown, "redis.internal:6379 db 2");
        // The password never reaches /metrics or the error log.
        assert_eq!(
            b.text,
            "/api/=10r/s,redis=redis://***@redis.internal:6379/2,key=header:x-api-key"
        );
        assert!(parse(&["--rate-limit", "100r/s"]).unwrap().rate_limit[0]
            .redis
            .is_none());
        for bad in [
            "10r/s,redis=",
            "10r/s,redis=host:port",
            "10r/s,redis=rediss://:secret@host",
            "10r/s,redis=redis://:secret@host/x",
        ] {
            let e = parse(&["--rate-limit", bad]).unwrap_err();
            assert!(e.contains("--rate-limit") && e.contains("redis="), "{e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn connection_limits() {
        let g = parse(&[
            "--limit-conn",
            "10",
            "--limit-conn",
            "/download/=1,key=addr+path,status=429,dry-run",
        ])
        .unwrap();
        let (a, b) = (&g.limit_conn[0], &g.limit_conn[1]);
        assert_eq!(
            (a.max, a.status, a.prefix.as_str(), a.dry_run),
            (10, 503, "", false)
        );
        assert_eq!(a.key, [KeyPart::Addr]);
        assert_eq!(
            (b.max, b.status, b.prefix.as_str(), b.dry_run),
            (1, 429, "/download/", true)
        );
        assert_eq!(b.key, [KeyPart::Addr, KeyPart::Path]);
        for bad in ["0", "x", "10,key=ip", "10,status=404", "10,burst=3", "/a=0"] {
            assert!(parse(&["--limit-conn", bad]).is_err(), "{bad}");
        }
    }
}
