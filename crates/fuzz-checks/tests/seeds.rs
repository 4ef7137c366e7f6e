//! The fuzz targets' checks on their seed corpora (`fuzz/seeds/TARGET/`), on stable and with
//! every `cargo test`: the inputs the fuzzer started from, and every crash it found (kept there
//! as `crash-*`, named for what it broke), must pass.

#![warn(clippy::pedantic)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use lowlat_fuzz_checks::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of a target's seed corpus, sorted.
fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join("seeds").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Every target's every seed passes its check; the failures are listed by file.
#[test]
fn every_seed_passes_its_check() {
    let mut failed = Vec::new();
    let mut ran = 0;
    for (name, check) in TARGETS {
        for file in seeds(name) {
            let data = std::fs::read(&file).expect("a seed");
            if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
                failed.push(file.display().to_string());
            }
            ran += 1;
        }
    }
    assert!(failed.is_empty(), "failed: {failed:#?}");
    assert!(ran >= TARGETS.len(), "{ran} seeds");
}

/// Every target has seeds, and the list of checks and the fuzz targets agree both ways.
#[test]
fn targets_and_checks_agree() {
    for (name, _) in TARGETS {
        assert!(!seeds(name).is_empty(), "no seeds for {name}");
        let file = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            text.contains("lowlat_fuzz_checks::"),
            "{name} calls no check"
        );
    }
    for entry in std::fs::read_dir(fuzz_dir().join("fuzz_targets")).expect("fuzz_targets") {
        let path = entry.expect("an entry").path();
        let name = path.file_stem().and_then(|s| s.to_str()).expect("a name");
        assert!(
            lowlat_fuzz_checks::check(name).is_some(),
            "fuzz target {name} has no check in TARGETS"
        );
    }
}
