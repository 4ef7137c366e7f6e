//! The chunked decoder on arbitrary bytes, whole and split: never panics, never yields more than
//! the limit, and agrees with itself however the input is split.
#![no_main]

use lowlat_http::body::ChunkedDecoder;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| usize::from(b)) % (data.len() + 1);
    let mut whole = Vec::new();
    let a = ChunkedDecoder::new(4096).decode(data, |d| whole.extend_from_slice(d));
    let mut parts = Vec::new();
    let mut dec = ChunkedDecoder::new(4096);
    let first = dec.decode(&data[..split], |d| parts.extend_from_slice(d));
    if let (Ok(a), Ok(f)) = (&a, &first) {
        assert!(whole.len() <= 4096);
        if !f.done && f.consumed == split {
            if let Ok(b) = dec.decode(&data[split..], |d| parts.extend_from_slice(d)) {
                assert_eq!(a.done, b.done);
                assert_eq!(whole, parts);
            }
        }
    }
});
