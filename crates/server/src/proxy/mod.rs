//! The reverse proxy: requests under a path prefix forwarded to a group of upstream servers, from
//! the worker's own event loop.
//!
//! A request goes: the router → the proxy handler (`handler`), which writes the request as the
//! upstream gets it (`headers`) into a [`job::ProxyJob`] → the client's connection hands it to
//! the worker's upstream side (`engine`), which picks a server (`group`: balancing, pools; health
//! shared by the workers in `health`), writes it on a pooled or new connection (`upstream`) and
//! relays the response, parsed by the codec's response parser, back through
//! [`downstream::Downstream`], which the client's protocol implements.
//!
//! # Layout
//! - [`config`]: groups, servers, balancing, timeouts, health checks, trusted proxies.
//! - `handler`: the route handler: what to forward, to which group.
//! - `headers`: the forwarded request's head; which response fields pass.
//! - [`auth`]: forward authentication's subrequest: its answer judged, the guarded request
//!   forwarded with the fields it copies, or the refusal relayed.
//! - `auth_held`: a local answer under forward auth, kept until the verdict and relayed then.
//! - `cgi_request`: the FastCGI request a forwarded request becomes: its CGI/1.1 variables.
//! - `job`: a request on its way; how its body will be framed for the client.
//! - `downstream`: what the upstream side delivers to (the client's connection or stream).
//! - `claim`: a wrapper of a downstream's one hold on the state it relays for (the cache's tee,
//!   forward authentication's gate).
//! - `engine`: the worker's upstream connections: exchanges, retries, timeouts, pools; a file
//!   for each job under `engine/` (started, driven, relayed, pooled or closed, failed, upgraded
//!   to a tunnel, php-fpm's capacity).
//! - `upload`: a request body streaming to an upstream while it arrives.
//! - `h2up`: HTTP/2 upstream connections: many requests as streams over few connections; a file
//!   for each job under `h2up/` (exchanges opened, connections driven, uploads, delivery to
//!   the client, other ends, the request's translation).
//! - `fcgi`: a FastCGI exchange on an upstream connection: records read, the CGI head relayed,
//!   stderr logged, a file sent for `X-Accel-Redirect`.
//! - `fcgi_state`: that exchange's state, held by the upstream connection.
//! - `fcgi_queue`: requests waiting in the worker for a php-fpm connection when php-fpm serves
//!   all it can.
//! - `fcgi_share`: php-fpm's processes shared by the workers: a worker asks the others to give
//!   one back that their idle connections hold.
//! - `upstream`: one upstream connection and its socket.
//! - [`upstream_tls`]: TLS to `https://` servers: the client configuration, the socket, the
//!   reasons a handshake fails.
//! - `group`: one worker's view of a group: balancer, in-flight counts, idle pools.
//! - `health`: passive and active health, shared by the workers.
//! - `stats`: per-server counts for `/metrics`, one slot per worker.
//! - `upgrade`: which requests open a WebSocket tunnel; the offer's fields upstream.
//! - `tunnel`: an upgraded exchange: bytes copied both ways until both sides close.
//! - `trailers`: which upstream trailer fields reach the client.

pub mod auth;
pub(crate) mod auth_held;
pub(crate) mod cgi_request;
pub(crate) mod claim;
pub mod config;
pub(crate) mod downstream;
pub(crate) mod engine;
pub(crate) mod fcgi;
pub(crate) mod fcgi_queue;
pub(crate) mod fcgi_share;
pub(crate) mod fcgi_state;
pub(crate) mod group;
pub(crate) mod h2up;
pub mod handler;
pub mod headers;
pub(crate) mod health;
pub(crate) mod job;
pub mod stats;
pub(crate) mod trailers;
pub(crate) mod tunnel;
pub(crate) mod upgrade;
pub(crate) mod upload;
pub(crate) mod upstream;
pub mod upstream_tls;
