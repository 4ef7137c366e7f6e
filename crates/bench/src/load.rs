//! The boundary between the sweep and the load generator: what one measurement asks for
//! ([`LoadPlan`]) and what it brought back ([`LoadOutcome`]). The runner sees only the
//! [`LoadDriver`] trait, so it can be tested against any engine; [`Engine`] drives
//! `lowlat load`'s engine in-process.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use hdrhistogram::Histogram;

/// One measurement's load.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Full URL: target base + scenario path.
    pub url: String,
    pub threads: usize,
    pub connections: usize,
    pub duration: Duration,
    pub pipeline: u32,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub timeout: Duration,
    pub keepalive: bool,
    pub pin_cpus: Vec<usize>,
    /// For `https://`: verification and resumption.
    pub tls: lowlat_load::TlsOptions,
    /// Speak HTTP/2; `pipeline` is then the streams in flight per connection.
    pub h2: bool,
    /// Speak HTTP/3 over QUIC; `pipeline` is then the streams in flight per connection.
    pub h3: bool,
}

/// What one measurement brought back.
#[derive(Debug, Clone)]
pub struct LoadOutcome {
    /// Complete responses received while measuring.
    pub responses: u64,
    /// Measured wall time.
    pub elapsed: Duration,
    /// Response bytes received.
    pub bytes: u64,
    /// Latency of each response, in microseconds.
    pub latency_us: Histogram<u64>,
    /// Responses by status class: index 0 = 1xx … 4 = 5xx.
    pub status_classes: [u64; 5],
    /// Failed requests by kind (connect, read, write, timeout, parse …).
    pub errors: BTreeMap<String, u64>,
    /// CPU time the loader's threads used (user + system).
    pub client_cpu: Duration,
    /// For `https://`: the protocol and cipher suite negotiated (`TLSv1.3 TLS13_AES_128_GCM_SHA256`).
    pub tls: Option<String>,
}

impl LoadOutcome {
    /// Responses per second.
    #[must_use]
    pub fn rps(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.responses as f64 / s
        } else {
            0.0
        }
    }

    /// Errors of every kind, plus responses that were not 2xx or 3xx.
    #[must_use]
    pub fn error_total(&self) -> u64 {
        self.errors.values().sum::<u64>()
            + self.status_classes[0]
            + self.status_classes[3]
            + self.status_classes[4]
    }
}

/// A load generator the runner can drive.
pub trait LoadDriver: Send + Sync {
    /// Runs `plan` until its duration ends or `stop` becomes true.
    ///
    /// # Errors
    /// A message when the run could not start or complete (not per-request failures: those
    /// are counted in the outcome).
    fn run(&self, plan: &LoadPlan, stop: &AtomicBool) -> Result<LoadOutcome, String>;
}

/// `lowlat load`'s engine, run in this process.
#[derive(Debug, Default, Clone, Copy)]
pub struct Engine;

impl LoadDriver for Engine {
    fn run(&self, plan: &LoadPlan, stop: &AtomicBool) -> Result<LoadOutcome, String> {
        let cfg = lowlat_load::LoadConfig {
            targets: vec![lowlat_load::Target::new(plan.url.clone())],
            threads: plan.threads,
            connections: plan.connections,
            duration: Some(plan.duration),
            pipeline: plan.pipeline,
            method: plan.method.clone(),
            headers: plan.headers.clone(),
            body: plan.body.clone(),
            timeout: plan.timeout,
            keep_alive: plan.keepalive,
            pin_cpus: plan.pin_cpus.clone(),
            tls: plan.tls.clone(),
            h2: plan.h2,
            h3: plan.h3,
            ..lowlat_load::LoadConfig::default()
        };
        let r = lowlat_load::run(&cfg, stop).map_err(|e| e.to_string())?;
        let e = &r.errors;
        let errors: BTreeMap<String, u64> = [
            ("connect", e.connect),
            ("read", e.read),
            ("write", e.write),
            ("timeout", e.timeout),
            ("protocol", e.protocol),
            ("tls", e.tls),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| (k.to_string(), n))
        .collect();
        let s = &r.status;
        Ok(LoadOutcome {
            responses: r.responses,
            elapsed: r.elapsed,
            bytes: r.bytes_read,
            status_classes: [
                s.informational,
                s.success,
                s.redirection,
                s.client_error,
                s.server_error,
            ],
            errors,
            client_cpu: r.cpu_user + r.cpu_system,
            latency_us: r.latency,
            tls: r.tls.map(|t| format!("{} {}", t.protocol, t.cipher)),
        })
    }
}
