//! The service `lowlat serve` runs, built from its settings: one router per worker, with a
//! site for each `[[site]]` (chosen by `Host`), each serving its built-in routes, app and files.

use std::rc::Rc;
use std::sync::Arc;

use super::args::{ServeArgs, SiteArgs};
use super::proxy::ProxyRule;
use crate::cache::RouteCache;
use crate::proxy::cgi_request::ServerVars;
use crate::proxy::config::{Cidr, ProxyRoute, UpstreamGroup};
use crate::proxy::group::WorkerGroup;
use crate::proxy::health::{spawn_checks, GroupHealth, GroupView};
use crate::returns::{HttpsRedirect, ReturnRule, SiteContext};
use crate::router::{RouteError, Router};
use crate::template::Ports;
use crate::{Service, WorkerInfo};

/// The service `lowlat serve` runs: the built-in endpoints, the dynamic app (unless turned off),
/// and static files for every path no route claims.
///
/// The built-in routes are demo and benchmark routes, so the user's own files come first: with
/// `--root`, a file or directory at `/plaintext`, `/json` or the app's prefix keeps that route
/// unmounted (said once on stderr). The check is made at start, as nginx resolves its locations
/// at start: a file created later under such a path is served only after a restart.
///
/// # Errors
/// A one-line reason when the static or app flags are unusable.
pub fn service(args: &ServeArgs) -> Result<Service, String> {
    service_with_upstreams(args).map(|(service, _)| service)
}

/// [`service`], and its upstream groups as `/metrics` reports them.
///
/// # Errors
/// As [`service`].
pub fn service_with_upstreams(args: &ServeArgs) -> Result<(Service, Vec<GroupView>), String> {
    let cfg = args.to_config();
    let workers = cfg.as_ref().map_or(1, |c| c.workers);
    // `$server_port` and the HTTPS redirect's port: the first listener of each scheme (none for
    // a port the kernel picks, 0).
    let ports = cfg.as_ref().map_or_else(
        |_| Ports::default(),
        |c| {
            let first = |l: &[std::net::SocketAddr]| l.first().map(|a| a.port()).filter(|&p| p > 0);
            Ports {
                clear: first(&c.listen),
                tls: first(&c.tls_listen),
            }
        },
    );
    let default_site = args.default_site();
    let site_args: Vec<&SiteArgs> = if args.sites.is_empty() {
        vec![&default_site]
    } else {
        args.sites.iter().collect()
    };
    let rules: Vec<&[ProxyRule]> = site_args.iter().map(|s| &s.proxy[..]).collect();
    let (mut proxy, routes) = super::proxy::build(
        &args.upstreams,
        &args.proxy_group,
        &args.proxy_trusted,
        &rules,
    )?;
    // Each site's php-fpm group, after the named ones and the rules' (a site's PHP application
    // may name an [[upstream]] group).
    let mut php_groups = Vec::new();
    for s in &site_args {
        php_groups.push(match &s.php.php {
            Some(target) => Some(super::proxy::php_group(
                &mut proxy,
                target,
                &args.proxy_group,
            )?),
            None => None,
        });
    }
    // Each site's forward-auth rules, their auth services' groups after the others.
    let mut forward_auth = Vec::new();
    for s in &site_args {
        let mut rules = Vec::new();
        for spec in &s.guard.forward_auth {
            // `off`: the prefix is left unguarded (the sign-in pages under a guarded `/`).
            if spec.url == "off" {
                rules.push(Arc::new(crate::guard::forward::ForwardAuth {
                    prefix: spec.prefix.clone(),
                    group: None,
                    path: String::new(),
                    host: String::new(),
                    rule: Arc::new(crate::guard::auth_rule::AuthRule::new(
                        spec.label(),
                        Vec::new(),
                    )),
                }));
                continue;
            }
            let (group, path, host) = super::proxy::auth_group(
                &mut proxy,
                (&spec.url, spec.timeout),
                &spec.label(),
                &args.proxy_group,
            )?;
            rules.push(Arc::new(crate::guard::forward::ForwardAuth {
                prefix: spec.prefix.clone(),
                group: Some(group),
                path,
                host,
                rule: crate::guard::metrics::forward_auth(spec.label(), spec.copy.clone()),
            }));
        }
        forward_auth.push(rules);
    }
    crate::guard::metrics::retain_forward_auth(
        &forward_auth
            .iter()
            .flatten()
            .filter(|f| f.group.is_some())
            .map(|f| Arc::clone(&f.rule))
            .collect::<Vec<_>>(),
    );
    // What `SERVER_ADDR` and `SERVER_PORT` say to FastCGI applications: the first listener of
    // each scheme.
    let listeners = cfg.as_ref().map_or((None, None), |c| {
        (c.listen.first().copied(), c.tls_listen.first().copied())
    });
    let groups: Vec<Arc<UpstreamGroup>> = proxy.groups.into_iter().map(Arc::new).collect();
    let health: Vec<Arc<GroupHealth>> = groups
        .iter()
        .map(|g| Arc::new(GroupHealth::new(g, workers)))
        .collect();
    let views: Vec<GroupView> = groups
        .iter()
        .zip(&health)
        .map(|(g, h)| GroupView::new(g, h))
        .collect();
    let trusted = Arc::new(proxy.trusted);
    let caches = route_caches(args, &site_args, &routes)?;
    // Active health checks start with the first worker's router, not when the service is
    // only being checked; they end when the service is replaced (their state is dropped).
    let checks_started = std::sync::atomic::AtomicBool::new(false);
    let mut routes = routes.into_iter().zip(caches);
    let mut php_groups = php_groups.into_iter();
    let mut forward_auth = forward_auth.into_iter();
    let sites: Vec<(Vec<String>, SiteService)> = if args.sites.is_empty() {
        vec![(
            Vec::new(),
            SiteService::new(
                &default_site,
                workers,
                ports,
                routes.next().unwrap_or_default(),
                php_groups.next().flatten(),
                listeners,
            )?
            .with_forward_auth(forward_auth.next().unwrap_or_default()),
        )]
    } else {
        args.sites
            .iter()
            .map(|s| {
                SiteService::new(
                    s,
                    workers,
                    ports,
                    routes.next().unwrap_or_default(),
                    php_groups.next().flatten(),
                    listeners,
                )
                .map(|svc| {
                    let svc = svc.with_forward_auth(forward_auth.next().unwrap_or_default());
                    (s.server_names.clone(), svc)
                })
                .map_err(|e| format!("site {}: {e}", s.server_names.join(", ")))
            })
            .collect::<Result<_, _>>()?
    };
    // Zones of the settings before, gone from these, stop being reported.
    let zones: Vec<_> = sites
        .iter()
        .flat_map(|(_, s)| s.zones.iter().cloned())
        .collect();
    let conn_zones: Vec<_> = sites
        .iter()
        .flat_map(|(_, s)| s.conn_zones.iter().cloned())
        .collect();
    crate::guard::metrics::retain(&zones, &conn_zones);
    // Zones kept in Redis start counting with the fleet as the health checks start: with the
    // first worker's router, not when the settings are only checked.
    let fleet_zones: Vec<_> = zones.into_iter().filter(|z| z.fleet().is_some()).collect();
    // The first site is the default (a request naming no listed site goes to it); the others
    // are chosen by Host. Check once, here, that the routes fit together, so the per-worker
    // builds cannot fail.
    let (groups_for_checks, health_for_checks) = (groups.clone(), health.clone());
    // ACME's HTTP-01 answers, before every site and route (and so before any redirect).
    let http01 = args
        .acme_config()
        .ok()
        .flatten()
        .filter(|a| a.challenges.contains(&crate::acme::ChallengeKind::Http01))
        .map(|a| crate::acme::store::Store::at(&a.state_dir, &a.directory).challenges_dir());
    let build = move |info: &WorkerInfo| -> Result<Router, RouteError> {
        // This worker's own view of each group (balancer, pools), shared by its sites.
        let worker_groups: Vec<Rc<WorkerGroup>> = groups
            .iter()
            .zip(&health)
            .map(|(g, h)| Rc::new(WorkerGroup::new(Arc::clone(g), Arc::clone(h))))
            .collect();
        let mut router = sites[0].1.build(info, &worker_groups, &trusted)?;
        for (names, site) in &sites[1..] {
            router.add_site(names, site.build(info, &worker_groups, &trusted)?);
        }
        if let Some(shared) = &http01 {
            router.early(
                crate::acme::challenges::HTTP01_PREFIX,
                crate::router::HookScope::AllSites,
                crate::acme::challenges::Http01Handler::new(shared.clone()),
            );
        }
        Ok(router)
    };
    build(&WorkerInfo { index: 0 }).map_err(|e| e.to_string())?;
    let service: Service = Arc::new(move |info: &WorkerInfo| {
        if !checks_started.swap(true, std::sync::atomic::Ordering::Relaxed) {
            for (g, h) in groups_for_checks.iter().zip(&health_for_checks) {
                spawn_checks(g, h);
            }
            for zone in &fleet_zones {
                zone.start_exchange();
            }
        }
        build(info).unwrap_or_else(|_| Router::new())
    });
    Ok((service, views))
}

/// Each site's rules' caches, in rule order: on where the rule says so, else where its site
/// says so, else where `--cache` does; the policy the rule's settings over its site's over the
/// top level's, compiled here once. The store is made only when some rule caches.
fn route_caches(
    args: &ServeArgs,
    sites: &[&SiteArgs],
    routes: &[Vec<ProxyRoute>],
) -> Result<Vec<Vec<Option<RouteCache>>>, String> {
    let on = |site: &SiteArgs, rule: &ProxyRule| {
        rule.cache
            .as_ref()
            .and_then(|c| c.on)
            .or(site.cache)
            .unwrap_or(args.cache.cache)
    };
    let caching = args.cache.cache || sites.iter().any(|s| s.proxy.iter().any(|r| on(s, r)));
    let labels = args.site_labels();
    crate::cache::metrics::retain_sites(if caching { &labels } else { &[] });
    let mut out: Vec<Vec<Option<RouteCache>>> =
        routes.iter().map(|r| vec![None; r.len()]).collect();
    if !caching {
        return Ok(out);
    }
    let base = args.cache.store_and_base()?;
    for ((site, caches), label) in sites.iter().zip(out.iter_mut()).zip(&labels) {
        let counters = crate::cache::metrics::site_counters(label);
        let site_policy = site.cache_policy.over(&args.cache.policy);
        // Rules without settings of their own share their site's compiled policy.
        let shared = Arc::new(site_policy.compile(&base.policy)?);
        for (rule, cache) in site.proxy.iter().zip(caches.iter_mut()) {
            if !on(site, rule) {
                continue;
            }
            let policy = match &rule.cache {
                Some(own) => Arc::new(
                    own.policy
                        .over(&site_policy)
                        .compile(&base.policy)
                        .map_err(|e| format!("--proxy {}={}: {e}", rule.prefix, rule.target))?,
                ),
                None => Arc::clone(&shared),
            };
            *cache = Some(RouteCache {
                store: Arc::clone(&base.store),
                policy,
                site: Arc::clone(&counters),
            });
        }
    }
    Ok(out)
}

/// One site, ready to build a router on each worker.
struct SiteService {
    files: Arc<crate::files::FilesConfig>,
    app: Option<Arc<crate::app::AppShared>>,
    plaintext_on: bool,
    json_on: bool,
    add_header: Vec<String>,
    proxy: Vec<ProxyRoute>,
    /// Each rule's cache (beside `proxy`, in its order), when it caches.
    caches: Vec<Option<RouteCache>>,
    returns: Vec<ReturnRule>,
    https_redirect: bool,
    /// What the site's returns and its HTTPS redirect expand `$host` and the port from.
    context: SiteContext,
    /// Access rules and rate-limit zones (one per process, shared by the workers' routers).
    access: Arc<[crate::guard::access::AccessRule]>,
    zones: Vec<Arc<crate::guard::ratelimit::Zone>>,
    conn_zones: Vec<Arc<crate::guard::connlimit::ConnZone>>,
    auth: Vec<Arc<crate::guard::basic::BasicAuth>>,
    /// Forward-auth rules (each naming its auth service's group).
    forward_auth: Vec<Arc<crate::guard::forward::ForwardAuth>>,
    /// The site's PHP application and its php-fpm group, when it has one.
    php: Option<(Arc<crate::php::PhpConfig>, usize)>,
    /// What `SERVER_*` says to the FastCGI groups of the site's rules.
    server_vars: Arc<ServerVars>,
    /// The site's client-certificate rule (`--client-ca`), when it has one.
    client_auth: Option<crate::client_auth::SiteClientAuth>,
}

impl SiteService {
    fn new(
        site: &SiteArgs,
        workers: usize,
        ports: Ports,
        (proxy, caches): (Vec<ProxyRoute>, Vec<Option<RouteCache>>),
        php_group: Option<usize>,
        listeners: (Option<std::net::SocketAddr>, Option<std::net::SocketAddr>),
    ) -> Result<Self, String> {
        let files = crate::files::FilesConfig::from_args(&site.files, workers)?;
        let client_auth = site
            .client_cert
            .rule()?
            .map(|rule| crate::client_auth::SiteClientAuth::new(&rule));
        let mut app = crate::app::AppShared::from_args(&site.app)?;
        let root = site.files.root.as_deref();
        let server_vars = Arc::new(ServerVars {
            name: site.server_names.first().cloned(),
            clear: listeners.0,
            tls: listeners.1,
        });
        let php = match php_group {
            None => None,
            Some(group) => {
                let Some(root) = files.root.clone() else {
                    return Err(
                        "--php serves the application under --root, which is not given".into(),
                    );
                };
                let cfg = crate::php::PhpConfig {
                    root,
                    index: site.php.php_index.clone(),
                    front_controller: !site.php.php_no_front_controller,
                    params: site.php.php_param.clone(),
                    internal: site.php.internal()?,
                    server: Arc::clone(&server_vars),
                };
                Some((Arc::new(cfg), group))
            }
        };
        // Returns and forwarding rules share one set of prefixes, the longest matching one
        // winning: two rules on one prefix would leave one unreachable.
        let mut prefixes: Vec<(&str, &str)> = Vec::new();
        for (kind, prefix) in proxy
            .iter()
            .map(|r| ("--proxy", r.prefix.as_str()))
            .chain(site.returns.iter().map(|r| ("--return", r.prefix.as_str())))
        {
            let base = prefix.trim_end_matches('/');
            if let Some((other, _)) = prefixes.iter().find(|(_, b)| *b == base) {
                return Err(format!(
                    "{kind} {prefix}: another rule ({other}) has this prefix; each prefix has one rule"
                ));
            }
            prefixes.push((kind, base));
        }
        // A forwarding or return rule takes everything under its prefix, the demo routes
        // included (as a file in the root does): `--proxy /=…` forwards /plaintext too.
        let forwarded = |path: &str| {
            proxy
                .iter()
                .map(|r| r.prefix.as_str())
                .chain(site.returns.iter().map(|r| r.prefix.as_str()))
                .any(|prefix| path.starts_with(prefix) || prefix.trim_end_matches('/') == path)
        };
        // A PHP application takes every path (its front controller answers what names no
        // file), as a forwarding rule at / would: the demo routes stay off.
        let plaintext_on = php.is_none()
            && !site.no_plaintext
            && !shadowed(root, crate::builtin::PATHS[0])
            && !forwarded(crate::builtin::PATHS[0]);
        let json_on = php.is_none()
            && !site.no_json
            && !shadowed(root, crate::builtin::PATHS[1])
            && !forwarded(crate::builtin::PATHS[1]);
        if app.as_ref().is_some_and(|a| {
            !a.prefix().is_empty() && shadowed(root, a.prefix())
                || forwarded(a.prefix())
                || forwarded(&format!("{}/", a.prefix()))
        }) || php.is_some()
        {
            app = None;
        }
        Ok(Self {
            files,
            app,
            plaintext_on,
            json_on,
            add_header: site.add_header.clone(),
            proxy,
            caches,
            returns: site.returns.clone(),
            https_redirect: site.https_redirect,
            context: SiteContext {
                ports,
                server_name: site.server_names.first().cloned(),
            },
            access: site.guard.access.clone().into(),
            zones: site
                .guard
                .rate_limit
                .iter()
                .map(|spec| crate::guard::metrics::zone(spec.clone()))
                .collect(),
            conn_zones: site
                .guard
                .limit_conn
                .iter()
                .map(|spec| crate::guard::metrics::conn_zone(spec.clone()))
                .collect(),
            auth: site
                .guard
                .basic_auth
                .iter()
                .map(|a| a.build().map(Arc::new))
                .collect::<Result<_, _>>()?,
            forward_auth: Vec::new(),
            php,
            server_vars,
            client_auth,
        })
    }

    /// The site with its forward-auth rules (their groups are made with the others').
    fn with_forward_auth(mut self, rules: Vec<Arc<crate::guard::forward::ForwardAuth>>) -> Self {
        self.forward_auth = rules;
        self
    }

    fn build(
        &self,
        info: &WorkerInfo,
        groups: &[Rc<WorkerGroup>],
        trusted: &Arc<Vec<Cidr>>,
    ) -> Result<Router, RouteError> {
        let mut router = Router::new();
        for (route, cache) in self.proxy.iter().zip(&self.caches) {
            crate::proxy::handler::mount(
                &mut router,
                route,
                Rc::clone(&groups[route.group]),
                Arc::clone(trusted),
                cache.clone(),
                Arc::clone(&self.server_vars),
            )?;
        }
        for rule in &self.returns {
            crate::returns::mount(&mut router, rule, &self.context)?;
        }
        if self.https_redirect {
            router.early(
                "",
                crate::router::HookScope::ThisSite,
                HttpsRedirect::new(self.context.clone()),
            );
        }
        // After the redirect (which answers requests in clear only), before everything else:
        // no access rule, limit, password or route sees a request its certificate does not
        // admit.
        if let Some(auth) = &self.client_auth {
            router.early(
                "",
                crate::router::HookScope::ThisSite,
                crate::client_auth::ClientCertCheck(auth.clone()),
            );
            router.set_asks_client_certs();
        }
        if let Some(guard) = crate::guard::Guard::new(
            Arc::clone(&self.access),
            (self.zones.clone(), self.conn_zones.clone()),
            (
                self.auth.clone(),
                self.forward_auth
                    .iter()
                    .map(|f| (Arc::clone(f), f.group.map(|g| Rc::clone(&groups[g]))))
                    .collect(),
            ),
            Arc::clone(trusted),
        ) {
            router.early("", crate::router::HookScope::ThisSite, guard);
        }
        crate::builtin::mount_some(&mut router, self.plaintext_on, self.json_on)?;
        if let Some(app) = &self.app {
            crate::app::mount(&mut router, app, info)?;
        }
        match &self.php {
            Some((php, group)) => {
                crate::php::mount(&mut router, php, &self.files, Rc::clone(&groups[*group]))?;
            }
            None => crate::files::mount(&mut router, &self.files),
        }
        router.set_compression(&self.files.compress);
        router.set_extra_headers(&self.add_header);
        Ok(router)
    }
}

/// Whether the document root has something at `route` (a file or a directory), which then wins
/// over the built-in route of that path. Said on stderr when it does.
fn shadowed(root: Option<&std::path::Path>, route: &str) -> bool {
    let Some(root) = root else {
        return false;
    };
    let path = root.join(route.trim_start_matches('/'));
    let found = path.symlink_metadata().is_ok();
    if found {
        tracing::info!(
            "{route} is served from {} (a file there wins over the built-in route)",
            path.display()
        );
    }
    found
}

/// The `site` label of each router index on `/metrics`: a site's first server name, in the
/// order the router numbers them (the first site is the default).
pub(crate) fn site_labels(args: &ServeArgs) -> Vec<String> {
    args.site_labels()
}
