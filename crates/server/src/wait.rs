//! What a connection waits for, in either protocol: it decides which timeout applies and what
//! happens when it passes.

/// What the connection is waiting for; decides which timeout applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// For the TLS handshake to complete (handshake timeout, from accept).
    Handshake,
    /// Between requests (keep-alive timeout).
    Idle,
    /// Inside a request head (header timeout, from its first byte).
    Head,
    /// Inside a request body (body timeout, between reads).
    Body,
    /// For the client to read what we wrote (write timeout, between writes).
    Write,
    /// For the client to close after our close (linger timeout).
    Linger,
    /// For an upstream's response (the upstream side's timeouts apply).
    Upstream,
    /// For a held request's time to come (`crate::hold`): its timer drives the connection.
    Held,
}
