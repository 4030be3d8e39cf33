// A member's own view, through the hub's cluster proxy (Karmada's
// clusters/NAME/proxy, authorised as clusters/proxy): its pods and
// events, a pod's log followed as it is written, and a terminal in the
// pod (exec over a WebSocket with the channel protocol).

import { follow, proxy, socket, stream } from "./api.js";
import { eventTable, newest } from "./fleet.js";
import { button, el, link, problem, section, serverTable } from "./ui.js";

export function member(container, cluster, rest) {
  if (rest[0] === "pod" && rest.length >= 3) return pod(container, cluster, rest[1], rest[2]);
  container.append(el("h1", {}, `Member ${cluster}`),
    el("p", {}, link(`#/cluster/${encodeURIComponent(cluster)}`, "← As the hub sees it")));
  const stops = [
    serverTable(container, "Pods", `${proxy(cluster)}/api/v1/pods`, {
      id: "member-pods",
      empty: "No pods.",
      linkTo: (m) => `#/member/${encodeURIComponent(cluster)}/pod/${encodeURIComponent(m.namespace)}/${encodeURIComponent(m.name)}`,
    }),
    serverTable(container, "Nodes", `${proxy(cluster)}/api/v1/nodes`, { id: "member-nodes" }),
    section(container, "Events", `${proxy(cluster)}/api/v1/events`, (events) => {
      const shown = newest(events, 50);
      return shown.length ? eventTable("member-events", shown) : el("p", { class: "muted" }, "No events.");
    }),
  ];
  return () => stops.forEach((s) => s.stop());
}

// The channels of the Kubernetes WebSocket protocol (v4/v5).
const STDIN = 0;
const STDOUT = 1;
const STDERR = 2;
const ERROR = 3;
const CLOSE = 255;

// At most this much of a log stays on the page (the oldest goes first).
const LOG_KEEP = 256 * 1024;

function pod(container, cluster, namespace, name) {
  const base = `${proxy(cluster)}/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}`;
  container.append(el("h1", {}, `Pod ${namespace}/${name} in ${cluster}`),
    el("p", {}, link(`#/member/${encodeURIComponent(cluster)}`, `← ${cluster}'s pods`)));
  const containerSelect = el("select", { id: "container", "aria-label": "Container" });
  const logs = el("pre", { id: "logs", class: "terminal" });
  const output = el("pre", { id: "terminal-output", class: "terminal" });
  const input = el("input", { id: "terminal-input", size: 60, placeholder: "a command, then Enter", disabled: true, "aria-label": "Terminal input" });
  const command = el("input", { id: "terminal-command", value: "sh", size: 12, "aria-label": "Command" });
  const facts = el("div", { id: "pod-facts" });
  let logAbort = null;
  let ws = null;

  const followLogs = () => {
    if (logAbort) logAbort.abort();
    logAbort = new AbortController();
    logs.textContent = "";
    const c = containerSelect.value ? `&container=${encodeURIComponent(containerSelect.value)}` : "";
    stream(`${base}/log?follow=true&tailLines=1000${c}`, (text) => {
      let all = logs.textContent + text;
      if (all.length > LOG_KEEP) all = all.slice(all.length - LOG_KEEP);
      logs.textContent = all;
      logs.scrollTop = logs.scrollHeight;
    }, logAbort.signal).catch((error) => {
      if (error.name !== "AbortError") logs.append(`\n[${error.message}]`);
    });
  };

  const write = (text, cls) => {
    output.append(cls ? el("span", { class: cls }, text) : text);
    output.scrollTop = output.scrollHeight;
  };
  const disconnect = () => {
    if (ws && ws.readyState === WebSocket.OPEN && ws.protocol === "v5.channel.k8s.io") ws.send(new Uint8Array([CLOSE, STDIN]));
    if (ws) ws.close();
    ws = null;
    input.disabled = true;
  };
  const connect = () => {
    disconnect();
    output.textContent = "";
    const args = command.value.trim().split(/\s+/).filter(Boolean).map((a) => `command=${encodeURIComponent(a)}`).join("&");
    const c = containerSelect.value ? `&container=${encodeURIComponent(containerSelect.value)}` : "";
    ws = socket(`${base}/exec?${args}&stdin=true&stdout=true&stderr=true${c}`);
    const decoder = new TextDecoder();
    ws.addEventListener("open", () => {
      input.disabled = false;
      input.focus();
      write(`[connected: ${command.value.trim()}]\n`, "muted");
    });
    ws.addEventListener("message", (event) => {
      const bytes = new Uint8Array(event.data);
      if (!bytes.length) return;
      const text = decoder.decode(bytes.subarray(1));
      if (bytes[0] === STDOUT) write(text);
      else if (bytes[0] === STDERR) write(text, "error");
      else if (bytes[0] === ERROR && text) {
        let status = {};
        try { status = JSON.parse(text); } catch (_) { status = { message: text }; }
        write(`[${status.status === "Success" ? "exited 0" : status.message || "failed"}]\n`, status.status === "Success" ? "muted" : "error");
      }
    });
    ws.addEventListener("close", () => {
      write("[disconnected]\n", "muted");
      input.disabled = true;
    });
    ws.addEventListener("error", () => write("[the connection failed]\n", "error"));
  };
  input.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || !ws || ws.readyState !== WebSocket.OPEN) return;
    const line = new TextEncoder().encode(`${input.value}\n`);
    const frame = new Uint8Array(line.length + 1);
    frame[0] = STDIN;
    frame.set(line, 1);
    ws.send(frame);
    write(`$ ${input.value}\n`, "muted");
    input.value = "";
  });
  containerSelect.addEventListener("change", followLogs);

  container.append(facts,
    el("div", { class: "actions" }, "Container: ", containerSelect),
    el("h2", {}, "Log (followed)"), logs,
    el("h2", {}, "Terminal"),
    el("div", { class: "actions" }, command, button("Connect", async () => connect(), { id: "terminal-connect" }), button("Disconnect", async () => disconnect())),
    output, input);

  let first = true;
  const stopPod = follow(`${proxy(cluster)}/api/v1/namespaces/${encodeURIComponent(namespace)}/pods?fieldSelector=metadata.name%3D${encodeURIComponent(name)}`, (items) => {
    const p = [...items.values()][0];
    if (!p) {
      facts.replaceChildren(el("p", { class: "muted" }, "No such pod (deleted?)."));
      return;
    }
    const statuses = p.status?.containerStatuses || [];
    facts.replaceChildren(el("p", {},
      `Phase ${p.status?.phase || "?"} on node ${p.spec?.nodeName || "-"}, IP ${p.status?.podIP || "-"}; `,
      statuses.map((s) => `${s.name}: ${s.ready ? "ready" : "not ready"}, ${s.restartCount || 0} restarts`).join("; ")));
    if (first) {
      first = false;
      containerSelect.replaceChildren(...(p.spec?.containers || []).map((c) => el("option", { value: c.name }, c.name)));
      followLogs();
    }
  }, (error) => facts.replaceChildren(problem(error)));
  return () => {
    stopPod();
    if (logAbort) logAbort.abort();
    disconnect();
  };
}
