//! `FastCGI` (the proxy's upstream side for php-fpm): the application's records as the engine
//! reads them, the CGI response head they carry, and the name-value pairs of a request.

use lowlat_http::fastcgi::record::{Decoder, Event};
use lowlat_http::fastcgi::{cgi, params, FastCgiError};
use lowlat_http::Status;

/// What a stream of records came to: STDOUT's bytes, STDERR's, the end's statuses, the error.
type Read = (Vec<u8>, Vec<u8>, Option<(u32, u8)>, Option<FastCgiError>);

/// Any bytes as the application's records for request 1, whole and in pieces of the size the
/// first byte says: the same bytes out of each stream and the same verdict either way. The
/// CGI head in STDOUT, if any, parses within its limit to a status of three digits and fields
/// found in it. Then a name-value pair made of the input reads back as written.
pub fn records(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let whole = read(rest, rest.len().max(1));
    let pieces = read(rest, usize::from(control) + 1);
    assert_eq!(whole, pieces);

    let stdout = &whole.0;
    let limit = usize::from(control) * 64 + 1;
    match cgi::parse_head(stdout, limit) {
        Ok(Status::Complete(head)) => {
            assert!(head.len <= stdout.len().min(limit));
            assert!((100..=999).contains(&head.status));
            for h in &head.fields {
                let (name, value) = (h.name, h.value);
                assert!(!name.is_empty() && !name.eq_ignore_ascii_case("status"));
                assert!(value.len() <= head.len);
            }
            if let Some(to) = head.local_redirect {
                assert!(to.starts_with(b"/") && !to.starts_with(b"//"));
            }
        }
        Ok(Status::Partial) => assert!(stdout.len() < limit),
        Err(_) => {}
    }

    let split = usize::from(control).min(rest.len());
    let (name, value) = rest.split_at(split);
    let mut pairs = Vec::new();
    params::push(&mut pairs, name, value);
    let decoded = params::decode(&pairs).expect("a pair written reads back");
    assert_eq!(decoded, [(name, value)]);
}

/// The records of `input` fed to a decoder `piece` bytes at a time.
fn read(input: &[u8], piece: usize) -> Read {
    let mut decoder = Decoder::new(1);
    let (mut stdout, mut stderr, mut end) = (Vec::new(), Vec::new(), None);
    let mut buf: Vec<u8> = Vec::new();
    for chunk in input.chunks(piece) {
        buf.extend_from_slice(chunk);
        let mut pos = 0;
        loop {
            if decoder.ended() {
                return (stdout, stderr, end, None);
            }
            match decoder.decode(&buf[pos..]) {
                Ok(Status::Complete((event, used))) => {
                    assert!(
                        used > 0 && used <= buf.len() - pos,
                        "progress within the input"
                    );
                    match event {
                        Event::Stdout(r) => {
                            stdout.extend_from_slice(&buf[pos + r.start..pos + r.end]);
                        }
                        Event::Stderr(r) => {
                            stderr.extend_from_slice(&buf[pos + r.start..pos + r.end]);
                        }
                        Event::End {
                            app_status,
                            protocol_status,
                        } => end = Some((app_status, protocol_status)),
                        Event::Skip => {}
                    }
                    pos += used;
                }
                Ok(Status::Partial) => break,
                Err(e) => return (stdout, stderr, end, Some(e)),
            }
        }
        buf.drain(..pos);
    }
    (stdout, stderr, end, None)
}
