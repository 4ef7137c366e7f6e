//! From a [`LoadConfig`] to a [`Plan`] the threads can run, and the checks made before a run
//! starts: option values (`validate`), URLs parsed and grouped by host, names resolved, the
//! request bytes built (`request`), the TLS client configuration made, connections and request
//! budgets shared among hosts and threads; then the descriptor limit, and one connection to
//! each host.
//!
//! Everything that can refuse a configuration happens here, before any thread starts: the
//! engine is handed a plan and never looks back at the configuration.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::config::{LoadConfig, ScriptOptions, Target, DEFAULT_DURATION, MAX_PIPELINE};
use crate::error::LoadError;
use crate::plan::{ConnSpec, Group, H2Request, H3Plan, Plan, RequestBatch, ScriptPlan, WsPlan};
use crate::request::{
    build_h2_request, build_h3_request, build_request, build_ws_handshake, is_head, weighted_cycle,
};
use crate::url::{parse_url, Url};
use crate::validate::validate;
use crate::{script, sys, tls};

/// The plan for `cfg`, once everything checked before a run has passed: the plan itself, the
/// descriptor limit for its connections, and one connection to each host; then a script's
/// `setup()` and `init()`, which see a target known to answer.
pub(crate) fn checked(cfg: &LoadConfig) -> Result<Plan, LoadError> {
    let mut plan = plan(cfg)?;
    check_fd_limit(cfg.connections)?;
    if plan.h3.is_none() {
        // QUIC has no connection to probe short of a handshake: an --h3 run counts failed
        // handshakes and says why (`ErrorCounts::tls`, `Report::tls_error`).
        check_reachable(&plan)?;
    }
    if let Some(script) = &cfg.script {
        plan.script = Some(script_plan(cfg, script, &mut plan)?);
    }
    Ok(plan)
}

/// Starts the script (`script::start`) and gives each thread its group: the address `setup()`
/// chose, and without `request()` the requests `init()` left in the `wrk` table, laid out like
/// the command line's. The depth becomes `--pipeline` batches of the first `request()`'s size.
fn script_plan(
    cfg: &LoadConfig,
    options: &ScriptOptions,
    plan: &mut Plan,
) -> Result<ScriptPlan, LoadError> {
    let url = parse_url(&cfg.targets[0].url)?;
    let group = &plan.groups[0];
    let default_port = if url.tls { 443 } else { 80 };
    let started = script::start(&script::Inputs {
        file: &options.path,
        args: &options.args,
        target: script::Target {
            url: &cfg.targets[0].url,
            scheme: if url.tls { "https" } else { "http" },
            host: url.host.trim_start_matches('[').trim_end_matches(']'),
            port: (url.port != default_port).then_some(url.port),
            path: &url.target,
            addr: group.addr,
        },
        method: &cfg.method,
        body: cfg.body.as_deref(),
        headers: &cfg.headers,
        threads: cfg.threads,
    })?;
    if started.delay && cfg.rate.is_some() {
        return Err(LoadError::Config(
            "the script's delay() and -R both decide when requests are sent: use one".into(),
        ));
    }
    let depth = cfg.pipeline as usize * started.per_call.max(1);
    if depth > MAX_PIPELINE as usize {
        return Err(LoadError::Config(format!(
            "--pipeline {} batches of the script's {} requests are more than {MAX_PIPELINE} in flight",
            cfg.pipeline, started.per_call
        )));
    }
    plan.pipeline = u32::try_from(depth).unwrap_or(MAX_PIPELINE);
    let scheme = if url.tls { "https" } else { "http" };
    let mut groups = Vec::with_capacity(started.threads.len());
    for thread in &started.threads {
        let mut g = group.clone();
        g.addr = thread.addr;
        match &thread.requests {
            Some((bytes, split)) => {
                let head = split.all_head().ok_or_else(|| {
                    LoadError::Script(format!(
                        "{}: the request of the wrk table mixes HEAD with other methods",
                        options.path.display()
                    ))
                })?;
                let mut requests = Vec::with_capacity(split.len());
                let mut start = 0;
                for &end in &split.ends {
                    requests.push(bytes[start..end].to_vec());
                    start = end;
                }
                let cycle: Vec<usize> = (0..requests.len()).collect();
                g.requests = RequestBatch::new(&requests, &cycle, depth, head);
                if cfg.h2 {
                    g.h2_requests.clear();
                    script::wire::to_h2(bytes, split, scheme, |(fields, body)| {
                        g.h2_requests.push(H2Request { fields, body });
                    });
                    g.h2_cycle = cycle;
                }
            }
            None => {
                g.h2_requests.clear();
                g.h2_cycle.clear();
            }
        }
        groups.push(g);
    }
    Ok(ScriptPlan {
        script: started.script,
        groups,
        dynamic: started.dynamic,
        per_call: started.per_call.max(1),
        delay: started.delay,
        response: started.response,
        scheme,
    })
}

impl LoadConfig {
    /// Checks everything [`crate::run`] checks before loading: option values, URLs, name
    /// resolution, that the process may open that many connections, and one connection to each
    /// host. Lets a caller report bad input before printing anything else.
    ///
    /// # Errors
    /// The [`LoadError`] that [`crate::run`] would return before starting.
    pub fn check(&self) -> Result<(), LoadError> {
        checked(self).map(drop)
    }
}

/// Validates `cfg`, resolves its hosts and builds the request bytes.
fn plan(cfg: &LoadConfig) -> Result<Plan, LoadError> {
    validate(cfg)?;
    let mut groups: Vec<(Url, Vec<(Url, u32)>)> = Vec::new();
    for Target { url, weight } in &cfg.targets {
        // With --ws, ws:// and wss:// are http:// and https:// (RFC 6455 §3).
        let ws_url = cfg.ws.and_then(|_| {
            let (scheme, rest) = url.split_once("://")?;
            match scheme.to_ascii_lowercase().as_str() {
                "ws" => Some(format!("http://{rest}")),
                "wss" => Some(format!("https://{rest}")),
                _ => None,
            }
        });
        let parsed = parse_url(ws_url.as_deref().unwrap_or(url))?;
        match groups.iter_mut().find(|(g, _)| {
            g.host.eq_ignore_ascii_case(&parsed.host)
                && g.port == parsed.port
                && g.tls == parsed.tls
        }) {
            Some((_, members)) => members.push((parsed, *weight)),
            None => groups.push((parsed.clone(), vec![(parsed, *weight)])),
        }
    }
    if cfg.connections < groups.len() {
        return Err(LoadError::Config(format!(
            "{} connections cannot reach {} hosts: need at least one each",
            cfg.connections,
            groups.len()
        )));
    }
    let mut built = Vec::with_capacity(groups.len());
    let mut ws_handshakes = Vec::new();
    let mut weights = Vec::with_capacity(groups.len());
    for (first, members) in &groups {
        let addr = resolve(first)?;
        let cycle = weighted_cycle(members.iter().map(|(_, w)| *w))?;
        let requests: Vec<Vec<u8>> = members
            .iter()
            .map(|(u, _)| build_request(cfg, u))
            .collect::<Result<_, _>>()?;
        let tls = if first.tls {
            Some(
                tls::server_name(&first.host).map_err(|reason| LoadError::BadUrl {
                    url: cfg.targets[0].url.clone(),
                    reason: format!("{} is not a TLS server name: {reason}", first.host),
                })?,
            )
        } else {
            None
        };
        let h2_requests = if cfg.h2 || cfg.h3 {
            members
                .iter()
                .map(|(u, _)| build_h2_request(cfg, u))
                .collect()
        } else {
            Vec::new()
        };
        if cfg.ws.is_some() {
            ws_handshakes.push(build_ws_handshake(cfg, first));
        }
        built.push(Group {
            addr,
            authority: first.authority(),
            requests: RequestBatch::new(&requests, &cycle, cfg.pipeline as usize, is_head(cfg)),
            tls,
            h3_requests: if cfg.h3 {
                h2_requests.iter().map(build_h3_request).collect()
            } else {
                Vec::new()
            },
            h2_requests: if cfg.h2 { h2_requests } else { Vec::new() },
            h2_cycle: if cfg.h2 || cfg.h3 {
                cycle.clone()
            } else {
                Vec::new()
            },
        });
        weights.push(members.iter().map(|(_, w)| u64::from(*w)).sum::<u64>());
    }
    let per_group = share(cfg.connections as u64, &weights);
    // Interleave hosts so that every thread gets a fair mix of them.
    let mut order = Vec::with_capacity(cfg.connections);
    let mut left = per_group.clone();
    while order.len() < cfg.connections {
        for (g, n) in left.iter_mut().enumerate() {
            if *n > 0 {
                *n -= 1;
                order.push(g);
            }
        }
    }
    let mut threads = vec![Vec::new(); cfg.threads];
    for (global, group) in order.into_iter().enumerate() {
        threads[global % cfg.threads].push(ConnSpec { global, group });
    }
    let budgets = match cfg.requests {
        None => vec![None; cfg.threads],
        Some(n) => share(n, &vec![1; cfg.threads])
            .into_iter()
            .map(Some)
            .collect(),
    };
    let duration = match (cfg.duration, cfg.requests) {
        (None, None) => Some(DEFAULT_DURATION),
        (d, _) => d,
    };
    let conn_interval = cfg
        .rate
        .map(|r| Duration::from_secs_f64(cfg.connections as f64 / r));
    let h3 = if cfg.h3 {
        // 0-RTT requests can be replayed by an attacker (RFC 9114 §10.9): only safe methods.
        let early_data = matches!(cfg.method.as_str(), "GET" | "HEAD");
        Some(H3Plan {
            client: tls::h3_client_config(&cfg.tls, early_data)?,
            early_data,
        })
    } else {
        None
    };
    let tls = if !cfg.h3 && built.iter().any(|g| g.tls.is_some()) {
        Some(tls::client_config(&cfg.tls, cfg.h2)?)
    } else {
        None
    };
    Ok(Plan {
        tls,
        uncorrected: cfg.uncorrected_latency && cfg.rate.is_some(),
        h2: cfg.h2,
        h3,
        groups: built,
        threads,
        budgets,
        requests: cfg.requests,
        connections: cfg.connections,
        pipeline: cfg.pipeline,
        conn_interval,
        duration,
        warmup: cfg.warmup,
        timeout: cfg.timeout,
        keep_alive: cfg.keep_alive,
        pin_cpus: cfg.pin_cpus.clone(),
        latency_intervals: cfg.latency_intervals,
        script: None,
        ws: cfg.ws.map(|w| WsPlan {
            handshakes: ws_handshakes,
            message_size: w.message_size,
        }),
    })
}

/// Descriptors a run needs besides its connections: per thread an epoll instance and a timer,
/// plus the process's own (stdio, the progress line, files being written).
const SPARE_FDS: u64 = 64;

/// Refuses, before anything starts, a connection count the process cannot open (raising the
/// soft descriptor limit to the hard one first): otherwise every connection past the limit
/// fails to connect for the whole run, and the report is only connect errors.
fn check_fd_limit(connections: usize) -> Result<(), LoadError> {
    let limit = sys::raise_fd_limit();
    let need = connections as u64 + SPARE_FDS;
    if need > limit {
        return Err(LoadError::Resources(format!(
            "{connections} connections need about {need} open files, but this process may open \
             {limit} (raise it with `ulimit -n`, or use fewer connections)"
        )));
    }
    Ok(())
}

/// Opens and closes one connection to each host, so that an unreachable target is one clear
/// error before the run rather than a run full of connect errors.
fn check_reachable(plan: &Plan) -> Result<(), LoadError> {
    let wait = plan.timeout.min(Duration::from_secs(5));
    for g in &plan.groups {
        TcpStream::connect_timeout(&g.addr, wait).map_err(|source| LoadError::Connect {
            addr: g.authority.clone(),
            source,
        })?;
    }
    Ok(())
}

fn resolve(url: &Url) -> Result<SocketAddr, LoadError> {
    let host = url.host.trim_start_matches('[').trim_end_matches(']');
    let mut addrs = (host, url.port)
        .to_socket_addrs()
        .map_err(|source| LoadError::Resolve {
            host: url.host.clone(),
            source,
        })?;
    addrs.next().ok_or_else(|| LoadError::Resolve {
        host: url.host.clone(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
    })
}

/// Splits `total` in proportion to `weights` (largest remainder); when `total` allows, every
/// share is at least 1 (taken from the largest share).
fn share(total: u64, weights: &[u64]) -> Vec<u64> {
    let sum = u128::from(weights.iter().sum::<u64>().max(1));
    let exact = |i: usize| u128::from(total) * u128::from(weights[i]);
    let mut out: Vec<u64> = (0..weights.len())
        .map(|i| u64::try_from(exact(i) / sum).unwrap_or(u64::MAX))
        .collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(exact(i) % sum));
    let mut rest = total.saturating_sub(out.iter().sum::<u64>());
    for &i in order.iter().cycle().take(weights.len() * 2) {
        if rest == 0 {
            break;
        }
        out[i] += 1;
        rest -= 1;
    }
    if total >= weights.len() as u64 {
        while let Some(zero) = out.iter().position(|&n| n == 0) {
            let (largest, _) = out
                .iter()
                .enumerate()
                .max_by_key(|&(i, n)| (*n, std::cmp::Reverse(i)))
                .unwrap_or((zero, &0));
            out[largest] -= 1;
            out[zero] += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares() {
        assert_eq!(share(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(share(3, &[100, 1, 1]), vec![1, 1, 1]);
        assert_eq!(share(4, &[3, 1]), vec![3, 1]);
        assert_eq!(share(0, &[1, 1]), vec![0, 0]);
        assert_eq!(share(1, &[1, 1]), vec![1, 0]);
    }

    #[test]
    fn connections_spread_over_threads_and_hosts() {
        let cfg = LoadConfig {
            targets: vec![
                Target::new("http://127.0.0.1:1/a"),
                Target::new("http://127.0.0.1:2/b"),
                Target::new("http://127.0.0.1:1/c"),
            ],
            threads: 2,
            connections: 7,
            requests: Some(11),
            ..LoadConfig::default()
        };
        let plan = plan(&cfg).unwrap();
        assert_eq!(plan.groups.len(), 2);
        assert_eq!(plan.threads[0].len(), 4);
        assert_eq!(plan.threads[1].len(), 3);
        let to_first = plan
            .threads
            .iter()
            .flatten()
            .filter(|c| c.group == 0)
            .count();
        assert_eq!(to_first, 5); // weight 2 of 3, rounded: 4.67 -> 5
        assert_eq!(plan.budgets, vec![Some(6), Some(5)]);
    }
}
