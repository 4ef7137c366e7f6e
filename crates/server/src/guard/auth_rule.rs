//! A forward-auth rule's part shared by the workers and `/metrics` ([`AuthRule`]): the fields
//! it copies, the one naming the user, and what it decided. A leaf: the exchange
//! (`crate::proxy::auth`), the rule (`super::forward`) and the metrics page read it.

use std::sync::atomic::AtomicU64;

/// A forward-auth rule as the exchange needs it, shared by the workers: the fields it copies,
/// the one that names the user, and its counts for `/metrics`.
#[derive(Debug)]
pub struct AuthRule {
    /// As `/metrics` names the rule: `PREFIX=URL`.
    pub label: String,
    /// Fields copied from a 2xx answer onto the forwarded request, as configured.
    pub copy: Box<[Box<str>]>,
    /// The copied field that names the user (for the log), when one does.
    pub user_field: Option<Box<str>>,
    /// Requests let through, refused (the auth service's 401/403/3xx relayed), and failed
    /// closed (another status, no answer, a timeout).
    pub passed: AtomicU64,
    pub denied: AtomicU64,
    pub failed: AtomicU64,
}

impl AuthRule {
    /// A rule copying `copy` (the first field whose name says "user" names the user).
    #[must_use]
    pub fn new(label: String, copy: Vec<String>) -> AuthRule {
        let user_field = copy
            .iter()
            .find(|c| c.to_ascii_lowercase().contains("user"))
            .map(|c| c.clone().into_boxed_str());
        AuthRule {
            label,
            copy: copy.into_iter().map(String::into_boxed_str).collect(),
            user_field,
            passed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }
}
