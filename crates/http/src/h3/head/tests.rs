//! Heads through whole HTTP/3 streams: a client's request written, split anywhere, read back by
//! a server's frame decoder, stream state and head decoder; responses the other way; every
//! malformed shape refused with the right error.

use super::*;
use crate::h3::frame::{put_data_header, Frame, FrameDecoder};
use crate::h3::qpack::{EncoderInstruction, FieldLine, SectionPrefix, Str};
use crate::h3::stream::{RequestStream, Role, Section};

fn line<'a>(method: &'a str, path: &'a str) -> RequestLine<'a> {
    RequestLine {
        method: method.as_bytes(),
        scheme: b"https",
        authority: b"example.com",
        path: path.as_bytes(),
        protocol: None,
    }
}

/// What a server makes of one request stream: method, path, fields, body, trailers.
#[derive(Debug, PartialEq)]
struct Seen {
    method: String,
    path: String,
    protocol: Option<String>,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
    /// A trailer section came (its fields are checked, not kept: as over HTTP/2).
    trailers: bool,
}

fn serve(stream: &[u8], step: usize) -> Result<Seen, Error> {
    let mut dec = FrameDecoder::new(16 << 10);
    let mut state = RequestStream::new(Role::Server);
    let mut qpack = Decoder::new(0, 0, 16 << 10);
    let mut head = RequestHead::default();
    let mut seen = Seen {
        method: String::new(),
        path: String::new(),
        protocol: None,
        fields: vec![],
        body: vec![],
        trailers: false,
    };
    for piece in stream.chunks(step) {
        let mut at = 0;
        loop {
            let d = dec.decode(&piece[at..])?;
            at += d.consumed;
            let Some(frame) = d.frame else { break };
            match state.on_frame(&frame)? {
                Some(section) => {
                    let Frame::Headers(s) = frame else {
                        unreachable!()
                    };
                    let trailers = section == Section::Trailers;
                    let r = head.decode_h3(&mut qpack, 0, s, 16 << 10, trailers, true)?;
                    assert_eq!(r, Decoded::Done);
                    let fields = head
                        .fields()
                        .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v).into_owned()))
                        .collect();
                    if trailers {
                        seen.trailers = true;
                    } else {
                        seen.method = head.method().unwrap_or("").into();
                        seen.path = head.path().unwrap_or("").into();
                        seen.protocol = head.protocol().map(Into::into);
                        seen.fields = fields;
                        state.set_content_length(head.content_length);
                    }
                }
                None => {
                    if let Frame::Data(b) = frame {
                        seen.body.extend_from_slice(b);
                    }
                }
            }
        }
    }
    dec.finish()?;
    state.finish()?;
    Ok(seen)
}

fn request(
    line: &RequestLine<'_>,
    fields: &[(&str, &str)],
    body: &[u8],
    trailers: &[(&str, &str)],
) -> Vec<u8> {
    let enc = Encoder::default();
    let mut out = Vec::new();
    write_request(
        &enc,
        line,
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        &mut out,
    );
    if !body.is_empty() {
        put_data_header(&mut out, body.len() as u64);
        out.extend_from_slice(body);
    }
    if !trailers.is_empty() {
        write_fields(
            &enc,
            trailers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut out,
        );
    }
    out
}

#[test]
fn a_request_split_anywhere() {
    let stream = request(
        &line("POST", "/upload?x=1"),
        &[
            ("content-length", "11"),
            ("user-agent", "lowlat"),
            ("x-a", "b"),
        ],
        b"hello world",
        &[("x-checksum", "abc")],
    );
    let whole = serve(&stream, stream.len()).unwrap();
    assert_eq!(
        whole,
        Seen {
            method: "POST".into(),
            path: "/upload?x=1".into(),
            protocol: None,
            fields: vec![
                ("content-length".into(), "11".into()),
                ("user-agent".into(), "lowlat".into()),
                ("x-a".into(), "b".into()),
            ],
            body: b"hello world".to_vec(),
            trailers: true,
        }
    );
    for step in 1..stream.len() {
        assert_eq!(serve(&stream, step).unwrap(), whole, "step {step}");
    }
}

#[test]
fn extended_connect() {
    let mut l = line("CONNECT", "/chat");
    l.protocol = Some(b"websocket");
    let seen = serve(&request(&l, &[], b"", &[]), 7).unwrap();
    assert_eq!(seen.method, "CONNECT");
    assert_eq!(seen.protocol.as_deref(), Some("websocket"));
    // Not announced: refused.
    let mut out = Vec::new();
    let enc = Encoder::default();
    write_request(&enc, &l, [], &mut out);
    let section = &out[2..]; // the HEADERS frame header is 2 bytes here
    let r = RequestHead::default().decode_h3(
        &mut Decoder::new(0, 0, 4096),
        0,
        section,
        4096,
        false,
        false,
    );
    assert_eq!(r, Err(Error::Message("malformed request head")));
    // A plain CONNECT sends only :method and :authority, and is accepted.
    let seen = serve(&request(&line("CONNECT", "/ignored"), &[], b"", &[]), 3).unwrap();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("CONNECT", ""));
}

fn section(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    Encoder::new(false).encode_section(
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        &mut out,
    );
    out
}

#[test]
fn malformed_requests() {
    let base = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "a"),
        (":path", "/"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        v
    };
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "a"),
        ],
        vec![(":method", "GET"), (":scheme", "https"), (":path", "/")],
        with(&[(":method", "GET")]),
        with(&[(":status", "200")]),
        with(&[("Upper", "x")]),
        with(&[("connection", "close")]),
        with(&[("transfer-encoding", "chunked")]),
        with(&[("te", "gzip")]),
        with(&[("x", " padded")]),
        with(&[("x", "a\r\nb")]),
        with(&[("content-length", "1"), ("content-length", "2")]),
        with(&[("content-length", "-1")]),
        with(&[("host", "b")]),
        with(&[("host", "a"), ("host", "a")]),
        with(&[("a", "b"), (":protocol", "websocket")]),
        // :protocol with a method other than CONNECT.
        with(&[(":protocol", "websocket")]),
    ];
    for c in cases {
        let r = RequestHead::default().decode_h3(
            &mut Decoder::new(0, 0, 4096),
            0,
            &section(&c),
            4096,
            false,
            true,
        );
        assert_eq!(r, Err(Error::Message("malformed request head")), "{c:?}");
    }
    // `host` alone stands in for `:authority`, and matching both is fine.
    for c in [
        vec![
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("host", "a"),
        ],
        with(&[("host", "a")]),
    ] {
        let mut head = RequestHead::default();
        let r = head.decode_h3(
            &mut Decoder::new(0, 0, 4096),
            0,
            &section(&c),
            4096,
            false,
            false,
        );
        assert_eq!(r, Ok(Decoded::Done), "{c:?}");
    }
    // Trailers: no pseudo-fields.
    let r = RequestHead::default().decode_h3(
        &mut Decoder::new(0, 0, 4096),
        0,
        &section(&[(":path", "/")]),
        4096,
        true,
        false,
    );
    assert_eq!(r, Err(Error::Message("malformed request head")));
    // Too large: by the head's limit, and by the decoder's.
    let big: &'static str = Box::leak("x".repeat(300).into_boxed_str());
    let s = section(&with(&[("x-big", big)]));
    let r =
        RequestHead::default().decode_h3(&mut Decoder::new(0, 0, 4096), 0, &s, 200, false, false);
    assert_eq!(r, Err(Error::FieldSectionTooLarge));
    let r =
        RequestHead::default().decode_h3(&mut Decoder::new(0, 0, 200), 0, &s, 4096, false, false);
    assert_eq!(r, Err(Error::FieldSectionTooLarge));
    assert!(!r.unwrap_err().is_connection_error());
    // Not decodable: a connection error.
    let r = RequestHead::default().decode_h3(
        &mut Decoder::new(0, 0, 4096),
        0,
        &[0x00, 0x00, 0xff, 0x24],
        4096,
        false,
        false,
    );
    assert_eq!(
        r,
        Err(Error::Qpack(QpackError::Decompression(
            "static index out of range"
        )))
    );
}

/// A section that references the dynamic table before the entries arrive: blocked, then
/// decoded once the encoder stream catches up, then acknowledged.
#[test]
fn a_blocked_request() {
    let mut enc_stream = Vec::new();
    EncoderInstruction::SetCapacity(200).write(&mut enc_stream);
    EncoderInstruction::InsertNameRef {
        is_static: true,
        index: 0,
        value: Str::plain(b"example.com"),
    }
    .write(&mut enc_stream);
    let mut s = Vec::new();
    // Required Insert Count 1 (encoded 2), Base 0 (sign set, delta 0): post-Base 0 is the
    // entry inserted first.
    SectionPrefix {
        encoded_insert_count: 2,
        sign: true,
        delta_base: 0,
    }
    .write(&mut s);
    for l in [
        FieldLine::Indexed {
            is_static: true,
            index: 17,
        },
        FieldLine::Indexed {
            is_static: true,
            index: 23,
        },
        FieldLine::IndexedPostBase { index: 0 },
        FieldLine::Indexed {
            is_static: true,
            index: 1,
        },
    ] {
        l.write(&mut s);
    }
    let mut qpack = Decoder::new(200, 1, 4096);
    let mut head = RequestHead::default();
    assert_eq!(
        head.decode_h3(&mut qpack, 4, &s, 4096, false, false),
        Ok(Decoded::Blocked)
    );
    qpack.feed_encoder_stream(&enc_stream).unwrap();
    assert_eq!(qpack.take_unblocked().collect::<Vec<_>>(), vec![4]);
    assert_eq!(
        head.decode_h3(&mut qpack, 4, &s, 4096, false, false),
        Ok(Decoded::Done)
    );
    assert_eq!(head.authority(), Some(&b"example.com"[..]));
    let mut out = Vec::new();
    qpack.write_decoder_stream(&mut out);
    assert_eq!(out, [0x84]);
}

fn respond(status: u16, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    write_response(
        &Encoder::default(),
        status,
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        &mut out,
    );
    out
}

fn response(frame: &[u8]) -> Result<ResponseHead, Error> {
    let mut dec = FrameDecoder::new(4096);
    let d = dec.decode(frame)?;
    let Some(Frame::Headers(s)) = d.frame else {
        panic!("{d:?}")
    };
    let mut head = ResponseHead::default();
    let r = head.decode(&mut Decoder::new(0, 0, 4096), 0, s, 4096, false)?;
    assert_eq!(r, Decoded::Done);
    Ok(head)
}

#[test]
fn responses() {
    let h = response(&respond(
        200,
        &[("content-length", "5"), ("server", "lowlat")],
    ))
    .unwrap();
    assert_eq!(h.status(), 200);
    assert!(!h.is_interim());
    assert_eq!(h.content_length, Some(5));
    assert_eq!(h.get(b"server"), Some(&b"lowlat"[..]));
    assert_eq!(h.fields().count(), 2);
    let h = response(&respond(103, &[("link", "</a>; rel=preload")])).unwrap();
    assert!(h.is_interim());
    let bad = |fields: &[(&str, &str)]| {
        let mut out = Vec::new();
        put_headers_with(&mut out, |o| {
            Encoder::default()
                .encode_section(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), o);
        });
        response(&out).err()
    };
    let m = Some(Error::Message("malformed response head"));
    assert_eq!(bad(&[]), Some(Error::Message("response without :status")));
    assert_eq!(
        bad(&[("server", "x")]),
        Some(Error::Message("response without :status"))
    );
    assert_eq!(bad(&[(":status", "20")]), m);
    assert_eq!(bad(&[(":status", "101")]), m);
    assert_eq!(bad(&[(":status", "600")]), m);
    assert_eq!(bad(&[(":status", "200"), (":status", "200")]), m);
    assert_eq!(bad(&[("server", "x"), (":status", "200")]), m);
    assert_eq!(bad(&[(":status", "200"), (":path", "/")]), m);
    assert_eq!(bad(&[(":status", "200"), ("connection", "close")]), m);
    assert_eq!(
        bad(&[
            (":status", "200"),
            ("content-length", "1"),
            ("content-length", "2")
        ]),
        m
    );
    // Trailers: regular fields only.
    let mut head = ResponseHead::default();
    let s = section(&[("x-t", "1")]);
    assert_eq!(
        head.decode(&mut Decoder::new(0, 0, 4096), 0, &s, 4096, true),
        Ok(Decoded::Done)
    );
    assert_eq!((head.status(), head.get(b"x-t")), (0, Some(&b"1"[..])));
    let s = section(&[(":status", "200")]);
    assert_eq!(
        head.decode(&mut Decoder::new(0, 0, 4096), 0, &s, 4096, true),
        Err(Error::Message("malformed response head"))
    );
    let s = section(&[(":status", "200"), ("x", &"y".repeat(100))]);
    assert_eq!(
        head.decode(&mut Decoder::new(0, 0, 4096), 0, &s, 100, false),
        Err(Error::FieldSectionTooLarge)
    );
}
