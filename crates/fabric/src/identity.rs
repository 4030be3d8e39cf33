//! The gateways' identity in their member, as Submariner's operator gives
//! its gateway pods one: the ServiceAccount
//! `submariner-operator/submariner-gateway`, bound to what a gateway does
//! (Submariner's objects, the member's Services, slices, pods and nodes
//! read, its ServiceExports' status, its own Lease and key Secret) and no
//! more. The member bootstraps what needs more (the namespace, the CRDs)
//! before a gateway starts, and mints the token the gateways use.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::api::OPERATOR_NAMESPACE;

pub const ACCOUNT: &str = "submariner-gateway";
const MANAGER: &str = "submariner-operator";
/// The gateways' token lasts this long; the member mints a new one at
/// each start.
const TOKEN_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources})
}

const READ: &[&str] = &["get", "list", "watch"];

/// What a gateway does across the member.
fn cluster_role() -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": ACCOUNT},
    "rules": [
        rule(&["*"], &["submariner.io"], &["*"]),
        rule(READ, &["apiextensions.k8s.io"], &["customresourcedefinitions"]),
        rule(READ, &[""], &["namespaces", "services", "endpoints", "pods", "nodes"]),
        rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
        rule(&["get", "list", "watch", "update", "patch"], &["multicluster.x-k8s.io"],
             &["serviceexports", "serviceexports/status", "serviceimports"]),
        rule(&["create", "patch"], &["", "events.k8s.io"], &["events"]),
    ]})
}

/// What a gateway does in the operator's namespace: its key Secret, the
/// broker Secret, the election Lease.
fn role() -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
    "metadata": {"name": ACCOUNT, "namespace": OPERATOR_NAMESPACE},
    "rules": [
        rule(&["get", "list", "watch", "create", "update", "patch"], &[""], &["secrets"]),
        rule(&["*"], &["coordination.k8s.io"], &["leases"]),
    ]})
}

fn binding(kind: &str, role_kind: &str) -> Value {
    let mut b = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": {"name": ACCOUNT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": OPERATOR_NAMESPACE}]});
    if kind == "RoleBinding" {
        b["metadata"]["namespace"] = json!(OPERATOR_NAMESPACE);
    }
    b
}

/// With an admin's client of the member: the operator's namespace, the
/// member's Submariner CRDs, the gateways' account and roles; returns a
/// token of that account.
pub async fn bootstrap(member: &Client) -> Result<String, String> {
    crate::gateway::ensure_operator_namespace(member)
        .await
        .map_err(|e| format!("cannot make the {OPERATOR_NAMESPACE} namespace: {e}"))?;
    flotilla_client::crd::install(member, crate::api::member_crds())
        .await
        .map_err(|e| e.to_string())?;
    let params = PatchParams::apply(MANAGER).force();
    let failed = |what: &str| {
        let what = what.to_string();
        move |e: kube::Error| format!("cannot apply the gateways' {what}: {e}")
    };
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": ACCOUNT, "namespace": OPERATOR_NAMESPACE}});
    let accounts: Api<ServiceAccount> = Api::namespaced(member.clone(), OPERATOR_NAMESPACE);
    accounts
        .patch(ACCOUNT, &params, &Patch::Apply(&sa))
        .await
        .map_err(failed("ServiceAccount"))?;
    Api::<ClusterRole>::all(member.clone())
        .patch(ACCOUNT, &params, &Patch::Apply(&cluster_role()))
        .await
        .map_err(failed("ClusterRole"))?;
    Api::<ClusterRoleBinding>::all(member.clone())
        .patch(
            ACCOUNT,
            &params,
            &Patch::Apply(&binding("ClusterRoleBinding", "ClusterRole")),
        )
        .await
        .map_err(failed("ClusterRoleBinding"))?;
    Api::<Role>::namespaced(member.clone(), OPERATOR_NAMESPACE)
        .patch(ACCOUNT, &params, &Patch::Apply(&role()))
        .await
        .map_err(failed("Role"))?;
    Api::<RoleBinding>::namespaced(member.clone(), OPERATOR_NAMESPACE)
        .patch(
            ACCOUNT,
            &params,
            &Patch::Apply(&binding("RoleBinding", "Role")),
        )
        .await
        .map_err(failed("RoleBinding"))?;
    let request: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": TOKEN_LIFETIME.as_secs()},
    }))
    .map_err(|e| e.to_string())?;
    let issued = accounts
        .create_token_request(ACCOUNT, &PostParams::default(), &request)
        .await
        .map_err(failed("token"))?;
    Ok(issued.status.map(|s| s.token).unwrap_or_default())
}
