//! [`LoadError`]: why a run could not start or finish. Failures of single requests during a run
//! are not errors of the run; they are counted by kind in [`crate::ErrorCounts`].

use std::io;

/// Why a run could not start (bad configuration, unknown host, unreachable target) or could not
/// complete (a thread could not be spawned or pinned).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A URL that cannot be loaded (syntax, scheme, port).
    #[error("invalid URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    /// A host name that does not resolve.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        #[source]
        source: io::Error,
    },
    /// The target refused or did not answer the connection made before the run.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: io::Error,
    },
    /// A zero, absurd or contradictory option.
    #[error("{0}")]
    Config(String),
    /// This machine or process cannot run the load asked for (too few file descriptors): the
    /// options are valid, the limits around them are not.
    #[error("{0}")]
    Resources(String),
    /// TLS cannot be set up: an unusable `--cacert`, no trusted roots.
    #[error("{0}")]
    Tls(String),
    /// Setting up a thread's event loop, timer or CPU affinity failed.
    #[error("{what}: {source}")]
    System {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The Lua script (`-s`) cannot be read, fails (file, line and message), or its
    /// `request()` returned something that is not complete HTTP/1.x requests.
    #[error("{0}")]
    Script(String),
    /// A loader thread panicked (a bug); the run's figures are lost.
    #[error("a loader thread failed")]
    ThreadPanicked,
}
