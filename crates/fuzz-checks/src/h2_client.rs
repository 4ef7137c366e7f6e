//! HTTP/2 as the proxy's client side (`lowlat_http::h2::client::ClientConn`, the state machine
//! without I/O): requests opened, bodies sent and released, streams cancelled, and whatever an
//! upstream answers, as frames cut into reads of any size. Beyond "no panic": every event is
//! for a stream this side opened and is still open, a stream gets at most one final head and
//! nothing after its end, no read is over-consumed, and what this side writes is whole frames.

use std::collections::HashMap;

use arbitrary::{Arbitrary, Unstructured};
use lowlat_http::h2::client::{ClientConn, Event};
use lowlat_http::h2::frame::{FrameHeader, HEADER_LEN, PREFACE};
use lowlat_http::h2::Encoder;

use crate::h2_frames::{self, Field, Frame, StreamId};

#[derive(Debug, Arbitrary)]
enum Step {
    /// Open a request: its fields, body length, trailers, or a body that streams.
    Open {
        fields: Vec<Field>,
        body: u16,
        trailers: bool,
        streaming: bool,
    },
    /// The upstream's frames, read in pieces of `piece` bytes.
    Receive {
        frames: Vec<Frame>,
        piece: u16,
    },
    Cancel(StreamId),
    Release(StreamId, u16),
    SendData(StreamId, u16),
    Finish(StreamId),
}

/// Where a stream is, as the events have told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Open,
    Head,
}

pub fn check(data: &[u8]) {
    let Ok(steps) = Vec::<Step>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut conn = ClientConn::new();
    let mut upstream = Encoder::default();
    let mut streams: HashMap<u32, Seen> = HashMap::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut written = 0;
    for step in steps {
        match step {
            Step::Open {
                fields,
                body,
                trailers,
                streaming,
            } => {
                let mut list = Vec::new();
                for f in &fields {
                    f.write_to(&mut list);
                }
                let head = list.iter().map(|(n, v)| (n.as_slice(), v.as_slice()));
                let body = vec![b'b'; usize::from(body)];
                let trailers: &[(&[u8], &[u8])] = if trailers { &[(b"x-t", b"1")] } else { &[] };
                let opened = if streaming {
                    conn.open_streaming(head)
                } else {
                    conn.open(head, &body, trailers)
                };
                if let Ok(id) = opened {
                    assert!(id % 2 == 1 && !streams.contains_key(&id));
                    streams.insert(id, Seen::Open);
                }
            }
            Step::Receive { frames, piece } => {
                let mut bytes = Vec::new();
                h2_frames::write(&frames, &mut upstream, &mut bytes);
                let piece = usize::from(piece).max(1);
                for chunk in bytes.chunks(piece) {
                    pending.extend_from_slice(chunk);
                    let mut ended = Vec::new();
                    let got = conn.receive(&pending, |e| on_event(&e, &mut streams, &mut ended));
                    let Ok(n) = got else {
                        check_output(&conn.out, &mut written);
                        return;
                    };
                    assert!(n <= pending.len());
                    pending.drain(..n);
                    for (id, n) in ended {
                        conn.release(id, n);
                    }
                }
            }
            Step::Cancel(s) => {
                conn.cancel(s.get());
                streams.remove(&s.get());
            }
            Step::Release(s, n) => conn.release(s.get(), usize::from(n)),
            Step::SendData(s, n) => {
                let room = conn.send_room(s.get());
                let taken = conn.send_data(s.get(), &vec![b's'; usize::from(n)]);
                assert!(taken <= room && taken <= usize::from(n));
            }
            Step::Finish(s) => {
                conn.finish(s.get(), [(&b"x-end"[..], &b"1"[..])]);
            }
        }
        assert!(conn.in_flight() <= streams.len());
        check_output(&conn.out, &mut written);
    }
}

/// Checks one event against what the stream has seen; data to give back goes to `release`.
fn on_event(e: &Event<'_>, streams: &mut HashMap<u32, Seen>, release: &mut Vec<(u32, usize)>) {
    match e {
        Event::Head {
            stream,
            status,
            fields,
            end_stream,
        } => {
            assert_eq!(streams.get(stream), Some(&Seen::Open), "head on {stream}");
            assert!((200..=999).contains(status));
            assert_eq!(fields.iter().next().map(|(n, _)| n), Some(&b":status"[..]));
            if *end_stream {
                streams.remove(stream);
            } else {
                streams.insert(*stream, Seen::Head);
            }
        }
        Event::Data {
            stream,
            data,
            end_stream,
        } => {
            assert_eq!(streams.get(stream), Some(&Seen::Head), "data on {stream}");
            release.push((*stream, data.len()));
            if *end_stream {
                streams.remove(stream);
            }
        }
        Event::Trailers { stream, fields } => {
            assert_eq!(
                streams.get(stream),
                Some(&Seen::Head),
                "trailers on {stream}"
            );
            assert!(fields.iter().all(|(n, _)| !n.starts_with(b":")));
            streams.remove(stream);
        }
        Event::Reset { stream, .. } => {
            assert!(streams.remove(stream).is_some(), "reset of {stream}");
        }
        Event::GoAway { .. } => {}
    }
}

/// What the connection wrote since the last check (from byte `written` of `out`, which is
/// never drained here) is the preface and then whole frames.
fn check_output(out: &[u8], written: &mut usize) {
    let mut at = *written;
    if at == 0 {
        assert!(out.starts_with(PREFACE));
        at = PREFACE.len();
    }
    while at < out.len() {
        let h = FrameHeader::parse(&out[at..]).expect("a whole frame header");
        at += HEADER_LEN + h.len as usize;
        assert!(at <= out.len(), "a frame cut short");
    }
    *written = at;
}
