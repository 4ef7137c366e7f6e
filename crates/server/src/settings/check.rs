//! `lowlat serve --check-config` (as `nginx -t`): everything a start would check short of
//! binding, every problem listed in one run with its file and line.

use std::process::ExitCode;

use super::args::ServeArgs;
use super::sites::service;

/// `--check-config`: everything a start would check short of binding, one line per problem.
pub(crate) fn check_config(args: &ServeArgs) -> ExitCode {
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
