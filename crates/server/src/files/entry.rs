//! What the cache holds for one URL, and how it is built from the file system: the file's
//! representations (identity and any precompressed siblings), each with its validators and its
//! response header lines encoded once, so that a hit only copies bytes.
//!
//! Opening is where the security rules that need the file system live: every file is opened
//! with `O_NONBLOCK` (a FIFO in the tree cannot stall the worker), then the path the kernel
//! actually resolved is read back from `/proc/self/fd` and must lie under the root and contain
//! no dot-segment below it, unless symlinks outside the root are allowed. Checking the opened
//! descriptor rather than the name leaves no window between check and use.
//!
//! Small files are read into memory as a consistent snapshot: the size and mtime are checked
//! before and after the read, so a file rewritten meanwhile is re-read, never served as a mix of
//! two versions with the wrong length.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use super::config::FilesConfig;
use super::encoding::Coding;

/// 9999-12-31T23:59:59Z: the last instant an IMF-fixdate can show (`httpdate` panics past it,
/// and `touch -d` can set any mtime).
pub const LAST_HTTP_DATE_SECS: u64 = 253_402_300_799;

/// An IMF-fixdate for seconds since the epoch, clamped to what the format can show.
#[must_use]
pub fn http_date(secs: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs.min(LAST_HTTP_DATE_SECS)))
}

/// How many times a small file is re-read when it changes while being read.
const SNAPSHOT_TRIES: usize = 3;

/// What identifies one version of a file: if none of these changed, neither did the file (short
/// of a rewrite that restores size and both timestamps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    pub fn of(meta: &Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// Where a representation's bytes are.
#[derive(Debug)]
pub enum Body {
    /// Held in memory (small files, the embedded site).
    Memory(Box<[u8]>),
    /// Sent with `sendfile` from this open file.
    File(Rc<File>),
}

/// One representation of a resource: the file itself or a precompressed sibling.
#[derive(Debug)]
pub struct Variant {
    pub body: Body,
    pub len: u64,
    /// Strong entity-tag, quotes included.
    pub etag: Box<[u8]>,
    /// `Last-Modified` value (IMF-fixdate).
    pub last_modified: Box<[u8]>,
    pub mtime_secs: u64,
    /// Header lines for 200 and 206: Content-Type, Content-Encoding, Last-Modified, ETag,
    /// Accept-Ranges, Cache-Control, Vary.
    pub head_ok: Box<[u8]>,
    /// Header lines for 304 (RFC 9110 §15.4.5: the validators and the caching fields).
    pub head_not_modified: Box<[u8]>,
    /// The file version this was built from; `None` for embedded content.
    pub id: Option<FileId>,
}

/// The head of a representation compressed on the fly: its validators and header lines (known
/// before anything is compressed, so a 304 costs no compression); the body lives in the
/// worker's compressed-file cache.
#[derive(Debug)]
pub struct EncodedHeads {
    pub coding: Coding,
    /// The identity's entity-tag with the coding appended inside the quotes (`"…-gzip"`), as
    /// caddy does: a strong validator, since the compressed bytes are a function of the file
    /// version, the coding and the level, and distinct from the identity's, so a cache holding
    /// one representation never revalidates it with the other's tag.
    pub etag: Box<[u8]>,
    /// Content-Type, Content-Encoding, Last-Modified, ETag, Cache-Control, Vary; no
    /// Accept-Ranges (ranges are answered from the identity body).
    pub head_ok: Box<[u8]>,
    pub head_not_modified: Box<[u8]>,
}

/// A cached resource.
#[derive(Debug)]
pub struct Entry {
    /// By [`Coding::index`]: identity always, gzip, br and zstd when their siblings exist.
    pub variants: [Option<Variant>; 4],
    /// Heads of the on-the-fly codings, when the identity body is compressible (type, size,
    /// a stable snapshot, compression on); empty otherwise.
    pub encoded: Vec<EncodedHeads>,
    /// The identity file's path, for revalidation; `None` for embedded content.
    pub fs_path: Option<PathBuf>,
    /// When the file system was last checked for a newer version.
    pub checked: Instant,
    /// Built from a stable snapshot, so safe to keep.
    pub cacheable: bool,
}

impl Entry {
    /// Whether precompressed siblings exist.
    #[must_use]
    pub fn has_siblings(&self) -> bool {
        self.variants[1..].iter().any(Option::is_some)
    }

    /// Whether the response depends on `Accept-Encoding` (then every one carries `Vary`):
    /// precompressed siblings exist, or the body is compressed on the fly.
    #[must_use]
    pub fn varies(&self) -> bool {
        self.has_siblings() || !self.encoded.is_empty()
    }

    /// The head of the on-the-fly `coding`, when this entry is compressible with it.
    #[must_use]
    pub fn encoded(&self, coding: Coding) -> Option<&EncodedHeads> {
        self.encoded.iter().find(|e| e.coding == coding)
    }

    /// The set of codings whose siblings exist.
    #[must_use]
    pub fn siblings(&self) -> super::encoding::Codings {
        [Coding::Gzip, Coding::Br, Coding::Zstd]
            .into_iter()
            .filter(|c| self.variants[c.index()].is_some())
            .fold(super::encoding::Codings::default(), |s, c| s.with(c))
    }

    /// The representation for `coding`, falling back to identity.
    #[must_use]
    pub fn variant(&self, coding: Coding) -> Option<&Variant> {
        self.variants[coding.index()]
            .as_ref()
            .or(self.variants[0].as_ref())
    }

    /// Memory this entry holds, for the cache's budget: bodies, header blocks, and a fixed
    /// allowance for the structure and its map slot.
    #[must_use]
    pub fn cost(&self, key_len: usize) -> usize {
        let variants: usize = self
            .variants
            .iter()
            .flatten()
            .map(|v| {
                let body = match &v.body {
                    Body::Memory(b) => b.len(),
                    Body::File(_) => 0,
                };
                body + v.head_ok.len() + v.head_not_modified.len() + v.etag.len() + 64
            })
            .sum();
        let encoded: usize = self
            .encoded
            .iter()
            .map(|e| e.etag.len() + e.head_ok.len() + e.head_not_modified.len() + 64)
            .sum();
        variants
            + encoded
            + 2 * key_len
            + 256
            + self.fs_path.as_ref().map_or(0, |p| p.as_os_str().len())
    }

    /// Whether any representation keeps a descriptor open.
    #[must_use]
    pub fn holds_fd(&self) -> bool {
        self.variants
            .iter()
            .flatten()
            .any(|v| matches!(v.body, Body::File(_)))
    }

    /// Whether the files behind this entry are unchanged: one `stat` per representation (and
    /// per absent sibling, which must still be absent).
    #[must_use]
    pub fn still_current(&self, precompressed: bool) -> bool {
        let Some(path) = &self.fs_path else {
            return true;
        };
        for coding in [Coding::Identity, Coding::Gzip, Coding::Br, Coding::Zstd] {
            if coding != Coding::Identity && !precompressed {
                continue;
            }
            let now = std::fs::metadata(sibling(path, coding))
                .ok()
                .filter(Metadata::is_file)
                .map(|m| FileId::of(&m));
            let then = self.variants[coding.index()].as_ref().and_then(|v| v.id);
            if now != then {
                return false;
            }
        }
        true
    }

    /// For an entry sending from a descriptor: whether that file still has the size and mtime
    /// it was announced with (one `fstat`, cheap beside a `sendfile` of a large file).
    #[must_use]
    pub fn open_files_unchanged(&self) -> bool {
        self.variants
            .iter()
            .flatten()
            .all(|v| match (&v.body, v.id) {
                (Body::File(f), Some(id)) => f.metadata().is_ok_and(|m| {
                    let now = FileId::of(&m);
                    now.size == id.size && now.mtime == id.mtime
                }),
                _ => true,
            })
    }
}

/// The result of looking a normalised path up on disk.
#[derive(Debug)]
pub enum Lookup {
    /// A file to serve.
    Found(Box<Entry>),
    /// A directory named without its trailing slash: 301 to the slashed URL.
    Redirect,
    /// A directory without an index, to be listed.
    Listing(PathBuf),
    /// An error status: 403, 404, 500, 503.
    Status(u16),
}

/// Resolves `norm` (a path from [`super::path::normalize`]) under the root.
#[must_use]
pub fn load(cfg: &FilesConfig, root: &Path, norm: &str, now: Instant) -> Lookup {
    let rel = norm.trim_start_matches('/');
    let fs_path = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    let (file, meta) = match open_checked(cfg, root, &fs_path) {
        Ok(opened) => opened,
        Err(status) => return Lookup::Status(status),
    };
    if meta.is_dir() {
        if !norm.ends_with('/') {
            return Lookup::Redirect;
        }
        drop(file);
        let index_path = fs_path.join(&cfg.index);
        return match open_checked(cfg, root, &index_path) {
            Ok((index, meta)) if meta.is_file() => Lookup::Found(Box::new(build(
                cfg, root, index_path, index, &meta, &cfg.index, now,
            ))),
            Ok(_) | Err(404) => {
                if cfg.autoindex {
                    Lookup::Listing(fs_path)
                } else {
                    // nginx's answer for a directory it may not list.
                    Lookup::Status(403)
                }
            }
            Err(status) => Lookup::Status(status),
        };
    }
    if !meta.is_file() || norm.ends_with('/') {
        // FIFOs, sockets, devices are never served.
        return Lookup::Status(404);
    }
    let name = rel.rsplit('/').next().unwrap_or(rel).to_owned();
    Lookup::Found(Box::new(build(cfg, root, fs_path, file, &meta, &name, now)))
}

/// Builds the entry for an opened regular file and its siblings.
fn build(
    cfg: &FilesConfig,
    root: &Path,
    fs_path: PathBuf,
    file: File,
    meta: &Metadata,
    name: &str,
    now: Instant,
) -> Entry {
    let content_type = super::mime::content_type(name);
    let mut cacheable = true;
    let mut raw: [Option<(Body, Metadata)>; 4] = [None, None, None, None];
    let (body, meta, stable) = read_body(cfg, file, meta.clone());
    cacheable &= stable;
    raw[0] = Some((body, meta));
    if cfg.precompressed {
        for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let path = sibling(&fs_path, coding);
            if let Ok((file, meta)) = open_checked(cfg, root, &path) {
                if meta.is_file() {
                    let (body, meta, stable) = read_body(cfg, file, meta);
                    cacheable &= stable;
                    raw[coding.index()] = Some((body, meta));
                }
            }
        }
    }
    let identity_len = raw[0].as_ref().map_or(0, |(body, meta)| match body {
        Body::Memory(b) => b.len() as u64,
        Body::File(_) => meta.size(),
    });
    let compressible = cacheable && cfg.compress.applies(content_type.as_bytes(), identity_len);
    let vary = raw[1..].iter().any(Option::is_some) || compressible;
    let mut variants: [Option<Variant>; 4] = [None, None, None, None];
    for (coding, slot) in [Coding::Identity, Coding::Gzip, Coding::Br, Coding::Zstd]
        .into_iter()
        .zip(raw)
    {
        if let Some((body, meta)) = slot {
            variants[coding.index()] = Some(variant_from_file(
                cfg,
                &content_type,
                coding,
                vary,
                body,
                &meta,
            ));
        }
    }
    let encoded = match &variants[0] {
        Some(identity) if compressible => encoded_heads(cfg, &content_type, identity),
        _ => Vec::new(),
    };
    Entry {
        variants,
        encoded,
        fs_path: Some(fs_path),
        checked: now,
        cacheable,
    }
}

/// The heads of every coding the site compresses with, for a compressible identity variant.
#[must_use]
pub fn encoded_heads(
    cfg: &FilesConfig,
    content_type: &str,
    identity: &Variant,
) -> Vec<EncodedHeads> {
    let last_modified = String::from_utf8_lossy(&identity.last_modified);
    cfg.compress
        .order
        .iter()
        .filter(|&&c| cfg.compress.enabled.has(c))
        .map(|&coding| {
            let base = String::from_utf8_lossy(&identity.etag);
            let etag = match base.strip_suffix('"') {
                Some(open) => format!("{open}-{}\"", coding.token()),
                None => format!("{base}-{}", coding.token()),
            };
            let common = common_lines(cfg, &last_modified, &etag, true);
            let ok = format!(
                "Content-Type: {content_type}\r\nContent-Encoding: {}\r\n{common}",
                coding.token()
            );
            EncodedHeads {
                coding,
                etag: etag.into_bytes().into_boxed_slice(),
                head_ok: ok.into_bytes().into_boxed_slice(),
                head_not_modified: common.into_bytes().into_boxed_slice(),
            }
        })
        .collect()
}

/// The lines a 304 repeats (RFC 9110 §15.4.5): validators and caching fields.
fn common_lines(cfg: &FilesConfig, last_modified: &str, etag: &str, vary: bool) -> String {
    let mut common = String::new();
    common.push_str("Last-Modified: ");
    common.push_str(last_modified);
    common.push_str("\r\nETag: ");
    common.push_str(etag);
    common.push_str("\r\n");
    if let Some(cc) = &cfg.cache_control {
        common.push_str("Cache-Control: ");
        common.push_str(cc);
        common.push_str("\r\n");
    }
    if vary {
        common.push_str("Vary: Accept-Encoding\r\n");
    }
    common
}

fn variant_from_file(
    cfg: &FilesConfig,
    content_type: &str,
    coding: Coding,
    vary: bool,
    body: Body,
    meta: &Metadata,
) -> Variant {
    let len = match &body {
        Body::Memory(b) => b.len() as u64,
        Body::File(_) => meta.size(),
    };
    // Strong: a new version of the file changes its size, mtime (to the nanosecond) or inode.
    let etag = format!(
        "\"{:x}-{:x}{:08x}-{:x}\"",
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ino()
    );
    let mtime_secs = u64::try_from(meta.mtime()).unwrap_or(0);
    Variant::new(
        cfg,
        content_type,
        coding,
        vary,
        body,
        len,
        etag,
        mtime_secs,
        Some(FileId::of(meta)),
    )
}

impl Variant {
    /// A representation with its header blocks encoded.
    #[allow(clippy::too_many_arguments)] // one constructor, every field named at its call
    pub fn new(
        cfg: &FilesConfig,
        content_type: &str,
        coding: Coding,
        vary: bool,
        body: Body,
        len: u64,
        etag: String,
        mtime_secs: u64,
        id: Option<FileId>,
    ) -> Self {
        let mtime_secs = mtime_secs.min(LAST_HTTP_DATE_SECS);
        let last_modified = http_date(mtime_secs);
        let common = common_lines(cfg, &last_modified, &etag, vary);
        let mut ok = format!("Content-Type: {content_type}\r\n");
        if coding != Coding::Identity {
            ok.push_str("Content-Encoding: ");
            ok.push_str(coding.token());
            ok.push_str("\r\n");
        }
        ok.push_str(&common);
        ok.push_str("Accept-Ranges: bytes\r\n");
        Self {
            body,
            len,
            etag: etag.into_bytes().into_boxed_slice(),
            last_modified: last_modified.into_bytes().into_boxed_slice(),
            mtime_secs,
            head_ok: ok.into_bytes().into_boxed_slice(),
            head_not_modified: common.into_bytes().into_boxed_slice(),
            id,
        }
    }
}

/// Reads a small file into memory (a consistent snapshot), or keeps a large one open. Returns
/// the body, the metadata that describes it, and whether the snapshot was stable.
fn read_body(cfg: &FilesConfig, file: File, mut meta: Metadata) -> (Body, Metadata, bool) {
    for _ in 0..SNAPSHOT_TRIES {
        if meta.size() > cfg.cache_file_max {
            return (Body::File(Rc::new(file)), meta, true);
        }
        let Ok(bytes) = read_all(&file, meta.size()) else {
            break;
        };
        let Ok(after) = file.metadata() else {
            break;
        };
        let same = after.size() == meta.size()
            && after.mtime() == meta.mtime()
            && after.mtime_nsec() == meta.mtime_nsec();
        if same && bytes.len() as u64 == after.size() {
            return (Body::Memory(bytes.into_boxed_slice()), after, true);
        }
        meta = after;
    }
    // Still changing: send from the descriptor (the connection closes if it comes up short)
    // and keep nothing.
    (Body::File(Rc::new(file)), meta, false)
}

/// The whole content of an open file, if it still is the version `id` describes (for
/// compressing a file too large to be held in memory as it is).
#[must_use]
pub fn read_version(file: &File, id: FileId) -> Option<Vec<u8>> {
    let bytes = read_all(file, id.size).ok()?;
    let after = FileId::of(&file.metadata().ok()?);
    (after == id && bytes.len() as u64 == id.size).then_some(bytes)
}

/// Reads up to `expected + 1` bytes from the start (one more to notice growth), with `pread`
/// so the descriptor's offset does not matter.
fn read_all(file: &File, expected: u64) -> io::Result<Vec<u8>> {
    let want = usize::try_from(expected)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    let mut buf = vec![0u8; want];
    let mut filled = 0;
    while filled < want {
        match file.read_at(&mut buf[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

/// The path of a precompressed sibling (`x.css` → `x.css.br`).
#[must_use]
pub fn sibling(path: &Path, coding: Coding) -> PathBuf {
    if coding == Coding::Identity {
        return path.to_path_buf();
    }
    let mut os = path.as_os_str().to_os_string();
    os.push(coding.suffix());
    PathBuf::from(os)
}

/// Opens `path` read-only and non-blocking, and checks where it really is.
///
/// # Errors
/// The status to answer: 404 (missing, or refused by policy), 403 (permission), 503 (out of
/// descriptors), 500 (anything else).
pub fn open_checked(cfg: &FilesConfig, root: &Path, path: &Path) -> Result<(File, Metadata), u16> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| {
            // On the request path: said only at debug level.
            tracing::debug!(path = %path.display(), errno = e.raw_os_error(), "cannot open: {e}");
            error_status(&e)
        })?;
    let meta = file.metadata().map_err(|e| error_status(&e))?;
    if !cfg.follow_symlinks_outside && !contained(&file, path, root, cfg.dotfiles) {
        return Err(404);
    }
    Ok((file, meta))
}

/// Whether the opened file lies under `root` with no dot-segment below it (a symlink inside the
/// tree must not lead to a dotfile either).
fn contained(file: &File, path: &Path, root: &Path, dotfiles: bool) -> bool {
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        // Without /proc: resolve the name (racy, but still refuses what it sees outside).
        .or_else(|_| std::fs::canonicalize(path));
    let Ok(real) = real else {
        return false;
    };
    let Ok(below) = real.strip_prefix(root) else {
        return false;
    };
    below.components().all(|c| match c {
        Component::Normal(name) => dotfiles || !name.as_encoded_bytes().starts_with(b"."),
        _ => false,
    })
}

/// The status for a failed open or stat.
fn error_status(e: &io::Error) -> u16 {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => 403,
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG | libc::ENXIO) => 404,
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM) => 503,
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_far_in_the_future_do_not_panic() {
        assert_eq!(http_date(u64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn sibling_names() {
        let p = Path::new("/srv/www/app.css");
        assert_eq!(sibling(p, Coding::Zstd), Path::new("/srv/www/app.css.zst"));
        assert_eq!(sibling(p, Coding::Br), Path::new("/srv/www/app.css.br"));
        assert_eq!(sibling(p, Coding::Gzip), Path::new("/srv/www/app.css.gz"));
        assert_eq!(sibling(p, Coding::Identity), p);
    }

    #[test]
    fn errors_map_to_statuses() {
        for (errno, status) in [
            (libc::EACCES, 403),
            (libc::ENOENT, 404),
            (libc::ENOTDIR, 404),
            (libc::EMFILE, 503),
            (libc::EIO, 500),
        ] {
            assert_eq!(error_status(&io::Error::from_raw_os_error(errno)), status);
        }
    }
}
