//! What the ACME client is told ([`AcmeConfig`]): the CA, the contact, the names, the challenge
//! types in order of preference, and where its state is kept.

use std::path::PathBuf;

/// A challenge type this server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    /// HTTP-01: a file under `/.well-known/acme-challenge/` on port 80 (the `--listen` one).
    Http01,
    /// TLS-ALPN-01: a special certificate on port 443 (the `--tls-listen` one).
    TlsAlpn01,
}

impl ChallengeKind {
    /// The name ACME gives it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Http01 => "http-01",
            Self::TlsAlpn01 => "tls-alpn-01",
        }
    }

    pub(super) fn acme_type(self) -> instant_acme::ChallengeType {
        match self {
            Self::Http01 => instant_acme::ChallengeType::Http01,
            Self::TlsAlpn01 => instant_acme::ChallengeType::TlsAlpn01,
        }
    }
}

/// What the ACME client needs to know.
#[derive(Debug, Clone)]
pub struct AcmeConfig {
    /// The CA's directory URL.
    pub directory: String,
    /// Contact for the account (`mailto:` is added), optional.
    pub email: Option<String>,
    /// Where the account and the certificates are kept.
    pub state_dir: PathBuf,
    /// A root certificate (PEM) to trust for the CA's own HTTPS, instead of the system's: a
    /// staging or internal CA.
    pub ca_root: Option<PathBuf>,
    /// The challenge types to answer, in order of preference.
    pub challenges: Vec<ChallengeKind>,
    /// The names to obtain certificates for, one certificate each (lower case, no wildcard).
    pub names: Vec<String>,
}
