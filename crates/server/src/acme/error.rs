//! Why obtaining a certificate failed ([`AcmeError`]): each variant says whose fault it is —
//! the state directory, the CA (with its RFC 7807 problem document), or the network.

use instant_acme::Problem;

/// The problem type of a rate limit (RFC 8555 §6.7).
pub const RATE_LIMITED: &str = "urn:ietf:params:acme:error:rateLimited";
/// The problem type of an account the CA no longer knows (a test CA restarted, say).
pub const ACCOUNT_UNKNOWN: &str = "urn:ietf:params:acme:error:accountDoesNotExist";

/// Why a certificate could not be obtained, or ACME could not start.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    /// The state directory cannot be read or written.
    #[error("state directory: {0}")]
    State(String),
    /// The CA answered with a problem document.
    #[error("the CA refused: {}", describe(.0))]
    Refused(Problem),
    /// The CA could not be reached, or answered with something other than ACME.
    #[error("the CA at {directory} cannot be reached or did not answer in ACME: {reason}")]
    Unreachable { directory: String, reason: String },
    /// A challenge was tried and failed validation.
    #[error("validation of {name} by {challenge} failed: {}", describe(.problem))]
    Validation {
        name: String,
        challenge: &'static str,
        problem: Problem,
    },
    /// The CA offered none of the challenge types this server may answer.
    #[error("the CA offers {offered} for {name}; lowlat answers {allowed} (see --acme-challenge)")]
    NoChallenge {
        name: String,
        offered: String,
        allowed: String,
    },
    /// The CA issued something unusable, or the order ended in an unexpected state.
    #[error("{0}")]
    Other(String),
}

impl AcmeError {
    /// Whether the CA said to slow down.
    #[must_use]
    pub fn rate_limited(&self) -> bool {
        self.problem_type() == Some(RATE_LIMITED)
    }

    /// The problem type of the CA's answer, if it gave one.
    #[must_use]
    pub fn problem_type(&self) -> Option<&str> {
        match self {
            Self::Refused(p) | Self::Validation { problem: p, .. } => p.r#type.as_deref(),
            _ => None,
        }
    }

    /// From instant-acme's error, for the CA at `directory`.
    pub(crate) fn from_acme(e: instant_acme::Error, directory: &str) -> Self {
        match e {
            instant_acme::Error::Api(problem) => Self::Refused(problem),
            instant_acme::Error::Hyper(_)
            | instant_acme::Error::Http(_)
            | instant_acme::Error::Json(_)
            | instant_acme::Error::InvalidUri(_) => Self::Unreachable {
                directory: directory.to_owned(),
                reason: chain(&e),
            },
            // A connection refused or a TLS failure arrives boxed as Other.
            other => {
                let text = chain(&other);
                if text.contains("client error") || text.contains("connect") {
                    Self::Unreachable {
                        directory: directory.to_owned(),
                        reason: text,
                    }
                } else {
                    Self::Other(text)
                }
            }
        }
    }
}

/// An error and its sources, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// A problem document as one line: its detail, type, status and subproblems.
#[must_use]
pub fn describe(p: &Problem) -> String {
    let mut out = p.detail.clone().unwrap_or_else(|| "no detail".to_owned());
    out.push_str(" (");
    out.push_str(p.r#type.as_deref().unwrap_or("no type"));
    if let Some(status) = p.status {
        out.push_str(&format!(", status {status}"));
    }
    out.push(')');
    for sub in &p.subproblems {
        out.push_str("; ");
        out.push_str(&sub.to_string());
    }
    out
}
