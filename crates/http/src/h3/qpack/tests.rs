//! QPACK as a whole: RFC 9204 Appendix B byte for byte (encoder stream, field sections,
//! decoder stream), every error path, input split anywhere, and encoder-to-decoder round trips.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

type Fields = Vec<(String, String, bool)>;
type Outcome = Result<(Decoded, Fields), QpackError>;

fn decode(d: &mut Decoder, stream: u64, section: &[u8]) -> Outcome {
    let mut got = Vec::new();
    let r = d.decode_section(stream, section, |f| {
        got.push((
            String::from_utf8_lossy(f.name).into_owned(),
            String::from_utf8_lossy(f.value).into_owned(),
            f.never_indexed,
        ));
    })?;
    Ok((r, got))
}

fn flush(d: &mut Decoder) -> Vec<u8> {
    let mut out = Vec::new();
    d.write_decoder_stream(&mut out);
    out
}

fn f(n: &str, v: &str) -> (String, String, bool) {
    (n.into(), v.into(), false)
}

/// The decoder the examples assume: the encoder sets a capacity of 220, so ours allows that.
fn appendix_b_decoder() -> Decoder {
    Decoder::new(220, 16, 16 << 10)
}

const B2_ENCODER: &str =
    "3fbd01 c00f 7777 772e 6578 616d 706c 652e 636f 6d c10c 2f73 616d 706c 652f 7061 7468";
const B3_ENCODER: &str = "4a63 7573 746f 6d2d 6b65 790c 6375 7374 6f6d 2d76 616c 7565";
const B5_ENCODER: &str = "810d 6375 7374 6f6d 2d76 616c 7565 32";

/// B.1: a literal with a static name reference; B.2: inserts, a blocked-free section with
/// post-Base references, and its Section Acknowledgment; B.3: a speculative insert and the
/// Insert Count Increment; B.4: a duplicate delayed, a blocked section, the Stream
/// Cancellation; B.5: an insert that evicts.
#[test]
fn appendix_b() {
    let mut d = appendix_b_decoder();
    // B.1
    let b1 = hex("0000 510b 2f69 6e64 6578 2e68 746d 6c");
    assert_eq!(
        decode(&mut d, 0, &b1).unwrap(),
        (Decoded::Done, vec![f(":path", "/index.html")])
    );
    assert_eq!(
        flush(&mut d),
        b"",
        "no dynamic references: nothing to acknowledge"
    );
    // B.2
    d.feed_encoder_stream(&hex(B2_ENCODER)).unwrap();
    assert_eq!((d.insert_count(), d.table_size()), (2, 106));
    assert_eq!(
        decode(&mut d, 4, &hex("0381 10 11")).unwrap(),
        (
            Decoded::Done,
            vec![
                f(":authority", "www.example.com"),
                f(":path", "/sample/path")
            ]
        )
    );
    assert_eq!(flush(&mut d), hex("84"));
    // B.3
    d.feed_encoder_stream(&hex(B3_ENCODER)).unwrap();
    assert_eq!((d.insert_count(), d.table_size()), (3, 160));
    assert_eq!(flush(&mut d), hex("01"));
    // B.4: the section arrives before the Duplicate; the stream is then cancelled.
    let b4 = hex("0500 80 c1 81");
    assert_eq!(decode(&mut d, 8, &b4).unwrap(), (Decoded::Blocked, vec![]));
    assert_eq!(d.blocked_streams(), 1);
    d.cancel_stream(8);
    assert_eq!(d.blocked_streams(), 0);
    assert_eq!(flush(&mut d), hex("48"));
    d.feed_encoder_stream(&hex("02")).unwrap();
    assert_eq!((d.insert_count(), d.table_size()), (4, 217));
    assert_eq!(d.take_unblocked().count(), 0, "stream 8 was cancelled");
    // B.5
    d.feed_encoder_stream(&hex(B5_ENCODER)).unwrap();
    assert_eq!((d.insert_count(), d.table_size()), (5, 215));
    // Entry 0 was evicted; 1..=4 remain. The decoder owes an increment for the two inserts.
    assert_eq!(flush(&mut d), hex("02"));
    let evicted = [0x06, 0x00, 0x80 | 4]; // RIC 5, Base 5, relative 4 = absolute 0
    assert_eq!(
        decode(&mut d, 12, &evicted),
        Err(QpackError::Decompression(
            "reference to an entry not in the table"
        ))
    );
    let all = [0x06, 0x00, 0x80, 0x81, 0x82, 0x83];
    assert_eq!(
        decode(&mut d, 12, &all).unwrap().1,
        vec![
            f("custom-key", "custom-value2"),
            f(":authority", "www.example.com"),
            f("custom-key", "custom-value"),
            f(":path", "/sample/path"),
        ]
    );
}

/// B.4 the other way: the Duplicate arrives, the stream unblocks and decodes.
#[test]
fn appendix_b4_unblocked() {
    let mut d = appendix_b_decoder();
    d.feed_encoder_stream(&hex(B2_ENCODER)).unwrap();
    d.feed_encoder_stream(&hex(B3_ENCODER)).unwrap();
    let b4 = hex("0500 80 c1 81");
    assert_eq!(decode(&mut d, 8, &b4).unwrap().0, Decoded::Blocked);
    // Retried too early: still blocked, still counted once.
    assert_eq!(decode(&mut d, 8, &b4).unwrap().0, Decoded::Blocked);
    assert_eq!(d.blocked_streams(), 1);
    d.feed_encoder_stream(&hex("02")).unwrap();
    assert_eq!(d.take_unblocked().collect::<Vec<_>>(), vec![8]);
    assert_eq!(
        decode(&mut d, 8, &b4).unwrap(),
        (
            Decoded::Done,
            vec![
                f(":authority", "www.example.com"),
                f(":path", "/"),
                f("custom-key", "custom-value"),
            ]
        )
    );
    // The acknowledgment implies the four inserts: no increment follows.
    assert_eq!(flush(&mut d), hex("88"));
}

/// The encoder stream of Appendix B fed in every split gives the same table.
#[test]
fn encoder_stream_split_anywhere() {
    let all = [hex(B2_ENCODER), hex(B3_ENCODER), hex("02"), hex(B5_ENCODER)].concat();
    for step in 1..=all.len() {
        let mut d = appendix_b_decoder();
        for piece in all.chunks(step) {
            d.feed_encoder_stream(piece).unwrap();
        }
        assert_eq!((d.insert_count(), d.table_size()), (5, 215), "step {step}");
    }
    // Two-piece splits at every point.
    for cut in 0..=all.len() {
        let mut d = appendix_b_decoder();
        d.feed_encoder_stream(&all[..cut]).unwrap();
        d.feed_encoder_stream(&all[cut..]).unwrap();
        assert_eq!(d.insert_count(), 5, "cut {cut}");
    }
}

/// The Appendix B instructions and sections, written from their parsed form, are the RFC's
/// bytes: the writers are exact.
#[test]
fn appendix_b_written_back() {
    let mut out = Vec::new();
    EncoderInstruction::SetCapacity(220).write(&mut out);
    EncoderInstruction::InsertNameRef {
        is_static: true,
        index: 0,
        value: Str::plain(b"www.example.com"),
    }
    .write(&mut out);
    EncoderInstruction::InsertNameRef {
        is_static: true,
        index: 1,
        value: Str::plain(b"/sample/path"),
    }
    .write(&mut out);
    assert_eq!(out, hex(B2_ENCODER));
    out.clear();
    EncoderInstruction::InsertLiteralName {
        name: Str::plain(b"custom-key"),
        value: Str::plain(b"custom-value"),
    }
    .write(&mut out);
    assert_eq!(out, hex(B3_ENCODER));
    out.clear();
    EncoderInstruction::Duplicate(2).write(&mut out);
    EncoderInstruction::InsertNameRef {
        is_static: false,
        index: 1,
        value: Str::plain(b"custom-value2"),
    }
    .write(&mut out);
    assert_eq!(out, [hex("02"), hex(B5_ENCODER)].concat());
    out.clear();
    SectionPrefix {
        encoded_insert_count: 5,
        sign: false,
        delta_base: 0,
    }
    .write(&mut out);
    for line in [
        FieldLine::Indexed {
            is_static: false,
            index: 0,
        },
        FieldLine::Indexed {
            is_static: true,
            index: 1,
        },
        FieldLine::Indexed {
            is_static: false,
            index: 1,
        },
    ] {
        line.write(&mut out);
    }
    assert_eq!(out, hex("0500 80 c1 81"));
    out.clear();
    for i in [
        DecoderInstruction::SectionAck(4),
        DecoderInstruction::InsertCountIncrement(1),
        DecoderInstruction::StreamCancel(8),
    ] {
        i.write(&mut out);
    }
    assert_eq!(out, hex("84 01 48"));
}

/// B.1 is what this encoder writes, without Huffman coding (the RFC's example sends the
/// literal as is).
#[test]
fn encoder_matches_appendix_b1() {
    let mut out = Vec::new();
    Encoder::new(false).encode_section([(&b":path"[..], &b"/index.html"[..])], &mut out);
    assert_eq!(out, hex("0000 510b 2f69 6e64 6578 2e68 746d 6c"));
    // With Huffman coding the value is shorter.
    let mut coded = Vec::new();
    Encoder::default().encode_section([(&b":path"[..], &b"/index.html"[..])], &mut coded);
    assert!(coded.len() < out.len());
    assert_eq!(coded[3] & 0x80, 0x80, "H bit");
}

#[test]
fn encoder_round_trips() {
    let long = "z".repeat(5000);
    let fields: Vec<(&[u8], &[u8])> = vec![
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":authority", b"example.com"),
        (b":path", b"/"),
        (b"content-type", b"text/plain"),
        (b"content-type", b"text/x-custom"),
        (b"user-agent", b"lowlat"),
        (b"x-unknown", b"\x01\x02binary\xff"),
        (b"x-long", long.as_bytes()),
        (b"x-empty", b""),
    ];
    for huffman in [true, false] {
        let enc = Encoder::new(huffman);
        let mut out = Vec::new();
        enc.encode_section(fields.iter().copied(), &mut out);
        enc.field(b"authorization", b"secret", true, &mut out);
        enc.field(b"x-secret", b"s", true, &mut out);
        enc.field(b":path", b"/", true, &mut out);
        // A decoder with no dynamic table at all reads it: nothing is ever blocked.
        let mut d = Decoder::new(0, 0, 64 << 10);
        let (r, got) = decode(&mut d, 0, &out).unwrap();
        assert_eq!(r, Decoded::Done);
        let want: Vec<_> = fields
            .iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                    false,
                )
            })
            .chain([
                ("authorization".into(), "secret".into(), true),
                ("x-secret".into(), "s".into(), true),
                (":path".into(), "/".into(), true),
            ])
            .collect();
        assert_eq!(got, want);
        assert_eq!(flush(&mut d), b"");
    }
    // Responses: indexed statuses, and others as literals.
    for status in [100u16, 200, 201, 304, 404, 418, 500, 503, 599] {
        let mut out = Vec::new();
        Encoder::default().encode_response(status, [(&b"server"[..], &b"lowlat"[..])], &mut out);
        let (_, got) = decode(&mut Decoder::new(0, 0, 4096), 0, &out).unwrap();
        assert_eq!(
            got,
            vec![f(":status", &status.to_string()), f("server", "lowlat")]
        );
    }
    let mut out = Vec::new();
    Encoder::default().encode_response(200, [], &mut out);
    assert_eq!(out, hex("0000 d9"), "2 bytes of prefix, static index 25");
}

#[test]
fn section_errors() {
    let mut d = appendix_b_decoder();
    d.feed_encoder_stream(&hex(B2_ENCODER)).unwrap();
    let e = |s: &'static str| Err(QpackError::Decompression(s));
    let cases: &[(&[u8], Outcome)] = &[
        (&[], e("bad section prefix")),
        (&[0x00], e("bad section prefix")),
        // Encoded insert count above 2 * MaxEntries (12), and one that decodes to 0.
        (&[13, 0x00], e("bad Required Insert Count")),
        // RIC 2, Sign set, Delta Base 2: Base = -1.
        (&[0x03, 0x82, 0x10], e("negative Base")),
        // Static index 99 (past the table).
        (&[0x00, 0x00, 0xff, 0x24], e("static index out of range")),
        (
            &[0x00, 0x00, 0x5f, 0x54, 0x00],
            e("static index out of range"),
        ),
        // A dynamic reference in a section with Required Insert Count 0.
        (
            &[0x00, 0x00, 0x80],
            e("reference to an entry not in the table"),
        ),
        (
            &[0x00, 0x00, 0x10],
            e("reference to an entry not in the table"),
        ),
        // RIC 1 (absolute 0 only), post-Base index 1 = absolute 1.
        (
            &[0x02, 0x00, 0x11],
            e("reference to an entry not in the table"),
        ),
        (
            &[0x02, 0x00, 0x01, 0x00],
            e("reference to an entry not in the table"),
        ),
        // Relative index 2 from Base 2: absolute -1.
        (
            &[0x03, 0x00, 0x82],
            e("reference to an entry not in the table"),
        ),
        (
            &[0x03, 0x00, 0x42, 0x00],
            e("reference to an entry not in the table"),
        ),
        // A literal cut short, a length past the end, an integer too large.
        (
            &[0x00, 0x00, 0x51, 0x05, b'a'],
            e("section ends inside a field line"),
        ),
        (&[0x00, 0x00, 0x27], e("section ends inside a field line")),
        (
            &[
                0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
            e("integer too large"),
        ),
        // Huffman: padding with a zero bit, in a value and in a name.
        (&[0x00, 0x00, 0x51, 0x81, 0x00], e("bad Huffman code")),
        (&[0x00, 0x00, 0x29, 0x00, 0x00], e("bad Huffman code")),
    ];
    for (section, want) in cases {
        assert_eq!(&decode(&mut d, 0, section), want, "{section:x?}");
    }
}

/// §4.5.1.1's example: a 100-byte table (MaxEntries 3), 10 inserts; an encoded 4 means 9,
/// an encoded 6 means 11 (not yet inserted: blocked).
#[test]
fn required_insert_count_wraps() {
    let mut d = Decoder::new(100, 1, 4096);
    let mut enc = Vec::new();
    EncoderInstruction::SetCapacity(100).write(&mut enc);
    for _ in 0..10 {
        // Empty name and value: 32 bytes each, three fit.
        EncoderInstruction::InsertLiteralName {
            name: Str::plain(b""),
            value: Str::plain(b""),
        }
        .write(&mut enc);
    }
    d.feed_encoder_stream(&enc).unwrap();
    assert_eq!((d.insert_count(), d.table_size()), (10, 96));
    // RIC 9, Base 9, relative 0: absolute 8.
    assert_eq!(
        decode(&mut d, 0, &[4, 0x00, 0x80]).unwrap(),
        (Decoded::Done, vec![f("", "")])
    );
    assert_eq!(
        flush(&mut d),
        [0x80, 0x01],
        "acknowledged, then the 10th insert"
    );
    assert_eq!(decode(&mut d, 4, &[6, 0x00]).unwrap().0, Decoded::Blocked);
    // A second blocked stream is one more than the one allowed.
    assert_eq!(
        decode(&mut d, 8, &[6, 0x00]),
        Err(QpackError::Decompression(
            "more blocked streams than allowed"
        ))
    );
    // Absolute 6 was evicted.
    assert_eq!(
        decode(&mut d, 0, &[4, 0x00, 0x82]),
        Err(QpackError::Decompression(
            "reference to an entry not in the table"
        ))
    );
    // With no dynamic table, any non-zero encoded count is an error.
    assert_eq!(
        decode(&mut Decoder::new(0, 10, 4096), 0, &[1, 0x00]),
        Err(QpackError::Decompression("bad Required Insert Count"))
    );
}

#[test]
fn sizes_are_bounded() {
    // A section over the limit, static references only: refused, nothing to acknowledge.
    let mut d = Decoder::new(4096, 4, 100);
    let mut out = Vec::new();
    let v = "v".repeat(60);
    Encoder::new(false).encode_section([(&b"a"[..], v.as_bytes()), (b"b", v.as_bytes())], &mut out);
    assert_eq!(decode(&mut d, 0, &out), Err(QpackError::SectionTooLarge));
    // A string longer than the limit is refused before it is looked at.
    let mut out = Vec::new();
    Encoder::new(false).encode_section([(&b"a"[..], "v".repeat(101).as_bytes())], &mut out);
    assert_eq!(decode(&mut d, 0, &out), Err(QpackError::SectionTooLarge));
    assert_eq!(flush(&mut d), b"");
    // A bomb: one 1000-byte entry referenced 100 times in a 102-byte section is refused after
    // a few fields, and the section is still acknowledged.
    let mut d = Decoder::new(4096, 4, 16 << 10);
    let mut enc = Vec::new();
    EncoderInstruction::SetCapacity(4096).write(&mut enc);
    EncoderInstruction::InsertLiteralName {
        name: Str::plain(b"bomb"),
        value: Str::plain(&[b'y'; 1000]),
    }
    .write(&mut enc);
    d.feed_encoder_stream(&enc).unwrap();
    let mut section = vec![0x02, 0x00];
    section.extend([0x80; 100]);
    let mut seen = 0;
    let r = d.decode_section(4, &section, |_| seen += 1);
    assert_eq!(r, Err(QpackError::SectionTooLarge));
    assert_eq!(seen, 15, "16 KiB hold 15 fields of 1036 bytes");
    assert_eq!(flush(&mut d), [0x84]);
}

#[test]
fn encoder_stream_errors() {
    let e = |s: &'static str| Err(QpackError::EncoderStream(s));
    let capacity = {
        let mut v = Vec::new();
        EncoderInstruction::SetCapacity(64).write(&mut v);
        v
    };
    let cases: Vec<(Vec<u8>, Result<(), QpackError>)> = vec![
        (hex("3fe1 1f"), e("capacity above the maximum")),
        // Inserts with no capacity set yet: any string is longer than the table.
        (hex("c0 01 61"), e("string longer than the table")),
        (
            [&capacity[..], &hex("ff 24 00")].concat(),
            e("static index out of range"),
        ),
        (
            [&capacity[..], &hex("80 00")].concat(),
            e("reference to an entry not in the table"),
        ),
        (
            [&capacity[..], &hex("00")].concat(),
            e("reference to an entry not in the table"),
        ),
        // 33 bytes of value with a 1-byte name: 66 > 64.
        (
            [&capacity[..], &[0x41, b'n', 33], &[b'v'; 33][..]].concat(),
            e("entry larger than the table"),
        ),
        (
            [&capacity[..], &hex("c0 81 00")].concat(),
            e("bad Huffman code"),
        ),
        (
            [&capacity[..], &hex("61 00 00")].concat(),
            e("bad Huffman code"),
        ),
        (
            hex("3f ff ff ff ff ff ff ff ff ff ff 01"),
            e("integer too large"),
        ),
        // Within limits and well formed.
        ([&capacity[..], &hex("c0 01 61 00")].concat(), Ok(())),
    ];
    for (input, want) in cases {
        let mut d = Decoder::new(100, 0, 4096);
        assert_eq!(d.feed_encoder_stream(&input), want, "{input:x?}");
        // Byte at a time: the same verdict.
        let mut d = Decoder::new(100, 0, 4096);
        let got = input
            .iter()
            .try_for_each(|b| d.feed_encoder_stream(std::slice::from_ref(b)));
        assert_eq!(got, want, "{input:x?} byte by byte");
    }
    // A partial instruction is kept: a value announced at 20 bytes, 10 given.
    let mut d = Decoder::new(100, 0, 4096);
    d.feed_encoder_stream(&[&capacity[..], &hex("c0 14"), &[b'v'; 10][..]].concat())
        .unwrap();
    assert_eq!(d.insert_count(), 0);
    d.feed_encoder_stream(&[b'v'; 9]).unwrap();
    assert_eq!(d.insert_count(), 0);
    d.feed_encoder_stream(&[b'v'; 1]).unwrap();
    assert_eq!(d.insert_count(), 1);
}

#[test]
fn decoder_stream_checked_by_the_encoder() {
    let mut enc = Encoder::default();
    enc.feed_decoder_stream(&hex("48 7f")).unwrap();
    enc.feed_decoder_stream(&hex("81 01")).unwrap();
    assert_eq!(
        enc.feed_decoder_stream(&hex("84")),
        Err(QpackError::DecoderStream(
            "acknowledgment of a section without dynamic references"
        ))
    );
    assert_eq!(
        Encoder::default().feed_decoder_stream(&hex("01")),
        Err(QpackError::DecoderStream(
            "Insert Count Increment beyond the inserts"
        ))
    );
    assert_eq!(
        Encoder::default().feed_decoder_stream(&hex("00")),
        Err(QpackError::DecoderStream(
            "Insert Count Increment beyond the inserts"
        ))
    );
    assert_eq!(
        Encoder::default().feed_decoder_stream(&hex("7f ff ff ff ff ff ff ff ff ff ff 01")),
        Err(QpackError::DecoderStream("integer too large"))
    );
}

#[test]
fn cancellation_without_a_table_is_silent() {
    let mut d = Decoder::new(0, 0, 4096);
    d.cancel_stream(4);
    assert!(!d.has_decoder_stream_output());
    let mut d = appendix_b_decoder();
    d.cancel_stream(4);
    assert!(d.has_decoder_stream_output());
    assert_eq!(flush(&mut d), hex("44"));
}

/// A blocked section's Required Insert Count is decoded once, against the Insert Count when it
/// came: decoded again after the count wrapped past 2 * MaxEntries, it would mean another
/// number (found by the fuzzer).
#[test]
fn a_retried_section_keeps_its_required_insert_count() {
    // 384 bytes: MaxEntries 12, so counts are sent modulo 24.
    let mut d = Decoder::new(384, 1, 4096);
    // Required Insert Count 1 (encoded 2), Base 1, one static field.
    let section = [0x02, 0x00, 0xc1];
    assert_eq!(decode(&mut d, 4, &section).unwrap().0, Decoded::Blocked);
    let mut enc = Vec::new();
    EncoderInstruction::SetCapacity(384).write(&mut enc);
    for _ in 0..13 {
        EncoderInstruction::InsertLiteralName {
            name: Str::plain(b""),
            value: Str::plain(b""),
        }
        .write(&mut enc);
    }
    d.feed_encoder_stream(&enc).unwrap();
    assert_eq!(d.take_unblocked().collect::<Vec<_>>(), vec![4]);
    assert_eq!(d.blocked_streams(), 0);
    assert_eq!(
        decode(&mut d, 4, &section).unwrap(),
        (Decoded::Done, vec![f(":path", "/")])
    );
    // Fresh, the same bytes now mean 25: not yet inserted.
    assert_eq!(decode(&mut d, 8, &section).unwrap().0, Decoded::Blocked);
}

proptest::proptest! {
    /// Any fields the encoder is given, in a HEADERS frame split at any point, decode to the
    /// same fields, N bits included, with or without Huffman coding.
    #[test]
    fn any_fields_round_trip(
        fields in proptest::collection::vec(
            (
                proptest::sample::select(vec![
                    ":path", ":status", "content-type", "cookie", "x-custom", "",
                ]),
                proptest::collection::vec(proptest::num::u8::ANY, 0..40),
                proptest::bool::ANY,
            ),
            0..12,
        ),
        huffman in proptest::bool::ANY,
        cut in 0usize..2000,
    ) {
        let enc = Encoder::new(huffman);
        let mut frame = Vec::new();
        crate::h3::frame::put_headers_with(&mut frame, |o| {
            enc.begin_section(o);
            for (n, v, never) in &fields {
                enc.field(n.as_bytes(), v, *never, o);
            }
        });
        let cut = cut % (frame.len() + 1);
        let mut dec = crate::h3::frame::FrameDecoder::new(1 << 20);
        let first = dec.decode(&frame[..cut]).unwrap();
        let section = match first.frame {
            Some(crate::h3::frame::Frame::Headers(s)) => s.to_vec(),
            None => match dec.decode(&frame[cut..]).unwrap().frame {
                Some(crate::h3::frame::Frame::Headers(s)) => s.to_vec(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        };
        let mut got = Vec::new();
        let r = Decoder::new(0, 0, 1 << 20)
            .decode_section(0, &section, |f| got.push((f.name.to_vec(), f.value.to_vec(), f.never_indexed)))
            .unwrap();
        proptest::prop_assert_eq!(r, Decoded::Done);
        let want: Vec<_> = fields.iter().map(|(n, v, never)| (n.as_bytes().to_vec(), v.clone(), *never)).collect();
        proptest::prop_assert_eq!(got, want);
    }

    /// Random bytes as a section, and as an encoder stream in two pieces: never a panic.
    #[test]
    fn random_bytes_never_panic(
        section in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
        stream in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
        cut in 0usize..200,
    ) {
        let mut d = Decoder::new(256, 2, 4096);
        let cut = cut.min(stream.len());
        let _ = d.feed_encoder_stream(&stream[..cut]).and_then(|()| d.feed_encoder_stream(&stream[cut..]));
        let _ = d.decode_section(0, &section, |_| {});
        let _ = Encoder::default().feed_decoder_stream(&section);
    }
}
