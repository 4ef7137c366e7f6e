//! The QPACK decoder on arbitrary bytes: the input is cut into an encoder stream (fed in two
//! pieces) and field sections on a few streams, each decoded, retried when unblocked, or
//! cancelled. Never panics; every decoded section stays within the size limit; the table never
//! exceeds its capacity; blocked streams never exceed their bound.
#![no_main]

use lowlat_http::h3::qpack::{Decoded, Decoder};

const MAX_SECTION: usize = 4096;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
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
    let mut check = |d: &mut Decoder, stream: u64, section: &[u8]| -> bool {
        let mut size = 0usize;
        match d.decode_section(stream, section, |f| size += f.name.len() + f.value.len() + 32) {
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
});
