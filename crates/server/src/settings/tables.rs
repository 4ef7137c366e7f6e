//! One reader of the repeated tables of a config file (`[[site]]`, `[[upstream]]`): each table
//! found and told apart (`site[2]`), its problems named with the line of the key they are about,
//! and its own keys turned into the flags they stand for — checked by each flag's own parser,
//! with the file's top-level settings it may inherit beneath them ([`TableKeys`]). What a kind
//! of table reads by hand (a site's names, an upstream's servers) stays with its reader in
//! `file.rs`; the scaffolding around it is here once.
//!
//! Also the small readers of a file's text both use: which line sets a key, the tokens a key
//! stands for, and a parser error's first line.

use clap::Command;

/// One table of a kind being read: where it starts, and how its problems are worded.
pub(super) struct Located<'a> {
    text: &'a str,
    shown: &'a str,
    /// `site`, `upstream`.
    kind: &'a str,
    /// Its index among the tables of its kind.
    pub(super) i: usize,
    /// The line of its header.
    pub(super) start: usize,
}

impl Located<'_> {
    /// `FILE:LINE: kind[i].key: reason`, at the line that sets `key` (the header's if none does).
    pub(super) fn at(&self, key: &str, reason: &str) -> String {
        let line = line_in_table(self.text, self.start, key);
        format!(
            "{}:{line}: {}[{}].{key}: {reason}",
            self.shown, self.kind, self.i
        )
    }

    /// `FILE:LINE: kind[i].key: reason`, at the header: for a key that is missing.
    pub(super) fn missing(&self, key: &str, reason: &str) -> String {
        let (shown, start, kind, i) = (self.shown, self.start, self.kind, self.i);
        format!("{shown}:{start}: {kind}[{i}].{key}: missing: {reason}")
    }

    /// `FILE:LINE: kind[i]: reason`, at the header: about the table as a whole.
    pub(super) fn whole(&self, reason: &str) -> String {
        let (shown, start, kind, i) = (self.shown, self.start, self.kind, self.i);
        format!("{shown}:{start}: {kind}[{i}]: {reason}")
    }
}

/// Calls `each` for every table of `value` (the file's `kind` key, which must be an array of
/// tables: `[[kind]]`), with where it is. What is not a table is told in `errors` and skipped.
pub(super) fn each_table<'v>(
    text: &str,
    shown: &str,
    kind: &str,
    value: &'v toml::Value,
    errors: &mut Vec<String>,
    mut each: impl FnMut(&Located<'_>, &'v toml::Table, &mut Vec<String>),
) {
    let header = format!("[[{kind}]]");
    let toml::Value::Array(tables) = value else {
        let line = line_of(text, &header).max(1);
        errors.push(format!("{shown}:{line}: {kind}: must be {header} tables"));
        return;
    };
    for (i, t) in tables.iter().enumerate() {
        let located = Located {
            text,
            shown,
            kind,
            i,
            start: nth_table_line(text, &header, i),
        };
        match t.as_table() {
            Some(t) => each(&located, t, errors),
            None => errors.push(located.whole("must be a table")),
        }
    }
}

/// The line of the `i`-th `header` (`[[site]]`, `[[upstream]]`).
pub(super) fn nth_table_line(text: &str, header: &str, i: usize) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.trim() == header)
        .nth(i)
        .map_or(0, |(n, _)| n + 1)
}

/// What a kind of table (`[[site]]`, `[[upstream]]`) takes as flags, and how it is told.
pub(super) struct TableKeys<'a> {
    /// Keys the caller reads itself.
    pub(super) skip: &'a [&'a str],
    /// Put before a key (its `_` as `-`) to name its flag: `proxy-` for an upstream's `balance`.
    pub(super) prefix: &'a str,
    /// The flags a table may set, or inherit from the top level.
    pub(super) allowed: &'a [String],
    /// The command whose parsers check each flag.
    pub(super) cmd: &'a dyn Fn() -> Command,
    /// What an unknown key is told.
    pub(super) unknown: &'a str,
}

impl TableKeys<'_> {
    /// The command line of table `t`: the top-level settings it may inherit and does not set
    /// itself, then its own keys. Every key refused (unknown, or a value its flag's parser
    /// refuses) is pushed to `errors` as `at` words it; then `None`.
    pub(super) fn argv(
        &self,
        t: &toml::Table,
        top: &[(String, Vec<String>)],
        at: &dyn Fn(&str, &str) -> String,
        errors: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        let mut own: Vec<(String, Vec<String>)> = Vec::new();
        let mut bad = false;
        for (key, value) in t {
            if self.skip.contains(&key.as_str()) {
                continue;
            }
            let flag = format!("{}{}", self.prefix, key.replace('_', "-"));
            if !self.allowed.contains(&flag) {
                errors.push(at(key, self.unknown));
                bad = true;
                continue;
            }
            match checked_tokens(self.cmd, &flag, value) {
                Ok(tokens) => own.push((flag, tokens)),
                Err(reason) => {
                    errors.push(at(key, &reason));
                    bad = true;
                }
            }
        }
        if bad {
            return None;
        }
        let mut argv: Vec<String> = top
            .iter()
            .filter(|(f, _)| self.allowed.contains(f) && !own.iter().any(|(o, _)| o == f))
            .flat_map(|(_, t)| t.iter().cloned())
            .collect();
        argv.extend(own.into_iter().flat_map(|(_, t)| t));
        Some(argv)
    }
}

/// The line on which `key` is set within the table starting at line `start`.
pub(super) fn line_in_table(text: &str, start: usize, key: &str) -> usize {
    text.lines()
        .enumerate()
        .skip(start)
        .take_while(|(_, l)| !l.trim_start().starts_with('['))
        .find(|(_, l)| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map_or(start, |(n, _)| n + 1)
}

/// The tokens one key of a table stands for, checked by its flag's own parser in `cmd`.
fn checked_tokens(
    cmd: impl Fn() -> Command,
    flag: &str,
    value: &toml::Value,
) -> Result<Vec<String>, String> {
    let mut built = cmd();
    built.build();
    let takes_value = built
        .get_arguments()
        .find(|a| a.get_long() == Some(flag))
        .and_then(clap::Arg::get_num_args)
        .is_some_and(|n| n.takes_values());
    let tokens = tokens_of(flag, value, takes_value)?;
    cmd()
        .try_get_matches_from(&tokens)
        .map_err(|e| first_line(&e))?;
    Ok(tokens)
}

/// The command-line tokens one key stands for.
pub(super) fn tokens_of(
    flag: &str,
    value: &toml::Value,
    takes_value: bool,
) -> Result<Vec<String>, String> {
    let scalar = |v: &toml::Value| -> Result<String, String> {
        match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            // A listen address with its parameters: `{ address = ":80", proxy_protocol = true }`
            // is the flag's `":80 proxy_protocol"`.
            toml::Value::Table(t) if flag.ends_with("listen") => listen_table(t),
            _ => Err("must be a string or a number".into()),
        }
    };
    let long = format!("--{flag}");
    match (value, takes_value) {
        (toml::Value::Boolean(true), false) => Ok(vec![long]),
        (toml::Value::Boolean(false), false) => Ok(Vec::new()),
        (_, false) => Err("is a switch: true or false".into()),
        (toml::Value::Array(items), true) => {
            let mut out = Vec::new();
            for item in items {
                out.push(long.clone());
                out.push(scalar(item)?);
            }
            Ok(out)
        }
        (v, true) => Ok(vec![long, scalar(v)?]),
    }
}

/// A `{ address, proxy_protocol }` listen table as its flag's value.
fn listen_table(t: &toml::Table) -> Result<String, String> {
    let Some(toml::Value::String(address)) = t.get("address") else {
        return Err("a listen table needs address = \"ADDR:PORT\"".into());
    };
    let mut value = address.clone();
    for (key, v) in t {
        match (key.as_str(), v) {
            ("address", _) => {}
            ("proxy_protocol", toml::Value::Boolean(on)) => {
                if *on {
                    value.push_str(" proxy_protocol");
                }
            }
            ("proxy_protocol", _) => return Err("proxy_protocol is a switch: true or false".into()),
            (other, _) => {
                return Err(format!(
                    "{other:?} is not a listen parameter (address, proxy_protocol)"
                ))
            }
        }
    }
    Ok(value)
}

pub(super) fn first_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("invalid value");
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

/// The line on which `key` is set (the first `key =` at the start of a line).
pub(super) fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(0, |i| i + 1)
}
