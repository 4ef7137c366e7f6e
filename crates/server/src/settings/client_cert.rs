//! `--client-ca FILE` and `--client-cert required|optional|off` (nginx's
//! `ssl_client_certificate` and `ssl_verify_client`): a site's client certificates (mTLS), as
//! flags, as `client_ca` and `client_cert` keys of the config file's top level and of each
//! `[[site]]`, and as the rules the TLS layer and the router get ([`ClientCaRule`]).

use std::path::PathBuf;

use crate::tls::{ClientAuthSite, ClientCaRule};

/// Whether a site's clients send a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCertMode {
    /// A handshake without one is refused (nginx's `on`, also accepted here).
    Required,
    /// A client may send none; one it sends must verify.
    Optional,
    /// None is asked for (a `[[site]]` turning off the top level's).
    Off,
}

impl ClientCertMode {
    /// The word on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Required => "required",
            Self::Optional => "optional",
            Self::Off => "off",
        }
    }
}

/// The client-certificate flags of the server, or of one site.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientCertArgs {
    /// Ask TLS clients for a certificate and verify it against the CA certificates in this PEM
    /// file (mTLS): its subject and fingerprint go to upstreams (X-Client-Cert-*) and to the
    /// access log; re-read on SIGHUP
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// With --client-ca: required (a handshake without a certificate is refused; the default),
    /// optional (a client may send none), or off
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    pub client_cert: Option<ClientCertMode>,
}

impl ClientCertArgs {
    /// What these flags ask for: nothing, or a rule.
    ///
    /// # Errors
    /// `--client-cert required` or `optional` without `--client-ca`.
    pub fn rule(&self) -> Result<Option<ClientCaRule>, String> {
        match (&self.client_ca, self.client_cert) {
            (_, Some(ClientCertMode::Off)) | (None, None) => Ok(None),
            (None, Some(mode)) => Err(format!(
                "--client-cert {}: needs --client-ca FILE (the CA certificates that issue the client certificates)",
                mode.name()
            )),
            (Some(file), mode) => Ok(Some(ClientCaRule {
                file: file.clone(),
                required: mode != Some(ClientCertMode::Optional),
            })),
        }
    }
}

fn parse_mode(text: &str) -> Result<ClientCertMode, String> {
    match text {
        "required" | "on" => Ok(ClientCertMode::Required),
        "optional" => Ok(ClientCertMode::Optional),
        "off" => Ok(ClientCertMode::Off),
        "optional_no_ca" => Err(
            "optional_no_ca is not offered: a certificate no CA vouches for proves nothing an upstream could trust (required, optional or off)"
                .into(),
        ),
        _ => Err(format!(
            "{text:?} is not a client certificate mode (required, optional or off)"
        )),
    }
}

/// The sites as the TLS layer sees them (in the router's order, the default first): their
/// names and rules. `has_tls`: there is a TLS listener to ask in.
///
/// # Errors
/// A site's flags that do not fit together (named), or a rule without a TLS listener.
pub(crate) fn sites<'a>(
    sites: impl IntoIterator<Item = (&'a [String], &'a ClientCertArgs)>,
    has_tls: bool,
) -> Result<Vec<ClientAuthSite>, String> {
    let mut out = Vec::new();
    for (names, args) in sites {
        let rule = args.rule().map_err(|e| {
            if names.is_empty() {
                e
            } else {
                format!("site {}: {e}", names.join(", "))
            }
        })?;
        out.push(ClientAuthSite {
            names: names.to_vec(),
            rule,
        });
    }
    if !has_tls && out.iter().any(|s| s.rule.is_some()) {
        return Err(
            "--client-ca asks for client certificates in TLS handshakes, and there is no --tls-listen"
                .into(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_rules() {
        assert_eq!(parse_mode("on").unwrap(), ClientCertMode::Required);
        assert_eq!(parse_mode("optional").unwrap(), ClientCertMode::Optional);
        for bad in ["yes", "", "Required", "optional_no_ca"] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
        let args = |ca: Option<&str>, mode: Option<ClientCertMode>| ClientCertArgs {
            client_ca: ca.map(PathBuf::from),
            client_cert: mode,
        };
        assert_eq!(args(None, None).rule().unwrap(), None);
        let rule = args(Some("ca.pem"), None).rule().unwrap().unwrap();
        assert!(rule.required, "required by default");
        let rule = args(Some("ca.pem"), Some(ClientCertMode::Optional))
            .rule()
            .unwrap()
            .unwrap();
        assert!(!rule.required);
        assert_eq!(
            args(Some("ca.pem"), Some(ClientCertMode::Off))
                .rule()
                .unwrap(),
            None
        );
        assert_eq!(args(None, Some(ClientCertMode::Off)).rule().unwrap(), None);
        let e = args(None, Some(ClientCertMode::Optional))
            .rule()
            .unwrap_err();
        assert!(
            e.contains("--client-cert optional: needs --client-ca"),
            "{e}"
        );
    }
}
