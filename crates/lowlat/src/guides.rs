//! The guides under `docs/` that each manual page names in its SEE ALSO section, so that a reader
//! of `lowlat man serve` finds the prose the flags' one-line help cannot hold. The pages
//! themselves stay generated from the clap definitions (`man`); this module only owns which
//! guide goes with which command, and the roff of that section.

/// A guide: its path in the source tree and what it covers, in a few words.
pub struct Guide {
    pub path: &'static str,
    pub about: &'static str,
}

const SERVING: Guide = Guide {
    path: "docs/serving.md",
    about: "the server and its built-in routes, sites, redirects and return rules, static files \
            and try_files, compression, the dynamic app",
};
const TLS: Guide = Guide {
    path: "docs/tls.md",
    about: "HTTPS, automatic HTTPS (ACME), HTTP/2, HTTP/3 over QUIC",
};
const PROXY: Guide = Guide {
    path: "docs/proxy.md",
    about: "the reverse proxy: balancing, health checks, HTTP/2 and TLS upstreams, gRPC, WebSocket",
};
const PROTECTION: Guide = Guide {
    path: "docs/protection.md",
    about: "access rules by network, rate limits, Basic authentication and client certificates (mTLS), per site and path",
};
const PHP: Guide = Guide {
    path: "docs/php.md",
    about: "PHP applications (WordPress, DokuWiki…) through php-fpm, FastCGI upstreams",
};
const OPERATIONS: Guide = Guide {
    path: "docs/operations.md",
    about: "install, the configuration file and reload, error and access logs, metrics, limits",
};
const LOAD: Guide = Guide {
    path: "docs/load.md",
    about:
        "lowlat load: wrk's flags and Lua scripts, constant rate, thresholds, several machines, \
            HTTPS, HTTP/2, HTTP/3, WebSocket",
};
const BENCH: Guide = Guide {
    path: "docs/bench.md",
    about: "lowlat bench: specs, services, system calls per request, compare as a CI gate",
};
const DESIGN: Guide = Guide {
    path: "docs/DESIGN.md",
    about: "how lowlat works and why",
};
const PERFORMANCE: Guide = Guide {
    path: "docs/PERFORMANCE.md",
    about: "every figure with its date, build and command",
};

/// The guides for the page of `words` (`[]` for the top page, `["load", "merge"]`).
pub fn for_page(words: &[String]) -> &'static [Guide] {
    match words.first().map(String::as_str) {
        None => &[
            SERVING,
            TLS,
            PROXY,
            PROTECTION,
            PHP,
            OPERATIONS,
            LOAD,
            BENCH,
            DESIGN,
            PERFORMANCE,
        ],
        Some("serve") => &[SERVING, TLS, PROXY, PHP, PROTECTION, OPERATIONS],
        Some("load") => &[LOAD],
        Some("bench") => &[BENCH, PERFORMANCE],
        Some(_) => &[OPERATIONS],
    }
}

/// The SEE ALSO section: the top page's name for a command's page (and the other way round),
/// then the guides, each with what it covers.
pub fn see_also(words: &[String]) -> String {
    let mut out = String::from(".SH \"SEE ALSO\"\n");
    if words.is_empty() {
        out.push_str("Guides in lowlat's source tree, one per job:\n");
    } else {
        out.push_str("\\fBlowlat\\fR(1); guides in lowlat's source tree:\n");
    }
    for guide in for_page(words) {
        out.push_str(".TP\n\\fB");
        out.push_str(&escape(guide.path));
        out.push_str("\\fR\n");
        out.push_str(&escape(guide.about));
        out.push('\n');
    }
    out
}

/// Text made safe for roff: a backslash and a minus sign escaped (`-` is a hyphen to roff), and
/// a line never starting with a control character.
fn escape(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every guide a page names exists in the source tree.
    #[test]
    fn every_guide_exists() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        for words in [
            &[][..],
            &["serve".to_owned()],
            &["load".to_owned()],
            &["bench".to_owned()],
            &["man".to_owned()],
        ] {
            for guide in for_page(words) {
                let path = std::path::Path::new(root).join(guide.path);
                assert!(path.is_file(), "{} is missing", guide.path);
            }
        }
    }

    #[test]
    fn roff_is_escaped() {
        assert_eq!(escape("a-b"), "a\\-b");
        assert_eq!(escape(".x"), "\\&.x");
        let section = see_also(&["serve".to_owned()]);
        assert!(section.starts_with(".SH \"SEE ALSO\"\n"), "{section}");
        assert!(section.contains("\\fBdocs/proxy.md\\fR\n"), "{section}");
    }
}
