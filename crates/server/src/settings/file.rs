//! `lowlat serve --config FILE`: the same settings as the flags, in TOML. Every flag has a key
//! named like it (`--max-body 1m` is `max_body = "1m"`, `--listen` is `listen = [..]`, a switch
//! such as `--autoindex` is `autoindex = true`), so the file can never lag behind the flags: a key
//! is checked by the very parser of its flag. Flags on the command line override the file (a
//! list flag replaces the file's whole list).
//!
//! Keys are read in the order the file writes them (`allow` before `deny` applies the allow
//! rules first, as the same flags on a command line would).
//!
//! Errors name the file, the line and the key, all of them at once, for `--check-config` (as
//! `nginx -t`) as much as for a start.

use std::path::Path;

use clap::{Args, Command, FromArgMatches};

use super::args::{ServeArgs, SiteArgs};
use super::cache::RuleCache;
use super::proxy::{GroupArgs, ProxyRule, UpstreamTable};
use super::tables::{
    each_table, first_line, line_in_table, line_of, nth_table_line, tokens_of, TableKeys,
};

/// The flags a config file may not set: they name the file itself.
const NOT_IN_FILE: [&str; 2] = ["config", "check-config"];

fn command() -> Command {
    ServeArgs::augment_args(Command::new("lowlat serve").no_binary_name(true))
}

/// Reads `path` and merges it under the command line's own flags.
///
/// # Errors
/// One message per problem, each `FILE:LINE: key: reason`.
pub fn merged(path: &Path, cli: &[String]) -> Result<ServeArgs, Vec<String>> {
    let loaded = load(path, cli)?;
    if loaded.problems.is_empty() {
        Ok(loaded.args)
    } else {
        Err(loaded.problems)
    }
}

/// A config file read as far as it checks: the settings of every key that checked (merged under
/// the command line), one problem per key that did not, and where each key is set — so that
/// `--check-config` can go on to check what the good keys name (a root that does not exist) and
/// list every problem of the file in one run.
#[derive(Debug)]
pub struct Loaded {
    pub args: ServeArgs,
    /// `FILE:LINE: key: reason`, one per key that did not check.
    pub problems: Vec<String>,
    text: String,
    shown: String,
    /// For each of `args.sites`, its index among the file's `[[site]]` tables.
    site_tables: Vec<usize>,
}

impl Loaded {
    /// `FILE:LINE: key` for a top-level key (`site: None`) or a key of `args.sites[i]`, when the
    /// file sets it; `None` when it comes from the command line or a default.
    #[must_use]
    pub fn locate(&self, site: Option<usize>, key: &str) -> Option<String> {
        match site {
            None => {
                let line = line_of(&self.text, key);
                (line > 0).then(|| format!("{}:{line}: {key}", self.shown))
            }
            Some(i) => {
                let table = *self.site_tables.get(i)?;
                let start = nth_site_line(&self.text, table);
                let line = line_in_table(&self.text, start, key);
                if line != start {
                    Some(format!("{}:{line}: site[{table}].{key}", self.shown))
                } else {
                    // Not set in the site: inherited from the top level, if the file sets it.
                    self.locate(None, key)
                }
            }
        }
    }
}

/// Reads `path` and merges every key that checks under the command line's own flags.
///
/// # Errors
/// When the file cannot be read or is not TOML, or what checked cannot be combined: one message
/// per problem.
pub fn load(path: &Path, cli: &[String]) -> Result<Loaded, Vec<String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![format!("cannot read {}: {e}", path.display())])?;
    load_text(text, path.display().to_string(), cli)
}

/// [`load`] for a file's `text`, named `shown` in messages: what a config file is checked by,
/// without the file (the fuzz target for config files feeds it directly).
///
/// # Errors
/// As [`load`], bar reading.
pub fn load_text(text: String, shown: String, cli: &[String]) -> Result<Loaded, Vec<String>> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e.span().map_or(0, |s| {
            text[..s.start.min(text.len())].matches('\n').count() + 1
        });
        vec![format!("{shown}:{line}: {}", e.message())]
    })?;
    let mut cmd = command();
    // Resolves every argument's defaults (how many values it takes) as parsing would.
    cmd.build();
    let mut errors = Vec::new();
    let mut file_tokens: Vec<(String, Vec<String>)> = Vec::new();
    let mut site_tables = None;
    let mut upstream_tables = None;
    let mut log_formats = Vec::new();
    let mut top_rule_caches = Vec::new();
    for (key, value) in &table {
        // `[log_format]` (nginx's name) holds the access log's named formats; the key
        // `log_format = "json"` is the error log's format, a flag like the others.
        if let (true, toml::Value::Table(formats)) = (key == "log_format", value) {
            log_formats = named_formats(&text, &shown, formats, &mut errors);
            continue;
        }
        if key == "upstream" {
            upstream_tables = Some(value);
            continue;
        }
        if key == "site" {
            site_tables = Some(value);
            continue;
        }
        let line = line_of(&text, key);
        let at = |reason: &str| format!("{shown}:{line}: {key}: {reason}");
        let rewritten;
        let value = if key == "proxy" {
            let item_at = |item: &str, reason: &str| {
                let line = line_after(&text, line, item);
                format!("{shown}:{line}: {item}: {reason}")
            };
            match proxy_list(value, &item_at, &mut errors) {
                Some((list, rules)) => {
                    top_rule_caches = rules;
                    rewritten = list;
                    &rewritten
                }
                None => continue,
            }
        } else {
            value
        };
        let flag = key.replace('_', "-");
        let known = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.as_str()));
        let Some(arg) = known.filter(|_| !NOT_IN_FILE.contains(&flag.as_str())) else {
            errors.push(at(&unknown_key(&cmd, key)));
            continue;
        };
        let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
        let tokens = match tokens_of(&flag, value, takes_value) {
            Ok(t) => t,
            Err(reason) => {
                errors.push(at(&reason));
                continue;
            }
        };
        // The key's own check: its flag's parser, alone.
        if let Err(e) = command().try_get_matches_from(&tokens) {
            if !matches!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument) {
                errors.push(at(&first_line(&e)));
                continue;
            }
        }
        file_tokens.push((flag, tokens));
    }
    let mut site_certs = Vec::new();
    let sites = match site_tables {
        Some(value) => sites(
            &text,
            &shown,
            value,
            &file_tokens,
            &mut errors,
            &mut site_certs,
        ),
        None => Vec::new(),
    };
    let upstreams = match upstream_tables {
        Some(value) => upstreams(&text, &shown, value, &file_tokens, &mut errors),
        None => Vec::new(),
    };
    // The command line wins: a flag it gives drops the file's value(s) for that flag.
    let on_cli: Vec<String> = cli.iter().filter_map(|t| long_name(&cmd, t)).collect();
    let mut argv: Vec<String> = file_tokens
        .into_iter()
        .filter(|(flag, _)| !on_cli.contains(flag))
        .flat_map(|(_, t)| t)
        .collect();
    argv.extend(cli.iter().cloned());
    let combined = command()
        .try_get_matches_from(&argv)
        .and_then(|m| ServeArgs::from_arg_matches(&m));
    let mut args = match combined {
        Ok(args) => args,
        Err(e) => {
            errors.push(first_line(&e));
            return Err(errors);
        }
    };
    let (site_tables, sites): (Vec<usize>, Vec<SiteArgs>) = sites.into_iter().unzip();
    args.sites = sites;
    attach_rule_caches(&mut args.proxy, top_rule_caches);
    args.upstreams = upstreams;
    args.log_formats = log_formats;
    for (cert, key) in site_certs {
        args.cert.push(cert.into());
        args.key.push(key.into());
    }
    Ok(Loaded {
        args,
        problems: errors,
        text,
        shown,
        site_tables,
    })
}

/// The flags a `[[site]]` may set: what it serves, not how the server runs.
fn site_flags() -> Vec<String> {
    let mut cmd = crate::php::PhpArgs::augment_args(crate::app::AppArgs::augment_args(
        crate::files::FilesArgs::augment_args(Command::new("site")),
    ));
    cmd.build();
    cmd.get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .chain([
            "no-plaintext".to_owned(),
            "no-json".to_owned(),
            "add-header".to_owned(),
            "proxy".to_owned(),
            "return".to_owned(),
            "https-redirect".to_owned(),
            "allow".to_owned(),
            "deny".to_owned(),
            "access".to_owned(),
            "rate-limit".to_owned(),
            "limit-conn".to_owned(),
            "basic-auth".to_owned(),
            "forward-auth".to_owned(),
            "client-ca".to_owned(),
            "client-cert".to_owned(),
        ])
        .chain(CACHE_POLICY_FLAGS.map(str::to_owned))
        .filter(|f| f != "help")
        .collect()
}

/// The cache settings a site or a forwarding rule may set for itself (beside `cache`).
const CACHE_POLICY_FLAGS: [&str; 5] = [
    "cache-key",
    "cache-bypass",
    "cache-no-store",
    "cache-ttl",
    "cache-ignore",
];

/// Reads `cache = true/false` from a table: `Ok(None)` when it is not there.
fn switch(t: &toml::Table, key: &str) -> Result<Option<bool>, &'static str> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Boolean(b)) => Ok(Some(*b)),
        Some(_) => Err("is a switch: true or false"),
    }
}

/// A `proxy` list whose items may be tables as well as `PREFIX=TARGET` texts —
/// `{ prefix = "/api/", target = "http://…", cache = false, cache_ttl = ["200 1m"] }` — for a
/// rule with cache settings of its own (as an nginx `location` sets `proxy_cache_*`). Returns
/// the list as its flag takes it (texts only) and each table's settings beside its text; `None`
/// when an item is refused (each problem is in `errors`, worded by `at(item, reason)`).
fn proxy_list(
    value: &toml::Value,
    at: &dyn Fn(&str, &str) -> String,
    errors: &mut Vec<String>,
) -> Option<(toml::Value, Vec<(String, RuleCache)>)> {
    let toml::Value::Array(items) = value else {
        return Some((value.clone(), Vec::new()));
    };
    let allowed: Vec<String> = CACHE_POLICY_FLAGS.map(str::to_owned).to_vec();
    let keys = TableKeys {
        skip: &["prefix", "target", "cache"],
        prefix: "",
        allowed: &allowed,
        cmd: &command,
        unknown: "unknown key in a proxy rule (prefix, target, cache, cache_key, cache_bypass, cache_no_store, cache_ttl, cache_ignore)",
    };
    let mut texts = Vec::new();
    let mut rules = Vec::new();
    let mut bad = false;
    for (i, item) in items.iter().enumerate() {
        let toml::Value::Table(t) = item else {
            texts.push(item.clone());
            continue;
        };
        let item_at = |key: &str, reason: &str| at(&format!("proxy[{i}].{key}"), reason);
        let (Some(prefix), Some(target)) = (
            t.get("prefix").and_then(toml::Value::as_str),
            t.get("target").and_then(toml::Value::as_str),
        ) else {
            errors.push(item_at(
                "prefix",
                "a rule table gives prefix = \"/PATH/\" and target = \"http://…\" (or a group)",
            ));
            bad = true;
            continue;
        };
        let text = format!("{prefix}={target}");
        if let Err(e) = super::proxy::parse_proxy_rule(&text) {
            errors.push(item_at("target", &e));
            bad = true;
            continue;
        }
        let on = match switch(t, "cache") {
            Ok(on) => on,
            Err(e) => {
                errors.push(item_at("cache", e));
                bad = true;
                continue;
            }
        };
        let Some(argv) = keys.argv(t, &[], &item_at, errors) else {
            bad = true;
            continue;
        };
        match command()
            .try_get_matches_from(&argv)
            .and_then(|m| ServeArgs::from_arg_matches(&m))
        {
            Ok(a) => rules.push((
                text.clone(),
                RuleCache {
                    on,
                    policy: a.cache.policy,
                },
            )),
            Err(e) => {
                errors.push(item_at("prefix", &first_line(&e)));
                bad = true;
                continue;
            }
        }
        texts.push(toml::Value::String(text));
    }
    (!bad).then_some((toml::Value::Array(texts), rules))
}

/// Gives the rules that came from a `proxy` table their settings (a rule the command line
/// replaced has none).
fn attach_rule_caches(rules: &mut [ProxyRule], caches: Vec<(String, RuleCache)>) {
    for (text, cache) in caches {
        if let Some(r) = rules
            .iter_mut()
            .find(|r| format!("{}={}", r.prefix, r.target) == text)
        {
            r.cache = Some(cache);
        }
    }
}

/// The line, from line `from` on, where `item` (`proxy[1].cache_ttl`) has its last part set
/// (`cache_ttl =`, at the start of a line or after `{` or `,`); `from` when none does.
fn line_after(text: &str, from: usize, item: &str) -> usize {
    let key = item.rsplit('.').next().unwrap_or(item);
    let sets = |l: &str| {
        l.match_indices(key).any(|(at, _)| {
            let before = l[..at].trim_end();
            let after = l[at + key.len()..].trim_start();
            (before.is_empty() || before.ends_with(['{', ','])) && after.starts_with('=')
        })
    };
    text.lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, l)| sets(l))
        .map_or(from, |(n, _)| n + 1)
}

/// Reads the `[[site]]` tables. Each starts from the file's top-level settings of what a site
/// serves and overrides them with its own keys.
fn sites(
    text: &str,
    shown: &str,
    value: &toml::Value,
    top: &[(String, Vec<String>)],
    errors: &mut Vec<String>,
    certs: &mut Vec<(String, String)>,
) -> Vec<(usize, SiteArgs)> {
    let allowed = site_flags();
    let keys = TableKeys {
        skip: &["server_names", "cert", "key", "acme", "cache"],
        prefix: "",
        allowed: &allowed,
        cmd: &command,
        unknown: "unknown key in a site (a site sets what it serves: root, index, autoindex, cache_control, the app…)",
    };
    let mut out = Vec::new();
    each_table(text, shown, "site", value, errors, |site, t, errors| {
        let at = |key: &str, reason: &str| site.at(key, reason);
        let names: Vec<String> = match t.get("server_names") {
            Some(toml::Value::Array(a)) if !a.is_empty() => {
                let names: Option<Vec<String>> =
                    a.iter().map(|v| v.as_str().map(str::to_owned)).collect();
                if let Some(n) = names {
                    n
                } else {
                    errors.push(at("server_names", "must be a list of host names"));
                    return;
                }
            }
            _ => {
                errors.push(site.missing("server_names", "the host names this site answers"));
                return;
            }
        };
        let mut bad = false;
        // A site's certificate: one more --cert/--key pair (chosen by SNI among the names it
        // lists, as every pair is).
        match (t.get("cert"), t.get("key")) {
            (Some(toml::Value::String(c)), Some(toml::Value::String(k))) => {
                certs.push((c.clone(), k.clone()));
            }
            (None, None) => {}
            _ => {
                errors.push(at(
                    "cert",
                    "a site's cert and key are two file names, given together",
                ));
                bad = true;
            }
        }
        let own_cert = t.contains_key("cert");
        // Whether ACME obtains this site's certificate (unset: as --acme says, unless the site
        // has its own cert and key).
        let acme = match t.get("acme") {
            None => None,
            Some(toml::Value::Boolean(b)) => Some(*b),
            Some(_) => {
                errors.push(at("acme", "is a switch: true or false"));
                bad = true;
                None
            }
        };
        if acme == Some(true) && own_cert {
            errors.push(at(
                "acme",
                "a site's certificate comes from its cert and key or from ACME, not both",
            ));
            bad = true;
        }
        let cache = match switch(t, "cache") {
            Ok(on) => on,
            Err(e) => {
                errors.push(at("cache", e));
                bad = true;
                None
            }
        };
        // The site's rules, any of which may be a table with cache settings of its own.
        let mut rule_caches = Vec::new();
        let own_proxy = match t.get("proxy") {
            None => None,
            Some(v) => {
                let start = site.start;
                let item_at = |item: &str, reason: &str| {
                    let line = line_after(text, line_in_table(text, start, "proxy"), item);
                    format!("{shown}:{line}: site[{}].{item}: {reason}", site.i)
                };
                match proxy_list(v, &item_at, errors) {
                    Some((list, caches)) => {
                        rule_caches = caches;
                        Some(list)
                    }
                    None => {
                        bad = true;
                        None
                    }
                }
            }
        };
        let mut t = t.clone();
        match own_proxy {
            Some(list) => {
                t.insert("proxy".to_owned(), list);
            }
            // Its problems are told already.
            None => {
                t.remove("proxy");
            }
        }
        let argv = keys.argv(&t, top, &at, errors);
        let Some(argv) = argv.filter(|_| !bad) else {
            return;
        };
        match command()
            .try_get_matches_from(&argv)
            .map_err(|e| first_line(&e))
            .and_then(|m| ServeArgs::from_arg_matches(&m).map_err(|e| first_line(&e)))
        {
            Ok(mut a) => out.push((
                site.i,
                SiteArgs {
                    cache,
                    cache_policy: a.cache.policy,
                    proxy: {
                        attach_rule_caches(&mut a.proxy, rule_caches);
                        a.proxy
                    },
                    server_names: names,
                    files: a.files,
                    app: a.app,
                    php: a.php,
                    no_plaintext: a.no_plaintext,
                    no_json: a.no_json,
                    add_header: a.add_header,
                    acme,
                    own_cert,
                    returns: a.returns,
                    https_redirect: a.https_redirect,
                    guard: a.guard,
                    client_cert: a.client_cert,
                },
            )),
            Err(e) => errors.push(site.whole(&e)),
        }
    });
    out
}

/// Reads the `[log_format]` table: `name = "$remote_addr …"`, each compiled to check it (an
/// unknown variable is an error on its line).
fn named_formats(
    text: &str,
    shown: &str,
    formats: &toml::Table,
    errors: &mut Vec<String>,
) -> Vec<(String, String)> {
    let header = nth_table_line(text, "[log_format]", 0);
    let mut out = Vec::new();
    for (name, value) in formats {
        let line = if header > 0 {
            line_in_table(text, header, name)
        } else {
            line_of(text, "log_format")
        };
        let at = |reason: &str| format!("{shown}:{line}: log_format.{name}: {reason}");
        let Some(format) = value.as_str() else {
            errors.push(at("must be a string (\"$remote_addr - $remote_user …\")"));
            continue;
        };
        if crate::log_format::BUILT_IN.contains(&name.as_str()) {
            errors.push(at("is built in; give the format another name"));
            continue;
        }
        if name.contains('$') || name.is_empty() {
            errors.push(at("a name is letters, digits, _ and -"));
            continue;
        }
        match crate::log_format::LogFormat::compile(format) {
            Ok(_) => out.push((name.clone(), format.to_owned())),
            Err(e) => errors.push(at(&e)),
        }
    }
    out
}

/// The line of the `i`-th `[[site]]` header.
fn nth_site_line(text: &str, i: usize) -> usize {
    nth_table_line(text, "[[site]]", i)
}

/// Reads the `[[upstream]]` tables: a `name`, its `servers` (URLs, or `{ url, weight }`
/// tables), and any `--proxy-*` setting without its prefix (`balance = "least-conn"`), which
/// overrides the file's top-level `proxy_*` keys for this group.
fn upstreams(
    text: &str,
    shown: &str,
    value: &toml::Value,
    top: &[(String, Vec<String>)],
    errors: &mut Vec<String>,
) -> Vec<UpstreamTable> {
    let group_cmd = || GroupArgs::augment_args(Command::new("upstream").no_binary_name(true));
    let mut allowed = group_cmd();
    allowed.build();
    let allowed: Vec<String> = allowed
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .filter(|f| f != "help")
        .collect();
    let keys = TableKeys {
        skip: &["name", "servers"],
        prefix: "proxy-",
        allowed: &allowed,
        cmd: &group_cmd,
        unknown: "unknown key in an upstream (name, servers, balance, connect_timeout, keepalive, health_check…)",
    };
    let mut out: Vec<UpstreamTable> = Vec::new();
    each_table(text, shown, "upstream", value, errors, |up, t, errors| {
        let at = |key: &str, reason: &str| up.at(key, reason);
        let Some(name) = t.get("name").and_then(toml::Value::as_str) else {
            errors.push(up.missing("name", "the name --proxy rules use"));
            return;
        };
        if name.is_empty() || name.contains([':', '=', ',', '/']) {
            errors.push(at("name", "a plain name (no : = , /)"));
            return;
        }
        let mut servers = Vec::new();
        let mut bad = false;
        match t.get("servers") {
            Some(toml::Value::Array(list)) if !list.is_empty() => {
                for v in list {
                    let server = match v {
                        toml::Value::String(url) => Some((url.clone(), 1)),
                        toml::Value::Table(st) => match (
                            st.get("url").and_then(toml::Value::as_str),
                            st.get("weight").map(toml::Value::as_integer),
                        ) {
                            (Some(url), None) => Some((url.to_owned(), 1)),
                            (Some(url), Some(Some(w))) if (1..=1000).contains(&w) => {
                                Some((url.to_owned(), u32::try_from(w).unwrap_or(1)))
                            }
                            _ => None,
                        },
                        _ => None,
                    };
                    match server {
                        Some(s) => servers.push(s),
                        None => {
                            errors.push(at(
                                "servers",
                                "each is a URL or { url = \"http://…\", weight = 1 to 1000 }",
                            ));
                            bad = true;
                        }
                    }
                }
            }
            _ => {
                errors.push(up.missing("servers", "a list of http://HOST:PORT or unix:/PATH"));
                return;
            }
        }
        let argv = keys.argv(t, top, &at, errors);
        let Some(argv) = argv.filter(|_| !bad) else {
            return;
        };
        if out.iter().any(|u| u.name == name) {
            errors.push(at("name", "another [[upstream]] has this name"));
            return;
        }
        match group_cmd()
            .try_get_matches_from(&argv)
            .and_then(|m| GroupArgs::from_arg_matches(&m))
        {
            Ok(group) => out.push(UpstreamTable {
                name: name.to_owned(),
                servers,
                group,
            }),
            Err(e) => errors.push(up.whole(&first_line(&e))),
        }
    });
    out
}

/// The long name of the flag a command-line token sets (`--listen`, `--listen=…`, `-l`).
fn long_name(cmd: &Command, token: &str) -> Option<String> {
    if let Some(rest) = token.strip_prefix("--") {
        return Some(rest.split('=').next().unwrap_or(rest).to_owned());
    }
    let short = token.strip_prefix('-')?.chars().next()?;
    cmd.get_arguments()
        .find(|a| a.get_short() == Some(short))
        .and_then(|a| a.get_long().map(str::to_owned))
}

/// "unknown key", with the nearest known key when one is a slip away (`cache_contorl`).
fn unknown_key(cmd: &Command, key: &str) -> String {
    let nearest = cmd
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|l| !NOT_IN_FILE.contains(l) && *l != "help" && *l != "version")
        .map(|l| l.replace('-', "_"))
        .map(|k| (edit_distance(key, &k), k))
        .min();
    match nearest {
        Some((d, k)) if d <= 2.max(key.len() / 4) && d < key.len() => {
            format!("unknown key (did you mean `{k}`?)")
        }
        _ => "unknown key".to_owned(),
    }
}

/// Levenshtein distance, for suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    /// `errors` are exactly one per `(line, key, words)`: `FILE:LINE: KEY: …words…`.
    fn assert_errors(errors: &[String], shown: &str, want: &[(usize, &str, &str)]) {
        assert_eq!(errors.len(), want.len(), "{errors:#?}");
        for (line, key, words) in want {
            let prefix = format!("{shown}:{line}: {key}: ");
            assert!(
                errors
                    .iter()
                    .any(|e| e.starts_with(&prefix) && e.contains(words)),
                "{prefix} … {words} in {errors:#?}"
            );
        }
    }

    #[test]
    fn keys_become_flags_and_the_command_line_wins() {
        let f = write(
            "listen = [\"127.0.0.1:9001\", \"127.0.0.1:9002\"]\nworkers = 3\nmax_body = \"2m\"\nautoindex = true\npin = false\n",
        );
        let a = merged(f.path(), &[]).unwrap();
        assert_eq!(a.listen.len(), 2);
        assert_eq!(a.workers, Some(3));
        assert_eq!(a.max_body, 2 << 20);
        assert!(a.files.autoindex);
        assert!(!a.pin);
        let cli = [
            "--listen".to_owned(),
            "127.0.0.1:9100".to_owned(),
            "-w".into(),
            "1".into(),
        ];
        let a = merged(f.path(), &cli).unwrap();
        assert_eq!(
            a.listen.len(),
            1,
            "a list on the command line replaces the file's"
        );
        assert_eq!(a.workers, Some(1));
        assert_eq!(a.max_body, 2 << 20, "the file's other keys stay");
    }

    #[test]
    fn every_error_names_its_line_and_key() {
        let f = write(
            "workers = 2\nmax_body = \"12q\"\nno_such_key = 1\nautoindex = \"yes\"\nlisten = [\"nonsense\"]\nconfig = \"x\"\n",
        );
        let errors = merged(f.path(), &[]).unwrap_err();
        let shown = f.path().display().to_string();
        let want = [
            (2, "max_body", "unknown unit"),
            (3, "no_such_key", "unknown key"),
            (4, "autoindex", "switch"),
            (5, "listen", "nonsense"),
            (6, "config", "unknown key"),
        ];
        assert_errors(&errors, &shown, &want);
        let bad = write("workers = [\n");
        let e = merged(bad.path(), &[]).unwrap_err();
        assert!(
            e[0].starts_with(&format!("{}:", bad.path().display())),
            "{e:?}"
        );
    }

    /// A `proxy` list's tables: each becomes its `PREFIX=TARGET` rule with its own cache
    /// settings; a table without its target, or with a bad setting, names its item and line.
    #[test]
    fn proxy_tables_carry_their_cache_settings() {
        let f = write(
            "cache = true
proxy = [\n  \"/a/=http://127.0.0.1:1\",\n               { prefix = \"/b/\", target = \"http://127.0.0.1:1\", cache = false, cache_ttl = [\"404 1m\"] },\n]\n",
        );
        let a = merged(f.path(), &[]).unwrap();
        assert_eq!(a.proxy.len(), 2);
        assert_eq!(a.proxy[0].cache, None);
        let own = a.proxy[1].cache.as_ref().unwrap();
        assert_eq!((a.proxy[1].prefix.as_str(), own.on), ("/b/", Some(false)));
        assert_eq!(own.policy.cache_ttl, ["404 1m"]);

        let f = write(
            "proxy = [\n  { prefix = \"/b/\" },\n  { prefix = \"/c/\", target = \"http://127.0.0.1:1\",\n    cache_ttl = [\"soon\"] },\n]\n",
        );
        let errors = merged(f.path(), &[]).unwrap_err();
        let shown = f.path().display().to_string();
        assert_errors(
            &errors,
            &shown,
            &[
                (2, "proxy[0].prefix", "target"),
                (4, "proxy[1].cache_ttl", "soon"),
            ],
        );
    }

    /// `[[site]]` and `[[upstream]]` tables: their keys override the top level's (with
    /// `proxy_` added for an upstream's), an unknown key or a bad value names its table, line
    /// and key, and a table with one is left out.
    #[test]
    fn table_keys_override_the_top_level_or_name_their_line() {
        let f = write(
            "proxy_connect_timeout = \"7s\"\nautoindex = true\n\n\
             [[upstream]]\nname = \"a\"\nservers = [\"http://127.0.0.1:1\"]\nconnect_timeout = \"2s\"\n\n\
             [[upstream]]\nname = \"b\"\nservers = [\"http://127.0.0.1:2\"]\n\n\
             [[site]]\nserver_names = [\"x.test\"]\nautoindex = false\n",
        );
        let a = merged(f.path(), &[]).unwrap();
        let timeouts: Vec<(&str, Duration)> = a
            .upstreams
            .iter()
            .map(|u| (u.name.as_str(), u.group.connect_timeout))
            .collect();
        assert_eq!(
            timeouts,
            [("a", Duration::from_secs(2)), ("b", Duration::from_secs(7))]
        );
        assert_eq!(a.sites.len(), 1);
        assert!(!a.sites[0].files.autoindex, "the site's own key wins");

        let f = write(
            "[[upstream]]\nname = \"a\"\nservers = [\"http://127.0.0.1:1\"]\nbalance = \"nope\"\nweights = 3\n\n\
             [[site]]\nserver_names = [\"x.test\"]\nworkers = 2\nautoindex = \"yes\"\n",
        );
        let errors = merged(f.path(), &[]).unwrap_err();
        let shown = f.path().display().to_string();
        let want = [
            (4, "upstream[0].balance", ""),
            (5, "upstream[0].weights", "unknown key in an upstream"),
            (9, "site[0].workers", "unknown key in a site"),
            (10, "site[0].autoindex", "switch"),
        ];
        assert_errors(&errors, &shown, &want);
    }
}
