//! HTTP/2 (RFC 9113) over the same transports, router and handlers as HTTP/1.1.
//!
//! - [`config`]: settings and limits (`--h2-*`).
//! - `conn`: one connection — frames, streams, flow control, defences.
//! - `stream`: a stream's state while it needs some; a handler's head turned into fields.
//!
//! A connection becomes HTTP/2 when TLS's ALPN chose `h2`, or (with `--h2c`) when a cleartext
//! connection opens with the HTTP/2 preface; the `proto` module makes the switch.

pub mod config;
pub(crate) mod conn;
pub(crate) mod stream;

pub use config::H2Config;
pub(crate) use conn::H2Conn;
