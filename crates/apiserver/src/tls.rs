//! The server's PKI: a CA kept in the data dir and a serving certificate
//! issued by it for the names the server answers on.
//!
//! The CA outlives restarts (kubeconfigs handed out carry it); the serving
//! certificate is re-issued on every start so it always covers the current
//! listen address and `--tls-san` names.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, date_time_ymd,
};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot access {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot issue a certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("invalid TLS material in {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("cannot configure TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The CA and the serving certificate, PEM-encoded.
pub struct Pki {
    pub ca_pem: String,
    /// The CA's private key: the CSR signer issues client certificates
    /// with it (`Config::ca_key`).
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    /// The ServiceAccount token key: derived from the CA's private key, so
    /// replicas that share the CA (as they must) verify each other's tokens.
    pub token_key: [u8; 32],
}

impl Pki {
    /// Loads the CA from `dir` (creating it on first use) and issues a
    /// serving certificate for `names`.
    pub fn load_or_create(dir: &Path, names: &[String]) -> Result<Pki, TlsError> {
        std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let ca_cert_path = dir.join("ca.crt");
        let ca_key_path = dir.join("ca.key");
        if !ca_cert_path.exists() || !ca_key_path.exists() {
            let ca = new_ca("flotilla-ca")?;
            // Key first: a crash between the writes leaves no CA without its key.
            write_private(&ca_key_path, &ca.key_pem)?;
            write_private(&ca_cert_path, &ca.cert_pem)?;
        }
        let ca_pem = read(&ca_cert_path)?;
        let ca_key_pem = read(&ca_key_path)?;
        let token_key = {
            use sha2::Digest;
            let mut h = sha2::Sha256::new();
            h.update(b"flotilla serviceaccount tokens v1\0");
            h.update(ca_key_pem.as_bytes());
            h.finalize().into()
        };
        let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(|e| TlsError::Invalid {
            path: ca_key_path.clone(),
            reason: e.to_string(),
        })?;
        let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(|e| TlsError::Invalid {
            path: ca_cert_path.clone(),
            reason: e.to_string(),
        })?;

        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names.to_vec())?;
        params.distinguished_name = name("flotilla-apiserver");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params, 1);
        let cert = params.signed_by(&key, &issuer)?;
        let pki = Pki {
            ca_pem,
            ca_key_pem,
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            token_key,
        };
        write_private(&dir.join("apiserver.key"), &pki.key_pem)?;
        write_private(&dir.join("apiserver.crt"), &pki.cert_pem)?;
        Ok(pki)
    }

    /// A rustls server configuration offering HTTP/2 and HTTP/1.1, as
    /// kube-apiserver does (kubectl negotiates h2), TLS 1.2 and 1.3 only.
    /// A client certificate is asked for but not required: one the client
    /// offers must chain to the cluster CA (and be valid now, for client
    /// auth), or the handshake fails; `client_cert.rs` reads who it names.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let invalid = |reason: String| TlsError::Invalid {
            path: PathBuf::from("apiserver.crt"),
            reason,
        };
        let certs = rustls_pemfile::certs(&mut self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(e.to_string()))?;
        let key = rustls_pemfile::private_key(&mut self.key_pem.as_bytes())
            .map_err(|e| invalid(e.to_string()))?
            .ok_or_else(|| invalid("no private key".into()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for ca in rustls_pemfile::certs(&mut self.ca_pem.as_bytes()) {
            let ca = ca.map_err(|e| invalid(e.to_string()))?;
            roots.add(ca)?;
        }
        let client_verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| invalid(format!("client certificate verifier: {e}")))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(TLS_VERSIONS)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(certs, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A certificate and its private key, PEM-encoded.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A new self-signed CA valid for ten years (a cluster's, as kubeadm's
/// `ca.crt`/`ca.key`; a server started with it in `pki/` uses it).
pub fn new_ca(common_name: &str) -> Result<Issued, TlsError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, 10);
    let cert = params.self_signed(&key)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A client certificate for `common_name` in `organizations` (the user
/// and groups the server reads), signed by the CA, valid for a year.
pub fn client_certificate(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
    organizations: &[&str],
) -> Result<Issued, TlsError> {
    client_certificate_until(ca_cert_pem, ca_key_pem, common_name, organizations, None)
}

/// A client certificate as [`client_certificate`], valid until the Unix
/// second `not_after` (a short-lived credential: Gardener's admin
/// kubeconfig); None: a year.
pub fn client_certificate_until(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
    organizations: &[&str],
    not_after: Option<i64>,
) -> Result<Issued, TlsError> {
    let invalid = |reason: String| TlsError::Invalid {
        path: PathBuf::from("ca.crt"),
        reason,
    };
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|e| invalid(e.to_string()))?;
    let issuer =
        Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(|e| invalid(e.to_string()))?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    for o in organizations {
        dn.push(DnType::OrganizationName, *o);
    }
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, 1);
    if let Some(at) = not_after.and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok()) {
        params.not_after = at;
    }
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The TLS versions served: 1.3 and 1.2, nothing older (rustls has no
/// older ones; named here so that stays a decision, not a default).
pub const TLS_VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// The names a serving certificate for `listen` must cover: the address
/// itself (loopback when listening on every interface), localhost, and
/// the operator's extra names.
pub fn serving_names(listen: SocketAddr, extra: &[String]) -> Vec<String> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    let ip = listen.ip();
    if !ip.is_unspecified() {
        names.push(ip.to_string());
    }
    if let Ok(host) = std::env::var("HOSTNAME")
        && !host.is_empty()
        && host.parse::<IpAddr>().is_err()
    {
        names.push(host.to_lowercase());
    }
    names.extend(extra.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "flotilla");
    dn
}

/// Valid from yesterday (tolerating clock skew) for `years` years.
fn set_validity(params: &mut CertificateParams, years: i16) {
    let today = jiff::Zoned::now().date();
    let from = today.yesterday().unwrap_or(today);
    let ymd = |d: jiff::civil::Date, add: i16| {
        date_time_ymd(
            i32::from(d.year() + add),
            d.month() as u8,
            // Avoids 29 February in a year without it.
            d.day().min(28) as u8,
        )
    };
    params.not_before = ymd(from, 0);
    params.not_after = ymd(today, years);
}

fn read(path: &Path) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes a file readable by its owner only, replacing it atomically.
pub fn write_private(path: &Path, contents: &str) -> Result<(), TlsError> {
    let io = |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    {
        use std::io::Write;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut f = options.open(&tmp).map_err(io)?;
        f.write_all(contents.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)
}
