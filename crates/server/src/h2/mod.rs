//! HTTP/2 (RFC 9113) over the same transports, router and handlers as HTTP/1.1.
//!
//! - [`config`]: settings and limits (`--h2-*`).
//! - `conn`: one connection's state, its read → answer → write cycle, its deadlines.
//! - `io`: reading and cutting frames, writing, lingering and closing.
//! - `frames`: one handler per frame type a client sends.
//! - `respond`: a complete request through the router; the response as HEADERS and DATA.
//! - `flow`: windows, WINDOW_UPDATE, fair rounds of DATA between streams.
//! - `defence`: stream and connection errors; control-frame and reset floods.
//! - `relay`: a stream receiving a response from an upstream (the reverse proxy).
//! - `stream`: a stream's state while it needs some; a handler's head turned into fields.
//!
//! A connection becomes HTTP/2 when TLS's ALPN chose `h2`, or (with `--h2c`) when a cleartext
//! connection opens with the HTTP/2 preface; the `proto` module makes the switch.

pub mod config;
pub(crate) mod conn;
mod defence;
mod flow;
mod frames;
mod io;
pub(crate) mod relay;
mod respond;
pub(crate) mod stream;

pub use config::H2Config;
pub(crate) use conn::H2Conn;
