//! HTTP/3's codec: frames on a stream split anywhere, and QPACK — the decoder on any bytes
//! (encoder stream and field sections), and decode(encode(x)) == x for the encoder.

use arbitrary::{Arbitrary, Unstructured};
use lowlat_http::h3::qpack::{self, Decoded, Decoder};
use lowlat_http::h3::{ControlStream, Frame, FrameDecoder, RequestStream, Role};

/// Frames as text (DATA chunks joined into one), or the first error.
fn run(parts: &[&[u8]]) -> (Vec<String>, Option<String>) {
    let mut dec = FrameDecoder::new(1024);
    let mut request = RequestStream::new(Role::Server);
    let mut control = ControlStream::new(Role::Client);
    let mut out = Vec::new();
    let mut data: Option<(u64, Vec<u8>)> = None;
    for part in parts {
        let mut at = 0;
        loop {
            let d = match dec.decode(&part[at..]) {
                Ok(d) => d,
                Err(e) => return (out, Some(format!("{e:?}"))),
            };
            at += d.consumed;
            assert!(at <= part.len());
            let Some(f) = d.frame else {
                assert_eq!(at, part.len());
                break;
            };
            let _ = request.on_frame(&f);
            let _ = control.on_frame(&f);
            match f {
                Frame::DataHeader { len } => {
                    if let Some((_, d)) = data.take() {
                        out.push(format!("data {d:?}"));
                    }
                    data = Some((len, Vec::new()));
                }
                Frame::Data(b) => {
                    let (len, d) = data.as_mut().expect("DATA chunk without its header");
                    d.extend_from_slice(b);
                    assert!(d.len() as u64 <= *len);
                }
                f => {
                    if let Some((_, d)) = data.take() {
                        out.push(format!("data {d:?}"));
                    }
                    out.push(format!("{f:?}"));
                }
            }
        }
    }
    if let Some((_, d)) = data.take() {
        out.push(format!("data {d:?}"));
    }
    let end = dec.finish().err().map(|e| format!("{e:?}"));
    (out, end)
}

/// The HTTP/3 frame decoder on any bytes, whole and split in two at a point the input chooses:
/// never panics, never yields more DATA than announced, and gives the same frames (DATA joined)
/// and the same verdict however the input is split. Each frame also goes through the
/// request-stream and control-stream order checks.
pub fn frames(data: &[u8]) {
    let split = data.first().map_or(0, |&b| usize::from(b)) % (data.len() + 1);
    let whole = run(&[data]);
    let parts = run(&[&data[..split], &data[split..]]);
    assert_eq!(whole, parts);
}

const MAX_SECTION: usize = 4096;

/// The QPACK decoder on any bytes: the input is cut into an encoder stream (fed in two pieces)
/// and field sections on a few streams, each decoded, retried when unblocked, or cancelled.
/// Every decoded section stays within the size limit; the table never exceeds its capacity;
/// blocked streams never exceed their bound.
pub fn qpack_decoder(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let capacity = usize::from(control & 0x0f) * 32;
    let max_blocked = usize::from(control >> 4) % 4;
    let mut d = Decoder::new(capacity, max_blocked, MAX_SECTION);
    // Pieces separated by 0xfe 0xfe: the first is the encoder stream, the rest sections.
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < rest.len() {
        if rest[i] == 0xfe && rest[i + 1] == 0xfe {
            pieces.push(&rest[start..i]);
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    pieces.push(&rest[start..]);
    let encoder = pieces[0];
    let half = encoder.len() / 2;
    let mut blocked = Vec::new();
    let mut out = Vec::new();
    let check = |d: &mut Decoder, stream: u64, section: &[u8]| -> bool {
        let mut size = 0usize;
        match d.decode_section(stream, section, |f| {
            size += f.name.len() + f.value.len() + 32;
        }) {
            Ok(Decoded::Done) => {
                assert!(size <= MAX_SECTION);
                true
            }
            Ok(Decoded::Blocked) => {
                assert!(d.blocked_streams() <= max_blocked);
                false
            }
            Err(_) => true,
        }
    };
    if d.feed_encoder_stream(&encoder[..half]).is_err() {
        return;
    }
    for (n, section) in pieces[1..].iter().enumerate() {
        let stream = 4 * n as u64;
        if !check(&mut d, stream, section) {
            blocked.push((stream, *section));
        }
    }
    let fed = d.feed_encoder_stream(&encoder[half..]);
    assert!(d.table_size() <= capacity);
    if fed.is_ok() {
        let ready: Vec<u64> = d.take_unblocked().collect();
        for (stream, section) in &blocked {
            if ready.contains(stream) {
                assert!(check(&mut d, *stream, section), "unblocked yet blocked");
            } else {
                d.cancel_stream(*stream);
            }
        }
    }
    d.write_decoder_stream(&mut out);
}

/// One section the encoder writes: a response's (with its status) or a request's fields.
#[derive(Debug, Arbitrary)]
struct Section {
    status: Option<u16>,
    fields: Vec<(Vec<u8>, Vec<u8>, bool)>,
}

/// decode(encode(x)) == x for QPACK: each section written by the encoder (static table and
/// literals, Huffman or not as the input says, the never-indexed bit kept) decodes to its fields
/// with a decoder that has no dynamic table, and never blocks.
pub fn qpack_roundtrip(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(huffman) = bool::arbitrary(&mut u) else {
        return;
    };
    let Ok(sections) = Vec::<Section>::arbitrary_take_rest(u) else {
        return;
    };
    let encoder = qpack::Encoder::new(huffman);
    let mut decoder = Decoder::new(0, 0, usize::MAX);
    let mut out = Vec::new();
    for (n, s) in sections.iter().enumerate() {
        out.clear();
        let mut expected: Vec<(Vec<u8>, Vec<u8>, bool)> = Vec::new();
        match s.status {
            Some(status) => {
                let status = 100 + status % 900;
                expected.push((b":status".to_vec(), status.to_string().into_bytes(), false));
                encoder.encode_response(status, [], &mut out);
            }
            None => encoder.begin_section(&mut out),
        }
        for (name, value, never) in &s.fields {
            encoder.field(name, value, *never, &mut out);
            expected.push((name.clone(), value.clone(), *never));
        }
        let mut got = Vec::new();
        let d = decoder
            .decode_section(4 * n as u64, &out, |f| {
                got.push((f.name.to_vec(), f.value.to_vec(), f.never_indexed));
            })
            .expect("an encoded section decodes");
        assert_eq!(d, Decoded::Done);
        assert_eq!(got, expected);
    }
}
