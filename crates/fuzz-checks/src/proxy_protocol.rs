//! The PROXY protocol header (v1 and v2), as the server reads it off a balancer's connection
//! before anything else: untrusted bytes on every listener marked `proxy_protocol`.

use lowlat_http::proxy_protocol::{self, write_v1, write_v2, MAX_HEADER_BYTES};
use lowlat_http::Status;

/// Any bytes: a whole header claims no more than it was given nor more than
/// [`MAX_HEADER_BYTES`], reads the same from exactly its own bytes, and every shorter prefix
/// is partial (the server peeks as bytes arrive); an error is never partial at the limit and
/// never complete on a prefix; a header's addresses written again (v1 and v2) read back.
pub fn header(data: &[u8]) {
    let verdict = proxy_protocol::parse(data);
    match verdict {
        Ok(Status::Complete(h)) => {
            assert!(h.len <= data.len() && h.len <= MAX_HEADER_BYTES);
            assert_eq!(proxy_protocol::parse(&data[..h.len]), verdict);
            // Every prefix is partial; checked on the first 200 cuts and the last, which cover
            // v1 entirely and v2's fixed part and address blocks.
            for cut in (0..h.len.min(200)).chain([h.len - 1]) {
                assert_eq!(proxy_protocol::parse(&data[..cut]), Ok(Status::Partial));
            }
            for write in [write_v1, write_v2] {
                let mut out = Vec::new();
                write(&mut out, h.addresses);
                let Ok(Status::Complete(back)) = proxy_protocol::parse(&out) else {
                    panic!("a written header does not read back");
                };
                assert_eq!(back.len, out.len());
                let key = |a: Option<proxy_protocol::Addresses>| {
                    a.map(|a| {
                        (
                            a.source.ip().to_canonical(),
                            a.source.port(),
                            a.destination.ip().to_canonical(),
                            a.destination.port(),
                        )
                    })
                };
                assert_eq!(key(back.addresses), key(h.addresses));
            }
        }
        Ok(Status::Partial) => assert!(data.len() < MAX_HEADER_BYTES),
        Err(_) => {
            // More bytes never mend a refused header.
            let mut longer = data.to_vec();
            longer.extend_from_slice(b"\r\n\r\n");
            assert!(proxy_protocol::parse(&longer).is_err());
        }
    }
}
