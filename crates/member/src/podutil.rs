//! What the controllers need to know about pods and templates, as
//! upstream's pod utilities define it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{self as corev1, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use crate::pod::{Container, Pod, PodCondition, PodSpec};

pub fn now() -> Time {
    Time(Timestamp::now())
}

/// Time since `t`, zero if `t` is in the future.
pub fn since(t: &Time) -> Duration {
    let elapsed = Timestamp::now().as_millisecond() - t.0.as_millisecond();
    Duration::from_millis(u64::try_from(elapsed).unwrap_or(0))
}

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Neither finished nor being deleted: counts toward a controller's replicas.
pub fn is_active(pod: &Pod) -> bool {
    !matches!(phase(pod), "Succeeded" | "Failed") && pod.metadata.deletion_timestamp.is_none()
}

pub fn condition<'a>(pod: &'a Pod, kind: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

/// Ready for at least `min_ready` (upstream's "available").
pub fn is_available(pod: &Pod, min_ready: Duration) -> bool {
    match condition(pod, "Ready") {
        Some(c) if c.status == "True" => {
            min_ready.is_zero()
                || c.last_transition_time
                    .as_ref()
                    .is_some_and(|t| since(t) >= min_ready)
        }
        _ => false,
    }
}

/// When a ready pod becomes available, if it is not yet.
pub fn available_in(pod: &Pod, min_ready: Duration) -> Option<Duration> {
    let c = condition(pod, "Ready").filter(|c| c.status == "True")?;
    let t = c.last_transition_time.as_ref()?;
    min_ready.checked_sub(since(t)).filter(|d| !d.is_zero())
}

/// What a pod asks of a node: CPU millicores and memory bytes (requests,
/// else limits, as upstream's defaulting), the larger of the init
/// containers' and the sum of the app containers'.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    pub cpu_millis: i64,
    pub memory: i64,
}

pub fn requests(spec: &PodSpec) -> Requests {
    let one = |c: &Container| {
        let r = &c.resources;
        Requests {
            cpu_millis: r.cpu_request.or(r.cpu_limit).unwrap_or(0),
            memory: r.memory_request.or(r.memory_limit).unwrap_or(0),
        }
    };
    let mut sum = Requests::default();
    for c in &spec.containers {
        let r = one(c);
        sum.cpu_millis += r.cpu_millis;
        sum.memory += r.memory;
    }
    for c in spec.init_containers.iter().flatten() {
        let r = one(c);
        sum.cpu_millis = sum.cpu_millis.max(r.cpu_millis);
        sum.memory = sum.memory.max(r.memory);
    }
    sum
}

/// A controller owner reference to `owner`.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.name_any(),
        uid: owner.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A pod of `template` owned by `owner`, named `name` or generated from
/// `generate_name`.
pub fn pod_from_template<K: Resource<DynamicType = ()>>(
    template: &PodTemplateSpec,
    owner: &K,
    name: Option<String>,
    extra_labels: &BTreeMap<String, String>,
) -> corev1::Pod {
    let tm = template.metadata.clone().unwrap_or_default();
    let mut labels = tm.labels.unwrap_or_default();
    labels.extend(extra_labels.clone());
    let generate_name = name.is_none().then(|| format!("{}-", owner.name_any()));
    corev1::Pod {
        metadata: ObjectMeta {
            name,
            generate_name,
            namespace: owner.namespace(),
            labels: Some(labels),
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![controller_ref(owner)]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// The label upstream's controllers put on what they create from a template.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
pub const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";

/// A short stable hash of a pod template (with `collision` mixed in), in
/// the alphabet upstream uses so it never spells words.
pub fn template_hash(template: &PodTemplateSpec, collision: i32) -> String {
    let mut t = template.clone();
    if let Some(m) = t.metadata.as_mut() {
        if let Some(labels) = m.labels.as_mut() {
            labels.remove(POD_TEMPLATE_HASH);
            labels.remove(CONTROLLER_REVISION_HASH);
        }
        // Absent and empty are the same template.
        if m.labels.as_ref().is_some_and(BTreeMap::is_empty) {
            m.labels = None;
        }
    }
    if t.metadata
        .as_ref()
        .is_some_and(|m| *m == ObjectMeta::default())
    {
        t.metadata = None;
    }
    let bytes = serde_json::to_vec(&t).unwrap_or_default();
    let mut h = Sha256::new();
    h.update(&bytes);
    h.update(collision.to_be_bytes());
    let digest = h.finalize();
    const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    digest
        .iter()
        .take(10)
        .map(|b| SAFE[usize::from(*b) % SAFE.len()] as char)
        .collect()
}

/// Whether two templates are the same apart from the hash labels.
pub fn same_template(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    template_hash(a, 0) == template_hash(b, 0)
}

/// Sets a condition in a list, keeping the transition time when the status
/// stays the same. Returns whether anything changed.
pub fn set_condition<C: Clone + PartialEq>(
    list: &mut Vec<C>,
    new: C,
    same_kind: impl Fn(&C) -> bool,
    same_status: impl Fn(&C, &C) -> bool,
    keep_time: impl Fn(&C, &mut C),
) -> bool {
    match list.iter_mut().find(|c| same_kind(c)) {
        Some(existing) => {
            let mut new = new;
            if same_status(existing, &new) {
                keep_time(existing, &mut new);
            }
            if *existing == new {
                false
            } else {
                *existing = new;
                true
            }
        }
        None => {
            list.push(new);
            true
        }
    }
}

/// Resolves an int-or-percent (maxSurge, maxUnavailable) against `total`.
pub fn int_or_percent(
    v: Option<&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    total: i32,
    round_up: bool,
    default: i32,
) -> i32 {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match v {
        None => default,
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => {
            let pct: f64 = s.trim_end_matches('%').parse().unwrap_or(0.0);
            let v = pct * f64::from(total) / 100.0;
            if round_up {
                v.ceil() as i32
            } else {
                v.floor() as i32
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn requests_sum_containers_and_fall_back_to_limits() {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
        }))
        .unwrap();
        let r = requests(&spec);
        assert_eq!(r.cpu_millis, 2000);
        assert_eq!(r.memory, (64 << 20) + (1 << 30));
    }

    #[test]
    fn percentages_round_like_upstream() {
        let pct = IntOrString::String("25%".into());
        assert_eq!(int_or_percent(Some(&pct), 3, true, 0), 1);
        assert_eq!(int_or_percent(Some(&pct), 3, false, 0), 0);
        assert_eq!(int_or_percent(Some(&IntOrString::Int(2)), 3, false, 0), 2);
    }

    #[test]
    fn template_hash_ignores_its_own_label() {
        let mut a = PodTemplateSpec::default();
        let h = template_hash(&a, 0);
        a.metadata = Some(ObjectMeta {
            labels: Some([(POD_TEMPLATE_HASH.to_string(), h.clone())].into()),
            ..Default::default()
        });
        assert_eq!(template_hash(&a, 0), h);
        assert_ne!(template_hash(&a, 1), h);
        assert_eq!(h.len(), 10);
    }
}
