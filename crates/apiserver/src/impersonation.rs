//! Impersonation (`kubectl --as`, `--as-group`, `--as-uid`): a request
//! with `Impersonate-*` headers acts as the user they name, when the
//! requester may `impersonate` that user, each group, the uid and each
//! extra value, as kube-apiserver's impersonation filter.

use http::HeaderMap;

use crate::authz::{Attributes, Verb};
use crate::error::{ApiError, ApiResult};
use crate::user::User;

pub const USER: &str = "impersonate-user";
pub const GROUP: &str = "impersonate-group";
pub const UID: &str = "impersonate-uid";
pub const EXTRA_PREFIX: &str = "impersonate-extra-";

/// Whether the request asks to impersonate anyone.
pub fn requested(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-"))
}

/// Who the request acts as: `requester`, or whom its headers name when
/// `requester` may impersonate them, as `check` decides (403 otherwise).
pub fn resolve(
    check: &dyn Fn(&User, &Attributes) -> ApiResult<()>,
    requester: User,
    headers: &HeaderMap,
) -> ApiResult<User> {
    if !requested(headers) {
        return Ok(requester);
    }
    let values = |name: &str| -> ApiResult<Vec<String>> {
        headers
            .get_all(name)
            .iter()
            .map(|v| {
                v.to_str()
                    .map(str::to_string)
                    .map_err(|_| ApiError::bad_request(format!("invalid {name} header")))
            })
            .collect()
    };
    let name = values(USER)?.into_iter().next().unwrap_or_default();
    let groups = values(GROUP)?;
    let uid = values(UID)?.into_iter().next();
    let mut extras = Vec::new();
    for key in headers.keys() {
        if let Some(extra) = key.as_str().strip_prefix(EXTRA_PREFIX) {
            let extra = percent_encoding::percent_decode_str(extra)
                .decode_utf8_lossy()
                .into_owned();
            for value in values(key.as_str())? {
                extras.push((extra.clone(), value));
            }
        }
    }
    if name.is_empty() && groups.is_empty() && uid.is_none() && extras.is_empty() {
        // Headers present but empty: nothing asked, as upstream.
        return Ok(requester);
    }
    if name.is_empty() {
        return Err(ApiError::internal(
            "requested impersonation of groups, a uid or extra values without impersonating a user",
        ));
    }
    let check = |group: &str, resource: &str, subresource, namespace, object: &str| {
        let a = Attributes {
            verb: Verb::Other("impersonate".into()),
            group,
            resource,
            subresource,
            namespace,
            path_name: Some(object),
            field_selector: None,
            body: &[],
        };
        check(&requester, &a)
    };
    let service_account = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    match service_account {
        Some((namespace, account)) => check("", "serviceaccounts", None, Some(namespace), account)?,
        None => check("", "users", None, None, &name)?,
    }
    for group in &groups {
        check("", "groups", None, None, group)?;
    }
    if let Some(uid) = &uid {
        check("authentication.k8s.io", "uids", None, None, uid)?;
    }
    for (key, value) in &extras {
        check(
            "authentication.k8s.io",
            "userextras",
            Some(key.as_str()),
            None,
            value,
        )?;
    }
    let mut impersonated = User {
        name: name.clone(),
        groups,
    };
    if let Some((namespace, _)) = service_account
        && impersonated.groups.is_empty()
    {
        impersonated.groups = vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
        ];
    }
    let everyone = if name == "system:anonymous" {
        "system:unauthenticated"
    } else {
        "system:authenticated"
    };
    if !impersonated.groups.iter().any(|g| g == everyone) {
        impersonated.groups.push(everyone.into());
    }
    tracing::debug!(requester = %requester.name, as_user = %impersonated.name, "impersonating");
    Ok(impersonated)
}
