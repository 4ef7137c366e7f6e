//! The option values of a `LoadConfig` checked against the limits and each other: counts in
//! range, durations that cannot overflow a deadline, a method and header fields that are
//! valid on the wire, CPUs that exist. Every failure is a [`LoadError::Config`] naming the value.
//!
//! No I/O: URLs are parsed in `url`, names resolved and files read in `prepare`.

use std::time::Duration;

use crate::config::{LoadConfig, MAX_CONNECTIONS, MAX_PIPELINE, MAX_THREADS};
use crate::error::LoadError;

/// Checks the option values of `cfg` against each other and the limits, before any name is
/// resolved or file read.
pub(crate) fn validate(cfg: &LoadConfig) -> Result<(), LoadError> {
    let err = |m: String| Err(LoadError::Config(m));
    if cfg.targets.is_empty() {
        return err("no URL given".into());
    }
    if cfg.targets.iter().any(|t| t.weight == 0) {
        return err("URL weights must be at least 1".into());
    }
    if cfg.h2 {
        if cfg.http10 || !cfg.keep_alive {
            return err("--h2 keeps connections open and speaks HTTP/2, not HTTP/1.0".into());
        }
        // Request bodies are sent without waiting for window: within the protocol's default.
        if cfg.body.as_ref().is_some_and(|b| b.len() > 65_535) {
            return err("with --h2 a request body can be at most 65535 bytes".into());
        }
    }
    if cfg.h3 {
        if cfg.h2 || cfg.http10 || !cfg.keep_alive || cfg.script.is_some() || cfg.ws.is_some() {
            return err(
                "--h3 speaks HTTP/3 over QUIC: not with --h2, --http1.0, --no-keepalive, -s or --ws"
                    .into(),
            );
        }
        if let Some(t) = cfg.targets.iter().find(|t| {
            !t.url
                .trim()
                .get(..8)
                .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        }) {
            return err(format!(
                "--h3 needs https:// URLs (HTTP/3 runs over QUIC, which is always encrypted), not {}",
                t.url
            ));
        }
        // Request bodies are written at once, within the stream's initial flow-control window.
        if cfg.body.as_ref().is_some_and(|b| b.len() > 65_535) {
            return err("with --h3 a request body can be at most 65535 bytes".into());
        }
    }
    if let Some(ws) = cfg.ws {
        if cfg.targets.len() > 1 {
            return err("--ws runs against one URL".into());
        }
        if cfg.h2 || cfg.script.is_some() || cfg.http10 || !cfg.keep_alive {
            return err(
                "--ws speaks WebSocket over HTTP/1.1: not with --h2, -s, --http1.0 or --no-keepalive"
                    .into(),
            );
        }
        if cfg.method != "GET" || cfg.body.is_some() {
            return err("--ws opens with a GET without a body (RFC 6455 §4.1)".into());
        }
        if ws.message_size > crate::config::MAX_WS_MESSAGE {
            return err(format!(
                "--ws-message-size must be at most {} bytes, not {}",
                crate::config::MAX_WS_MESSAGE,
                ws.message_size
            ));
        }
    }
    if cfg.script.is_some() {
        if cfg.targets.len() > 1 {
            return err("a script runs against one URL, as in wrk".into());
        }
        if cfg.http10 {
            return err(
                "with a script, its requests say their HTTP version; --http1.0 does not apply"
                    .into(),
            );
        }
    }
    if cfg.threads == 0 || cfg.threads > MAX_THREADS {
        return err(format!(
            "threads must be from 1 to {MAX_THREADS}, not {}",
            cfg.threads
        ));
    }
    if cfg.connections == 0 || cfg.connections > MAX_CONNECTIONS {
        return err(format!(
            "connections must be from 1 to {MAX_CONNECTIONS}, not {}",
            cfg.connections
        ));
    }
    if cfg.connections < cfg.threads {
        return err(format!(
            "connections ({}) must be at least threads ({})",
            cfg.connections, cfg.threads
        ));
    }
    if cfg.pipeline == 0 || cfg.pipeline > MAX_PIPELINE {
        return err(format!(
            "pipeline must be from 1 to {MAX_PIPELINE}, not {}",
            cfg.pipeline
        ));
    }
    if cfg.pipeline > 1 && !cfg.keep_alive {
        return err("pipelining needs keep-alive connections".into());
    }
    if let Some(r) = cfg.rate {
        // Below 0.001/s one connection's interval would overflow a Duration soon enough.
        if !(r.is_finite() && (0.001..=1e9).contains(&r)) {
            return err(format!(
                "rate must be between 0.001 and 1G requests/s, not {r}"
            ));
        }
    }
    // Code callers can pass any Duration; deadlines are `Instant + duration` and must not
    // overflow.
    let century = Duration::from_secs(100 * 365 * 86_400);
    for (name, d) in [
        ("duration", cfg.duration.unwrap_or(Duration::ZERO)),
        ("warmup", cfg.warmup),
        ("timeout", cfg.timeout),
        (
            "latency interval",
            cfg.latency_intervals.unwrap_or(Duration::ZERO),
        ),
    ] {
        if d > century {
            return err(format!("{name} is too long"));
        }
    }
    if cfg.requests == Some(0) {
        return err("request count must be at least 1".into());
    }
    if cfg.duration == Some(Duration::ZERO) {
        return err("duration must be above 0".into());
    }
    if cfg
        .latency_intervals
        .is_some_and(|i| i < Duration::from_millis(1))
    {
        return err("latency intervals must be at least 1 ms".into());
    }
    if cfg.timeout.is_zero() {
        return err("timeout must be above 0".into());
    }
    // Checked here, before any banner, rather than when a thread fails to pin itself.
    let cpus = crate::sys::cpus_configured();
    if let Some(&cpu) = cfg.pin_cpus.iter().find(|&&c| c >= cpus) {
        return err(format!(
            "cannot pin to CPU {cpu}: this machine has CPUs 0–{}",
            cpus - 1
        ));
    }
    if cfg.method.is_empty() || !cfg.method.bytes().all(is_tchar) {
        return err(format!("invalid method {:?}", cfg.method));
    }
    for (name, value) in &cfg.headers {
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return err(format!("invalid header name {name:?}"));
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return err(format!("invalid value for header {name}"));
        }
        if name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
        {
            return err(format!(
                "{name} is set from the body; use --body or --body-file instead"
            ));
        }
    }
    Ok(())
}

/// RFC 9110 §5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Target;

    #[test]
    fn bad_configs() {
        let base = || LoadConfig {
            targets: vec![Target::new("http://127.0.0.1:1/")],
            ..LoadConfig::default()
        };
        let cases: Vec<LoadConfig> = vec![
            LoadConfig {
                targets: vec![],
                ..base()
            },
            LoadConfig {
                threads: 0,
                ..base()
            },
            LoadConfig {
                connections: 0,
                ..base()
            },
            LoadConfig {
                threads: 4,
                connections: 2,
                ..base()
            },
            LoadConfig {
                pipeline: 0,
                ..base()
            },
            LoadConfig {
                pipeline: 2,
                keep_alive: false,
                ..base()
            },
            LoadConfig {
                rate: Some(0.0),
                ..base()
            },
            LoadConfig {
                rate: Some(f64::NAN),
                ..base()
            },
            LoadConfig {
                rate: Some(1e-300),
                ..base()
            },
            LoadConfig {
                duration: Some(Duration::MAX),
                ..base()
            },
            LoadConfig {
                warmup: Duration::MAX,
                ..base()
            },
            LoadConfig {
                timeout: Duration::MAX,
                ..base()
            },
            LoadConfig {
                latency_intervals: Some(Duration::ZERO),
                ..base()
            },
            LoadConfig {
                requests: Some(0),
                ..base()
            },
            LoadConfig {
                duration: Some(Duration::ZERO),
                ..base()
            },
            LoadConfig {
                timeout: Duration::ZERO,
                ..base()
            },
            LoadConfig {
                method: "G T".into(),
                ..base()
            },
            LoadConfig {
                headers: vec![("X".into(), "a\r\nb".into())],
                ..base()
            },
            LoadConfig {
                headers: vec![("Content-Length".into(), "1".into())],
                ..base()
            },
            LoadConfig {
                pin_cpus: vec![0, 1 << 20],
                ..base()
            },
            LoadConfig {
                targets: vec![Target::new("http://a/"), Target::new("http://b/")],
                script: Some(crate::config::ScriptOptions::default()),
                ..base()
            },
            LoadConfig {
                http10: true,
                script: Some(crate::config::ScriptOptions::default()),
                ..base()
            },
        ];
        for cfg in cases {
            assert!(
                matches!(validate(&cfg), Err(LoadError::Config(_))),
                "{cfg:?}"
            );
        }
    }
}
