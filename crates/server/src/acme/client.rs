//! The ACME thread: for each name, the certificate from the state directory or a new one from
//! the CA; renewal when due; exponential back-off after a failure, each failure logged once with
//! the CA's problem document. The certificate in use stays in use until a new one replaces it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, Identifier,
    NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::challenges::{publish_http01, tls_alpn01_cert, withdraw_http01};
use super::config::{AcmeConfig, ChallengeKind};
use super::error::{AcmeError, ACCOUNT_UNKNOWN};
use super::http::{RecordingClient, RetryAfter};
use super::schedule::{ari_renew_at, backoff, human, random, renew_at, FIRST_RETRY};
use super::store::Store;
use crate::tls::ManagedCerts;

/// Longest the CA may take to validate the challenges, then to issue.
const ORDER_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest sleep of the thread: it looks at the clock again at least this often (a suspended
/// machine, a clock set forward).
const MAX_SLEEP: Duration = Duration::from_secs(3600);
/// Longest one attempt at a certificate may take, from the lock to the stored chain.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(600);
/// Longest a single look at renewal information may take.
const REQUEST_LIMIT: Duration = Duration::from_secs(60);
/// Longest wait a CA's Retry-After is followed for (Let's Encrypt's limits reset within a week).
const MAX_TOLD_WAIT: Duration = Duration::from_secs(7 * 86_400);
/// Bounds on how soon and how late renewal information is asked for again.
const ARI_MIN: Duration = Duration::from_secs(60);
const ARI_MAX: Duration = Duration::from_secs(24 * 3600);

/// A certificate in use and what its schedule needs.
struct Held {
    der: CertificateDer<'static>,
    not_before: SystemTime,
    not_after: SystemTime,
    renew_at: SystemTime,
}

/// One name's state.
struct Entry {
    name: String,
    held: Option<Held>,
    /// When this entry is next looked at (renewal, retry, or renewal information).
    next: SystemTime,
    /// When renewal information is next asked for; `None` when the CA offers none.
    ari_next: Option<SystemTime>,
    failures: u32,
}

pub(super) struct Manager {
    config: AcmeConfig,
    store: Store,
    managed: Arc<ManagedCerts>,
    provider: Arc<CryptoProvider>,
    account: Option<Account>,
    entries: Vec<Entry>,
    /// The CA's latest Retry-After on a 429 or 503, recorded by the HTTP client.
    retry_after: RetryAfter,
}

impl Manager {
    /// Opens the state directory and publishes the certificates stored there.
    pub(super) fn new(
        config: AcmeConfig,
        managed: Arc<ManagedCerts>,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, AcmeError> {
        let store = Store::open(&config.state_dir, &config.directory)?;
        let now = SystemTime::now();
        let mut manager = Self {
            entries: Vec::new(),
            store,
            managed,
            provider,
            account: None,
            config,
            retry_after: RetryAfter::default(),
        };
        for name in manager.config.names.clone() {
            let held = match manager.stored(&name) {
                Ok(Some((key, held))) => {
                    tracing::info!(
                        "acme: {name}: certificate from {}, valid until {}; renewal from {}",
                        manager.store.cert_dir(&name).display(),
                        httpdate::fmt_http_date(held.not_after),
                        httpdate::fmt_http_date(held.renew_at)
                    );
                    manager.managed.set(&name, key);
                    Some(held)
                }
                Ok(None) => None,
                Err(e) => {
                    // Perhaps half-written by another process: looked at again under its lock
                    // before anything is ordered.
                    tracing::warn!("acme: {name}: the stored certificate is unusable ({e}): read again, or a new one ordered");
                    None
                }
            };
            manager.entries.push(Entry {
                name,
                next: held.as_ref().map_or(now, |h| h.renew_at),
                held,
                // Asked at the first turn; dropped if the CA offers none.
                ari_next: Some(now),
                failures: 0,
            });
        }
        for entry in &mut manager.entries {
            entry.next = entry.next.min(now);
        }
        Ok(manager)
    }

    /// The thread's body: runs until the process ends.
    pub(super) fn run(mut self) {
        // The ACME client's HTTPS (rustls) takes the process's default provider; both are
        // built in, so one must be named.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!("acme: cannot start: {e}; no certificate will be obtained");
                return;
            }
        };
        runtime.block_on(async move {
            loop {
                for i in 0..self.entries.len() {
                    if self.entries[i].next <= SystemTime::now() {
                        self.visit(i).await;
                    }
                }
                let now = SystemTime::now();
                let next = self.entries.iter().map(|e| e.next).min();
                let wait = next
                    .map_or(MAX_SLEEP, |n| {
                        n.duration_since(now).unwrap_or(Duration::ZERO)
                    })
                    .min(MAX_SLEEP);
                tokio::time::sleep(wait.max(Duration::from_millis(50))).await;
            }
        });
    }

    /// Does what is due for entry `i`: a renewal (or first issuance), or a look at the CA's
    /// renewal information.
    async fn visit(&mut self, i: usize) {
        let now = SystemTime::now();
        let due = self.entries[i]
            .held
            .as_ref()
            .is_none_or(|h| h.renew_at <= now);
        if !due {
            self.check_renewal_info(i).await;
            return;
        }
        let name = self.entries[i].name.clone();
        // The HTTP client has no deadline of its own: a CA that accepts and never answers
        // would hold this thread, and every other name's renewal, forever.
        self.told_wait();
        let attempt = tokio::time::timeout(ATTEMPT_LIMIT, self.obtain(i)).await;
        let result = attempt.unwrap_or_else(|_| {
            Err(AcmeError::Unreachable {
                directory: self.config.directory.clone(),
                reason: format!("no answer within {}", human(ATTEMPT_LIMIT)),
            })
        });
        match result {
            Ok((key, held, how)) => {
                tracing::info!(
                    "acme: {name}: {how}, valid until {}; renewal from {}",
                    httpdate::fmt_http_date(held.not_after),
                    httpdate::fmt_http_date(held.renew_at)
                );
                self.managed.set(&name, key);
                let entry = &mut self.entries[i];
                entry.failures = 0;
                entry.held = Some(held);
                if entry.ari_next.is_some() {
                    entry.ari_next = Some(now);
                }
                self.reschedule(i);
            }
            Err(e) => {
                if e.problem_type() == Some(ACCOUNT_UNKNOWN) {
                    // The CA forgot the account (a test CA restarted): a new one next time.
                    self.account = None;
                    self.store.forget_account();
                }
                let told = self.told_wait();
                let entry = &mut self.entries[i];
                entry.failures += 1;
                let mut wait = backoff(entry.failures, e.rate_limited());
                if let Some(told) = told {
                    // The CA said when (a rate limit's Retry-After): not sooner.
                    wait = wait.max(told);
                }
                entry.next = SystemTime::now() + wait;
                let kept = match &entry.held {
                    Some(h) => format!(
                        "the certificate in use is kept (valid until {})",
                        httpdate::fmt_http_date(h.not_after)
                    ),
                    None => "its TLS handshakes are refused until one is obtained".to_owned(),
                };
                tracing::error!(
                    "acme: {name}: cannot obtain a certificate (failure {}): {e}; next try in {}; {kept}",
                    entry.failures,
                    human(wait)
                );
            }
        }
    }

    /// The wait the CA asked for since the last call, if any (and forgets it).
    fn told_wait(&self) -> Option<Duration> {
        let at = self
            .retry_after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        Some(
            at.duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
                .min(MAX_TOLD_WAIT),
        )
    }

    /// Sets entry `i`'s next visit: its renewal, or its next look at renewal information.
    fn reschedule(&mut self, i: usize) {
        let entry = &mut self.entries[i];
        let renew = entry
            .held
            .as_ref()
            .map_or_else(SystemTime::now, |h| h.renew_at);
        entry.next = entry.ari_next.map_or(renew, |a| a.min(renew));
    }

    /// Asks the CA when it would like entry `i`'s certificate renewed (RFC 9773).
    async fn check_renewal_info(&mut self, i: usize) {
        let now = SystemTime::now();
        let Some(held) = &self.entries[i].held else {
            return;
        };
        let id = match CertificateIdentifier::try_from(&held.der) {
            Ok(id) => id.into_owned(),
            Err(e) => {
                tracing::debug!(
                    "acme: {}: no renewal information: {e}",
                    self.entries[i].name
                );
                self.entries[i].ari_next = None;
                self.reschedule(i);
                return;
            }
        };
        let account = tokio::time::timeout(REQUEST_LIMIT, self.account())
            .await
            .unwrap_or_else(|_| Err(AcmeError::Other("no answer".into())));
        let result = match account {
            Ok(account) => tokio::time::timeout(REQUEST_LIMIT, account.renewal_info(&id))
                .await
                .unwrap_or(Err(instant_acme::Error::Str("no answer in time"))),
            Err(e) => {
                tracing::debug!(
                    "acme: {}: renewal information not asked: {e}",
                    self.entries[i].name
                );
                self.entries[i].ari_next = Some(now + FIRST_RETRY);
                self.reschedule(i);
                return;
            }
        };
        let entry = &mut self.entries[i];
        match result {
            Ok((info, again)) => {
                let window = &info.suggested_window;
                let (start, end) = (SystemTime::from(window.start), SystemTime::from(window.end));
                if let Some(held) = &mut entry.held {
                    if let Some(at) = ari_renew_at(start, end, held.not_before, now, random()) {
                        if at != held.renew_at {
                            tracing::info!(
                                "acme: {}: the CA suggests renewal from {} (RFC 9773)",
                                entry.name,
                                httpdate::fmt_http_date(at)
                            );
                        }
                        held.renew_at = at;
                    }
                }
                entry.ari_next = Some(now + again.clamp(ARI_MIN, ARI_MAX));
            }
            Err(instant_acme::Error::Unsupported(_)) => entry.ari_next = None,
            Err(e) => {
                tracing::debug!("acme: {}: renewal information: {e}", entry.name);
                entry.ari_next = Some(now + ARI_MAX.min(Duration::from_secs(3600)));
            }
        }
        self.reschedule(i);
    }

    /// A certificate for entry `i`: one another process stored meanwhile, or a new one.
    async fn obtain(
        &mut self,
        i: usize,
    ) -> Result<(Arc<CertifiedKey>, Held, &'static str), AcmeError> {
        let name = self.entries[i].name.clone();
        // Held until the new certificate is stored: another process sharing the directory
        // waits, then finds it below instead of ordering its own.
        let _lock = self.store.lock_cert(&name)?;
        if let Ok(Some((key, held))) = self.stored(&name) {
            let newer = self.entries[i]
                .held
                .as_ref()
                .is_none_or(|h| held.not_before > h.not_before);
            if newer && held.renew_at > SystemTime::now() {
                return Ok((key, held, "certificate stored by another process taken up"));
            }
        }
        let replaces = self.entries[i]
            .held
            .as_ref()
            .filter(|_| self.entries[i].ari_next.is_some())
            .and_then(|h| CertificateIdentifier::try_from(&h.der).ok())
            .map(CertificateIdentifier::into_owned);
        let (chain, key) = self.order(&name, replaces).await?;
        let (certified, held) = self.certified(&chain, &key)?;
        self.store.save_cert(&name, &chain, &key)?;
        Ok((certified, held, "certificate obtained"))
    }

    /// Orders a certificate for `name` and answers its challenge; the chain and key, PEM.
    async fn order(
        &mut self,
        name: &str,
        replaces: Option<CertificateIdentifier<'static>>,
    ) -> Result<(String, String), AcmeError> {
        let directory = self.config.directory.clone();
        let acme = |e| AcmeError::from_acme(e, &directory);
        let account = self.account().await?;
        let identifiers = [Identifier::Dns(name.to_owned())];
        let mut order = match &replaces {
            Some(old) => match account
                .new_order(&NewOrder::new(&identifiers).replaces(old.clone()))
                .await
            {
                Ok(order) => order,
                // A CA may refuse the replacement (already replaced): a plain order then.
                Err(_) => account
                    .new_order(&NewOrder::new(&identifiers))
                    .await
                    .map_err(acme)?,
            },
            None => account
                .new_order(&NewOrder::new(&identifiers))
                .await
                .map_err(acme)?,
        };
        let mut published = Published {
            store: self.store.clone(),
            managed: Arc::clone(&self.managed),
            tokens: Vec::new(),
            names: Vec::new(),
        };
        let mut used = None;
        {
            let mut authorizations = order.authorizations();
            while let Some(authz) = authorizations.next().await {
                let mut authz = authz.map_err(acme)?;
                match authz.status {
                    AuthorizationStatus::Valid => continue,
                    AuthorizationStatus::Pending => {}
                    other => {
                        return Err(AcmeError::Other(format!(
                            "the CA's authorization for {name} is {other:?}"
                        )))
                    }
                }
                let offered: Vec<instant_acme::ChallengeType> =
                    authz.challenges.iter().map(|c| c.r#type.clone()).collect();
                let Some(kind) = self
                    .config
                    .challenges
                    .iter()
                    .copied()
                    .find(|k| offered.contains(&k.acme_type()))
                else {
                    return Err(AcmeError::NoChallenge {
                        name: name.to_owned(),
                        offered: offered
                            .iter()
                            .map(|t| format!("{t:?}"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        allowed: self
                            .config
                            .challenges
                            .iter()
                            .map(|k| k.name())
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                };
                let Some(mut challenge) = authz.challenge(kind.acme_type()) else {
                    continue;
                };
                let key_authorization = challenge.key_authorization();
                match kind {
                    ChallengeKind::Http01 => {
                        let token = challenge.token.clone();
                        publish_http01(&token, key_authorization.as_str());
                        self.store
                            .save_challenge(&token, key_authorization.as_str())?;
                        published.tokens.push(token);
                    }
                    ChallengeKind::TlsAlpn01 => {
                        let cert = tls_alpn01_cert(
                            name,
                            key_authorization.digest().as_ref(),
                            &self.provider,
                        )?;
                        self.managed.set_challenge(name, cert);
                        published.names.push(name.to_owned());
                    }
                }
                used = Some(kind);
                challenge.set_ready().await.map_err(acme)?;
            }
        }
        let retries = RetryPolicy::new()
            .initial_delay(Duration::from_millis(250))
            .backoff(1.5)
            .timeout(ORDER_TIMEOUT);
        let status = order.poll_ready(&retries).await;
        if !matches!(status, Ok(OrderStatus::Ready)) {
            // The reason is the failed challenge's problem, when the CA gives one.
            let mut authorizations = order.authorizations();
            while let Some(Ok(mut authz)) = authorizations.next().await {
                if let Ok(state) = authz.refresh().await {
                    if let Some(problem) = state.challenges.iter().find_map(|c| c.error.clone()) {
                        return Err(AcmeError::Validation {
                            name: name.to_owned(),
                            challenge: used.map_or("a challenge", ChallengeKind::name),
                            problem,
                        });
                    }
                }
            }
            return Err(match status {
                Err(e) => acme(e),
                Ok(s) => AcmeError::Other(format!("the order for {name} ended {s:?}")),
            });
        }
        drop(published);
        let key = rcgen::KeyPair::generate()
            .map_err(|e| AcmeError::Other(format!("cannot make a key: {e}")))?;
        let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])
            .map_err(|e| AcmeError::Other(format!("{name}: {e}")))?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params
            .serialize_request(&key)
            .map_err(|e| AcmeError::Other(format!("cannot make the CSR: {e}")))?;
        order.finalize_csr(csr.der()).await.map_err(acme)?;
        let chain = order.poll_certificate(&retries).await.map_err(acme)?;
        Ok((chain, key.serialize_pem()))
    }

    /// The account: from the state directory, else created (once for every process sharing it).
    async fn account(&mut self) -> Result<Account, AcmeError> {
        if let Some(account) = &self.account {
            return Ok(account.clone());
        }
        let directory = self.config.directory.clone();
        let acme = |e| AcmeError::from_acme(e, &directory);
        let builder = || {
            RecordingClient::new(
                self.config.ca_root.as_deref(),
                Arc::clone(&self.retry_after),
            )
            .map(|http| Account::builder_with_http(Box::new(http)))
        };
        let restore = |json: String| -> Result<AccountCredentials, AcmeError> {
            serde_json::from_str(&json)
                .map_err(|e| AcmeError::State(format!("account.json does not parse: {e}")))
        };
        let account = if let Some(json) = self.store.account()? {
            builder()?
                .from_credentials(restore(json)?)
                .await
                .map_err(acme)?
        } else {
            let _lock = self.store.lock_account()?;
            if let Some(json) = self.store.account()? {
                builder()?
                    .from_credentials(restore(json)?)
                    .await
                    .map_err(acme)?
            } else {
                let contact = self.config.email.as_ref().map(|e| format!("mailto:{e}"));
                let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
                let (account, credentials) = builder()?
                    .create(
                        &NewAccount {
                            contact: &contacts,
                            terms_of_service_agreed: true,
                            only_return_existing: false,
                        },
                        directory.clone(),
                        None,
                    )
                    .await
                    .map_err(acme)?;
                let json = serde_json::to_string(&credentials)
                    .map_err(|e| AcmeError::Other(format!("account credentials: {e}")))?;
                self.store.save_account(&json)?;
                tracing::info!("acme: account created at {directory}");
                account
            }
        };
        self.account = Some(account.clone());
        Ok(account)
    }

    /// `name`'s certificate from the state directory, if there is a usable one.
    fn stored(&self, name: &str) -> Result<Option<(Arc<CertifiedKey>, Held)>, AcmeError> {
        match self.store.cert(name)? {
            Some((chain, key)) => self.certified(&chain, &key).map(Some),
            None => Ok(None),
        }
    }

    /// A chain and key (PEM) made ready to serve, with their schedule.
    fn certified(
        &self,
        chain_pem: &str,
        key_pem: &str,
    ) -> Result<(Arc<CertifiedKey>, Held), AcmeError> {
        let bad = |what: &str| AcmeError::Other(format!("unusable certificate: {what}"));
        let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(&e.to_string()))?;
        let leaf = chain
            .first()
            .cloned()
            .ok_or_else(|| bad("no certificate"))?;
        let key =
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| bad(&e.to_string()))?;
        let certified =
            CertifiedKey::from_der(chain, key, &self.provider).map_err(|e| bad(&e.to_string()))?;
        let (not_before, not_after) = validity(&leaf).ok_or_else(|| bad("no validity"))?;
        Ok((
            Arc::new(certified),
            Held {
                der: leaf,
                not_before,
                not_after,
                renew_at: renew_at(not_before, not_after, random()),
            },
        ))
    }
}

/// A certificate's notBefore and notAfter.
fn validity(der: &CertificateDer<'_>) -> Option<(SystemTime, SystemTime)> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let at = |t: x509_parser::time::ASN1Time| {
        let secs = u64::try_from(t.timestamp()).ok()?;
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
    };
    Some((
        at(cert.validity().not_before)?,
        at(cert.validity().not_after)?,
    ))
}

/// The challenge answers of one order, withdrawn when it ends however it ends.
struct Published {
    store: Store,
    managed: Arc<ManagedCerts>,
    tokens: Vec<String>,
    names: Vec<String>,
}

impl Drop for Published {
    fn drop(&mut self) {
        for token in &self.tokens {
            withdraw_http01(token);
            self.store.remove_challenge(token);
        }
        for name in &self.names {
            self.managed.clear_challenge(name);
        }
    }
}
