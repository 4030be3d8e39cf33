//! Authentication: a client certificate the TLS handshake verified
//! against the cluster CA (`client_cert.rs`: CN the user, each O a group),
//! else a bearer token, recognised by a chain of [`TokenAuthenticator`]s.
//! The certificate is asked first, as kube-apiserver's authenticator
//! union asks x509 before tokens.
//!
//! Four kinds of token are accepted:
//! - the admin token, created on first start and kept in the data dir
//!   (user `flotilla-admin`, group `system:masters`);
//! - static tokens from `--token-auth-file` (`token_file.rs`);
//! - ServiceAccount tokens (`tokens.rs`, issued by TokenRequest), as
//!   `system:serviceaccount:<ns>:<name>`;
//! - bootstrap tokens in upstream's format (`<id>.<secret>`, Secrets of type
//!   `bootstrap.kubernetes.io/token` named `bootstrap-token-<id>` in
//!   `kube-system`), which the CLI issues and revokes through the API. They
//!   authenticate as `system:bootstrap:<id>` with `system:bootstrappers` and
//!   the Secret's `auth-extra-groups`.
//!
//! Token values are never logged; comparisons are constant-time.

use base64::Engine;
use flotilla_store::Store;
use http::{HeaderMap, StatusCode, header};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::client_cert::ClientCertificate;
use crate::error::ApiError;
use crate::tokens::Signer;
use crate::user::{TokenAuthenticator, User};
use crate::value::str_at;

pub const BOOTSTRAP_TOKEN_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const BOOTSTRAP_TOKEN_PREFIX: &str = "bootstrap-token-";

/// The admin token in the data dir (`flotilla-admin`, `system:masters`).
pub struct AdminToken {
    digest: [u8; 32],
}

impl AdminToken {
    pub fn new(token: &str) -> Self {
        AdminToken {
            digest: digest(token),
        }
    }
}

impl TokenAuthenticator for AdminToken {
    fn authenticate(&self, _: &dyn Store, token: &str) -> Option<User> {
        bool::from(digest(token).ct_eq(&self.digest)).then(|| User {
            name: "flotilla-admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        })
    }
}

/// Bootstrap tokens: `<id>.<secret>` against their Secret in kube-system.
pub struct BootstrapTokens;

impl TokenAuthenticator for BootstrapTokens {
    fn authenticate(&self, store: &dyn Store, token: &str) -> Option<User> {
        bootstrap_user(store, token)
    }
}

/// ServiceAccount tokens (JWTs, `tokens.rs`).
///
/// A token verified once is remembered (by its digest) with the store
/// revisions of the objects it is bound to; a later request with it
/// checks only that those objects are still at those revisions, instead of
/// verifying the signature and parsing them again. Every request still
/// reads the store, so a deleted or recreated ServiceAccount ends its
/// tokens at once (kube-apiserver's token cache would accept them for
/// another 10 s). A member serving the control plane's requests spent an
/// eighth of its CPU verifying the same token.
pub struct ServiceAccountTokens {
    signer: Arc<Signer>,
    verified: Mutex<HashMap<[u8; 32], Verified>>,
}

struct Verified {
    user: User,
    expires: i64,
    bound: Vec<crate::tokens::Bound>,
}

/// Tokens remembered at most; past it the expired go, then all.
const VERIFIED_TOKENS: usize = 4096;

impl ServiceAccountTokens {
    pub fn new(signer: Arc<Signer>) -> Self {
        ServiceAccountTokens {
            signer,
            verified: Mutex::default(),
        }
    }

    fn remembered(&self, store: &dyn Store, digest: &[u8; 32], now: i64) -> Option<User> {
        let (user, bound) = {
            let verified = self.verified.lock();
            let v = verified.get(digest)?;
            (now < v.expires).then(|| (v.user.clone(), v.bound.clone()))?
        };
        let unchanged = bound.iter().all(|(key, revision)| {
            store
                .get(key)
                .ok()
                .flatten()
                .is_some_and(|kv| kv.mod_revision == *revision)
        });
        if !unchanged {
            // Verified again from scratch: the object may only have been
            // updated, not replaced.
            self.verified.lock().remove(digest);
            return None;
        }
        Some(user)
    }

    fn remember(&self, digest: [u8; 32], verified: Verified, now: i64) {
        let mut all = self.verified.lock();
        if all.len() >= VERIFIED_TOKENS {
            all.retain(|_, v| now < v.expires);
            if all.len() >= VERIFIED_TOKENS {
                all.clear();
            }
        }
        all.insert(digest, verified);
    }
}

impl TokenAuthenticator for ServiceAccountTokens {
    fn authenticate(&self, store: &dyn Store, token: &str) -> Option<User> {
        if token.matches('.').count() != 2 {
            return None;
        }
        let now = jiff::Timestamp::now().as_second();
        let digest = digest(token);
        if let Some(user) = self.remembered(store, &digest, now) {
            return Some(user);
        }
        let (user, claims, bound) =
            crate::tokens::authenticate_bound(&self.signer, store, token, &[]).ok()?;
        let verified = Verified {
            user: user.clone(),
            expires: claims.exp,
            bound,
        };
        self.remember(digest, verified, now);
        Some(user)
    }
}

/// Asks each [`TokenAuthenticator`] in turn; the first that knows the
/// token names the user, and a token none knows is 401.
pub struct Authenticator {
    chain: Vec<Box<dyn TokenAuthenticator>>,
}

impl Authenticator {
    /// The server's authenticators: the admin token, the components'
    /// tokens, the token file's tokens (if any), ServiceAccount tokens,
    /// bootstrap tokens.
    pub fn new(
        admin_token: &str,
        components: &[(String, User)],
        static_tokens: Option<Arc<crate::token_file::StaticTokens>>,
        service_account_tokens: Arc<Signer>,
    ) -> Self {
        let mut chain: Vec<Box<dyn TokenAuthenticator>> = vec![
            Box::new(AdminToken::new(admin_token)),
            // The components' tokens are static tokens made in process.
            Box::new(crate::token_file::StaticTokens::from_identities(components)),
        ];
        if let Some(tokens) = static_tokens {
            chain.push(Box::new(tokens));
        }
        chain.push(Box::new(ServiceAccountTokens::new(service_account_tokens)));
        chain.push(Box::new(BootstrapTokens));
        Authenticator { chain }
    }

    /// The caller's identity: `None` when the request carries no
    /// credentials at all (anonymous, which authorization then confines),
    /// 401 as upstream answers it when it carries credentials none accepts.
    /// `extensions` are the request's: a [`ClientCertificate`] there is
    /// the one its connection's TLS handshake verified
    /// (`client_cert::ClientCertAcceptor`); it names the user unless it
    /// has expired since, and then a bearer token is asked.
    pub fn authenticate(
        &self,
        store: &dyn Store,
        headers: &HeaderMap,
        extensions: &http::Extensions,
    ) -> Result<Option<User>, ApiError> {
        let mut presented = false;
        if let Some(certificate) = extensions.get::<Arc<ClientCertificate>>() {
            if certificate.valid_at(jiff::Timestamp::now().as_second()) {
                return Ok(Some(certificate.user.clone()));
            }
            // Expired while its connection stayed open: a credential none
            // accepts, unless a token names someone.
            presented = true;
        }
        let token = headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .inspect(|_| presented = true)
            .filter_map(|v| v.to_str().ok())
            .find_map(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then(|| token.trim())
                    .filter(|t| !t.is_empty())
            });
        // Browsers cannot set headers on a WebSocket: the token comes as
        // a subprotocol, as kube-apiserver's WebSocket authenticator reads it.
        let from_protocol = match token {
            Some(_) => None,
            None => websocket_bearer(headers, &mut presented),
        };
        match token.or(from_protocol.as_deref()) {
            Some(token) => self.authenticate_token(store, token).map(Some),
            None if presented => Err(unauthorized()),
            None => Ok(None),
        }
    }

    /// Who a bearer token names (also `TokenReview`'s answer), or 401.
    pub fn authenticate_token(&self, store: &dyn Store, token: &str) -> Result<User, ApiError> {
        self.chain
            .iter()
            .find_map(|a| a.authenticate(store, token))
            .ok_or_else(unauthorized)
    }
}

/// The subprotocol that carries a WebSocket's bearer token:
/// `base64url.bearer.authorization.k8s.io.` and the token, base64url
/// without padding.
pub const WEBSOCKET_BEARER_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";

/// The bearer token of a WebSocket's `Sec-WebSocket-Protocol`, if one is
/// offered; one that does not decode counts as presented and refused.
fn websocket_bearer(headers: &HeaderMap, presented: &mut bool) -> Option<String> {
    use base64::Engine;
    let encoded = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix(WEBSOCKET_BEARER_PREFIX))?;
    *presented = true;
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded.trim_end_matches('='))
        .ok()?;
    String::from_utf8(decoded)
        .ok()
        .filter(|t| !t.trim().is_empty())
        .map(|t| t.trim().to_string())
}

fn unauthorized() -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Validates `<id>.<secret>` against its Secret in kube-system.
fn bootstrap_user(store: &dyn Store, token: &str) -> Option<User> {
    let (id, secret) = token.split_once('.')?;
    if !is_token_part(id, 6) || !is_token_part(secret, 16) {
        return None;
    }
    let key = format!("/core/secrets/kube-system/{BOOTSTRAP_TOKEN_PREFIX}{id}");
    let kv = match store.get(&key) {
        Ok(kv) => kv?,
        Err(error) => {
            tracing::warn!(%error, "reading a bootstrap token failed");
            return None;
        }
    };
    let obj: Value = serde_json::from_slice(&kv.value).ok()?;
    if str_at(&obj, "/type") != BOOTSTRAP_TOKEN_TYPE
        || obj.pointer("/metadata/deletionTimestamp").is_some()
    {
        return None;
    }
    let data = |k: &str| -> String {
        obj.pointer(&format!("/data/{k}"))
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or_default()
    };
    let matches = data("token-id") == id
        && bool::from(data("token-secret").as_bytes().ct_eq(secret.as_bytes()));
    if !matches || data("usage-bootstrap-authentication") != "true" {
        return None;
    }
    let expiration = data("expiration");
    if !expiration.is_empty() {
        let expires: jiff::Timestamp = expiration.parse().ok()?;
        if expires <= jiff::Timestamp::now() {
            return None;
        }
    }
    let mut groups = vec!["system:bootstrappers".to_string()];
    groups.extend(
        data("auth-extra-groups")
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(String::from),
    );
    groups.push("system:authenticated".into());
    Some(User {
        name: format!("system:bootstrap:{id}"),
        groups,
    })
}

fn is_token_part(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// A new identity for one of the embedding process's components: its
/// token (for [`Config::component_identities`](crate::Config)) and user.
pub fn component_identity(user: &str) -> (String, User) {
    (
        random_token_part(48),
        User {
            name: user.to_string(),
            groups: vec!["system:authenticated".into()],
        },
    )
}

/// A fresh random token part of `len` characters from `[a-z0-9]`.
pub fn random_token_part(len: usize) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Reads the admin token kept in `path`, creating it on first start.
pub fn load_or_create_admin_token(path: &std::path::Path) -> Result<String, crate::tls::TlsError> {
    match std::fs::read_to_string(path) {
        Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
        _ => {
            let token = random_token_part(48);
            crate::tls::write_private(path, &format!("{token}\n"))?;
            Ok(token)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn authenticator() -> Authenticator {
        let tokens = crate::token_file::StaticTokens::parse(
            "s3cr3t,carol,1003,\"ops,dev\"\n",
            std::path::Path::new("tokens.csv"),
        )
        .unwrap();
        Authenticator::new(
            "admin-token",
            &[],
            Some(Arc::new(tokens)),
            Arc::new(Signer::new(b"key")),
        )
    }

    fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store = flotilla_store::SqliteStore::open(dir.path(), Default::default()).unwrap();
        (dir, store)
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        h
    }

    fn with_certificate(name: &str, not_after: i64) -> http::Extensions {
        let mut e = http::Extensions::new();
        e.insert(Arc::new(ClientCertificate {
            user: User {
                name: name.into(),
                groups: vec!["dev".into(), "system:authenticated".into()],
            },
            not_before: 0,
            not_after,
        }));
        e
    }

    #[test]
    fn a_websocket_may_carry_its_token_as_a_subprotocol() {
        use base64::Engine;
        let (_dir, store) = store();
        let a = authenticator();
        let none = http::Extensions::new();
        let offer = |protocols: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::SEC_WEBSOCKET_PROTOCOL,
                HeaderValue::from_str(protocols).unwrap(),
            );
            h
        };
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("s3cr3t");
        let carol = a
            .authenticate(
                store.as_ref(),
                &offer(&format!(
                    "v5.channel.k8s.io, {WEBSOCKET_BEARER_PREFIX}{encoded}"
                )),
                &none,
            )
            .unwrap()
            .unwrap();
        assert_eq!(carol.name, "carol");
        // Offered but wrong or not base64url: refused, never anonymous.
        for bad in ["d3Jvbmc", "%%%"] {
            let e = a
                .authenticate(
                    store.as_ref(),
                    &offer(&format!("{WEBSOCKET_BEARER_PREFIX}{bad}")),
                    &none,
                )
                .unwrap_err();
            assert_eq!(e.code, StatusCode::UNAUTHORIZED);
        }
        // Only channel protocols: anonymous, as before.
        assert_eq!(
            a.authenticate(store.as_ref(), &offer("v5.channel.k8s.io"), &none)
                .unwrap(),
            None
        );
    }

    #[test]
    fn certificates_then_tokens_as_upstreams_union() {
        let (_dir, store) = store();
        let a = authenticator();
        let none = http::Extensions::new();
        let later = jiff::Timestamp::now().as_second() + 3600;
        let earlier = jiff::Timestamp::now().as_second() - 1;
        // Nothing presented: anonymous, decided by the caller.
        assert_eq!(
            a.authenticate(store.as_ref(), &HeaderMap::new(), &none)
                .unwrap(),
            None
        );
        // A static token.
        let carol = a
            .authenticate(store.as_ref(), &bearer("s3cr3t"), &none)
            .unwrap()
            .unwrap();
        assert_eq!((carol.name.as_str(), carol.groups.len()), ("carol", 3));
        // A certificate names its user, before any token (x509 is asked
        // first upstream, and a token beside it is not looked at).
        let alice = with_certificate("alice", later);
        for headers in [HeaderMap::new(), bearer("admin-token"), bearer("wrong")] {
            let user = a
                .authenticate(store.as_ref(), &headers, &alice)
                .unwrap()
                .unwrap();
            assert_eq!(user.name, "alice");
        }
        // Expired since its handshake: 401, unless a token names someone.
        let expired = with_certificate("alice", earlier);
        let e = a
            .authenticate(store.as_ref(), &HeaderMap::new(), &expired)
            .unwrap_err();
        assert_eq!(e.code, StatusCode::UNAUTHORIZED);
        let admin = a
            .authenticate(store.as_ref(), &bearer("admin-token"), &expired)
            .unwrap()
            .unwrap();
        assert_eq!(admin.name, "flotilla-admin");
        // A token none knows, or an Authorization that is not a bearer token.
        assert!(
            a.authenticate(store.as_ref(), &bearer("s3cr3"), &none)
                .is_err()
        );
        let mut basic = HeaderMap::new();
        basic.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic YTpi"),
        );
        assert!(a.authenticate(store.as_ref(), &basic, &none).is_err());
    }

    /// Arbitrary bytes as Authorization headers: 401 or a user, never a
    /// panic, never anonymous.
    #[test]
    fn arbitrary_authorization_headers_never_panic() {
        use rand::Rng;
        let (_dir, store) = store();
        let a = authenticator();
        let none = http::Extensions::new();
        let mut rng = rand::rng();
        let prefixes: [&[u8]; 4] = [b"", b"Bearer ", b"bearer ", b"Bearer a.b."];
        let mut tried = 0;
        for _ in 0..5000 {
            let mut value = prefixes[rng.random_range(0..prefixes.len())].to_vec();
            // Visible and high bytes mostly (what a header may carry),
            // now and then any byte at all.
            let tail: Vec<u8> = (0..rng.random_range(0..80))
                .map(|_| {
                    if rng.random_ratio(1, 50) {
                        rng.random()
                    } else {
                        rng.random_range(0x20..=0xff)
                    }
                })
                .collect();
            value.extend(tail);
            let Ok(value) = HeaderValue::from_bytes(&value) else {
                continue;
            };
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value);
            tried += 1;
            match a.authenticate(store.as_ref(), &headers, &none) {
                Ok(Some(_)) => {}
                Ok(None) => panic!("credentials presented but taken for none"),
                Err(e) => assert_eq!(e.code, StatusCode::UNAUTHORIZED),
            }
        }
        assert!(tried > 1000);
    }

    /// A ServiceAccount token is remembered after its first use, and what
    /// is remembered follows the ServiceAccount: an update of it keeps the
    /// token working, a delete (or a new one of the same name) ends it.
    #[tokio::test]
    async fn remembered_service_account_tokens_follow_their_account() {
        let (_dir, store) = store();
        let signer = Arc::new(Signer::new(b"key"));
        let a = authenticator();
        let none = http::Extensions::new();
        let key = "/core/serviceaccounts/default/robot";
        let account = |uid: &str, label: &str| {
            bytes::Bytes::from(
                serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "robot", "namespace": "default", "uid": uid,
                                 "labels": {"l": label}}})
                .to_string(),
            )
        };
        let created = store.create(key, account("u", "a")).await.unwrap();
        let now = jiff::Timestamp::now().as_second();
        let token = signer.sign(&crate::tokens::tests::claims(now + 600));
        let who = |a: &Authenticator| {
            a.authenticate(store.as_ref(), &bearer(&token), &none)
                .map(|u| u.map(|u| u.name))
        };
        let robot = Some("system:serviceaccount:default:robot".to_string());
        assert_eq!(who(&a).unwrap(), robot);
        assert_eq!(who(&a).unwrap(), robot, "remembered");
        store
            .update(key, account("u", "b"), created.mod_revision)
            .await
            .unwrap();
        assert_eq!(who(&a).unwrap(), robot, "verified again after an update");
        store
            .delete(key, flotilla_store::DeletePrecondition::default())
            .await
            .unwrap();
        store.create(key, account("u2", "b")).await.unwrap();
        assert_eq!(
            who(&a).unwrap_err().code,
            StatusCode::UNAUTHORIZED,
            "a recreated account does not take the old token"
        );
    }

    #[test]
    fn token_parts_are_checked_for_shape() {
        assert!(is_token_part("abc123", 6));
        assert!(!is_token_part("ABC123", 6));
        assert!(!is_token_part("abc12", 6));
        let part = random_token_part(16);
        assert!(is_token_part(&part, 16));
    }
}
