//! Client certificates, as kube-apiserver's x509 authenticator reads them:
//! the TLS handshake verifies a certificate the client offers against the
//! cluster CA (`tls::Pki::server_config`), and the verified certificate's
//! subject names the user (CN) and its groups (each O), plus
//! `system:authenticated`.
//!
//! The handshake is the only place the certificate is seen, so
//! [`ClientCertAcceptor`] (axum-server's rustls acceptor plus a look at the
//! peer's certificate) maps it once per connection and attaches the
//! result to every request of that connection as a [`ClientCertificate`]
//! extension, which `auth::Authenticator::authenticate` reads.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_server::accept::Accept;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tracing::{debug, warn};

use crate::user::User;

/// Why a certificate names no user.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CertError {
    #[error("not a DER X.509 certificate: {0}")]
    Parse(String),
    #[error("the certificate's subject has no common name (CN), which names the user")]
    NoCommonName,
    #[error("the certificate's subject is not a string: {0}")]
    Subject(String),
}

/// Who a verified client certificate names, and until when: attached to
/// each request of the connection it was presented on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertificate {
    pub user: User,
    /// The certificate's validity, in Unix seconds: a connection that
    /// outlives it stops authenticating.
    pub not_before: i64,
    pub not_after: i64,
}

impl ClientCertificate {
    /// Whether the certificate is still valid at `now` (Unix seconds).
    pub fn valid_at(&self, now: i64) -> bool {
        self.not_before <= now && now <= self.not_after
    }
}

/// The user a certificate names, as upstream's `CommonNameUserConversion`:
/// the subject's CN (the last, as Go's `pkix.Name` keeps it) is the user,
/// each O a group, and `system:authenticated` is added. Only the mapping:
/// the chain was verified by the handshake.
pub fn user_from_der(der: &[u8]) -> Result<ClientCertificate, CertError> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| CertError::Parse(e.to_string()))?;
    let subject = cert.subject();
    let text = |a: &x509_parser::x509::AttributeTypeAndValue| {
        a.as_str()
            .map(str::to_string)
            .map_err(|e| CertError::Subject(e.to_string()))
    };
    let name = match subject.iter_common_name().last() {
        Some(cn) => text(cn)?,
        None => return Err(CertError::NoCommonName),
    };
    if name.is_empty() {
        return Err(CertError::NoCommonName);
    }
    let mut groups = subject
        .iter_organization()
        .map(text)
        .collect::<Result<Vec<_>, _>>()?;
    groups.push("system:authenticated".into());
    let validity = cert.validity();
    Ok(ClientCertificate {
        user: User { name, groups },
        not_before: validity.not_before.timestamp(),
        not_after: validity.not_after.timestamp(),
    })
}

/// axum-server's rustls acceptor that also reads the client certificate
/// the handshake verified and attaches who it names to the connection's
/// requests.
#[derive(Clone)]
pub struct ClientCertAcceptor {
    inner: RustlsAcceptor,
}

impl ClientCertAcceptor {
    pub fn new(config: Arc<rustls::ServerConfig>) -> Self {
        ClientCertAcceptor {
            inner: RustlsAcceptor::new(RustlsConfig::from_config(config)),
        }
    }
}

type Accepted<S> = io::Result<(TlsStream<TcpStream>, WithClientCertificate<S>)>;

impl<S> Accept<TcpStream, S> for ClientCertAcceptor
where
    S: Send + 'static,
{
    type Stream = TlsStream<TcpStream>;
    type Service = WithClientCertificate<S>;
    type Future = Pin<Box<dyn Future<Output = Accepted<S>> + Send>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        // Small writes go out at once, as Go's servers send them: an
        // HTTP/2 peer's frames (a window update, a ping's answer) would
        // otherwise wait on Nagle's algorithm for the last one's ack.
        if let Err(error) = stream.set_nodelay(true) {
            debug!(%error, "TCP_NODELAY not set on an accepted connection");
        }
        let handshake = self.inner.accept(stream, service);
        Box::pin(async move {
            let (stream, service) = handshake.await?;
            let certificate = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| match user_from_der(leaf.as_ref()) {
                    Ok(certificate) => Some(Arc::new(certificate)),
                    Err(error) => {
                        // Verified by the CA but naming nobody: the
                        // connection's requests are anonymous, as upstream.
                        warn!(%error, "a client certificate names no user");
                        None
                    }
                });
            Ok((
                stream,
                WithClientCertificate {
                    inner: service,
                    certificate,
                },
            ))
        })
    }
}

/// A connection's service that puts its [`ClientCertificate`] (if any)
/// into each request's extensions.
#[derive(Clone)]
pub struct WithClientCertificate<S> {
    inner: S,
    certificate: Option<Arc<ClientCertificate>>,
}

impl<S, B> tower::Service<http::Request<B>> for WithClientCertificate<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if let Some(certificate) = &self.certificate {
            req.extensions_mut().insert(certificate.clone());
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn cert(subject: &[(DnType, &str)]) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in subject {
            params.distinguished_name.push(t.clone(), *v);
        }
        let der = params.self_signed(&key).unwrap().der().to_vec();
        // rcgen keeps one O: the rest go in by hand.
        let orgs: Vec<String> = subject
            .iter()
            .filter(|(t, _)| *t == DnType::OrganizationName)
            .map(|(_, v)| v.to_string())
            .collect();
        match subject.iter().find(|(t, _)| *t == DnType::CommonName) {
            Some((_, cn)) if orgs.len() > 1 => crate::x509_subject::with_subject(
                &der,
                &crate::x509_subject::subject(cn, &orgs),
                crate::x509_subject::Signed::Certificate,
                &key,
            )
            .unwrap(),
            _ => der,
        }
    }

    #[test]
    fn common_name_is_the_user_and_organizations_are_groups() {
        let der = cert(&[
            (DnType::CommonName, "alice"),
            (DnType::OrganizationName, "dev"),
            (DnType::OrganizationName, "qa"),
        ]);
        let c = user_from_der(&der).unwrap();
        assert_eq!(c.user.name, "alice");
        assert_eq!(c.user.groups, ["dev", "qa", "system:authenticated"]);
        let now = jiff::Timestamp::now().as_second();
        assert!(c.valid_at(now));
        assert!(!c.valid_at(c.not_after + 1));
    }

    #[test]
    fn without_organization_only_authenticated() {
        let c = user_from_der(&cert(&[(DnType::CommonName, "bob")])).unwrap();
        assert_eq!(c.user.groups, ["system:authenticated"]);
    }

    #[test]
    fn no_common_name_is_nobody() {
        assert_eq!(
            user_from_der(&cert(&[(DnType::OrganizationName, "dev")])),
            Err(CertError::NoCommonName)
        );
        assert_eq!(
            user_from_der(&cert(&[(DnType::CommonName, "")])),
            Err(CertError::NoCommonName)
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(user_from_der(b""), Err(CertError::Parse(_))));
        assert!(matches!(
            user_from_der(b"-----BEGIN CERTIFICATE-----"),
            Err(CertError::Parse(_))
        ));
        let der = cert(&[(DnType::CommonName, "alice")]);
        for cut in [1, der.len() / 2, der.len() - 1] {
            assert!(user_from_der(&der[..cut]).is_err());
        }
    }

    /// Random bytes and bit-flipped certificates never panic the mapping.
    #[test]
    fn arbitrary_bytes_never_panic() {
        use rand::{Rng, RngCore};
        let mut rng = rand::rng();
        let der = cert(&[
            (DnType::CommonName, "alice"),
            (DnType::OrganizationName, "dev"),
        ]);
        for _ in 0..3000 {
            let mut bytes = vec![0u8; rng.random_range(0..600)];
            rng.fill_bytes(&mut bytes);
            let _ = user_from_der(&bytes);
            let mut flipped = der.clone();
            for _ in 0..rng.random_range(1..8) {
                let i = rng.random_range(0..flipped.len());
                flipped[i] ^= 1 << rng.random_range(0..8);
            }
            let _ = user_from_der(&flipped);
        }
    }
}
