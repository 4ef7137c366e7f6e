//! How long a stored response is fresh (RFC 9111 §4.2.1, heuristics §4.2.2), how old it is
//! (§4.2.3), and what a cache may do with it now (§4.2, §4.2.4; RFC 5861's stale extensions).
//!
//! Times are whole seconds since the epoch, given by the caller. The order of precedence for
//! a shared cache is `s-maxage`, `max-age`, `Expires` minus `Date`, then — for a status code
//! that is heuristically cacheable, or with `public` — 10% of the time since `Last-Modified`
//! (§4.2.2's suggestion, as squid and ATS do), capped by the caller's `heuristic_max`.

use super::directives::Directives;
use super::fields::{first, parse_date, trim, values, Fields, DELTA_MAX};

/// Status codes that are cacheable by default (RFC 9110 §15.1): a response with one of them
/// may be given a heuristic lifetime.
#[must_use]
pub fn heuristically_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// The settings freshness depends on.
#[derive(Debug, Clone, Copy)]
pub struct Heuristic {
    /// Whether a response without explicit freshness may get a heuristic lifetime at all.
    pub enabled: bool,
    /// The fraction of the time since `Last-Modified`, in percent (RFC 9111 §4.2.2: 10).
    pub percent: u64,
    /// The longest heuristic lifetime, in seconds.
    pub max: u64,
}

impl Default for Heuristic {
    fn default() -> Self {
        // A day: a file untouched for a year is not kept for a month on a guess.
        Heuristic {
            enabled: true,
            percent: 10,
            max: 86_400,
        }
    }
}

/// Where a freshness lifetime came from (for `Cache-Status`'s `detail` and the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    SMaxAge,
    MaxAge,
    Expires,
    Heuristic,
    /// No explicit freshness and no heuristic: stale at once.
    None,
}

/// The freshness lifetime of a response (RFC 9111 §4.2.1), in seconds, and its source.
/// `targeted` says the directives came from a targeted field (RFC 9213), which replaces
/// `Expires` as well; `response_time` stands in for a missing `Date`.
#[must_use]
pub fn lifetime<F: Fields + ?Sized>(
    status: u16,
    fields: &F,
    cc: &Directives<'_>,
    targeted: bool,
    response_time: u64,
    heuristic: &Heuristic,
) -> (u64, Source) {
    if let Some(s) = cc.s_maxage {
        return (s, Source::SMaxAge);
    }
    if let Some(m) = cc.max_age {
        return (m, Source::MaxAge);
    }
    let date = first(fields, "date")
        .and_then(parse_date)
        .unwrap_or(response_time);
    if !targeted {
        if let Some(expires) = first(fields, "expires") {
            // An invalid date, "0" above all, is in the past (§5.3).
            let at = parse_date(expires).unwrap_or(0);
            return (at.saturating_sub(date).min(DELTA_MAX), Source::Expires);
        }
    }
    if heuristic.enabled && (heuristically_cacheable(status) || cc.public) {
        if let Some(modified) = first(fields, "last-modified").and_then(parse_date) {
            let since = date.saturating_sub(modified);
            let guess = since.saturating_mul(heuristic.percent) / 100;
            return (guess.min(heuristic.max), Source::Heuristic);
        }
    }
    (0, Source::None)
}

/// When a response was had and how old it was then: enough to know its age at any later time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgeBase {
    /// §4.2.3's `corrected_initial_age`.
    pub initial: u64,
    /// When the response was received.
    pub response_time: u64,
}

impl AgeBase {
    /// From the response's `Date` and `Age` fields and the times the request was sent and the
    /// response received (RFC 9111 §4.2.3). An `Age` that is not one delta-seconds
    /// ([`AgeField::Invalid`]) makes the age unknown, and an unknown age is taken as the
    /// largest there is: the response is stale at once, so it is revalidated before any reuse.
    #[must_use]
    pub fn new<F: Fields + ?Sized>(fields: &F, request_time: u64, response_time: u64) -> Self {
        let age_value = match age_field(fields) {
            AgeField::Absent => 0,
            AgeField::Valid(age) => age,
            AgeField::Invalid => {
                return AgeBase {
                    initial: DELTA_MAX,
                    response_time,
                };
            }
        };
        let date_value = first(fields, "date").and_then(parse_date);
        let apparent_age = date_value.map_or(0, |d| response_time.saturating_sub(d));
        let response_delay = response_time.saturating_sub(request_time);
        let corrected_age_value = age_value.saturating_add(response_delay);
        AgeBase {
            initial: apparent_age.max(corrected_age_value),
            response_time,
        }
    }

    /// The current age at `now`: the initial age plus the time resident in the cache.
    #[must_use]
    pub fn age_at(&self, now: u64) -> u64 {
        self.initial
            .saturating_add(now.saturating_sub(self.response_time))
    }
}

/// What a response's `Age` field says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgeField {
    /// No `Age`: the response comes straight from the origin (or says nothing of its age).
    Absent,
    /// One field line holding one delta-seconds (RFC 9111 §5.1), in seconds (at most 2^31).
    Valid(u64),
    /// Anything else: several lines or list members (`0, 7200`), a sign, a fraction, a
    /// parameter, no digits. §5.1 would take the first member, or ignore an invalid value
    /// (an age of 0), but nothing says which of two ages is true, and an age taken as 0 makes
    /// a response fresh that an intermediary may have held for hours. So the age is not
    /// guessed: the caller treats the response as already stale, which costs one
    /// revalidation and never serves a response longer than it may be.
    Invalid,
}

/// The `Age` of a response's fields.
#[must_use]
pub fn age_field<F: Fields + ?Sized>(fields: &F) -> AgeField {
    let mut lines = values(fields, "age");
    let Some(value) = lines.next() else {
        return AgeField::Absent;
    };
    if lines.next().is_some() {
        return AgeField::Invalid;
    }
    let value = trim(value);
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return AgeField::Invalid;
    }
    AgeField::Valid(
        value
            .iter()
            .try_fold(0u64, |n, &b| {
                n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
            })
            .map_or(DELTA_MAX, |n| n.min(DELTA_MAX)),
    )
}

/// The `Age` field value to send (§5.1: at most 2^31).
#[must_use]
pub fn age_value(age: u64) -> u64 {
    age.min(DELTA_MAX)
}

/// What a cache may do with a stored response for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Send it as it is.
    Fresh,
    /// Send it stale now and refresh it in the background (`stale-while-revalidate`, or the
    /// request's `max-stale`, which needs no refresh: `refresh` says).
    Stale { refresh: bool },
    /// Ask the origin first (a conditional request when there are validators).
    Revalidate,
}

/// What the stored response's freshness was decided from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Its freshness lifetime.
    pub lifetime: u64,
    /// `stale-while-revalidate`, seconds.
    pub stale_while_revalidate: u64,
    /// `stale-if-error`, seconds.
    pub stale_if_error: u64,
    /// `no-cache` (unqualified): always revalidated.
    pub no_cache: bool,
    /// `must-revalidate`, `proxy-revalidate` or `s-maxage`: never served stale (§4.2.4,
    /// §5.2.2.8: a shared cache treats `s-maxage` as `proxy-revalidate`).
    pub no_stale: bool,
}

impl Stored {
    /// The parts of a response's directives a stored copy keeps.
    #[must_use]
    pub fn new(lifetime: u64, cc: &Directives<'_>) -> Self {
        Stored {
            lifetime,
            stale_while_revalidate: cc.stale_while_revalidate.unwrap_or(0),
            stale_if_error: cc.stale_if_error.unwrap_or(0),
            no_cache: cc.no_cache,
            no_stale: cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage.is_some(),
        }
    }

    /// Seconds left to live at `age` (negative once stale): `Cache-Status`'s `ttl`.
    #[must_use]
    pub fn ttl(&self, age: u64) -> i64 {
        i64::try_from(self.lifetime).unwrap_or(i64::MAX) - i64::try_from(age).unwrap_or(i64::MAX)
    }

    /// What may be done with this response, `age` seconds old, for a request with directives
    /// `req` (pass `Directives::default()` when request directives are not honoured).
    #[must_use]
    pub fn use_for(&self, age: u64, req: &Directives<'_>) -> Use {
        if self.no_cache || req.no_cache {
            return Use::Revalidate;
        }
        if req.max_age.is_some_and(|max| age > max) {
            return Use::Revalidate;
        }
        let left = self.lifetime.saturating_sub(age);
        let fresh = self.lifetime > age;
        if fresh && req.min_fresh.is_none_or(|min| left >= min) {
            return Use::Fresh;
        }
        if self.no_stale {
            return Use::Revalidate;
        }
        let stale_for = age.saturating_sub(self.lifetime);
        if req.max_stale.is_some_and(|max| stale_for <= max) && fresh_enough(req, left, fresh) {
            return Use::Stale { refresh: false };
        }
        if !fresh && stale_for < self.stale_while_revalidate {
            return Use::Stale { refresh: true };
        }
        Use::Revalidate
    }

    /// Whether it may be sent stale because the origin failed (RFC 5861 §4: down, or a 5xx),
    /// `age` seconds old, with `grace` seconds more allowed by configuration beyond the
    /// response's `stale-if-error` (or the request's, which may ask for more or less).
    #[must_use]
    pub fn usable_on_error(&self, age: u64, req: &Directives<'_>, grace: u64) -> bool {
        if self.no_stale || self.no_cache {
            // must-revalidate: "MUST NOT ... even if the origin is unavailable" (§5.2.2.2);
            // no-cache: never used "without successful validation" (§5.2.2.4). §4.2.4 names
            // both, with s-maxage and proxy-revalidate, as forbidding a stale response.
            return false;
        }
        let stale_for = age.saturating_sub(self.lifetime);
        let allowed = req
            .stale_if_error
            .unwrap_or(self.stale_if_error)
            .saturating_add(grace);
        stale_for <= allowed
    }
}

/// `min-fresh` holds when it is stale anyway only if the request asked for nothing fresh.
fn fresh_enough(req: &Directives<'_>, left: u64, fresh: bool) -> bool {
    match req.min_fresh {
        Some(min) => fresh && left >= min,
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000;
    const DATE_NOW: &str = "Tue, 14 Nov 2023 22:13:20 GMT";

    fn life(status: u16, fields: &[(&str, &str)]) -> (u64, Source) {
        let fields: Vec<(&str, &[u8])> = fields.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        let (cc, targeted) = Directives::for_response(&fields[..], &["cdn-cache-control"]);
        lifetime(
            status,
            &fields[..],
            &cc,
            targeted,
            NOW,
            &Heuristic::default(),
        )
    }

    #[test]
    fn lifetime_table() {
        assert_eq!(parse_date(DATE_NOW.as_bytes()), Some(NOW));
        type Pairs = &'static [(&'static str, &'static str)];
        let cases: &[(u16, Pairs, (u64, Source))] = &[
            (
                200,
                &[("Cache-Control", "max-age=60")],
                (60, Source::MaxAge),
            ),
            (
                200,
                &[("Cache-Control", "max-age=60, s-maxage=5")],
                (5, Source::SMaxAge),
            ),
            (
                200,
                &[
                    ("Cache-Control", "max-age=60"),
                    ("Expires", "Tue, 14 Nov 2023 23:13:20 GMT"),
                ],
                (60, Source::MaxAge),
            ),
            (
                200,
                &[
                    ("Date", DATE_NOW),
                    ("Expires", "Tue, 14 Nov 2023 23:13:20 GMT"),
                ],
                (3600, Source::Expires),
            ),
            // Without Date, the time received stands in.
            (
                200,
                &[("Expires", "Tue, 14 Nov 2023 22:14:20 GMT")],
                (60, Source::Expires),
            ),
            // "0" and other invalid dates are in the past (§5.3).
            (200, &[("Expires", "0")], (0, Source::Expires)),
            (
                200,
                &[
                    ("Date", DATE_NOW),
                    ("Expires", "Mon, 13 Nov 2023 22:13:20 GMT"),
                ],
                (0, Source::Expires),
            ),
            // 10% of the time since Last-Modified, for a status cacheable by default.
            (
                200,
                &[
                    ("Date", DATE_NOW),
                    ("Last-Modified", "Tue, 14 Nov 2023 21:13:20 GMT"),
                ],
                (360, Source::Heuristic),
            ),
            // Capped at a day.
            (
                404,
                &[
                    ("Date", DATE_NOW),
                    ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ],
                (86_400, Source::Heuristic),
            ),
            // Not for a status that is not cacheable by default, unless public.
            (
                302,
                &[
                    ("Date", DATE_NOW),
                    ("Last-Modified", "Tue, 14 Nov 2023 21:13:20 GMT"),
                ],
                (0, Source::None),
            ),
            (
                302,
                &[
                    ("Cache-Control", "public"),
                    ("Date", DATE_NOW),
                    ("Last-Modified", "Tue, 14 Nov 2023 21:13:20 GMT"),
                ],
                (360, Source::Heuristic),
            ),
            (200, &[], (0, Source::None)),
            // A targeted field replaces Cache-Control and Expires (RFC 9213 §2.2).
            (
                200,
                &[
                    ("Cache-Control", "no-store"),
                    ("Expires", "0"),
                    ("CDN-Cache-Control", "max-age=30"),
                ],
                (30, Source::MaxAge),
            ),
            (
                200,
                &[
                    ("Expires", "Tue, 14 Nov 2023 23:13:20 GMT"),
                    ("CDN-Cache-Control", "public"),
                ],
                (0, Source::None),
            ),
        ];
        for (status, fields, want) in cases {
            assert_eq!(life(*status, fields), *want, "{status} {fields:?}");
        }
        let fields: &[(&str, &[u8])] = &[("Last-Modified", b"Tue, 14 Nov 2023 21:13:20 GMT")];
        let off = Heuristic {
            enabled: false,
            ..Heuristic::default()
        };
        let cc = Directives::default();
        assert_eq!(
            lifetime(200, fields, &cc, false, NOW, &off),
            (0, Source::None)
        );
    }

    #[test]
    fn age_table() {
        // (fields, request_time, response_time, now, age)
        type Pairs = &'static [(&'static str, &'static str)];
        let cases: &[(Pairs, u64, u64, u64, u64)] = &[
            (&[], NOW, NOW, NOW, 0),
            (&[], NOW, NOW, NOW + 7, 7),
            // The response delay counts.
            (&[], NOW - 2, NOW, NOW, 2),
            // Age from upstream, plus the delay.
            (&[("Age", "30")], NOW - 1, NOW, NOW + 5, 36),
            // Date in the past: the apparent age, when larger.
            (
                &[("Date", "Tue, 14 Nov 2023 22:12:20 GMT")],
                NOW,
                NOW,
                NOW,
                60,
            ),
            (
                &[("Date", "Tue, 14 Nov 2023 22:12:20 GMT"), ("Age", "100")],
                NOW,
                NOW,
                NOW,
                100,
            ),
            // A Date in the future is not a negative age.
            (
                &[("Date", "Tue, 14 Nov 2023 23:13:20 GMT")],
                NOW,
                NOW,
                NOW,
                0,
            ),
            // An Age that is not one delta-seconds: an unknown age, taken as the largest.
            (&[("Age", "-5")], NOW, NOW, NOW, DELTA_MAX),
            (&[("Age", "1.5")], NOW, NOW, NOW + 5, DELTA_MAX + 5),
            (&[("Age", "0, 0")], NOW, NOW, NOW, DELTA_MAX),
            (&[("Age", "0"), ("Age", "0")], NOW, NOW, NOW, DELTA_MAX),
            // Past 2^31 (or past u64): 2^31 (§1.2.2).
            (
                &[("Age", "99999999999999999999999")],
                NOW,
                NOW,
                NOW,
                DELTA_MAX,
            ),
        ];
        for (fields, req, resp, now, want) in cases {
            let fields: Vec<(&str, &[u8])> =
                fields.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
            let base = AgeBase::new(&fields[..], *req, *resp);
            assert_eq!(base.age_at(*now), *want, "{fields:?}");
        }
        assert_eq!(age_value(u64::MAX), DELTA_MAX);
    }

    #[test]
    fn age_field_table() {
        type Pairs = &'static [(&'static str, &'static str)];
        let cases: &[(Pairs, AgeField)] = &[
            (&[], AgeField::Absent),
            (&[("Date", DATE_NOW)], AgeField::Absent),
            (&[("Age", "0")], AgeField::Valid(0)),
            (&[("age", " 7200 ")], AgeField::Valid(7200)),
            (&[("Age", "2147483649")], AgeField::Valid(DELTA_MAX)),
            (&[("Age", "")], AgeField::Invalid),
            (&[("Age", "abc")], AgeField::Invalid),
            (&[("Age", "-7200")], AgeField::Invalid),
            (&[("Age", "+1")], AgeField::Invalid),
            (&[("Age", "7200.0")], AgeField::Invalid),
            (&[("Age", "7200,0")], AgeField::Invalid),
            (&[("Age", "0,7200")], AgeField::Invalid),
            (&[("Age", "0, 0")], AgeField::Invalid),
            (&[("Age", "3600, 3600")], AgeField::Invalid),
            (&[("Age", "7200;foo=bar")], AgeField::Invalid),
            (&[("Age", "7200;foo=111")], AgeField::Invalid),
            (&[("Age", "7200"), ("Age", "0")], AgeField::Invalid),
            (&[("Age", "0"), ("AGE", "0")], AgeField::Invalid),
        ];
        for (fields, want) in cases {
            let fields: Vec<(&str, &[u8])> =
                fields.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
            assert_eq!(age_field(&fields[..]), *want, "{fields:?}");
        }
    }

    /// A response whose age is unknown is stale however long its lifetime.
    #[test]
    fn unknown_age_is_stale() {
        let fields: &[(&str, &[u8])] = &[("Cache-Control", b"max-age=3600"), ("Age", b"0, 0")];
        let base = AgeBase::new(fields, NOW, NOW);
        let stored = Stored::new(3600, &Directives::default());
        assert_eq!(
            stored.use_for(base.age_at(NOW), &Directives::default()),
            Use::Revalidate
        );
    }

    fn req(line: &'static str) -> Directives<'static> {
        let mut d = Directives::default();
        d.add(line.as_bytes());
        d
    }

    #[test]
    fn use_table() {
        let resp = |line: &'static str, lifetime: u64| Stored::new(lifetime, &req(line));
        // (response directives, lifetime, age, request directives, use)
        let cases: &[(&str, u64, u64, &str, Use)] = &[
            ("max-age=60", 60, 0, "", Use::Fresh),
            ("max-age=60", 60, 59, "", Use::Fresh),
            ("max-age=60", 60, 60, "", Use::Revalidate),
            ("no-cache", 60, 0, "", Use::Revalidate),
            ("max-age=60", 60, 0, "no-cache", Use::Revalidate),
            ("max-age=60", 60, 30, "max-age=10", Use::Revalidate),
            ("max-age=60", 60, 30, "max-age=30", Use::Fresh),
            ("max-age=60", 60, 30, "min-fresh=40", Use::Revalidate),
            ("max-age=60", 60, 30, "min-fresh=30", Use::Fresh),
            (
                "max-age=60",
                60,
                70,
                "max-stale=10",
                Use::Stale { refresh: false },
            ),
            ("max-age=60", 60, 71, "max-stale=10", Use::Revalidate),
            (
                "max-age=60",
                60,
                1000,
                "max-stale",
                Use::Stale { refresh: false },
            ),
            (
                "max-age=60, must-revalidate",
                60,
                70,
                "max-stale",
                Use::Revalidate,
            ),
            ("s-maxage=60", 60, 70, "max-stale", Use::Revalidate),
            (
                "max-age=60, proxy-revalidate",
                60,
                70,
                "max-stale",
                Use::Revalidate,
            ),
            (
                "max-age=60, stale-while-revalidate=30",
                60,
                80,
                "",
                Use::Stale { refresh: true },
            ),
            (
                "max-age=60, stale-while-revalidate=30",
                60,
                90,
                "",
                Use::Revalidate,
            ),
            (
                "max-age=60, stale-while-revalidate=30, must-revalidate",
                60,
                80,
                "",
                Use::Revalidate,
            ),
        ];
        for (resp_cc, lifetime, age, req_cc, want) in cases {
            let got = resp(resp_cc, *lifetime).use_for(*age, &req(req_cc));
            assert_eq!(got, *want, "{resp_cc} age {age} req {req_cc}");
        }
    }

    #[test]
    fn on_error_table() {
        // (response directives, lifetime, age, request directives, grace, usable)
        let cases: &[(&str, u64, u64, &str, u64, bool)] = &[
            ("max-age=60, stale-if-error=100", 60, 160, "", 0, true),
            ("max-age=60, stale-if-error=100", 60, 161, "", 0, false),
            ("max-age=60, stale-if-error=100", 60, 161, "", 10, true),
            ("max-age=60", 60, 61, "", 0, false),
            ("max-age=60", 60, 61, "", 30, true),
            ("max-age=60", 60, 61, "stale-if-error=5", 0, true),
            (
                "max-age=60, stale-if-error=100",
                60,
                100,
                "stale-if-error=5",
                0,
                false,
            ),
            (
                "max-age=60, must-revalidate, stale-if-error=100",
                60,
                61,
                "",
                30,
                false,
            ),
            ("max-age=60, no-cache", 60, 61, "", 30, false),
            (
                "max-age=60, no-cache",
                60,
                30,
                "stale-if-error=60",
                30,
                false,
            ),
            ("s-maxage=60, stale-if-error=100", 60, 61, "", 30, false),
            ("max-age=60, proxy-revalidate", 60, 61, "", 30, false),
        ];
        for (resp_cc, lifetime, age, req_cc, grace, want) in cases {
            let stored = Stored::new(*lifetime, &req(resp_cc));
            assert_eq!(
                stored.usable_on_error(*age, &req(req_cc), *grace),
                *want,
                "{resp_cc} age {age} req {req_cc} grace {grace}"
            );
        }
        assert_eq!(Stored::new(60, &req("")).ttl(70), -10);
    }
}
