// The fabric, the peerings and the other fleet APIs: lists the server
// renders (`kubectl get`'s columns), found through discovery so each
// kind a front end serves shows up, following their watches.

import { can, follow, get, networkReview, proxy } from "./api.js";
import { CLUSTERS } from "./fleet.js";
import { button, el, problem, serverTable } from "./ui.js";

// Every listable kind of `group` at `prefix` (the hub, or a member
// through its proxy), each in the newest version that serves it (the
// preferred one first): [{path, kind}].
async function kindsOf(prefix, group) {
  const g = await get(`${prefix}/apis/${group}`);
  const preferred = g.preferredVersion?.groupVersion;
  const versions = [preferred, ...(g.versions || []).map((v) => v.groupVersion)].filter((v, i, all) => v && all.indexOf(v) === i);
  const kinds = new Map();
  for (const version of versions) {
    const list = await get(`${prefix}/apis/${version}`);
    for (const r of list.resources || []) {
      if (r.name.includes("/") || !(r.verbs || []).includes("list") || kinds.has(r.kind)) continue;
      kinds.set(r.kind, { path: `${prefix}/apis/${version}/${r.name}`, kind: r.kind });
    }
  }
  return [...kinds.values()];
}

// A section per kind of each group, or why a group is missing.
function groups(container, prefix, list, stops, idPrefix) {
  for (const [title, group] of list) {
    const box = el("div", { class: "group" }, el("h2", {}, title));
    container.append(box);
    kindsOf(prefix, group).then((kinds) => {
      if (!box.isConnected) return; // the page was left meanwhile
      if (!kinds.length) box.append(el("p", { class: "muted" }, "No kinds served."));
      for (const k of kinds) {
        stops.push(serverTable(box, k.kind, k.path, { id: `${idPrefix}${k.kind.toLowerCase()}`, empty: `No ${k.kind}s.` }));
      }
    }, (error) => box.append(error.status === 404 ? el("p", { class: "muted" }, `${group} is not served here.`) : problem(error)));
  }
}

// Something for each Push member, kept in step with the fleet's clusters.
function perMember(container, render) {
  const stops = [];
  const shown = new Map();
  const stopClusters = follow(CLUSTERS, (items) => {
    for (const c of [...items.values()].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))) {
      const name = c.metadata.name;
      if (shown.has(name)) continue;
      const box = el("section", { class: "member", id: `member-${name}` }, el("h2", {}, `Cluster ${name}`));
      container.append(box);
      const own = [];
      if (c.spec?.syncMode === "Pull") box.append(el("p", { class: "muted" }, "Pull mode: the hub cannot reach its API."));
      else render(box, name, own);
      shown.set(name, own);
    }
    for (const [name, own] of shown) {
      if (items.has(`/${name}`)) continue;
      own.forEach((s) => s.stop());
      container.querySelector(`#member-${CSS.escape(name)}`)?.remove();
      shown.delete(name);
    }
  }, (error) => container.append(problem(error)));
  stops.push({ stop: stopClusters });
  return () => {
    stops.forEach((s) => s.stop());
    for (const own of shown.values()) own.forEach((s) => s.stop());
  };
}

export function network(container) {
  container.append(el("h1", {}, "Network"));
  const stops = [
    serverTable(container, "Networks (the broker's clusters)", "/apis/submariner.io/v1/namespaces/submariner-k8s-broker/clusters", { id: "broker-clusters", empty: "No cluster has joined the fabric." }),
    serverTable(container, "Exported services", "/apis/multicluster.x-k8s.io/v1alpha1/serviceexports", { id: "serviceexports", empty: "No ServiceExports." }),
    serverTable(container, "Imported services", "/apis/multicluster.x-k8s.io/v1alpha1/serviceimports", { id: "serviceimports", empty: "No ServiceImports." }),
  ];
  const verifying = el("div");
  container.append(verifying);
  const stopVerify = [];
  offerVerify(verifying, stopVerify);
  const members = el("div");
  container.append(members);
  const stopMembers = perMember(members, (box, name, own) => {
    own.push(serverTable(box, "Gateways and tunnels", `${proxy(name)}/apis/submariner.io/v1/namespaces/submariner-operator/gateways`, { id: `gateways-${name}`, empty: "No gateway (start the member with --underlay)." }));
    own.push(connections(box, name));
    own.push(serverTable(box, "Globalnet addresses", `${proxy(name)}/apis/submariner.io/v1/globalingressips`, { id: `globalingressips-${name}`, empty: "No global ingress IPs." }));
  });
  return () => {
    stops.forEach((s) => s.stop());
    stopVerify.forEach((s) => s());
    stopMembers();
  };
}

// `network verify` between two clusters, for users the hub lets run it
// (it makes probe pods in both members).
async function offerVerify(container, stops) {
  if (!await can("create", "inspect.flotilla.io", "networkreviews") || !container.isConnected) return;
  const from = el("select", { id: "verify-from", "aria-label": "From" });
  const to = el("select", { id: "verify-to", "aria-label": "To" });
  const timeout = el("input", { id: "verify-timeout", type: "number", min: 1, max: 300, value: 90, size: 4, "aria-label": "Timeout in seconds" });
  const output = el("pre", { id: "verify-output", class: "explanation" });
  stops.push(follow(CLUSTERS, (items) => {
    const names = [...items.values()].map((c) => c.metadata.name).sort();
    for (const [select, pick] of [[from, 0], [to, 1]]) {
      const chosen = select.value;
      select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
      select.value = chosen && names.includes(chosen) ? chosen : names[Math.min(pick, names.length - 1)] || "";
    }
  }, () => {}));
  container.append(
    el("h2", {}, "Verify connectivity"),
    el("div", { class: "actions" }, "From ", from, " to ", to, " waiting at most ", timeout, " s each",
      button("Verify", async () => {
        output.textContent = `Verifying ${from.value} → ${to.value} (probe pods in both; up to a few minutes)…`;
        output.classList.remove("error");
        try {
          const r = await networkReview(from.value, to.value, Number(timeout.value) || 90);
          output.textContent = r.output || "";
          if (r.failed) output.classList.add("error");
        } catch (error) {
          output.textContent = error.message;
          output.classList.add("error");
        }
      }, { id: "verify" })),
    output);
}

// A member's tunnels, as its active gateway reports them: remote cluster,
// state and round-trip time (`flotilla network show connections`).
function connections(box, name) {
  const body = el("div");
  box.append(el("h3", {}, "Connections"), body);
  const stop = follow(`${proxy(name)}/apis/submariner.io/v1/namespaces/submariner-operator/gateways`, (items) => {
    const rows = [];
    for (const g of items.values()) {
      for (const c of g.status?.connections || []) {
        rows.push(el("tr", {},
          el("td", {}, g.metadata.name),
          el("td", {}, c.endpoint?.cluster_id || ""),
          el("td", {}, c.endpoint?.public_ip || c.endpoint?.private_ip || ""),
          el("td", { class: c.status === "connected" ? "ok" : "bad" }, c.status || ""),
          el("td", {}, c.latencyRTT?.average || ""),
          el("td", { class: "message" }, c.statusMessage || "")));
      }
    }
    body.replaceChildren(rows.length
      ? el("table", { id: `connections-${name}` }, el("thead", {}, el("tr", {}, ["Gateway", "Cluster", "Remote IP", "Status", "RTT avg", "Message"].map((h) => el("th", {}, h)))), el("tbody", {}, rows))
      : el("p", { class: "muted" }, "No tunnels."));
  }, (error) => body.replaceChildren(error.status === 404 ? el("p", { class: "muted" }, "No fabric here.") : problem(error)));
  return { stop };
}

export function peering(container) {
  container.append(el("h1", {}, "Peering"),
    el("p", { class: "muted" }, "Each member's peerings as it holds them: ForeignClusters, the ResourceSlices granted and used, virtual nodes, offloaded namespaces and pods."));
  return perMember(container, (box, name, own) => {
    own.push(serverTable(box, "Virtual nodes", `${proxy(name)}/api/v1/nodes?labelSelector=liqo.io%2Ftype%3Dvirtual-node`, { id: `virtual-nodes-${name}`, empty: "No virtual nodes." }));
    groups(box, proxy(name), [
      ["Peers", "core.liqo.io"],
      ["Resources", "authentication.liqo.io"],
      ["Offloading", "offloading.liqo.io"],
    ], own, `${name}-`);
  });
}

export function fleetApis(container) {
  container.append(el("h1", {}, "Other fleet APIs"),
    el("p", { class: "muted" }, "KubeFed, Open Cluster Management and Argo CD objects on the hub, as `flotilla get` and kubectl list them; each front end translates them into the same placement pipeline."));
  const stops = [];
  groups(container, "", [
    ["KubeFed", "core.kubefed.io"],
    ["KubeFed federated types", "types.kubefed.io"],
    ["KubeFed scheduling", "scheduling.kubefed.io"],
    ["Open Cluster Management: clusters and placement", "cluster.open-cluster-management.io"],
    ["Open Cluster Management: work", "work.open-cluster-management.io"],
    ["Argo CD", "argoproj.io"],
  ], stops, "");
  return () => stops.forEach((s) => s.stop());
}
