//! `Content-Type` from a file name's extension, through `mime_guess`'s maintained table, with
//! `charset=utf-8` added to text types (files are served as bytes; UTF-8 is the only charset a
//! modern site should be in, and naming it stops browsers from sniffing).

/// The type for unknown extensions (RFC 9110 §8.3: a server may send none, but nginx's default
/// `application/octet-stream` keeps browsers from rendering unknown bytes as HTML).
pub const DEFAULT_TYPE: &str = "application/octet-stream";

/// The `Content-Type` value for a file name.
#[must_use]
pub fn content_type(file_name: &str) -> String {
    let essence = mime_guess::from_path(file_name)
        .first_raw()
        .unwrap_or(DEFAULT_TYPE);
    if is_text(essence) {
        format!("{essence}; charset=utf-8")
    } else {
        essence.to_owned()
    }
}

/// Types whose bytes are text in a charset.
fn is_text(essence: &str) -> bool {
    essence.starts_with("text/")
        || matches!(
            essence,
            "application/javascript"
                | "application/json"
                | "application/xml"
                | "application/xhtml+xml"
                | "application/manifest+json"
                | "image/svg+xml"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types() {
        for (name, want) in [
            ("index.html", "text/html; charset=utf-8"),
            ("a.HTM", "text/html; charset=utf-8"),
            ("style.css", "text/css; charset=utf-8"),
            ("app.js", "text/javascript; charset=utf-8"),
            ("data.json", "application/json; charset=utf-8"),
            ("notes.txt", "text/plain; charset=utf-8"),
            ("logo.svg", "image/svg+xml; charset=utf-8"),
            ("photo.jpg", "image/jpeg"),
            ("icon.png", "image/png"),
            ("font.woff2", "font/woff2"),
            ("doc.pdf", "application/pdf"),
            ("archive.tar.gz", "application/gzip"),
            ("noextension", DEFAULT_TYPE),
            ("weird.zzzz", DEFAULT_TYPE),
        ] {
            assert_eq!(content_type(name), want, "{name}");
        }
    }
}
