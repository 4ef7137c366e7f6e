//! The rate-limit zones' families on `/metrics`: requests each zone refused (or, in a dry
//! run, would have) and the keys it holds. Zones are registered when the settings build them
//! and kept across reloads while their spec is unchanged, so their counts go on.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::ratelimit::{Zone, ZoneSpec};

static ZONES: Mutex<Vec<Arc<Zone>>> = Mutex::new(Vec::new());

/// The zone for `spec`: the one already running with this very spec (a reload keeps its
/// buckets and counts), or a new one. Zones no longer in the settings are dropped at the next
/// call of [`retain`].
pub fn zone(spec: ZoneSpec) -> Arc<Zone> {
    let mut zones = ZONES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(z) = zones.iter().find(|z| z.spec == spec) {
        return Arc::clone(z);
    }
    let z = Arc::new(Zone::new(spec));
    zones.push(Arc::clone(&z));
    z
}

/// Keeps only `current` registered (the zones of the settings now in use).
pub fn retain(current: &[Arc<Zone>]) {
    let mut zones = ZONES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    zones.retain(|z| current.iter().any(|c| Arc::ptr_eq(c, z)));
}

/// Appends the zones' counts to `s`, when there are zones.
pub(crate) fn render(s: &mut String) {
    let zones = ZONES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if zones.is_empty() {
        return;
    }
    s.push_str("# HELP lowlat_rate_limit_refused_total Requests a rate-limit zone refused (in a dry run: would have).\n# TYPE lowlat_rate_limit_refused_total counter\n");
    for z in zones.iter() {
        let _ = writeln!(
            s,
            "lowlat_rate_limit_refused_total{{zone=\"{}\",dry_run=\"{}\"}} {}",
            label(&z.spec.text),
            z.spec.dry_run,
            z.refused.load(Ordering::Relaxed)
        );
    }
    s.push_str("# HELP lowlat_rate_limit_keys Keys a rate-limit zone holds (bounded by its keys=).\n# TYPE lowlat_rate_limit_keys gauge\n");
    for z in zones.iter() {
        let _ = writeln!(
            s,
            "lowlat_rate_limit_keys{{zone=\"{}\"}} {}",
            label(&z.spec.text),
            z.keys()
        );
    }
}

/// A label value: `"` and `\` escaped.
fn label(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}
