// The fleet's pages: the overview, the clusters, and one cluster with
// what may be done to it (taint, unjoin; join on the list) offered only
// to users the hub allows.

import { can, create, follow, patch, proxy, remove } from "./api.js";
import {
  button, card, cell, clusterHealth, condition, el, filtered, gib, link, linked, problem, quantity, section, serverTable, tags,
} from "./ui.js";

export const CLUSTERS = "/apis/cluster.karmada.io/v1alpha1/clusters";
export const BINDINGS = "/apis/work.karmada.io/v1alpha2/resourcebindings";
const CLUSTER_NAMESPACE = "karmada-cluster";
const FROM_CLUSTER_API = "lifecycle.flotilla.io/cluster-api-cluster";

export function overview(container) {
  container.append(el("h1", {}, "Overview"));
  const stops = [];
  stops.push(section(container, "Clusters", CLUSTERS, (clusters) => {
    const count = (f) => clusters.filter(f).length;
    const health = (c) => clusterHealth(c)[0];
    const sum = (field, resource) =>
      clusters.reduce((total, c) => total + quantity(c.status?.resourceSummary?.[field]?.[resource]), 0);
    return el("div", { class: "cards" },
      card("clusters", String(clusters.length), `${count((c) => health(c) === "Ready")} Ready, ${count((c) => health(c) === "NotReady")} NotReady, ${count((c) => health(c) === "Unknown")} Unknown`),
      card("by mode", `${count((c) => c.spec?.syncMode !== "Pull")} Push`, `${count((c) => c.spec?.syncMode === "Pull")} Pull`),
      card("CPU allocated", `${sum("allocated", "cpu").toFixed(1)} / ${sum("allocatable", "cpu").toFixed(1)}`, "cores"),
      card("memory allocated", `${gib(sum("allocated", "memory"))}`, `of ${gib(sum("allocatable", "memory"))}`),
      card("pods", `${sum("allocated", "pods")} / ${sum("allocatable", "pods")}`, "allocated / allocatable"),
    );
  }));
  stops.push(section(container, "Placements", BINDINGS, (bindings) => {
    const scheduled = bindings.filter((b) => condition(b, "Scheduled")?.status === "True").length;
    const applied = bindings.filter((b) => condition(b, "FullyApplied")?.status === "True").length;
    const unhealthy = bindings.filter((b) => (b.status?.aggregatedStatus || []).some((s) => s.health === "Unhealthy")).length;
    return el("div", { class: "cards" },
      card("templates placed", String(bindings.length), "ResourceBindings"),
      card("scheduled", String(scheduled), `${bindings.length - scheduled} not scheduled`),
      card("fully applied", String(applied), `${unhealthy} unhealthy somewhere`),
    );
  }));
  // The fabric as the broker on the hub knows it: each cluster's networks.
  stops.push(section(container, "Network fabric", "/apis/submariner.io/v1/namespaces/submariner-k8s-broker/clusters", (clusters) => {
    if (!clusters.length) return el("p", { class: "muted" }, "No cluster has joined the fabric (members started with --underlay join it).");
    const globalnet = clusters.filter((c) => (c.spec?.global_cidr || []).length).length;
    return el("div", { class: "cards" },
      card("clusters in the fabric", String(clusters.length), globalnet ? `${globalnet} with Globalnet` : "routed directly"),
      el("div", {}, link("#/network", "Gateways and tunnels…")),
    );
  }));
  stops.push(peerings(container));
  stops.push(section(container, "Recent warnings", "/api/v1/events?fieldSelector=type%3DWarning", (events) => {
    const shown = newest(events, 15);
    if (!shown.length) return el("p", { class: "muted" }, "No Warning events.");
    return eventTable("warnings", shown);
  }));
  return () => stops.forEach((s) => s.stop());
}

// Peerings live in the members (Liqo's ForeignClusters): followed
// through the cluster proxy in the first PEERING_SAMPLE Push members, so
// the overview stays light in a large fleet (the Peering page has all).
const PEERING_SAMPLE = 20;

function peerings(container) {
  const body = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  container.append(el("h2", {}, "Peerings"), body);
  const byMember = new Map();
  const followed = new Map();
  const draw = () => {
    const foreign = [...byMember.values()].flat();
    // Established: some module (networking, authentication, offloading)
    // reports a condition Established or Ready, as Liqo's.
    const conditionsOf = (f) => Object.values(f.status?.modules || {}).flatMap((m) => m?.conditions || []);
    const established = foreign.filter((f) => conditionsOf(f).some((c) => c.status === "Established" || c.status === "Ready")).length;
    const peered = [...byMember.entries()].filter(([, f]) => f.length).length;
    body.replaceChildren(el("div", { class: "cards", id: "peerings" },
      card("ForeignClusters", String(foreign.length), `${established} established; held by ${peered} of the ${followed.size} members read`),
      el("div", {}, link("#/peering", "Virtual nodes and offloading…"))));
  };
  const stopClusters = follow(CLUSTERS, (items) => {
    const push = [...items.values()].filter((c) => c.spec?.syncMode !== "Pull").map((c) => c.metadata.name).sort().slice(0, PEERING_SAMPLE);
    for (const name of push) {
      if (followed.has(name)) continue;
      followed.set(name, follow(`${proxy(name)}/apis/core.liqo.io/v1beta1/foreignclusters`, (current) => {
        byMember.set(name, [...current.values()]);
        draw();
      }, () => {
        byMember.set(name, []);
        draw();
      }));
    }
    for (const [name, stop] of followed) {
      if (push.includes(name)) continue;
      stop();
      followed.delete(name);
      byMember.delete(name);
    }
    draw();
  }, (error) => body.replaceChildren(problem(error)));
  return {
    stop: () => {
      stopClusters();
      for (const stop of followed.values()) stop();
    },
  };
}

// The `n` newest of `events`, by when they were last seen.
export function newest(events, n) {
  const seen = (e) => String(e.lastTimestamp || e.eventTime || "");
  return events.sort((a, b) => seen(b).localeCompare(seen(a))).slice(0, n);
}

export function eventTable(id, events) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, el("th", {}, "Last seen"), el("th", {}, "Type"), el("th", {}, "Object"), el("th", {}, "Reason"), el("th", {}, "Message"))),
    el("tbody", {}, events.map((e) => el("tr", {},
      el("td", {}, e.lastTimestamp || e.eventTime || ""),
      el("td", { class: e.type === "Warning" ? "warn" : "" }, e.type || ""),
      el("td", {}, `${e.involvedObject?.kind || ""} ${e.involvedObject?.namespace ? `${e.involvedObject.namespace}/` : ""}${e.involvedObject?.name || ""}`),
      el("td", {}, e.reason || ""),
      el("td", { class: "message" }, e.message || ""),
    ))),
  );
}

const taintText = (t) => `${t.key}${t.value ? `=${t.value}` : ""}:${t.effect}`;

export function clusters(container) {
  const stop = filtered(container, "Clusters", CLUSTERS,
    ["Name", "Mode", "Ready", "Version", "Nodes", "Region", "Labels", "Taints", "Ready since"],
    (c) => {
      const [health, cls] = clusterHealth(c);
      const nodes = c.status?.nodeSummary;
      return [
        linked(`#/cluster/${encodeURIComponent(c.metadata.name)}`, c.metadata.name),
        cell(c.spec?.syncMode || "Push"),
        cell(health, cls),
        cell(c.status?.kubernetesVersion || ""),
        cell(nodes ? `${nodes.readyNum || 0}/${nodes.totalNum || 0}` : ""),
        cell(c.spec?.region || ""),
        tags(Object.entries(c.metadata.labels || {}).map(([k, v]) => `${k}=${v}`)),
        tags((c.spec?.taints || []).map(taintText)),
        cell(condition(c, "Ready")?.lastTransitionTime || ""),
      ];
    }, "clusters");
  // Clusters declared as objects, with their phases (they join the
  // fleet above once provisioned).
  const made = [
    serverTable(container, "Made by Cluster API", "/apis/cluster.x-k8s.io/v1beta1/clusters", {
      id: "capi-clusters", empty: "No Cluster API clusters.",
    }),
    serverTable(container, "Made by Gardener", "/apis/core.gardener.cloud/v1beta1/shoots", {
      id: "shoots", empty: "No Gardener shoots.",
    }),
  ];
  const joining = el("div");
  container.append(joining);
  offerJoin(joining);
  return () => {
    stop();
    made.forEach((s) => s.stop());
  };
}

// Joins a member as Karmada's manual registration does: its credentials
// in a Secret of karmada-cluster, and a Push-mode Cluster naming them
// (the Secret is removed again if the Cluster is refused).
async function offerJoin(container) {
  const allowed = await can("create", "cluster.karmada.io", "clusters")
    && await can("create", "", "secrets", { namespace: CLUSTER_NAMESPACE });
  if (!allowed) return;
  const field = (id, label, attributes = {}) => el("label", {}, label, el("input", { id, ...attributes }));
  const message = el("p", { id: "join-result", role: "status" });
  const form = el("form", { id: "join", class: "inline-form" },
    field("join-name", "Name", { required: true, pattern: "[a-z0-9]([-a-z0-9]*[a-z0-9])?" }),
    field("join-endpoint", "API endpoint", { required: true, placeholder: "https://member.example:6443", size: 32 }),
    field("join-token", "Bearer token", { required: true, type: "password", autocomplete: "off" }),
    el("label", {}, "CA (PEM; empty: not verified)", el("textarea", { id: "join-ca", rows: 2, cols: 40 })),
    el("button", { type: "submit" }, "Join"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = form.querySelector("#join-name").value.trim();
    const ca = form.querySelector("#join-ca").value.trim();
    const data = { token: btoa(form.querySelector("#join-token").value.trim()) };
    if (ca) data.caBundle = btoa(ca);
    try {
      await create(`/api/v1/namespaces/${CLUSTER_NAMESPACE}/secrets`, {
        apiVersion: "v1", kind: "Secret", metadata: { name, namespace: CLUSTER_NAMESPACE }, data,
      });
      try {
        await create(CLUSTERS, {
          apiVersion: "cluster.karmada.io/v1alpha1",
          kind: "Cluster",
          metadata: { name },
          spec: {
            syncMode: "Push",
            apiEndpoint: form.querySelector("#join-endpoint").value.trim(),
            secretRef: { namespace: CLUSTER_NAMESPACE, name },
            insecureSkipTLSVerification: !ca,
          },
        });
      } catch (error) {
        await remove(`/api/v1/namespaces/${CLUSTER_NAMESPACE}/secrets/${encodeURIComponent(name)}`).catch(() => {});
        throw error;
      }
      message.textContent = `Cluster ${name} created: it becomes Ready once the hub reaches it.`;
      message.className = "ok";
      form.reset();
    } catch (error) {
      message.textContent = `Not joined: ${error.message}`;
      message.className = "error";
    }
  });
  container.append(el("h2", {}, "Join a cluster (Push mode)"), form, message);
}

export function cluster(container, name) {
  const stops = [];
  container.append(el("h1", {}, `Cluster ${name}`),
    el("p", {}, link(`#/member/${encodeURIComponent(name)}`, "Its own view: pods, logs, terminal, events →")));
  const actions = el("div", { id: "cluster-actions" });
  container.append(actions);
  let current = null;
  stops.push(section(container, "Status", `${CLUSTERS}?fieldSelector=metadata.name%3D${encodeURIComponent(name)}`, (found) => {
    current = found[0] || null;
    if (!current) return el("p", { class: "muted" }, "No such cluster (unjoined?).");
    const c = current;
    const [health, cls] = clusterHealth(c);
    const nodes = c.status?.nodeSummary;
    const summary = c.status?.resourceSummary || {};
    const fact = (label, value, attributes = {}) => el("tr", {}, el("th", {}, label), el("td", attributes, value));
    return el("div", {},
      el("table", { id: "cluster-facts", class: "facts" }, el("tbody", {},
        fact("Ready", health, { class: cls }),
        fact("Mode", c.spec?.syncMode || "Push"),
        fact("API endpoint", c.spec?.apiEndpoint || ""),
        fact("Kubernetes version", c.status?.kubernetesVersion || ""),
        fact("Region / zones", `${c.spec?.region || "-"} / ${(c.spec?.zones || []).join(", ") || "-"}`),
        fact("Provider", c.spec?.provider || "-"),
        fact("Nodes", nodes ? `${nodes.readyNum || 0} ready of ${nodes.totalNum || 0}` : "-"),
        fact("CPU", `${quantity(summary.allocated?.cpu).toFixed(1)} of ${quantity(summary.allocatable?.cpu).toFixed(1)} allocated`),
        fact("Memory", `${gib(quantity(summary.allocated?.memory))} of ${gib(quantity(summary.allocatable?.memory))} allocated`),
        fact("Pods", `${quantity(summary.allocated?.pods)} of ${quantity(summary.allocatable?.pods)} allocated`),
        fact("Labels", (Object.entries(c.metadata.labels || {}).map(([k, v]) => el("span", { class: "tag" }, `${k}=${v}`)))),
        fact("Taints", (c.spec?.taints || []).map((t) => el("span", { class: "tag" }, taintText(t)))),
        fact("Made by", c.metadata.annotations?.[FROM_CLUSTER_API] ? `Cluster API Cluster ${c.metadata.annotations[FROM_CLUSTER_API]}` : "joined"),
      )),
      el("h3", {}, "Conditions"),
      el("table", { id: "cluster-conditions" },
        el("thead", {}, el("tr", {}, ["Type", "Status", "Reason", "Message", "Since"].map((h) => el("th", {}, h)))),
        el("tbody", {}, (c.status?.conditions || []).map((k) => el("tr", {},
          el("td", {}, k.type), el("td", { class: k.status === "True" ? "ok" : "bad" }, k.status),
          el("td", {}, k.reason || ""), el("td", { class: "message" }, k.message || ""), el("td", {}, k.lastTransitionTime || ""))))),
    );
  }));
  stops.push(section(container, "Workloads placed here", BINDINGS, (bindings) => {
    const here = bindings.filter((b) => (b.spec?.clusters || []).some((t) => t.name === name));
    if (!here.length) return el("p", { class: "muted" }, "None.");
    return el("table", { id: "cluster-workloads" },
      el("thead", {}, el("tr", {}, ["Namespace", "Template", "Replicas here", "Health here"].map((h) => el("th", {}, h)))),
      el("tbody", {}, here.map((b) => {
        const target = b.spec.clusters.find((t) => t.name === name);
        const status = (b.status?.aggregatedStatus || []).find((s) => s.clusterName === name);
        return el("tr", {},
          el("td", {}, b.metadata.namespace || ""),
          el("td", {}, link(`#/workload/${encodeURIComponent(b.metadata.namespace || "")}/${encodeURIComponent(b.metadata.name)}`, `${b.spec.resource?.kind}/${b.spec.resource?.name}`)),
          el("td", {}, target.replicas === undefined ? "-" : String(target.replicas)),
          el("td", {}, status?.health || (status?.applied ? "Applied" : "Pending")));
      })));
  }));
  offerActions(actions, name, () => current);
  return () => stops.forEach((s) => s.stop());
}

// Taint, untaint and unjoin, for users who may patch or delete the Cluster.
async function offerActions(container, name, current) {
  const [mayPatch, mayDelete] = await Promise.all([
    can("patch", "cluster.karmada.io", "clusters", { name }),
    can("delete", "cluster.karmada.io", "clusters", { name }),
  ]);
  const message = el("p", { id: "action-result", role: "status" });
  const report = (text, ok) => { message.textContent = text; message.className = ok ? "ok" : "error"; };
  const path = `${CLUSTERS}/${encodeURIComponent(name)}`;
  const setTaints = async (taints, done) => {
    try {
      await patch(path, { spec: { taints } });
      report(done, true);
    } catch (error) {
      report(`Refused: ${error.message}`, false);
    }
  };
  const parts = [];
  if (mayPatch) {
    const key = el("input", { id: "taint-key", placeholder: "key", required: true });
    const value = el("input", { id: "taint-value", placeholder: "value" });
    const effect = el("select", { id: "taint-effect" }, ["NoSchedule", "PreferNoSchedule", "NoExecute"].map((e) => el("option", { value: e }, e)));
    const form = el("form", { id: "taint", class: "inline-form" }, "Taint: ", key, value, effect, el("button", { type: "submit" }, "Add taint"));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const taint = { key: key.value.trim(), effect: effect.value };
      if (value.value.trim()) taint.value = value.value.trim();
      const kept = (current()?.spec?.taints || []).filter((t) => !(t.key === taint.key && t.effect === taint.effect));
      await setTaints([...kept, taint], `Tainted ${taintText(taint)}.`);
    });
    parts.push(form, button("Remove all taints", () => setTaints(null, "Taints removed."), { id: "untaint" }));
  }
  if (mayDelete) {
    parts.push(button("Unjoin", async () => {
      if (!window.confirm(`Unjoin ${name}? The hub removes what it placed there.`)) return;
      try {
        await remove(path);
        report(`Unjoining ${name}: the hub removes its copies, then the Cluster.`, true);
      } catch (error) {
        report(`Refused: ${error.message}`, false);
      }
    }, { id: "unjoin", class: "danger" }));
  }
  if (parts.length) container.append(el("div", { class: "actions" }, parts), message);
}
