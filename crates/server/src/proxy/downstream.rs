//! What the upstream side delivers a response to ([`Downstream`]): the client connection (or
//! HTTP/2 stream) that asked for it. The contract between the client's protocol and the upstream
//! side, so that neither knows the other.

use std::ops::Range;

use lowlat_http::client::Header;

use super::job::RelayBody;
use crate::access_log::{HeldRequest, UpstreamFields};
use crate::ctx::WorkerCtx;

/// A relayed head's fields as parsed (`fields`, `pass` saying which go on), and, when the
/// caller has them, as the `Name: value\r\n` lines of exactly those that go on, in their order
/// (`lines`: a cache's stored copy; [`Downstream::relay_head_lines`]).
#[derive(Clone, Copy)]
pub(crate) struct RelayedFields<'a, 'b> {
    pub(crate) fields: &'a [Header<'b>],
    pub(crate) pass: &'a dyn Fn(&str) -> bool,
    pub(crate) lines: Option<&'a [u8]>,
}

/// Where the upstream side delivers a response: the client connection (or HTTP/2 stream) that
/// asked for it. Body bytes arrive decoded; the client's protocol frames them.
pub(crate) trait Downstream {
    /// The response head: status, reason, and the fields that pass the proxy (already filtered:
    /// `pass` says which do), then the site's own lines for every response (`added`, see
    /// [`added_lines`]).
    #[allow(clippy::too_many_arguments)]
    fn relay_head(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        added: &[u8],
        body: RelayBody,
    );
    /// [`Downstream::relay_head`] for a wrapper that adds lines of its own after the site's
    /// (`own`, as they are: the cache's `Cache-Status`) and may have the passing fields as lines
    /// already (`head.lines`). A protocol that writes heads as text copies those lines in one
    /// piece instead of asking `pass` of each field and copying it apart (HTTP/1.1: 406
    /// instructions where the fields took 1 790 on a cache miss; callgrind, docs/PERFORMANCE.md);
    /// the others relay the fields.
    #[allow(clippy::too_many_arguments)]
    fn relay_head_lines(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        reason: &str,
        head: RelayedFields<'_, '_>,
        added: &[u8],
        own: &[u8],
        body: RelayBody,
    ) {
        let mut all = ctx.pool.take_write();
        all.extend_from_slice(added);
        all.extend_from_slice(own);
        self.relay_head(ctx, status, reason, head.fields, head.pass, &all, body);
        ctx.pool.give_write(all);
    }
    /// Body bytes, in order.
    fn relay_body(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]);
    /// The rest of the body is `file`'s region (a local answer let through by forward
    /// authentication, `super::auth_held`). The client protocols send it from the file as the
    /// client takes it, as they send a file they answer themselves, so a file of any size is
    /// never held in memory; elsewhere it is read and relayed as body bytes ([`read_file_as_body`]).
    fn relay_file(&mut self, ctx: &mut WorkerCtx<'_>, file: crate::file_body::FileBody) {
        read_file_as_body(self, ctx, &file);
    }
    /// The trailer fields that ended the response body (already filtered), just before
    /// [`Downstream::relay_end`]. A client protocol that cannot carry them drops them.
    fn relay_trailers(&mut self, _ctx: &mut WorkerCtx<'_>, _fields: &[(&[u8], &[u8])]) {}
    /// The response is complete: `upstream` (the server's label) answered `status` in `took`
    /// (from the request handed to it to the response's last byte).
    fn relay_end(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        upstream: &str,
        status: u16,
        took: std::time::Duration,
    );
    /// A forward-auth service let the request through as `user` (`super::auth`): its log line
    /// says so (`$remote_user`).
    fn auth_user(&mut self, _user: &[u8]) {}
    /// The upstream failed after the head went out: the client must see a truncated response.
    fn relay_abort(&mut self, ctx: &mut WorkerCtx<'_>);
    /// No response could be had (502, 504): a short page instead.
    fn relay_error(&mut self, ctx: &mut WorkerCtx<'_>, status: u16);
    /// Bytes waiting to be written to the client: the upstream is not read while there are
    /// too many (back-pressure).
    fn backlog(&self) -> usize;
    /// The upstream connection now serving this client (a retry moves it to another).
    fn relay_link(&mut self, upstream: mio::Token);
    /// Writes what was relayed, as far as the socket takes it.
    fn flush_relayed(&mut self, ctx: &mut WorkerCtx<'_>);
    /// The client's connection as a PROXY protocol header tells it to an upstream: the client
    /// and the address it connected to — a balancer's, when the connection came through one
    /// with a PROXY header of its own (`crate::proxied`). Asked only by groups that send the header, once per
    /// upstream connection; `None` where there is no such connection (a cache refresh).
    fn client_addresses(&mut self) -> Option<lowlat_http::proxy_protocol::Addresses> {
        None
    }
    /// The upstream took a streaming request body down to its low-water mark: the client may
    /// send more (HTTP/1.1: its connection is read again; HTTP/2: the stream's window given back).
    fn upload_drained(&mut self, ctx: &mut WorkerCtx<'_>) {
        self.flush_relayed(ctx);
    }

    /// The upstream switched protocols (`101`) for a WebSocket handshake: its head is relayed
    /// (the fields that `pass`, with the upgrade's own) and the exchange becomes a tunnel to
    /// `upstream` (the server's label). Returns false when this client cannot tunnel: the
    /// exchange then fails as a malformed answer would (502).
    fn tunnel_open(
        &mut self,
        _ctx: &mut WorkerCtx<'_>,
        _reason: &str,
        _fields: &[Header<'_>],
        _pass: &dyn Fn(&str) -> bool,
        _upstream: &str,
    ) -> bool {
        false
    }
    /// Reads what the client sent through the tunnel into `buf`.
    fn tunnel_read(&mut self, _ctx: &mut WorkerCtx<'_>, _buf: &mut [u8]) -> TunnelRead {
        TunnelRead::Failed
    }
    /// Bytes from the upstream for the client, queued (written by `flush_relayed`).
    fn tunnel_write(&mut self, _ctx: &mut WorkerCtx<'_>, _data: &[u8]) {}
    /// The upstream will send nothing more and all it sent is written: the client's side of
    /// the tunnel is half-closed.
    fn tunnel_shutdown(&mut self, _ctx: &mut WorkerCtx<'_>) {}
    /// The tunnel is over (both sides closed, a failure, or idle too long): the client's side
    /// is closed and its one log line written.
    fn tunnel_end(&mut self, _ctx: &mut WorkerCtx<'_>) {}
}

/// Relays `file`'s region to `down` as body bytes, a piece at a time (the default of
/// [`Downstream::relay_file`], for what is not a client's protocol). A file that can no longer
/// be read cuts the response, as an upstream failing mid-body does.
pub(crate) fn read_file_as_body<D: Downstream + ?Sized>(
    down: &mut D,
    ctx: &mut WorkerCtx<'_>,
    file: &crate::file_body::FileBody,
) {
    use std::os::unix::fs::FileExt;
    const PIECE: u64 = 64 << 10;
    let (mut offset, end) = (file.offset, file.offset + file.len);
    let mut piece = vec![0; usize::try_from(file.len.min(PIECE)).unwrap_or(0)];
    while offset < end {
        let n = usize::try_from((end - offset).min(PIECE)).unwrap_or(0);
        match file.file.read_at(&mut piece[..n], offset) {
            Ok(got @ 1..) => {
                down.relay_body(ctx, &piece[..got]);
                offset += got as u64;
            }
            Ok(0) | Err(_) => {
                tracing::error!("forward auth: the held file could not be read to its end");
                return down.relay_abort(ctx);
            }
        }
    }
}

/// A relayed exchange is over for its client: counted for `/metrics`, and its access-log line
/// written from the request's `held` fields (kept when the request was forwarded), with the
/// upstream's address, status and time when one answered.
#[allow(clippy::too_many_arguments)]
pub(crate) fn log_relayed(
    ctx: &mut WorkerCtx<'_>,
    held: Option<&HeldRequest>,
    peer: std::net::SocketAddr,
    status: u16,
    bytes: u64,
    started: std::time::Instant,
    upstream: Option<UpstreamFields<'_>>,
) {
    // Without metrics or a log no one reads the duration: the subtraction is spared.
    let took = if ctx.timed {
        ctx.now.saturating_duration_since(started)
    } else {
        std::time::Duration::ZERO
    };
    ctx.counters.response(0, status, bytes, took);
    if let (Some(log), Some(held)) = (ctx.access_log.as_deref_mut(), held) {
        log.record(&held.entry(peer, status, bytes, took, ctx.worker, upstream));
    }
}

/// What a client's turn asks of the upstream side for one of its relays (HTTP/3 says so after
/// the turn; HTTP/1.1 and HTTP/2 are asked by the worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The client took its backlog: the upstream is read again.
    Resume,
    /// The client sent more of a body that streams to the upstream: it is written.
    Upload,
}

/// What [`Downstream::tunnel_read`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TunnelRead {
    /// This many bytes.
    Data(usize),
    /// Nothing now: a readiness event will say when.
    Blocked,
    /// The client closed its sending side.
    Eof,
    /// The client's connection failed or is gone.
    Failed,
}

/// The lines a site adds to every response (`add_header`, and `Alt-Svc` when HTTP/3 is on:
/// `Name: value` lines, each ending in CRLF) as they apply to a relayed response: each one whose
/// field the upstream's response (what passes of it) does not already have, as (name, value);
/// and the cache's `Cache-Status`, always (after the upstream's own, if it has one).
pub(crate) fn added_lines<'a>(
    added: &'a [u8],
    fields: &'a [Header<'_>],
    pass: &'a dyn Fn(&str) -> bool,
) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
    // memchr, not a byte-at-a-time split: every relayed head of a site with added lines (or
    // a cache's `Cache-Status`) goes through here, and the lines are tens of bytes long.
    let mut rest = added;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
        let line = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        Some(line)
    })
    .filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = memchr::memchr(b':', line)?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let start = value.iter().position(|&b| b != b' ' && b != b'\t');
        Some((name, start.map_or(&value[value.len()..], |s| &value[s..])))
    })
    .filter(move |(name, _)| {
        // A cache's `Cache-Status` member follows those of caches nearer the origin (RFC 9211
        // §2: each cache appends its own), never gives way to them.
        name.eq_ignore_ascii_case(b"cache-status")
            || !fields
                .iter()
                // The name first: `pass` costs more, and most fields are not named so.
                .any(|f| f.name.as_bytes().eq_ignore_ascii_case(name) && pass(f.name))
    })
}

/// A relayed response head as HTTP/2 and HTTP/3 carry it, the part the two agree on: its fields
/// into `buf` and `ranges` ([`lowered_fields`], with the `content-length` the body announces to
/// a request that was `head_only` or not), and whether the head ends the stream (nothing
/// follows it: a `HEAD` request's, or a bodiless response's). What is left is each protocol's
/// own: the field section's compression and the frame it goes in.
pub(crate) fn relayed_head(
    fields: &[Header<'_>],
    pass: &dyn Fn(&str) -> bool,
    added: &[u8],
    body: RelayBody,
    head_only: bool,
    buf: &mut Vec<u8>,
    ranges: &mut Vec<(Range<usize>, Range<usize>)>,
) -> bool {
    lowered_fields(fields, pass, added, body.announced(head_only), buf, ranges);
    head_only || matches!(body, RelayBody::None { .. })
}

/// A relayed head's fields as HTTP/2 and HTTP/3 carry them: those that `pass`, then the site's
/// `added` lines ([`added_lines`]), names in lower case, copied into `buf` (their ranges into
/// `ranges`, both cleared first), then `content-length` when `length` is given.
pub(crate) fn lowered_fields(
    fields: &[Header<'_>],
    pass: &dyn Fn(&str) -> bool,
    added: &[u8],
    length: Option<u64>,
    buf: &mut Vec<u8>,
    ranges: &mut Vec<(Range<usize>, Range<usize>)>,
) {
    buf.clear();
    ranges.clear();
    let mut put = |name: &[u8], value: &[u8], buf: &mut Vec<u8>| {
        let at = buf.len();
        buf.extend_from_slice(name);
        buf[at..].make_ascii_lowercase();
        let name = at..buf.len();
        buf.extend_from_slice(value);
        ranges.push((name.clone(), name.end..buf.len()));
    };
    for f in fields.iter().filter(|f| pass(f.name)) {
        put(f.name.as_bytes(), f.value, buf);
    }
    for (name, value) in added_lines(added, fields, pass) {
        put(name, value, buf);
    }
    if let Some(n) = length {
        put(
            b"content-length",
            itoa::Buffer::new().format(n).as_bytes(),
            buf,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_lines_skip_what_the_response_has() {
        let added = b"X-A: 1\r\nCache-Status: lowlat; hit\r\nX-Empty:\r\nbroken line\r\nX-B:  two words\r\n";
        let fields = [
            Header {
                name: "x-b",
                value: b"upstream's",
            },
            Header {
                name: "Connection",
                value: b"x-a",
            },
            Header {
                name: "cache-status",
                value: b"origin-cdn; hit",
            },
        ];
        // The upstream's `x-b` passes, so the site's `X-B` is left out, but a cache's
        // `Cache-Status` is added after the upstream's; a line without a colon is no line.
        let pass = |name: &str| !name.eq_ignore_ascii_case("connection");
        let lines: Vec<(&[u8], &[u8])> = added_lines(added, &fields, &pass).collect();
        assert_eq!(
            lines,
            [
                (&b"X-A"[..], &b"1"[..]),
                (b"Cache-Status", b"lowlat; hit"),
                (b"X-Empty", b""),
            ]
        );
        assert_eq!(added_lines(b"", &fields, &pass).count(), 0);
        assert_eq!(added_lines(b"A: b", &[], &pass).count(), 1);
        // A field that does not pass does not keep the site's line out.
        let connection = b"Connection: close\r\n";
        assert_eq!(added_lines(connection, &fields, &pass).count(), 1);
    }
}
