//! Routing every request to its handler: exact routes, parameter routes (`/app/{prefix}`),
//! prefix routes (`/static/` and everything under it), method matching with `405` + `Allow`, and a
//! fallback for paths no route claims (the static file tree).
//!
//! Lookup is `matchit`'s radix tree over the still-encoded path: O(length of the path), and the
//! parameters borrow from the path (parameter values stay percent-encoded; handlers decode them).
//! Precedence is by specificity, not registration order: an exact segment beats a parameter,
//! which beats a prefix's catch-all (`/app/_stats` over `/app/{prefix}` over `/app/{*rest}`), and
//! a lookup that dead-ends in a static branch backtracks to the parameter it passed.
//!
//! Allocation: none per lookup, with one exception inside `matchit` — when a path walks past a
//! node that has both a parameter child and a static child sharing the path's next byte, it
//! remembers the parameter in a `Vec` in case it must backtrack. With lowlat's routes that is
//! only `/app/_…` paths (next to `/app/_stats`); `/plaintext`, `/json`, `/app/` and `/app/{word}`
//! never take it.
//!
//! Trailing slashes are significant: `/plaintext/` is not `/plaintext`. When a path misses but
//! the same path with its trailing slash added or removed is routed, the answer is `308
//! Permanent Redirect` there (the query kept), as for `/app` → `/app/`; 308, unlike 301, keeps the
//! method and body. Every other miss goes to the fallback.
//!
//! Each worker owns its own router, because handlers are built per worker.

use std::collections::HashMap;

use lowlat_http::request::{Method, Request};

use crate::handler::{Handler, Req, Response};

/// Most route parameters passed to a handler; more in a pattern is refused at registration.
const MAX_PARAMS: usize = 8;

/// A route pattern that cannot be registered.
#[derive(Debug, thiserror::Error)]
#[error("invalid route {pattern:?}: {reason}")]
pub struct RouteError {
    pub pattern: String,
    pub reason: String,
}

struct Route {
    /// Handler index per method; `HEAD` falls back to `GET`.
    methods: Vec<(Method, usize)>,
    /// The pattern has no parameters and is its own normal form ([`crate::scope::is_plain`]):
    /// the paths it matches, itself alone, are too.
    exact_plain: bool,
    /// The preformatted `Allow: ...\r\n` line for 405 answers.
    allow: Vec<u8>,
}

/// Routes of one worker.
#[derive(Default)]
pub struct Router {
    tree: matchit::Router<usize>,
    /// Pattern text → index in `routes`, to add methods to a pattern registered before.
    patterns: HashMap<String, usize>,
    routes: Vec<Route>,
    handlers: Vec<Box<dyn Handler>>,
    fallback: Option<Box<dyn Handler>>,
    /// Reused for the other form of a path that missed (trailing slash added), so the miss path
    /// allocates nothing once warm either.
    other_path: String,
    /// Reused for the `Location` line of a trailing-slash redirect.
    location: Vec<u8>,
    /// Other sites, chosen by the request's `Host` (lower-case names, without port); a request
    /// for no listed name is answered by this router itself, the default site.
    sites: Vec<(Vec<String>, Router)>,
    /// Header lines added to every response of this router (a site's `--add-header`).
    extra_headers: Vec<u8>,
    /// The same, shared with the forwarded requests whose relayed responses get them too.
    added: Option<std::rc::Rc<[u8]>>,
    /// The site's compression on the fly, when on (lent to each response it answers).
    compress: Option<std::rc::Rc<crate::compress::CompressConfig>>,
    /// Handlers asked, in order, before the sites or the routes (see [`Router::early`]).
    hooks: Vec<EarlyHook>,
    /// Some hook is [`HookScope::AllSites`]: without one, a request does not walk the hooks
    /// twice.
    all_sites_hooks: bool,
    /// The site asks for client certificates (`crate::client_auth`): it does not advertise
    /// HTTP/3, over which none is asked for (see [`Router::add_default_header`]).
    asks_client_certs: bool,
}

/// Where an early hook is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookScope {
    /// Before a site is chosen by `Host`: every request to the server, whatever its site
    /// (ACME's HTTP-01 challenges, which a CA asks for under any of the names and which
    /// nothing — a site's routes, its redirect to HTTPS — may hide).
    AllSites,
    /// Before the routes of this router's own site, for the requests it answers (a site's
    /// HTTP→HTTPS redirect).
    ThisSite,
}

/// A handler asked about the paths under `prefix` before the routes; what it leaves
/// unanswered (sends nothing for) goes on to the next hook and then to the routes.
struct EarlyHook {
    prefix: Box<str>,
    scope: HookScope,
    handler: Box<dyn Handler>,
}

impl Router {
    /// An empty router: every request gets 404.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a site: requests whose `Host` is one of `names` (a name, or `*.example.com` for one
    /// label under it) go to `router`. Names are matched without case and without the port.
    pub fn add_site(&mut self, names: &[String], router: Router) {
        let names = names
            .iter()
            .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
            .collect();
        self.sites.push((names, router));
    }

    fn site_for(&mut self, host: Option<&[u8]>) -> Option<(usize, &mut Router)> {
        let host = std::str::from_utf8(host?).ok()?;
        // `example.com:8080` and `[::1]:8080`: the name without its port.
        let name = if host.starts_with('[') {
            host.split(']').next().map_or(host, |h| &host[..=h.len()])
        } else {
            host.rsplit_once(':')
                .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
                .map_or(host, |(h, _)| h)
        };
        let name = name.trim_end_matches('.');
        // The rule the TLS layer picks a site's handshake by, from the SNI.
        self.sites
            .iter_mut()
            .enumerate()
            .find(|(_, (names, _))| crate::sitename::matches(names, name))
            .map(|(i, (_, r))| (i, r))
    }

    /// Asks `handler` first about every path starting with `prefix` (`""`: every path), where
    /// `scope` says, after the hooks added before it. A hook that sends nothing leaves the
    /// request to what follows. One list for every early answer, so that their order is the
    /// order they were added in, and a request no hook applies to pays one length check.
    pub fn early(&mut self, prefix: &str, scope: HookScope, handler: impl Handler + 'static) {
        self.all_sites_hooks |= scope == HookScope::AllSites;
        self.hooks.push(EarlyHook {
            prefix: prefix.into(),
            scope,
            handler: Box::new(handler),
        });
    }

    /// Asks the hooks of `scope` that apply to `head`; whether one answered.
    fn ask_hooks(
        &mut self,
        scope: HookScope,
        head: &Request<'_, '_>,
        body: &[u8],
        worker: usize,
        res: &mut Response<'_>,
    ) -> bool {
        for hook in &mut self.hooks {
            // The usual empty prefix without `starts_with`'s call to `memcmp`.
            if hook.scope == scope
                && (hook.prefix.is_empty() || head.path.starts_with(&*hook.prefix))
            {
                let req = Req {
                    head,
                    body,
                    params: None,
                    path_plain: false,
                    worker,
                };
                hook.handler.handle(&req, res);
                if res.is_sent() || res.is_held() {
                    return true;
                }
            }
        }
        false
    }

    /// Routes `GET` (and so `HEAD`) on `pattern` to `handler`.
    ///
    /// # Errors
    /// When the pattern is invalid or conflicts with another.
    pub fn get(
        &mut self,
        pattern: &str,
        handler: impl Handler + 'static,
    ) -> Result<(), RouteError> {
        self.route(pattern, &[Method::Get], handler)
    }

    /// Routes `methods` on `pattern` to `handler`. Patterns are matchit's: `/exact`,
    /// `/users/{id}`, `/files/{*rest}`. A pattern may be registered again for other methods.
    ///
    /// # Errors
    /// When the pattern is invalid, conflicts with another, or a method is already routed.
    pub fn route(
        &mut self,
        pattern: &str,
        methods: &[Method],
        handler: impl Handler + 'static,
    ) -> Result<(), RouteError> {
        let handler_index = self.handlers.len();
        self.add(pattern, methods, handler_index)?;
        self.handlers.push(Box::new(handler));
        Ok(())
    }

    /// Routes `methods` on `prefix` and every path under it (`/app` matches `/app`, `/app/` and
    /// `/app/x/y`) to one handler, which finds the remainder in the `rest` parameter.
    ///
    /// # Errors
    /// When the prefix is invalid or conflicts with another route.
    pub fn prefix(
        &mut self,
        prefix: &str,
        methods: &[Method],
        handler: impl Handler + 'static,
    ) -> Result<(), RouteError> {
        let base = prefix.trim_end_matches('/');
        let handler_index = self.handlers.len();
        let mut patterns = vec![format!("{base}/"), format!("{base}/{{*rest}}")];
        if !base.is_empty() {
            patterns.push(base.to_owned());
        }
        for pattern in &patterns {
            self.add(pattern, methods, handler_index)?;
        }
        self.handlers.push(Box::new(handler));
        Ok(())
    }

    /// The handler for paths that no route matches (by default: 404).
    pub fn fallback(&mut self, handler: impl Handler + 'static) {
        self.fallback = Some(Box::new(handler));
    }

    fn add(&mut self, pattern: &str, methods: &[Method], handler: usize) -> Result<(), RouteError> {
        let error = |reason: String| RouteError {
            pattern: pattern.to_owned(),
            reason,
        };
        if pattern.matches('{').count() > MAX_PARAMS {
            return Err(error(format!("more than {MAX_PARAMS} parameters")));
        }
        let route_index = match self.patterns.get(pattern) {
            Some(&index) => index,
            None => {
                let index = self.routes.len();
                self.tree
                    .insert(pattern, index)
                    .map_err(|e| error(e.to_string()))?;
                self.routes.push(Route {
                    methods: Vec::new(),
                    exact_plain: !pattern.contains('{') && crate::scope::is_plain(pattern),
                    allow: Vec::new(),
                });
                self.patterns.insert(pattern.to_owned(), index);
                index
            }
        };
        let route = &mut self.routes[route_index];
        for &method in methods {
            if route.methods.iter().any(|&(m, _)| m == method) {
                return Err(error(format!("{} routed twice", method.as_str())));
            }
            route.methods.push((method, handler));
        }
        let mut names: Vec<&str> = route.methods.iter().map(|(m, _)| m.as_str()).collect();
        if names.contains(&"GET") && !names.contains(&"HEAD") {
            names.insert(
                names.iter().position(|n| *n == "GET").unwrap_or(0) + 1,
                "HEAD",
            );
        }
        route.allow = format!("Allow: {}\r\n", names.join(", ")).into_bytes();
        Ok(())
    }

    /// Finds the handler for `head` and lets it answer through `res`. Returns which site
    /// answered: 0 for this router (the default site), `i + 1` for the `i`th added site.
    pub fn dispatch<'r>(
        &mut self,
        head: &Request<'r, 'r>,
        body: &[u8],
        worker: usize,
        res: &mut Response<'r>,
    ) -> usize {
        if self.all_sites_hooks && self.ask_hooks(HookScope::AllSites, head, body, worker, res) {
            return 0;
        }
        if !self.sites.is_empty() {
            if let Some((i, site)) = self.site_for(head.header("host")) {
                site.dispatch(head, body, worker, res);
                return i + 1;
            }
        }
        if let Some(cfg) = &self.compress {
            res.set_compression(cfg, head.headers);
        }
        if self.extra_headers.is_empty() {
            self.dispatch_here(head, body, worker, res);
            return 0;
        }
        let start = res.out_len();
        self.dispatch_here(head, body, worker, res);
        res.insert_head_lines(start, &self.extra_headers);
        if let Some(added) = &self.added {
            res.add_to_forwarded(added);
        }
        0
    }

    /// Whether `head` goes to a handler that takes its body while it still arrives (see
    /// [`Handler::takes_streamed_body`]): the same choice of site, route and method as
    /// [`Router::dispatch`], asked before the body is read. Only asked for a body that is not
    /// all here, so it costs nothing per ordinary request.
    pub fn streams_body(&mut self, head: &Request<'_, '_>) -> bool {
        let chunked = matches!(head.framing, lowlat_http::body::BodyFraming::Chunked);
        self.streams_body_at(head.header("host"), head.path, head.method, chunked)
    }

    /// [`Router::streams_body`] from the parts that decide it (HTTP/2 asks before it has made
    /// a [`Request`]); `unknown_length`: the body's length is not known in advance.
    pub fn streams_body_at(
        &mut self,
        host: Option<&[u8]>,
        path: &str,
        method: Method,
        unknown_length: bool,
    ) -> bool {
        if !self.sites.is_empty() {
            if let Some((_, site)) = self.site_for(host) {
                return site.streams_here(path, method, unknown_length);
            }
        }
        self.streams_here(path, method, unknown_length)
    }

    /// How the body of the request whose head is `head` (HTTP/2, HTTP/3: decoded, body not yet
    /// read) streams to an upstream, if it does: its framing by the head
    /// (`proxy::upload::streamed_framing`), when its route takes a streamed body.
    pub(crate) fn streamed_body(
        &mut self,
        head: &lowlat_http::head::RequestHead,
        max_body: u64,
    ) -> Option<crate::handler::StreamedBody> {
        let method = Method::from_token(head.method().unwrap_or(""));
        let framing =
            crate::proxy::upload::streamed_framing(method, head.content_length, max_body)?;
        let target = head.path()?;
        let path = target.split('?').next().unwrap_or(target);
        let host = head
            .authority()
            .or_else(|| head.fields().find(|(n, _)| *n == "host").map(|(_, v)| v));
        let unknown_length = framing == crate::handler::StreamedBody::Chunked;
        self.streams_body_at(host, path, method, unknown_length)
            .then_some(framing)
    }

    fn streams_here(&self, path: &str, method: Method, unknown_length: bool) -> bool {
        let Ok(matched) = self.tree.at(path) else {
            return false;
        };
        self.routes[*matched.value]
            .methods
            .iter()
            .find(|&&(m, _)| m == method)
            .is_some_and(|&(_, h)| self.handlers[h].takes_streamed_body(unknown_length))
    }

    /// Compresses this router's dynamic responses on the fly by `cfg`, when it is on.
    pub fn set_compression(&mut self, cfg: &crate::compress::CompressConfig) {
        self.compress = cfg.on.then(|| std::rc::Rc::new(cfg.clone()));
    }

    /// Header lines (each `Name: value`) to add to every response of this router.
    pub fn set_extra_headers(&mut self, lines: &[String]) {
        self.extra_headers.clear();
        for l in lines {
            self.extra_headers.extend_from_slice(l.as_bytes());
            self.extra_headers.extend_from_slice(b"\r\n");
        }
        self.share_added();
    }

    fn share_added(&mut self) {
        self.added =
            (!self.extra_headers.is_empty()).then(|| std::rc::Rc::from(&self.extra_headers[..]));
    }

    /// Marks this router's site as one that asks for client certificates.
    pub fn set_asks_client_certs(&mut self) {
        self.asks_client_certs = true;
    }

    /// Adds the header line `line` (`Name: value`) to every response of this router and of its
    /// sites, except those whose own lines (`add_header`) already set that field: a default the
    /// server adds, as `Alt-Svc` for HTTP/3, which a site's configuration may override. A site
    /// that asks for client certificates gets none: the one default is HTTP/3's `Alt-Svc`, and
    /// over HTTP/3 no certificate is asked for, so its clients are better kept on TCP.
    pub fn add_default_header(&mut self, line: &str) {
        if self.asks_client_certs {
            for (_, site) in &mut self.sites {
                site.add_default_header(line);
            }
            return;
        }
        let name = line.split(':').next().unwrap_or(line).trim().as_bytes();
        let set_here = self.extra_headers.split(|&b| b == b'\n').any(|l| {
            l.split(|&b| b == b':')
                .next()
                .is_some_and(|n| n.trim_ascii().eq_ignore_ascii_case(name))
        });
        if !set_here {
            self.extra_headers.extend_from_slice(line.as_bytes());
            self.extra_headers.extend_from_slice(b"\r\n");
            self.share_added();
        }
        for (_, site) in &mut self.sites {
            site.add_default_header(line);
        }
    }

    fn dispatch_here(
        &mut self,
        head: &Request<'_, '_>,
        body: &[u8],
        worker: usize,
        res: &mut Response<'_>,
    ) {
        if !self.hooks.is_empty() {
            let start = res.out_len();
            if self.ask_hooks(HookScope::ThisSite, head, body, worker, res) {
                return;
            }
            self.route_here(head, body, worker, res);
            // A forward-auth subrequest a hook (the guard) left waits for the request the route
            // forwards; a route that answered locally has its answer held there instead.
            res.settle_forward_auth(start);
            return;
        }
        self.route_here(head, body, worker, res);
    }

    /// [`Router::dispatch_here`] after the hooks: the route's handler, or the fallback.
    // Inlined: it was `dispatch_here`'s body, which a router without hooks runs per request.
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn route_here(
        &mut self,
        head: &Request<'_, '_>,
        body: &[u8],
        worker: usize,
        res: &mut Response<'_>,
    ) {
        let Self {
            tree,
            routes,
            patterns: _,
            handlers,
            fallback,
            other_path,
            location,
            sites: _,
            extra_headers: _,
            added: _,
            compress: _,
            hooks: _,
            all_sites_hooks: _,
            asks_client_certs: _,
        } = self;
        // A path not written in its normal form (`crate::scope`: percent-escapes, `//`, dot
        // segments) that the routes would read otherwise than its normal form — `/%61dmin/x`
        // falling to the files, where `/admin/` has a rule of its own — is sent to its normal
        // form first (308), as the rules' prefixes are written in it; handlers then see a path
        // whose prefix arithmetic holds. A path an exact route matched is its route's pattern,
        // plain when that is: the usual `/plaintext` is told plain for a test.
        let matched = match tree.at(head.path) {
            Ok(matched) => matched,
            Err(_) => {
                let path_plain = crate::scope::is_plain(head.path);
                if !path_plain && to_normal_form(tree, head, location) {
                    res.send_status_with(308, location);
                    return;
                }
                if let Some(other) = other_form(head.path, other_path) {
                    if tree.at(other).is_ok() {
                        location.clear();
                        location.extend_from_slice(b"Location: ");
                        location.extend_from_slice(other.as_bytes());
                        if let Some(query) = head.query {
                            location.push(b'?');
                            location.extend_from_slice(query.as_bytes());
                        }
                        location.extend_from_slice(b"\r\n");
                        res.send_status_with(308, location);
                        return;
                    }
                }
                let req = Req {
                    head,
                    body,
                    params: None,
                    path_plain,
                    worker,
                };
                match fallback {
                    Some(fallback) => fallback.handle(&req, res),
                    None => res.send_status(404),
                }
                return;
            }
        };
        let route = &routes[*matched.value];
        let path_plain = route.exact_plain || crate::scope::is_plain(head.path);
        if !path_plain && to_normal_form(tree, head, location) {
            res.send_status_with(308, location);
            return;
        }
        let wanted = head.method;
        let found = route
            .methods
            .iter()
            .find(|&&(m, _)| m == wanted)
            .or_else(|| {
                (wanted == Method::Head)
                    .then(|| route.methods.iter().find(|&&(m, _)| m == Method::Get))
                    .flatten()
            });
        let Some(&(_, handler)) = found else {
            if wanted == Method::Options {
                res.send_head(204, None, &route.allow, None);
            } else {
                res.send_status_with(405, &route.allow);
            }
            return;
        };
        let req = Req {
            head,
            body,
            params: Some(&matched.params),
            path_plain,
            worker,
        };
        handlers[handler].handle(&req, res);
    }
}

/// For a path not in its normal form: whether the routes read it otherwise than that form, with
/// `location` then holding the `Location` field (and its query) that sends the client to it.
/// Out of line and cold: the usual path never comes here.
#[cold]
#[inline(never)]
fn to_normal_form(
    tree: &matchit::Router<usize>,
    head: &Request<'_, '_>,
    location: &mut Vec<u8>,
) -> bool {
    let Ok(std::borrow::Cow::Owned(normal)) = crate::scope::normal_form(head.path) else {
        return false;
    };
    let route_of = |p: &str| tree.at(p).ok().map(|m| *m.value);
    location.clear();
    location.extend_from_slice(b"Location: ");
    crate::files::path::encode_path(normal.as_bytes(), true, location);
    // Written back, the normal form may be the path as sent (a name the routes hold decoded):
    // that is routed as it is, never sent to itself.
    let same = &location[b"Location: ".len()..] == head.path.as_bytes();
    if same || route_of(head.path) == route_of(&normal) {
        return false;
    }
    if let Some(query) = head.query {
        location.push(b'?');
        location.extend_from_slice(query.as_bytes());
    }
    location.extend_from_slice(b"\r\n");
    true
}

/// `path` with its trailing slash removed, or added (into `buf`): the form a trailing-slash
/// redirect points to. `None` for `/` and for targets that are not paths (`*`).
fn other_form<'a>(path: &'a str, buf: &'a mut String) -> Option<&'a str> {
    if !path.starts_with('/') || path == "/" {
        return None;
    }
    if let Some(trimmed) = path.strip_suffix('/') {
        return Some(trimmed);
    }
    buf.clear();
    buf.push_str(path);
    buf.push('/');
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lowlat_http::request::{header_slots, parse_request, HeadLimits};
    use lowlat_http::{Status, Version};

    /// A handler that answers with its name and the parameters it was given.
    fn named(name: &'static str) -> impl Handler {
        move |req: &Req<'_, '_, '_>, res: &mut Response<'_>| {
            let mut body = name.to_owned();
            for (k, v) in req.params.iter().flat_map(|p| p.iter()) {
                body.push_str(&format!(" {k}={v}"));
            }
            res.send(200, b"text/plain", body.as_bytes());
        }
    }

    /// An intercepting prefix answers before the sites and the routes, whatever the Host.
    #[test]
    fn intercept_comes_first() {
        let mut r = router();
        let mut site = Router::new();
        site.prefix("/", &[Method::Get], named("site")).unwrap();
        r.add_site(&["t".to_owned()], site);
        assert!(call(&mut r, "GET", "/.well-known/acme-challenge/x")
            .2
            .starts_with("site "));
        r.early(
            "/.well-known/acme-challenge/",
            HookScope::AllSites,
            named("challenge"),
        );
        assert_eq!(
            call(&mut r, "GET", "/.well-known/acme-challenge/x").2,
            "challenge"
        );
        assert!(call(&mut r, "GET", "/plaintext").2.starts_with("site "));
    }

    /// Early hooks are asked in the order added and only about their prefix; one that sends
    /// nothing leaves the request to the next and then to the routes; a site's own hooks are
    /// not asked about the requests another site answers.
    #[test]
    fn early_hooks_in_order() {
        let mut r = router();
        r.early(
            "",
            HookScope::ThisSite,
            |_: &Req<'_, '_, '_>, _: &mut Response<'_>| {},
        );
        r.early("/json", HookScope::ThisSite, named("first"));
        r.early("/json", HookScope::ThisSite, named("second"));
        assert_eq!(call(&mut r, "GET", "/json").2, "first");
        assert_eq!(call(&mut r, "GET", "/plaintext").2, "plaintext");
        let mut site = Router::new();
        site.get("/json", named("site")).unwrap();
        r.add_site(&["t".to_owned()], site);
        assert_eq!(call(&mut r, "GET", "/json").2, "site");
    }

    /// The routes the cases below run against: lowlat's own shapes and a few more.
    fn router() -> Router {
        let mut r = Router::new();
        r.get("/plaintext", named("plaintext")).unwrap();
        r.get("/json", named("json")).unwrap();
        r.get("/app/", named("random")).unwrap();
        r.get("/app/_stats", named("stats")).unwrap();
        r.get("/app/{prefix}", named("word")).unwrap();
        r.prefix("/static", &[Method::Get], named("static"))
            .unwrap();
        r.get("/users/{id}/posts/{post}", named("post")).unwrap();
        r.route("/echo", &[Method::Post, Method::Put], named("echo"))
            .unwrap();
        r.route("/echo", &[Method::Delete], named("echo-delete"))
            .unwrap();
        r.get("/dir/", named("dir")).unwrap();
        r.fallback(named("fallback"));
        r
    }

    /// One dispatch: (status, the `Allow` or `Location` value, body).
    fn call(router: &mut Router, method: &str, target: &str) -> (u16, String, String) {
        let request = format!("{method} {target} HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut slots = header_slots();
        let Ok(Status::Complete(head)) =
            parse_request(request.as_bytes(), &mut slots, &HeadLimits::default())
        else {
            panic!("unparsable test request {request:?}");
        };
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        let date = b"Thu, 01 Jan 1970 00:00:00 GMT";
        let mut done = crate::handler::Finished::default();
        let mut res = Response::new(
            &mut out,
            &mut scratch,
            date,
            head.is_head(),
            true,
            Version::Http11,
            &mut done,
        );
        router.dispatch(&head, b"", 0, &mut res);
        assert!(res.is_sent(), "{method} {target}: no answer");
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut parsed = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(len)) = parsed.parse(&out) else {
            panic!("unparsable answer {:?}", String::from_utf8_lossy(&out));
        };
        let pick = parsed
            .headers
            .iter()
            .find(|h| {
                h.name.eq_ignore_ascii_case("allow") || h.name.eq_ignore_ascii_case("location")
            })
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
            .unwrap_or_default();
        let body = String::from_utf8_lossy(&out[len..]).into_owned();
        (parsed.code.unwrap_or(0), pick, body)
    }

    #[test]
    fn routes() {
        // (method, target, status, Allow or Location, body)
        let cases: &[(&str, &str, u16, &str, &str)] = &[
            // Exact routes.
            ("GET", "/plaintext", 200, "", "plaintext"),
            ("GET", "/json?x=1", 200, "", "json"),
            ("GET", "/", 200, "", "fallback"),
            ("GET", "/nowhere", 200, "", "fallback"),
            ("GET", "/plaintextx", 200, "", "fallback"),
            ("GET", "/PLAINTEXT", 200, "", "fallback"),
            // Exact beats parameter beats catch-all, whatever the registration order.
            ("GET", "/app/", 200, "", "random"),
            ("GET", "/app/_stats", 200, "", "stats"),
            ("GET", "/app/apple", 200, "", "word prefix=apple"),
            ("GET", "/app/_statsx", 200, "", "word prefix=_statsx"),
            ("GET", "/app/_stat", 200, "", "word prefix=_stat"),
            ("GET", "/app/a/b", 200, "", "fallback"),
            // Parameters stay percent-encoded; several parameters keep their order.
            ("GET", "/app/caf%C3%A9", 200, "", "word prefix=caf%C3%A9"),
            ("GET", "/users/7/posts/42", 200, "", "post id=7 post=42"),
            ("GET", "/users/7/posts", 200, "", "fallback"),
            ("GET", "/users//posts/42", 200, "", "fallback"),
            // A prefix claims itself, its slash form and everything under it; `rest` is the tail.
            ("GET", "/static", 200, "", "static"),
            ("GET", "/static/", 200, "", "static"),
            (
                "GET",
                "/static/css/site.css",
                200,
                "",
                "static rest=css/site.css",
            ),
            ("GET", "/static//x", 200, "", "static rest=/x"),
            ("GET", "/staticx", 200, "", "fallback"),
            // Trailing slashes: a miss whose other form is routed is redirected, query kept.
            (
                "GET",
                "/plaintext/",
                308,
                "/plaintext",
                "308 Permanent Redirect\n",
            ),
            (
                "GET",
                "/plaintext/?a=1&b",
                308,
                "/plaintext?a=1&b",
                "308 Permanent Redirect\n",
            ),
            ("GET", "/app", 308, "/app/", "308 Permanent Redirect\n"),
            (
                "GET",
                "/app/apple/",
                308,
                "/app/apple",
                "308 Permanent Redirect\n",
            ),
            (
                "GET",
                "/app/_stats/",
                308,
                "/app/_stats",
                "308 Permanent Redirect\n",
            ),
            ("GET", "/dir", 308, "/dir/", "308 Permanent Redirect\n"),
            ("GET", "/dir/", 200, "", "dir"),
            ("POST", "/echo/", 308, "/echo", "308 Permanent Redirect\n"),
            ("GET", "/nowhere/", 200, "", "fallback"),
            ("GET", "/json//", 200, "", "fallback"),
            // Methods: HEAD falls back to GET, others get 405 with Allow, OPTIONS 204 with Allow.
            ("HEAD", "/plaintext", 200, "", ""),
            (
                "POST",
                "/plaintext",
                405,
                "GET, HEAD",
                "405 Method Not Allowed\n",
            ),
            (
                "DELETE",
                "/app/apple",
                405,
                "GET, HEAD",
                "405 Method Not Allowed\n",
            ),
            ("OPTIONS", "/plaintext", 204, "GET, HEAD", ""),
            ("POST", "/echo", 200, "", "echo"),
            ("PUT", "/echo", 200, "", "echo"),
            ("DELETE", "/echo", 200, "", "echo-delete"),
            (
                "GET",
                "/echo",
                405,
                "POST, PUT, DELETE",
                "405 Method Not Allowed\n",
            ),
            ("HEAD", "/echo", 405, "POST, PUT, DELETE", ""),
            ("OPTIONS", "/echo", 204, "POST, PUT, DELETE", ""),
            (
                "PATCH",
                "/static/x",
                405,
                "GET, HEAD",
                "405 Method Not Allowed\n",
            ),
            // The fallback takes every method.
            ("POST", "/nowhere", 200, "", "fallback"),
        ];
        let mut r = router();
        for &(method, target, status, header, body) in cases {
            let got = call(&mut r, method, target);
            assert_eq!(
                got,
                (status, header.to_owned(), body.to_owned()),
                "{method} {target}"
            );
        }
    }

    #[test]
    fn without_fallback_misses_are_404() {
        let mut r = Router::new();
        r.get("/a", named("a")).unwrap();
        assert_eq!(call(&mut r, "GET", "/b").0, 404);
        assert_eq!(call(&mut r, "GET", "/a/").0, 308);
        assert_eq!(call(&mut r, "OPTIONS", "*").0, 404);
    }

    #[test]
    fn registration_errors() {
        let mut r = Router::new();
        r.get("/a/{x}", named("x")).unwrap();
        // (pattern, methods): each must be refused.
        let cases: &[(&str, &[Method])] = &[
            ("/a/{y}", &[Method::Get]),       // same shape, other name
            ("/a/{x}", &[Method::Get]),       // method routed twice
            ("/b/{unclosed", &[Method::Get]), // invalid pattern
            ("/{a}/{b}/{c}/{d}/{e}/{f}/{g}/{h}/{i}", &[Method::Get]), // too many parameters
        ];
        for &(pattern, methods) in cases {
            assert!(r.route(pattern, methods, named("e")).is_err(), "{pattern}");
        }
        // Other methods on a pattern already routed are fine.
        r.route("/a/{x}", &[Method::Post], named("p")).unwrap();
        assert_eq!(call(&mut r, "POST", "/a/1").2, "p x=1");
        assert_eq!(call(&mut r, "GET", "/a/1").2, "x x=1");
    }

    #[test]
    fn other_forms() {
        let mut buf = String::new();
        let cases: &[(&str, Option<&str>)] = &[
            ("/a", Some("/a/")),
            ("/a/", Some("/a")),
            ("/a/b/", Some("/a/b")),
            ("/", None),
            ("*", None),
        ];
        for &(path, want) in cases {
            assert_eq!(other_form(path, &mut buf), want, "{path}");
        }
    }
}
