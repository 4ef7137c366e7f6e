//! HTTP caching semantics for a shared cache (RFC 9111, with RFC 5861's stale extensions,
//! RFC 9211's `Cache-Status` and RFC 9213's targeted fields): what may be stored, for how long,
//! when a stored response may be used, how it is revalidated and what a response invalidates.
//!
//! No I/O and no clock: every function that needs the time is given `now` (seconds since the
//! epoch) by its caller, so the tables of cases below each file are the whole behaviour. The
//! storage (memory budget, eviction, collapsing) is the server's; this module only decides.
//!
//! # Layout
//! - [`directives`]: `Cache-Control` (and a targeted field such as `CDN-Cache-Control`) parsed
//!   into [`Directives`], for requests and responses.
//! - [`fields`]: header fields as the policy reads them, whoever holds them; list elements,
//!   dates, delta-seconds.
//! - [`index`]: a response's fields indexed, in one walk, by the names the decisions ask for.
//! - [`storable`]: whether a response may be stored (§3, §3.5), and why not.
//! - [`freshness`]: freshness lifetime (§4.2.1, heuristics §4.2.2), current age (§4.2.3), and
//!   whether a stored response may be used as it is, stale, or only after revalidation.
//! - [`vary`]: the secondary key a `Vary` response field makes of a request (§4.1).
//! - [`revalidate`]: the conditional request (§4.3.1) and the 304's fields merged in (§4.3.4).
//! - [`invalidate`]: what an unsafe method's response invalidates (§4.4).
//! - [`status`]: the `Cache-Status` field value (RFC 9211).

pub mod directives;
pub mod fields;
pub mod freshness;
pub mod index;
pub mod invalidate;
pub mod revalidate;
pub mod status;
pub mod storable;
pub mod vary;

pub use directives::Directives;
pub use fields::{first, parse_date, values, Fields, DELTA_MAX};
