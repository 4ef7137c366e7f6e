//! The dynamic app of the seed article "Dynamic HTML & JSON Can Be Fast": N words (1000 by
//! default) chosen at start, each a responder counting its calls, rendered as JSON or HTML.
//!
//! Routes, under `--app-prefix` (`/app`):
//! - `GET /app/`: a random responder. Each worker draws a key from its own generator (no shared
//!   lock) and finds the responder by ordered prefix lookup, as the seed app did.
//! - `GET /app/{prefix}`: the first responder (in byte order) whose word starts with the
//!   percent-decoded `{prefix}`; 404 when none does.
//! - `GET /app/_stats`: every counter as JSON.
//!
//! A call's response shows the word, its count after this call and the worker that served it:
//! JSON when the `Accept` header prefers it, else HTML ([`negotiate`]); `Vary: Accept` says so.
//!
//! # Layout
//! - [`words`]: the word list's sources, which words are usable, the seeded choice.
//! - [`responders`]: the sorted words, their counters, the prefix lookup.
//! - [`negotiate`]: HTML or JSON from `Accept`.
//! - [`render`]: the template, the JSON bodies.
//! - [`rng`]: the seedable generator.
//!
//! Per request, once warm: one binary search, one atomic add, rendering into the worker's reused
//! scratch buffer; no allocation and no lock.

pub mod negotiate;
pub mod render;
pub mod responders;
pub mod rng;
pub mod words;

use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::sync::Arc;

use lowlat_http::request::Method;

use crate::handler::{Req, Response};
use crate::router::{RouteError, Router};
use crate::WorkerInfo;
use negotiate::Choice;
use render::{Call, Stats};
use responders::Responders;
use rng::SplitMix64;

/// `Vary` on every negotiated answer, so a cache keeps HTML and JSON apart.
const VARY: &[u8] = b"Vary: Accept\r\n";
const HTML_TYPE: &[u8] = b"text/html; charset=utf-8";
const JSON_TYPE: &[u8] = b"application/json";

/// Flags of `lowlat serve` for the dynamic app.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Dynamic app")]
pub struct AppArgs {
    /// Turn the dynamic app off
    #[arg(long, conflicts_with_all = ["app_prefix", "app_words", "words", "seed"])]
    pub no_app: bool,
    /// Path the dynamic app is mounted at
    #[arg(long, value_name = "PATH", default_value = "/app")]
    pub app_prefix: String,
    /// Words (responders) the app picks at start
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub app_words: u32,
    /// The app's word list, one word a line [default: /usr/share/dict/words, else a built-in list]
    #[arg(long, value_name = "FILE")]
    pub words: Option<PathBuf>,
    /// Seed of the app's word choice and random routing [default: random]
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// The system dictionary tried when --words is not given (a flag so tests can point it away)
    #[arg(long, value_name = "FILE", default_value = words::SYSTEM_WORDS, hide = true)]
    pub system_words: PathBuf,
}

/// The app's state shared by every worker (words and their counters).
#[derive(Debug)]
pub struct AppShared {
    /// The mount point without its trailing slash (`/app`; empty for the root).
    prefix: String,
    /// The seed actually used, shown by `_stats` so a run can be repeated.
    seed: u64,
    /// Where the words came from, as `_stats` shows it.
    source: String,
    responders: Responders,
}

impl AppShared {
    /// Where the app is mounted (`/app`; empty for the root).
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Builds the shared state once at start; `None` when the app is turned off.
    ///
    /// # Errors
    /// A one-line reason, e.g. an unreadable word list.
    pub fn from_args(args: &AppArgs) -> Result<Option<Arc<Self>>, String> {
        if args.no_app {
            return Ok(None);
        }
        let prefix = mount_prefix(&args.app_prefix)?;
        let seed = args.seed.unwrap_or_else(random_seed);
        let (list, source) = words::read_source(args.words.as_deref(), &args.system_words)?;
        let usable = words::usable_words(&list);
        if usable.is_empty() {
            return Err(format!(
                "no usable word in {source} (one word a line; see --words)"
            ));
        }
        let n = usize::try_from(args.app_words).unwrap_or(usize::MAX);
        let chosen = words::choose(usable, n, seed);
        Ok(Some(Arc::new(Self {
            prefix,
            seed,
            source: source.to_string(),
            responders: Responders::new(chosen),
        })))
    }

    /// The responders, in word order.
    #[must_use]
    pub fn responders(&self) -> &Responders {
        &self.responders
    }

    /// The seed in use.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

/// Mounts the app's routes for one worker.
///
/// # Errors
/// When its routes conflict with others.
pub fn mount(
    router: &mut Router,
    shared: &Arc<AppShared>,
    worker: &WorkerInfo,
) -> Result<(), RouteError> {
    let base = &shared.prefix;

    let app = Arc::clone(shared);
    // Each worker its own stream, derived from the seed: no lock, and repeatable with --seed.
    let worker_seed = shared.seed ^ (worker.index as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f);
    let mut rng = SplitMix64::new(worker_seed);
    router.route(
        &format!("{base}/"),
        &[Method::Get],
        move |req: &Req<'_, '_, '_>, res: &mut Response<'_>| {
            // The key is a word drawn at random, so every responder is equally likely; finding
            // its responder is the same ordered prefix search `/app/{prefix}` does.
            let key = app.responders.word(rng.below(app.responders.len()));
            match app.responders.first_with_prefix(key.as_bytes()) {
                Some(index) => respond(&app, index, req, res),
                None => res.send_status(404),
            }
        },
    )?;

    let app = Arc::clone(shared);
    router.route(
        &format!("{base}/_stats"),
        &[Method::Get],
        move |_req: &Req<'_, '_, '_>, res: &mut Response<'_>| {
            let stats = Stats {
                seed: app.seed,
                source: &app.source,
                responders: &app.responders,
            };
            if res
                .render(200, JSON_TYPE, b"", |buf| stats.json(buf))
                .is_err()
            {
                res.send_status(500);
            }
        },
    )?;

    let app = Arc::clone(shared);
    router.route(
        &format!("{base}/{{prefix}}"),
        &[Method::Get],
        move |req: &Req<'_, '_, '_>, res: &mut Response<'_>| {
            let mut decoded = [0u8; words::MAX_WORD_BYTES];
            let prefix = match percent_decode(req.param("prefix").unwrap_or(""), &mut decoded) {
                Ok(prefix) => prefix,
                Err(Undecodable::Malformed) => return res.send_status(400),
                // Longer than any word: no word starts with it.
                Err(Undecodable::TooLong) => return res.send_status(404),
            };
            match app.responders.first_with_prefix(prefix) {
                Some(index) => respond(&app, index, req, res),
                None => res.send_status(404),
            }
        },
    )
}

/// Answers one call of responder `index`: negotiates, counts, renders.
fn respond(app: &AppShared, index: usize, req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
    let accept = req
        .head
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("accept"))
        .map(|h| h.value);
    let choice = negotiate::choose(accept);
    let call = Call {
        word: app.responders.word(index),
        count: app.responders.call(index),
        worker: req.worker,
    };
    let rendered = if choice == Choice::Json {
        res.render(200, JSON_TYPE, VARY, |buf| call.json(buf).map_err(|_| ()))
    } else {
        res.render(200, HTML_TYPE, VARY, |buf| call.html(buf).map_err(|_| ()))
    };
    if rendered.is_err() {
        res.send_status(500);
    }
}

/// Checks `--app-prefix` and drops its trailing slash: `/app/` → `/app`, `/` → the root.
fn mount_prefix(text: &str) -> Result<String, String> {
    let base = text.trim_end_matches('/');
    let bad = || {
        format!("--app-prefix {text:?} must be a path like /app (letters, digits, -._~ and no empty segment)")
    };
    if !text.starts_with('/') {
        return Err(bad());
    }
    for segment in base.split('/').skip(1) {
        let ok = !segment.is_empty()
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b))
            && segment != "."
            && segment != "..";
        if !ok {
            return Err(bad());
        }
    }
    Ok(base.to_owned())
}

/// A seed for runs without `--seed`: std's per-process random hash keys.
fn random_seed() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// Why a path segment could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Undecodable {
    /// `%` not followed by two hex digits.
    Malformed,
    /// Longer, decoded, than the buffer.
    TooLong,
}

/// Percent-decodes `segment` into `out` (RFC 3986 §2.1), returning the decoded bytes.
/// Hand-written: it runs on every app request, into a stack buffer, and must refuse a malformed
/// escape (400) that `percent-encoding`'s decoder would pass through unchanged.
fn percent_decode<'o>(segment: &str, out: &'o mut [u8]) -> Result<&'o [u8], Undecodable> {
    let bytes = segment.as_bytes();
    let mut i = 0;
    let mut len = 0;
    while i < bytes.len() {
        let byte = if bytes[i] == b'%' {
            let hex = |b: u8| (b as char).to_digit(16);
            let high = bytes.get(i + 1).copied().and_then(hex);
            let low = bytes.get(i + 2).copied().and_then(hex);
            let (Some(high), Some(low)) = (high, low) else {
                return Err(Undecodable::Malformed);
            };
            i += 3;
            // Two hex digits make at most 255.
            u8::try_from(high * 16 + low).map_err(|_| Undecodable::Malformed)?
        } else {
            i += 1;
            bytes[i - 1]
        };
        *out.get_mut(len).ok_or(Undecodable::TooLong)? = byte;
        len += 1;
    }
    Ok(&out[..len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        let cases: &[(&str, Result<&[u8], Undecodable>)] = &[
            ("", Ok(b"")),
            ("apple", Ok(b"apple")),
            ("caf%C3%A9", Ok("café".as_bytes())),
            ("caf%c3%a9", Ok("café".as_bytes())),
            ("AT&T", Ok(b"AT&T")),
            ("a+b", Ok(b"a+b")),
            ("%41%42", Ok(b"AB")),
            ("%", Err(Undecodable::Malformed)),
            ("%4", Err(Undecodable::Malformed)),
            ("%zz", Err(Undecodable::Malformed)),
            ("%%41", Err(Undecodable::Malformed)),
            ("123456789", Err(Undecodable::TooLong)),
            ("12345678%41", Err(Undecodable::TooLong)),
            ("123456%41", Ok(b"123456A")),
        ];
        for &(segment, want) in cases {
            let mut out = [0u8; 8];
            assert_eq!(percent_decode(segment, &mut out), want, "{segment:?}");
        }
    }

    #[test]
    fn mount_prefixes() {
        let cases: &[(&str, Option<&str>)] = &[
            ("/app", Some("/app")),
            ("/app/", Some("/app")),
            ("/", Some("")),
            ("/a/b", Some("/a/b")),
            ("/v1.0/dyn-app", Some("/v1.0/dyn-app")),
            ("app", None),
            ("", None),
            ("//app", None),
            ("/a//b", None),
            ("/{x}", None),
            ("/a b", None),
            ("/a?b", None),
            ("/../x", None),
            ("/%41", None),
        ];
        for &(text, want) in cases {
            assert_eq!(mount_prefix(text).ok().as_deref(), want, "{text:?}");
        }
    }
}
