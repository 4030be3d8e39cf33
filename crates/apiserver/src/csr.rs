//! CertificateSigningRequests (`certificates.k8s.io/v1`): what their
//! `/approval` and `/status` subresources may change, with upstream's
//! validation, and the in-process signer of
//! `kubernetes.io/kube-apiserver-client`, as kube-controller-manager's
//! `csrsigning` controller: an approved request of that signer gets a
//! client certificate from the cluster CA in `status.certificate`; one it
//! cannot sign gets a `Failed` condition saying why. Other signers' requests
//! are left to whoever signs them.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use rcgen::{ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::error::Cause;
use crate::objects::{self, WriteScope};
use crate::registry::{self, Request};
use crate::storage::Storage;
use crate::value::str_at;

/// The signer whose certificates the API server accepts as client certificates.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// Who managedFields credit, as upstream's controller.
const MANAGER: &str = "kube-controller-manager";
/// kube-controller-manager's `--cluster-signing-duration` default.
const DEFAULT_DURATION_SECONDS: i64 = 365 * 24 * 3600;
/// The shortest `spec.expirationSeconds` upstream honours.
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// Certificates are valid from a little before they are signed, for clock skew.
const BACKDATE_SECONDS: i64 = 5 * 60;
const RESYNC: Duration = Duration::from_secs(30);

const APPROVED: &str = "Approved";
const DENIED: &str = "Denied";
const FAILED: &str = "Failed";

// ---- /approval and /status -------------------------------------------------

/// A new request, as upstream's strategy makes it: who asked is the
/// authenticated requester (whatever the client wrote), and nothing is
/// approved or issued at creation.
pub fn prepare_create(obj: &mut Value, requester: Option<&crate::user::User>) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        for field in ["username", "uid", "groups", "extra"] {
            spec.remove(field);
        }
        if let Some(user) = requester {
            spec.insert("username".into(), json!(user.name));
            spec.insert("groups".into(), json!(user.groups));
        }
    }
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
}

/// A write through `/approval` or `/status` of a CSR, after the generic
/// merge (spec and metadata are `old`'s, status is the writer's): keeps
/// what that subresource may not change, stamps condition times, and
/// answers upstream's validation errors (422 causes).
pub fn update_subresource(subresource: &str, new: &mut Value, old: &Value) -> Vec<Cause> {
    match subresource {
        // Approval changes the conditions only.
        "approval" => {
            let certificate = old.pointer("/status/certificate").cloned();
            if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
                match certificate {
                    Some(c) => status.insert("certificate".into(), c),
                    None => status.remove("certificate"),
                };
            }
        }
        // Status writers (signers) may not approve, deny, or undo either.
        "status" => {
            // The approval first (as it came first), then the writer's others.
            let mut merged: Vec<Value> = conditions(old)
                .into_iter()
                .filter(|c| is_approval(c))
                .cloned()
                .collect();
            merged.extend(
                conditions(new)
                    .into_iter()
                    .filter(|c| !is_approval(c))
                    .cloned(),
            );
            set_conditions(new, merged);
        }
        _ => return Vec::new(),
    }
    stamp_conditions(new, old);
    validate_update(subresource, new, old)
}

fn is_approval(c: &Value) -> bool {
    matches!(str_at(c, "/type"), APPROVED | DENIED)
}

fn conditions(obj: &Value) -> Vec<&Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn set_conditions(obj: &mut Value, conditions: Vec<Value>) {
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    if conditions.is_empty() {
        if let Some(status) = obj["status"].as_object_mut() {
            status.remove("conditions");
        }
    } else {
        obj["status"]["conditions"] = Value::Array(conditions);
    }
}

fn now() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

/// Upstream's defaulting (status `True`) and `populateConditionTimestamps`.
fn stamp_conditions(new: &mut Value, old: &Value) {
    let now = now();
    let old_conditions: Vec<Value> = conditions(old).into_iter().cloned().collect();
    let Some(list) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for c in list.iter_mut() {
        let Some(o) = c.as_object_mut() else { continue };
        if o.get("status")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            o.insert("status".into(), json!("True"));
        }
        if o.get("lastUpdateTime").is_none_or(Value::is_null) {
            o.insert("lastUpdateTime".into(), json!(now));
        }
        if o.get("lastTransitionTime").is_none_or(Value::is_null) {
            let (kind, status) = (
                o.get("type").cloned().unwrap_or(Value::Null),
                o.get("status").cloned().unwrap_or(Value::Null),
            );
            let kept = old_conditions
                .iter()
                .find(|oc| oc.get("type") == Some(&kind) && oc.get("status") == Some(&status))
                .and_then(|oc| oc.get("lastTransitionTime"))
                .filter(|t| !t.is_null())
                .cloned();
            o.insert(
                "lastTransitionTime".into(),
                kept.unwrap_or_else(|| json!(now)),
            );
        }
    }
}

/// Upstream's `validateConditions` and the update rules of both
/// subresources.
fn validate_update(subresource: &str, new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let (mut approved, mut denied) = (false, false);
    for (i, c) in conditions(new).into_iter().enumerate() {
        let field = |f: &str| format!("status.conditions[{i}].{f}");
        let kind = str_at(c, "/type");
        let status = str_at(c, "/status");
        if kind.is_empty() {
            causes.push(cause("FieldValueRequired", field("type"), "Required value"));
        }
        let true_only = matches!(kind, APPROVED | DENIED | FAILED);
        if status.is_empty() {
            causes.push(cause(
                "FieldValueRequired",
                field("status"),
                "Required value",
            ));
        } else if true_only && status != "True" {
            causes.push(cause(
                "FieldValueNotSupported",
                field("status"),
                &format!("Unsupported value: \"{status}\": supported values: \"True\""),
            ));
        } else if !matches!(status, "True" | "False" | "Unknown") {
            causes.push(cause(
                "FieldValueNotSupported",
                field("status"),
                &format!(
                    "Unsupported value: \"{status}\": supported values: \"False\", \"True\", \"Unknown\""
                ),
            ));
        }
        match kind {
            APPROVED => approved = true,
            DENIED => denied = true,
            _ => {}
        }
        if (kind == APPROVED && denied) || (kind == DENIED && approved) {
            causes.push(cause(
                "FieldValueInvalid",
                field("type"),
                &format!(
                    "Invalid value: \"{kind}\": Approved and Denied conditions are mutually exclusive"
                ),
            ));
        }
        if !kind.is_empty() && !seen.insert(kind.to_string()) {
            causes.push(cause(
                "FieldValueDuplicate",
                field("type"),
                &format!("Duplicate value: \"{kind}\""),
            ));
        }
    }
    for kind in [APPROVED, DENIED, FAILED] {
        let count = |o: &Value| {
            conditions(o)
                .into_iter()
                .filter(|c| str_at(c, "/type") == kind)
                .count()
        };
        if count(new) < count(old) {
            causes.push(cause(
                "FieldValueForbidden",
                "status.conditions".into(),
                &format!("Forbidden: updates may not remove a condition of type \"{kind}\""),
            ));
        }
    }
    let certificate = |o: &Value| str_at(o, "/status/certificate").to_string();
    let (old_certificate, new_certificate) = (certificate(old), certificate(new));
    if old_certificate != new_certificate {
        let field = "status.certificate".to_string();
        if !old_certificate.is_empty() {
            causes.push(cause(
                "FieldValueInvalid",
                field,
                "Invalid value: \"<certificate data>\": updates may not modify existing certificate content",
            ));
        } else if subresource != "status" {
            causes.push(cause(
                "FieldValueInvalid",
                field,
                "Invalid value: \"<certificate data>\": updates may not set certificate content",
            ));
        } else if !has_condition(new, APPROVED) || has_condition(new, FAILED) {
            causes.push(cause(
                "FieldValueForbidden",
                field,
                "Forbidden: certificate may only be set on an Approved request that has not Failed",
            ));
        } else if !is_certificate_pem(&new_certificate) {
            causes.push(cause(
                "FieldValueInvalid",
                field,
                "Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block",
            ));
        }
    }
    causes
}

fn cause(reason: &'static str, field: String, message: &str) -> Cause {
    Cause {
        reason,
        field,
        message: message.to_string(),
    }
}

fn has_condition(obj: &Value, kind: &str) -> bool {
    conditions(obj)
        .into_iter()
        .any(|c| str_at(c, "/type") == kind && str_at(c, "/status") == "True")
}

/// `status.certificate` (base64 in JSON) holds PEM CERTIFICATE blocks.
fn is_certificate_pem(base64_pem: &str) -> bool {
    let Ok(pem) = base64::engine::general_purpose::STANDARD.decode(base64_pem) else {
        return false;
    };
    let certs: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice()).collect();
    !certs.is_empty() && certs.iter().all(Result::is_ok)
}

// ---- the signer ---------------------------------------------------------------

/// Why a request of this signer gets no certificate.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("unable to parse csr: {0}")]
    Parse(String),
    #[error("invalid usage for client certificate: {0}")]
    Usage(String),
    #[error("missing required usage for client certificate: client auth")]
    MissingClientAuth,
    #[error("invalid validity period: {0}")]
    Validity(String),
    #[error("cannot sign the certificate: {0}")]
    Sign(#[from] rcgen::Error),
    #[error("cannot sign the certificate: {0}")]
    Subject(#[from] crate::x509_subject::DerError),
}

#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    #[error("the CA key is invalid: {0}")]
    Key(rcgen::Error),
    #[error("the CA certificate is invalid: {0}")]
    Certificate(String),
}

/// Issues client certificates with the cluster CA.
pub struct Signer {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's expiry (Unix seconds): no certificate outlives it.
    ca_not_after: i64,
}

impl Signer {
    pub fn new(ca_pem: &str, ca_key_pem: &str) -> Result<Signer, SignerError> {
        let key = KeyPair::from_pem(ca_key_pem).map_err(SignerError::Key)?;
        let issuer = Issuer::from_ca_cert_pem(ca_pem, key)
            .map_err(|e| SignerError::Certificate(e.to_string()))?;
        let der = rustls_pemfile::certs(&mut ca_pem.as_bytes())
            .next()
            .ok_or_else(|| SignerError::Certificate("no CERTIFICATE block".into()))?
            .map_err(|e| SignerError::Certificate(e.to_string()))?;
        let (_, ca) = x509_parser::parse_x509_certificate(der.as_ref())
            .map_err(|e| SignerError::Certificate(e.to_string()))?;
        Ok(Signer {
            issuer,
            ca_not_after: ca.validity().not_after.timestamp(),
        })
    }

    /// A client certificate (PEM) for the PEM `request` with `usages`,
    /// valid for `expiration_seconds` (a year when absent) from now,
    /// never past the CA; its subject is the request's.
    pub fn sign(
        &self,
        request: &str,
        usages: &[String],
        expiration_seconds: Option<i64>,
        now: i64,
    ) -> Result<String, SignError> {
        let parse = |e: &dyn std::fmt::Display| SignError::Parse(e.to_string());
        let (_, block) =
            x509_parser::pem::parse_x509_pem(request.as_bytes()).map_err(|e| parse(&e))?;
        if block.label != "CERTIFICATE REQUEST" {
            return Err(SignError::Parse(format!(
                "PEM block type must be CERTIFICATE REQUEST, not {}",
                block.label
            )));
        }
        // Read with x509-parser rather than rcgen's CSR parser, which
        // refuses requested extensions it does not know (basicConstraints,
        // as some tools add): the signer ignores them, as upstream's.
        use x509_parser::prelude::FromDer;
        let (_, parsed) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
                .map_err(|e| parse(&e))?;
        parsed.verify_signature().map_err(|e| {
            SignError::Parse(format!("the request's signature does not verify: {e}"))
        })?;
        let info = &parsed.certification_request_info;
        let subject = info.subject.as_raw().to_vec();
        let public_key = RequestKey {
            der: info.subject_pki.subject_public_key.data.to_vec(),
            algorithm: key_algorithm(&info.subject_pki)?,
        };
        let mut key_usages = Vec::new();
        let mut client_auth = false;
        for usage in usages {
            match usage.as_str() {
                "digital signature" => key_usages.push(KeyUsagePurpose::DigitalSignature),
                "key encipherment" => key_usages.push(KeyUsagePurpose::KeyEncipherment),
                "client auth" => client_auth = true,
                other => return Err(SignError::Usage(other.to_string())),
            }
        }
        if !client_auth {
            return Err(SignError::MissingClientAuth);
        }
        let duration = expiration_seconds
            .map(|s| s.max(MIN_EXPIRATION_SECONDS))
            .unwrap_or(DEFAULT_DURATION_SECONDS)
            .min(DEFAULT_DURATION_SECONDS);
        let not_after = now.saturating_add(duration).min(self.ca_not_after);
        let time = |t: i64| {
            time::OffsetDateTime::from_unix_timestamp(t)
                .map_err(|e| SignError::Validity(e.to_string()))
        };
        let mut params = rcgen::CertificateParams::default();
        // The subject goes in below, exactly as requested.
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.not_before = time(now - BACKDATE_SECONDS)?;
        params.not_after = time(not_after)?;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = key_usages;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let mut serial: [u8; 16] = rand::random();
        serial[0] &= 0x7f;
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
        // The request's subject as it is (every O), not rcgen's reading of it.
        let der = crate::x509_subject::with_subject(
            params.signed_by(&public_key, &self.issuer)?.der(),
            &subject,
            crate::x509_subject::Signed::Certificate,
            self.issuer.key(),
        )?;
        Ok(crate::x509_subject::pem("CERTIFICATE", &der))
    }
}

/// A request's public key, as rcgen signs for one.
struct RequestKey {
    der: Vec<u8>,
    algorithm: &'static rcgen::SignatureAlgorithm,
}

impl rcgen::PublicKeyData for RequestKey {
    fn der_bytes(&self) -> &[u8] {
        &self.der
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        self.algorithm
    }
}

/// The key type of a request (what the certificate's
/// SubjectPublicKeyInfo says): rcgen names it by a signature algorithm of
/// that key type.
fn key_algorithm(
    spki: &x509_parser::x509::SubjectPublicKeyInfo,
) -> Result<&'static rcgen::SignatureAlgorithm, SignError> {
    let oid = spki.algorithm.algorithm.to_id_string();
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .map(|o| o.to_id_string());
    match (oid.as_str(), curve.as_deref()) {
        ("1.2.840.10045.2.1", Some("1.2.840.10045.3.1.7")) => Ok(&rcgen::PKCS_ECDSA_P256_SHA256),
        ("1.2.840.10045.2.1", Some("1.3.132.0.34")) => Ok(&rcgen::PKCS_ECDSA_P384_SHA384),
        ("1.2.840.113549.1.1.1", _) => Ok(&rcgen::PKCS_RSA_SHA256),
        ("1.3.101.112", _) => Ok(&rcgen::PKCS_ED25519),
        (other, curve) => Err(SignError::Parse(format!(
            "unsupported public key algorithm {other}{} (use RSA, ECDSA P-256 or P-384, or Ed25519)",
            curve.map(|c| format!(" on curve {c}")).unwrap_or_default()
        ))),
    }
}

/// Starts the signer when the server has the CA's key.
pub fn spawn_signer(api: Arc<Storage>) {
    let (Some(ca_pem), Some(ca_key)) = (api.config.root_ca.clone(), api.config.ca_key.clone())
    else {
        return;
    };
    let signer = match Signer::new(&ca_pem, &ca_key) {
        Ok(s) => Arc::new(s),
        Err(error) => {
            warn!(%error, "the CSR signer is not running");
            return;
        }
    };
    let Some(r) = api
        .registry
        .get("certificates.k8s.io", "v1", "certificatesigningrequests")
    else {
        // Nothing to sign on a server without the kind.
        return;
    };
    let store = api.store.clone();
    // Every request once, then each change, and all again each RESYNC.
    tokio::spawn(crate::follower::each_put(
        store,
        "CSR signer",
        r.prefix(),
        RESYNC,
        move |kv| {
            let (api, signer, r) = (api.clone(), signer.clone(), r.clone());
            async move {
                if let Ok(obj) = objects::decode(&r, &kv) {
                    reconcile(&api, &signer, &obj).await;
                }
            }
        },
    ));
}

/// Whether `csr` waits for this signer: approved, not denied or failed,
/// no certificate yet.
fn awaits_signature(csr: &Value) -> bool {
    str_at(csr, "/spec/signerName") == KUBE_APISERVER_CLIENT
        && has_condition(csr, APPROVED)
        && !has_condition(csr, DENIED)
        && !has_condition(csr, FAILED)
        && str_at(csr, "/status/certificate").is_empty()
        && !objects::is_deleting(csr)
}

async fn reconcile(api: &Arc<Storage>, signer: &Signer, csr: &Value) {
    if !awaits_signature(csr) {
        return;
    }
    let name = objects::meta_str(csr, "name").to_string();
    let request = str_at(csr, "/spec/request").to_string();
    let usages = crate::value::strings_at(csr, "/spec/usages");
    let expiration = csr
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64);
    let signed = base64::engine::general_purpose::STANDARD
        .decode(&request)
        .map_err(|e| SignError::Parse(format!("spec.request is not base64: {e}")))
        .and_then(|pem| String::from_utf8(pem).map_err(|e| SignError::Parse(e.to_string())))
        .and_then(|pem| {
            signer.sign(
                &pem,
                &usages,
                expiration,
                jiff::Timestamp::now().as_second(),
            )
        });
    let Some(r) = api
        .registry
        .get("certificates.k8s.io", "v1", "certificatesigningrequests")
    else {
        return;
    };
    let mut req = Request::internal(api.clone(), r.clone(), None, Some(name.clone()));
    req.subresource = Some("status".into());
    let outcome = match &signed {
        Ok(pem) => Ok(base64::engine::general_purpose::STANDARD.encode(pem)),
        Err(error) => Err(error.to_string()),
    };
    let written = registry::update(&req, |old| {
        // Only the request that was signed, and only once.
        if !awaits_signature(old) || str_at(old, "/spec/request") != request {
            return Ok((old.clone(), Vec::new()));
        }
        let mut new = old.clone();
        match &outcome {
            Ok(certificate) => new["status"]["certificate"] = json!(certificate),
            Err(message) => {
                let mut list: Vec<Value> = conditions(old).into_iter().cloned().collect();
                list.push(json!({"type": FAILED, "status": "True",
                                 "reason": "SignerValidationFailure", "message": message,
                                 "lastUpdateTime": now()}));
                set_conditions(&mut new, list);
            }
        }
        crate::managed::track_update(&r, Some(old), &mut new, MANAGER, WriteScope::Status);
        Ok((new, Vec::new()))
    })
    .await;
    match (written, signed) {
        (Err(error), _) => {
            warn!(csr = %name, error = %error.message, "writing a CSR's outcome failed")
        }
        (Ok(_), Ok(_)) => info!(csr = %name, "signed a client certificate"),
        (Ok(_), Err(error)) => warn!(csr = %name, %error, "a CSR cannot be signed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca() -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-ca");
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn request(cn: &str, orgs: &[&str]) -> String {
        use crate::x509_subject::{Signed, pem, subject, with_subject};
        let key = KeyPair::generate().unwrap();
        let csr = rcgen::CertificateParams::default()
            .serialize_request(&key)
            .unwrap();
        let orgs: Vec<String> = orgs.iter().map(|o| o.to_string()).collect();
        let der = with_subject(csr.der(), &subject(cn, &orgs), Signed::Request, &key).unwrap();
        pem("CERTIFICATE REQUEST", &der)
    }

    fn usages(u: &[&str]) -> Vec<String> {
        u.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn signs_with_the_subject_and_a_capped_lifetime() {
        let (ca_pem, ca_key) = ca();
        let signer = Signer::new(&ca_pem, &ca_key).unwrap();
        let now = jiff::Timestamp::now().as_second();
        let pem = signer
            .sign(
                &request("alice", &["dev", "qa"]),
                &usages(&["client auth", "digital signature"]),
                Some(3600),
                now,
            )
            .unwrap();
        let der = rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let c = crate::client_cert::user_from_der(der.as_ref()).unwrap();
        assert_eq!(c.user.name, "alice");
        assert_eq!(c.user.groups, ["dev", "qa", "system:authenticated"]);
        assert_eq!(c.not_after, now + 3600);
        assert_eq!(c.not_before, now - BACKDATE_SECONDS);
        // No lifetime asked: a year, but never beyond the CA (rcgen's
        // default CA validity ends in 4096, so the year holds here).
        let pem = signer
            .sign(&request("bob", &[]), &usages(&["client auth"]), None, now)
            .unwrap();
        let der = rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let c = crate::client_cert::user_from_der(der.as_ref()).unwrap();
        assert_eq!(c.not_after, now + DEFAULT_DURATION_SECONDS);
        // Past the CA's end: capped.
        let late = signer.ca_not_after - 100;
        let pem = signer
            .sign(
                &request("carol", &[]),
                &usages(&["client auth"]),
                None,
                late,
            )
            .unwrap();
        let der = rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let c = crate::client_cert::user_from_der(der.as_ref()).unwrap();
        assert_eq!(c.not_after, signer.ca_not_after);
    }

    #[test]
    fn signs_other_key_types_and_requests_with_extensions() {
        let (ca_pem, ca_key) = ca();
        let signer = Signer::new(&ca_pem, &ca_key).unwrap();
        let now = jiff::Timestamp::now().as_second();
        for alg in [&rcgen::PKCS_ED25519, &rcgen::PKCS_ECDSA_P384_SHA384] {
            let key = KeyPair::generate_for(alg).unwrap();
            let mut params = rcgen::CertificateParams::default();
            params.distinguished_name = rcgen::DistinguishedName::new();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, "erin");
            // basicConstraints CA:FALSE, which rcgen's own CSR parser refuses.
            params.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
                &[2, 5, 29, 19],
                vec![0x30, 0x00],
            )];
            let request = params.serialize_request(&key).unwrap().pem().unwrap();
            let pem = signer
                .sign(&request, &usages(&["client auth"]), None, now)
                .unwrap();
            let der = rustls_pemfile::certs(&mut pem.as_bytes())
                .next()
                .unwrap()
                .unwrap();
            let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
            assert_eq!(cert.public_key().raw, params_spki(&key));
            assert_eq!(
                crate::client_cert::user_from_der(der.as_ref())
                    .unwrap()
                    .user
                    .name,
                "erin"
            );
        }
        // A request whose signature does not verify is refused.
        let request = request("a", &[]);
        let mut der = x509_parser::pem::parse_x509_pem(request.as_bytes())
            .unwrap()
            .1
            .contents;
        let last = der.len() - 3;
        der[last] ^= 1;
        let tampered = crate::x509_subject::pem("CERTIFICATE REQUEST", &der);
        assert!(
            signer
                .sign(&tampered, &usages(&["client auth"]), None, now)
                .is_err()
        );
    }

    fn params_spki(key: &KeyPair) -> Vec<u8> {
        use rcgen::PublicKeyData;
        key.subject_public_key_info()
    }

    #[test]
    fn refuses_what_upstream_refuses() {
        let (ca_pem, ca_key) = ca();
        let signer = Signer::new(&ca_pem, &ca_key).unwrap();
        let now = jiff::Timestamp::now().as_second();
        let e = signer
            .sign(&request("a", &[]), &usages(&["server auth"]), None, now)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid usage for client certificate: server auth"
        );
        let e = signer
            .sign(
                &request("a", &[]),
                &usages(&["digital signature"]),
                None,
                now,
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "missing required usage for client certificate: client auth"
        );
        let e = signer
            .sign("not a pem", &usages(&["client auth"]), None, now)
            .unwrap_err();
        assert!(e.to_string().starts_with("unable to parse csr"), "{e}");
    }

    fn csr(conditions: Value) -> Value {
        json!({"spec": {"signerName": KUBE_APISERVER_CLIENT},
               "status": {"conditions": conditions}})
    }

    #[test]
    fn approval_validation_is_upstreams() {
        let old = csr(json!([]));
        let mut both = csr(json!([{"type": "Approved", "status": "True"},
                                  {"type": "Denied", "status": "True"}]));
        let causes = update_subresource("approval", &mut both, &old);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "status.conditions[1].type");
        assert!(causes[0].message.contains("mutually exclusive"));

        let mut twice = csr(json!([{"type": "Approved"}, {"type": "Approved"}]));
        let causes = update_subresource("approval", &mut twice, &old);
        assert_eq!(causes[0].message, "Duplicate value: \"Approved\"");

        let mut false_approval = csr(json!([{"type": "Approved", "status": "False"}]));
        let causes = update_subresource("approval", &mut false_approval, &old);
        assert_eq!(causes[0].reason, "FieldValueNotSupported");

        let mut ok =
            csr(json!([{"type": "Approved", "status": "True", "reason": "KubectlApprove"}]));
        assert!(update_subresource("approval", &mut ok, &old).is_empty());
        assert!(
            ok.pointer("/status/conditions/0/lastTransitionTime")
                .is_some()
        );

        // Once approved, not un-approved, and a status writer cannot approve.
        let mut removed = csr(json!([]));
        let causes = update_subresource("approval", &mut removed, &ok);
        assert!(causes[0].message.contains("may not remove"));
        let mut by_status = csr(json!([{"type": "Approved", "status": "True"}]));
        update_subresource("status", &mut by_status, &old);
        assert!(conditions(&by_status).is_empty());
    }

    #[test]
    fn the_certificate_is_set_once_by_status_when_approved() {
        let approved = csr(json!([{"type": "Approved", "status": "True"}]));
        let pem = base64::engine::general_purpose::STANDARD.encode(
            rcgen::CertificateParams::default()
                .self_signed(&KeyPair::generate().unwrap())
                .unwrap()
                .pem(),
        );
        let mut signed = approved.clone();
        signed["status"]["certificate"] = json!(pem);
        assert!(update_subresource("status", &mut signed.clone(), &approved).is_empty());
        // Through /approval the certificate is ignored.
        let mut via_approval = signed.clone();
        assert!(update_subresource("approval", &mut via_approval, &approved).is_empty());
        assert_eq!(str_at(&via_approval, "/status/certificate"), "");
        // Not before approval, not garbage, not twice.
        let pending = csr(json!([]));
        let mut early = pending.clone();
        early["status"]["certificate"] = json!(pem);
        assert!(!update_subresource("status", &mut early, &pending).is_empty());
        let mut garbage = approved.clone();
        garbage["status"]["certificate"] = json!("bm90IGEgY2VydA==");
        assert!(!update_subresource("status", &mut garbage, &approved).is_empty());
        let mut again = signed.clone();
        again["status"]["certificate"] = json!("b3RoZXI=");
        assert!(!update_subresource("status", &mut again, &signed).is_empty());
    }
}
