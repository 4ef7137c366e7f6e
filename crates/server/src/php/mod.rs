//! The PHP front door (`--php`): a site's document root served as nginx's usual PHP
//! configuration and caddy's `php_fastcgi` serve it. Static files go out directly (through the
//! site's own static file handler, with its cache, ranges and compression); a path whose
//! segment ends in `.php` runs that script if it is a file under the root (`PATH_INFO` is what
//! follows it), and nothing else is ever run (`/uploads/evil.jpg/x.php` is 404); a directory
//! runs its `index.php` (redirected first to its trailing slash); a path that names nothing
//! goes to the front controller, the root's `index.php`, with the request's own URI
//! (`try_files $uri $uri/ /index.php?$args`).
//!
//! A PHP request becomes a FastCGI request (`crate::proxy::cgi_request`) forwarded to the
//! site's php-fpm group through the proxy's upstream side, with its pools, balancing, health,
//! timeouts and metrics; so over HTTP/1.1, HTTP/2 and HTTP/3 alike.
//!
//! # Layout
//! - [`config`]: the flags and the settings every worker shares.
//! - `kinds`: what a path names under the root, remembered per worker for `--cache-valid`.

pub mod config;
mod kinds;

use std::os::unix::ffi::OsStrExt;
use std::rc::Rc;
use std::sync::Arc;

use lowlat_http::request::Method;

use crate::files::{FilesConfig, StaticFiles};
use crate::handler::{ClientInfo, Handler, Req, Response, StreamedBody};
use crate::proxy::cgi_request::{write_request, Script};
use crate::proxy::config::InternalLocation;
use crate::proxy::group::WorkerGroup;
use crate::proxy::handler::request_hash;
use crate::proxy::job::ProxyJob;
use crate::router::{RouteError, Router};
use kinds::{Kind, Kinds};

pub use config::{PhpArgs, PhpConfig};

/// Mounts the front door on `router` for every path and method, for one worker: it answers
/// whatever no more specific route (a `--proxy` or `--return` rule) claims.
///
/// # Errors
/// When the site's routes conflict.
pub(crate) fn mount(
    router: &mut Router,
    cfg: &Arc<PhpConfig>,
    files: &Arc<FilesConfig>,
    group: Rc<WorkerGroup>,
) -> Result<(), RouteError> {
    let handler = PhpHandler {
        internal: (!cfg.internal.is_empty()).then(|| Rc::from(&cfg.internal[..])),
        cfg: Arc::clone(cfg),
        files: StaticFiles::new(Arc::clone(files)),
        kinds: Kinds::new(files.cache_valid),
        files_cfg: Arc::clone(files),
        params: merged_params(&group.cfg.fastcgi_params, &cfg.params),
        group,
        norm: Vec::with_capacity(256),
        script: Vec::with_capacity(256),
        pairs: Vec::new(),
    };
    router.prefix("/", &Method::ALL, handler)
}

/// The group's parameters, then the site's, a site's replacing the group's of the same name.
fn merged_params(group: &[(String, String)], site: &[(String, String)]) -> Vec<(String, String)> {
    group
        .iter()
        .filter(|(n, _)| !site.iter().any(|(s, _)| s == n))
        .chain(site)
        .cloned()
        .collect()
}

/// What a request path is, under the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolved {
    /// Runs the script whose path is the first `len` bytes of the normalised path; the rest is
    /// `PATH_INFO`.
    Script { len: usize },
    /// Runs the directory's index script (the normalised path ends in `/`).
    DirectoryScript,
    /// The front controller.
    Front,
    /// A file (or a directory with a static index): the static file handler answers.
    Static,
    /// A directory named without its trailing slash.
    Redirect,
    /// An error status.
    Status(u16),
}

/// One worker's front door.
struct PhpHandler {
    cfg: Arc<PhpConfig>,
    files: StaticFiles,
    /// What paths name under the root, remembered for a while.
    kinds: Kinds,
    files_cfg: Arc<FilesConfig>,
    group: Rc<WorkerGroup>,
    internal: Option<Rc<[InternalLocation]>>,
    /// The group's FastCGI parameters and the site's (`--php-param`), in that order.
    params: Vec<(String, String)>,
    /// The normalised path, the script's path, the FastCGI variables (reused).
    norm: Vec<u8>,
    script: Vec<u8>,
    pairs: Vec<u8>,
}

impl Handler for PhpHandler {
    fn takes_streamed_body(&self, unknown_length: bool) -> bool {
        // PHP reads CONTENT_LENGTH bytes: a body of unknown length is read whole first.
        !unknown_length
    }

    fn handle(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
        let normalised = if req.path_plain {
            crate::files::path::copy_plain(req.path(), &mut self.norm)
        } else {
            crate::files::path::normalize(req.path(), self.files_cfg.dotfiles, &mut self.norm)
        };
        if let Err(e) = normalised {
            res.send_status(e.status());
            return;
        }
        if self.cfg.internal.iter().any(|loc| {
            self.norm.starts_with(loc.prefix.as_bytes())
                || self.norm == loc.prefix.as_bytes()[..loc.prefix.len() - 1]
        }) {
            // An internal location is the application's to name, never a client's.
            res.send_status(404);
            return;
        }
        match resolve(&self.cfg, &self.files_cfg, &mut self.kinds, &self.norm) {
            Resolved::Static => self.files.handle(req, res),
            Resolved::Status(status) => res.send_status(status),
            Resolved::Redirect => {
                let mut line = b"Location: ".to_vec();
                crate::files::path::encode_path(&self.norm, true, &mut line);
                line.push(b'/');
                if let Some(query) = req.head.query {
                    line.push(b'?');
                    line.extend_from_slice(query.as_bytes());
                }
                line.extend_from_slice(b"\r\n");
                res.send_status_with(301, &line);
            }
            Resolved::Script { len } => {
                self.script.clear();
                self.script.extend_from_slice(&self.norm[..len]);
                let info = self.norm.split_off(len);
                self.forward(req, res, &info);
                self.norm.extend_from_slice(&info);
            }
            Resolved::DirectoryScript => {
                self.script.clear();
                self.script.extend_from_slice(&self.norm);
                self.script.extend_from_slice(self.cfg.index.as_bytes());
                self.forward(req, res, b"");
            }
            Resolved::Front => {
                self.script.clear();
                self.script.push(b'/');
                self.script.extend_from_slice(self.cfg.index.as_bytes());
                self.forward(req, res, b"");
            }
        }
    }
}

impl PhpHandler {
    /// Forwards `req` to php-fpm to run the script in `self.script`, with `path_info`.
    fn forward(&mut self, req: &Req<'_, '_, '_>, res: &mut Response<'_>, path_info: &[u8]) {
        let streamed = res.streamed();
        let too_large = match streamed {
            Some(StreamedBody::Length(n)) => n > self.group.cfg.max_body,
            _ => req.body.len() as u64 > self.group.cfg.max_body,
        };
        if too_large {
            res.send_status(413);
            return;
        }
        if req.head.protocol.is_some() {
            // An extended CONNECT (a WebSocket over HTTP/2) has no CGI form.
            res.send_status(501);
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
        let root = self.cfg.root.as_os_str().as_bytes();
        let mut filename = Vec::with_capacity(root.len() + self.script.len());
        filename.extend_from_slice(root);
        filename.extend_from_slice(&self.script);
        let script = Script {
            name: &self.script,
            path_info,
            filename: Some(&filename),
            root: Some(root),
        };
        let mut request = self.group.take_buffer();
        write_request(
            &mut request,
            &mut self.pairs,
            req.head,
            req.body,
            streamed,
            &script,
            (client, cert),
            &self.cfg.server,
            &self.params,
        );
        let method = req.method();
        let hash = request_hash(&self.group, req, client);
        res.forward(ProxyJob {
            internal: self.internal.clone(),
            ..ProxyJob::new(&self.group, request, method, hash)
        });
    }
}

/// What the normalised path `norm` is under the root.
fn resolve(cfg: &PhpConfig, files: &FilesConfig, kinds: &mut Kinds, norm: &[u8]) -> Resolved {
    // The first segment ending in `.php` ends the script (nginx's `^(.+?\.php)(/.*)$`); it
    // runs only if it is a file, whatever follows.
    let mut end = 0;
    while end < norm.len() {
        let next = memchr::memchr(b'/', &norm[end + 1..]).map_or(norm.len(), |i| end + 1 + i);
        if norm[..next].ends_with(b".php") {
            return match kinds.of(cfg, files, &norm[..next]) {
                Kind::File => Resolved::Script { len: next },
                Kind::Missing | Kind::Directory => Resolved::Status(404),
                Kind::Status(s) => Resolved::Status(s),
            };
        }
        end = next;
    }
    match kinds.of(cfg, files, norm) {
        Kind::File if norm.ends_with(b"/") => Resolved::Status(404),
        Kind::File => Resolved::Static,
        Kind::Directory if !norm.ends_with(b"/") => Resolved::Redirect,
        Kind::Directory => {
            let mut index = norm.to_vec();
            index.extend_from_slice(cfg.index.as_bytes());
            if kinds.of(cfg, files, &index) == Kind::File {
                return Resolved::DirectoryScript;
            }
            index.truncate(norm.len());
            index.extend_from_slice(files.index.as_bytes());
            if kinds.of(cfg, files, &index) == Kind::File {
                return Resolved::Static;
            }
            front(cfg, files, kinds)
        }
        Kind::Missing => front(cfg, files, kinds),
        Kind::Status(s) => Resolved::Status(s),
    }
}

/// The front controller, if the site has one.
fn front(cfg: &PhpConfig, files: &FilesConfig, kinds: &mut Kinds) -> Resolved {
    let mut index = b"/".to_vec();
    index.extend_from_slice(cfg.index.as_bytes());
    if cfg.front_controller && kinds.of(cfg, files, &index) == Kind::File {
        Resolved::Front
    } else {
        Resolved::Status(404)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(super) fn site() -> (tempfile::TempDir, PhpConfig, Arc<FilesConfig>) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for d in ["blog", "static", "uploads/evil.jpg", "docs"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "index.php",
            "info.php",
            "blog/index.php",
            "static/app.css",
            "uploads/pic.jpg",
            "docs/index.html",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        let args = crate::files::FilesArgs {
            root: Some(root.clone()),
            ..<crate::files::FilesArgs as clap::FromArgMatches>::from_arg_matches(
                &<crate::files::FilesArgs as clap::Args>::augment_args(clap::Command::new("t"))
                    .get_matches_from(["t"]),
            )
            .unwrap()
        };
        let files = FilesConfig::from_args(&args, 1).unwrap();
        let cfg = PhpConfig {
            root,
            index: "index.php".into(),
            front_controller: true,
            params: Vec::new(),
            internal: Vec::new(),
            server: Arc::default(),
        };
        (dir, cfg, files)
    }

    #[test]
    fn paths_resolve_as_nginx_runs_php() {
        let (_dir, mut cfg, files) = site();
        for (path, want) in [
            ("/info.php", Resolved::Script { len: 9 }),
            ("/info.php/extra/path", Resolved::Script { len: 9 }),
            ("/missing.php", Resolved::Status(404)),
            // The picture is never run, whatever the path after it says.
            ("/uploads/evil.jpg/x.php", Resolved::Status(404)),
            ("/uploads/pic.jpg/x.php", Resolved::Status(404)),
            ("/uploads/pic.jpg", Resolved::Static),
            ("/static/app.css", Resolved::Static),
            ("/", Resolved::DirectoryScript),
            ("/blog/", Resolved::DirectoryScript),
            ("/blog", Resolved::Redirect),
            ("/docs/", Resolved::Static),
            ("/uploads/", Resolved::Front),
            ("/2024/05/hello-world/", Resolved::Front),
            // A file named as a directory is no file: the front controller, as try_files does.
            ("/static/app.css/", Resolved::Front),
        ] {
            assert_eq!(
                resolve(
                    &cfg,
                    &files,
                    &mut Kinds::new(std::time::Duration::ZERO),
                    path.as_bytes()
                ),
                want,
                "{path}"
            );
        }
        cfg.front_controller = false;
        assert_eq!(
            resolve(
                &cfg,
                &files,
                &mut Kinds::new(std::time::Duration::ZERO),
                b"/2024/05/hello-world/"
            ),
            Resolved::Status(404)
        );
    }
}
