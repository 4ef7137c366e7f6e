//! The client state machine's cases: frames a server would send, fed whole and byte by byte.

use super::*;

/// Frames a server would send, built with the codec's own writers.
fn server_frames(f: impl FnOnce(&mut Vec<u8>, &mut Encoder)) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = Encoder::default();
    f(&mut out, &mut enc);
    out
}

fn settings(out: &mut Vec<u8>, max_streams: u32) {
    frame::write_settings(out, &[(setting::MAX_CONCURRENT_STREAMS, max_streams)]);
}

#[derive(Debug, PartialEq)]
enum Seen {
    Head(u32, u16, Vec<(Vec<u8>, Vec<u8>)>, bool),
    Data(u32, Vec<u8>, bool),
    Trailers(u32, Vec<(Vec<u8>, Vec<u8>)>),
    Reset(u32, u32),
    GoAway(u32),
}

fn feed(c: &mut ClientConn, input: &[u8], step: usize) -> Result<Vec<Seen>, ErrorCode> {
    let mut seen = Vec::new();
    let mut buf = Vec::new();
    for chunk in input.chunks(step) {
        buf.extend_from_slice(chunk);
        let n = c.receive(&buf, |e| {
            let owned = |f: Fields<'_>| f.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
            seen.push(match e {
                Event::Head {
                    stream,
                    status,
                    fields,
                    end_stream,
                } => Seen::Head(stream, status, owned(fields), end_stream),
                Event::Data {
                    stream,
                    data,
                    end_stream,
                } => Seen::Data(stream, data.to_vec(), end_stream),
                Event::Trailers { stream, fields } => Seen::Trailers(stream, owned(fields)),
                Event::Reset { stream, code } => Seen::Reset(stream, code),
                Event::GoAway { last_stream, .. } => Seen::GoAway(last_stream),
            });
        })?;
        buf.drain(..n);
    }
    Ok(seen)
}

fn get(c: &mut ClientConn) -> Result<u32, OpenError> {
    c.open(
        [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", b"http"),
            (b":path", b"/"),
            (b":authority", b"x"),
        ],
        b"",
        &[],
    )
}

#[test]
fn a_response_with_trailers_byte_by_byte_and_whole() {
    for step in [1, 7, 100_000] {
        let mut c = ClientConn::new();
        assert!(c.out.starts_with(frame::PREFACE));
        let input = server_frames(|out, _| settings(out, 10));
        feed(&mut c, &input, step).unwrap();
        let id = get(&mut c).unwrap();
        let input = server_frames(|out, enc| {
            let mut block = Vec::new();
            enc.encode_response(
                200,
                [(&b"content-type"[..], &b"application/grpc"[..])],
                &mut block,
            );
            frame::write_headers(out, id, &block, false, 16_384);
            frame::write_data_header(out, id, 5, false);
            out.extend_from_slice(b"hello");
            block.clear();
            enc.encode_fields([(&b"grpc-status"[..], &b"0"[..])], &mut block);
            frame::write_headers(out, id, &block, true, 16_384);
        });
        let seen = feed(&mut c, &input, step).unwrap();
        assert_eq!(
            seen,
            vec![
                Seen::Head(
                    id,
                    200,
                    vec![
                        (b":status".to_vec(), b"200".to_vec()),
                        (b"content-type".to_vec(), b"application/grpc".to_vec())
                    ],
                    false
                ),
                Seen::Data(id, b"hello".to_vec(), false),
                Seen::Trailers(id, vec![(b"grpc-status".to_vec(), b"0".to_vec())]),
            ],
            "step {step}"
        );
        assert_eq!(c.in_flight(), 0);
    }
}

#[test]
fn the_servers_stream_limit_is_respected() {
    let mut c = ClientConn::new();
    // Before the server's SETTINGS, one stream at a time.
    get(&mut c).unwrap();
    assert_eq!(get(&mut c), Err(OpenError::Full));
    feed(&mut c, &server_frames(|o, _| settings(o, 3)), 100).unwrap();
    get(&mut c).unwrap();
    get(&mut c).unwrap();
    assert_eq!(get(&mut c), Err(OpenError::Full));
}

#[test]
fn goaway_refuses_the_streams_it_did_not_process() {
    let mut c = ClientConn::new();
    feed(&mut c, &server_frames(|o, _| settings(o, 10)), 100).unwrap();
    let ids: Vec<u32> = (0..3).map(|_| get(&mut c).unwrap()).collect();
    let input = server_frames(|o, _| frame::write_goaway(o, ids[0], ErrorCode::NoError, b""));
    let seen = feed(&mut c, &input, 100).unwrap();
    assert_eq!(seen[0], Seen::GoAway(ids[0]));
    let mut refused: Vec<u32> = seen[1..]
        .iter()
        .map(|s| match s {
            Seen::Reset(id, code) if *code == ErrorCode::RefusedStream as u32 => *id,
            other => panic!("{other:?}"),
        })
        .collect();
    refused.sort_unstable();
    assert_eq!(refused, ids[1..]);
    assert_eq!(c.in_flight(), 1);
    assert_eq!(get(&mut c), Err(OpenError::Closing));
}

/// A client whose server allows 10 streams and `window` bytes per stream, its own output
/// (preface, settings) cleared.
fn client_with_stream_window(window: u32) -> ClientConn {
    let mut c = ClientConn::new();
    feed(
        &mut c,
        &server_frames(|o, _| {
            frame::write_settings(
                o,
                &[
                    (setting::MAX_CONCURRENT_STREAMS, 10),
                    (setting::INITIAL_WINDOW_SIZE, window),
                ],
            );
        }),
        100,
    )
    .unwrap();
    c.out.clear();
    c
}

#[test]
fn request_bodies_wait_for_the_servers_window() {
    let mut c = client_with_stream_window(10);
    let id = c
        .open(
            [(&b":method"[..], &b"POST"[..])],
            &[b'x'; 25],
            &[(b"te-x", b"1")],
        )
        .unwrap();
    let data_frames = |out: &[u8]| {
        let mut at = 0;
        let mut sizes = Vec::new();
        while let Some(h) = FrameHeader::parse(&out[at..]) {
            if h.kind == kind::DATA {
                sizes.push((h.len, h.has(flag::END_STREAM)));
            }
            if h.kind == kind::HEADERS && at > 0 {
                sizes.push((u32::MAX, h.has(flag::END_STREAM)));
            }
            at += HEADER_LEN + h.len as usize;
        }
        sizes
    };
    assert_eq!(data_frames(&c.out), vec![(10, false)]);
    c.out.clear();
    let grant = server_frames(|o, _| frame::write_window_update(o, id, 100));
    feed(&mut c, &grant, 100).unwrap();
    // The rest of the body, then the trailers ending the stream.
    assert_eq!(data_frames(&c.out), vec![(15, false), (u32::MAX, true)]);
}

#[test]
fn a_streaming_body_goes_as_the_windows_allow_and_ends_with_trailers() {
    let mut c = client_with_stream_window(10);
    let id = c.open_streaming([(&b":method"[..], &b"POST"[..])]).unwrap();
    let h = FrameHeader::parse(&c.out).unwrap();
    assert_eq!(h.kind, kind::HEADERS);
    assert!(!h.has(flag::END_STREAM), "the body follows");
    c.out.clear();
    assert_eq!(c.send_room(id), 10);
    assert_eq!(c.send_data(id, &[b'x'; 25]), 10);
    assert_eq!(c.send_room(id), 0);
    assert_eq!(c.send_data(id, b"more"), 0);
    let h = FrameHeader::parse(&c.out).unwrap();
    assert_eq!(
        (h.kind, h.len, h.has(flag::END_STREAM)),
        (kind::DATA, 10, false)
    );
    c.out.clear();
    feed(
        &mut c,
        &server_frames(|o, _| frame::write_window_update(o, id, 100)),
        100,
    )
    .unwrap();
    assert!(
        c.out.is_empty(),
        "nothing is sent for a streaming body but what is given"
    );
    assert_eq!(c.send_data(id, &[b'y'; 15]), 15);
    assert!(c.finish(id, [(&b"x-sum"[..], &b"1"[..])]));
    assert!(!c.sending(id));
    assert!(!c.finish(id, []), "ended once");
    let mut kinds = Vec::new();
    let mut at = 0;
    while let Some(h) = FrameHeader::parse(&c.out[at..]) {
        kinds.push((h.kind, h.has(flag::END_STREAM)));
        at += HEADER_LEN + h.len as usize;
    }
    assert_eq!(kinds, vec![(kind::DATA, false), (kind::HEADERS, true)]);
    // Without trailers the end is an empty DATA frame.
    let id = c.open_streaming([(&b":method"[..], &b"POST"[..])]).unwrap();
    c.out.clear();
    assert!(c.finish(id, []));
    let h = FrameHeader::parse(&c.out).unwrap();
    assert_eq!(
        (h.kind, h.len, h.has(flag::END_STREAM)),
        (kind::DATA, 0, true)
    );
}

#[test]
fn a_complete_response_before_the_body_ends_resets_the_stream() {
    let mut c = ClientConn::new();
    feed(&mut c, &server_frames(|o, _| settings(o, 10)), 100).unwrap();
    let id = c.open_streaming([(&b":method"[..], &b"POST"[..])]).unwrap();
    assert_eq!(c.send_data(id, b"part"), 4);
    c.out.clear();
    let input = server_frames(|out, enc| {
        let mut block = Vec::new();
        enc.encode_response(413, [], &mut block);
        frame::write_headers(out, id, &block, true, 16_384);
    });
    let seen = feed(&mut c, &input, 100).unwrap();
    assert!(matches!(seen[..], [Seen::Head(_, 413, _, true)]));
    assert!(!c.sending(id));
    assert_eq!(c.send_room(id), 0);
    let h = FrameHeader::parse(&c.out).unwrap();
    assert_eq!((h.kind, h.stream), (kind::RST_STREAM, id));
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn a_reset_and_a_cancel() {
    let mut c = ClientConn::new();
    feed(&mut c, &server_frames(|o, _| settings(o, 10)), 100).unwrap();
    let a = get(&mut c).unwrap();
    let b = get(&mut c).unwrap();
    let seen = feed(
        &mut c,
        &server_frames(|o, _| frame::write_rst_stream(o, a, ErrorCode::Internal)),
        100,
    )
    .unwrap();
    assert_eq!(seen, vec![Seen::Reset(a, ErrorCode::Internal as u32)]);
    c.out.clear();
    c.cancel(b);
    assert_eq!(c.in_flight(), 0);
    let h = FrameHeader::parse(&c.out).unwrap();
    assert_eq!((h.kind, h.stream), (kind::RST_STREAM, b));
}

#[test]
fn protocol_errors_end_the_connection() {
    // DATA on a stream never opened; PUSH_PROMISE; a frame over the announced size.
    for input in [
        server_frames(|o, _| {
            frame::write_data_header(o, 99, 1, false);
            o.push(b'x');
        }),
        server_frames(|o, _| frame::write_header(o, 4, kind::PUSH_PROMISE, 4, 1)),
        server_frames(|o, _| frame::write_header(o, 20_000, kind::DATA, 0, 1)),
    ] {
        let mut c = ClientConn::new();
        get(&mut c).unwrap();
        let mut padded = input.clone();
        padded.resize(padded.len().max(20_009), 0);
        assert!(c.receive(&padded, |_| {}).is_err(), "{input:?}");
    }
}

#[test]
fn data_is_given_back_once_released() {
    let mut c = ClientConn::new();
    feed(&mut c, &server_frames(|o, _| settings(o, 10)), 100).unwrap();
    let id = get(&mut c).unwrap();
    let body = vec![b'y'; 16_000];
    let input = server_frames(|out, enc| {
        let mut block = Vec::new();
        enc.encode_response(200, [], &mut block);
        frame::write_headers(out, id, &block, false, 16_384);
        for _ in 0..5 {
            frame::write_data_header(out, id, body.len(), false);
            out.extend_from_slice(&body);
        }
    });
    c.out.clear();
    feed(&mut c, &input, 100_000).unwrap();
    assert!(
        c.out.is_empty(),
        "a window update before anything was released"
    );
    c.release(id, 80_000);
    let h = FrameHeader::parse(&c.out).unwrap();
    assert_eq!((h.kind, h.stream), (kind::WINDOW_UPDATE, id));
}
