//! Certificates made at test time, written as PEM files in a temporary directory that lives as
//! long as the [`Pki`] value.
//!
//! A [`Pki`] holds one certificate authority. [`Pki::leaf`] issues a server certificate for some
//! names, signed by that CA, and writes the chain (leaf then CA, as a server sends it) and the key;
//! a client that trusts [`Pki::ca_path`] verifies it. [`Pki::client`] issues a client certificate
//! (extended key usage `clientAuth`, a subject of the test's choosing) that a server trusting the
//! same CA file verifies (mTLS). [`Pki::self_signed`] and expired leaves cover the failure cases.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SignatureAlgorithm,
};
use time::{Duration, OffsetDateTime};

/// The kinds of subject attribute [`Pki::client`] takes (rcgen's).
pub use rcgen::DnType;

/// Which kind of key a certificate gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// ECDSA P-256 (what the peers' benchmark configurations use).
    EcdsaP256,
    /// RSA 2048.
    Rsa2048,
}

/// A certificate and its key on disk.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The chain, leaf first (PEM).
    pub cert: PathBuf,
    /// The private key (PKCS#8 PEM).
    pub key: PathBuf,
    /// The leaf alone, DER: tests compare it with what a server presented.
    pub leaf_der: Vec<u8>,
}

/// A test certificate authority and the directory its files live in.
pub struct Pki {
    dir: tempfile::TempDir,
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    /// A new CA (ECDSA P-256), its certificate written to `ca.crt`.
    ///
    /// # Panics
    /// When a key or certificate cannot be made or written (a broken test environment).
    #[must_use]
    pub fn new() -> Self {
        Self::named("lowlat test CA")
    }

    /// A new CA whose subject's common name is `name` (two CAs of one test told apart).
    ///
    /// # Panics
    /// As [`Pki::new`].
    #[must_use]
    pub fn named(name: &str) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::days(1);
        params.not_after = now + Duration::days(30);
        let cert = params.self_signed(&key).expect("CA certificate");
        let ca_pem = cert.pem();
        std::fs::write(dir.path().join("ca.crt"), &ca_pem).expect("write ca.crt");
        let issuer = Issuer::new(params, key);
        Self {
            dir,
            ca_pem,
            issuer,
        }
    }

    /// The directory the files are written to.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate (PEM), for a client's trust store.
    #[must_use]
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The CA certificate as PEM text.
    #[must_use]
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A server certificate for `names`, signed by this CA, valid from yesterday for 30 days;
    /// written to `FILE.crt` (leaf and CA) and `FILE.key`.
    #[must_use]
    pub fn leaf(&self, file: &str, names: &[&str], kind: KeyKind) -> CertFiles {
        let now = OffsetDateTime::now_utc();
        self.leaf_valid(
            file,
            names,
            kind,
            now - Duration::days(1),
            now + Duration::days(30),
        )
    }

    /// Like [`Pki::leaf`], but expired yesterday.
    #[must_use]
    pub fn expired_leaf(&self, file: &str, names: &[&str]) -> CertFiles {
        let now = OffsetDateTime::now_utc();
        self.leaf_valid(
            file,
            names,
            KeyKind::EcdsaP256,
            now - Duration::days(10),
            now - Duration::days(1),
        )
    }

    fn leaf_valid(
        &self,
        file: &str,
        names: &[&str],
        kind: KeyKind,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> CertFiles {
        let key = new_key(kind);
        let mut params = leaf_params(names);
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        let chain = format!("{}{}", cert.pem(), self.ca_pem);
        self.write(file, &chain, &key.serialize_pem(), cert.der().to_vec())
    }

    /// A client certificate (extended key usage `clientAuth`) whose subject is `subject`, in
    /// order (`[(DnType::CountryName, "FR"), (DnType::CommonName, "alice")]`), signed by this
    /// CA, valid from yesterday for 30 days; written to `FILE.crt` (leaf and CA, as a client
    /// sends its chain) and `FILE.key`.
    ///
    /// # Panics
    /// As [`Pki::new`].
    #[must_use]
    pub fn client(&self, file: &str, subject: &[(DnType, &str)]) -> CertFiles {
        let now = OffsetDateTime::now_utc();
        self.client_valid(
            file,
            subject,
            now - Duration::days(1),
            now + Duration::days(30),
        )
    }

    /// Like [`Pki::client`], but expired yesterday.
    #[must_use]
    pub fn expired_client(&self, file: &str, subject: &[(DnType, &str)]) -> CertFiles {
        let now = OffsetDateTime::now_utc();
        self.client_valid(
            file,
            subject,
            now - Duration::days(10),
            now - Duration::days(1),
        )
    }

    fn client_valid(
        &self,
        file: &str,
        subject: &[(DnType, &str)],
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> CertFiles {
        let key = new_key(KeyKind::EcdsaP256);
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        // In the order given (rcgen's default name would come first).
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (kind, value) in subject {
            params.distinguished_name.push(kind.clone(), *value);
        }
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("client certificate");
        let chain = format!("{}{}", cert.pem(), self.ca_pem);
        self.write(file, &chain, &key.serialize_pem(), cert.der().to_vec())
    }

    /// A self-signed certificate for `names` that no CA vouches for.
    #[must_use]
    pub fn self_signed(&self, file: &str, names: &[&str], kind: KeyKind) -> CertFiles {
        let key = new_key(kind);
        let cert = leaf_params(names)
            .self_signed(&key)
            .expect("self-signed certificate");
        self.write(file, &cert.pem(), &key.serialize_pem(), cert.der().to_vec())
    }

    fn write(&self, file: &str, chain: &str, key: &str, leaf_der: Vec<u8>) -> CertFiles {
        let cert_path = self.dir.path().join(format!("{file}.crt"));
        let key_path = self.dir.path().join(format!("{file}.key"));
        std::fs::write(&cert_path, chain).expect("write certificate");
        std::fs::write(&key_path, key).expect("write key");
        CertFiles {
            cert: cert_path,
            key: key_path,
            leaf_der,
        }
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

fn new_key(kind: KeyKind) -> KeyPair {
    let alg: &'static SignatureAlgorithm = match kind {
        KeyKind::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        KeyKind::Rsa2048 => &rcgen::PKCS_RSA_SHA256,
    };
    match kind {
        KeyKind::EcdsaP256 => KeyPair::generate_for(alg).expect("ECDSA key"),
        KeyKind::Rsa2048 => {
            KeyPair::generate_rsa_for(alg, rcgen::RsaKeySize::_2048).expect("RSA key")
        }
    }
}

fn leaf_params(names: &[&str]) -> CertificateParams {
    let names: Vec<String> = names.iter().map(|n| (*n).to_string()).collect();
    let mut params = CertificateParams::new(names.clone()).expect("leaf params");
    if let Some(first) = names.first() {
        params
            .distinguished_name
            .push(DnType::CommonName, first.as_str());
    }
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params
}
