//! The dynamic app (being built): 1000 prefix-routed responders rendered as JSON or HTML.

use std::sync::Arc;

use crate::router::{RouteError, Router};
use crate::WorkerInfo;

/// Flags of `lowlat serve` for the dynamic app.
#[derive(Debug, Clone, clap::Args)]
pub struct AppArgs {}

/// The app's state shared by every worker (words and their counters).
#[derive(Debug)]
pub struct AppShared {}

impl AppShared {
    /// Builds the shared state once at start; `None` when the app is turned off.
    ///
    /// # Errors
    /// A one-line reason, e.g. an unreadable word list.
    pub fn from_args(_args: &AppArgs) -> Result<Option<Arc<Self>>, String> {
        Ok(None)
    }
}

/// Mounts the app's routes for one worker.
///
/// # Errors
/// When its routes conflict with others.
pub fn mount(
    _router: &mut Router,
    _shared: &Arc<AppShared>,
    _worker: &WorkerInfo,
) -> Result<(), RouteError> {
    Ok(())
}
