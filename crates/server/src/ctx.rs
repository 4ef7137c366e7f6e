//! What a connection may use of its worker while it is driven: the worker owns these (its
//! buffers, router, logs and counters) and lends them, for one call, to the protocol layer.

use std::time::Instant;

use lowlat_http::date::DateCache;
use mio::{Registry, Token};

use crate::config::ServerConfig;
use crate::pool::BufferPool;
use crate::proxy::job::ProxyJob;
use crate::router::Router;

/// What a connection may use of its worker while it is driven.
pub(crate) struct WorkerCtx<'a> {
    pub(crate) cfg: &'a ServerConfig,
    pub(crate) registry: &'a Registry,
    pub(crate) pool: &'a mut BufferPool,
    pub(crate) router: &'a mut Router,
    pub(crate) date: &'a DateCache,
    /// Reused buffer for rendering bodies.
    pub(crate) scratch: &'a mut Vec<u8>,
    /// Reused buffer for file chunks on their way into TLS records.
    pub(crate) file_chunk: &'a mut Vec<u8>,
    /// This worker's access log, when there is one.
    pub(crate) access_log: Option<&'a mut crate::access_log::WorkerLog>,
    /// This worker's counts (published for `--metrics`).
    pub(crate) counters: &'a mut crate::metrics::Counters,
    /// Requests handed to the upstream side by this turn's connections: (client, HTTP/2
    /// stream or 0, the request).
    pub(crate) proxy_starts: &'a mut Vec<(Token, u32, ProxyJob)>,
    /// Upstream exchanges whose client went away (a connection closed, a stream reset).
    pub(crate) proxy_cancels: &'a mut Vec<Token>,
    /// Connections to drive again after this turn (their file send yielded), and upstream
    /// connections whose relay yielded its turn.
    pub(crate) deferred: &'a mut Vec<Token>,
    /// When to drive connections again whose requests are held back (`crate::hold`).
    pub(crate) holds: &'a mut crate::hold::Timers,
    /// The connection being driven.
    pub(crate) token: Token,
    pub(crate) worker: usize,
    pub(crate) now: Instant,
    /// Request times are read off the clock when answered (metrics or an access log want
    /// them true); otherwise the loop's time serves, and costs nothing.
    pub(crate) timed: bool,
    pub(crate) shutting_down: bool,
    /// The shutdown hands over to a new process (USR2), which takes the clients: connections
    /// are let go gently (HTTP/2's two GOAWAYs, idle keep-alive ones closed only once idle a
    /// while) rather than at once.
    pub(crate) handing_over: bool,
}
