//! `lowlat man`: the manual pages, one per command, as clap_mangen renders them from the same
//! definitions as `--help` — so a page never describes flags the binary does not have.
//!
//! The top page lists its commands as `lowlat-serve(1)`, `lowlat-load(1)`, …; each of those is
//! a page here too (`lowlat man load`, `lowlat man load merge`), and `lowlat man --dir DIR`
//! writes every one of them, so that `man lowlat-load` works once they are installed. Each page
//! ends with a SEE ALSO section naming the guides under `docs/` for its command (`guides`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Command;

use crate::guides;

/// Prints the page of `path` (`[]` for the top page, `["load", "merge"]` for
/// `lowlat-load-merge(1)`), or with `dir` writes every page there and prints their paths.
pub fn run(cli: Command, path: &[String], dir: Option<&Path>) -> ExitCode {
    let root = prepared(cli);
    if let Some(dir) = dir {
        return match write_all(&root, dir) {
            Ok(written) => {
                for p in written {
                    println!("{}", p.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("lowlat man: cannot write into {}: {e}", dir.display());
                ExitCode::from(1)
            }
        };
    }
    let Some(cmd) = find(&root, path) else {
        eprintln!(
            "lowlat man: no page for `lowlat {}`; pages: {} (see `lowlat man --help`)",
            path.join(" "),
            page_names(&root).join(", ")
        );
        return ExitCode::from(2);
    };
    match render(&root, path, cmd).and_then(|text| std::io::stdout().write_all(&text)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lowlat man: {e}");
            ExitCode::from(1)
        }
    }
}

/// The command tree as the pages show it: built (so each subcommand knows its page name,
/// `lowlat-load`), without clap's `help` subcommand, which has no page of its own.
fn prepared(cli: Command) -> Command {
    let mut root = cli.disable_help_subcommand(true);
    root.build();
    root
}

/// The subcommand at `path` below `root`.
fn find<'a>(root: &'a Command, path: &[String]) -> Option<&'a Command> {
    path.iter().try_fold(root, |cmd, name| {
        visible(cmd).find(|c| c.get_name() == name)
    })
}

fn visible(cmd: &Command) -> impl Iterator<Item = &Command> {
    cmd.get_subcommands().filter(|c| !c.is_hide_set())
}

/// A page, its footer naming lowlat and its version (a subcommand has no version of its own).
fn page(root: &Command, cmd: &Command) -> clap_mangen::Man {
    let version = root.get_version().unwrap_or_default();
    clap_mangen::Man::new(cmd.clone()).source(format!("lowlat {version}"))
}

/// The roff of the page of `words`: clap_mangen's rendering, then the guides' SEE ALSO section.
fn render(root: &Command, words: &[String], cmd: &Command) -> std::io::Result<Vec<u8>> {
    let mut text = Vec::new();
    page(root, cmd).render(&mut text)?;
    text.extend_from_slice(guides::see_also(words).as_bytes());
    Ok(text)
}

/// Every page with the words that name it (`["load", "merge"]`), the top one first, then each
/// command's in the order `--help` lists them.
fn all(cmd: &Command, words: Vec<String>) -> Vec<(Vec<String>, &Command)> {
    let mut out = vec![(words.clone(), cmd)];
    for sub in visible(cmd) {
        let mut path = words.clone();
        path.push(sub.get_name().to_owned());
        out.extend(all(sub, path));
    }
    out
}

/// The commands that have a page, as `lowlat man` takes them (`load merge`).
fn page_names(root: &Command) -> Vec<String> {
    all(root, Vec::new())
        .into_iter()
        .skip(1)
        .map(|(words, _)| words.join(" "))
        .collect()
}

/// Writes every page into `dir` (`lowlat.1`, `lowlat-serve.1`, …); returns their paths.
fn write_all(root: &Command, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    all(root, Vec::new())
        .into_iter()
        .map(|(words, cmd)| {
            let path = dir.join(page(root, cmd).get_filename());
            std::fs::write(&path, render(root, &words, cmd)?)?;
            Ok(path)
        })
        .collect()
}
