"""The official Python client against flotilla over TLS: create, list, watch,
strategic merge patch, server-side apply, foreground deletion, 401."""
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

# Without the token: 401.
conf = client.Configuration.get_default_copy()
conf.api_key = {}
anonymous = client.CoreV1Api(client.ApiClient(conf))
try:
    anonymous.list_namespaced_config_map("default")
    raise AssertionError("expected 401")
except client.exceptions.ApiException as e:
    assert e.status == 401, e.status
print("python client ok")
