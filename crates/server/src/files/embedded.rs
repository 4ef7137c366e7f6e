//! The default site, built into the binary, served when no `--root` is given: a welcome page at
//! `/` and `/index.html`, and `/100.html` (99 × `X` and a newline), the seed benchmark's file, so
//! `lowlat serve` answers it out of the box.
//!
//! Its files have no mtime: `Last-Modified` is the server's start time, and the entity-tag is
//! derived from the content, so it is stable across restarts of the same binary.

use std::time::Instant;

use super::cache::Fnv;
use super::config::FilesConfig;
use super::encoding::Coding;
use super::entry::{Body, Entry, Variant};

/// The welcome page.
pub const INDEX_HTML: &[u8] = include_bytes!("embedded/index.html");

/// The seed benchmark's 100-byte file.
pub const HUNDRED_HTML: &[u8] = include_bytes!("embedded/100.html");

/// The embedded files: (normalised path, name for its type, content).
const FILES: [(&str, &str, &[u8]); 3] = [
    ("/", "index.html", INDEX_HTML),
    ("/index.html", "index.html", INDEX_HTML),
    ("/100.html", "100.html", HUNDRED_HTML),
];

/// The entries of the embedded site, by normalised path.
#[must_use]
pub fn entries(cfg: &FilesConfig) -> Vec<(&'static str, Entry)> {
    FILES
        .iter()
        .map(|&(path, name, content)| {
            let mut hash = Fnv::default();
            std::hash::Hasher::write(&mut hash, content);
            let etag = format!(
                "\"e{:x}-{:x}\"",
                std::hash::Hasher::finish(&hash),
                content.len()
            );
            let content_type = super::mime::content_type(name);
            let compressible = cfg
                .compress
                .applies(content_type.as_bytes(), content.len() as u64);
            let variant = Variant::new(
                cfg,
                &content_type,
                Coding::Identity,
                compressible,
                Body::Memory(content.into()),
                content.len() as u64,
                etag,
                cfg.started_secs,
                None,
            );
            let encoded = if compressible {
                super::entry::encoded_heads(cfg, &content_type, &variant)
            } else {
                Vec::new()
            };
            let entry = Entry {
                variants: [Some(variant), None, None, None],
                encoded,
                fs_path: None,
                checked: Instant::now(),
                cacheable: true,
            };
            (path, entry)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hundred_bytes() {
        assert_eq!(HUNDRED_HTML.len(), 100);
        assert!(HUNDRED_HTML[..99].iter().all(|&b| b == b'X'));
        assert_eq!(HUNDRED_HTML[99], b'\n');
    }
}
