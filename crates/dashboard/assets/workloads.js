// Templates and where they went: the list, one template with the
// scheduler's explanation, its Works and the overrides each cluster got
// (as a diff), and the policies with a dry-run plan of an edited one.

import { follow, placementReview, resourcePath } from "./api.js";
import { BINDINGS } from "./fleet.js";
import { button, cell, condition, el, filtered, link, linked, problem, scheduler, section, tags } from "./ui.js";

const CLUSTER_BINDINGS = "/apis/work.karmada.io/v1alpha2/clusterresourcebindings";
const WORKS = "/apis/work.karmada.io/v1alpha1/works";
const PERMANENT_ID = "resourcebinding.karmada.io/permanent-id";
const CLUSTER_PERMANENT_ID = "clusterresourcebinding.karmada.io/permanent-id";

const bindingHref = (b) => `#/workload/${encodeURIComponent(b.metadata.namespace || "")}/${encodeURIComponent(b.metadata.name)}`;

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
        linked(bindingHref(b), `${r.kind || ""}/${r.name || ""}`),
        tags((b.spec?.clusters || []).map((t) => (t.replicas === undefined ? t.name : `${t.name} (${t.replicas})`))),
        cell(scheduled ? scheduled.status : "", scheduled?.status === "True" ? "ok" : "warn"),
        cell(applied ? applied.status : "", applied?.status === "True" ? "ok" : "warn"),
        tags(health),
      ];
    }, "workloads");
}

// Leaves of an object as path → JSON text, the pipeline's own marks and
// what the member writes left out: what a user's overrides can change.
function leaves(value, path = "", out = new Map()) {
  if (value !== null && typeof value === "object" && !(Array.isArray(value) && value.length === 0)) {
    for (const [k, v] of Object.entries(value)) {
      const p = Array.isArray(value) ? `${path}[${k}]` : path ? `${path}.${k}` : k;
      if (!path && (k === "status" || k === "apiVersion" || k === "kind")) continue;
      if (path === "metadata" && !["labels", "annotations"].includes(k)) continue;
      if ((path === "metadata.labels" || path === "metadata.annotations") && /karmada\.io|flotilla\.io|kubectl\.kubernetes\.io/.test(k)) continue;
      leaves(v, p, out);
    }
  } else {
    out.set(path, JSON.stringify(value));
  }
  return out;
}

// What a cluster's copy changes of the template, line by line.
export function diff(template, copy) {
  const before = leaves(template);
  const after = leaves(copy);
  const lines = [];
  for (const [path, value] of before) {
    if (!after.has(path)) lines.push(["removed", `- ${path}: ${value}`]);
    else if (after.get(path) !== value) lines.push(["removed", `- ${path}: ${value}`], ["added", `+ ${path}: ${after.get(path)}`]);
  }
  for (const [path, value] of after) if (!before.has(path)) lines.push(["added", `+ ${path}: ${value}`]);
  return lines;
}

// A member's status in a few words: `2/2 ready` for workloads, its
// phase or conditions otherwise (as `describe placement` has it).
function statusWords(status) {
  if (!status) return "";
  if (status.replicas !== undefined) return `${status.readyReplicas || 0}/${status.replicas} ready`;
  if (status.phase) return status.phase;
  const text = JSON.stringify(status);
  return text.length > 120 ? `${text.slice(0, 119)}…` : text;
}

export function workload(container, namespace, name) {
  const stops = [];
  const heading = el("h1", {}, name);
  container.append(heading);
  const explanation = el("pre", { id: "explanation", class: "explanation" }, "Asking the scheduler…");
  const clusters = el("div", { id: "per-cluster" });
  const overrides = el("div", { id: "overrides" });
  const aggregated = el("pre", { id: "aggregated", class: "explanation" });
  container.append(
    el("h2", {}, "Placement, and why"), explanation,
    el("h2", {}, "Per cluster"), clusters,
    el("h2", {}, "Overrides per cluster"), overrides,
    el("h2", {}, "Aggregated status (the template's)"), aggregated,
  );
  let binding = null;
  let works = new Map();
  let template = null;
  let started = false;
  const render = scheduler(() => {
    if (!binding) return;
    const r = binding.spec?.resource || {};
    heading.textContent = `${r.kind} ${r.namespace ? `${r.namespace}/` : ""}${r.name}`;
    const statuses = binding.status?.aggregatedStatus || [];
    const rows = (binding.spec?.clusters || []).map((t) => {
      const s = statuses.find((x) => x.clusterName === t.name) || {};
      const work = [...works.values()].find((w) => w.metadata.namespace === `karmada-es-${t.name}`);
      const applied = (work?.status?.conditions || []).find((c) => c.type === "Applied");
      return el("tr", {},
        el("td", {}, link(`#/cluster/${encodeURIComponent(t.name)}`, t.name)),
        el("td", {}, t.replicas === undefined ? "-" : String(t.replicas)),
        el("td", {}, work ? work.metadata.name : "-"),
        el("td", { class: applied?.status === "True" ? "ok" : "warn" }, applied ? `${applied.status}${applied.status === "True" ? "" : `: ${applied.message || applied.reason || ""}`}` : "-"),
        el("td", { class: s.health === "Healthy" ? "ok" : s.health === "Unhealthy" ? "bad" : "" }, s.health || "-"),
        el("td", { class: "message" }, statusWords(s.status)));
    });
    clusters.replaceChildren(rows.length
      ? el("table", { id: "works" }, el("thead", {}, el("tr", {}, ["Cluster", "Replicas", "Work", "Applied", "Health", "Status there"].map((h) => el("th", {}, h)))), el("tbody", {}, rows))
      : el("p", { class: "muted" }, "Not scheduled to any cluster."));
    if (!template) {
      overrides.replaceChildren(el("p", { class: "muted" }, "Reading the template…"));
    } else {
      overrides.replaceChildren(...[...works.values()]
        .sort((a, b) => a.metadata.namespace.localeCompare(b.metadata.namespace))
        .map((w) => {
          const copy = w.spec?.workload?.manifests?.[0] || {};
          const lines = diff(template, copy);
          const cluster = w.metadata.namespace.replace(/^karmada-es-/, "");
          return el("div", { class: "diff-block" }, el("h3", {}, cluster),
            lines.length
              ? el("pre", { class: "diff", "data-cluster": cluster }, lines.map(([cls, text]) => el("span", { class: cls }, `${text}\n`)))
              : el("p", { class: "muted" }, "Same as the template."));
        }));
      aggregated.textContent = JSON.stringify(template.status || {}, null, 2);
    }
  });
  // The scheduler's explanation, asked again (at most once a second)
  // whenever the binding changes.
  let asking = false;
  let again = false;
  const explain = async () => {
    if (asking) { again = true; return; }
    asking = true;
    const r = binding.spec.resource;
    try {
      explanation.textContent = await placementReview(r.namespace || "default", { target: `${r.kind}/${r.name}` });
      explanation.classList.remove("error");
    } catch (error) {
      explanation.textContent = error.status === 403 ? `Not permitted: ${error.message}` : error.message;
      explanation.classList.add("error");
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
    asking = false;
    if (again) { again = false; explain(); }
  };
  const path = namespace
    ? `/apis/work.karmada.io/v1alpha2/namespaces/${encodeURIComponent(namespace)}/resourcebindings?fieldSelector=metadata.name%3D${encodeURIComponent(name)}`
    : `${CLUSTER_BINDINGS}?fieldSelector=metadata.name%3D${encodeURIComponent(name)}`;
  stops.push(follow(path, (items) => {
    binding = [...items.values()][0] || null;
    if (!binding) {
      explanation.textContent = "No such placement (its template was deleted?).";
      return;
    }
    explain();
    render();
    if (started) return;
    started = true;
    const r = binding.spec.resource;
    const idLabel = namespace ? PERMANENT_ID : CLUSTER_PERMANENT_ID;
    const id = binding.metadata.labels?.[idLabel] || "";
    stops.push(follow(`${WORKS}?labelSelector=${encodeURIComponent(`${idLabel}=${id}`)}`, (current) => {
      works = current;
      render();
    }, (error) => clusters.replaceChildren(problem(error))));
    resourcePath(r.apiVersion, r.kind, r.namespace).then((p) => {
      stops.push(follow(`${p}?fieldSelector=metadata.name%3D${encodeURIComponent(r.name)}`, (current) => {
        template = [...current.values()][0] || null;
        render();
      }, (error) => overrides.replaceChildren(problem(error))));
    }, (error) => overrides.replaceChildren(problem(error)));
  }, (error) => explanation.replaceChildren(problem(error))));
  return () => stops.forEach((s) => s());
}

// A selector in words: `apps/v1 Deployment web`, `... labels app=web`.
function selects(s) {
  const labels = Object.entries(s.labelSelector?.matchLabels || {}).map(([k, v]) => `${k}=${v}`);
  return `${s.apiVersion} ${s.kind}${s.namespace ? ` in ${s.namespace}` : ""}${s.name ? ` ${s.name}` : ""}${labels.length ? ` labels ${labels.join(",")}` : ""}`;
}

function placementWords(p) {
  const a = p?.clusterAffinity;
  const where = a?.clusterNames?.length ? a.clusterNames.join(", ")
    : a?.labelSelector ? `labels ${Object.entries(a.labelSelector.matchLabels || {}).map(([k, v]) => `${k}=${v}`).join(",")}`
      : p?.clusterAffinities?.length ? `affinities ${p.clusterAffinities.map((x) => x.affinityName).join(" then ")}`
        : "every cluster";
  const division = p?.replicaScheduling?.replicaSchedulingType === "Divided" ? `Divided${p.replicaScheduling.replicaDivisionPreference ? `, ${p.replicaScheduling.replicaDivisionPreference}` : ""}` : "Duplicated";
  return `${where}; ${division}`;
}

// A policy without what the server adds, ready to edit and plan.
function editable(policy) {
  const { apiVersion, kind, metadata, spec } = policy;
  return JSON.stringify({ apiVersion, kind, metadata: { name: metadata.name, namespace: metadata.namespace, labels: metadata.labels }, spec }, null, 2);
}

export function policies(container) {
  container.append(el("h1", {}, "Policies"));
  const stops = [];
  const manifests = el("textarea", { id: "plan-manifests", rows: 14, cols: 90, spellcheck: "false", "aria-label": "Manifests to plan" });
  const namespace = el("input", { id: "plan-namespace", value: "default", size: 14, "aria-label": "Namespace" });
  const result = el("pre", { id: "plan-result", class: "explanation" });
  const edit = (policy) => {
    manifests.value = editable(policy);
    manifests.scrollIntoView();
    manifests.focus();
  };
  const table = (title, plural, cluster, words) => section(container, title, `/apis/policy.karmada.io/v1alpha1/${plural}`, (items) => {
    if (!items.length) return el("p", { class: "muted" }, "None.");
    return el("table", { id: plural },
      el("thead", {}, el("tr", {}, [...(cluster ? [] : ["Namespace"]), "Name", "Selects", "Does", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, items
        .sort((a, b) => `${a.metadata.namespace}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace}/${b.metadata.name}`))
        .map((p) => el("tr", {},
          cluster ? null : el("td", {}, p.metadata.namespace),
          el("td", {}, p.metadata.name),
          el("td", {}, (p.spec?.resourceSelectors || []).map((s) => el("div", {}, selects(s)))),
          el("td", { class: "message" }, words(p)),
          el("td", {}, button("Edit and plan", async () => edit(p), { class: "plan-edit" }))))));
  });
  const overrideWords = (p) => (p.spec?.overrideRules || []).map((r) => {
    const targets = r.targetCluster?.clusterNames?.join(", ") || "every cluster";
    const kinds = Object.keys(r.overriders || {}).join(", ");
    return `${targets}: ${kinds}`;
  }).join("; ") || "no rules";
  stops.push(table("PropagationPolicies", "propagationpolicies", false, (p) => placementWords(p.spec?.placement)));
  stops.push(table("ClusterPropagationPolicies", "clusterpropagationpolicies", true, (p) => placementWords(p.spec?.placement)));
  stops.push(table("OverridePolicies", "overridepolicies", false, overrideWords));
  stops.push(table("ClusterOverridePolicies", "clusteroverridepolicies", true, overrideWords));
  container.append(
    el("h2", {}, "Plan (a dry run)"),
    el("p", { class: "muted" }, "Policies and objects (YAML or JSON): where each object would go with these policies in place of the hub's of the same name, as `flotilla plan -f` prints it. Nothing is written."),
    manifests,
    el("div", { class: "actions" }, "Namespace of objects that name none: ", namespace,
      button("Plan", async () => {
        result.textContent = "Planning…";
        result.classList.remove("error");
        try {
          result.textContent = await placementReview(namespace.value.trim() || "default", { manifests: manifests.value });
        } catch (error) {
          result.textContent = error.message;
          result.classList.add("error");
        }
      }, { id: "plan" })),
    result,
  );
  return () => stops.forEach((s) => s.stop());
}
