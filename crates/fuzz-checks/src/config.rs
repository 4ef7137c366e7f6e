//! The config file (`lowlat serve --config FILE`): TOML parsed, every key checked by its flag's
//! parser, sites and upstream groups read, and what checked turned into the server's
//! configuration. Nothing here touches the file system: `--check-config`'s further checks
//! (roots that exist, logs that open, state directories created) are left out on purpose, as
//! a fuzzer must not create files where an input says.

use lowlat_server::settings::file::load_text;

/// The name problems are reported under.
const SHOWN: &str = "fuzz.toml";

/// Any text as a config file: never a panic, every problem is one line (it is printed as one),
/// and a file without problems gives settings that either make a configuration or say why not
/// in one line.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match load_text(text.to_owned(), SHOWN.to_owned(), &[]) {
        Ok(loaded) => {
            for p in &loaded.problems {
                assert!(!p.contains('\n'), "a problem of several lines: {p:?}");
            }
            if loaded.problems.is_empty() {
                if let Err(e) = loaded.args.to_config() {
                    assert!(!e.contains('\n'), "a problem of several lines: {e:?}");
                }
            }
        }
        Err(problems) => {
            assert!(!problems.is_empty(), "refused without a reason");
            for p in &problems {
                assert!(!p.contains('\n'), "a problem of several lines: {p:?}");
            }
        }
    }
}
