//! A run as the loader threads see it: the [`Plan`] that `prepare` builds from a
//! `LoadConfig` — hosts resolved, request bytes built, connections and request budgets
//! divided among threads — and that `engine` and `worker` only read.
//!
//! Request bytes are built once per run and never again: each host gets a [`RequestBatch`]
//! holding its weighted round-robin sequence of requests laid out contiguously, with enough
//! repeats that any `pipeline` consecutive requests are one slice. A connection sends `k`
//! requests with one `write` of [`RequestBatch::window`], whatever its position in the cycle.
//!
//! Types only, with no knowledge of the configuration they came from: the threads read a plan
//! that was checked before any of them started.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::script::Script;

/// The requests of one host, laid out so that any `depth` consecutive ones are one slice.
#[derive(Debug, Clone)]
pub(crate) struct RequestBatch {
    bytes: Vec<u8>,
    /// `offsets[i]..offsets[i + 1]` is request `i` of the laid-out sequence.
    offsets: Vec<usize>,
    /// Length of the weighted cycle.
    cycle: usize,
    /// Whether the requests use `HEAD` (their responses have no body).
    pub head: bool,
}

impl RequestBatch {
    /// Lays the requests out in `cycle` order, `cycle.len() + depth - 1` of them, so that any
    /// `depth` consecutive requests are one slice; `head`: they use `HEAD`.
    pub fn new(requests: &[Vec<u8>], cycle: &[usize], depth: usize, head: bool) -> Self {
        let n = cycle.len() + depth - 1;
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        for i in 0..n {
            bytes.extend_from_slice(&requests[cycle[i % cycle.len()]]);
            offsets.push(bytes.len());
        }
        Self {
            bytes,
            offsets,
            cycle: cycle.len(),
            head,
        }
    }

    /// The bytes of `k` consecutive requests starting at cycle position `pos`, and the position
    /// after them. `k` must not exceed the pipeline depth the batch was built for.
    pub fn window(&self, pos: usize, k: usize) -> (&[u8], usize) {
        let end = pos + k;
        (
            &self.bytes[self.offsets[pos]..self.offsets[end]],
            end % self.cycle,
        )
    }

    /// Byte range of `k` requests from `pos`, for resuming a partial write later.
    pub fn range(&self, pos: usize, k: usize) -> (usize, usize) {
        (self.offsets[pos], self.offsets[pos + k])
    }

    /// The bytes in `start..end`.
    pub fn slice(&self, start: usize, end: usize) -> &[u8] {
        &self.bytes[start..end]
    }
}

/// One request as HTTP/2 fields: pseudo-fields first, names in lower case.
#[derive(Debug, Clone)]
pub(crate) struct H2Request {
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Option<Vec<u8>>,
}

/// One host:port: where its connections go and what they send.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub addr: SocketAddr,
    /// `host:port` as written, for messages.
    pub authority: String,
    pub requests: RequestBatch,
    /// For `https://`: the name the TLS session asks for and verifies.
    pub tls: Option<rustls::pki_types::ServerName<'static>>,
    /// With `--h2`: the requests as HTTP/2 fields, and the weighted cycle through them.
    pub h2_requests: Vec<H2Request>,
    pub h2_cycle: Vec<usize>,
    /// With `--h3`: each request's bytes on its stream (HEADERS, QPACK with the static table
    /// only, so the same bytes on every connection, then DATA), in `h2_cycle` order.
    pub h3_requests: Vec<Vec<u8>>,
}

/// One connection's place in the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnSpec {
    /// Index among all connections of the run (spaces rate-mode send times apart).
    pub global: usize,
    pub group: usize,
}

/// A validated run, ready for the threads.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub groups: Vec<Group>,
    /// Each thread's connections.
    pub threads: Vec<Vec<ConnSpec>>,
    /// Each thread's share of `requests`, when counted.
    pub budgets: Vec<Option<u64>>,
    /// The run's request count, when counted (for the progress line).
    pub requests: Option<u64>,
    pub connections: usize,
    pub pipeline: u32,
    /// Interval between two sends of one connection in rate mode.
    pub conn_interval: Option<Duration>,
    /// Measured time; `None` runs until the request count.
    pub duration: Option<Duration>,
    pub warmup: Duration,
    pub timeout: Duration,
    pub keep_alive: bool,
    pub pin_cpus: Vec<usize>,
    pub latency_intervals: Option<Duration>,
    /// The TLS client configuration, when any target is `https://`.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// Rate mode with `-U`: also record latency from the actual send.
    pub uncorrected: bool,
    /// HTTP/2, `pipeline` streams in flight per connection.
    pub h2: bool,
    /// HTTP/3 over QUIC, `pipeline` streams in flight per connection.
    pub h3: Option<H3Plan>,
    /// With `-s`: the script's states and what the threads do with them.
    pub script: Option<ScriptPlan>,
    /// With `--ws`: the handshake and the messages.
    pub ws: Option<WsPlan>,
}

/// An HTTP/3 run (`--h3`).
#[derive(Debug, Clone)]
pub(crate) struct H3Plan {
    /// The QUIC client configuration: the run's rustls configuration (ALPN `h3`, a session
    /// cache, early data) and the transport's limits.
    pub client: quinn_proto::ClientConfig,
    /// Every request is safe (GET or HEAD), so a resumed connection may send them as 0-RTT
    /// (RFC 9114 §10.9: early data can be replayed).
    pub early_data: bool,
}

/// A WebSocket run (`--ws`).
#[derive(Debug, Clone)]
pub(crate) struct WsPlan {
    /// Per group, the handshake's bytes before its key (each connection adds its own).
    pub handshakes: Vec<Vec<u8>>,
    /// Payload bytes of each message.
    pub message_size: usize,
}

/// A run with a Lua script: one host, and per thread its own [`Group`] (the address `setup()`
/// gave it, and without `request()` the requests its `init()` built).
#[derive(Debug, Clone)]
pub(crate) struct ScriptPlan {
    pub script: Arc<Script>,
    /// Thread `i` runs `groups[i]` instead of `Plan::groups`.
    pub groups: Vec<Group>,
    /// `request()` is called for every batch a connection sends.
    pub dynamic: bool,
    /// Requests in the first `request()` result: a connection calls `request()` again once
    /// that many fit within the depth.
    pub per_call: usize,
    /// `delay()` is called before every send (closed loop only).
    pub delay: bool,
    /// `response()` is called for every response: heads and bodies are kept for it.
    pub response: bool,
    /// `http` or `https`: `:scheme` of the HTTP/2 requests made from `request()`.
    pub scheme: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_contiguous() {
        let reqs = vec![b"A".to_vec(), b"BB".to_vec()];
        let batch = RequestBatch::new(&reqs, &[0, 1, 0], 3, false);
        assert_eq!(batch.window(0, 3), (&b"ABBA"[..], 0));
        assert_eq!(batch.window(2, 3), (&b"AABB"[..], 2));
        assert_eq!(batch.window(1, 1), (&b"BB"[..], 2));
    }
}
