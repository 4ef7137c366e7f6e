//! lowlat's HTTP/1.1, HTTP/2 and HTTP/3 server, in clear, over TLS and over QUIC: a
//! thread-per-core engine and the handlers mounted on it (files, the app, the reverse proxy and
//! its cache).
//!
//! Each worker thread owns an event loop, its listening sockets (`SO_REUSEPORT`), its connections
//! and their buffers; a request never crosses threads. The codec (`lowlat-http`) parses and
//! encodes; this crate moves bytes, enforces limits and timeouts, and routes.
//!
//! # Layout
//! - [`config`]: every setting and its default.
//! - `server`: binding the sockets, starting the workers, the handles that reload and stop them.
//! - `service`: what the workers serve, and the slot a reload swaps it in.
//! - `listener`: binding the per-worker `SO_REUSEPORT` sockets, or sharing out handed-over ones.
//! - [`inherit`]: listening sockets handed over at start (systemd's socket activation, the
//!   previous process on USR2): `LISTEN_FDS`, `LISTEN_PID`, `LISTEN_FDNAMES`.
//! - `transport`: the transport layer — bytes in clear or through TLS, under the protocol layer.
//! - [`tls`]: the shared rustls configuration, certificates chosen by SNI, reload.
//! - [`acme`]: automatic HTTPS: certificates obtained, stored and renewed from an ACME CA.
//! - [`access_log`]: one line per request (combined, JSON or a `log_format`), buffered per worker.
//! - [`log_format`]: nginx-style `log_format` texts compiled into segments once.
//! - [`metrics`]: per-worker counters, published once per loop turn, served as Prometheus text.
//! - `worker`: one thread's event loop: accept, drive connections, sweep deadlines, shut down.
//! - `clients`: the worker's client connections (TCP and QUIC) as the upstream side reaches
//!   them, and what follows a client's turn (requests forwarded, exchanges cancelled).
//! - `ctx`: what the worker lends a connection while it is driven (buffers, router, logs).
//! - `clock`: the loop's time, read on the request path instead of the system clock.
//! - `wait`: what a connection waits for, which decides its timeout.
//! - `conn`: the HTTP/1.1 protocol layer: one connection's read → answer every request → one
//!   write cycle, bodies, closing — over whichever transport it was accepted on.
//! - [`h2`]: the HTTP/2 protocol layer: frames, streams, flow control, defences, its settings.
//! - [`h3`]: the HTTP/3 protocol layer: requests on QUIC streams, answered by the router.
//! - [`quic`]: QUIC under HTTP/3 (`--h3-listen`): per-worker UDP sockets and endpoints,
//!   connections kept on their worker, streams handed up as byte streams.
//! - `proxied`: a balancer's connection before its PROXY protocol header has arrived; the
//!   client it names becomes the connection's peer.
//! - `proto`: a connection in the protocol it speaks; the switch from HTTP/1.1 to HTTP/2.
//! - `dispatch`: the one request path: a request head from any protocol to its site, route and
//!   handler, back as a response in HTTP/1.1 form or a request to forward.
//! - `pool`: per-worker buffer pool, so idle connections hold no buffers.
//! - [`handler`]: what handlers see ([`Req`]) and how they answer ([`Response`]).
//! - [`incoming`]: what is known of a request beyond its head (the client, a streamed body).
//! - `file_body`: the file a response sends after its head, and the connection-limit places
//!   an answer keeps.
//! - [`client_cert`]: what a client certificate verified in a handshake says (subject,
//!   fingerprint…), worked out once per connection.
//! - [`client_auth`]: a site's client-certificate rule, checked before its routes (mTLS).
//! - `own_waker`: the worker's waker, which other threads ring with news for it.
//! - `prehashed`: the hasher of tables whose keys carry their (seeded) hash already.
//! - [`router`]: exact, parameter and prefix routes, 405 + `Allow`, a fallback.
//! - `scope`: the normalised path that routes and protection rules are matched against.
//! - `sitename`: whether a site answers to a name, one rule for `Host` and SNI.
//! - [`proxy`]: the reverse proxy: forwarding rules, upstream groups, the worker's upstream side.
//! - [`builtin`]: `/plaintext` and `/json`.
//! - [`cache`]: the proxy's cache (RFC 9111): one store per process, hits served from memory,
//!   misses stored while they are relayed.
//! - [`compress`]: compression on the fly (gzip, br, zstd): settings, per-worker encoders,
//!   counts.
//! - [`returns`]: nginx's `return` rules (redirects, fixed answers) and the HTTPS redirect.
//! - [`template`]: texts with `$variables`, compiled once, expanded per request.
//! - [`files`]: static files under a document root (or the embedded default site).
//! - [`guard`]: access rules and rate limits, asked before a site's routes.
//! - [`app`]: the dynamic app, 1000 prefix-routed responders as JSON or HTML.
//! - [`php`]: the PHP front door: a document root's static files served, its scripts run by
//!   php-fpm over FastCGI.
//! - [`settings`]: the flags and the config file, parsed and checked; the service built from
//!   them. Nothing it builds on (workers, protocols, handlers) imports it back.
//! - [`upgrade`]: `kill -USR2`: the binary started again with every listening socket handed
//!   over, and its readiness awaited before this process drains.
//! - [`notify`]: systemd's `sd_notify` protocol: ready, reloading, stopping, and the new main
//!   process after a USR2 upgrade.
//! - [`health`]: the probe endpoint (`--health`): ok, or draining once shutdown begins.
//! - [`cli`]: running `lowlat serve`: settings in, server started, signals handled.

pub mod access_log;
pub mod acme;
pub mod app;
pub mod builtin;
pub mod cache;
pub mod cli;
pub mod client_auth;
pub mod client_cert;
mod clients;
mod clock;
pub mod compress;
pub mod config;
mod conn;
mod ctx;
mod dispatch;
mod file_body;
pub mod files;
pub mod guard;
pub mod h2;
pub mod h3;
pub mod handler;
pub mod health;
mod hold;
pub mod incoming;
pub mod inherit;
mod listener;
pub mod log_format;
pub mod metrics;
pub mod notify;
mod own_waker;
pub mod php;
mod pool;
mod prehashed;
mod proto;
mod proxied;
pub mod proxy;
pub mod quic;
pub mod returns;
pub mod router;
mod scope;
mod server;
mod service;
pub mod settings;
mod sitename;
pub mod template;
pub mod tls;
mod transport;
pub mod upgrade;
mod wait;
mod worker;

pub use config::ServerConfig;
pub use handler::{FileBody, Handler, Req, Response};
pub use router::Router;
pub use server::{ReloadHandle, Running, Server, ServerError, ShutdownHandle};
pub use service::{builtin_service, Service, WorkerInfo};
