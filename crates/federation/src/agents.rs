//! Pull-mode agents' identities. `flotilla token create --cluster NAME`
//! issues a token in the group `system:bootstrappers:flotilla:agent:NAME`;
//! [`AgentAuthorizer`] confines such a token to what the agent of NAME
//! needs, as kube-apiserver's Node authorizer confines a kubelet to its
//! node: its own Cluster object, the Works of its execution namespace and
//! its Lease, and on the network fabric's broker its own Cluster and
//! Endpoints (every cluster's readable). Everything of other clusters,
//! and everything else, is 403.

use flotilla_apiserver::authz::{Attributes, Authorizer, Decision, Verb};
use flotilla_apiserver::user::User;

use crate::api::{CLUSTER_GROUP, CLUSTER_NAMESPACE, Cluster, WORK_GROUP};

/// The group an agent token of `cluster` carries.
pub fn agent_group(cluster: &str) -> String {
    format!("{AGENT_GROUP_PREFIX}{cluster}")
}

pub const AGENT_GROUP_PREFIX: &str = "system:bootstrappers:flotilla:agent:";

/// The cluster `user` is the agent of, if it is one.
pub fn agent_of(user: &User) -> Option<&str> {
    user.groups
        .iter()
        .find_map(|g| g.strip_prefix(AGENT_GROUP_PREFIX))
}

pub struct AgentAuthorizer;

fn allowed(cluster: &str, a: &Attributes) -> bool {
    let verb = &a.verb;
    let reads = verb.reads();
    let writes = matches!(verb, Verb::Update | Verb::Patch);
    match (a.group, a.resource) {
        // Its own Cluster: register it, follow it (a list or watch
        // narrowed to its name), report its status.
        (CLUSTER_GROUP, "clusters") => {
            (reads || *verb == Verb::Create || writes) && a.name().as_deref() == Some(cluster)
        }
        // The Works of its execution namespace: follow them, report their
        // status, release their finalizers. Never create or delete them,
        // but for its reports of service exports (written by apply).
        (WORK_GROUP, "works") => {
            let report = a
                .name()
                .is_some_and(|n| n.starts_with(crate::mcs::pull::REPORT_PREFIX));
            a.namespace == Some(Cluster::execution_namespace(cluster).as_str())
                && (reads || writes || (*verb == Verb::Delete && report))
        }
        // Its Lease, renewed to say it is alive.
        ("coordination.k8s.io", "leases") => {
            a.namespace == Some(CLUSTER_NAMESPACE)
                && matches!(verb, Verb::Get | Verb::Create | Verb::Update | Verb::Patch)
                && a.name().as_deref() == Some(cluster)
        }
        // The network fabric's broker: every cluster's connection data is
        // readable (its gateways connect to all of them); only its own
        // Cluster and Endpoints are writable.
        ("submariner.io", "clusters" | "endpoints") => {
            let own = a.name().is_some_and(|n| {
                n == cluster || n.starts_with(&format!("{cluster}-submariner-cable-"))
            });
            a.namespace == Some(BROKER_NAMESPACE)
                && (reads || ((writes || matches!(verb, Verb::Create | Verb::Delete)) && own))
        }
        _ => false,
    }
}

/// The fabric's broker namespace (Submariner's).
const BROKER_NAMESPACE: &str = "submariner-k8s-broker";

impl Authorizer for AgentAuthorizer {
    fn authorize(&self, user: &User, request: &Attributes) -> Decision {
        match agent_of(user) {
            Some(cluster) if !allowed(cluster, request) => Decision::Deny(String::new()),
            // An agent's token reaches nothing beyond `allowed`, whatever
            // a later authorizer would say.
            Some(_) => Decision::Allow,
            None => Decision::NoOpinion,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_apiserver::error::ApiError;

    fn agent(cluster: &str) -> User {
        User {
            name: "system:bootstrap:abcdef".into(),
            groups: vec![
                "system:bootstrappers".into(),
                agent_group(cluster),
                "system:authenticated".into(),
            ],
        }
    }

    fn ask(
        user: &User,
        verb: &str,
        (group, resource): (&str, &str),
        namespace: Option<&str>,
        name: Option<&str>,
        body: &[u8],
    ) -> Result<(), ApiError> {
        ask_selecting(user, verb, (group, resource), namespace, name, None, body)
    }

    fn ask_selecting(
        user: &User,
        verb: &str,
        (group, resource): (&str, &str),
        namespace: Option<&str>,
        name: Option<&str>,
        field_selector: Option<&str>,
        body: &[u8],
    ) -> Result<(), ApiError> {
        let chain =
            flotilla_apiserver::authz::Chain::new(vec![std::sync::Arc::new(AgentAuthorizer)]);
        chain.check(
            user,
            &Attributes {
                verb: Verb::parse(verb),
                group,
                resource,
                subresource: None,
                namespace,
                path_name: name,
                field_selector,
                body,
            },
        )
    }

    #[test]
    fn an_agent_reaches_its_own_cluster_and_nothing_else() {
        let a = agent("member3");
        let works = (WORK_GROUP, "works");
        let own = Some("karmada-es-member3");
        for verb in ["list", "watch", "get", "update", "patch"] {
            assert!(ask(&a, verb, works, own, Some("w"), b"").is_ok(), "{verb}");
        }
        assert!(ask(&a, "create", works, own, None, b"{}").is_err());
        assert!(ask(&a, "delete", works, own, Some("w"), b"").is_err());
        // Its reports of service exports it withdraws itself, in its own
        // namespace only.
        let report = Some("mcs-export.shop.web");
        assert!(ask(&a, "delete", works, own, report, b"").is_ok());
        assert!(ask(&a, "delete", works, Some("karmada-es-member1"), report, b"").is_err());
        let other = ask(&a, "list", works, Some("karmada-es-member1"), None, b"").unwrap_err();
        assert_eq!(other.code.as_u16(), 403);
        assert!(
            ask(&a, "list", works, None, None, b"").is_err(),
            "all namespaces"
        );

        let clusters = (CLUSTER_GROUP, "clusters");
        let register = br#"{"metadata":{"name":"member3"},"spec":{"syncMode":"Pull"}}"#;
        assert!(ask(&a, "create", clusters, None, None, register).is_ok());
        let impostor = br#"{"metadata":{"name":"member1"},"spec":{"syncMode":"Pull"}}"#;
        assert!(ask(&a, "create", clusters, None, None, impostor).is_err());
        assert!(ask(&a, "patch", clusters, None, Some("member3"), b"").is_ok());
        assert!(ask(&a, "get", clusters, None, Some("member1"), b"").is_err());
        assert!(ask(&a, "list", clusters, None, None, b"").is_err());
        // Watching itself, by name, as the agent's execution does.
        for verb in ["list", "watch"] {
            let watch = |selector| ask_selecting(&a, verb, clusters, None, None, selector, b"");
            assert!(watch(Some("metadata.name=member3")).is_ok(), "{verb}");
            assert!(watch(Some("metadata.name==member3")).is_ok(), "{verb}");
            assert!(watch(Some("metadata.name=member1")).is_err(), "{verb}");
            assert!(watch(Some("metadata.name!=member3")).is_err(), "{verb}");
            assert!(watch(Some("spec.syncMode=Pull")).is_err(), "{verb}");
        }

        let leases = ("coordination.k8s.io", "leases");
        assert!(
            ask(
                &a,
                "update",
                leases,
                Some("karmada-cluster"),
                Some("member3"),
                b""
            )
            .is_ok()
        );
        assert!(
            ask(
                &a,
                "update",
                leases,
                Some("karmada-cluster"),
                Some("member1"),
                b""
            )
            .is_err()
        );
        assert!(
            ask(
                &a,
                "get",
                ("", "secrets"),
                Some("karmada-cluster"),
                Some("member3"),
                b""
            )
            .is_err()
        );

        // Anyone else: not this authorizer's business.
        let admin = User {
            name: "flotilla-admin".into(),
            groups: vec!["system:masters".into()],
        };
        assert!(
            ask(
                &admin,
                "delete",
                works,
                Some("karmada-es-member1"),
                Some("w"),
                b""
            )
            .is_ok()
        );
    }

    #[test]
    fn a_refusal_reads_as_upstreams() {
        let a = agent("member3");
        let e = ask(
            &a,
            "list",
            (WORK_GROUP, "works"),
            Some("karmada-es-member1"),
            None,
            b"",
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "works.work.karmada.io is forbidden: User \"system:bootstrap:abcdef\" cannot list resource \"works\" in API group \"work.karmada.io\" in the namespace \"karmada-es-member1\""
        );
    }
}
