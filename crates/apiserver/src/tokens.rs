//! ServiceAccount tokens (`TokenRequest`, `kubectl create token`): JWTs
//! bound to their ServiceAccount (and optionally a Pod or Secret) by uid,
//! with an audience and an expiry, as upstream's bound tokens.
//!
//! They are signed with HMAC-SHA256 under a key derived from the cluster
//! CA's private key (`tls::Pki::token_key`), which every replica already
//! shares; only Flotilla's servers verify them (the authenticator and
//! `TokenReview`). Upstream signs with an RSA key and publishes it for
//! OIDC discovery; that is not served here.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::hmac;
use serde::{Deserialize, Serialize};

use crate::user::User;
use flotilla_store::Store;

/// The issuer and default audience, as a cluster named `cluster.local`.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Upstream's floor for `expirationSeconds`.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// A token's claims, named as upstream's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub nbf: i64,
    pub iss: String,
    pub jti: String,
    pub sub: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KubernetesClaims {
    pub namespace: String,
    pub serviceaccount: Ref,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Ref>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ref {
    pub name: String,
    pub uid: String,
}

/// Signs and verifies tokens with one key.
pub struct Signer {
    key: hmac::Key,
    kid: String,
}

impl Signer {
    pub fn new(secret: &[u8]) -> Self {
        use sha2::Digest;
        let kid = sha2::Sha256::digest(secret)
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        Signer {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            kid,
        }
    }

    pub fn sign(&self, claims: &Claims) -> String {
        let header = serde_json::json!({"alg": "HS256", "kid": self.kid, "typ": "JWT"});
        let signing_input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(serde_json::to_vec(claims).unwrap_or_default())
        );
        let tag = hmac::sign(&self.key, signing_input.as_bytes());
        format!("{signing_input}.{}", B64.encode(tag.as_ref()))
    }

    /// The claims of a token this signer made that is valid now, or why not.
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, &'static str> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not a JWT");
        };
        let signature = B64.decode(signature).map_err(|_| "invalid signature")?;
        let signed = &token[..header.len() + 1 + payload.len()];
        hmac::verify(&self.key, signed.as_bytes(), &signature).map_err(|_| "invalid signature")?;
        let claims: Claims = B64
            .decode(payload)
            .ok()
            .and_then(|p| serde_json::from_slice(&p).ok())
            .ok_or("invalid claims")?;
        if claims.iss != ISSUER {
            return Err("invalid issuer");
        }
        if now >= claims.exp {
            return Err("token has expired");
        }
        if now < claims.nbf - 60 {
            return Err("token is not valid yet");
        }
        Ok(claims)
    }
}

/// The ServiceAccount a valid token names, checked against the store: the
/// ServiceAccount (and the Pod or Secret it is bound to) must still exist
/// with the uid it had when the token was made.
pub fn authenticate(
    signer: &Signer,
    store: &dyn Store,
    token: &str,
    audiences: &[String],
) -> Result<(User, Claims), String> {
    authenticate_bound(signer, store, token, audiences).map(|(user, claims, _)| (user, claims))
}

/// A store key and the revision at which it held an object a token is
/// bound to, alive.
pub type Bound = (String, flotilla_store::Revision);

/// As [`authenticate`], also naming the objects the token was found bound
/// to and the revisions they were read at: while each is still at that
/// revision, the token is still bound to live objects.
pub fn authenticate_bound(
    signer: &Signer,
    store: &dyn Store,
    token: &str,
    audiences: &[String],
) -> Result<(User, Claims, Vec<Bound>), String> {
    let claims = signer
        .verify(token, jiff::Timestamp::now().as_second())
        .map_err(String::from)?;
    let wanted: &[String] = if audiences.is_empty() {
        &[ISSUER.to_string()]
    } else {
        audiences
    };
    if !claims.aud.iter().any(|a| wanted.contains(a)) {
        return Err("token audiences do not match".into());
    }
    let k = &claims.kubernetes;
    let mut bound = Vec::with_capacity(2);
    let mut alive = |plural: &str, r: &Ref| {
        let key = format!("/core/{plural}/{}/{}", k.namespace, r.name);
        let Some(kv) = store.get(&key).ok().flatten() else {
            return false;
        };
        // Only the uid and deletion matter; the rest is skipped unparsed.
        let live = serde_json::from_slice::<Liveness>(&kv.value)
            .is_ok_and(|o| o.metadata.uid == r.uid && o.metadata.deletion_timestamp.is_none());
        if live {
            bound.push((key, kv.mod_revision));
        }
        live
    };
    if !alive("serviceaccounts", &k.serviceaccount) {
        return Err(format!(
            "service account {}/{} has been deleted or recreated",
            k.namespace, k.serviceaccount.name
        ));
    }
    for (plural, r) in [("pods", &k.pod), ("secrets", &k.secret)] {
        if let Some(r) = r
            && !alive(plural, r)
        {
            return Err(format!(
                "the {} the token is bound to has been deleted",
                &plural[..plural.len() - 1]
            ));
        }
    }
    let user = service_account_user(&k.namespace, &k.serviceaccount.name);
    Ok((user, claims, bound))
}

/// What decides whether an object a token is bound to is still alive.
#[derive(Deserialize)]
struct Liveness {
    metadata: LivenessMeta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LivenessMeta {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    deletion_timestamp: Option<serde::de::IgnoredAny>,
}

/// How upstream names a ServiceAccount as a user.
pub fn service_account_user(namespace: &str, name: &str) -> User {
    User {
        name: format!("system:serviceaccount:{namespace}:{name}"),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".into(),
        ],
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Claims of `default/robot` (uid `u`) expiring at `exp`.
    pub(crate) fn claims(exp: i64) -> Claims {
        Claims {
            aud: vec![ISSUER.into()],
            exp,
            iat: 0,
            nbf: 0,
            iss: ISSUER.into(),
            jti: "j".into(),
            sub: "system:serviceaccount:default:robot".into(),
            kubernetes: KubernetesClaims {
                namespace: "default".into(),
                serviceaccount: Ref {
                    name: "robot".into(),
                    uid: "u".into(),
                },
                pod: None,
                secret: None,
            },
        }
    }

    #[test]
    fn a_token_verifies_until_it_expires_and_only_under_its_key() {
        let signer = Signer::new(b"k1");
        let token = signer.sign(&claims(100));
        assert_eq!(token.matches('.').count(), 2);
        assert_eq!(
            signer.verify(&token, 50).unwrap().sub,
            "system:serviceaccount:default:robot"
        );
        assert_eq!(signer.verify(&token, 100).unwrap_err(), "token has expired");
        assert_eq!(
            Signer::new(b"k2").verify(&token, 50).unwrap_err(),
            "invalid signature"
        );
        // A changed payload breaks the signature.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = B64.encode(serde_json::to_vec(&claims(1_000_000)).unwrap());
        parts[1] = &forged;
        assert_eq!(
            signer.verify(&parts.join("."), 50).unwrap_err(),
            "invalid signature"
        );
        assert_eq!(signer.verify("a.b", 50).unwrap_err(), "not a JWT");
    }
}
