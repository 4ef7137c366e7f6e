//! The ACME client's HTTPS: instant-acme's own client (hyper and rustls; the system's roots, or
//! `--acme-ca-root`), wrapped to remember the `Retry-After` of a rate-limited or unavailable
//! answer (RFC 8555 §6.6), which instant-acme drops when it turns the answer into an error.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::error::AcmeError;

/// The latest `Retry-After` the CA sent with a 429 or 503, shared with the client.
pub type RetryAfter = Arc<Mutex<Option<SystemTime>>>;

/// An HTTPS client that records the CA's `Retry-After`.
pub struct RecordingClient {
    inner: Client<hyper_rustls::HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>,
    retry_after: RetryAfter,
}

impl RecordingClient {
    /// A client trusting `root` (PEM) alone, or the system's roots.
    ///
    /// # Errors
    /// [`AcmeError::Other`] when the root cannot be read or the system's roots not found.
    pub fn new(root: Option<&Path>, retry_after: RetryAfter) -> Result<Self, AcmeError> {
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = match root {
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(path).map_err(|e| {
                    AcmeError::Other(format!("--acme-ca-root {}: {e}", path.display()))
                })? {
                    let cert = cert.map_err(|e| {
                        AcmeError::Other(format!("--acme-ca-root {}: {e}", path.display()))
                    })?;
                    roots.add(cert).map_err(|e| {
                        AcmeError::Other(format!("--acme-ca-root {}: {e}", path.display()))
                    })?;
                }
                builder.with_tls_config(
                    rustls::ClientConfig::builder()
                        .with_root_certificates(roots)
                        .with_no_client_auth(),
                )
            }
            None => builder
                .try_with_platform_verifier()
                .map_err(|e| AcmeError::Other(format!("the system's roots: {e}")))?,
        };
        let connector = builder.https_only().enable_http1().enable_http2().build();
        Ok(Self {
            inner: Client::builder(TokioExecutor::new()).build(connector),
            retry_after,
        })
    }
}

impl HttpClient for RecordingClient {
    fn request(
        &self,
        req: http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let fut = HttpClient::request(&self.inner, req);
        let slot = Arc::clone(&self.retry_after);
        Box::pin(async move {
            let rsp = fut.await?;
            let status = rsp.parts.status.as_u16();
            if status == 429 || status == 503 {
                let value = rsp
                    .parts
                    .headers
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok());
                if let Some(at) = value.and_then(|v| parse_retry_after(v, SystemTime::now())) {
                    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
                }
            }
            Ok(rsp)
        })
    }
}

/// `Retry-After`: seconds, or an HTTP date (RFC 9110 §10.2.3).
#[must_use]
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<SystemTime> {
    let value = value.trim();
    match value.parse::<u64>() {
        Ok(secs) => Some(now + Duration::from_secs(secs)),
        Err(_) => httpdate::parse_http_date(value).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_values() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(now + Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:16:40 GMT", now),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1000))
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
