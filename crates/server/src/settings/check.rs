//! `lowlat serve --check-config` (as `nginx -t`): everything a start would check short of
//! binding, every problem listed in one run — the file's keys that do not parse, then what the
//! keys that do parse name (a root that does not exist, an unreadable word list or certificate,
//! a log that cannot be opened) — each with its file and line, in line order.

use std::path::Path;
use std::process::ExitCode;

use super::args::{ServeArgs, SiteArgs};
use super::file::{load, Loaded};
use super::sites::service;

/// `--check-config` for `cli` (the command line's settings), under the file it names.
pub(crate) fn check_config(cli: ServeArgs, command_line: &[String]) -> ExitCode {
    let Some(path) = cli.config.clone() else {
        return report(&problems(&cli, None), None);
    };
    match load(&path, command_line) {
        Ok(mut loaded) => {
            loaded.args.config = Some(path.clone());
            report(&problems(&loaded.args, Some(&loaded)), Some(&path))
        }
        Err(problems) => report(&problems, Some(&path)),
    }
}

/// Every problem of `args`, located in the file where it sets the key at fault.
fn problems(args: &ServeArgs, loaded: Option<&Loaded>) -> Vec<String> {
    let mut problems: Vec<String> = loaded.map(|l| l.problems.clone()).unwrap_or_default();
    let locate = |site: Option<usize>, e: String| -> String {
        let at = flag_named(&e).and_then(|key| loaded.and_then(|l| l.locate(site, &key)));
        match at {
            Some(at) => format!("{at}: {e}"),
            None => e,
        }
    };
    // What each site serves, checked site by site so that every missing root is said.
    let default_site;
    let sites: Vec<(Option<usize>, &SiteArgs)> = if args.sites.is_empty() {
        default_site = args.default_site();
        vec![(None, &default_site)]
    } else {
        args.sites
            .iter()
            .enumerate()
            .map(|(i, s)| (Some(i), s))
            .collect()
    };
    let mut sites_ok = true;
    for (i, site) in sites {
        if let Err(e) = crate::files::FilesConfig::from_args(&site.files, 1) {
            problems.push(locate(i, e));
            sites_ok = false;
        }
        if let Err(e) = crate::app::AppShared::from_args(&site.app) {
            problems.push(locate(i, e));
            sites_ok = false;
        }
    }
    if let Err(e) = args.to_config() {
        problems.push(locate(None, e));
    }
    match args.tls_context() {
        Err(e) => problems.push(e),
        Ok(Some(tls)) => {
            for cert in tls.certificates().certs.iter().filter(|c| c.is_ca) {
                eprintln!("lowlat serve: warning: {}", ca_warning(&cert.paths.cert));
            }
        }
        Ok(None) => {}
    }
    for warning in super::proxy::tls_warnings(&args.upstreams, &args.proxy_group) {
        eprintln!("lowlat serve: warning: {warning}");
    }
    // What is left to find once each site checks: routes that do not fit together.
    if sites_ok {
        if let Err(e) = service(args) {
            problems.push(e);
        }
    }
    if let Some(path) = &args.access_log {
        if let Err(e) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            problems.push(locate(
                None,
                format!("--access-log: cannot open {}: {e}", path.display()),
            ));
        }
    }
    // In the order of the file's lines; problems without a line (the command line's) last.
    let shown = args.config.as_ref().map(|p| p.display().to_string());
    problems.sort_by_key(|p| line_of_problem(p, shown.as_deref()).unwrap_or(usize::MAX));
    problems
}

/// The warning for a certificate that is a CA's (basicConstraints CA:TRUE).
pub(crate) fn ca_warning(path: &Path) -> String {
    format!(
        "{}: a CA certificate (basicConstraints CA:TRUE), which rustls clients and browsers refuse as a server's own; \
         make the server's with CA:FALSE (openssl req -x509 … -addext basicConstraints=critical,CA:FALSE)",
        path.display()
    )
}

/// The key a message is about: its first `--flag`, as a key (`--cache-control` → `cache_control`).
fn flag_named(message: &str) -> Option<String> {
    let at = message.find("--")?;
    let flag: String = message[at + 2..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!flag.is_empty()).then(|| flag.replace('-', "_"))
}

/// The line number of a `FILE:LINE: …` problem.
fn line_of_problem(problem: &str, file: Option<&str>) -> Option<usize> {
    let rest = problem.strip_prefix(file?)?.strip_prefix(':')?;
    rest.split(':').next()?.parse().ok()
}

fn report(problems: &[String], config: Option<&Path>) -> ExitCode {
    if problems.is_empty() {
        match config {
            Some(path) => println!("lowlat serve: {}: configuration ok", path.display()),
            None => println!("lowlat serve: configuration ok (command-line flags; no --config)"),
        }
        ExitCode::SUCCESS
    } else {
        for p in problems {
            eprintln!("lowlat serve: {p}");
        }
        ExitCode::from(1)
    }
}
