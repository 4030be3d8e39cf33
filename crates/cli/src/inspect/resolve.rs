//! Kinds as kubectl accepts them (`deploy`, `deployment`, `deployments`,
//! `Deployment`, `deployments.apps`), resolved through a server's
//! discovery.

use anyhow::bail;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;
use kube::core::ApiResource;

/// A served resource: how to reach it and whether it is namespaced.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub ar: ApiResource,
    pub namespaced: bool,
}

fn matches(
    input: &str,
    group: &str,
    r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource,
) -> bool {
    let input = input.to_lowercase();
    let (name, in_group) = match input.split_once('.') {
        Some((n, g)) => (n.to_string(), Some(g.to_string())),
        None => (input.clone(), None),
    };
    if in_group.is_some_and(|g| g != group && !group.starts_with(&format!("{g}."))) {
        return false;
    }
    r.name == name
        || r.singular_name == name
        || r.kind.to_lowercase() == name
        || r.short_names.iter().flatten().any(|s| *s == name)
}

/// The resource `input` names on the server, preferring the core group
/// and then the groups' preferred versions, as kubectl does.
pub async fn resource(client: &Client, input: &str) -> anyhow::Result<Resolved> {
    let mut lists: Vec<(String, APIResourceList)> = Vec::new();
    let core = client.list_core_api_resources("v1").await?;
    lists.push((String::new(), core));
    for group in client.list_api_groups().await?.groups {
        let Some(version) = group.preferred_version.as_ref().or(group.versions.first()) else {
            continue;
        };
        if let Ok(list) = client
            .list_api_group_resources(&version.group_version)
            .await
        {
            lists.push((group.name.clone(), list));
        }
    }
    for (group, list) in &lists {
        for r in &list.resources {
            if r.name.contains('/') || !matches(input, group, r) {
                continue;
            }
            let (g, v) = match list.group_version.split_once('/') {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (String::new(), list.group_version.clone()),
            };
            let ar = ApiResource {
                group: g,
                version: v,
                api_version: list.group_version.clone(),
                kind: r.kind.clone(),
                plural: r.name.clone(),
            };
            return Ok(Resolved {
                ar,
                namespaced: r.namespaced,
            });
        }
    }
    bail!("the server doesn't have a resource type \"{input}\" (see `kubectl api-resources`)")
}
