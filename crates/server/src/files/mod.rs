//! Static files (being built): the document root, the embedded default site, HTTP semantics of
//! nginx's static module, and a per-worker content cache.

use std::sync::Arc;

use crate::handler::{Req, Response};
use crate::router::Router;

/// Flags of `lowlat serve` for static files.
#[derive(Debug, Clone, clap::Args)]
pub struct FilesArgs {}

/// Static-file settings shared (read-only) by every worker.
#[derive(Debug)]
pub struct FilesConfig {}

impl FilesConfig {
    /// Checks the flags once at start.
    ///
    /// # Errors
    /// A one-line reason, e.g. a document root that does not exist.
    pub fn from_args(_args: &FilesArgs) -> Result<Arc<Self>, String> {
        Ok(Arc::new(Self {}))
    }
}

/// Mounts the static file handler as `router`'s fallback, for one worker.
pub fn mount(router: &mut Router, _cfg: &Arc<FilesConfig>) {
    router.fallback(|_req: &Req<'_, '_, '_>, res: &mut Response<'_>| res.send_status(404));
}
