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
    let mut client_cert_said = false;
    for (i, site) in sites {
        if let Err(e) = crate::files::FilesConfig::from_args(&site.files, 1) {
            problems.push(locate(i, e));
            sites_ok = false;
        }
        if let Err(e) = crate::app::AppShared::from_args(&site.app) {
            problems.push(locate(i, e));
            sites_ok = false;
        }
        // Each forward-auth rule's auth service, resolved as a start resolves it.
        for spec in site.guard.forward_auth.iter().filter(|s| s.url != "off") {
            let mut scratch = crate::proxy::config::ProxyConfig::default();
            let target = (spec.url.as_str(), spec.timeout);
            let label = spec.label();
            if let Err(e) =
                super::proxy::auth_group(&mut scratch, target, &label, &args.proxy_group)
            {
                problems.push(locate(i, e));
                sites_ok = false;
            }
        }
        // The site's client CA file, read as a start reads it.
        match site.client_cert.rule() {
            Ok(Some(rule)) => {
                if let Err(e) = crate::tls::load_client_ca(&rule.file) {
                    problems.push(locate(i, e.to_string()));
                    sites_ok = false;
                    client_cert_said = true;
                }
            }
            Ok(None) => {}
            Err(e) => {
                problems.push(locate(i, e));
                sites_ok = false;
                client_cert_said = true;
            }
        }
    }
    if let Err(e) = args.to_config() {
        problems.push(locate(None, e));
    }
    match args.tls_context() {
        // Said above, site by site with their lines.
        Err(e)
            if client_cert_said && (e.contains("--client-ca ") || e.contains("--client-cert ")) => {
        }
        Err(e) => problems.push(locate(None, e)),
        Ok(Some(tls)) => {
            for cert in tls.certificates().certs.iter().filter(|c| c.is_ca) {
                eprintln!("lowlat serve: warning: {}", ca_warning(&cert.paths.cert));
            }
        }
        Ok(None) => {}
    }
    match args.acme_config() {
        Err(e) => problems.push(locate(None, e)),
        Ok(Some(acme)) => {
            if let Some(problem) = state_dir_problem(&acme.state_dir) {
                problems.push(locate(None, problem));
            }
            if let Some(root) = &acme.ca_root {
                if let Err(e) = std::fs::read(root) {
                    problems.push(locate(
                        None,
                        format!("--acme-ca-root: cannot read {}: {e}", root.display()),
                    ));
                }
            }
            println!(
                "lowlat serve: acme: will request a certificate for each of {} from {} (challenges: {}; state in {})",
                acme.names.join(", "),
                acme.directory,
                acme.challenges
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                acme.state_dir.display()
            );
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
    // Once each: the ACME settings are checked by the server's configuration, its TLS and
    // ACME itself, which all find the same fault.
    let mut seen = std::collections::HashSet::new();
    problems.retain(|p| seen.insert(p.clone()));
    // In the order of the file's lines; problems without a line (the command line's) last.
    let shown = args.config.as_ref().map(|p| p.display().to_string());
    problems.sort_by_key(|p| line_of_problem(p, shown.as_deref()).unwrap_or(usize::MAX));
    problems
}

/// Why ACME could not keep its state in `dir`, if it could not: not a folder, not writable, or
/// not creatable (no writable folder above it).
fn state_dir_problem(dir: &Path) -> Option<String> {
    let mut at = dir;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if !m.is_dir() => {
                return Some(format!("--state-dir: {} is not a folder", at.display()))
            }
            Ok(_) => {
                let probe = at.join(format!(".lowlat-check-{}", std::process::id()));
                return match std::fs::File::create(&probe) {
                    Ok(_) => {
                        let _ = std::fs::remove_file(&probe);
                        None
                    }
                    Err(e) => Some(format!(
                        "--state-dir: {} cannot be written: {e}",
                        if at == dir {
                            dir.display().to_string()
                        } else {
                            format!("{} (to create {})", at.display(), dir.display())
                        }
                    )),
                };
            }
            Err(_) => match at.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => at = parent,
                _ => return None,
            },
        }
    }
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
