//! The settings layer: `lowlat serve`'s flags and config file parsed and checked, and the
//! service built from them. Nothing below it (the workers, the protocols, the handlers) imports
//! it back: they receive a finished [`crate::ServerConfig`] and [`crate::Service`].
//!
//! # Layout
//! - [`args`]: the flags, one parser each, and the server configuration they describe.
//! - [`cache`]: the `--cache*` flags: the proxy's cache on or off, its store's size.
//! - [`client_cert`]: `--client-ca` and `--client-cert`: a site's client certificates (mTLS).
//! - [`file`]: `--config FILE`, every flag as a TOML key, checked by its flag's parser.
//! - [`guard`]: `--allow`, `--deny` and `--rate-limit`, in order, checked.
//! - [`proxy`]: `--proxy` rules, `--proxy-*` and `[[upstream]]` groups, checked.
//! - [`quic`]: the `--h3-*` flags (HTTP/3 over QUIC), checked.
//! - [`sites`]: the service: a router per worker, a site per `[[site]]`.
//! - `tables`: one reader of the repeated tables (`[[site]]`, `[[upstream]]`) for `file`.
//! - `check`: `--check-config`, every problem with its line.

pub mod args;
pub mod cache;
mod check;
pub mod client_cert;
pub mod file;
pub mod guard;
pub mod proxy;
pub mod quic;
pub mod sites;
mod tables;

pub use args::{parse_listen, ListenAddr, ServeArgs, SiteArgs};
pub(crate) use check::{ca_warning, check_config};
pub use file::merged;
pub(crate) use sites::site_labels;
pub use sites::{service, service_with_upstreams};
