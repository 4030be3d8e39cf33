// What every view is made of: elements built as text nodes only, sections
// that follow a collection and render it at most once a frame, tables
// with a filter and pages, and the server's own tables (`kubectl get`).

import { follow } from "./api.js";

// An element with attributes and children (strings become text nodes:
// nothing here is ever parsed as markup).
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== undefined && value !== null && value !== false) node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A button that runs `action`, disabled while it does.
export function button(label, action, attributes = {}) {
  const b = el("button", { type: "button", ...attributes }, label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      await action();
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

export function link(href, text) {
  return el("a", { href }, text);
}

// Renders at most once a frame, however many changes arrive.
export function scheduler(render) {
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
export function problem(error) {
  if (error.status === 403) return el("p", { class: "muted" }, `Not permitted: ${error.message}`);
  if (error.status === 404) return el("p", { class: "muted" }, "Not served there (its kind is not installed).");
  if (error.status === 401) return el("p", { class: "error" }, "The token is no longer accepted: sign in again.");
  return el("p", { class: "error" }, `Cannot read it: ${error.message}`);
}

export function condition(object, type) {
  return (object.status?.conditions || []).find((c) => c.type === type);
}

export function clusterHealth(cluster) {
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

export function gib(bytes) {
  return `${(bytes / 1024 ** 3).toFixed(1)} GiB`;
}

export function card(label, figure, detail) {
  return el("div", { class: "card" }, el("div", { class: "figure" }, figure), el("div", { class: "label" }, label), detail ? el("div", { class: "muted" }, detail) : null);
}

// A section that follows `path` and renders what it holds into `body`;
// `stop` ends it, `redraw` renders it again (a filter changed). With
// `table`, render gets the server's rows and columns.
export function section(container, title, path, render, { table = false, level = "h2" } = {}) {
  const body = el("div", {}, el("p", { class: "muted" }, "Loading…"));
  container.append(el(level, {}, title), body);
  let items = new Map();
  let columns = [];
  let error = null;
  const draw = scheduler(() => {
    body.replaceChildren(error ? problem(error) : render([...items.values()], columns));
  });
  const stop = follow(
    path,
    (current, cols) => {
      items = current;
      columns = cols;
      error = null;
      draw();
    },
    (e) => {
      error = e;
      draw();
    },
    { table },
  );
  return { stop, redraw: draw };
}

// A table with a filter and a page of at most PAGE rows at a time.
export const PAGE = 200;

export function cell(text, cls) {
  return { text, node: el("td", cls ? { class: cls } : {}, text) };
}

export function linked(href, text) {
  return { text, node: el("td", {}, link(href, text)) };
}

export function tags(entries) {
  return { text: entries.join(" "), node: el("td", {}, entries.map((t) => el("span", { class: "tag" }, t))) };
}

// Rows (arrays of cells) as a table with a filter box and pages.
export function pagedTable(id, headings) {
  let filter = "";
  let heads = headings;
  let shown = PAGE;
  let rows = [];
  const input = el("input", { type: "search", placeholder: "Filter", "aria-label": "Filter" });
  const body = el("div");
  const draw = () => {
    const wanted = rows.filter((cells) => !filter || cells.some((c) => String(c.text ?? c).toLowerCase().includes(filter)));
    const table = el("table", { id },
      el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))),
      el("tbody", {}, wanted.slice(0, shown).map((cells) => el("tr", {}, cells.map((c) => (c.node ? c.node : el("td", {}, String(c))))))),
    );
    const more = wanted.length > shown
      ? el("button", { type: "button", class: "more" }, `Show ${Math.min(PAGE, wanted.length - shown)} more of ${wanted.length - shown}`)
      : null;
    if (more) more.addEventListener("click", () => { shown += PAGE; draw(); });
    body.replaceChildren(table, more, el("p", { class: "muted" }, `${wanted.length} of ${rows.length}`));
  };
  input.addEventListener("input", () => {
    filter = input.value.trim().toLowerCase();
    shown = PAGE;
    draw();
  });
  return {
    node: el("div", {}, input, body),
    show(newRows, newHeadings) {
      rows = newRows;
      if (newHeadings) heads = newHeadings;
      draw();
    },
  };
}

// A page that lists what `path` holds, one row per object.
export function filtered(container, title, path, headings, rowOf, id) {
  container.append(el("h1", {}, title));
  const table = pagedTable(id, headings);
  const handle = section(container, `${title} of the fleet`, path, (objects) => {
    table.show(objects
      .sort((a, b) => `${a.metadata.namespace || ""}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace || ""}/${b.metadata.name}`))
      .map(rowOf));
    return table.node;
  });
  return handle.stop;
}

// A cell of a server-side Table as text (lists joined, null empty).
function tableCell(value) {
  if (value === null || value === undefined) return "";
  if (Array.isArray(value)) return value.join(",");
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

// A section that shows `path` as the server's Table, the columns
// `kubectl get` prints (priority 0), following it live.
export function serverTable(container, title, path, { id, empty = "None.", linkTo } = {}) {
  const table = pagedTable(id, []);
  return section(container, title, path, (rows, columns) => {
    if (!rows.length) return el("p", { class: "muted" }, empty);
    const shown = columns.map((c, i) => [c, i]).filter(([c]) => c.priority === 0);
    const namespaced = rows.some((r) => r.object?.metadata?.namespace);
    const headings = [...(namespaced ? ["Namespace"] : []), ...shown.map(([c]) => c.name)];
    table.show(rows
      .sort((a, b) => tableCell(a.cells?.[0]).localeCompare(tableCell(b.cells?.[0])))
      .map((r) => {
        const meta = r.object?.metadata || {};
        const cells = shown.map(([c, i]) => {
          const text = tableCell(r.cells?.[i]);
          return c.format === "name" && linkTo ? linked(linkTo(meta), text) : cell(text);
        });
        return namespaced ? [cell(meta.namespace || ""), ...cells] : cells;
      }), headings);
    return table.node;
  }, { table: true });
}
