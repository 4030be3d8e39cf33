"""The official Python client's exec (WebSocket v4.channel.k8s.io),
attach and port-forward against a netns member's pods."""
import sys

from kubernetes import client, config
from kubernetes.stream import portforward, stream

config.load_kube_config(sys.argv[1])
v1 = client.CoreV1Api()

out = stream(v1.connect_get_namespaced_pod_exec, "shell", "default",
             command=["sh", "-c", "echo from-python; id -u"],
             stderr=True, stdin=False, stdout=True, tty=False)
assert out == "from-python\n65534\n", repr(out)

resp = stream(v1.connect_get_namespaced_pod_exec, "shell", "default",
              command=["sh", "-c", "read line; echo got:$line; exit 4"],
              stderr=True, stdin=True, stdout=True, tty=False,
              _preload_content=False)
resp.write_stdin("hello\n")
resp.run_forever(timeout=10)
# returncode reads the error channel, which read_all() clears.
assert resp.returncode == 4, resp.returncode
assert "got:hello" in resp.read_all(), "stdin reaches the command"

# A port nothing listens on is told on its own error channel; the
# request's other port is forwarded all the same.
pf = portforward(v1.connect_get_namespaced_pod_portforward, "web", "default", ports="80,9999")
assert pf.connected
closed = pf.socket(9999)
closed.setblocking(True)
assert closed.recv(1024) == b"", "the unreachable port's socket ends"
assert "error forwarding port 9999" in (pf.error(9999) or ""), pf.error(9999)
closed.close()
sock = pf.socket(80)
sock.setblocking(True)
sock.sendall(b"GET /via-portforward HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n")
data = b""
while True:
    chunk = sock.recv(4096)
    if not chunk:
        break
    data += chunk
sock.close()
assert b'"path":"/via-portforward"' in data, data
print("python streams ok")
