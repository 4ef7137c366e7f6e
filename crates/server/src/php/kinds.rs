//! What a path names under a PHP site's document root (a file, a directory, nothing), checked
//! as the static file handler opens files and remembered per worker for `--cache-valid` (1 s
//! by default, nginx's `open_file_cache_valid`): a PHP request would otherwise open, `fstat`,
//! resolve (`readlink` of `/proc/self/fd`) and close its script on every request. What names
//! nothing is not remembered (nginx's `open_file_cache_errors off`): a file that appears — an
//! upload asked for at once — is found at once.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use crate::clock::loop_now;

use super::config::PhpConfig;
use crate::files::cache::Cache;
use crate::files::FilesConfig;

/// What a path names on the file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    File,
    Directory,
    Missing,
    Status(u16),
}

/// Memory for the remembered paths, per worker: a few thousand scripts and directories.
const BUDGET: usize = 256 * 1024;

/// A worker's remembered answers.
pub(super) struct Kinds {
    cache: Cache<(Kind, Instant)>,
    valid: Duration,
}

impl Kinds {
    pub(super) fn new(valid: Duration) -> Self {
        Kinds {
            cache: Cache::new(BUDGET, 0),
            valid,
        }
    }

    /// What `path` (normalised) names under the root.
    pub(super) fn of(&mut self, cfg: &PhpConfig, files: &FilesConfig, path: &[u8]) -> Kind {
        let now = loop_now();
        if let Some(&mut (kind, at)) = self.cache.get_mut(path) {
            if now.saturating_duration_since(at) < self.valid {
                return kind;
            }
        }
        let kind = look(cfg, files, path);
        if matches!(kind, Kind::File | Kind::Directory) && !self.valid.is_zero() {
            self.cache.insert(path, (kind, now), path.len() + 64, false);
        } else {
            self.cache.remove(path);
        }
        kind
    }
}

/// What `path` names: opened and checked as the static file handler opens files (under the
/// root, symlinks resolved, no dotfile on the way).
fn look(cfg: &PhpConfig, files: &FilesConfig, path: &[u8]) -> Kind {
    let rel = OsStr::from_bytes(path.strip_prefix(b"/").unwrap_or(path));
    let full = cfg.root.join(rel);
    match crate::files::entry::open_checked(files, &cfg.root, &full) {
        Ok((_, meta)) if meta.is_file() => Kind::File,
        Ok((_, meta)) if meta.is_dir() => Kind::Directory,
        Ok(_) | Err(404) => Kind::Missing,
        Err(status) => Kind::Status(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_remembered_for_a_while_and_missing_ones_never() {
        let (_dir, cfg, files) = super::super::tests::site();
        let mut kinds = Kinds::new(Duration::from_millis(300));
        let info = cfg.root.join("info.php");
        assert_eq!(kinds.of(&cfg, &files, b"/info.php"), Kind::File);
        assert_eq!(kinds.of(&cfg, &files, b"/blog"), Kind::Directory);
        // Gone, but trusted until the time is up.
        std::fs::remove_file(&info).unwrap();
        assert_eq!(kinds.of(&cfg, &files, b"/info.php"), Kind::File);
        std::thread::sleep(Duration::from_millis(350));
        assert_eq!(kinds.of(&cfg, &files, b"/info.php"), Kind::Missing);
        // Back: seen at once, as nothing was remembered of its absence.
        std::fs::write(&info, "x").unwrap();
        assert_eq!(kinds.of(&cfg, &files, b"/info.php"), Kind::File);
        // Nothing remembered at all with no time to trust.
        let mut never = Kinds::new(Duration::ZERO);
        assert_eq!(never.of(&cfg, &files, b"/info.php"), Kind::File);
        std::fs::remove_file(&info).unwrap();
        assert_eq!(never.of(&cfg, &files, b"/info.php"), Kind::Missing);
    }
}
