//! HPACK (RFC 7541): the decoder on any bytes, as a server decodes request blocks, and
//! decode(encode(x)) == x for the encoder both the server (responses) and the proxy's HTTP/2
//! client (requests) use.

use arbitrary::{Arbitrary, Unstructured};
use lowlat_http::h2::{Decoder, Encoder, RequestHead};

/// Separates header blocks in a decoder input.
const BLOCK_END: [u8; 2] = [0xfe, 0xfe];

/// The list limit (RFC 9113 `SETTINGS_MAX_HEADER_LIST_SIZE`) these checks decode under.
pub const MAX_LIST: usize = 4096;

/// Header blocks on any bytes (cut at `0xfe 0xfe`), decoded in turn by one connection's decoder
/// into request heads, as trailers for every third: never a panic, and a head that decoded is
/// within the list limit. After a compression error the connection is over, as in the server.
pub fn decoder(data: &[u8]) {
    let Some((&control, data)) = data.split_first() else {
        return;
    };
    // The table this side allows: 0 to 4 KiB.
    let allowed = usize::from(control) * 16;
    let mut decoder = Decoder::new(allowed);
    let mut head = RequestHead::default();
    for (n, block) in blocks(data).enumerate() {
        let trailers = n % 3 == 2;
        match head.decode(&mut decoder, block, MAX_LIST, trailers) {
            Ok(()) => assert!(list_size(&head) <= MAX_LIST, "decoded past the limit"),
            Err(lowlat_http::h2::HeadError::Compression) => return,
            Err(_) => {}
        }
    }
}

/// `data` cut at every [`BLOCK_END`].
pub(crate) fn blocks(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let r = rest?;
        if let Some(at) = r.windows(2).position(|w| w == BLOCK_END) {
            rest = Some(&r[at + 2..]);
            Some(&r[..at])
        } else {
            rest = None;
            Some(r)
        }
    })
}

/// A decoded head's list size as RFC 9113 §6.5.2 counts it: name, value and 32 per field.
pub(crate) fn list_size(head: &RequestHead) -> usize {
    let pseudo = [
        (":method", head.method().map(str::as_bytes)),
        (":scheme", head.scheme().map(str::as_bytes)),
        (":authority", head.authority()),
        (":path", head.path().map(str::as_bytes)),
        (":protocol", head.protocol().map(str::as_bytes)),
    ];
    let pseudo: usize = pseudo
        .iter()
        .filter_map(|(n, v)| v.map(|v| n.len() + v.len() + 32))
        .sum();
    pseudo
        + head
            .fields()
            .map(|(n, v)| n.len() + v.len() + 32)
            .sum::<usize>()
}

/// One block an encoder writes: a response's (with its status) or a request's fields, after
/// the peer may have changed its table size.
#[derive(Debug, Arbitrary)]
struct Block {
    peer_table_size: Option<u16>,
    status: Option<u16>,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
}

/// decode(encode(x)) == x over a connection's worth of blocks: one encoder, one decoder, the
/// dynamic table in step across blocks, table size changes announced as the encoder must.
pub fn roundtrip(data: &[u8]) {
    let Ok(blocks) = Vec::<Block>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut encoder = Encoder::default();
    // The decoder allows what the server announces (the protocol's default).
    let mut decoder = Decoder::new(4096);
    let mut out = Vec::new();
    for block in &blocks {
        if let Some(size) = block.peer_table_size {
            encoder.set_peer_table_size(u32::from(size));
        }
        out.clear();
        let fields = block
            .fields
            .iter()
            .map(|(n, v)| (n.as_slice(), v.as_slice()));
        let mut expected: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        match block.status {
            Some(status) => {
                let status = 100 + status % 900;
                expected.push((b":status".to_vec(), status.to_string().into_bytes()));
                encoder.encode_response(status, fields, &mut out);
            }
            None => encoder.encode_fields(fields, &mut out),
        }
        expected.extend(block.fields.iter().cloned());
        let mut got = Vec::new();
        decoder
            .decode(&out, |n, v| got.push((n.to_vec(), v.to_vec())))
            .expect("an encoded block decodes");
        assert_eq!(got, expected);
    }
}
