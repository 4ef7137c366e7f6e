//! The statistics objects `done(summary, latency, requests)` receives, as wrk gives them:
//! `s.min`, `s.max`, `s.mean`, `s.stdev`, `s:percentile(p)`, `s(i)` (the i-th distinct value
//! recorded and how often, from the lowest) and `#s` (how many distinct values).
//!
//! `latency` is the run's latency histogram (µs); `requests` holds each thread's request rate,
//! sampled every 100 ms (requests per second), as wrk's does.

use hdrhistogram::Histogram;
use mlua::{MetaMethod, UserData, UserDataFields, UserDataMethods};

/// A histogram seen from Lua.
pub(crate) struct Stats {
    histogram: Histogram<u64>,
    /// The distinct values recorded and their counts, lowest first (for `s(i)` and `#s`).
    values: Vec<(u64, u64)>,
}

impl Stats {
    pub fn new(histogram: Histogram<u64>) -> Self {
        let values = histogram
            .iter_recorded()
            .map(|v| {
                (
                    histogram.highest_equivalent(v.value_iterated_to()),
                    v.count_at_value(),
                )
            })
            .collect();
        Self { histogram, values }
    }

    /// The rate samples as a histogram of whole requests per second.
    pub fn from_samples(samples: &[f64]) -> Self {
        let mut h = Histogram::new(3).expect("3 significant digits are valid");
        h.auto(true);
        for &s in samples {
            if s.is_finite() && s >= 0.0 {
                // Rounded to whole requests per second, as wrk records them.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let _ = h.record(s.round() as u64);
            }
        }
        Self::new(h)
    }
}

#[allow(clippy::cast_precision_loss)] // Lua numbers are doubles.
impl UserData for Stats {
    fn add_fields<F: UserDataFields<Self>>(fields: &mut F) {
        fields.add_field_method_get("min", |_, s| {
            Ok(if s.histogram.is_empty() {
                0.0
            } else {
                s.histogram.min() as f64
            })
        });
        fields.add_field_method_get("max", |_, s| Ok(s.histogram.max() as f64));
        fields.add_field_method_get("mean", |_, s| Ok(s.histogram.mean()));
        fields.add_field_method_get("stdev", |_, s| Ok(s.histogram.stdev()));
    }

    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_method("percentile", |_, s, p: f64| {
            Ok(s.histogram.value_at_percentile(p.clamp(0.0, 100.0)) as f64)
        });
        methods.add_meta_method(MetaMethod::Call, |_, s, i: f64| {
            // 1-based, as wrk's `latency(i)`; out of range is (0, 0).
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let index = (i as usize).checked_sub(1);
            let (value, count) = index
                .and_then(|i| s.values.get(i).copied())
                .unwrap_or((0, 0));
            Ok((value as f64, count as f64))
        });
        methods.add_meta_method(MetaMethod::Len, |_, s, ()| Ok(s.values.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_read_like_wrk() {
        let lua = mlua::Lua::new();
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        for v in [100, 100, 200, 300] {
            h.record(v).unwrap();
        }
        lua.globals().set("s", Stats::new(h)).unwrap();
        let (min, max, mean, p50, n, v2, c2, c1): (f64, f64, f64, f64, i64, f64, f64, f64) = lua
            .load(
                "local v2, c2 = s(2) local _, c1 = s(1) \
                 return s.min, s.max, s.mean, s:percentile(50), #s, v2, c2, c1",
            )
            .eval()
            .unwrap();
        assert_eq!((min, max, mean, p50), (100.0, 300.0, 175.0, 100.0));
        assert_eq!((n, v2, c2, c1), (3, 200.0, 1.0, 2.0));
        let r = Stats::from_samples(&[1000.4, 2000.0]);
        lua.globals().set("r", r).unwrap();
        let max: f64 = lua.load("return r.max").eval().unwrap();
        assert!((max - 2000.0).abs() < 2.0, "{max}");
    }
}
