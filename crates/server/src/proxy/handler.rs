//! The proxy's route handler: a request under a forwarding rule's prefix becomes a
//! [`ProxyJob`] — the request rewritten for the upstream, in a reused buffer — which the client's
//! connection hands to the worker's upstream side. Mounted per worker, on every method.

use std::hash::{BuildHasher, Hasher};
use std::rc::Rc;
use std::sync::Arc;

use lowlat_http::request::Method;

use super::cgi_request::ServerVars;
use super::config::{Balance, Cidr, HashKey, ProxyRoute};
use super::group::{fnv, WorkerGroup};
use super::headers::{write_request, ClientInfo, StreamedBody, Target};
use super::job::ProxyJob;
use crate::client_cert::CertReport;
use crate::handler::{Handler, Req, Response};
use crate::router::{RouteError, Router};

/// Forwards the requests of one rule.
pub(crate) struct ProxyHandler {
    group: Rc<WorkerGroup>,
    prefix: String,
    rewrite: Option<String>,
    trusted: Arc<Vec<Cidr>>,
    /// `Host` for requests that have none: the group's name, or its first server's address
    /// for a group a rule made from URLs.
    default_host: String,
    /// The rule's cache, when it caches.
    cache: Option<crate::cache::RouteCache>,
    /// This worker's request-id prefix (random per start): ids are unique across workers and
    /// restarts without a clock read or a lock per request.
    id_seed: u64,
    /// What `SERVER_*` says to a FastCGI group.
    server: Arc<ServerVars>,
    /// A FastCGI request's variables before they are framed, and a decoded path (reused).
    pairs: Vec<u8>,
    decoded: Vec<u8>,
}

/// Mounts `route` on `router` for one worker, forwarding to `group`.
///
/// # Errors
/// When the prefix conflicts with another route.
pub(crate) fn mount(
    router: &mut Router,
    route: &ProxyRoute,
    group: Rc<WorkerGroup>,
    trusted: Arc<Vec<Cidr>>,
    cache: Option<crate::cache::RouteCache>,
    server: Arc<ServerVars>,
) -> Result<(), RouteError> {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(Rc::as_ptr(&group) as usize);
    let first = group.cfg.servers.first().map(|s| s.label.as_str());
    let default_host = match first {
        Some(label) if group.cfg.name.contains('=') && !label.starts_with("unix:") => {
            label.to_owned()
        }
        Some(_) if group.cfg.name.contains('=') => "localhost".to_owned(),
        _ => group.cfg.name.clone(),
    };
    let handler = ProxyHandler {
        default_host,
        group,
        prefix: route.prefix.clone(),
        rewrite: route.rewrite.clone(),
        trusted,
        cache,
        id_seed: h.finish(),
        server,
        pairs: Vec::new(),
        decoded: Vec::new(),
    };
    router.prefix(&route.prefix, &Method::ALL, handler)
}

impl Handler for ProxyHandler {
    fn takes_streamed_body(&self, unknown_length: bool) -> bool {
        // Both HTTP upstream protocols take a body as it arrives (`engine`, `h2up`); FastCGI
        // does when its length is known: a CGI application reads `CONTENT_LENGTH` bytes, so a
        // body without one is read whole first (as nginx buffers it).
        !(unknown_length && self.group.cfg.fastcgi)
    }

    fn handle(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
        if has_dot_segment(req.path()) {
            // The rule matched the path as written; `..` would step out of what it maps (and
            // out of the prefix a rewrite replaced). Refused, not forwarded.
            res.send_status(400);
            return;
        }
        let streamed = res.streamed();
        let too_large = match streamed {
            Some(StreamedBody::Length(n)) => n > self.group.cfg.max_body,
            _ => req.body.len() as u64 > self.group.cfg.max_body,
        };
        if too_large {
            res.send_status(413);
            return;
        }
        let unknown;
        let client = match res.client() {
            Some(c) => c,
            None => {
                unknown = ClientInfo::plain(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
                &unknown
            }
        };
        let cert = res.client_cert();
        let (fill, stale) = match &self.cache {
            Some(cache) => match crate::cache::lookup::lookup(cache, req, res, client) {
                crate::cache::lookup::Lookup::Served => return,
                crate::cache::lookup::Lookup::Refresh(fill, stale) => {
                    return self.refresh(req, client, cert, fill, stale);
                }
                crate::cache::lookup::Lookup::Forward(fill, stale) => (fill, stale),
            },
            None => (None, None),
        };
        let seq = self.group.sequence.get().wrapping_add(1);
        self.group.sequence.set(seq);
        let mut id = [0u8; 24];
        hex(self.id_seed, &mut id[..16]);
        hex(seq, &mut id[16..]);
        let mut request = self.group.take_buffer();
        if self.group.cfg.fastcgi {
            let written = req.head.protocol.is_none()
                && match (&fill, stale) {
                    (Some(fill), Some(stale)) => self.fastcgi_revalidating(
                        req,
                        streamed,
                        (client, cert),
                        fill,
                        stale,
                        &mut request,
                    ),
                    _ => self.fastcgi_request(req, streamed, (client, cert), &mut request),
                };
            if !written {
                // An extended CONNECT has no CGI form; a path no variable can carry is refused.
                let status = if req.head.protocol.is_some() {
                    501
                } else {
                    400
                };
                self.group.give_buffer(request);
                res.send_status(status);
                return;
            }
            return self.forward(req, res, request, fill, false, None, client);
        }
        write_request(
            &mut request,
            req.head,
            req.body,
            streamed,
            &Target {
                prefix: &self.prefix,
                rewrite: self.rewrite.as_deref(),
                default_host: &self.default_host,
            },
            client,
            cert,
            &self.trusted,
            &id,
        );
        if let (Some(fill), Some(stale)) = (&fill, stale) {
            crate::cache::fill::Fill::revalidating(fill, stale, req.head.headers, &mut request);
        }
        let upgrade = super::upgrade::is_websocket_upgrade(req.head);
        let mut ws_accept = None;
        if req.head.protocol.is_some() {
            // An extended CONNECT (RFC 8441): only a WebSocket, and only to an HTTP/1.1
            // upstream, which gets the HTTP/1.1 handshake with a key of the proxy's.
            if !upgrade || self.group.cfg.servers.iter().any(|s| s.h2) {
                self.group.give_buffer(request);
                res.send_status(501);
                return;
            }
            let (key, accept) = lowlat_http::ws::handshake_key();
            super::upgrade::add_upgrade_fields(&mut request, Some(&key));
            ws_accept = Some(accept.into_boxed_str());
        } else if upgrade {
            super::upgrade::add_upgrade_fields(&mut request, None);
        }
        self.forward(req, res, request, fill, upgrade, ws_accept, client);
    }
}

impl ProxyHandler {
    /// Hands the request written in `request` to the connection, to be forwarded.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        req: &Req<'_, '_, '_>,
        res: &mut Response<'_>,
        request: Vec<u8>,
        fill: Option<crate::cache::fill::FillRef>,
        upgrade: bool,
        ws_accept: Option<Box<str>>,
        client: &ClientInfo,
    ) {
        let hash = request_hash(&self.group, req, client);
        let method = req.method();
        res.forward(ProxyJob {
            upgrade,
            ws_accept,
            cache: fill,
            ..ProxyJob::new(&self.group, request, method, hash)
        });
    }

    /// Writes the FastCGI request for `req` into `out`: the rule's prefix is the script
    /// (`SCRIPT_NAME`), the rest of the path its `PATH_INFO`, the group's parameters added.
    /// False when the path cannot be decoded for `PATH_INFO`.
    fn fastcgi_request(
        &mut self,
        req: &Req<'_, '_, '_>,
        streamed: Option<StreamedBody>,
        (client, cert): (&ClientInfo, CertReport<'_>),
        out: &mut Vec<u8>,
    ) -> bool {
        let base = self.prefix.trim_end_matches('/');
        let rest = req.path().get(base.len()..).unwrap_or("");
        if !super::cgi_request::decode_path(rest.as_bytes(), &mut self.decoded) {
            return false;
        }
        let name = self
            .rewrite
            .as_deref()
            .unwrap_or(base)
            .trim_end_matches('/');
        let script = super::cgi_request::Script {
            name: name.as_bytes(),
            path_info: &self.decoded,
            filename: None,
            root: None,
        };
        super::cgi_request::write_request(
            out,
            &mut self.pairs,
            req.head,
            req.body,
            streamed,
            &script,
            (client, cert),
            &self.server,
            &self.group.cfg.fastcgi_params,
        );
        true
    }
}

impl ProxyHandler {
    /// A request already answered with a stale response (`stale-while-revalidate`) goes
    /// upstream once more in the background, for the cache: written as it would be forwarded
    /// (same rule, rewrite and forwarding fields, same server choice) but without the client's
    /// conditionals and `Range`, with the stale response's validators instead, and handed to
    /// the worker's upstream side with no client behind it. A FastCGI application gets the
    /// validators as the request's own fields (`HTTP_IF_NONE_MATCH`, `HTTP_IF_MODIFIED_SINCE`).
    fn refresh(
        &mut self,
        req: &Req<'_, '_, '_>,
        client: &ClientInfo,
        cert: CertReport<'_>,
        fill: crate::cache::fill::FillRef,
        stale: Arc<crate::cache::object::Object>,
    ) {
        let mut fields = crate::cache::refresh::request_fields(req.head.headers);
        let mut request = self.group.take_buffer();
        if self.group.cfg.fastcgi {
            let conditional = crate::cache::refresh::add_validators(&mut fields, &stale);
            let head = lowlat_http::request::Request {
                headers: &fields,
                ..*req.head
            };
            let refresh = Req {
                head: &head,
                body: b"",
                params: req.params,
                path_plain: req.path_plain,
                worker: req.worker,
            };
            if !self.fastcgi_request(&refresh, None, (client, cert), &mut request) {
                // A path no CGI variable can carry: the stale response stays until it is past
                // its window; the fill, dropped, lets any waiter go on its own.
                self.group.give_buffer(request);
                return;
            }
            crate::cache::fill::Fill::revalidating_as(&fill, Arc::clone(&stale), conditional);
            return self.queue_refresh(req, client, request, fill);
        }
        let head = lowlat_http::request::Request {
            headers: &fields,
            ..*req.head
        };
        let seq = self.group.sequence.get().wrapping_add(1);
        self.group.sequence.set(seq);
        let mut id = [0u8; 24];
        hex(self.id_seed, &mut id[..16]);
        hex(seq, &mut id[16..]);
        write_request(
            &mut request,
            &head,
            b"",
            None,
            &Target {
                prefix: &self.prefix,
                rewrite: self.rewrite.as_deref(),
                default_host: &self.default_host,
            },
            client,
            cert,
            &self.trusted,
            &id,
        );
        crate::cache::fill::Fill::revalidating(&fill, stale, &fields, &mut request);
        self.queue_refresh(req, client, request, fill);
    }

    /// [`ProxyHandler::fastcgi_request`] for a request that found a stored response it could
    /// not use as it was: the response's validators go among the request's fields (unless the
    /// client's request is conditional itself, when its own answer is relayed), and it is kept
    /// to stand in for an error (`stale-if-error`), as for an HTTP upstream.
    fn fastcgi_revalidating(
        &mut self,
        req: &Req<'_, '_, '_>,
        streamed: Option<StreamedBody>,
        client: (&ClientInfo, CertReport<'_>),
        fill: &crate::cache::fill::FillRef,
        stale: Arc<crate::cache::object::Object>,
        out: &mut Vec<u8>,
    ) -> bool {
        let own = req
            .head
            .headers
            .iter()
            .any(|h| crate::cache::refresh::own_field(h.name));
        let (written, conditional) = if own {
            (self.fastcgi_request(req, streamed, client, out), false)
        } else {
            let mut fields = req.head.headers.to_vec();
            let conditional = crate::cache::refresh::add_validators(&mut fields, &stale);
            let head = lowlat_http::request::Request {
                headers: &fields,
                ..*req.head
            };
            let with = Req {
                head: &head,
                body: req.body,
                params: req.params,
                path_plain: req.path_plain,
                worker: req.worker,
            };
            (
                self.fastcgi_request(&with, streamed, client, out),
                conditional,
            )
        };
        crate::cache::fill::Fill::revalidating_as(fill, stale, conditional);
        written
    }

    /// Queues the refresh written in `request` for the worker's upstream side.
    fn queue_refresh(
        &self,
        req: &Req<'_, '_, '_>,
        client: &ClientInfo,
        request: Vec<u8>,
        fill: crate::cache::fill::FillRef,
    ) {
        let hash = request_hash(&self.group, req, client);
        crate::cache::refresh::queue(ProxyJob {
            cache: Some(fill),
            ..ProxyJob::new(&self.group, request, Method::Get, hash)
        });
    }
}

/// The request's key under `group`'s consistent hashing (0 when it does not hash).
pub(crate) fn request_hash(group: &WorkerGroup, req: &Req<'_, '_, '_>, client: &ClientInfo) -> u64 {
    match &group.cfg.balance {
        Balance::Hash(HashKey::Client) => match client.peer.ip() {
            std::net::IpAddr::V4(ip) => fnv(&ip.octets()),
            std::net::IpAddr::V6(ip) => fnv(&ip.octets()),
        },
        Balance::Hash(HashKey::Header(name)) => fnv(req.header(name).unwrap_or_default()),
        Balance::Hash(HashKey::Cookie(name)) => fnv(cookie(req, name).unwrap_or_default()),
        _ => 0,
    }
}

/// The value of cookie `name` in the request's `Cookie` fields.
fn cookie<'b>(req: &Req<'_, '_, 'b>, name: &str) -> Option<&'b [u8]> {
    req.head
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
        .flat_map(|h| h.value.split(|&b| b == b';'))
        .find_map(|pair| {
            let pair = pair.strip_prefix(b" ").unwrap_or(pair);
            let (k, v) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
            (k == name.as_bytes()).then(|| &v[1..])
        })
}

/// Whether a path has a `.` or `..` segment, written plainly or percent-encoded (`%2e`).
fn has_dot_segment(path: &str) -> bool {
    // Without decoding into a new string: this runs on every forwarded request.
    fn dot(s: &[u8]) -> Option<&[u8]> {
        match s {
            [b'.', rest @ ..] | [b'%', b'2', b'e' | b'E', rest @ ..] => Some(rest),
            _ => None,
        }
    }
    path.split('/').any(|seg| match dot(seg.as_bytes()) {
        Some([]) => true,
        Some(rest) => dot(rest) == Some(&[]),
        None => false,
    })
}

/// Lower-case hexadecimal digits of `v`, most significant first, filling `out`.
fn hex(mut v: u64, out: &mut [u8]) {
    for b in out.iter_mut().rev() {
        *b = b"0123456789abcdef"[(v & 0xf) as usize];
        v >>= 4;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dot_segments() {
        for bad in [
            "/api/../x",
            "/api/./x",
            "/api/..",
            "/api/%2e%2e/x",
            "/api/%2E/x",
        ] {
            assert!(super::has_dot_segment(bad), "{bad}");
        }
        for good in [
            "/api/x",
            "/api/..x",
            "/api/.well-known/a",
            "/",
            "/api/%2e%2ex/",
            "/a..b",
        ] {
            assert!(!super::has_dot_segment(good), "{good}");
        }
    }
}
