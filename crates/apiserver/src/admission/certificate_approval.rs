//! CertificateApproval, as upstream's plugin: approving or denying a
//! CertificateSigningRequest (its `/approval`) needs the `approve` verb on
//! the request's signer (`signers` in certificates.k8s.io, named after the
//! signer or its domain with `/*`), so that who may edit CSRs is not
//! thereby who may have certificates issued.

use serde_json::Value;

use super::{Request, Validating, View};
use crate::authz::{Attributes, Decision, Verb};
use crate::error::{ApiError, ApiResult};
use crate::value::str_at;

pub struct CertificateApproval;

const GROUP: &str = "certificates.k8s.io";

impl Validating for CertificateApproval {
    fn validate(&self, view: &View, request: &Request, object: &Value) -> ApiResult<()> {
        let r = request.resource;
        if r.group != GROUP
            || r.plural != "certificatesigningrequests"
            || request.subresource != Some("approval")
        {
            return Ok(());
        }
        let Some(user) = request.user else {
            return Ok(());
        };
        let signer = str_at(object, "/spec/signerName");
        let domain_wildcard = signer
            .split_once('/')
            .map(|(domain, _)| format!("{domain}/*"));
        let allowed = std::iter::once(signer.to_string())
            .chain(domain_wildcard)
            .any(|name| {
                let a = Attributes {
                    verb: Verb::Other("approve".into()),
                    group: GROUP,
                    resource: "signers",
                    subresource: None,
                    namespace: None,
                    path_name: Some(&name),
                    field_selector: None,
                    body: &[],
                };
                view.authorize(user, &a) == Decision::Allow
            });
        if allowed {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "certificatesigningrequests.certificates.k8s.io \"{}\" is forbidden: user not permitted to approve requests with signerName \"{signer}\"",
            str_at(object, "/metadata/name")
        )))
    }
}
