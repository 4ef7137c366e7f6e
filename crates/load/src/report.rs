//! What a run measured: the per-thread `ThreadStats` each loader thread keeps to itself, and the
//! [`Report`] they are merged into at the end (oha's `result_data`, wrk's per-thread counters),
//! with what its TLS sessions negotiated ([`TlsSummary`]).
//!
//! Latency is an HdrHistogram of **microseconds** (1 µs to 1 h, 3 significant digits). Each
//! request's latency runs from its send to the end of its own response: in closed-loop mode the
//! send is the moment the loop decided to send it (the read that freed its slot, or the connect);
//! with `--pipeline` every request of a batch shares the batch's send time and ends at its own
//! response; in rate mode (`-R`) the send is the request's *scheduled* time, so a stalled server
//! is charged for every request it delayed (coordinated omission corrected, as in wrk2).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency the histogram holds (µs); larger values are recorded as this.
pub const MAX_LATENCY_US: u64 = 3_600_000_000;

/// An empty latency histogram: 1 µs to [`MAX_LATENCY_US`], 3 significant digits.
#[must_use]
pub fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
        .expect("constant bounds: low >= 1, high >= 2 * low, sigfig <= 5")
}

/// Failed requests, by what failed. A failure that ends a connection ends every request in flight
/// on it, and each counts once; a failed connect counts one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    /// The connection could not be opened (refused, unreachable, not established in time).
    pub connect: u64,
    /// Reading failed (reset), or the server closed with requests unanswered.
    pub read: u64,
    /// Writing a request failed (reset, broken pipe).
    pub write: u64,
    /// No response within the timeout.
    pub timeout: u64,
    /// A response that is not valid HTTP/1.x, or bytes nobody asked for.
    pub protocol: u64,
    /// A TLS handshake failed (certificate not trusted or for another name, an alert, a server
    /// that does not speak TLS) or did not finish in time; or a TLS record failed later.
    pub tls: u64,
}

impl ErrorCounts {
    /// All failures.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout + self.protocol + self.tls
    }

    fn add(&mut self, o: &Self) {
        self.connect += o.connect;
        self.read += o.read;
        self.write += o.write;
        self.timeout += o.timeout;
        self.protocol += o.protocol;
        self.tls += o.tls;
    }
}

/// Responses by status class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatusCounts {
    /// Final `1xx` responses cannot happen (interim ones are skipped); kept for completeness.
    #[serde(rename = "1xx")]
    pub informational: u64,
    #[serde(rename = "2xx")]
    pub success: u64,
    #[serde(rename = "3xx")]
    pub redirection: u64,
    #[serde(rename = "4xx")]
    pub client_error: u64,
    #[serde(rename = "5xx")]
    pub server_error: u64,
}

impl StatusCounts {
    /// Counts `n` responses of status `status` (100..=599).
    pub(crate) fn count_n(&mut self, status: u16, n: u64) {
        let class = match status / 100 {
            1 => &mut self.informational,
            2 => &mut self.success,
            3 => &mut self.redirection,
            4 => &mut self.client_error,
            _ => &mut self.server_error,
        };
        *class += n;
    }

    /// Responses that are not `2xx` or `3xx` (wrk's "Non-2xx or 3xx responses").
    #[must_use]
    pub fn not_ok(&self) -> u64 {
        self.informational + self.client_error + self.server_error
    }

    fn add(&mut self, o: &Self) {
        self.informational += o.informational;
        self.success += o.success;
        self.redirection += o.redirection;
        self.client_error += o.client_error;
        self.server_error += o.server_error;
    }
}

/// Responses by status code, as oha's "Status code distribution": a count per code, so that a
/// run of 200s with a few 503s says so. Codes are 100..=599 (what the response parsers let
/// through); anything else, such as an HTTP/2 response without a `:status`, counts as code 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCodes {
    /// Indexed by code; one table per thread (4.7 KiB), merged at the end.
    counts: Box<[u64]>,
}

/// Size of [`StatusCodes`]' table: codes 0..=599.
const STATUS_CODE_SLOTS: usize = 600;

impl Default for StatusCodes {
    fn default() -> Self {
        Self {
            counts: vec![0; STATUS_CODE_SLOTS].into_boxed_slice(),
        }
    }
}

impl StatusCodes {
    /// Responses with status `code`.
    #[must_use]
    pub fn get(&self, code: u16) -> u64 {
        self.counts.get(usize::from(code)).copied().unwrap_or(0)
    }

    /// The codes seen, in ascending order, with their counts.
    pub fn iter(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        (0u16..)
            .zip(self.counts.iter().copied())
            .filter(|&(_, n)| n > 0)
    }

    /// Counts `n` responses of status `code`.
    pub(crate) fn count_n(&mut self, code: u16, n: u64) {
        let slot = if usize::from(code) < STATUS_CODE_SLOTS {
            usize::from(code)
        } else {
            0
        };
        self.counts[slot] += n;
    }

    fn add(&mut self, o: &Self) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
    }
}

/// In JSON, an object from code to count, with the codes seen only: `{"200": 9950, "503": 50}`.
impl Serialize for StatusCodes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        for (code, n) in self.iter() {
            map.serialize_entry(&code.to_string(), &n)?;
        }
        map.end()
    }
}

/// A thread's responses by status: by class and by code, counted together.
#[derive(Debug, Clone, Default)]
pub(crate) struct StatusTally {
    pub classes: StatusCounts,
    pub codes: StatusCodes,
}

impl StatusTally {
    /// Counts `n` responses of status `status`.
    #[inline]
    pub fn count_n(&mut self, status: u16, n: u64) {
        self.classes.count_n(status, n);
        self.codes.count_n(status, n);
    }
}

/// The latency of one interval of the run (see [`crate::LoadConfig::latency_intervals`]).
#[derive(Debug, Clone)]
pub struct LatencyInterval {
    /// Start, from the end of the warm-up.
    pub start: Duration,
    pub length: Duration,
    /// Latency of the responses completed in the interval, in microseconds.
    pub latency: Histogram<u64>,
}

/// Per-interval histograms of one thread (only when asked for).
#[derive(Debug, Clone)]
pub(crate) struct IntervalStats {
    pub length: Duration,
    /// Index of the interval being recorded.
    pub index: u64,
    pub current: Histogram<u64>,
    /// Finished intervals: (index, histogram).
    pub done: Vec<(u64, Histogram<u64>)>,
}

impl IntervalStats {
    pub fn new(length: Duration) -> Self {
        // Auto-resizing: an interval histogram is as large as its own largest value needs.
        let mut current = Histogram::new(3).expect("3 significant digits are valid");
        current.auto(true);
        Self {
            length,
            index: 0,
            current,
            done: Vec::new(),
        }
    }

    /// Closes the current interval when `since_start` has moved past it.
    pub fn roll(&mut self, since_start: Duration) {
        let index = (since_start.as_nanos() / self.length.as_nanos().max(1)) as u64;
        if index > self.index {
            // One allocation per interval (a second from the CLI), none per response.
            self.done.push((self.index, self.current.clone()));
            self.current.reset();
            self.index = index;
        }
    }
}

/// One loader thread's figures, kept to itself and merged at the end.
#[derive(Debug, Clone)]
pub(crate) struct ThreadStats {
    pub latency: Histogram<u64>,
    pub requests: u64,
    pub responses: u64,
    pub bytes_read: u64,
    pub status: StatusTally,
    pub errors: ErrorCounts,
    pub cpu_user: Duration,
    pub cpu_system: Duration,
    /// From the start of measuring to the thread's end.
    pub elapsed: Duration,
    pub intervals: Option<IntervalStats>,
    pub tls: TlsSummary,
    /// With `--h3`: what the QUIC connections did.
    pub h3: Option<H3Summary>,
    /// The first TLS failure's message, shown once.
    pub tls_error: Option<String>,
    /// With `--ws`: the first handshake or frame refused; with `--h3`, the first HTTP/3
    /// protocol error that closed a connection.
    pub ws_error: Option<String>,
    /// `-U`: latency from each request's actual send.
    pub u_latency: Option<Histogram<u64>>,
}

impl ThreadStats {
    pub fn new() -> Self {
        Self {
            latency: new_latency_histogram(),
            requests: 0,
            responses: 0,
            bytes_read: 0,
            status: StatusTally::default(),
            errors: ErrorCounts::default(),
            cpu_user: Duration::ZERO,
            cpu_system: Duration::ZERO,
            elapsed: Duration::ZERO,
            intervals: None,
            tls: TlsSummary::default(),
            h3: None,
            tls_error: None,
            ws_error: None,
            u_latency: None,
        }
    }

    /// Forgets everything (at the end of the warm-up).
    pub fn reset(&mut self) {
        self.latency.reset();
        if let Some(u) = &mut self.u_latency {
            u.reset();
        }
        self.requests = 0;
        self.responses = 0;
        self.bytes_read = 0;
        self.status = StatusTally::default();
        self.errors = ErrorCounts::default();
        // The TLS summary is kept: keep-alive connections shake hands during the warm-up, and
        // what they negotiated is still what the measured requests use.
        if let Some(i) = &mut self.intervals {
            *i = IntervalStats::new(i.length);
        }
    }
}

/// Everything a run measured, merged over its threads.
#[derive(Debug, Clone)]
pub struct Report {
    /// Requests sent while measuring.
    pub requests: u64,
    /// Complete responses received while measuring (any status).
    pub responses: u64,
    /// Measured time: from the end of the warm-up to the end of the last thread.
    pub elapsed: Duration,
    /// Bytes read from the sockets while measuring (heads and bodies).
    pub bytes_read: u64,
    /// Latency of every response, in microseconds (see the module docs for where it starts).
    pub latency: Histogram<u64>,
    /// Responses by status class.
    pub status: StatusCounts,
    /// Responses by status code.
    pub status_codes: StatusCodes,
    pub errors: ErrorCounts,
    /// CPU time of the loader threads while measuring, user part, summed over threads.
    pub cpu_user: Duration,
    /// CPU time of the loader threads while measuring, system part, summed over threads.
    pub cpu_system: Duration,
    /// The run was stopped early (Ctrl-C, or the caller's stop flag).
    pub interrupted: bool,
    /// Latency per interval, in order, when [`crate::LoadConfig::latency_intervals`] asked for
    /// it (the last one may be shorter); empty otherwise.
    pub intervals: Vec<LatencyInterval>,
    /// Per-thread request rate over the run; `None` for a run too short to sample.
    pub thread_rates: Option<RateSummary>,
    /// For `https://` runs: the sessions' protocol, cipher suite and handshakes.
    pub tls: Option<TlsSummary>,
    /// With `--h3`: handshakes, 0-RTT, packets sent and lost.
    pub h3: Option<H3Summary>,
    /// The first TLS failure, as rustls or the socket said it (certificate verification,
    /// alerts): failures are counted in [`ErrorCounts::tls`], and this says why.
    pub tls_error: Option<String>,
    /// With `--ws`: the first handshake refused or frame refused, in words (counted in
    /// [`ErrorCounts::protocol`]).
    pub ws_error: Option<String>,
    /// With a rate and [`crate::LoadConfig::uncorrected_latency`]: latency from each request's
    /// actual send instead of its scheduled one (wrk2's `-U`), microseconds.
    pub uncorrected_latency: Option<Histogram<u64>>,
}

/// Each thread's request rate, sampled every [`crate::PROGRESS_EVERY`] while measuring (wrk's
/// `Req/Sec` row): how evenly the threads and the run went.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateSummary {
    /// Mean of the samples (responses per second of one thread).
    pub mean: f64,
    pub stdev: f64,
    pub max: f64,
    /// Share of samples within one standard deviation of the mean, 0..=1.
    pub within_stdev: f64,
    /// Number of samples.
    pub samples: u64,
}

impl RateSummary {
    /// Summarises rate samples; `None` when there are none.
    #[must_use]
    pub fn from_samples(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let stdev = (samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        let within = samples
            .iter()
            .filter(|x| (*x - mean).abs() <= stdev)
            .count() as f64
            / n;
        Some(Self {
            mean,
            stdev,
            max: samples.iter().copied().fold(0.0, f64::max),
            within_stdev: within,
            samples: samples.len() as u64,
        })
    }
}

/// The usual latency figures, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencySummary {
    pub min: u64,
    pub mean: f64,
    pub stdev: f64,
    pub max: u64,
    pub p50: u64,
    pub p75: u64,
    pub p90: u64,
    pub p99: u64,
    #[serde(rename = "p99_9")]
    pub p99_9: u64,
    #[serde(rename = "p99_99")]
    pub p99_99: u64,
    /// Share of samples within one standard deviation of the mean (wrk's `+/- Stdev`), 0..=1.
    pub within_stdev: f64,
}

impl Report {
    /// A report of nothing: no request, no time. Tools that assemble a report from elsewhere
    /// (logs, other runs) start from it.
    #[must_use]
    pub fn empty() -> Self {
        Self::merge(Vec::new(), false)
    }

    pub(crate) fn merge(threads: Vec<ThreadStats>, interrupted: bool) -> Self {
        let mut r = Self {
            requests: 0,
            responses: 0,
            elapsed: Duration::ZERO,
            bytes_read: 0,
            latency: new_latency_histogram(),
            status: StatusCounts::default(),
            status_codes: StatusCodes::default(),
            errors: ErrorCounts::default(),
            cpu_user: Duration::ZERO,
            cpu_system: Duration::ZERO,
            interrupted,
            intervals: Vec::new(),
            thread_rates: None,
            tls: None,
            h3: None,
            tls_error: None,
            ws_error: None,
            uncorrected_latency: None,
        };
        let mut by_index: std::collections::BTreeMap<u64, Histogram<u64>> = Default::default();
        let mut interval_length = None;
        for t in &threads {
            let Some(iv) = &t.intervals else { continue };
            interval_length = Some(iv.length);
            for (index, h) in iv
                .done
                .iter()
                .chain(std::iter::once(&(iv.index, iv.current.clone())))
            {
                match by_index.get_mut(index) {
                    // Auto-resizing histograms of the same precision always add.
                    Some(sum) => {
                        let _ = sum.add(h);
                    }
                    None => {
                        by_index.insert(*index, h.clone());
                    }
                }
            }
        }
        for t in threads {
            r.requests += t.requests;
            r.responses += t.responses;
            r.bytes_read += t.bytes_read;
            // Same bounds on both sides: adding cannot fail.
            let _ = r.latency.add(&t.latency);
            if let Some(u) = &t.u_latency {
                let _ = r
                    .uncorrected_latency
                    .get_or_insert_with(new_latency_histogram)
                    .add(u);
            }
            r.status.add(&t.status.classes);
            r.status_codes.add(&t.status.codes);
            r.errors.add(&t.errors);
            if t.tls.handshakes > 0 {
                r.tls.get_or_insert_with(Default::default).add(&t.tls);
            }
            if let Some(h3) = &t.h3 {
                r.h3.get_or_insert_with(Default::default).add(h3);
            }
            if r.tls_error.is_none() {
                r.tls_error = t.tls_error;
            }
            if r.ws_error.is_none() {
                r.ws_error = t.ws_error;
            }
            r.cpu_user += t.cpu_user;
            r.cpu_system += t.cpu_system;
            r.elapsed = r.elapsed.max(t.elapsed);
        }
        if let Some(length) = interval_length {
            for (index, latency) in by_index {
                let start = length.saturating_mul(u32::try_from(index).unwrap_or(u32::MAX));
                if start >= r.elapsed && !latency.is_empty() {
                    // Responses in the loop turn after the end: fold into the last interval.
                    if let Some(last) = r.intervals.last_mut() {
                        let _ = last.latency.add(&latency);
                    }
                    continue;
                }
                if start >= r.elapsed {
                    continue;
                }
                r.intervals.push(LatencyInterval {
                    start,
                    length: length.min(r.elapsed - start),
                    latency,
                });
            }
        }
        r
    }

    /// Responses per second of measured time.
    #[must_use]
    pub fn requests_per_sec(&self) -> f64 {
        per_sec(self.responses as f64, self.elapsed)
    }

    /// Bytes read per second of measured time.
    #[must_use]
    pub fn bytes_per_sec(&self) -> f64 {
        per_sec(self.bytes_read as f64, self.elapsed)
    }

    /// CPU time of the loader threads (user + system) while measuring.
    #[must_use]
    pub fn cpu_time(&self) -> Duration {
        self.cpu_user + self.cpu_system
    }

    /// Loader CPU microseconds per response: what the load generator itself costs.
    #[must_use]
    pub fn cpu_us_per_response(&self) -> Option<f64> {
        (self.responses > 0).then(|| self.cpu_time().as_secs_f64() * 1e6 / self.responses as f64)
    }

    /// Whether every request failed (the process exits non-zero then).
    #[must_use]
    pub fn all_failed(&self) -> bool {
        self.responses == 0
    }

    /// Mean, deviation, maximum and the usual percentiles of [`Report::latency`].
    #[must_use]
    pub fn latency_summary(&self) -> LatencySummary {
        summarize(&self.latency)
    }
}

/// Mean, deviation, maximum and the usual percentiles of a latency histogram (microseconds).
#[must_use]
pub fn summarize(h: &Histogram<u64>) -> LatencySummary {
    if h.is_empty() {
        return LatencySummary {
            min: 0,
            mean: 0.0,
            stdev: 0.0,
            max: 0,
            p50: 0,
            p75: 0,
            p90: 0,
            p99: 0,
            p99_9: 0,
            p99_99: 0,
            within_stdev: 0.0,
        };
    }
    let (mean, stdev) = (h.mean(), h.stdev());
    let lo = (mean - stdev).max(0.0) as u64;
    let hi = (mean + stdev) as u64;
    let within = h.count_between(lo, hi) as f64 / h.len() as f64;
    LatencySummary {
        min: h.min(),
        mean,
        stdev,
        max: h.max(),
        p50: h.value_at_quantile(0.5),
        p75: h.value_at_quantile(0.75),
        p90: h.value_at_quantile(0.9),
        p99: h.value_at_quantile(0.99),
        p99_9: h.value_at_quantile(0.999),
        p99_99: h.value_at_quantile(0.9999),
        within_stdev: within.min(1.0),
    }
}

fn per_sec(n: f64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        n / s
    } else {
        0.0
    }
}

/// What a run's TLS sessions were: the protocol and cipher suite negotiated, and how many
/// handshakes were full or resumed — over the whole run, warm-up included (keep-alive
/// connections shake hands during the warm-up and keep what they negotiated).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TlsSummary {
    /// `TLSv1.3` or `TLSv1.2`; several joined by `,` if the connections did not all agree.
    pub protocol: String,
    /// The cipher suite, e.g. `TLS13_AES_128_GCM_SHA256`; several joined by `,` likewise.
    pub cipher: String,
    /// Handshakes completed.
    pub handshakes: u64,
    /// Of those, resumed sessions (abbreviated handshakes).
    pub resumed: u64,
}

impl TlsSummary {
    /// Records one completed handshake.
    pub(crate) fn record(&mut self, protocol: &str, cipher: &str, resumed: bool) {
        self.handshakes += 1;
        self.resumed += u64::from(resumed);
        add_name(&mut self.protocol, protocol);
        add_name(&mut self.cipher, cipher);
    }

    pub(crate) fn add(&mut self, o: &Self) {
        self.handshakes += o.handshakes;
        self.resumed += o.resumed;
        for p in o.protocol.split(',').filter(|s| !s.is_empty()) {
            add_name(&mut self.protocol, p);
        }
        for c in o.cipher.split(',').filter(|s| !s.is_empty()) {
            add_name(&mut self.cipher, c);
        }
    }
}

/// What an `--h3` run's QUIC connections did, over the whole run (warm-up included, as for
/// [`TlsSummary`]): handshakes, 0-RTT, and packets as quinn-proto's connection statistics
/// count them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct H3Summary {
    /// QUIC handshakes completed (each a TLS 1.3 handshake, ALPN `h3`).
    pub handshakes: u64,
    /// Of those, resumed connections whose 0-RTT requests the server accepted.
    pub zero_rtt_accepted: u64,
    /// Resumed connections that sent 0-RTT requests the server refused: the requests were
    /// sent again once the handshake completed.
    pub zero_rtt_rejected: u64,
    /// UDP datagrams' QUIC packets sent.
    pub packets_sent: u64,
    /// Packets declared lost: their frames were sent again in new packets (QUIC retransmits
    /// frames, not packets), so this is also the count of retransmissions.
    pub packets_lost: u64,
    /// Bytes of the packets declared lost.
    pub bytes_lost: u64,
    /// Times the congestion controller cut its window.
    pub congestion_events: u64,
    /// Connections the server ended with GOAWAY; their unanswered requests went to a new one.
    pub goaways: u64,
}

impl H3Summary {
    pub(crate) fn add(&mut self, o: &Self) {
        self.handshakes += o.handshakes;
        self.zero_rtt_accepted += o.zero_rtt_accepted;
        self.zero_rtt_rejected += o.zero_rtt_rejected;
        self.packets_sent += o.packets_sent;
        self.packets_lost += o.packets_lost;
        self.bytes_lost += o.bytes_lost;
        self.congestion_events += o.congestion_events;
        self.goaways += o.goaways;
    }
}

fn add_name(list: &mut String, name: &str) {
    if !list.split(',').any(|n| n == name) {
        if !list.is_empty() {
            list.push(',');
        }
        list.push_str(name);
    }
}

/// A TLS protocol version as people write it, for [`TlsSummary::record`].
pub(crate) fn tls_version_name(v: rustls::ProtocolVersion) -> &'static str {
    match v {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
        _ => "TLS (other)",
    }
}

/// A TLS cipher suite's IANA-style name, without allocating, for [`TlsSummary::record`].
pub(crate) fn tls_suite_name(s: rustls::SupportedCipherSuite) -> &'static str {
    s.suite().as_str().unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_threads() {
        let mut a = ThreadStats::new();
        a.responses = 3;
        a.requests = 3;
        a.latency.saturating_record(100);
        a.latency.saturating_record(200);
        a.latency.saturating_record(300);
        a.status.count_n(200, 1);
        a.status.count_n(404, 1);
        a.status.count_n(503, 1);
        a.errors.timeout = 1;
        a.cpu_user = Duration::from_millis(2);
        a.elapsed = Duration::from_secs(1);
        let mut b = ThreadStats::new();
        b.responses = 1;
        b.latency.saturating_record(MAX_LATENCY_US * 10);
        b.status.count_n(302, 1);
        b.cpu_system = Duration::from_millis(2);
        b.elapsed = Duration::from_secs(2);
        let r = Report::merge(vec![a, b], false);
        assert_eq!(r.responses, 4);
        let codes: Vec<(u16, u64)> = r.status_codes.iter().collect();
        assert_eq!(codes, [(200, 1), (302, 1), (404, 1), (503, 1)]);
        assert_eq!(
            serde_json::to_string(&r.status_codes).unwrap(),
            r#"{"200":1,"302":1,"404":1,"503":1}"#
        );
        assert_eq!(r.latency.len(), 4);
        assert_eq!(r.status.not_ok(), 2);
        assert_eq!(r.errors.total(), 1);
        assert_eq!(r.elapsed, Duration::from_secs(2));
        assert!((r.requests_per_sec() - 2.0).abs() < 1e-9);
        assert!((r.cpu_us_per_response().unwrap() - 1000.0).abs() < 1e-6);
        let s = r.latency_summary();
        assert_eq!(s.min, 100);
        assert!(s.max >= MAX_LATENCY_US);
    }
}
