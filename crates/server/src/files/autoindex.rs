//! Directory listings (`--autoindex`), off by default like nginx's.
//!
//! Names come from the file system, so they are untrusted: each is percent-encoded in the link
//! (so `?`, `#`, `%` and spaces stay part of the name) and HTML-escaped in the text (so `<script>`
//! is shown, not run). Only what a request could reach is listed: no dotfiles unless served, no
//! name a URL path cannot carry, no symlink leading outside the root unless those are followed.
//! Listings are built per request and never cached: they are rare, and a stale listing is worse
//! than a slow one.

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path};

use super::config::FilesConfig;
use super::path::encode_path;

/// Whether the symlink `link` resolves to a place under `root` with no dot-segment below it
/// (a dangling link resolves nowhere, and is left out).
fn leads_inside(link: &Path, root: &Path, dotfiles: bool) -> bool {
    std::fs::canonicalize(link).is_ok_and(|real| {
        real.strip_prefix(root).is_ok_and(|below| {
            below.components().all(|c| match c {
                Component::Normal(n) => dotfiles || !n.as_encoded_bytes().starts_with(b"."),
                _ => false,
            })
        })
    })
}

/// Most entries listed; a larger directory is cut (and says so), bounding the work per request.
pub const MAX_LISTED: usize = 10_000;

/// Renders the listing of `dir` (under `cfg`'s root), reached as `url_path` (normalised, with
/// trailing slash), into `out`.
///
/// # Errors
/// When the directory cannot be read.
pub fn render(
    cfg: &FilesConfig,
    root: &Path,
    dir: &Path,
    url_path: &str,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut entries: Vec<(String, bool, u64, u64)> = Vec::new();
    let mut truncated = false;
    for item in std::fs::read_dir(dir)? {
        let Ok(item) = item else { continue };
        // Only what a request could reach is listed: names a URL path can carry (UTF-8, no
        // backslash or control character, which the path rules refuse), no dotfiles unless
        // served, and no symlink leading where files are not served from. A listing must not
        // tell the size and date of a file it would refuse.
        let Some(name) = item.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name.bytes().any(|b| b == b'\\' || b < 0x20 || b == 0x7f)
            || (name.starts_with('.') && !cfg.dotfiles)
        {
            continue;
        }
        let is_link = item.file_type().is_ok_and(|t| t.is_symlink());
        if is_link
            && !cfg.follow_symlinks_outside
            && !leads_inside(&item.path(), root, cfg.dotfiles)
        {
            continue;
        }
        if entries.len() >= MAX_LISTED {
            truncated = true;
            break;
        }
        // Follows symlinks, like the file handler; one that dangles is listed as a file.
        let meta = std::fs::metadata(item.path()).ok();
        let is_dir = meta.as_ref().is_some_and(std::fs::Metadata::is_dir);
        let size = meta.as_ref().map_or(0, MetadataExt::size);
        let mtime = meta
            .as_ref()
            .map_or(0, |m| u64::try_from(m.mtime()).unwrap_or(0));
        entries.push((name, is_dir, size, mtime));
    }
    // Directories first, then by name: what a reader scans for.
    entries.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));

    out.clear();
    let mut title = String::new();
    escape_html(url_path, &mut title);
    let _ = write!(
        Buf(out),
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n\
         <body><h1>Index of {title}</h1><hr><pre>\n"
    );
    if url_path != "/" {
        out.extend_from_slice(b"<a href=\"../\">../</a>\n");
    }
    let mut text = String::new();
    for (name, is_dir, size, mtime) in &entries {
        out.extend_from_slice(b"<a href=\"");
        encode_path(name.as_bytes(), false, out);
        if *is_dir {
            out.push(b'/');
        }
        out.extend_from_slice(b"\">");
        text.clear();
        escape_html(name, &mut text);
        if *is_dir {
            text.push('/');
        }
        out.extend_from_slice(text.as_bytes());
        let date = super::entry::http_date(*mtime);
        let size = if *is_dir {
            "-".to_owned()
        } else {
            size.to_string()
        };
        let _ = writeln!(Buf(out), "</a>  {date}  {size}");
    }
    if truncated {
        let _ = writeln!(Buf(out), "(only the first {MAX_LISTED} entries are listed)");
    }
    out.extend_from_slice(b"</pre><hr></body></html>\n");
    Ok(())
}

/// Appends `text` with `& < > " '` escaped.
pub fn escape_html(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// `fmt::Write` into a byte vector.
struct Buf<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Buf<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        let mut s = String::new();
        escape_html("<a href='x'>&\"", &mut s);
        assert_eq!(s, "&lt;a href=&#39;x&#39;&gt;&amp;&quot;");
    }

    #[test]
    fn lists_escaped_and_encoded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("<b>&x y#?.txt"), b"1").unwrap();
        std::fs::write(dir.path().join(".secret"), b"1").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let root = dir.path().canonicalize().unwrap();
        let cfg = FilesConfig {
            root: Some(root.clone()),
            index: "index.html".into(),
            autoindex: true,
            dotfiles: false,
            follow_symlinks_outside: false,
            precompressed: true,
            cache_control: None,
            cache_bytes: 0,
            cache_file_max: 0,
            cache_valid: std::time::Duration::from_secs(1),
            started_secs: 0,
            max_cached_fds: 0,
            compress: crate::compress::CompressConfig::default(),
            try_files: Vec::new(),
        };
        let mut out = Vec::new();
        render(&cfg, &root, &root, "/d<i>/", &mut out).unwrap();
        let html = String::from_utf8(out).unwrap();
        assert!(html.contains("Index of /d&lt;i&gt;/"));
        assert!(html.contains("<a href=\"%3Cb%3E%26x%20y%23%3F.txt\">&lt;b&gt;&amp;x y#?.txt</a>"));
        assert!(html.contains("<a href=\"sub/\">sub/</a>"));
        assert!(!html.contains("secret"));
        assert!(html.find("sub/").unwrap() < html.find("&lt;b&gt;").unwrap());
    }
}
