//! The HTTP/3 frame decoder on arbitrary bytes, whole and split in two at a point the input
//! chooses: never panics, never yields more DATA than announced, and gives the same frames
//! (DATA joined) and the same verdict however the input is split. Each frame also goes through
//! the request-stream and control-stream order checks.
#![no_main]

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

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| usize::from(b)) % (data.len() + 1);
    let whole = run(&[data]);
    let parts = run(&[&data[..split], &data[split..]]);
    assert_eq!(whole, parts);
});
