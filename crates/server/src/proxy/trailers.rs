//! Which upstream trailer fields reach the client. A trailer may not carry what a recipient
//! needs before the body — framing, routing, authentication, request modifiers, response
//! controls, how the content is processed (RFC 9110 §6.5.1) — nor a hop-by-hop field; such
//! fields are dropped rather than relayed, as a recipient may do (§6.5.2). Everything else
//! (`grpc-status`, `grpc-message`, checksums, `Server-Timing`) passes.

/// Fields never relayed in a trailer section (lower case).
const NOT_IN_TRAILERS: &[&[u8]] = &[
    // Framing and the connection.
    b"content-length",
    b"transfer-encoding",
    b"trailer",
    b"connection",
    b"keep-alive",
    b"te",
    b"upgrade",
    b"proxy-connection",
    // Routing, authentication and request modifiers.
    b"host",
    b"authorization",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"www-authenticate",
    b"set-cookie",
    b"cookie",
    b"expect",
    b"max-forwards",
    b"range",
    // Response controls and how the content is read.
    b"cache-control",
    b"age",
    b"expires",
    b"date",
    b"location",
    b"retry-after",
    b"vary",
    b"content-encoding",
    b"content-type",
    b"content-range",
];

/// Whether a trailer field named `name` is relayed to the client.
pub(crate) fn trailer_passes(name: &[u8]) -> bool {
    let proxy_field = name.len() > 6 && name[..6].eq_ignore_ascii_case(b"proxy-");
    !(name.is_empty()
        || name.starts_with(b":")
        || proxy_field
        || NOT_IN_TRAILERS.iter().any(|f| f.eq_ignore_ascii_case(name)))
}

#[cfg(test)]
mod tests {
    use super::trailer_passes;

    #[test]
    fn framing_and_routing_fields_stay_behind() {
        for ok in ["grpc-status", "grpc-message", "X-Checksum", "Server-Timing"] {
            assert!(trailer_passes(ok.as_bytes()), "{ok}");
        }
        for no in [
            "Content-Length",
            "transfer-encoding",
            "Host",
            "Set-Cookie",
            "Proxy-Status",
            "TE",
            ":status",
            "",
        ] {
            assert!(!trailer_passes(no.as_bytes()), "{no}");
        }
    }
}
