//! The state directory (`--state-dir`): the ACME account and the certificates obtained, kept
//! across restarts and shared by every lowlat process pointed at it.
//!
//! Layout, one folder per CA directory URL (a staging CA's certificates never mix with the
//! real one's):
//!
//! ```text
//! STATE_DIR/acme/<directory host and path>/
//!     account.json             the account's URL and private key (instant-acme's credentials)
//!     account.lock             held while the account is created
//!     certificates/<name>/     cert.pem (leaf first, then the chain), key.pem, lock
//!     challenges/<token>       HTTP-01 key authorizations under validation, for other processes
//! ```
//!
//! Every file is written to a temporary file in the same folder, flushed to disk, and renamed
//! over the old one, so a reader sees the old file or the new one, never half of one; files are
//! 0600 and folders 0700 (the keys are secrets). A name's `lock` (flock) is held while its
//! certificate is ordered and written, so two processes sharing the directory do not order the
//! same certificate twice: the second waits, then reads what the first stored.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::AcmeError;

/// Longest wait for a lock another process holds (an order takes seconds; a CA slow to
/// validate, a minute or two), after which this attempt fails and is retried later.
const LOCK_WAIT: Duration = Duration::from_secs(600);
/// How often a held lock is tried again.
const LOCK_POLL: Duration = Duration::from_millis(200);
/// Largest file read back (a chain is a few KiB).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// One CA's part of the state directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// A held lock; released when dropped (or when the process exits, even killed).
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

impl Store {
    /// The folder for `directory_url` under `state_dir`, created (0700) when missing.
    ///
    /// # Errors
    /// [`AcmeError::State`] when it cannot be created.
    pub fn open(state_dir: &Path, directory_url: &str) -> Result<Self, AcmeError> {
        let store = Self::at(state_dir, directory_url);
        for dir in [
            store.root.clone(),
            store.root.join("certificates"),
            store.challenges_dir(),
        ] {
            make_dir(&dir)?;
        }
        Ok(store)
    }

    /// The folder for `directory_url` under `state_dir`, without touching the disk.
    #[must_use]
    pub fn at(state_dir: &Path, directory_url: &str) -> Self {
        Self {
            root: state_dir.join("acme").join(issuer_dir(directory_url)),
        }
    }

    /// Where other processes' HTTP-01 key authorizations are published.
    #[must_use]
    pub fn challenges_dir(&self) -> PathBuf {
        self.root.join("challenges")
    }

    /// The stored account credentials (JSON), if any.
    ///
    /// # Errors
    /// [`AcmeError::State`] when the file exists but cannot be read.
    pub fn account(&self) -> Result<Option<String>, AcmeError> {
        read_optional(&self.root.join("account.json"))
    }

    /// Stores the account credentials.
    ///
    /// # Errors
    /// [`AcmeError::State`].
    pub fn save_account(&self, json: &str) -> Result<(), AcmeError> {
        write_atomic(&self.root.join("account.json"), json.as_bytes())
    }

    /// Drops the stored account (the CA no longer knows it): the next attempt creates one.
    pub fn forget_account(&self) {
        let _ = std::fs::remove_file(self.root.join("account.json"));
    }

    /// Waits for the account lock.
    ///
    /// # Errors
    /// [`AcmeError::State`] on an I/O error or after [`LOCK_WAIT`].
    pub fn lock_account(&self) -> Result<Lock, AcmeError> {
        lock(&self.root.join("account.lock"), LOCK_WAIT)
    }

    /// The folder of `name`'s certificate.
    #[must_use]
    pub fn cert_dir(&self, name: &str) -> PathBuf {
        self.root.join("certificates").join(name)
    }

    /// Waits for `name`'s lock, held while its certificate is ordered and written.
    ///
    /// # Errors
    /// [`AcmeError::State`] on an I/O error or after [`LOCK_WAIT`].
    pub fn lock_cert(&self, name: &str) -> Result<Lock, AcmeError> {
        let dir = self.cert_dir(name);
        make_dir(&dir)?;
        lock(&dir.join("lock"), LOCK_WAIT)
    }

    /// `name`'s lock if no other process holds it now.
    ///
    /// # Errors
    /// [`AcmeError::State`] on an I/O error.
    pub fn try_lock_cert(&self, name: &str) -> Result<Option<Lock>, AcmeError> {
        let dir = self.cert_dir(name);
        make_dir(&dir)?;
        try_lock(&dir.join("lock"))
    }

    /// `name`'s stored chain and key (PEM), if both are there.
    ///
    /// # Errors
    /// [`AcmeError::State`] when a file exists but cannot be read.
    pub fn cert(&self, name: &str) -> Result<Option<(String, String)>, AcmeError> {
        let dir = self.cert_dir(name);
        let chain = read_optional(&dir.join("cert.pem"))?;
        let key = read_optional(&dir.join("key.pem"))?;
        Ok(chain.zip(key))
    }

    /// Stores `name`'s new chain and key. The caller holds the name's lock, so no reader that
    /// takes it sees the new key beside the old chain.
    ///
    /// # Errors
    /// [`AcmeError::State`].
    pub fn save_cert(&self, name: &str, chain_pem: &str, key_pem: &str) -> Result<(), AcmeError> {
        let dir = self.cert_dir(name);
        make_dir(&dir)?;
        write_atomic(&dir.join("key.pem"), key_pem.as_bytes())?;
        write_atomic(&dir.join("cert.pem"), chain_pem.as_bytes())
    }

    /// Publishes an HTTP-01 key authorization for the other processes sharing the directory.
    ///
    /// # Errors
    /// [`AcmeError::State`].
    pub fn save_challenge(&self, token: &str, key_authorization: &str) -> Result<(), AcmeError> {
        write_atomic(
            &self.challenges_dir().join(token),
            key_authorization.as_bytes(),
        )
    }

    /// Withdraws a published key authorization.
    pub fn remove_challenge(&self, token: &str) {
        let _ = std::fs::remove_file(self.challenges_dir().join(token));
    }
}

/// A folder name for a CA directory URL: its host, port and path, with every character other
/// than letters, digits, `.` and `-` made `-` (as certmagic names its issuers' folders).
fn issuer_dir(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let name: String = rest
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_matches('-');
    if name.is_empty() || name.starts_with('.') {
        "ca".to_owned()
    } else {
        name.to_owned()
    }
}

fn state_error(path: &Path, e: &std::io::Error) -> AcmeError {
    AcmeError::State(format!("{}: {e}", path.display()))
}

fn make_dir(dir: &Path) -> Result<(), AcmeError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| state_error(dir, &e))
}

fn read_optional(path: &Path) -> Result<Option<String>, AcmeError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(state_error(path, &e)),
    };
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_FILE_BYTES), &mut text)
        .map_err(|e| state_error(path, &e))?;
    Ok(Some(text))
}

/// Writes `bytes` to `path` through a temporary file renamed over it, mode 0600.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AcmeError> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename itself reaches the disk with its folder.
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    result.map_err(|e: std::io::Error| {
        let _ = std::fs::remove_file(&tmp);
        state_error(path, &e)
    })
}

fn open_lock(path: &Path) -> Result<File, AcmeError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| state_error(path, &e))
}

fn try_lock(path: &Path) -> Result<Option<Lock>, AcmeError> {
    let file = open_lock(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(Lock { _file: file })),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(state_error(path, &e)),
    }
}

/// Waits up to `wait` for an exclusive flock on `path`. Polled rather than blocking, so a
/// process that holds it forever (stopped in a debugger) costs this one a failed attempt, not
/// its ACME thread.
fn lock(path: &Path, wait: Duration) -> Result<Lock, AcmeError> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(lock) = try_lock(path)? {
            return Ok(lock);
        }
        if Instant::now() >= deadline {
            return Err(AcmeError::State(format!(
                "{}: another process has held this lock for {}s",
                path.display(),
                wait.as_secs()
            )));
        }
        std::thread::sleep(LOCK_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Folder names stay inside the state directory whatever the URL holds.
    #[test]
    fn issuer_folders() {
        for (url, want) in [
            (
                "https://acme-v02.api.letsencrypt.org/directory",
                "acme-v02.api.letsencrypt.org-directory",
            ),
            ("https://127.0.0.1:14000/dir", "127.0.0.1-14000-dir"),
            ("https://../../etc", "ca"),
            ("", "ca"),
        ] {
            assert_eq!(issuer_dir(url), want, "{url}");
        }
    }

    /// Files are 0600 and replaced whole; a lock held is refused to a second taker until
    /// released.
    #[test]
    fn files_and_locks() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), "https://ca.test/dir").unwrap();
        assert!(store.cert("a.test").unwrap().is_none());
        store.save_cert("a.test", "CHAIN", "KEY").unwrap();
        store.save_cert("a.test", "CHAIN2", "KEY2").unwrap();
        assert_eq!(
            store.cert("a.test").unwrap(),
            Some(("CHAIN2".to_owned(), "KEY2".to_owned()))
        );
        let key = store.cert_dir("a.test").join("key.pem");
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let leftovers: Vec<_> = std::fs::read_dir(store.cert_dir("a.test"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains("tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let held = store.try_lock_cert("a.test").unwrap().expect("free");
        assert!(store.try_lock_cert("a.test").unwrap().is_none());
        let e = lock(
            &store.cert_dir("a.test").join("lock"),
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(e.to_string().contains("held this lock"), "{e}");
        drop(held);
        assert!(store.try_lock_cert("a.test").unwrap().is_some());
    }
}
