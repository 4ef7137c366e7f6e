//! The FastCGI side of an upstream exchange (`fastcgi://`, `fastcgi+unix:`): the application's
//! records read as they arrive, its CGI response head relayed once whole, its body streamed
//! on, `FCGI_STDERR` written to the error log, `FCGI_END_REQUEST` ending the exchange. The
//! connection itself — connect, pool, retries, timeouts, back-pressure — is the engine's, as
//! for an HTTP/1.1 upstream: FastCGI is one request per connection at a time too (php-fpm does
//! not multiplex), kept open between requests with `FCGI_KEEP_CONN`.
//!
//! Failures: a malformed record, a CGI head that is not one or is larger than
//! [`MAX_CGI_HEAD`], an `FCGI_END_REQUEST` before any head: 502 and a line in the error log,
//! never a half-relayed head. A body shorter than its `Content-Length` at the end is cut; bytes
//! past it are dropped (said in the error log).
//!
//! `X-Accel-Redirect` (a path under one of the job's internal locations) and `X-Sendfile` (a
//! file under one of their directories) make the server send the file itself: the
//! application's own body is dropped, the head goes out when its request ends (with the file's
//! type and length), and the file follows as the client takes it ([`send_file`]).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use lowlat_http::client::Header;
use lowlat_http::fastcgi::cgi::{parse_head, CgiHead, INLINE_FIELDS};
use lowlat_http::fastcgi::record::{kind, Event};
use lowlat_http::fastcgi::FastCgiError;
use lowlat_http::Status;

use super::cgi_request::REQUEST_ID;
use super::config::InternalLocation;
use super::downstream::Downstream;
use super::fcgi_state::{FcgiExchange, FileSend};
use super::headers::response_field_passes;
use super::job::RelayBody;
use super::upstream::{Phase, UpConn};
use crate::ctx::WorkerCtx;

/// Largest CGI response head (its fields, before the body): as nginx's `fastcgi_buffer_size`
/// when raised for applications that set many cookies.
pub(crate) const MAX_CGI_HEAD: usize = 64 * 1024;
/// Longest `FCGI_STDERR` line kept whole for the error log; a longer one is logged in pieces.
const MAX_STDERR_LINE: usize = 4096;

/// What the records read so far came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// More to read.
    More,
    /// The response is complete (`keep_alive` set on the connection).
    Done,
    /// A file answers: the connection sends it ([`Phase::File`]).
    File,
    /// The application refused the request before doing anything (`FCGI_OVERLOADED`, …):
    /// as a refused connection, it may go elsewhere.
    Refused,
    /// The application's bytes cannot be relayed.
    Invalid,
}

/// Handles the records in the connection's read buffer.
pub(crate) fn process(
    c: &mut UpConn,
    ctx: &mut WorkerCtx<'_>,
    down: &mut dyn Downstream,
) -> Progress {
    let Some(mut x) = c.fcgi.take() else {
        return Progress::Invalid;
    };
    let rbuf = std::mem::take(&mut c.rbuf);
    let mut pos = 0;
    let progress = loop {
        let (event, used) = match x.decoder.decode(&rbuf[pos..c.rlen]) {
            Ok(Status::Complete(e)) => e,
            Ok(Status::Partial) => break Progress::More,
            Err(e) => {
                refused(c, &e);
                break Progress::Invalid;
            }
        };
        let at = pos;
        pos += used;
        match event {
            Event::Stdout(r) => {
                let data = &rbuf[at + r.start..at + r.end];
                if let Err(e) = stdout(&mut x, c, ctx, down, data) {
                    refused(c, &e);
                    break Progress::Invalid;
                }
            }
            Event::Stderr(r) => stderr(&mut x, c, &rbuf[at + r.start..at + r.end]),
            Event::Skip => {}
            Event::End {
                protocol_status, ..
            } => {
                flush_stderr(&mut x, c);
                c.keep_alive = pos == c.rlen && !c.refused_write;
                break end(&mut x, c, ctx, down, protocol_status);
            }
        }
    };
    let mut rbuf = rbuf;
    rbuf.copy_within(pos..c.rlen, 0);
    c.rlen -= pos;
    c.rbuf = rbuf;
    c.fcgi = Some(x);
    progress
}

/// Says in the error log why the application's answer was refused.
fn refused(c: &UpConn, e: &FastCgiError) {
    tracing::error!(
        group = %c.group.cfg.name,
        server = %c.group.cfg.servers[c.server].label,
        "FastCGI response refused: {e}"
    );
}

/// `FCGI_STDOUT` bytes: the CGI head until it is whole, then the body.
fn stdout(
    x: &mut FcgiExchange,
    c: &mut UpConn,
    ctx: &mut WorkerCtx<'_>,
    down: &mut dyn Downstream,
    data: &[u8],
) -> Result<(), FastCgiError> {
    if x.head_done {
        body(x, c, ctx, down, data);
        return Ok(());
    }
    x.head.extend_from_slice(data);
    let mut buf = std::mem::take(&mut x.head);
    match read_head(x, c, ctx, down, &buf)? {
        HeadRead::Partial => x.head = buf,
        HeadRead::Kept(len) => {
            buf.truncate(len);
            x.head = buf;
        }
        HeadRead::Relayed => {}
    }
    Ok(())
}

/// What [`read_head`] did with the bytes of the head so far.
enum HeadRead {
    /// Not whole yet: they are kept for the next.
    Partial,
    /// Whole, for a file to be sent once the request ends: its first `len` bytes are kept.
    Kept(usize),
    /// Whole and relayed, with the body bytes after it.
    Relayed,
}

/// The CGI head in `buf` (all of `FCGI_STDOUT` so far), once whole: relayed, or kept for the
/// file the application asks to be sent.
fn read_head(
    x: &mut FcgiExchange,
    c: &mut UpConn,
    ctx: &mut WorkerCtx<'_>,
    down: &mut dyn Downstream,
    buf: &[u8],
) -> Result<HeadRead, FastCgiError> {
    let head = match parse_head(buf, MAX_CGI_HEAD)? {
        Status::Partial => return Ok(HeadRead::Partial),
        Status::Complete(h) => h,
    };
    if head.status < 200 {
        // An interim answer has no place in a CGI response.
        return Err(FastCgiError::Status);
    }
    x.head_done = true;
    c.got_bytes = true;
    if let Some(file) = wanted_file(&head, c) {
        // Sent once the request ends; what the application writes meanwhile is dropped.
        match file {
            Ok(f) => x.file = Some(f),
            Err(status) => {
                tracing::error!(server = %c.group.cfg.servers[c.server].label, status, "the file an application asked to be sent cannot be");
                x.file_refused = Some(status);
            }
        }
        x.discard = true;
        return Ok(HeadRead::Kept(head.len));
    }
    relay_head(x, c, ctx, down, &head, None);
    let rest = &buf[head.len..];
    if !rest.is_empty() {
        body(x, c, ctx, down, rest);
    }
    Ok(HeadRead::Relayed)
}

/// Relays the CGI head (with `file`'s type and length when a file answers instead of the
/// application's body).
fn relay_head(
    x: &mut FcgiExchange,
    c: &mut UpConn,
    ctx: &mut WorkerCtx<'_>,
    down: &mut dyn Downstream,
    head: &CgiHead<'_>,
    file: Option<(&str, u64)>,
) {
    let head_request = c.job.as_ref().is_some_and(|j| j.head_request);
    // A local redirect the server has nothing to answer with goes to the client, as nginx
    // does for every `Location`.
    let status = if head.local_redirect.is_some() {
        302
    } else {
        head.status
    };
    // The server's own fields (`X-Accel-*`, `X-Sendfile`; the application's `Content-Type`
    // when a file answers) are not relayed. A page has none: its fields go as they are, with
    // no copy (and no allocation) a response.
    let own = |h: &Header<'_>| {
        h.name.len() >= 8 && h.name[..8].eq_ignore_ascii_case("x-accel-")
            || h.name.eq_ignore_ascii_case("x-sendfile")
            || (file.is_some() && h.name.eq_ignore_ascii_case("content-type"))
    };
    let mut kept: smallvec::SmallVec<[Header<'_>; INLINE_FIELDS + 1]> = smallvec::SmallVec::new();
    let fields: &[Header<'_>] = if file.is_none() && !head.fields.iter().any(own) {
        &head.fields
    } else {
        kept.extend(head.fields.iter().filter(|h| !own(h)).copied());
        if let Some((content_type, _)) = file {
            kept.push(Header {
                name: "Content-Type",
                value: content_type.as_bytes(),
            });
        }
        &kept
    };
    let announced = match file {
        Some((_, len)) => Some(len),
        None => head
            .field("content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse::<u64>().ok()),
    };
    let bodiless = head_request || status == 204 || status == 304;
    let relay = match announced {
        _ if bodiless => RelayBody::None { length: announced },
        Some(n) => RelayBody::Length(n),
        None => RelayBody::Unknown,
    };
    x.discard |= bodiless;
    x.left = if bodiless { None } else { announced };
    // The fields CGI leaves to the server (RFC 3875 §6.3.4: hop-by-hop ones) stay here.
    let pass = |name: &str| response_field_passes(name, std::iter::empty());
    let added = c.job.as_ref().and_then(|j| j.added.clone());
    c.status = status;
    down.relay_head(
        ctx,
        status,
        head.reason.unwrap_or(""),
        fields,
        &pass,
        added.as_deref().unwrap_or_default(),
        relay,
    );
    c.head_relayed = true;
    c.phase = Phase::Body;
    c.deadline = ctx.now + c.group.cfg.timeouts.read;
    if let Some(job) = c.job.take() {
        if job.answered() {
            c.keep_alive = false;
        }
    }
}

/// Body bytes after the head: relayed, as far as the head's length allows.
fn body(
    x: &mut FcgiExchange,
    c: &UpConn,
    ctx: &mut WorkerCtx<'_>,
    down: &mut dyn Downstream,
    data: &[u8],
) {
    if x.discard {
        return;
    }
    let data = match &mut x.left {
        None => data,
        Some(left) => {
            let n = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
            if n < data.len() {
                tracing::warn!(server = %c.group.cfg.servers[c.server].label, "FastCGI application sent more than its Content-Length: the rest is dropped");
            }
            *left -= n as u64;
            &data[..n]
        }
    };
    down.relay_body(ctx, data);
}

/// `FCGI_STDERR` bytes: each line to the error log.
fn stderr(x: &mut FcgiExchange, c: &UpConn, mut data: &[u8]) {
    while let Some(nl) = memchr::memchr(b'\n', data) {
        x.stderr.extend_from_slice(&data[..nl]);
        data = &data[nl + 1..];
        flush_stderr(x, c);
    }
    x.stderr.extend_from_slice(data);
    if x.stderr.len() >= MAX_STDERR_LINE {
        flush_stderr(x, c);
    }
}

/// Writes the `FCGI_STDERR` line kept so far, if any.
fn flush_stderr(x: &mut FcgiExchange, c: &UpConn) {
    let line = x.stderr.trim_ascii_end();
    if !line.is_empty() {
        // Control bytes would let an application forge lines of the error log.
        let text: String = String::from_utf8_lossy(line)
            .chars()
            .map(|ch| if ch.is_control() { ' ' } else { ch })
            .collect();
        tracing::warn!(server = %c.group.cfg.servers[c.server].label, "FastCGI stderr: {text}");
    }
    x.stderr.clear();
}

/// `FCGI_END_REQUEST`: the response is complete, or a file answers, or it failed.
fn end(
    x: &mut FcgiExchange,
    c: &mut UpConn,
    ctx: &mut WorkerCtx<'_>,
    down: &mut dyn Downstream,
    protocol_status: u8,
) -> Progress {
    if protocol_status != 0 && !c.head_relayed {
        tracing::warn!(server = %c.group.cfg.servers[c.server].label, protocol_status, "FastCGI application refused the request");
        return Progress::Refused;
    }
    if !x.head_done {
        let e = if x.head.is_empty() {
            "the request ended before any response"
        } else {
            "the request ended inside the CGI head"
        };
        tracing::error!(server = %c.group.cfg.servers[c.server].label, "FastCGI response refused: {e}");
        return Progress::Invalid;
    }
    if !c.head_relayed {
        // A file answers: its head now, with the application's fields.
        let head = std::mem::take(&mut x.head);
        let Ok(Status::Complete(parsed)) = parse_head(&head, MAX_CGI_HEAD) else {
            return Progress::Invalid;
        };
        return match x.file.take() {
            Some(f) => {
                let content_type = crate::files::mime::content_type(
                    f.path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or_default(),
                );
                // The application's own body was dropped; the file's is relayed (unless the
                // request was HEAD).
                x.discard = false;
                relay_head(x, c, ctx, down, &parsed, Some((&content_type, f.left)));
                if x.discard || f.left == 0 {
                    return Progress::Done;
                }
                c.deadline = ctx.now + c.group.cfg.timeouts.read;
                x.file = Some(f);
                Progress::File
            }
            None => {
                let status = x.file_refused.unwrap_or(404);
                let head_request = c.job.as_ref().is_some_and(|j| j.head_request);
                c.status = status;
                let relay = if head_request {
                    RelayBody::None { length: Some(0) }
                } else {
                    RelayBody::Length(0)
                };
                let added = c.job.as_ref().and_then(|j| j.added.clone());
                down.relay_head(
                    ctx,
                    status,
                    "",
                    &[],
                    &|_: &str| true,
                    added.as_deref().unwrap_or_default(),
                    relay,
                );
                c.head_relayed = true;
                if let Some(job) = c.job.take() {
                    job.group.give_buffer(job.request);
                }
                Progress::Done
            }
        };
    }
    if x.left.is_some_and(|n| n > 0) {
        tracing::error!(server = %c.group.cfg.servers[c.server].label, "FastCGI response ended short of its Content-Length: cut");
        return Progress::Invalid;
    }
    Progress::Done
}

/// The file an `X-Accel-Redirect` or `X-Sendfile` field of `head` (or a local redirect)
/// names, opened: `None` when the head names none (or the job has no internal location);
/// `Err(status)` when it names one that cannot be sent.
fn wanted_file(head: &CgiHead<'_>, c: &UpConn) -> Option<Result<Box<FileSend>, u16>> {
    let internal = c.job.as_ref()?.internal.as_deref()?;
    if internal.is_empty() {
        return None;
    }
    let path = if let Some(uri) = head.field("x-accel-redirect").or(head.local_redirect) {
        let uri = uri.split(|&b| b == b'?').next().unwrap_or(uri);
        let found = std::str::from_utf8(uri).ok().and_then(|uri| {
            internal.iter().find_map(|loc| {
                let rest = uri.strip_prefix(loc.prefix.as_str())?;
                let mut norm = Vec::new();
                crate::files::path::normalize(&format!("/{rest}"), false, &mut norm).ok()?;
                let rel = std::str::from_utf8(&norm).ok()?.trim_start_matches('/');
                Some(loc.dir.join(rel))
            })
        });
        match found {
            Some(p) => p,
            // A local redirect elsewhere goes to the client; an internal one is refused.
            None if head.field("x-accel-redirect").is_none() => return None,
            None => return Some(Err(404)),
        }
    } else if let Some(file) = head.field("x-sendfile") {
        PathBuf::from(std::str::from_utf8(file).ok()?.trim())
    } else {
        return None;
    };
    Some(open_inside(&path, internal).map(Box::new))
}

/// Opens `path` if it is a regular file under one of the internal locations' directories
/// (symlinks resolved).
fn open_inside(path: &Path, internal: &[InternalLocation]) -> Result<FileSend, u16> {
    let real = std::fs::canonicalize(path).map_err(|_| 404u16)?;
    if !internal.iter().any(|loc| real.starts_with(&loc.dir)) {
        return Err(404);
    }
    let file = File::open(&real).map_err(|_| 403u16)?;
    let meta = file.metadata().map_err(|_| 500u16)?;
    if !meta.is_file() {
        return Err(404);
    }
    Ok(FileSend {
        file,
        offset: 0,
        left: meta.len(),
        path: real,
    })
}

/// What a turn of sending a file came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileTurn {
    /// All sent: the exchange is complete.
    Done,
    /// The client has enough to write for now (or the turn is used up): resumed later.
    Wait,
    /// The file could not be read to its announced length: the response is cut.
    Failed,
}

/// Sends the next pieces of the file that answers, while the client's backlog allows (at
/// most `reads` pieces of the read buffer's size this turn).
pub(crate) fn send_file(
    c: &mut UpConn,
    ctx: &mut WorkerCtx<'_>,
    down: &mut dyn Downstream,
    high_water: usize,
    reads: usize,
) -> FileTurn {
    let Some(f) = c.fcgi.as_mut().and_then(|x| x.file.as_mut()) else {
        return FileTurn::Failed;
    };
    if c.rbuf.is_empty() {
        c.rbuf = ctx.pool.take_read();
    }
    for _ in 0..reads {
        if f.left == 0 {
            return FileTurn::Done;
        }
        if down.backlog() > high_water {
            c.paused = true;
            return FileTurn::Wait;
        }
        let want = c
            .rbuf
            .len()
            .min(usize::try_from(f.left).unwrap_or(usize::MAX));
        match f.file.read_at(&mut c.rbuf[..want], f.offset) {
            Ok(0) | Err(_) => return FileTurn::Failed,
            Ok(n) => {
                down.relay_body(ctx, &c.rbuf[..n]);
                f.offset += n as u64;
                f.left -= n as u64;
                c.deadline = ctx.now + c.group.cfg.timeouts.read;
            }
        }
        down.flush_relayed(ctx);
    }
    if f.left == 0 {
        FileTurn::Done
    } else {
        FileTurn::Wait
    }
}

/// Bytes that tell the application the client went away (`FCGI_ABORT_REQUEST`).
pub(crate) fn abort_record() -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    lowlat_http::fastcgi::record::abort_request(&mut out, REQUEST_ID);
    debug_assert_eq!(out[1], kind::ABORT_REQUEST);
    out
}
