//! The kubeadm providers: the control plane (KubeadmControlPlane) and the
//! bootstrap data of each machine (KubeadmConfig).

pub mod bootstrap;
pub mod controlplane;
