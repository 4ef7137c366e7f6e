//! HTTP/2 upstreams (h2c) that fail the way real ones do, behind `lowlat serve --proxy`: one
//! that never answers, one that closes mid-body, a DATA length longer or shorter than its
//! `content-length` (RFC 9113 §8.1.1: malformed), a reset mid-body, a head of 1 MiB, bytes that
//! are no frame, a GOAWAY after every response, a GOAWAY before any, one byte a second. The
//! upstreams are threads of this test writing frames with the codec's own writers
//! (`chaos/h2_upstream.rs`); the proxy is the real binary.
//!
//! For each, the HTTP/1.1 client gets a whole 502 or 504, or a response cut short by the close
//! of its connection — never a success of the wrong length, never another request's body; the
//! proxy gives back what the exchange held (descriptors, the pool's gauges on `/metrics`, no
//! CLOSE-WAIT socket); and a healthy route on the same proxy (one worker) answers every request
//! meanwhile.

use std::time::Duration;

mod chaos;
mod support;

use chaos::h2_upstream::{H2Act, H2Chaos};
use chaos::{assert_answer, concurrent_gets, HealthyLoop, Outcome, Rig};

/// Short timeouts, so that a hang shows as a failed assertion within seconds.
fn rig(bad: &H2Chaos) -> Rig {
    rig_with(bad, "1s")
}

/// [`rig`] with the read timeout given.
fn rig_with(bad: &H2Chaos, read_timeout: &str) -> Rig {
    let flags: Vec<String> = [
        "--proxy-connect-timeout",
        "1s",
        "--proxy-first-byte-timeout",
        "1s",
        "--proxy-read-timeout",
        read_timeout,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    Rig::start(&bad.url(), &flags)
}

/// A failed exchange's clean shapes: a whole 502 or 504, or a 200 cut short (by the close of
/// the client's connection) after no more than `most` bytes of `prefix`.
#[track_caller]
fn assert_clean_failure(o: &Outcome, target: &str, prefix: &[u8], most: usize) {
    match o {
        Outcome::Complete { status, .. } => {
            assert!(
                matches!(status, 502 | 504),
                "{target}: a whole {status} from a failed exchange: {o:?}"
            );
        }
        Outcome::Cut {
            status: 200, got, ..
        } => assert!(
            got.len() <= most && prefix.starts_with(got),
            "{target}: cut response with other bytes: {:?}",
            String::from_utf8_lossy(got)
        ),
        other => panic!("{target}: neither a 502/504 nor a cut 200: {other:?}"),
    }
}

/// Runs `act` behind the proxy: four requests at once, each checked by `check`; the healthy
/// route answered throughout; the exchanges' resources given back.
fn case(act: H2Act, check: impl Fn(&str, &Outcome, Duration)) {
    case_with(act, "1s", check);
}

/// [`case`] with the read timeout given.
fn case_with(act: H2Act, read_timeout: &str, check: impl Fn(&str, &Outcome, Duration)) {
    let bad = H2Chaos::start(act);
    let rig = rig_with(&bad, read_timeout);
    let healthy = HealthyLoop::start(rig.addr());
    for (target, o, took) in concurrent_gets(&rig, 0..4) {
        check(&target, &o, took);
    }
    healthy.finish();
    rig.assert_freed(bad.port(), 1);
}

#[test]
fn never_answering_is_504_after_the_first_byte_timeout() {
    case(H2Act::NeverAnswer, |target, o, took| {
        assert_answer(o, 504, target);
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(4),
            "{target}: 504 after {took:?}"
        );
    });
}

#[test]
fn a_close_mid_body_cuts_the_response() {
    let x = [b'x'; 500];
    case(H2Act::HalfThenClose, |target, o, _| {
        assert_clean_failure(o, target, &x, 500);
    });
}

#[test]
fn a_reset_mid_body_cuts_the_response() {
    let x = [b'x'; 500];
    case(H2Act::ResetMidBody, |target, o, _| {
        assert_clean_failure(o, target, &x, 500);
    });
}

/// DATA beyond the announced length: the stream is malformed (RFC 9113 §8.1.1). The client
/// never gets the extra bytes as part of a success: a 502, a cut response, or at most the
/// announced body whole.
#[test]
fn data_longer_than_its_length_never_reaches_the_client() {
    case(H2Act::LongerBody, |target, o, _| {
        let want = chaos::upstream::body_for(target);
        match o {
            Outcome::Complete {
                status: 200, body, ..
            } => assert_eq!(body, &want, "{target}"),
            other => assert_clean_failure(other, target, &want, want.len()),
        }
    });
}

/// DATA ending short of the announced length: never a whole success.
#[test]
fn data_shorter_than_its_length_is_never_a_whole_success() {
    case(H2Act::ShorterBody, |target, o, _| {
        let want = chaos::upstream::body_for(target);
        assert_clean_failure(o, target, &want, want.len());
    });
}

#[test]
fn a_head_of_one_mebibyte_is_502() {
    case(H2Act::HugeHead, |target, o, _| {
        assert_answer(o, 502, target);
    });
}

#[test]
fn bytes_that_are_no_frame_are_502() {
    case(H2Act::Garbage, |target, o, took| {
        assert_answer(o, 502, target);
        assert!(took < Duration::from_secs(1), "{target}: after {took:?}");
    });
}

/// A GOAWAY that says no request was processed: the request may go again (RFC 9113 §6.8), and
/// with no server that takes it, it is a whole 502, soon.
#[test]
fn a_goaway_before_any_answer_is_502() {
    case(H2Act::GoAwayFirst, |target, o, took| {
        assert_answer(o, 502, target);
        assert!(took < Duration::from_secs(1), "{target}: after {took:?}");
    });
}

/// One request per connection, then GOAWAY and the close: every request is answered with its
/// own body, however the closes race the proxy's reuse of the connection. Eight at once share
/// a connection, of which the server answers one and refuses the rest unprocessed: those go
/// again, on the next connection (a refusal does not use up a request's one retry).
#[test]
fn a_goaway_after_every_response_loses_no_request() {
    let bad = H2Chaos::start(H2Act::CloseAfterOne);
    let rig = rig(&bad);
    for round in 0..4 {
        for (target, o, _) in concurrent_gets(&rig, round * 8..round * 8 + 8) {
            assert_answer(&o, 200, &target);
        }
    }
    assert!(bad.accepted() >= 8, "{} connections", bad.accepted());
    rig.assert_freed(bad.port(), 1);
}

/// One byte a second: past a read timeout of 500 ms, the first gap cuts the response after no
/// more than a byte or two.
#[test]
fn one_byte_a_second_is_cut_by_the_read_timeout() {
    case_with(H2Act::OneByteASecond, "500ms", |target, o, took| {
        assert_clean_failure(o, target, &[b'x'; 100], 2);
        assert!(took < Duration::from_secs(4), "{target}: after {took:?}");
    });
}

/// The healthy HTTP/2 upstream through the same rig: whole answers, the connection pooled.
#[test]
fn a_healthy_http2_upstream_answers_every_request() {
    let good = H2Chaos::start(H2Act::Echo);
    let rig = rig(&good);
    for (target, o, _) in concurrent_gets(&rig, 0..8) {
        assert_answer(&o, 200, &target);
    }
    rig.assert_freed(good.port(), 1);
    assert_eq!(good.accepted(), 1, "one connection carries every stream");
}
