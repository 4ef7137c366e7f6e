//! The small text forms a spec's values take: a URL or an address to check, a duration
//! (`10s`), a CPU list (`0-3,8`), and `${…}` references expanded against the run's variables.

use std::collections::BTreeMap;
use std::time::Duration;

/// A target's base URL: `http://` or `https://`, a host, and no path.
pub(super) fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("must start with http:// or https://")?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() {
        return Err("has no host".into());
    }
    if rest.contains('/')
        && !rest.ends_with('/')
        && rest.split_once('/').is_some_and(|(_, p)| !p.is_empty())
    {
        return Err("must be a base URL without a path; the scenario gives the path".into());
    }
    Ok(())
}

/// A service's address: `host:port`, the port a number (`127.0.0.1:8078`, `[::1]:8078`,
/// `localhost:8078`).
///
/// # Errors
/// What is wrong with it, in words.
pub fn check_addr(addr: &str) -> Result<(), String> {
    let bad = || format!("{addr:?} is not host:port (such as 127.0.0.1:8078)");
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || host.contains(['/', ' ']) || port.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(bad());
    }
    Ok(())
}

/// Parses a duration the way every lowlat command line does
/// ([`lowlat_http::units::parse_duration`]: `10s`, `500ms`, `250us`, `1.5s`, `2m`; a bare number
/// is seconds).
#[must_use]
pub fn parse_duration(text: &str) -> Option<Duration> {
    lowlat_http::units::parse_duration(text).ok()
}

/// Parses a CPU list as taskset and /proc write it: `"0-3,6"`.
#[must_use]
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Expands `${name}`, `${name:-default}` in `text`: `vars` first, then the environment. A
/// default may itself use `${…}` (`${CEILING:-${HOME}/.cache/ceiling}`), expanded only when
/// it is used.
///
/// # Errors
/// The name of the first variable that is neither defined nor given a default.
pub fn expand(text: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    expand_within(text, vars, 0)
}

/// How deep variables may refer to variables (`ceiling = "${anchors}/ceiling"`, `anchors =
/// "${HOME}/…"`): far more than a spec needs, few enough to stop a circle at once.
const MAX_NESTING: usize = 16;

fn expand_within(
    text: &str,
    vars: &BTreeMap<String, String>,
    depth: usize,
) -> Result<String, String> {
    if depth > MAX_NESTING {
        return Err(format!(
            "{text:?}: variables refer to each other in a circle (or more than {MAX_NESTING} deep)"
        ));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = closing_brace(after) else {
            return Err(format!("unclosed ${{ in {text:?}"));
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        let value = match vars
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok().filter(|v| !v.is_empty()))
        {
            Some(v) => Some(v),
            None => default
                .map(|d| expand_within(d, vars, depth + 1))
                .transpose()?,
        };
        match value {
            // A var may refer to the builtins (`www = "${run_dir}/www"`) and to other vars.
            Some(v) if v.contains("${") => out.push_str(&expand_within(&v, vars, depth + 1)?),
            Some(v) => out.push_str(&v),
            None => {
                return Err(format!(
                    "${{{name}}} is not defined (not in [vars], not in the environment)"
                ))
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Where the `}` that closes a `${` ends, in the text after the `${`: the first `}` not
/// closing a `${` nested in a default.
fn closing_brace(after: &str) -> Option<usize> {
    let mut depth = 0usize;
    let bytes = after.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'{' if i > 0 && bytes[i - 1] == b'$' => depth += 1,
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (t, ms) in [
            ("10s", 10_000),
            ("500ms", 500),
            ("2m", 120_000),
            ("1.5s", 1500),
            (" 3s ", 3000),
        ] {
            assert_eq!(parse_duration(t), Some(Duration::from_millis(ms)), "{t}");
        }
        assert_eq!(parse_duration("10"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("250us"), Some(Duration::from_micros(250)));
        for t in ["", "s", "10 parsecs", "-1s", "1e400s"] {
            assert_eq!(parse_duration(t), None, "{t}");
        }
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn expansion() {
        let vars: BTreeMap<String, String> = [
            ("run_dir".to_string(), "/r".to_string()),
            ("www".to_string(), "${run_dir}/www".to_string()),
        ]
        .into();
        assert_eq!(expand("${www}/x", &vars).unwrap(), "/r/www/x");
        assert_eq!(
            expand("${LOWLAT_BENCH_SURELY_UNSET:-dflt}", &vars).unwrap(),
            "dflt"
        );
        assert!(expand("${LOWLAT_BENCH_SURELY_UNSET}", &vars)
            .unwrap_err()
            .contains("not defined"));
        assert!(expand("${oops", &vars).is_err());
        // A default may use variables itself, expanded only when it is used.
        assert_eq!(
            expand("${LOWLAT_BENCH_SURELY_UNSET:-${run_dir}/c}/x", &vars).unwrap(),
            "/r/c/x"
        );
        assert_eq!(
            expand(
                "${LOWLAT_BENCH_SURELY_UNSET:-${LOWLAT_BENCH_ALSO_UNSET:-${www}}}",
                &vars
            )
            .unwrap(),
            "/r/www"
        );
        assert_eq!(
            expand("${www:-${LOWLAT_BENCH_SURELY_UNSET}}", &vars).unwrap(),
            "/r/www",
            "an unused default is not expanded"
        );
        assert!(expand("${LOWLAT_BENCH_SURELY_UNSET:-${run_dir}", &vars).is_err());
        // A var named like the start of another is not taken for a reference to itself.
        let mut vars = vars;
        vars.insert("up_addr".into(), "127.0.0.1:${up_port}".into());
        vars.insert("up_port".into(), "8078".into());
        vars.insert("up".into(), "${up_addr}".into());
        assert_eq!(
            expand("http://${up}/", &vars).unwrap(),
            "http://127.0.0.1:8078/"
        );
        // A circle is an error, not a stack overflow.
        vars.insert("a".into(), "x${b}".into());
        vars.insert("b".into(), "${a}".into());
        assert!(expand("${a}", &vars).unwrap_err().contains("circle"));
    }
}
