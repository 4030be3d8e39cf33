"""The official Python client against flotilla over TLS: create, list, watch,
strategic merge patch, server-side apply, foreground deletion, 403 for
anonymous and 401 for a wrong token."""
import sys
import threading

from kubernetes import client, config, watch

config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
v1.create_namespaced_config_map("default", {"metadata": {"name": "py1", "labels": {"from": "python"}}, "data": {"a": "1"}})
names = [c.metadata.name for c in v1.list_namespaced_config_map("default", label_selector="from=python").items]
assert names == ["py1"], names

def later():
    v1.create_namespaced_config_map("default", {"metadata": {"name": "py2", "labels": {"from": "python"}}})

seen = []
timer = threading.Timer(0.5, later)
timer.start()
for event in watch.Watch().stream(v1.list_namespaced_config_map, "default", label_selector="from=python", timeout_seconds=10):
    seen.append((event["type"], event["object"].metadata.name))
    if ("ADDED", "py2") in seen:
        break
timer.join()
assert ("ADDED", "py1") in seen and ("ADDED", "py2") in seen, seen
try:
    v1.read_namespaced_config_map("nope", "default")
    raise AssertionError("expected 404")
except client.exceptions.ApiException as e:
    assert e.status == 404, e.status

# Strategic merge patch (the client's default for dict bodies on core kinds).
v1.patch_namespaced_config_map("py1", "default", {"data": {"b": "2"}})
cm = v1.read_namespaced_config_map("py1", "default")
assert cm.data == {"a": "1", "b": "2"}, cm.data

# Server-side apply through the dynamic client.
from kubernetes.dynamic import DynamicClient
configmaps = DynamicClient(client.ApiClient()).resources.get(api_version="v1", kind="ConfigMap")
body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "py3"}, "data": {"x": "1"}}
configmaps.server_side_apply(body=body, name="py3", namespace="default", field_manager="python")
cm = v1.read_namespaced_config_map("py3", "default")
assert cm.metadata.managed_fields[0].manager == "python", cm.metadata.managed_fields

# Foreground deletion of an owner takes its dependent first.
owner = v1.read_namespaced_config_map("py3", "default")
v1.create_namespaced_config_map("default", {"metadata": {"name": "py4", "ownerReferences": [
    {"apiVersion": "v1", "kind": "ConfigMap", "name": "py3", "uid": owner.metadata.uid, "blockOwnerDeletion": True}]}})
v1.delete_namespaced_config_map("py3", "default", propagation_policy="Foreground")
import time
deadline = time.time() + 20
while time.time() < deadline:
    left = {c.metadata.name for c in v1.list_namespaced_config_map("default").items}
    if not ({"py3", "py4"} & left):
        break
    time.sleep(0.05)
else:
    raise AssertionError(f"foreground deletion did not finish: {left}")

# Typed calls decode every answer: a deleted pod answers the V1Pod, a
# new pod is Pending with its QoS class.
pod = v1.create_namespaced_pod("default", {"metadata": {"name": "pyp"},
    "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
assert pod.status.phase == "Pending" and pod.status.qos_class == "BestEffort", pod.status
gone = v1.delete_namespaced_pod("pyp", "default")
assert isinstance(gone, client.V1Pod) and gone.metadata.name == "pyp", type(gone)

# The built-in groups beyond core, create/read/replace/patch/delete.
rbac = client.RbacAuthorizationV1Api()
rbac.create_namespaced_role("default", {"metadata": {"name": "pyr"},
    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
role = rbac.read_namespaced_role("pyr", "default")
role.rules[0].verbs = ["get", "list"]
rbac.replace_namespaced_role("pyr", "default", role)
rbac.patch_namespaced_role("pyr", "default", {"metadata": {"labels": {"p": "y"}}})
role = rbac.read_namespaced_role("pyr", "default")
assert role.rules[0].verbs == ["get", "list"] and role.metadata.labels == {"p": "y"}, role
rbac.create_cluster_role_binding({"metadata": {"name": "pyb"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
    "subjects": [{"kind": "User", "name": "jane", "apiGroup": "rbac.authorization.k8s.io"}]})
assert "pyb" in [b.metadata.name for b in rbac.list_cluster_role_binding().items]
rbac.delete_namespaced_role("pyr", "default")
client.PolicyV1Api().create_namespaced_pod_disruption_budget("default", {"metadata": {"name": "pyd"},
    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}})
assert client.PolicyV1Api().read_namespaced_pod_disruption_budget("pyd", "default").spec.min_available == 1
client.AutoscalingV2Api().create_namespaced_horizontal_pod_autoscaler("default", {"metadata": {"name": "pyh"},
    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}, "maxReplicas": 3,
             "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}]}})
h1 = client.AutoscalingV1Api().read_namespaced_horizontal_pod_autoscaler("pyh", "default")
assert h1.spec.target_cpu_utilization_percentage == 60, h1.spec
classes = [c.metadata.name for c in client.SchedulingV1Api().list_priority_class().items]
assert "system-node-critical" in classes, classes

# Tokens and reviews.
v1.create_namespaced_service_account("default", {"metadata": {"name": "pysa"}})
token = v1.create_namespaced_service_account_token("pysa", "default", {"spec": {"expirationSeconds": 3600}})
assert token.status.token.count(".") == 2, token
review = client.AuthenticationV1Api().create_token_review({"spec": {"token": token.status.token}})
assert review.status.authenticated and review.status.user.username == "system:serviceaccount:default:pysa", review.status
access = client.AuthorizationV1Api().create_self_subject_access_review(
    {"spec": {"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "default"}}})
assert access.status.allowed, access.status

# Without the token: system:anonymous, forbidden as upstream; a wrong
# token: 401.
conf = client.Configuration.get_default_copy()
conf.api_key = {}
anonymous = client.CoreV1Api(client.ApiClient(conf))
try:
    anonymous.list_namespaced_config_map("default")
    raise AssertionError("expected 403")
except client.exceptions.ApiException as e:
    assert e.status == 403, e.status
    assert 'User \\"system:anonymous\\" cannot list resource \\"configmaps\\"' in e.body, e.body
conf.api_key = {"BearerToken": "Bearer not-a-token"}
conf.refresh_api_key_hook = None  # else the kubeconfig's token comes back
wrong = client.CoreV1Api(client.ApiClient(conf))
try:
    wrong.list_namespaced_config_map("default")
    raise AssertionError("expected 401")
except client.exceptions.ApiException as e:
    assert e.status == 401, e.status
print("python client ok")
