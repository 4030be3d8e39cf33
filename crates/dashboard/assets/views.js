// The views: each mounts into a container, follows what it shows and
// renders it as text nodes only, and returns a function that stops it.

import { follow } from "./api.js";

// An element with attributes and children (strings become text nodes:
// nothing here is ever parsed as markup).
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Renders at most once a frame, however many changes arrive.
function scheduler(render) {
  let pending = false;
  return () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      render();
    });
  };
}

// Why a section shows nothing: not permitted, or the hub's error.
function problem(error) {
  if (error.status === 403) return el("p", { class: "muted" }, `Not permitted: ${error.message}`);
  if (error.status === 401) return el("p", { class: "error" }, "The token is no longer accepted: sign in again.");
  return el("p", { class: "error" }, `Cannot read it: ${error.message}`);
}

function condition(object, type) {
  return (object.status?.conditions || []).find((c) => c.type === type);
}

function clusterHealth(cluster) {
  const ready = condition(cluster, "Ready");
  if (!ready) return ["Unknown", "warn"];
  if (ready.status === "True") return ["Ready", "ok"];
  if (ready.status === "Unknown") return ["Unknown", "warn"];
  return ["NotReady", "bad"];
}

// A Kubernetes quantity as a number (cores, bytes, pods).
export function quantity(text) {
  if (text === undefined || text === null) return 0;
  const match = /^([0-9.]+)([a-zA-Z]*)$/.exec(String(text).trim());
  if (!match) return 0;
  const n = parseFloat(match[1]);
  const unit = {
    "": 1, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12,
    Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4,
  }[match[2]];
  return unit === undefined ? 0 : n * unit;
}

function gib(bytes) {
  return `${(bytes / 1024 ** 3).toFixed(1)} GiB`;
}

function card(label, figure, detail) {
  return el("div", { class: "card" }, el("div", { class: "figure" }, figure), el("div", { class: "label" }, label), detail ? el("div", { class: "muted" }, detail) : null);
}

// A section that follows `path` and renders what it holds into `body`;
// `stop` ends it, `redraw` renders it again (a filter changed).
function section(container, title, path, render) {
  const body = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  container.append(el("h2", {}, title), body);
  let items = new Map();
  let error = null;
  const draw = scheduler(() => {
    body.replaceChildren(error ? problem(error) : render([...items.values()]));
  });
  const stop = follow(
    path,
    (current) => {
      items = current;
      error = null;
      draw();
    },
    (e) => {
      error = e;
      draw();
    },
  );
  return { stop, redraw: draw };
}

const CLUSTERS = "/apis/cluster.karmada.io/v1alpha1/clusters";
const BINDINGS = "/apis/work.karmada.io/v1alpha2/resourcebindings";

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
  stops.push(section(container, "Recent warnings", "/api/v1/events?fieldSelector=type%3DWarning", (events) => {
    const newest = events
      .sort((a, b) => String(b.lastTimestamp || b.eventTime || "").localeCompare(String(a.lastTimestamp || a.eventTime || "")))
      .slice(0, 15);
    if (!newest.length) return el("p", { class: "muted" }, "No Warning events.");
    return el("table", { id: "warnings" },
      el("thead", {}, el("tr", {}, el("th", {}, "Last seen"), el("th", {}, "Object"), el("th", {}, "Reason"), el("th", {}, "Message"))),
      el("tbody", {}, newest.map((e) => el("tr", {},
        el("td", {}, e.lastTimestamp || e.eventTime || ""),
        el("td", {}, `${e.involvedObject?.kind || ""} ${e.involvedObject?.namespace ? `${e.involvedObject.namespace}/` : ""}${e.involvedObject?.name || ""}`),
        el("td", {}, e.reason || ""),
        el("td", { class: "message" }, e.message || ""),
      ))),
    );
  }));
  return () => stops.forEach((s) => s.stop());
}

// A table with a filter and a page of at most PAGE rows at a time.
const PAGE = 200;

function filtered(container, title, path, headings, rowOf, id) {
  let filter = "";
  let shown = PAGE;
  const input = el("input", { type: "search", placeholder: "Filter", "aria-label": `Filter ${title}` });
  container.append(el("h1", {}, title), input);
  let rows = [];
  const handle = section(container, `${title} of the fleet`, path, (objects) => {
    rows = objects
      .sort((a, b) => `${a.metadata.namespace || ""}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace || ""}/${b.metadata.name}`))
      .map(rowOf);
    const wanted = rows.filter((cells) => !filter || cells.some((c) => String(c.text ?? c).toLowerCase().includes(filter)));
    const table = el("table", { id },
      el("thead", {}, el("tr", {}, headings.map((h) => el("th", {}, h)))),
      el("tbody", {}, wanted.slice(0, shown).map((cells) => el("tr", {}, cells.map((c) => (c.node ? c.node : el("td", {}, String(c))))))),
    );
    const more = wanted.length > shown
      ? el("button", { type: "button", class: "more" }, `Show ${Math.min(PAGE, wanted.length - shown)} more of ${wanted.length - shown}`)
      : null;
    if (more) more.addEventListener("click", () => { shown += PAGE; handle.redraw(); });
    return el("div", {}, table, more, el("p", { class: "muted" }, `${wanted.length} of ${rows.length}`));
  });
  input.addEventListener("input", () => {
    filter = input.value.trim().toLowerCase();
    shown = PAGE;
    handle.redraw();
  });
  return handle.stop;
}

function cell(text, cls) {
  return { text, node: el("td", cls ? { class: cls } : {}, text) };
}

function tags(entries) {
  return { text: entries.join(" "), node: el("td", {}, entries.map((t) => el("span", { class: "tag" }, t))) };
}

export function clusters(container) {
  return filtered(container, "Clusters", CLUSTERS,
    ["Name", "Mode", "Ready", "Version", "Nodes", "Region", "Labels", "Taints", "Ready since"],
    (c) => {
      const [health, cls] = clusterHealth(c);
      const nodes = c.status?.nodeSummary;
      return [
        cell(c.metadata.name),
        cell(c.spec?.syncMode || "Push"),
        cell(health, cls),
        cell(c.status?.kubernetesVersion || ""),
        cell(nodes ? `${nodes.readyNum || 0}/${nodes.totalNum || 0}` : ""),
        cell(c.spec?.region || ""),
        tags(Object.entries(c.metadata.labels || {}).map(([k, v]) => `${k}=${v}`)),
        tags((c.spec?.taints || []).map((t) => `${t.key}${t.value ? `=${t.value}` : ""}:${t.effect}`)),
        cell(condition(c, "Ready")?.lastTransitionTime || ""),
      ];
    }, "clusters");
}

export function workloads(container) {
  return filtered(container, "Workloads", BINDINGS,
    ["Namespace", "Template", "Clusters", "Scheduled", "Fully applied", "Health"],
    (b) => {
      const r = b.spec?.resource || {};
      const scheduled = condition(b, "Scheduled");
      const applied = condition(b, "FullyApplied");
      const health = (b.status?.aggregatedStatus || []).map((s) => `${s.clusterName}: ${s.health || (s.applied ? "Applied" : "Pending")}`);
      return [
        cell(b.metadata.namespace || ""),
        cell(`${r.kind || ""}/${r.name || ""}`),
        tags((b.spec?.clusters || []).map((t) => (t.replicas === undefined ? t.name : `${t.name} (${t.replicas})`))),
        cell(scheduled ? scheduled.status : "", scheduled?.status === "True" ? "ok" : "warn"),
        cell(applied ? applied.status : "", applied?.status === "True" ? "ok" : "warn"),
        tags(health),
      ];
    }, "workloads");
}
