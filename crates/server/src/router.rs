//! Routing every request to its handler: exact routes, parameter routes (`/app/{prefix}`),
//! prefix routes (`/static/` and everything under it), method matching with `405` + `Allow`, and a
//! fallback for paths no route claims (the static file tree).
//!
//! Lookup is `matchit`'s radix tree over the still-encoded path: O(length of the path), no
//! allocation (it borrows parameters from the path). Each worker owns its own router, because
//! handlers are built per worker.

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
}

impl Router {
    /// An empty router: every request gets 404.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
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

    /// Finds the handler for `head` and lets it answer through `res`.
    pub fn dispatch(
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
        } = self;
        match tree.at(head.path) {
            Ok(matched) => {
                let route = &routes[*matched.value];
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
                let mut params = [("", ""); MAX_PARAMS];
                let mut count = 0;
                for (k, v) in matched.params.iter().take(MAX_PARAMS) {
                    params[count] = (k, v);
                    count += 1;
                }
                let req = Req {
                    head,
                    body,
                    params: &params[..count],
                    worker,
                };
                handlers[handler].handle(&req, res);
            }
            Err(_) => {
                if let Some(fallback) = fallback {
                    let req = Req {
                        head,
                        body,
                        params: &[],
                        worker,
                    };
                    fallback.handle(&req, res);
                } else {
                    res.send_status(404);
                }
            }
        }
    }
}
