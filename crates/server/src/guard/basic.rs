//! HTTP Basic authentication (RFC 7617) against an htpasswd file in the formats Apache's
//! `htpasswd` writes: bcrypt (`$2y$`, the `-B` default of today), APR1-MD5 (`$apr1$`, its
//! long-time default), SHA-1 (`{SHA}`, `-s`); plain text only when the rule says `plain`
//! (crypt(3)'s DES is refused: eight characters at most, broken).
//!
//! bcrypt costs tens of milliseconds a check by design, and the check runs on the worker, as
//! nginx's does: so a credential that passed is remembered for a minute (keyed by a seeded
//! hash of the whole `Authorization` value, never the password itself), and checks not so
//! answered count against a per-client rate limit — a flood of wrong passwords gets 429s, not
//! a worker busy hashing. The file is read when the settings are (at start and on SIGHUP).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use base64::Engine as _;

/// A stored password hash.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hash {
    Bcrypt(String),
    /// APR1-MD5: salt and the 22-character digest.
    Apr1 {
        salt: String,
        digest: String,
    },
    /// SHA-1 of the password, base64.
    Sha1(String),
    Plain(String),
}

/// The users of an htpasswd file.
#[derive(Debug, Clone, Default)]
pub struct Htpasswd {
    users: HashMap<String, Hash>,
}

impl Htpasswd {
    /// Reads `text`: `user:hash` lines; blank lines and `#` comments skipped.
    ///
    /// # Errors
    /// A line that is not `user:hash`, or a hash in a format not accepted, with its line.
    pub fn parse(text: &str, allow_plain: bool) -> Result<Htpasswd, String> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |why: &str| format!("line {}: {why}", i + 1);
            let (user, hash) = line
                .split_once(':')
                .filter(|(u, _)| !u.is_empty())
                .ok_or_else(|| at("not user:hash"))?;
            let hash =
                if hash.starts_with("$2y$") || hash.starts_with("$2a$") || hash.starts_with("$2b$")
                {
                    Hash::Bcrypt(hash.to_owned())
                } else if let Some(rest) = hash.strip_prefix("$apr1$") {
                    let (salt, digest) = rest
                        .split_once('$')
                        .filter(|(s, d)| s.len() <= 8 && d.len() == 22)
                        .ok_or_else(|| at("a malformed $apr1$ hash"))?;
                    Hash::Apr1 {
                        salt: salt.to_owned(),
                        digest: digest.to_owned(),
                    }
                } else if let Some(b64) = hash.strip_prefix("{SHA}") {
                    Hash::Sha1(b64.to_owned())
                } else if allow_plain {
                    Hash::Plain(hash.to_owned())
                } else {
                    return Err(at(&format!(
                    "user {user:?}: not a bcrypt, $apr1$ or {{SHA}} hash (crypt and plain text \
                     are refused; plain text with ,plain)"
                )));
                };
            users.insert(user.to_owned(), hash);
        }
        Ok(Htpasswd { users })
    }

    /// Whether `user` has `password`.
    #[must_use]
    pub fn check(&self, user: &str, password: &[u8]) -> bool {
        match self.users.get(user) {
            Some(Hash::Bcrypt(h)) => bcrypt::verify(password, h).unwrap_or(false),
            Some(Hash::Apr1 { salt, digest }) => same(
                apr1(password, salt.as_bytes()).as_bytes(),
                digest.as_bytes(),
            ),
            Some(Hash::Sha1(b64)) => {
                use sha1::Digest as _;
                let sum = sha1::Sha1::digest(password);
                let ours = base64::engine::general_purpose::STANDARD.encode(sum);
                same(ours.as_bytes(), b64.as_bytes())
            }
            Some(Hash::Plain(p)) => same(password, p.as_bytes()),
            None => false,
        }
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.users.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// Equal, in a time that depends on the lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Apache's APR1-MD5 (md5-crypt with the magic `$apr1$`): the 22-character digest.
fn apr1(password: &[u8], salt: &[u8]) -> String {
    use md5::{Digest, Md5};
    const MAGIC: &[u8] = b"$apr1$";
    let salt = &salt[..salt.len().min(8)];
    let alternate = Md5::new()
        .chain_update(password)
        .chain_update(salt)
        .chain_update(password)
        .finalize();
    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(MAGIC);
    ctx.update(salt);
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alternate[..n]);
        left -= n;
    }
    let mut i = password.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        i >>= 1;
    }
    let mut sum = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(password);
        } else {
            c.update(sum);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        if round & 1 == 1 {
            c.update(sum);
        } else {
            c.update(password);
        }
        sum = c.finalize();
    }
    const ITOA64: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(22);
    let mut put = |v: u32, n: usize| {
        let mut v = v;
        for _ in 0..n {
            out.push(ITOA64[(v & 0x3f) as usize] as char);
            v >>= 6;
        }
    };
    let b = |i: usize| u32::from(sum[i]);
    for (x, y, z) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put((b(x) << 16) | (b(y) << 8) | b(z), 4);
    }
    put(b(11), 2);
    out
}

/// A `--basic-auth` rule as the workers use it: the paths, the realm, the users, and what
/// passed recently.
pub struct BasicAuth {
    pub prefix: String,
    /// `WWW-Authenticate: Basic realm="…", charset="UTF-8"` and CRLF.
    challenge: Vec<u8>,
    users: Htpasswd,
    /// Seeded hashes of `Authorization` values that passed, and until when (seconds).
    passed: quick_cache::sync::Cache<u64, u64>,
    seed: std::collections::hash_map::RandomState,
    /// Checks not answered from `passed`, per client.
    attempts: Arc<super::ratelimit::Zone>,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// How long a credential that passed is taken without a check.
const REMEMBER_SECS: u64 = 60;

/// What a rule says of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    /// No or wrong credentials: 401 with the challenge.
    Challenge,
    /// Too many checks from this client: 429.
    TooMany {
        retry_after: u64,
    },
}

impl BasicAuth {
    #[must_use]
    pub fn new(
        prefix: String,
        realm: &str,
        users: Htpasswd,
        attempts: Arc<super::ratelimit::Zone>,
    ) -> BasicAuth {
        let realm = realm.replace(['"', '\\'], "");
        BasicAuth {
            prefix,
            challenge: format!("WWW-Authenticate: Basic realm=\"{realm}\", charset=\"UTF-8\"\r\n")
                .into_bytes(),
            users,
            passed: quick_cache::sync::Cache::new(10_000),
            seed: std::collections::hash_map::RandomState::new(),
            attempts,
        }
    }

    /// The `WWW-Authenticate` line of a 401.
    #[must_use]
    pub fn challenge(&self) -> &[u8] {
        &self.challenge
    }

    /// Checks the request's `Authorization` (`authorization`) from `client`, at `now_secs`.
    pub fn check(
        &self,
        req: &lowlat_http::request::Request<'_, '_>,
        client: std::net::IpAddr,
        now: std::time::Instant,
        now_secs: u64,
    ) -> Outcome {
        let Some(value) = req.header("authorization") else {
            return Outcome::Challenge;
        };
        let mut h = self.seed.build_hasher();
        h.write(value);
        let key = h.finish();
        if self.passed.get(&key).is_some_and(|until| until > now_secs) {
            return Outcome::Pass;
        }
        // Its zone counts by client address alone: the path it is handed plays no part.
        match self.attempts.check(req, req.path, client, now) {
            super::ratelimit::Verdict::Refuse { retry_after } => {
                return Outcome::TooMany { retry_after }
            }
            // Its zone is `nodelay`: a check is never held back.
            super::ratelimit::Verdict::Pass
            | super::ratelimit::Verdict::DryRunRefuse
            | super::ratelimit::Verdict::Delay(_)
            | super::ratelimit::Verdict::DryRunDelay => {}
        }
        let Some((user, password)) = credentials(value) else {
            return Outcome::Challenge;
        };
        if self.users.check(&user, &password) {
            self.passed.insert(key, now_secs + REMEMBER_SECS);
            Outcome::Pass
        } else {
            Outcome::Challenge
        }
    }
}

/// `Basic base64(user:password)` → (user, password); `None` for anything else.
fn credentials(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apache_hashes_verify() {
        // APR1 and SHA as Apache's htpasswd writes them (-m, -s); bcrypt made here (the
        // integration tests use htpasswd -B itself).
        let bc = bcrypt::hash("password", 4)
            .unwrap()
            .replacen("$2b$", "$2y$", 1);
        let file = format!(
            "# a comment\napr:$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00\n\
             sha:{{SHA}}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\nbc:{bc}\n"
        );
        let file = file.as_str();
        let h = Htpasswd::parse(file, false).unwrap();
        assert_eq!(h.len(), 3);
        assert!(h.check("apr", b"password"));
        assert!(!h.check("apr", b"Password"));
        assert!(h.check("sha", b"password"));
        assert!(!h.check("sha", b"passwore"));
        assert!(!h.check("nobody", b"password"));
        assert!(h.check("bc", b"password"));
        assert!(!h.check("bc", b"passwore"));
        assert_eq!(apr1(b"password", b"RandSalt"), "PgCXHRrkpSt4cbyC2C6bm/");
    }

    #[test]
    fn bad_lines_and_plain_text() {
        assert!(Htpasswd::parse("no-colon\n", false).is_err());
        assert!(Htpasswd::parse("u:secret\n", false).is_err());
        assert!(
            Htpasswd::parse("u:abJnggxhB/yWI\n", false).is_err(),
            "crypt"
        );
        let plain = Htpasswd::parse("u:secret\n", true).unwrap();
        assert!(plain.check("u", b"secret"));
        assert!(Htpasswd::parse("u:$apr1$short\n", false).is_err());
    }

    #[test]
    fn credentials_are_read_from_basic_only() {
        let v = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("al:pa:ss")
        );
        assert_eq!(
            credentials(v.as_bytes()),
            Some(("al".to_owned(), b"pa:ss".to_vec()))
        );
        assert_eq!(credentials(b"Bearer abc"), None);
        assert_eq!(credentials(b"Basic !!!"), None);
        assert_eq!(credentials(b"Basic"), None);
    }
}
