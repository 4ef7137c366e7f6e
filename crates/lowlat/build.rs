//! Records the git revision the binary is built from (when built from a checkout), so that
//! `lowlat --version` says exactly what runs: `0.1.0 (a1b2c3d)`, or `0.1.0` from a package.

fn main() {
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .is_some_and(|o| !o.stdout.is_empty());
    let version = env!("CARGO_PKG_VERSION");
    let long = match rev {
        Some(rev) if dirty => format!("{version} ({rev}, modified)"),
        Some(rev) => format!("{version} ({rev})"),
        None => version.to_owned(),
    };
    println!("cargo:rustc-env=LOWLAT_LONG_VERSION={long}");
    // Rebuild the string when HEAD moves; a missing .git (a package) just never changes.
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/index");
}
