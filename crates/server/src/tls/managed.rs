//! Certificates obtained at run time (ACME, `crate::acme`) rather than read from `--cert` files,
//! and the TLS-ALPN-01 challenge certificates (RFC 8737) shown while a CA validates a name.
//!
//! The ACME thread writes here; the resolver reads here once per full handshake (one
//! uncontended read lock, as for the files' store). A managed name without a certificate yet is
//! *pending*: its handshakes are refused rather than answered with another site's certificate,
//! which a browser would show as a name mismatch and a CA could take for a failed challenge.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::sign::CertifiedKey;

/// The ALPN protocol of the TLS-ALPN-01 challenge (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// What the store knows about a name.
#[derive(Debug)]
pub enum Managed {
    /// Not a managed name: the files' certificates decide.
    No,
    /// Managed, but no certificate has been obtained yet.
    Pending,
    /// Managed, with this certificate.
    Ready(Arc<CertifiedKey>),
}

/// Managed certificates by name, and challenge certificates by name.
#[derive(Debug, Default)]
pub struct ManagedCerts {
    /// Lower-case name → its certificate, `None` until one is obtained.
    certs: RwLock<HashMap<String, Option<Arc<CertifiedKey>>>>,
    /// Lower-case name → the TLS-ALPN-01 certificate of its challenge under validation.
    challenges: RwLock<HashMap<String, Arc<CertifiedKey>>>,
}

impl ManagedCerts {
    /// A store managing `names`, none with a certificate yet.
    #[must_use]
    pub fn new(names: &[String]) -> Self {
        let certs = names
            .iter()
            .map(|n| (n.to_ascii_lowercase(), None))
            .collect();
        Self {
            certs: RwLock::new(certs),
            challenges: RwLock::default(),
        }
    }

    /// The names managed, sorted.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = read(&self.certs).keys().cloned().collect();
        names.sort();
        names
    }

    /// Serves `key` for `name` from the next handshake on (connections already open keep theirs).
    pub fn set(&self, name: &str, key: Arc<CertifiedKey>) {
        write(&self.certs).insert(name.to_ascii_lowercase(), Some(key));
    }

    /// The certificate served for `name`, if one was obtained.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        read(&self.certs).get(name).cloned().flatten()
    }

    /// What is known of `name` (lower case, as rustls hands SNI over).
    #[must_use]
    pub fn lookup(&self, name: &str) -> Managed {
        match read(&self.certs).get(name) {
            None => Managed::No,
            Some(None) => Managed::Pending,
            Some(Some(key)) => Managed::Ready(Arc::clone(key)),
        }
    }

    /// Shows `key` to a TLS-ALPN-01 validation of `name` until [`ManagedCerts::clear_challenge`].
    pub fn set_challenge(&self, name: &str, key: Arc<CertifiedKey>) {
        write(&self.challenges).insert(name.to_ascii_lowercase(), key);
    }

    /// Ends the TLS-ALPN-01 challenge of `name`.
    pub fn clear_challenge(&self, name: &str) {
        write(&self.challenges).remove(&name.to_ascii_lowercase());
    }

    /// The challenge certificate for `name`, while its validation is under way.
    #[must_use]
    pub fn challenge(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        read(&self.challenges).get(name).cloned()
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}
