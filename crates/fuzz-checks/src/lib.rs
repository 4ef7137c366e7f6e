//! The checks lowlat's fuzz targets run on each input, written once: every target under
//! `fuzz/fuzz_targets/` is one call into [`TARGETS`], and `tests/seeds.rs` runs the same calls
//! on the seed corpora committed under `fuzz/seeds/TARGET/` (crash inputs found by the fuzzer
//! included, as regression tests). Each check asserts what must hold beyond "no panic" where
//! something can be said: re-serialised heads parse the same, encoders' output decodes to
//! their input, decoded lists stay within their limits, splitting an input changes nothing.
//!
//! Structure-aware inputs (an HTTP/2 connection as a list of frames, HPACK and QPACK field
//! lists) are read from the bytes with `arbitrary`, so a seed is the same input to the fuzzer
//! and to the tests.
//!
//! # Layout
//! - [`h1`]: HTTP/1.1 request heads (server), response heads and bodies (proxy, load
//!   generator), chunked bodies.
//! - [`hpack`]: HPACK's decoder on any bytes, and decode(encode(x)) == x.
//! - [`h2_frames`]: an HTTP/2 connection as a list of frames, written with the codec.
//! - [`h2_client`]: HTTP/2's client side (the proxy's upstream connections).
//! - `h2_server`: HTTP/2 as a server, a whole connection against a running engine.
//! - [`h3`]: HTTP/3 frames, QPACK's decoder, and QPACK's decode(encode(x)) == x.
//! - [`ws`]: WebSocket frame heads.
//! - [`proxy_protocol`]: the PROXY protocol header a balancer puts before a connection.
//! - [`fastcgi`]: `FastCGI` records from an application, the CGI head, name-value pairs.
//! - `config`: the config file. `templates`: `return` rules, templates, `log_format`.
//!   `file_headers`: `Range` and conditional headers. (These four need the server crate:
//!   the `server` feature.)

// Every check panics when what it checks does not hold: that is its job, said once here rather
// than in a `# Panics` section on each.
#![warn(clippy::pedantic)]
#![allow(clippy::missing_panics_doc)]

pub mod fastcgi;
pub mod h1;
pub mod h2_client;
pub mod h2_frames;
pub mod h3;
pub mod hpack;
pub mod proxy_protocol;
pub mod ws;

#[cfg(feature = "server")]
pub mod config;
#[cfg(feature = "server")]
pub mod file_headers;
#[cfg(feature = "server")]
pub mod h2_server;
#[cfg(feature = "server")]
pub mod templates;

/// A check: one input in, a panic on any violation.
pub type Check = fn(&[u8]);

/// Every fuzz target by name (its `fuzz/fuzz_targets/NAME.rs` and `fuzz/seeds/NAME/`), and its
/// check.
pub const TARGETS: &[(&str, Check)] = &[
    ("parse_request", h1::request),
    ("parse_response", h1::response),
    ("chunked", h1::chunked),
    ("hpack_decoder", hpack::decoder),
    ("hpack_roundtrip", hpack::roundtrip),
    ("h2_client", h2_client::check),
    ("h3_frames", h3::frames),
    ("qpack_decoder", h3::qpack_decoder),
    ("qpack_roundtrip", h3::qpack_roundtrip),
    ("ws_frames", ws::frames),
    ("proxy_protocol", proxy_protocol::header),
    ("fastcgi_records", fastcgi::records),
    #[cfg(feature = "server")]
    ("h2_server", h2_server::check),
    #[cfg(feature = "server")]
    ("config_file", config::check),
    #[cfg(feature = "server")]
    ("templates", templates::check),
    #[cfg(feature = "server")]
    ("range", file_headers::range),
    #[cfg(feature = "server")]
    ("conditional", file_headers::conditional),
];

/// The check of target `name`.
#[must_use]
pub fn check(name: &str) -> Option<Check> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|&(_, c)| c)
}
