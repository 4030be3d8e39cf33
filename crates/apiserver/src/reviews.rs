//! The kinds that are questions, not objects: a POST is answered and
//! nothing is stored. `TokenReview` and `SelfSubjectReview`
//! (authentication.k8s.io: `kubectl auth whoami`), the access reviews of
//! authorization.k8s.io (`kubectl auth can-i`, `--list`), answered by the
//! server's own authenticator and authorizer, and a ServiceAccount's
//! `/token` (TokenRequest: `kubectl create token`).

use axum::response::Response;
use http::StatusCode;
use serde_json::{Value, json};

use crate::authz::{Attributes, Decision, Verb};
use crate::error::{ApiError, ApiResult, Cause};
use crate::handlers::{Ctx, respond_object};
use crate::objects::meta_str;
use crate::request;
use crate::tokens::{self, Claims, KubernetesClaims, Ref};
use crate::user::User;
use crate::value::str_at;

/// Who the server's own requests and unauthenticated embeddings are.
fn caller(ctx: &Ctx) -> User {
    ctx.user.clone().unwrap_or_else(|| User {
        name: "system:admin".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
    })
}

/// Answers a POST of a review kind.
pub async fn create(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let r = &ctx.resource;
    let mut review = request::parse_body(&ctx.headers, body)?;
    crate::objects::check_type(r, &mut review)?;
    let spec = review.get("spec").cloned().unwrap_or(json!({}));
    let status = match r.plural.as_str() {
        "tokenreviews" => token_review(ctx, &spec)?,
        "selfsubjectreviews" => json!({"userInfo": user_info(&caller(ctx))}),
        "selfsubjectaccessreviews" => access(ctx, &caller(ctx), &spec),
        "subjectaccessreviews" => access(ctx, &subject(&spec)?, &spec),
        "localsubjectaccessreviews" => {
            let ns = ctx.namespace.as_deref().unwrap_or_default();
            let asked = str_at(&spec, "/resourceAttributes/namespace");
            if asked != ns {
                return Err(invalid(
                    r,
                    "spec.resourceAttributes.namespace",
                    &format!("Invalid value: \"{asked}\": must match metadata.namespace"),
                ));
            }
            access(ctx, &subject(&spec)?, &spec)
        }
        "selfsubjectrulesreviews" => rules(ctx, &caller(ctx), &spec),
        other => {
            let embedded = ctx.api.embedded_reviews.read().get(other).cloned();
            match embedded {
                Some(review) if review.kind().group == r.group => {
                    review
                        .answer(&caller(ctx), ctx.namespace.as_deref(), &spec)
                        .await?
                }
                _ => return Err(ApiError::internal(format!("no review for {other}"))),
            }
        }
    };
    let mut answer = json!({"kind": r.kind, "apiVersion": r.api_version(),
                            "metadata": {"creationTimestamp": null}, "spec": spec});
    if let Some(ns) = ctx.namespace.as_deref().filter(|_| r.namespaced) {
        answer["metadata"]["namespace"] = json!(ns);
    }
    answer["status"] = status;
    respond_object(ctx, StatusCode::CREATED, &answer, &[])
}

fn invalid(r: &crate::resources::ResourceInfo, field: &str, message: &str) -> ApiError {
    ApiError::invalid(
        &r.group,
        &r.kind,
        "",
        vec![Cause {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: message.into(),
        }],
    )
}

fn user_info(user: &User) -> Value {
    json!({"username": user.name, "groups": user.groups})
}

fn token_review(ctx: &Ctx, spec: &Value) -> ApiResult<Value> {
    let token = str_at(spec, "/token");
    let audiences = crate::value::strings_at(spec, "/audiences");
    let api = &ctx.api;
    let verdict = if token.matches('.').count() == 2 {
        tokens::authenticate(&api.tokens, api.store.as_ref(), token, &audiences).map(
            |(user, claims)| {
                let mut info = user_info(&user);
                info["uid"] = json!(claims.kubernetes.serviceaccount.uid);
                info["extra"] = json!({"authentication.kubernetes.io/credential-id": [format!("JTI={}", claims.jti)]});
                let matched: Vec<&String> = if audiences.is_empty() {
                    claims.aud.iter().collect()
                } else {
                    claims.aud.iter().filter(|a| audiences.contains(a)).collect()
                };
                (info, json!(matched))
            },
        )
    } else {
        match &api.authenticator {
            Some(authenticator) => authenticator
                .authenticate_token(api.store.as_ref(), token)
                .map(|user| (user_info(&user), json!([tokens::ISSUER])))
                .map_err(|e| e.message),
            None => Err("no authenticator".to_string()),
        }
    };
    Ok(match verdict {
        Ok((user, audiences)) => {
            json!({"authenticated": true, "user": user, "audiences": audiences})
        }
        Err(error) => json!({"authenticated": false, "user": {}, "error": error}),
    })
}

/// The user a SubjectAccessReview asks about.
fn subject(spec: &Value) -> ApiResult<User> {
    let name = str_at(spec, "/user");
    let groups = crate::value::strings_at(spec, "/groups");
    if name.is_empty() && groups.is_empty() {
        return Err(ApiError::invalid(
            "authorization.k8s.io",
            "SubjectAccessReview",
            "",
            vec![Cause {
                reason: "FieldValueRequired",
                field: "spec.user".into(),
                message: "Invalid value: \"\": at least one of user or group must be specified"
                    .into(),
            }],
        ));
    }
    Ok(User {
        name: name.to_string(),
        groups,
    })
}

/// Asks the server's authorizer what the review's attributes ask.
fn access(ctx: &Ctx, user: &User, spec: &Value) -> Value {
    let api = &ctx.api;
    let (decision, chain) = if let Some(resource) = spec.get("resourceAttributes") {
        let field = |k: &str| {
            resource
                .get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let attributes = Attributes {
            verb: Verb::parse(field("verb").unwrap_or("")),
            group: field("group").unwrap_or(""),
            resource: field("resource").unwrap_or(""),
            subresource: field("subresource"),
            namespace: field("namespace"),
            path_name: field("name"),
            field_selector: None,
            body: &[],
        };
        (
            api.authorize(user, &attributes),
            api.config.authorizers.decide(user, &attributes),
        )
    } else {
        let path = str_at(spec, "/nonResourceAttributes/path");
        let verb = str_at(spec, "/nonResourceAttributes/verb");
        (
            api.authorize_path(user, verb, path),
            api.config.authorizers.decide_path(user, verb, path),
        )
    };
    match decision {
        Decision::Allow => json!({"allowed": true}),
        // Denied outright (an agent's confinement), not merely unallowed.
        Decision::Deny(reason) if matches!(chain, Decision::Deny(_)) => {
            json!({"allowed": false, "denied": true, "reason": reason})
        }
        Decision::Deny(reason) => json!({"allowed": false, "reason": reason}),
        Decision::NoOpinion => json!({"allowed": false}),
    }
}

/// The rules a user holds in the review's namespace, as RBAC resolves
/// them; an agent's confinement cannot be listed.
fn rules(ctx: &Ctx, user: &User, spec: &Value) -> Value {
    let api = &ctx.api;
    let probe = Attributes {
        verb: Verb::List,
        group: "",
        resource: "namespaces",
        subresource: None,
        namespace: None,
        path_name: None,
        field_selector: None,
        body: &[],
    };
    if matches!(
        api.config.authorizers.decide(user, &probe),
        Decision::Deny(_)
    ) {
        return json!({"resourceRules": [], "nonResourceRules": [], "incomplete": true,
                      "evaluationError": "this user's permissions are confined to its own cluster and cannot be listed"});
    }
    if api.config.authorization_mode == crate::authz::Mode::AlwaysAllow {
        return json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        });
    }
    let namespace = Some(str_at(spec, "/namespace")).filter(|n| !n.is_empty());
    let crate::rbac::index::Resolved {
        rules: held,
        missing,
    } = api.rbac.resolve(user, namespace);
    let (mut resource_rules, mut non_resource_rules) = (Vec::new(), Vec::new());
    for rule in &held {
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
        if !rule.resources.is_empty() {
            let mut r = json!({"verbs": rule.verbs, "apiGroups": rule.api_groups,
                               "resources": rule.resources});
            if !rule.resource_names.is_empty() {
                r["resourceNames"] = json!(rule.resource_names);
            }
            resource_rules.push(r);
        }
    }
    let mut status = json!({"resourceRules": resource_rules,
                            "nonResourceRules": non_resource_rules, "incomplete": false});
    if !missing.is_empty() {
        status["evaluationError"] = json!(missing.join(", "));
    }
    status
}

/// `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`: a signed,
/// expiring token bound to the ServiceAccount (and the Pod or Secret of
/// `boundObjectRef`), as `kubectl create token` asks.
pub async fn token_request(ctx: &Ctx, body: &[u8]) -> ApiResult<Response> {
    let mut request = request::parse_body(&ctx.headers, body)?;
    let kind = str_at(&request, "/kind");
    if !kind.is_empty() && kind != "TokenRequest" {
        return Err(ApiError::bad_request(format!(
            "the body of a /token request must be an authentication.k8s.io/v1 TokenRequest, not {kind}"
        )));
    }
    let ns = ctx.namespace.clone().unwrap_or_default();
    let name = ctx.name.clone().unwrap_or_default();
    let api = &ctx.api;
    let read = |plural: &str, object: &str| -> ApiResult<Option<Value>> {
        Ok(api
            .store
            .get(&format!("/core/{plural}/{ns}/{object}"))?
            .and_then(|kv| serde_json::from_slice(&kv.value).ok()))
    };
    let account = read("serviceaccounts", &name)?
        .ok_or_else(|| ApiError::not_found("", "serviceaccounts", &name))?;
    let spec = request
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .map(std::mem::take)
        .unwrap_or_default();
    let mut spec = Value::Object(spec);
    let seconds = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(tokens::DEFAULT_EXPIRATION_SECONDS);
    let too = |message: &str| {
        ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            &name,
            vec![Cause {
                reason: "FieldValueInvalid",
                field: "spec.expirationSeconds".into(),
                message: format!("Invalid value: {seconds}: {message}"),
            }],
        )
    };
    if seconds < tokens::MIN_EXPIRATION_SECONDS {
        return Err(too("may not specify a duration less than 10 minutes"));
    }
    if seconds > 1 << 32 {
        return Err(too("may not specify a duration larger than 2^32 seconds"));
    }
    let mut audiences = crate::value::strings_at(&spec, "/audiences");
    if audiences.is_empty() {
        audiences = vec![tokens::ISSUER.to_string()];
    }
    let (mut pod, mut secret) = (None, None);
    if let Some(bound) = spec.get("boundObjectRef").filter(|b| b.is_object()) {
        let (kind, object) = (str_at(bound, "/kind"), str_at(bound, "/name"));
        let plural = match kind {
            "Pod" => "pods",
            "Secret" => "secrets",
            other => {
                return Err(ApiError::bad_request(format!(
                    "cannot bind a token to a {other}: Pod and Secret are supported"
                )));
            }
        };
        let obj = read(plural, object)?.ok_or_else(|| ApiError::not_found("", plural, object))?;
        let uid = meta_str(&obj, "uid").to_string();
        let asked = str_at(bound, "/uid");
        if !asked.is_empty() && asked != uid {
            return Err(ApiError::conflict("", plural, object));
        }
        let r = Some(Ref {
            name: object.to_string(),
            uid,
        });
        if plural == "pods" {
            pod = r;
        } else {
            secret = r;
        }
    }
    let now = jiff::Timestamp::now();
    let expires = now.as_second() + seconds;
    let claims = Claims {
        aud: audiences.clone(),
        exp: expires,
        iat: now.as_second(),
        nbf: now.as_second(),
        iss: tokens::ISSUER.into(),
        jti: uuid::Uuid::new_v4().to_string(),
        sub: format!("system:serviceaccount:{ns}:{name}"),
        kubernetes: KubernetesClaims {
            namespace: ns.clone(),
            serviceaccount: Ref {
                name: name.clone(),
                uid: meta_str(&account, "uid").to_string(),
            },
            pod,
            secret,
        },
    };
    let token = api.tokens.sign(&claims);
    spec["audiences"] = json!(audiences);
    spec["expirationSeconds"] = json!(seconds);
    let expiration = jiff::Timestamp::from_second(expires)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let answer = json!({
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": crate::meta::now()},
        "spec": spec,
        "status": {"token": token, "expirationTimestamp": expiration},
    });
    // Answered as a TokenRequest whatever resource the path named.
    let mut r = (*ctx.resource).clone();
    r.group = "authentication.k8s.io".into();
    r.kind = "TokenRequest".into();
    let answering = Ctx {
        api: ctx.api.clone(),
        resource: std::sync::Arc::new(r),
        namespace: ctx.namespace.clone(),
        name: ctx.name.clone(),
        subresource: ctx.subresource.clone(),
        query: ctx.query.clone(),
        headers: ctx.headers.clone(),
        user: ctx.user.clone(),
    };
    respond_object(&answering, StatusCode::CREATED, &answer, &[])
}
