//! The one parser of humane durations, sizes and counts that `serve`, `load` and `bench` share,
//! so that `5`, `250us`, `1.5m` and `10k` mean the same thing on every command line and in
//! every spec file. Pure functions over text; the callers add their own bounds (a timeout must
//! be positive, a warm-up may be zero).

use std::time::Duration;

/// The longest duration accepted: about 31 years, far beyond any timeout or run, and small
/// enough that `Instant + duration` never overflows.
pub const MAX_DURATION_SECS: f64 = 1e9;

/// Parses a duration: `250us`, `500ms`, `10s`, `1.5s`, `2m`, `1h`, `1d`; a bare number is
/// seconds (as in wrk). Zero is allowed.
///
/// # Errors
/// A message naming the text and what would have been understood.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (n, unit) = number_and_unit(text)
        .ok_or_else(|| format!("{text:?} is not a duration (e.g. 250us, 500ms, 10s, 2m, 1h)"))?;
    let scale = match unit {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => {
            return Err(format!(
                "{text:?} has an unknown unit (use us, ms, s, m, h or d)"
            ))
        }
    };
    let secs = n * scale;
    if !secs.is_finite() || secs >= MAX_DURATION_SECS {
        return Err(format!("{text:?} is too long (at most about 31 years)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a size in bytes, binary multiples: `512`, `16k`, `16K`, `16kb`, `16KiB`, `1.5m`,
/// `2g`. Zero is allowed.
///
/// # Errors
/// A message naming the text.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (n, unit) = number_and_unit(text)
        .ok_or_else(|| format!("{text:?} is not a size (e.g. 512, 16k, 1.5m, 1g)"))?;
    let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("{text:?} has an unknown unit (use k, m, g or t)")),
    };
    let bytes = n * multiplier;
    if !bytes.is_finite() || bytes >= 1.8e19 {
        return Err(format!("{text:?} is too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!("{text:?} is not a whole number of bytes"));
    }
    // Checked just above: a non-negative whole number below 2^64.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(bytes as u64)
}

/// Parses a size that must be at least one byte (a buffer, a limit): [`parse_size`], then zero
/// refused.
///
/// # Errors
/// A message naming the text when it is not a size, or is zero.
pub fn parse_nonzero_size(text: &str) -> Result<u64, String> {
    match parse_size(text)? {
        0 => Err(format!("{text:?} must be at least 1 byte")),
        n => Ok(n),
    }
}

/// Parses a duration that must be positive (a timeout, an interval): [`parse_duration`], then
/// zero refused.
///
/// # Errors
/// A message naming the text when it is not a duration, or is zero.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!("{text:?} must be positive"));
    }
    Ok(d)
}

/// Splits `1.5m` into its number and its unit (trimmed); `None` when there is no number.
fn number_and_unit(text: &str) -> Option<(f64, &str)> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    Some((number.parse().ok()?, unit.trim()))
}

/// Parses a count with an optional decimal suffix: `1000`, `10k`, `1.5k`, `2M`, `1G`.
///
/// # Errors
/// A message naming the text.
pub fn parse_count(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (number, mult) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 1e3),
        Some(b'M') => (&t[..t.len() - 1], 1e6),
        Some(b'G') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let bad = || format!("{text:?} is not a count (e.g. 1000, 10k, 2M)");
    let v = number.parse::<f64>().map_err(|_| bad())? * mult;
    if !v.is_finite() || v < 0.0 || v.fract() != 0.0 || v > 1e18 {
        return Err(bad());
    }
    // Checked just above: a non-negative whole number below 1e18.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (t, d) in [
            ("5", Duration::from_secs(5)),
            ("10s", Duration::from_secs(10)),
            (" 3s ", Duration::from_secs(3)),
            ("1.5s", Duration::from_millis(1500)),
            ("250us", Duration::from_micros(250)),
            ("500ms", Duration::from_millis(500)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1d", Duration::from_secs(86_400)),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(t), Ok(d), "{t}");
        }
        for bad in [
            "",
            "s",
            "10x",
            "-1s",
            "1e999s",
            "1..2s",
            "10 parsecs",
            "nan",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("99999999999")
            .unwrap_err()
            .contains("too long"));
        assert!(parse_duration("5y").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn sizes() {
        for (t, n) in [
            ("512", 512),
            ("16k", 16 << 10),
            ("16K", 16 << 10),
            ("16kb", 16 << 10),
            ("16KiB", 16 << 10),
            ("1.5m", 3 << 19),
            ("1m", 1 << 20),
            ("2G", 2 << 30),
            ("0", 0),
        ] {
            assert_eq!(parse_size(t), Ok(n), "{t}");
        }
        for bad in ["", "k", "1x", "-1", "0.5", "99999999999g", "1.2.3k"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_size("1.5q").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn positive_values() {
        assert_eq!(parse_nonzero_size("16k"), Ok(16 << 10));
        assert!(parse_nonzero_size("0")
            .unwrap_err()
            .contains("at least 1 byte"));
        assert_eq!(
            parse_positive_duration("250ms"),
            Ok(Duration::from_millis(250))
        );
        for zero in ["0", "0s", "0ms"] {
            assert!(parse_positive_duration(zero)
                .unwrap_err()
                .contains("positive"));
        }
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("1000"), Ok(1000));
        assert_eq!(parse_count("10k"), Ok(10_000));
        assert_eq!(parse_count("1.5k"), Ok(1500));
        assert_eq!(parse_count("2M"), Ok(2_000_000));
        for bad in ["", "k", "-1", "1.5", "abc", "1e30"] {
            assert!(parse_count(bad).is_err(), "{bad}");
        }
    }
}
