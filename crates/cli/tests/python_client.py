"""The official Python client against flotilla: create, list, watch."""
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
print("python client ok")
