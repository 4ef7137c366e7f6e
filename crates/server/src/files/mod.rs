//! Static files: the document root (or the embedded default site), the HTTP semantics of nginx's
//! static module, and a per-worker content cache. Mounted as the router's fallback, so it sees
//! every path no other route claims.
//!
//! A request goes: [`path::normalize`] (decode, validate; 400/404) → method (GET/HEAD; another
//! is 405 where the path exists, 404 where not) → cache lookup by the normalised path → on a
//! miss, [`entry::load`] (open under the root, containment and dotfile checks, directory → 301 /
//! index / listing) → choice of representation by `Accept-Encoding` → preconditions (304/412) → Range (206/416) → the response.
//!
//! # The cache
//! Each worker owns a [`cache::Cache`] of [`entry::Entry`]s bounded by `--cache-bytes` **per
//! worker** (like nginx's `open_file_cache`, which is per worker process too; no lock, no shared
//! memory). Files up to `--cache-file-max` are held in memory with their header lines already
//! encoded, so a hit costs a hash lookup and two copies into the connection's output buffer: no
//! system call, and pipelined hits leave in the connection's single write. Larger files keep
//! their descriptor open (at most [`fd_budget`] per worker) and go out with `sendfile`; one
//! `fstat` per request notices a file changed under it. Entries are revalidated with `stat` at
//! most once per `--cache-valid` (default 1 s, nginx's `open_file_cache_valid`), so a changed
//! file is seen within that time; in-memory bodies are snapshots, so what is sent always matches
//! its `Content-Length`.
//!
//! # Choices
//! - Several ranges in one request get the whole file (200), not multipart: see [`range`].
//! - A directory without an index (and without `--autoindex`) is 403, as nginx answers.
//! - Paths are UTF-8: names that are not cannot be requested (their encoding would be refused as
//!   overlong or invalid UTF-8, which is what keeps `%c0%ae` out).
//! - `Range` is honoured on GET only (RFC 9110 §14.2); HEAD gets the full-length head.
//! - `Vary: Accept-Encoding` goes on every 200, 206, 304, 412 and 416 about a file that has a
//!   precompressed sibling or is compressed on the fly (whichever representation is chosen), and
//!   on none of a file without either, whose response does not vary (RFC 9110 §12.5.5).
//!   Siblings appearing or vanishing are noticed at revalidation, like any change.
//!
//! # Compression on the fly (`--compress`)
//! A precompressed sibling the client accepts is sent first; otherwise a compressible file
//! (see [`crate::compress`]) is compressed with the best coding the client accepts, once per
//! worker and file version: the bodies are kept in a second per-worker cache
//! (`--compress-cache-bytes`), keyed by coding and path and checked against the identity's
//! entity-tag, so a file changed on disk is compressed anew. A file above `--compress-max-size`
//! (default 1 MiB, read whole to compress it) is sent as it is. The encoded representation has
//! its own strong entity-tag (`"…-gzip"`, see [`entry::EncodedHeads`]) and no `Accept-Ranges`;
//! a GET with `Range` is answered from the identity body (206), as nginx's gzip filter leaves
//! partial responses alone. HEAD gets the encoded length; a 304 needs no compression.
//! - `--cache-bytes` is per worker; one entry costs its body, its encoded header lines and about
//!   300 bytes of bookkeeping.
//!
//! # Layout
//! - [`config`]: the flags and the settings every worker shares.
//! - [`path`]: percent-decoding and normalisation of the request path.
//! - [`entry`]: opening files safely, building cached entries, revalidation.
//! - [`cache`]: the per-worker bounded CLOCK cache.
//! - [`conditional`]: If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since, If-Range.
//! - [`range`]: the Range header.
//! - [`encoding`]: choosing a coding by Accept-Encoding (a precompressed sibling, or one to
//!   compress with).
//! - [`mime`]: Content-Type by extension.
//! - [`autoindex`]: directory listings.
//! - [`embedded`]: the built-in default site.

pub mod autoindex;
pub mod cache;
pub mod conditional;
pub mod config;
pub mod embedded;
pub mod encoding;
pub mod entry;
pub mod mime;
pub mod path;
pub mod range;

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use lowlat_http::request::{Header, Method};

use crate::handler::{FileBody, Handler, Req, Response};
use crate::router::Router;

use cache::Cache;
use conditional::{Outcome, Preconditions, Validators};
use encoding::Coding;
use entry::{Body, Entry, Lookup, Variant};
use range::RangeOutcome;

pub use config::{fd_budget, FilesArgs, FilesConfig, TryFile, MAX_CACHED_FDS};

/// Mounts the static file handler as `router`'s fallback, for one worker.
pub fn mount(router: &mut Router, cfg: &Arc<FilesConfig>) {
    router.fallback(StaticFiles::new(Arc::clone(cfg)));
}

/// One worker's static file handler.
pub struct StaticFiles {
    cfg: Arc<FilesConfig>,
    cache: Cache<Entry>,
    /// The embedded site's entries (empty when serving a root).
    embedded: Vec<(&'static str, Entry)>,
    /// The normalised path of the request being answered (reused).
    path: Vec<u8>,
    /// Header lines and listings built per request (reused).
    scratch: Vec<u8>,
    /// Files compressed on the fly.
    fly: FlyCache,
    /// A `try_files` entry expanded, and normalised (reused).
    candidate: (Vec<u8>, Vec<u8>),
    /// `try_files` entries found to name no file, and when: trusted for `--cache-valid` as
    /// cached files are (nginx's `open_file_cache_errors`), so a single-page app's deep links
    /// cost no `open` and no allocation once warm. At most [`MAX_MISSING`] paths.
    missing: HashMap<Box<[u8]>, Instant>,
}

/// Most paths a worker remembers as missing for `try_files`; the set is emptied when full.
pub const MAX_MISSING: usize = 4096;

/// One worker's bodies compressed on the fly, bounded by `--compress-cache-bytes`.
struct FlyCache {
    cache: Cache<Compressed>,
    /// The key being looked up: the coding's index, then the normalised path (reused).
    key: Vec<u8>,
}

/// A file's body compressed with one coding.
struct Compressed {
    /// The identity's entity-tag it was made from: a new version of the file has another.
    source_etag: Box<[u8]>,
    body: Box<[u8]>,
}

impl Drop for FlyCache {
    fn drop(&mut self) {
        // A reload drops this worker's handlers: what they held leaves the gauge.
        crate::compress::add_cache_bytes(-i64::try_from(self.cache.used_bytes()).unwrap_or(0));
    }
}

impl StaticFiles {
    /// A handler for one worker.
    #[must_use]
    pub fn new(cfg: Arc<FilesConfig>) -> Self {
        let embedded = if cfg.root.is_none() {
            embedded::entries(&cfg)
        } else {
            Vec::new()
        };
        Self {
            cache: Cache::new(cfg.cache_bytes, cfg.max_cached_fds),
            embedded,
            path: Vec::with_capacity(256),
            scratch: Vec::with_capacity(1024),
            fly: FlyCache {
                cache: Cache::new(cfg.compress.cache_bytes, 0),
                key: Vec::new(),
            },
            candidate: (Vec::new(), Vec::new()),
            missing: HashMap::new(),
            cfg,
        }
    }
}

impl Handler for StaticFiles {
    fn handle(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
        let Self {
            cfg,
            cache,
            embedded,
            path,
            scratch,
            fly,
            candidate,
            missing,
        } = self;
        let is_head = matches!(req.method(), Method::Head);
        let readable = is_head || matches!(req.method(), Method::Get);
        let normalised = if req.path_plain {
            path::copy_plain(req.path(), path)
        } else {
            path::normalize(req.path(), cfg.dotfiles, path)
        };
        if let Err(e) = normalised {
            res.send_status(e.status());
            return;
        }
        if !readable {
            // As nginx: another method on something that exists is 405; on nothing, 404.
            let found = match &cfg.root {
                None => embedded
                    .iter()
                    .any(|(p, _)| p.as_bytes() == path.as_slice()),
                Some(root) => {
                    cache.get_mut(path).is_some()
                        || match std::str::from_utf8(path) {
                            Ok(norm) => match entry::load(cfg, root, norm, Instant::now()) {
                                Lookup::Status(status) => {
                                    res.send_status(status);
                                    return;
                                }
                                _ => true,
                            },
                            Err(_) => false,
                        }
                }
            };
            if found {
                res.send_status_with(405, b"Allow: GET, HEAD\r\n");
            } else {
                res.send_status(404);
            }
            return;
        }
        let fields = Fields::scan(req);
        let Some(root) = &cfg.root else {
            match embedded
                .iter()
                .find(|(p, _)| p.as_bytes() == path.as_slice())
            {
                Some((_, entry)) => serve(cfg, entry, &fields, is_head, res, scratch, fly, path),
                None => res.send_status(404),
            }
            return;
        };

        if !cfg.try_files.is_empty() {
            try_files(
                cfg, root, cache, req, &fields, is_head, res, scratch, fly, candidate, missing,
            );
            return;
        }
        lookup(
            cfg,
            root,
            cache,
            path,
            req,
            &fields,
            is_head,
            res,
            scratch,
            fly,
            Mode::Answer,
        );
    }
}

/// Whether [`lookup`] answers whatever it finds, or only a file (or a directory's index or
/// listing) and leaves the rest to the next `try_files` entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Answer,
    Probe,
}

/// Answers a GET or HEAD for the normalised `path` under `root`: from the cache, else from the
/// file system (caching what it loads). In [`Mode::Probe`] nothing is sent unless a file is
/// found, and the return says whether it was.
#[allow(clippy::too_many_arguments)] // the handler's parts, lent for one request
fn lookup(
    cfg: &FilesConfig,
    root: &std::path::Path,
    cache: &mut Cache<Entry>,
    path: &[u8],
    req: &Req<'_, '_, '_>,
    fields: &Fields<'_>,
    is_head: bool,
    res: &mut Response<'_>,
    scratch: &mut Vec<u8>,
    fly: &mut FlyCache,
    mode: Mode,
) -> bool {
    let now = crate::clock::loop_now();
    let held = cache.used_bytes();
    let cached = cache.get_mut(path);
    CACHE_STATS.with(|c| {
        let (hits, misses, _) = c.get();
        c.set(if cached.is_some() {
            (hits + 1, misses, held)
        } else {
            (hits, misses + 1, held)
        });
    });
    if let Some(entry) = cached {
        let mut current = true;
        if now.duration_since(entry.checked) >= cfg.cache_valid {
            current = entry.still_current(cfg.precompressed);
            entry.checked = now;
        }
        if current && entry.holds_fd() {
            current = entry.open_files_unchanged();
        }
        if current {
            serve(cfg, entry, fields, is_head, res, scratch, fly, path);
            return true;
        }
        cache.remove(path);
    }

    let Ok(norm) = std::str::from_utf8(path) else {
        if mode == Mode::Answer {
            res.send_status(400);
        }
        return mode == Mode::Answer;
    };
    let mut found = entry::load(cfg, root, norm, now);
    if matches!(found, Lookup::Status(503)) && cache.close_fds() > 0 {
        // Out of descriptors (EMFILE/ENFILE): this worker's cached ones go first, so a
        // server at its limit keeps serving instead of answering 503 until entries expire.
        found = entry::load(cfg, root, norm, now);
    }
    match found {
        Lookup::Found(entry) => {
            serve(cfg, &entry, fields, is_head, res, scratch, fly, path);
            if entry.cacheable {
                let cost = entry.cost(path.len());
                let holds_fd = entry.holds_fd();
                cache.insert(path, *entry, cost, holds_fd);
            }
        }
        // What `try_files` moves on from: nothing there, a directory named without its slash,
        // one that may not be listed.
        Lookup::Redirect | Lookup::Status(403 | 404) if mode == Mode::Probe => return false,
        Lookup::Redirect => {
            // Built from the normalised path, never the raw one: `//evil.example/dir` must
            // not become a protocol-relative redirect.
            scratch.clear();
            scratch.extend_from_slice(b"Location: ");
            path::encode_path(norm.as_bytes(), true, scratch);
            scratch.push(b'/');
            if let Some(query) = req.head.query {
                scratch.push(b'?');
                scratch.extend_from_slice(query.as_bytes());
            }
            scratch.extend_from_slice(b"\r\n");
            res.send_status_with(301, scratch);
        }
        Lookup::Listing(dir) => match autoindex::render(cfg, root, &dir, norm, scratch) {
            Ok(()) => res.send_with(200, Some(b"text/html; charset=utf-8"), b"", scratch),
            Err(_) => res.send_status(403),
        },
        Lookup::Status(status) => res.send_status(status),
    }
    true
}

/// nginx's `try_files`: each entry but the last is expanded (`$uri`, `$uri/`, `/fallback.html`),
/// normalised as a request path is (so nothing outside the root, no dot-segments) and served if
/// it names a file, or a directory with its index (or a listing); the last entry is served
/// whatever it gives (404 when missing), or is a status (`=404`). Every lookup goes through the
/// cache, so a single-page app's `/index.html` fallback is a cache hit once warm.
#[allow(clippy::too_many_arguments)] // the handler's parts, lent for one request
fn try_files(
    cfg: &FilesConfig,
    root: &std::path::Path,
    cache: &mut Cache<Entry>,
    req: &Req<'_, '_, '_>,
    fields: &Fields<'_>,
    is_head: bool,
    res: &mut Response<'_>,
    scratch: &mut Vec<u8>,
    fly: &mut FlyCache,
    candidate: &mut (Vec<u8>, Vec<u8>),
    missing: &mut HashMap<Box<[u8]>, Instant>,
) {
    let now = crate::clock::loop_now();
    let cx = crate::template::Context {
        tls: res.client().is_some_and(|c| c.tls),
        ports: crate::template::Ports::default(),
        server_name: None,
    };
    let last = cfg.try_files.len() - 1;
    for (i, entry) in cfg.try_files.iter().enumerate() {
        let template = match entry {
            TryFile::Status(status) => {
                res.send_status(*status);
                return;
            }
            TryFile::Path(t) => t,
        };
        let (expanded, norm) = candidate;
        expanded.clear();
        if template.expand(req.head, &cx, expanded).is_err() {
            continue;
        }
        // A query in the fallback (`/index.php?$args`) is not part of the file's name.
        let end = expanded
            .iter()
            .position(|&b| b == b'?')
            .unwrap_or(expanded.len());
        let ok = std::str::from_utf8(&expanded[..end])
            .ok()
            .is_some_and(|text| path::normalize(text, cfg.dotfiles, norm).is_ok());
        let mode = if i == last { Mode::Answer } else { Mode::Probe };
        if ok && mode == Mode::Probe {
            let known_missing = missing
                .get(norm.as_slice())
                .is_some_and(|&at| now.duration_since(at) < cfg.cache_valid);
            if known_missing {
                continue;
            }
        }
        if ok
            && lookup(
                cfg, root, cache, norm, req, fields, is_head, res, scratch, fly, mode,
            )
        {
            return;
        }
        if ok && mode == Mode::Probe {
            if missing.len() >= MAX_MISSING {
                missing.clear();
            }
            missing.insert(norm.as_slice().into(), now);
        }
        if i == last {
            res.send_status(404);
        }
    }
}

/// The request header fields this module reads, found in one pass over the head: which are
/// present, and where (the first line of each name, as `Req::header` finds), not their values.
// Kept to 32 bytes: with the seven values held as `Option<&[u8]>` (112 bytes) every file request
// zeroed and copied them, and tested the four preconditions one by one; a request without any
// of these fields (the benchmark's, most requests) now makes one store and one test of `present`
// (39 instructions fewer a request on `/100.html`, callgrind).
struct Fields<'r> {
    headers: &'r [Header<'r>],
    /// A bit per field (`1 << RANGE`, ...).
    present: u8,
    /// Each present field's index in `headers`.
    at: [u16; 7],
}

const RANGE: usize = 0;
const IF_MATCH: usize = 1;
const IF_RANGE: usize = 2;
const IF_NONE_MATCH: usize = 3;
const ACCEPT_ENCODING: usize = 4;
const IF_MODIFIED_SINCE: usize = 5;
const IF_UNMODIFIED_SINCE: usize = 6;
/// The fields of [`Preconditions`].
const PRECONDITIONS: u8 =
    1 << IF_MATCH | 1 << IF_NONE_MATCH | 1 << IF_MODIFIED_SINCE | 1 << IF_UNMODIFIED_SINCE;

impl<'r> Fields<'r> {
    /// One pass, matching names by length first: a request without any of these fields (the
    /// benchmark's) costs a length compare per header line.
    #[inline]
    fn scan(req: &Req<'r, '_, '_>) -> Self {
        let headers: &'r [Header<'r>] = req.head.headers;
        let mut f = Self {
            headers,
            present: 0,
            at: [0; 7],
        };
        for (i, h) in headers.iter().enumerate() {
            let name = h.name.as_bytes();
            let which = match name.len() {
                5 if name.eq_ignore_ascii_case(b"range") => RANGE,
                8 if name.eq_ignore_ascii_case(b"if-match") => IF_MATCH,
                8 if name.eq_ignore_ascii_case(b"if-range") => IF_RANGE,
                13 if name.eq_ignore_ascii_case(b"if-none-match") => IF_NONE_MATCH,
                15 if name.eq_ignore_ascii_case(b"accept-encoding") => ACCEPT_ENCODING,
                17 if name.eq_ignore_ascii_case(b"if-modified-since") => IF_MODIFIED_SINCE,
                19 if name.eq_ignore_ascii_case(b"if-unmodified-since") => IF_UNMODIFIED_SINCE,
                _ => continue,
            };
            // A head holds far fewer lines than 65 536 (its size is limited); past that, none.
            let Ok(i) = u16::try_from(i) else { break };
            // The first field of a name counts, as `Req::header` does.
            if f.present & (1 << which) == 0 {
                f.present |= 1 << which;
                f.at[which] = i;
            }
        }
        f
    }

    /// The value of field `which` (`RANGE`, ...), when the request has one.
    #[inline]
    fn get(&self, which: usize) -> Option<&'r [u8]> {
        if self.present & (1 << which) == 0 {
            return None;
        }
        self.headers
            .get(usize::from(self.at[which]))
            .map(|h| h.value)
    }

    fn range(&self) -> Option<&'r [u8]> {
        self.get(RANGE)
    }

    fn accept_encoding(&self) -> Option<&'r [u8]> {
        self.get(ACCEPT_ENCODING)
    }

    /// The request's preconditions; `None` when it has none.
    #[inline]
    fn preconditions(&self) -> Option<Preconditions<'r>> {
        if self.present & PRECONDITIONS == 0 {
            return None;
        }
        Some(Preconditions {
            if_match: self.get(IF_MATCH),
            if_unmodified_since: self.get(IF_UNMODIFIED_SINCE),
            if_none_match: self.get(IF_NONE_MATCH),
            if_modified_since: self.get(IF_MODIFIED_SINCE),
        })
    }
}

/// The header line of every answer about a file with precompressed siblings.
const VARY_ACCEPT_ENCODING: &[u8] = b"Vary: Accept-Encoding\r\n";

/// Answers a GET or HEAD from an entry: representation, preconditions, range, response.
#[allow(clippy::too_many_arguments)] // the handler's parts, lent for one request
fn serve(
    cfg: &FilesConfig,
    entry: &Entry,
    fields: &Fields<'_>,
    is_head: bool,
    res: &mut Response<'_>,
    scratch: &mut Vec<u8>,
    fly: &mut FlyCache,
    path: &[u8],
) {
    let coding = if entry.has_siblings() {
        encoding::choose(
            fields.accept_encoding(),
            entry.siblings(),
            &cfg.compress.order,
        )
    } else {
        Coding::Identity
    };
    // A sibling the client accepts wins; else the file may be compressed here, unless the
    // request asks for a range (answered from the identity body, as nginx does).
    let ranged = !is_head && fields.present & (1 << RANGE) != 0;
    if coding == Coding::Identity && !ranged && !entry.encoded.is_empty() {
        if let Some(heads) = entry.encoded(cfg.compress.choose(fields.accept_encoding())) {
            serve_encoded(cfg, entry, heads, fields, is_head, res, fly, path);
            return;
        }
    }
    let Some(v) = entry.variant(coding) else {
        res.send_status(404);
        return;
    };
    let validators = Validators {
        etag: &v.etag,
        last_modified: &v.last_modified,
        mtime_secs: v.mtime_secs,
    };
    if !preconditions_pass(
        fields,
        &validators,
        &v.head_not_modified,
        entry.varies(),
        res,
    ) {
        return;
    }
    let mut range = RangeOutcome::Full;
    if let Some(field) = fields.range() {
        let applies = fields
            .get(IF_RANGE)
            .is_none_or(|ir| conditional::if_range_holds(ir, &validators));
        if !is_head && applies {
            range = range::evaluate(field, v.len);
        }
    }
    match range {
        RangeOutcome::Full => send(v, 200, &v.head_ok, 0, v.len, res),
        RangeOutcome::Partial { start, end } => {
            scratch.clear();
            scratch.extend_from_slice(&v.head_ok);
            push_content_range(scratch, Some((start, end)), v.len);
            send(v, 206, scratch, start, end - start + 1, res);
        }
        RangeOutcome::Unsatisfiable => {
            scratch.clear();
            push_content_range(scratch, None, v.len);
            if entry.varies() {
                // The length in Content-Range is the chosen representation's.
                scratch.extend_from_slice(VARY_ACCEPT_ENCODING);
            }
            res.send_status_with(416, scratch);
        }
    }
}

/// The request's preconditions against the chosen representation's `validators`: `true` to go
/// on; otherwise its 304 (`head_not_modified`) or a 412 has been sent. `varies`: the
/// representation was chosen by `Accept-Encoding`, and since it decided the outcome (its ETag),
/// the 412 varies too.
#[allow(clippy::inline_always)] // measured: left to LTO it became a call on every file request
#[inline(always)]
fn preconditions_pass(
    fields: &Fields<'_>,
    validators: &Validators<'_>,
    head_not_modified: &[u8],
    varies: bool,
    res: &mut Response<'_>,
) -> bool {
    // A request without preconditions (most of them) pays one test, not the evaluation.
    fields.present & PRECONDITIONS == 0
        || preconditions_hold(fields, validators, head_not_modified, varies, res)
}

/// [`preconditions_pass`] for a request that has some.
fn preconditions_hold(
    fields: &Fields<'_>,
    validators: &Validators<'_>,
    head_not_modified: &[u8],
    varies: bool,
    res: &mut Response<'_>,
) -> bool {
    let Some(pre) = fields.preconditions() else {
        return true;
    };
    match conditional::evaluate(&pre, validators) {
        Outcome::Proceed => true,
        Outcome::NotModified => {
            res.send_head(304, None, head_not_modified, None);
            false
        }
        Outcome::PreconditionFailed => {
            if varies {
                res.send_status_with(412, VARY_ACCEPT_ENCODING);
            } else {
                res.send_status(412);
            }
            false
        }
    }
}

/// Answers from the representation compressed on the fly with `heads.coding`: preconditions
/// against its own validators, then the body from the worker's compressed-file cache, or
/// compressed now (and kept if it fits).
#[allow(clippy::too_many_arguments)] // the handler's parts, lent for one request
fn serve_encoded(
    cfg: &FilesConfig,
    entry: &Entry,
    heads: &entry::EncodedHeads,
    fields: &Fields<'_>,
    is_head: bool,
    res: &mut Response<'_>,
    fly: &mut FlyCache,
    path: &[u8],
) {
    let Some(identity) = entry.variants[0].as_ref() else {
        res.send_status(404);
        return;
    };
    let validators = Validators {
        etag: &heads.etag,
        last_modified: &identity.last_modified,
        mtime_secs: identity.mtime_secs,
    };
    if !preconditions_pass(fields, &validators, &heads.head_not_modified, true, res) {
        return;
    }
    let FlyCache { cache, key } = fly;
    key.clear();
    key.push(b'0' + heads.coding.index() as u8);
    key.extend_from_slice(path);
    if let Some(hit) = cache.get_mut(key) {
        if hit.source_etag == identity.etag {
            res.send_with(200, None, &heads.head_ok, &hit.body);
            if !is_head {
                crate::compress::count(heads.coding, identity.len, hit.body.len() as u64);
            }
            return;
        }
    }
    let read;
    let bytes: &[u8] = match (&identity.body, identity.id) {
        (Body::Memory(b), _) => b,
        (Body::File(file), Some(id)) => match entry::read_version(file, id) {
            Some(b) => {
                read = b;
                &read
            }
            // Changed under us: the identity path notices it (and the entry is rebuilt).
            None => return send(identity, 200, &identity.head_ok, 0, identity.len, res),
        },
        (Body::File(_), None) => {
            return send(identity, 200, &identity.head_ok, 0, identity.len, res);
        }
    };
    let mut body = Vec::new();
    if let Err(e) = crate::compress::encode(heads.coding, &cfg.compress.levels, bytes, &mut body) {
        tracing::debug!("cannot compress: {e}");
        return send(identity, 200, &identity.head_ok, 0, identity.len, res);
    }
    res.send_with(200, None, &heads.head_ok, &body);
    if !is_head {
        crate::compress::count(heads.coding, identity.len, body.len() as u64);
    }
    let before = cache.used_bytes();
    let cost = body.len() + 2 * key.len() + identity.etag.len() + 96;
    cache.insert(
        key,
        Compressed {
            source_etag: identity.etag.clone(),
            body: body.into_boxed_slice(),
        },
        cost,
        false,
    );
    let delta = i64::try_from(cache.used_bytes()).unwrap_or(i64::MAX)
        - i64::try_from(before).unwrap_or(i64::MAX);
    crate::compress::add_cache_bytes(delta);
}

/// Appends `Content-Range: bytes a-b/len` (or `bytes */len` for a 416, RFC 9110 §14.4).
fn push_content_range(out: &mut Vec<u8>, range: Option<(u64, u64)>, len: u64) {
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(b"Content-Range: bytes ");
    match range {
        Some((start, end)) => {
            out.extend_from_slice(num.format(start).as_bytes());
            out.push(b'-');
            out.extend_from_slice(num.format(end).as_bytes());
        }
        None => out.push(b'*'),
    }
    out.push(b'/');
    out.extend_from_slice(num.format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Sends `len` bytes of `v` from `start`, from memory or with `sendfile`.
fn send(v: &Variant, status: u16, extra: &[u8], start: u64, len: u64, res: &mut Response<'_>) {
    match &v.body {
        Body::Memory(bytes) => {
            let body = usize::try_from(start).ok().and_then(|s| {
                let e = s.checked_add(usize::try_from(len).ok()?)?;
                bytes.get(s..e)
            });
            match body {
                Some(body) => res.send_with(status, None, extra, body),
                None => res.send_status(500),
            }
        }
        Body::File(file) => res.send_file(
            status,
            None,
            extra,
            FileBody {
                file: Rc::clone(file),
                offset: start,
                len,
                slots: None,
            },
        ),
    }
}

thread_local! {
    /// This worker's file-cache lookups (hits, misses) and the bytes the cache holds, for the
    /// metrics: the cache belongs to the worker's thread, and so do these (no atomics).
    static CACHE_STATS: std::cell::Cell<(u64, u64, usize)> = const { std::cell::Cell::new((0, 0, 0)) };
}

/// (hits, misses, bytes held) of the calling worker's file cache.
pub(crate) fn cache_stats() -> (u64, u64, usize) {
    CACHE_STATS.with(std::cell::Cell::get)
}
