//! Gardener on the same machinery: a `core.gardener.cloud/v1beta1` Shoot
//! of the `local` provider becomes Cluster API objects (one control plane
//! machine, a MachineDeployment per worker pool) that the controllers
//! here provision as any other Cluster, so a Shoot's cluster is a
//! Flotilla member that joins the fleet. Gardener's status is reported
//! back (last operation, health conditions, hibernation), its columns
//! and admission are Gardener's, and `shoots/adminkubeconfig` issues the
//! kubeconfig its users fetch.

pub mod admission;
pub mod api;
pub mod hibernation;
pub mod kubeconfig;
pub mod plan;
pub mod project;
pub mod shoot;
pub mod table;

use std::sync::Arc;

use flotilla_apiserver::storage::Storage;

/// Serves what Gardener's API server adds to its kinds: the Shoot table,
/// deletion only when confirmed, and `shoots/adminkubeconfig` and
/// `shoots/viewerkubeconfig` (signed with the shoot's CA, read through
/// `client`).
pub fn extend(api: &Storage, client: kube::Client) {
    api.extensions
        .add_table(api::CORE_GROUP, "shoots", Arc::new(table::Shoots));
    for resource in ["shoots", "projects"] {
        api.extensions.add_delete_admission(
            api::CORE_GROUP,
            resource,
            Arc::new(admission::DeletionConfirmation { resource }),
        );
    }
    for access in [kubeconfig::Access::Admin, kubeconfig::Access::Viewer] {
        api.add_subresource(
            api::CORE_GROUP,
            "shoots",
            access.subresource(),
            Arc::new(kubeconfig::ShootKubeconfig {
                client: client.clone(),
                access,
            }),
        );
    }
}
