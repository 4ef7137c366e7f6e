//! The app's words: where they come from (`--words FILE`, else the system dictionary, else the
//! list embedded in the binary), which of them are usable (safe as one URL path segment), and the
//! seeded choice of N of them made once at start.
//!
//! Nothing here runs per request.

use std::borrow::Cow;
use std::fmt;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::rng::SplitMix64;

/// The system dictionary the seed app read its words from, used when present.
pub const SYSTEM_WORDS: &str = "/usr/share/dict/words";

/// Longest word kept, in bytes: a responder's word is echoed in every response, and a URL
/// segment longer than this is no word a person would type.
pub const MAX_WORD_BYTES: usize = 64;

/// At least 5,000 English words (7,985) for machines without a system dictionary; its source and
/// licence are in its header and in `words-COPYRIGHT.txt`.
const EMBEDDED: &str = include_str!("words.txt");

/// Where the words came from, as `_stats` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WordSource {
    /// A file named on the command line or the system dictionary.
    File(PathBuf),
    /// The list compiled into the binary.
    Embedded,
}

impl fmt::Display for WordSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Embedded => f.write_str("embedded"),
        }
    }
}

/// Reads the word list: `explicit` when given (an error if unreadable), else `system` when it
/// exists, else the embedded list.
///
/// # Errors
/// A one-line reason when a file that should be read cannot be.
pub fn read_source(
    explicit: Option<&Path>,
    system: &Path,
) -> Result<(Cow<'static, [u8]>, WordSource), String> {
    if let Some(path) = explicit {
        return std::fs::read(path)
            .map(|bytes| (Cow::Owned(bytes), WordSource::File(path.to_owned())))
            .map_err(|e| format!("cannot read --words {}: {e}", path.display()));
    }
    match std::fs::read(system) {
        Ok(bytes) => Ok((Cow::Owned(bytes), WordSource::File(system.to_owned()))),
        // A machine without a dictionary is the reason the embedded list exists.
        Err(e) if e.kind() == ErrorKind::NotFound => {
            Ok((Cow::Borrowed(EMBEDDED.as_bytes()), WordSource::Embedded))
        }
        Err(e) => Err(format!("cannot read {}: {e}", system.display())),
    }
}

/// Every usable word of a list, sorted by bytes and without duplicates. Lines are trimmed;
/// blank lines, `#` comments and lines that are not UTF-8 (an old Latin-1 dictionary) are
/// skipped, and so is every word [`is_path_safe`] refuses.
#[must_use]
pub fn usable_words(list: &[u8]) -> Vec<&str> {
    let mut words: Vec<&str> = list
        .split(|&b| b == b'\n')
        .filter_map(|line| std::str::from_utf8(line).ok())
        .map(str::trim)
        .filter(|w| !w.starts_with('#') && is_path_safe(w))
        .collect();
    words.sort_unstable();
    words.dedup();
    words
}

/// Picks `n` words (all of them when there are fewer) uniformly with a generator seeded by
/// `seed`, by a partial Fisher–Yates shuffle; returns them sorted. The same list and seed give
/// the same words.
#[must_use]
pub fn choose(mut words: Vec<&str>, n: usize, seed: u64) -> Vec<String> {
    let n = n.min(words.len());
    let mut rng = SplitMix64::new(seed);
    for i in 0..n {
        let j = i + rng.below(words.len() - i);
        words.swap(i, j);
    }
    let mut chosen: Vec<String> = words[..n].iter().map(|&w| w.to_owned()).collect();
    chosen.sort_unstable();
    chosen
}

/// Whether `word` can be one path segment as it is, so `/app/{word}` names it.
///
/// Kept: RFC 3986's `pchar` written plainly (letters, digits, `-._~`, the sub-delims
/// `!$&'()*+,;=`, `:` and `@`) and RFC 3987's non-ASCII `ucschar` (IRIs carry them, clients
/// percent-encode them). Refused: `/`, `?`, `#`, `%` (they would change what the path means),
/// `<`, `>`, `"`, spaces and controls (never raw in a URL), bidirectional formatting characters
/// (RFC 3987 §4.1), `.` and `..` (dot-segments), anything over [`MAX_WORD_BYTES`], and words
/// starting with `_`, which the app keeps for its own pages (`_stats`).
///
/// `&` and `'` stay and need HTML escaping: the template does it.
#[must_use]
pub fn is_path_safe(word: &str) -> bool {
    if word.is_empty() || word.len() > MAX_WORD_BYTES || word == "." || word == ".." {
        return false;
    }
    if word.starts_with('_') {
        return false;
    }
    word.chars().all(|c| {
        if c.is_ascii() {
            c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@".contains(c)
        } else {
            is_ucschar(c) && !c.is_whitespace() && !is_bidi_format(c)
        }
    })
}

/// RFC 3987's `ucschar`: non-ASCII characters an IRI may carry, which leaves out controls,
/// surrogates, private use, and each plane's two last code points.
fn is_ucschar(c: char) -> bool {
    let c = u32::from(c);
    matches!(c, 0xA0..=0xD7FF | 0xF900..=0xFDCF | 0xFDF0..=0xFFEF)
        || ((0x1_0000..=0xE_FFFF).contains(&c) && (c & 0xFFFF) <= 0xFFFD)
}

/// Characters that reorder the text around them (RFC 3987 §4.1: "MUST NOT be used in IRIs").
fn is_bidi_format(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_safety() {
        let cases: &[(&str, bool)] = &[
            ("apple", true),
            ("Zürich", true),
            ("naïve", true),
            ("日本", true),
            ("AT&T", true),
            ("rock'n'roll", true),
            ("o'clock", true),
            ("e-mail", true),
            ("a+b=c", true),
            ("user@host:1", true),
            ("", false),
            (".", false),
            ("..", false),
            ("...", true),
            ("_stats", false),
            ("a_b", true),
            ("a/b", false),
            ("a?b", false),
            ("a#b", false),
            ("100%", false),
            ("a<b", false),
            ("a>b", false),
            ("\"quoted\"", false),
            ("two words", false),
            ("tab\tword", false),
            ("back\\slash", false),
            ("non\u{a0}breaking", false),
            ("bidi\u{202e}x", false),
            ("private\u{e000}", false),
            ("nul\0", false),
            ("`tick`", false),
            ("{brace}", false),
            ("|pipe|", false),
        ];
        for &(word, safe) in cases {
            assert_eq!(is_path_safe(word), safe, "{word:?}");
        }
        assert!(is_path_safe(&"a".repeat(MAX_WORD_BYTES)));
        assert!(!is_path_safe(&"a".repeat(MAX_WORD_BYTES + 1)));
    }

    #[test]
    fn usable_words_trims_skips_sorts_and_dedups() {
        let list = b"# comment\nbanana\r\n  apple \n\napple\na<b\n\xff\xfe\ncherry\n_x\n";
        assert_eq!(usable_words(list), ["apple", "banana", "cherry"]);
    }

    #[test]
    fn embedded_list_is_large_and_all_usable() {
        let words = usable_words(EMBEDDED.as_bytes());
        assert!(words.len() >= 5000, "{}", words.len());
        let lines = EMBEDDED.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(
            words.len(),
            lines,
            "every embedded word is usable and unique"
        );
    }

    #[test]
    fn choice_is_seeded_sorted_and_bounded() {
        let words = usable_words(EMBEDDED.as_bytes());
        let a = choose(words.clone(), 1000, 42);
        let b = choose(words.clone(), 1000, 42);
        let c = choose(words.clone(), 1000, 43);
        assert_eq!(a.len(), 1000);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(choose(vec!["b", "a"], 1000, 1), ["a", "b"]);
        assert!(choose(Vec::new(), 10, 1).is_empty());
    }

    #[test]
    fn sources() {
        let dir = std::env::temp_dir().join(format!("lowlat-words-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("list");
        std::fs::write(&file, "one\ntwo\n").unwrap();
        let missing = dir.join("missing");

        let (bytes, source) = read_source(None, &missing).unwrap();
        assert_eq!(source, WordSource::Embedded);
        assert_eq!(bytes.as_ref(), EMBEDDED.as_bytes());

        let (bytes, source) = read_source(None, &file).unwrap();
        assert_eq!(source, WordSource::File(file.clone()));
        assert_eq!(bytes.as_ref(), b"one\ntwo\n");

        let (_, source) = read_source(Some(&file), &missing).unwrap();
        assert_eq!(source, WordSource::File(file.clone()));
        let err = read_source(Some(&missing), &file).unwrap_err();
        assert!(err.starts_with("cannot read --words"), "{err}");
        // A directory where the dictionary should be is an error, not a silent fallback.
        assert!(read_source(None, &dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
