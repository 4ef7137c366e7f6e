//! What the workers serve: a [`Service`] builds each worker's router on its own thread; the
//! slot that holds it lets a reload swap it while the workers run.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::builtin;
use crate::router::Router;

/// Builds the router of one worker (called once on each worker thread, so handlers may keep
/// per-worker state without locks).
pub type Service = Arc<dyn Fn(&WorkerInfo) -> Router + Send + Sync>;

/// What a worker's router is built for.
#[derive(Debug, Clone, Copy)]
pub struct WorkerInfo {
    /// The worker's index, from 0.
    pub index: usize,
}

/// The service the workers serve, replaceable while they run (a reload). Workers notice a new
/// generation at their next loop turn (one relaxed load per turn) and build their routers from
/// the new service on their own thread; a request is answered wholly by the router of the turn
/// it completed in.
pub(crate) struct ServiceSlot {
    pub(crate) generation: std::sync::atomic::AtomicU64,
    pub(crate) service: std::sync::RwLock<Service>,
}

impl ServiceSlot {
    pub(crate) fn new(service: Service) -> Self {
        Self {
            generation: std::sync::atomic::AtomicU64::new(0),
            service: std::sync::RwLock::new(service),
        }
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub(crate) fn current(&self) -> Service {
        Arc::clone(
            &self
                .service
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// The default service: built-in endpoints only.
#[must_use]
pub fn builtin_service() -> Service {
    Arc::new(|_info: &WorkerInfo| {
        let mut router = Router::new();
        builtin::mount(&mut router).expect("built-in routes do not conflict");
        router
    })
}
