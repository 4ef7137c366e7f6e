//! The shipped `lowlat.example.toml` documents every flag as a key, and every key in it, once
//! uncommented, is accepted by the parser of its flag.

use clap::{Args, Command};

fn example() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../lowlat.example.toml"
    ))
    .unwrap()
}

#[test]
fn every_flag_is_a_documented_key() {
    let text = example();
    let mut cmd = lowlat_server::settings::ServeArgs::augment_args(Command::new("serve"));
    cmd.build();
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long().filter(|_| !arg.is_hide_set()) else {
            continue;
        };
        if ["help", "config", "check-config"].contains(&long) {
            continue;
        }
        let key = long.replace('-', "_");
        assert!(
            text.lines().any(|l| l.starts_with(&format!("# {key} = "))),
            "--{long} has no `{key}` in lowlat.example.toml"
        );
    }
}

#[test]
fn every_key_parses() {
    let uncommented: String = example()
        .lines()
        .map(|l| {
            let is_key = l
                .strip_prefix("# ")
                .and_then(|r| r.split_once(" = "))
                .is_some_and(|(k, _)| k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
            if is_key {
                format!("{}\n", &l[2..])
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.toml");
    std::fs::write(&path, uncommented).unwrap();
    let args = lowlat_server::settings::merged(&path, &[]).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(args.max_body, 1 << 20);
    assert_eq!(args.listen.len(), 1);
}
