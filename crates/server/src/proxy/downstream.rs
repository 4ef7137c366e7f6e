//! What the upstream side delivers a response to ([`Downstream`]): the client connection (or
//! HTTP/2 stream) that asked for it. The contract between the client's protocol and the upstream
//! side, so that neither knows the other.

use lowlat_http::client::Header;

use super::job::RelayBody;
use crate::ctx::WorkerCtx;

/// Where the upstream side delivers a response: the client connection (or HTTP/2 stream) that
/// asked for it. Body bytes arrive decoded; the client's protocol frames them.
pub(crate) trait Downstream {
    /// The response head: status, reason, and the fields that pass the proxy (already filtered:
    /// `pass` says which do).
    fn relay_head(
        &mut self,
        ctx: &mut WorkerCtx<'_>,
        status: u16,
        reason: &str,
        fields: &[Header<'_>],
        pass: &dyn Fn(&str) -> bool,
        body: RelayBody,
    );
    /// Body bytes, in order.
    fn relay_body(&mut self, ctx: &mut WorkerCtx<'_>, data: &[u8]);
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
}
