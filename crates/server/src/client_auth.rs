//! A site's client-certificate rule (`--client-ca FILE`, `--client-cert required|optional`),
//! checked for each request before the site's routes: whether the certificate its connection
//! presented counts for this site, and what a request without one gets.
//!
//! A certificate counts for a site when the site's own CA file verified it — which the TLS
//! layer records with the connection (`crate::tls::CaTag`), since the handshake chose its
//! configuration by SNI and a request's `Host` may name another site: a client may ask, on a
//! connection made for one site (HTTP/2 coalesces connections to names one certificate
//! covers), for another. A site that requires a certificate answers a request whose connection
//! has none counting for it:
//!
//! - `421 Misdirected Request` over TLS and over QUIC: the handshake was not made for this site
//!   (or, over HTTP/3, could not ask), and a new connection naming it is asked for a
//!   certificate — which is what RFC 9110 §15.5.20 tells a client to do with a 421;
//! - `403 Forbidden` in clear: no connection on that port can carry a certificate.
//!
//! A site whose certificate is optional answers every request; those whose certificate counts
//! are passed on with it (`crate::client_cert`), the others as `NONE`.

use std::path::Path;
use std::sync::Arc;

use crate::handler::{Handler, Req, Response};
use crate::tls::ClientCaRule;

/// What a site asks of its clients' certificates, for its requests.
#[derive(Debug, Clone)]
pub struct SiteClientAuth {
    /// The CA file a certificate must have been verified against.
    ca: Arc<Path>,
    required: bool,
}

impl SiteClientAuth {
    #[must_use]
    pub fn new(rule: &ClientCaRule) -> Self {
        Self {
            ca: Arc::from(rule.file.as_path()),
            required: rule.required,
        }
    }
}

/// The check, asked before a site's routes (an early hook of the site's router).
pub(crate) struct ClientCertCheck(pub(crate) SiteClientAuth);

impl Handler for ClientCertCheck {
    fn handle(&mut self, _req: &Req<'_, '_, '_>, res: &mut Response<'_>) {
        let rule = &self.0;
        let client = res.client();
        let counts = client
            .and_then(|c| c.cert.as_deref())
            .is_some_and(|cert| *cert.ca == *rule.ca);
        res.set_cert_checked(counts);
        if !counts && rule.required {
            let status = if client.is_some_and(|c| c.tls) {
                421
            } else {
                403
            };
            res.send_status(status);
        }
    }
}
