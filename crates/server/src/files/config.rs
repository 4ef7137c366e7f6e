//! Static files' flags (`--root`, `--index`, the cache…) and the settings every worker shares,
//! checked once at start.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most cached entries per worker that keep a file descriptor open (large files), as nginx's
/// `open_file_cache max=1000`; fewer when the process may open few descriptors (see
/// [`fd_budget`]).
pub const MAX_CACHED_FDS: usize = 1000;

/// Cached descriptors each of `workers` workers may hold: at most a quarter of the process's
/// descriptor limit in all, so that connections, listeners and the files being opened always
/// have the rest, and at most [`MAX_CACHED_FDS`]. With the common soft limit of 1024 and two
/// workers that is 128 each.
#[must_use]
pub fn fd_budget(workers: usize) -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    let limit = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } == 0 {
        usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    (limit / 4 / workers.max(1)).min(MAX_CACHED_FDS)
}

/// Flags of `lowlat serve` for static files.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Static files")]
#[allow(clippy::struct_excessive_bools)] // independent on/off flags
pub struct FilesArgs {
    /// Serve files from this directory [default: the built-in site]
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// File served for a directory URL (ending in /)
    #[arg(long, value_name = "NAME", default_value = "index.html")]
    pub index: String,
    /// List directories that have no index file
    #[arg(long)]
    pub autoindex: bool,
    /// Serve files and directories whose name starts with a dot
    #[arg(long)]
    pub dotfiles: bool,
    /// Follow symlinks that lead outside the document root
    #[arg(long)]
    pub follow_symlinks_outside: bool,
    /// Do not serve precompressed siblings (x.css.br, x.css.gz, x.css.zst)
    #[arg(long)]
    pub no_precompressed: bool,
    /// Cache-Control value for files (e.g. "public, max-age=3600")
    #[arg(long, value_name = "VALUE")]
    pub cache_control: Option<String>,
    /// File cache size per worker (0 turns the cache off)
    #[arg(long, value_name = "SIZE", default_value = "64m", value_parser = parse_cache_bytes)]
    pub cache_bytes: u64,
    /// Largest file held in memory; larger ones are sent with sendfile
    #[arg(long, value_name = "SIZE", default_value = "64k", value_parser = lowlat_http::units::parse_nonzero_size)]
    pub cache_file_max: u64,
    /// How long a cached file is trusted before it is checked again with stat
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = lowlat_http::units::parse_positive_duration)]
    pub cache_valid: Duration,
    /// Compression on the fly: a site's setting, like the rest of these.
    #[command(flatten)]
    pub compress: crate::compress::CompressArgs,
    /// As nginx's try_files, one entry per flag in order: serve the first of $uri, $uri/,
    /// /index.html… that exists under --root; the last is served whatever it gives, or is a
    /// status (=404) (repeatable)
    #[arg(long = "try-files", value_name = "PATH|=STATUS", value_parser = parse_try_file)]
    pub try_files: Vec<TryFile>,
}

/// Most `try_files` entries: each may cost a lookup per request.
pub const MAX_TRY_FILES: usize = 8;

/// One `try_files` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TryFile {
    /// A path under the root, with variables (`$uri`, `$uri/`, `/index.html`).
    Path(crate::template::Template),
    /// `=404`: answer this status (the last entry only).
    Status(u16),
}

fn parse_try_file(text: &str) -> Result<TryFile, String> {
    if let Some(code) = text.strip_prefix('=') {
        return code
            .parse()
            .ok()
            .filter(|s| (200..=599).contains(s))
            .map(TryFile::Status)
            .ok_or_else(|| format!("{text:?}: ={code} is not a status from 200 to 599"));
    }
    if !(text.starts_with('/') || text.starts_with('$')) {
        return Err(format!(
            "{text:?}: an entry is a path from the root (/index.html, $uri, $uri/) or =STATUS"
        ));
    }
    crate::template::Template::compile(text)
        .map(TryFile::Path)
        .map_err(|e| format!("{text:?}: {e}"))
}

fn parse_cache_bytes(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    lowlat_http::units::parse_nonzero_size(text)
}

/// Static-file settings shared (read-only) by every worker.
#[derive(Debug)]
#[allow(clippy::struct_excessive_bools)] // independent on/off settings
pub struct FilesConfig {
    /// The document root, canonical (symlinks resolved); `None` serves the embedded site.
    pub root: Option<PathBuf>,
    /// Index file name for directories.
    pub index: String,
    pub autoindex: bool,
    pub dotfiles: bool,
    pub follow_symlinks_outside: bool,
    pub precompressed: bool,
    /// `Cache-Control` value, checked to be a valid field value.
    pub cache_control: Option<String>,
    /// Cache budget per worker, bytes.
    pub cache_bytes: usize,
    /// Files up to this size are held in memory.
    pub cache_file_max: u64,
    /// How long an entry is trusted without a `stat`.
    pub cache_valid: Duration,
    /// Start time, seconds since the epoch: the embedded site's `Last-Modified`.
    pub started_secs: u64,
    /// Cached entries holding a descriptor, per worker ([`fd_budget`]).
    pub max_cached_fds: usize,
    /// Compression on the fly, and the order of preference among precompressed siblings.
    pub compress: crate::compress::CompressConfig,
    /// `--try-files`, in order; empty: the request's own path only.
    pub try_files: Vec<TryFile>,
}

impl FilesConfig {
    /// Checks the flags once at start, for a server of `workers` workers.
    ///
    /// # Errors
    /// A one-line reason, e.g. a document root that does not exist.
    pub fn from_args(args: &FilesArgs, workers: usize) -> Result<Arc<Self>, String> {
        let root = match &args.root {
            None => None,
            Some(dir) => {
                let canonical = std::fs::canonicalize(dir)
                    .map_err(|e| format!("--root {}: {e}", dir.display()))?;
                if !canonical.is_dir() {
                    return Err(format!("--root {}: not a directory", dir.display()));
                }
                Some(canonical)
            }
        };
        let index = args.index.clone();
        if index.is_empty() || index == "." || index == ".." || index.contains(['/', '\\', '\0']) {
            return Err(format!("--index {index:?}: must be a plain file name"));
        }
        if let Some(cc) = &args.cache_control {
            // A field value (RFC 9110 §5.5): visible ASCII, spaces and tabs; no CR/LF that would
            // let the flag inject header lines.
            if cc.is_empty() || !cc.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)) {
                return Err(format!("--cache-control {cc:?}: not a valid header value"));
            }
        }
        if !args.try_files.is_empty() {
            if root.is_none() {
                return Err("--try-files needs --root (it looks for files there)".into());
            }
            if args.try_files.len() > MAX_TRY_FILES {
                return Err(format!("--try-files: at most {MAX_TRY_FILES} entries"));
            }
            let early = &args.try_files[..args.try_files.len() - 1];
            if early.iter().any(|t| matches!(t, TryFile::Status(_))) {
                return Err("--try-files: a status (=404) can only be the last entry".into());
            }
        }
        let cache_bytes = usize::try_from(args.cache_bytes)
            .map_err(|_| format!("--cache-bytes {} is too large", args.cache_bytes))?;
        let started_secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Arc::new(Self {
            root,
            index,
            autoindex: args.autoindex,
            dotfiles: args.dotfiles,
            follow_symlinks_outside: args.follow_symlinks_outside,
            precompressed: !args.no_precompressed,
            cache_control: args.cache_control.clone(),
            cache_bytes,
            cache_file_max: args.cache_file_max,
            cache_valid: args.cache_valid,
            started_secs,
            max_cached_fds: fd_budget(workers),
            compress: crate::compress::CompressConfig::from_args(&args.compress)?,
            try_files: args.try_files.clone(),
        }))
    }
}
