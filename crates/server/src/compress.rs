//! Compression on the fly, as nginx's `gzip on` and caddy's `encode`: the flags, the settings
//! every worker shares ([`CompressConfig`], checked once at start), the per-worker encoders
//! (gzip through flate2 on zlib-rs, brotli, zstd) and the counts `/metrics` reports.
//!
//! It does not choose the coding (`files::encoding` does, from `Accept-Encoding`) nor keep
//! compressed files (the static file handler caches them per worker, `files`); it answers
//! "could this response be compressed?" and "compress these bytes with that coding".
//!
//! # What is compressed
//! A response is compressible when compression is on for its site, its status is 200 (or 403
//! or 404 for a dynamic response, as nginx), its `Content-Type` essence is listed
//! (`--compress-types`; `text/*` covers a family) and its body is between `--compress-min-size`
//! and `--compress-max-size`. Such a response carries `Vary: Accept-Encoding` whichever coding
//! is sent, identity included (RFC 9110 §12.5.5). Dynamic responses are compressed per response;
//! a handler that sets its own `Content-Encoding`, `Content-Range`, `ETag` or `Cache-Control:
//! no-transform` keeps its body as it is.
//!
//! # Why these encoders
//! - gzip: flate2 on its `zlib-rs` backend, a Rust port of zlib-ng: about twice miniz_oxide's
//!   speed at level 1, without a C toolchain. One deflate state per worker (about 270 KiB), reset
//!   per response rather than made anew: zlib's state is allocated and initialised at creation.
//! - zstd: the reference library through the `zstd` crate, one compression context per worker,
//!   reused (a context costs about 1 MiB at level 3 and a fresh one per response is the slow
//!   path its manual warns about).
//! - brotli: the `brotli` crate (Rust), one encoder per response: the crate has no reset, and a
//!   brotli encoder sizes its tables from the input (the size hint), so little is wasted.
//!
//! Default levels are chosen for speed (compressing per response must cost less than sending
//! the bytes it saves): gzip 1 (nginx's `gzip_comp_level` default), brotli 4, zstd 3 (zstd's
//! own default, faster than gzip 1 and smaller).

use std::cell::{Cell, RefCell};
use std::io::Write as _;

use crate::files::encoding::{Coding, Codings, DEFAULT_ORDER};

/// The MIME types compressed by default: nginx's `text/html`, caddy's `encode` list, and the
/// other text formats a site serves. Images, audio, video, fonts in WOFF and archives are
/// compressed already.
pub const DEFAULT_TYPES: &str = "text/*,application/json,application/javascript,\
application/xml,application/xhtml+xml,application/atom+xml,application/rss+xml,\
application/manifest+json,application/ld+json,application/wasm,image/svg+xml,font/ttf,font/otf";

/// Flags of `lowlat serve` for compression on the fly (also `[[site]]` keys).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Compression")]
pub struct CompressArgs {
    /// Compress responses on the fly (gzip, br, zstd, chosen by Accept-Encoding), as nginx's
    /// gzip on
    #[arg(long)]
    pub compress: bool,
    /// Codings to compress with, in the server's order of preference when the client accepts
    /// several equally
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "zstd,br,gzip", value_parser = parse_coding)]
    pub compress_encodings: Vec<Coding>,
    /// MIME types compressed (`text/*` covers a family, `*` every type)
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = DEFAULT_TYPES, value_parser = parse_type)]
    pub compress_types: Vec<String>,
    /// Smallest body compressed (caddy's default; smaller bodies gain little)
    #[arg(long, value_name = "SIZE", default_value = "512", value_parser = lowlat_http::units::parse_size)]
    pub compress_min_size: u64,
    /// Largest body compressed; larger ones are sent as they are
    #[arg(long, value_name = "SIZE", default_value = "1m", value_parser = lowlat_http::units::parse_nonzero_size)]
    pub compress_max_size: u64,
    /// gzip level, 1 (fastest) to 9
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub compress_gzip_level: u32,
    /// brotli level, 0 (fastest) to 11
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=11))]
    pub compress_br_level: u32,
    /// zstd level, 1 (fastest) to 19
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    pub compress_zstd_level: i32,
    /// Memory for compressed files per worker (0 compresses them for every response)
    #[arg(long, value_name = "SIZE", default_value = "16m", value_parser = lowlat_http::units::parse_size)]
    pub compress_cache_bytes: u64,
}

fn parse_coding(text: &str) -> Result<Coding, String> {
    match Coding::from_token(text.trim().as_bytes()) {
        Some(Coding::Identity) | None => Err(format!(
            "{text:?} is not a coding this server compresses with (zstd, br, gzip)"
        )),
        Some(coding) => Ok(coding),
    }
}

fn parse_type(text: &str) -> Result<String, String> {
    let t = text.trim().to_ascii_lowercase();
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let ok = t == "*"
        || t.split_once('/')
            .is_some_and(|(ty, sub)| token(ty) && (sub == "*" || token(sub)));
    if ok {
        Ok(t)
    } else {
        Err(format!(
            "{text:?} is not a MIME type (e.g. text/html, text/*, application/json)"
        ))
    }
}

/// Compression levels, one per coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    pub gzip: u32,
    pub br: u32,
    pub zstd: i32,
}

/// Compression settings of one site, shared (read-only) by every worker.
#[derive(Debug, Clone)]
pub struct CompressConfig {
    /// Whether responses are compressed on the fly at all.
    pub on: bool,
    /// The codings compressed with.
    pub enabled: Codings,
    /// Every coding, the enabled ones first in the configured order, then the others in
    /// [`DEFAULT_ORDER`]: ties between precompressed siblings are broken by it too.
    pub order: [Coding; 3],
    /// Lower-case type patterns: `text/html`, `text/*`, `*`.
    types: Vec<String>,
    pub min_size: u64,
    pub max_size: u64,
    pub levels: Levels,
    /// Budget of each worker's compressed-file cache, bytes.
    pub cache_bytes: usize,
}

impl Default for CompressConfig {
    /// The flags' defaults: compression off.
    fn default() -> Self {
        use clap::{Args, FromArgMatches};
        let cmd = CompressArgs::augment_args(clap::Command::new("compress"));
        CompressArgs::from_arg_matches(&cmd.get_matches_from(["compress"]))
            .ok()
            .and_then(|args| Self::from_args(&args).ok())
            .expect("the flags' defaults check")
    }
}

impl CompressConfig {
    /// Checks the flags once at start.
    ///
    /// # Errors
    /// A one-line reason: an empty list, sizes the wrong way round.
    pub fn from_args(args: &CompressArgs) -> Result<Self, String> {
        if args.compress_encodings.is_empty() {
            return Err("--compress-encodings: name at least one of zstd, br, gzip".into());
        }
        if args.compress_types.is_empty() {
            return Err("--compress-types: name at least one type".into());
        }
        if args.compress_min_size > args.compress_max_size {
            return Err(format!(
                "--compress-min-size {} is above --compress-max-size {}",
                args.compress_min_size, args.compress_max_size
            ));
        }
        let mut order = Vec::with_capacity(3);
        let mut enabled = Codings::default();
        for &c in args.compress_encodings.iter().chain(&DEFAULT_ORDER) {
            if !order.contains(&c) {
                order.push(c);
            }
        }
        for &c in &args.compress_encodings {
            enabled = enabled.with(c);
        }
        let order: [Coding; 3] = order.try_into().map_err(|_| "bad coding order")?;
        Ok(Self {
            on: args.compress,
            enabled,
            order,
            types: args.compress_types.clone(),
            min_size: args.compress_min_size,
            max_size: args.compress_max_size,
            levels: Levels {
                gzip: args.compress_gzip_level,
                br: args.compress_br_level,
                zstd: args.compress_zstd_level,
            },
            cache_bytes: usize::try_from(args.compress_cache_bytes).map_err(|_| {
                format!(
                    "--compress-cache-bytes {} is too large",
                    args.compress_cache_bytes
                )
            })?,
        })
    }

    /// Whether a body of this `Content-Type` and length is compressed (when the client
    /// accepts a coding), and so whether its response varies by `Accept-Encoding`.
    #[must_use]
    pub fn applies(&self, content_type: &[u8], len: u64) -> bool {
        self.on && len >= self.min_size && len <= self.max_size && self.type_listed(content_type)
    }

    /// Whether the essence of `content_type` (parameters dropped) is listed.
    #[must_use]
    pub fn type_listed(&self, content_type: &[u8]) -> bool {
        let essence = content_type
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        self.types.iter().any(|t| {
            let t = t.as_bytes();
            match t.strip_suffix(b"*") {
                // `*` alone, or `text/*`: the family, slash included.
                Some(prefix) => {
                    essence.len() > prefix.len()
                        && essence[..prefix.len()].eq_ignore_ascii_case(prefix)
                }
                None => essence.eq_ignore_ascii_case(t),
            }
        })
    }

    /// The coding to compress a response with, for this `Accept-Encoding`.
    #[must_use]
    pub fn choose(&self, accept_encoding: Option<&[u8]>) -> Coding {
        crate::files::encoding::choose(accept_encoding, self.enabled, &self.order)
    }
}

/// An encoder failed (it should not: the inputs are bytes in memory).
#[derive(Debug, thiserror::Error)]
pub enum CompressError {
    #[error("gzip: {0}")]
    Gzip(#[from] flate2::CompressError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("identity is not a compression")]
    Identity,
}

/// One worker's encoders, made at first use and kept.
#[derive(Default)]
struct Encoders {
    gzip: Option<(u32, flate2::Compress)>,
    zstd: Option<(i32, zstd::bulk::Compressor<'static>)>,
    /// zstd's output, before it is appended (reused).
    zstd_out: Vec<u8>,
}

thread_local! {
    static ENCODERS: RefCell<Encoders> = RefCell::new(Encoders::default());
    static STATS: Cell<Stats> = const { Cell::new(Stats::ZERO) };
}

/// Appends `input` compressed with `coding` to `out`.
///
/// # Errors
/// When the encoder fails, or `coding` is identity; `out` is then as it was.
pub fn encode(
    coding: Coding,
    levels: &Levels,
    input: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), CompressError> {
    let start = out.len();
    let result = ENCODERS.with_borrow_mut(|e| match coding {
        Coding::Gzip => e.gzip(levels.gzip, input, out),
        Coding::Zstd => e.zstd(levels.zstd, input, out),
        Coding::Br => brotli(levels.br, input, out),
        Coding::Identity => Err(CompressError::Identity),
    });
    if result.is_err() {
        out.truncate(start);
    }
    result
}

impl Encoders {
    fn gzip(&mut self, level: u32, input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressError> {
        let c = match &mut self.gzip {
            Some((l, c)) if *l == level => {
                c.reset();
                c
            }
            slot => {
                let c = &mut slot
                    .insert((
                        level,
                        flate2::Compress::new_gzip(flate2::Compression::new(level), 15),
                    ))
                    .1;
                c
            }
        };
        // deflate's worst case is a few bytes per 16 KiB block over the input, plus the gzip
        // header and trailer (18 bytes); a second round covers any miscount.
        out.reserve(input.len() + input.len() / 1024 + 64);
        let before = c.total_in();
        loop {
            let fed = usize::try_from(c.total_in() - before).unwrap_or(input.len());
            let status = c.compress_vec(&input[fed..], out, flate2::FlushCompress::Finish)?;
            if status == flate2::Status::StreamEnd {
                return Ok(());
            }
            out.reserve(out.capacity().max(4096));
        }
    }

    fn zstd(&mut self, level: i32, input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressError> {
        let c = match &mut self.zstd {
            Some((l, c)) if *l == level => c,
            slot => &mut slot.insert((level, zstd::bulk::Compressor::new(level)?)).1,
        };
        // The compressor writes from the start of the buffer it is given, so into a buffer of
        // its own, then copied after what `out` holds.
        self.zstd_out.clear();
        self.zstd_out
            .reserve(zstd::zstd_safe::compress_bound(input.len()));
        c.compress_to_buffer(input, &mut self.zstd_out)?;
        out.extend_from_slice(&self.zstd_out);
        Ok(())
    }
}

fn brotli(level: u32, input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressError> {
    let params = brotli::enc::BrotliEncoderParams {
        quality: i32::try_from(level).unwrap_or(4),
        // 4 MiB window (brotli's default, lgwin 22); the encoder sizes its ring buffer from
        // the size hint, so a small body costs a small buffer.
        lgwin: 22,
        size_hint: input.len(),
        ..Default::default()
    };
    let mut w = brotli::CompressorWriter::with_params(out, 4096, &params);
    w.write_all(input)?;
    // Finishes the stream (no flush first: that would add an empty metablock).
    w.into_inner();
    Ok(())
}

/// Compressed responses and bytes saved, per coding (gzip, br, zstd), and the bytes this
/// worker's compressed-file caches hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    pub responses: [u64; 3],
    pub saved_bytes: [u64; 3],
    pub cache_bytes: u64,
}

impl Stats {
    const ZERO: Self = Self {
        responses: [0; 3],
        saved_bytes: [0; 3],
        cache_bytes: 0,
    };

    /// The order of the per-coding arrays.
    pub const CODINGS: [Coding; 3] = [Coding::Gzip, Coding::Br, Coding::Zstd];
}

/// Counts a response sent compressed: `identity_len` bytes became `encoded_len`.
pub fn count(coding: Coding, identity_len: u64, encoded_len: u64) {
    if let Some(i) = Stats::CODINGS.iter().position(|&c| c == coding) {
        STATS.with(|s| {
            let mut v = s.get();
            v.responses[i] += 1;
            v.saved_bytes[i] += identity_len.saturating_sub(encoded_len);
            s.set(v);
        });
    }
}

/// Adds `delta` to the bytes this worker's compressed-file caches hold.
pub fn add_cache_bytes(delta: i64) {
    STATS.with(|s| {
        let mut v = s.get();
        v.cache_bytes = v.cache_bytes.saturating_add_signed(delta);
        s.set(v);
    });
}

/// The calling worker's counts.
#[must_use]
pub fn stats() -> Stats {
    STATS.with(Cell::get)
}

/// Whether a handler's own header lines forbid compressing its body: it is encoded already,
/// a part, has its own validator, or says `no-transform` (RFC 9111 §5.2.2.6).
#[must_use]
pub fn lines_forbid(extra: &[u8]) -> bool {
    extra.split(|&b| b == b'\n').any(|line| {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return false;
        };
        let name = line[..colon].trim_ascii();
        let value = &line[colon + 1..];
        name.eq_ignore_ascii_case(b"content-encoding")
            || name.eq_ignore_ascii_case(b"content-range")
            || name.eq_ignore_ascii_case(b"etag")
            || (name.eq_ignore_ascii_case(b"cache-control")
                && value
                    .windows(12)
                    .any(|w| w.eq_ignore_ascii_case(b"no-transform")))
    })
}

/// The line every compressible response carries, compressed or not.
pub const VARY_LINE: &[u8] = b"Vary: Accept-Encoding\r\n";

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    fn config(extra: &[&str]) -> CompressConfig {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            c: CompressArgs,
        }
        let cli = Cli::try_parse_from(std::iter::once("x").chain(extra.iter().copied())).unwrap();
        CompressConfig::from_args(&cli.c).unwrap()
    }

    #[test]
    fn types_and_sizes() {
        let c = config(&["--compress"]);
        for (ty, len, want) in [
            ("text/html; charset=utf-8", 10_000, true),
            ("TEXT/CSS", 600, true),
            ("application/json", 512, true),
            ("application/json", 511, false),
            ("image/svg+xml; charset=utf-8", 4096, true),
            ("image/png", 4096, false),
            ("application/octet-stream", 4096, false),
            ("text/", 4096, false),
            ("text/html", 2 << 20, false),
        ] {
            assert_eq!(c.applies(ty.as_bytes(), len), want, "{ty} {len}");
        }
        assert!(!config(&[]).applies(b"text/html", 10_000), "off by default");
        let star = config(&["--compress", "--compress-types", "*"]);
        assert!(star.applies(b"image/png", 4096));
    }

    #[test]
    fn order_and_encodings() {
        let c = config(&["--compress-encodings", "gzip,br"]);
        assert_eq!(c.order, [Coding::Gzip, Coding::Br, Coding::Zstd]);
        assert!(c.enabled.has(Coding::Gzip) && !c.enabled.has(Coding::Zstd));
        assert_eq!(c.choose(Some(b"zstd, br, gzip")), Coding::Gzip);
        assert_eq!(c.choose(Some(b"zstd")), Coding::Identity);
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(parse_coding("deflate").is_err());
        assert!(parse_coding("identity").is_err());
        assert!(parse_type("html").is_err());
        assert!(parse_type("text/ht ml").is_err());
        assert_eq!(parse_type(" Text/HTML ").unwrap(), "text/html");
        let args = {
            use clap::Parser;
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                c: CompressArgs,
            }
            Cli::try_parse_from(["x", "--compress-min-size", "2m"])
                .unwrap()
                .c
        };
        assert!(CompressConfig::from_args(&args).is_err());
    }

    /// Every coding round-trips through a decoder other than its encoder's state, twice (the
    /// reused state must start clean), after bytes already in the buffer.
    #[test]
    fn round_trips() {
        let text: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("<li>item {}</li>\n", i % 97).into_bytes())
            .collect();
        let levels = Levels {
            gzip: 1,
            br: 4,
            zstd: 3,
        };
        for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            for _ in 0..2 {
                let mut out = b"HEAD".to_vec();
                encode(coding, &levels, &text, &mut out).unwrap();
                assert_eq!(&out[..4], b"HEAD");
                let body = &out[4..];
                assert!(body.len() < text.len() / 4, "{coding:?}: {}", body.len());
                let mut back = Vec::new();
                match coding {
                    Coding::Gzip => {
                        flate2::read::GzDecoder::new(body)
                            .read_to_end(&mut back)
                            .unwrap();
                    }
                    Coding::Br => {
                        brotli::Decompressor::new(body, 4096)
                            .read_to_end(&mut back)
                            .unwrap();
                    }
                    _ => back = zstd::stream::decode_all(body).unwrap(),
                }
                assert_eq!(back, text, "{coding:?}");
            }
        }
        let mut out = Vec::new();
        assert!(encode(Coding::Identity, &levels, b"x", &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn forbidding_lines() {
        assert!(!lines_forbid(b"Vary: Accept\r\n"));
        assert!(lines_forbid(b"Vary: Accept\r\ncontent-encoding: gzip\r\n"));
        assert!(lines_forbid(b"ETag: \"x\"\r\n"));
        assert!(lines_forbid(b"Cache-Control: public, No-Transform\r\n"));
        assert!(!lines_forbid(b"Cache-Control: public\r\n"));
    }
}
