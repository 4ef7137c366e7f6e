//! The limit zones' families on `/metrics`: requests each rate-limit zone refused or held back
//! (or, in a dry run, would have), those it holds back now, and the keys it holds, and for a zone kept in Redis whether Redis is
//! reachable and what this instance and the others admitted; the same for each connection-limit zone, with the
//! requests in progress; and what each forward-auth rule decided. Zones are registered when the settings build them and kept across
//! reloads while their spec is unchanged, so their counts go on (and the places held by
//! requests in progress across a reload are counted by the zone that goes on).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::auth_rule::AuthRule;
use super::connlimit::{ConnZone, ConnZoneSpec};
use super::ratelimit::{Zone, ZoneSpec};

static ZONES: Mutex<Vec<Arc<Zone>>> = Mutex::new(Vec::new());
static CONN_ZONES: Mutex<Vec<Arc<ConnZone>>> = Mutex::new(Vec::new());
static FORWARD_AUTH: Mutex<Vec<Arc<AuthRule>>> = Mutex::new(Vec::new());

/// The forward-auth rule labelled `label` copying `copy`: the one already running with this
/// very label and list (a reload keeps its counts), or a new one. Rules no longer in the
/// settings are dropped at the next call of [`retain_forward_auth`].
pub fn forward_auth(label: String, copy: Vec<String>) -> Arc<AuthRule> {
    let mut rules = FORWARD_AUTH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(r) = rules.iter().find(|r| {
        r.label == label
            && r.copy
                .iter()
                .map(|c| &**c)
                .eq(copy.iter().map(String::as_str))
    }) {
        return Arc::clone(r);
    }
    let r = Arc::new(AuthRule::new(label, copy));
    rules.push(Arc::clone(&r));
    r
}

/// Keeps only `current` registered (the forward-auth rules of the settings now in use).
pub fn retain_forward_auth(current: &[Arc<AuthRule>]) {
    FORWARD_AUTH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .retain(|r| current.iter().any(|c| Arc::ptr_eq(c, r)));
}

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

/// The connection-limit zone for `spec`, as [`zone`] finds or makes a rate-limit one.
pub fn conn_zone(spec: ConnZoneSpec) -> Arc<ConnZone> {
    let mut zones = CONN_ZONES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(z) = zones.iter().find(|z| z.spec == spec) {
        return Arc::clone(z);
    }
    let z = Arc::new(ConnZone::new(spec));
    zones.push(Arc::clone(&z));
    z
}

/// Keeps only `current` registered (the zones of the settings now in use).
pub fn retain(current: &[Arc<Zone>], current_conns: &[Arc<ConnZone>]) {
    ZONES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .retain(|z| current.iter().any(|c| Arc::ptr_eq(c, z)));
    CONN_ZONES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .retain(|z| current_conns.iter().any(|c| Arc::ptr_eq(c, z)));
}

/// Appends the zones' counts to `s`, when there are zones.
pub(crate) fn render(s: &mut String) {
    render_rate(s);
    render_conn(s);
    render_forward_auth(s);
}

fn render_forward_auth(s: &mut String) {
    let rules = FORWARD_AUTH
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if rules.is_empty() {
        return;
    }
    s.push_str("# HELP lowlat_forward_auth_total Requests a forward-auth rule judged: passed (the auth service answered 2xx), denied (its 401, 403 or redirect relayed), failed (another answer, none, or a timeout: refused).\n# TYPE lowlat_forward_auth_total counter\n");
    for r in rules.iter() {
        for (outcome, n) in [
            ("passed", &r.passed),
            ("denied", &r.denied),
            ("failed", &r.failed),
        ] {
            let _ = writeln!(
                s,
                "lowlat_forward_auth_total{{rule=\"{}\",outcome=\"{outcome}\"}} {}",
                label(&r.label),
                n.load(Ordering::Relaxed)
            );
        }
    }
}

/// A family of per-zone series: its name, type, help, and what a zone's series says (its
/// labels and value).
type Family<Z> = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Z) -> (String, u64),
);

const CONN_FAMILIES: [Family<ConnZone>; 3] = [
    (
        "lowlat_conn_limit_refused_total",
        "counter",
        "Requests a connection-limit zone refused (in a dry run: would have).",
        |z| {
            (
                labels(&z.spec.text, Some(z.spec.dry_run)),
                z.refused.load(Ordering::Relaxed),
            )
        },
    ),
    (
        "lowlat_conn_limit_in_progress",
        "gauge",
        "Requests a connection-limit zone counts now, every key together.",
        |z| (labels(&z.spec.text, None), z.in_progress()),
    ),
    (
        "lowlat_conn_limit_keys",
        "gauge",
        "Keys with requests in progress in a connection-limit zone.",
        |z| (labels(&z.spec.text, None), z.keys() as u64),
    ),
];

const RATE_FAMILIES: [Family<Zone>; 4] = [
    (
        "lowlat_rate_limit_refused_total",
        "counter",
        "Requests a rate-limit zone refused (in a dry run: would have).",
        |z| {
            (
                labels(&z.spec.text, Some(z.spec.dry_run)),
                z.refused.load(Ordering::Relaxed),
            )
        },
    ),
    (
        "lowlat_rate_limit_delayed_total",
        "counter",
        "Requests a rate-limit zone held back within its burst (in a dry run: would have).",
        |z| {
            (
                labels(&z.spec.text, Some(z.spec.dry_run)),
                z.delayed.load(Ordering::Relaxed),
            )
        },
    ),
    (
        "lowlat_rate_limit_waiting",
        "gauge",
        "Requests a rate-limit zone holds back now, every worker together.",
        |z| {
            (
                labels(&z.spec.text, None),
                z.waiting.load(Ordering::Relaxed),
            )
        },
    ),
    (
        "lowlat_rate_limit_keys",
        "gauge",
        "Keys a rate-limit zone holds (bounded by its keys=).",
        |z| (labels(&z.spec.text, None), z.keys() as u64),
    ),
];

fn render_conn(s: &mut String) {
    let zones = CONN_ZONES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for f in &CONN_FAMILIES {
        family(s, f, &zones);
    }
}

fn render_rate(s: &mut String) {
    let zones = ZONES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if zones.is_empty() {
        return;
    }
    for f in &RATE_FAMILIES {
        family(s, f, &zones);
    }
    render_fleet(s, &zones);
}

/// A zone's labels: its name, and whether it is a dry run where that tells series apart.
fn labels(text: &str, dry_run: Option<bool>) -> String {
    match dry_run {
        Some(dry) => format!("zone=\"{}\",dry_run=\"{dry}\"", label(text)),
        None => format!("zone=\"{}\"", label(text)),
    }
}

/// One family: its HELP and TYPE lines, then a series for each zone (nothing without zones).
fn family<Z>(s: &mut String, (name, kind, help, series): &Family<Z>, zones: &[Arc<Z>]) {
    if zones.is_empty() {
        return;
    }
    let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for z in zones {
        let (labels, value) = series(z);
        let _ = writeln!(s, "{name}{{{labels}}} {value}");
    }
}

/// The exchange with Redis of the zones kept there, when there are such zones.
fn render_fleet(s: &mut String, zones: &[Arc<Zone>]) {
    let fleet: Vec<_> = zones
        .iter()
        .filter_map(|z| {
            z.fleet()
                .map(|(target, counts)| (label(&z.spec.text), target, counts))
        })
        .collect();
    if fleet.is_empty() {
        return;
    }
    s.push_str("# HELP lowlat_rate_limit_redis_up Whether a zone kept in Redis counts with the fleet now (1), or on this instance alone because Redis is unreachable (0).\n# TYPE lowlat_rate_limit_redis_up gauge\n");
    for (zone, target, counts) in &fleet {
        let _ = writeln!(
            s,
            "lowlat_rate_limit_redis_up{{zone=\"{zone}\",redis=\"{}\"}} {}",
            label(&target.shown),
            u8::from(counts.up.load(Ordering::Relaxed))
        );
    }
    s.push_str("# HELP lowlat_rate_limit_fleet_requests_total Requests a zone kept in Redis admitted, by this instance (sent to Redis) and by the others (learned from it, for the keys this instance follows).\n# TYPE lowlat_rate_limit_fleet_requests_total counter\n");
    for (zone, _, counts) in &fleet {
        let _ = writeln!(
            s,
            "lowlat_rate_limit_fleet_requests_total{{zone=\"{zone}\",by=\"this\"}} {}\nlowlat_rate_limit_fleet_requests_total{{zone=\"{zone}\",by=\"others\"}} {}",
            counts.sent.load(Ordering::Relaxed),
            counts.learned.load(Ordering::Relaxed)
        );
    }
    s.push_str("# HELP lowlat_rate_limit_fleet_keys Keys a zone kept in Redis exchanges with it now (those with requests here lately).\n# TYPE lowlat_rate_limit_fleet_keys gauge\n");
    for (zone, _, counts) in &fleet {
        let _ = writeln!(
            s,
            "lowlat_rate_limit_fleet_keys{{zone=\"{zone}\"}} {}",
            counts.keys.load(Ordering::Relaxed)
        );
    }
}

/// A label value: `"` and `\` escaped.
fn label(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}
