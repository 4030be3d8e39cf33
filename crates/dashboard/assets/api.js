// The hub's API, read with the signed-in user's bearer token: no cookie
// is ever set, so nothing another site makes the browser send can act.

const KEY = "flotilla.dashboard.token";

export function token() {
  return sessionStorage.getItem(KEY) || "";
}

export function signIn(value) {
  sessionStorage.setItem(KEY, value.trim());
}

export function signOut() {
  sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, reason, message) {
    super(message);
    this.status = status;
    this.reason = reason;
  }
}

const TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io";

function headers(accept = "application/json") {
  return { Authorization: `Bearer ${token()}`, Accept: accept };
}

async function failure(response) {
  let status = {};
  try {
    status = await response.json();
  } catch (_) {
    // Not a Status: the HTTP reason says enough.
  }
  return new ApiError(
    response.status,
    status.reason || response.statusText,
    status.message || `${response.status} ${response.statusText}`,
  );
}

export async function get(path, accept) {
  const response = await fetch(path, { headers: headers(accept), credentials: "omit", cache: "no-store" });
  if (!response.ok) throw await failure(response);
  return response.json();
}

// A write: `body` as JSON, or as `contentType` (a patch's).
async function write(method, path, body, contentType = "application/json") {
  const response = await fetch(path, {
    method,
    headers: { ...headers(), "Content-Type": contentType },
    credentials: "omit",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw await failure(response);
  return response.json();
}

export const create = (path, body) => write("POST", path, body);
export const patch = (path, body) => write("PATCH", path, body, "application/merge-patch+json");
export const remove = (path) => write("DELETE", path);

// Whether the signed-in user may `verb` the resource (a
// SelfSubjectAccessReview, as `kubectl auth can-i`): what they may not do
// is not offered.
export async function can(verb, group, resource, { namespace, name, subresource } = {}) {
  try {
    const review = await create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
      apiVersion: "authorization.k8s.io/v1",
      kind: "SelfSubjectAccessReview",
      spec: { resourceAttributes: { verb, group, resource, namespace, name, subresource } },
    });
    return review.status?.allowed === true;
  } catch (_) {
    return false;
  }
}

// Where a template went and why (`target`: KIND/NAME), or where
// `manifests` would go: the hub's PlacementReview, answered with the
// user's own reads, the text `flotilla describe placement` and `flotilla
// plan` print.
export async function placementReview(namespace, spec) {
  const review = await create(`/apis/inspect.flotilla.io/v1alpha1/namespaces/${encodeURIComponent(namespace)}/placementreviews`, {
    apiVersion: "inspect.flotilla.io/v1alpha1",
    kind: "PlacementReview",
    spec,
  });
  return review.status?.explanation || "";
}

// `flotilla network verify` from `from` to `to`, run by the hub (a
// NetworkReview: probe pods in both members, deleted after): its lines
// and counts.
export async function networkReview(from, to, timeoutSeconds) {
  const review = await create("/apis/inspect.flotilla.io/v1alpha1/networkreviews", {
    apiVersion: "inspect.flotilla.io/v1alpha1",
    kind: "NetworkReview",
    spec: { from, to, timeoutSeconds },
  });
  return review.status || {};
}

// The REST path of a kind's objects, found through discovery (cached).
const discovered = new Map();
export async function resourcePath(apiVersion, kind, namespace, name) {
  const base = apiVersion.includes("/") ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
  if (!discovered.has(base)) discovered.set(base, get(base).catch((e) => { discovered.delete(base); throw e; }));
  const list = await discovered.get(base);
  const r = (list.resources || []).find((x) => x.kind === kind && !x.name.includes("/"));
  if (!r) throw new ApiError(404, "NotFound", `the hub does not serve ${kind} in ${apiVersion}`);
  const ns = r.namespaced && namespace ? `/namespaces/${encodeURIComponent(namespace)}` : "";
  return `${base}${ns}/${r.name}${name ? `/${encodeURIComponent(name)}` : ""}`;
}

// Calls `text(chunk)` with what a streamed answer (a pod's log followed)
// sends as it comes, until it ends or `signal` aborts it.
export async function stream(path, text, signal) {
  const response = await fetch(path, { headers: headers("*/*"), credentials: "omit", cache: "no-store", signal });
  if (!response.ok) throw await failure(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    text(decoder.decode(value, { stream: true }));
  }
}

// The path of member `cluster`'s API through the hub (Karmada's cluster
// proxy, authorised as clusters/proxy).
export const proxy = (cluster) => `/apis/cluster.karmada.io/v1alpha1/clusters/${encodeURIComponent(cluster)}/proxy`;

// A WebSocket to `path` (exec through the cluster proxy) speaking the
// channel protocol; the token goes as a subprotocol, as kube-apiserver
// takes it from browsers (which cannot set headers on a WebSocket).
export function socket(path) {
  const bytes = new TextEncoder().encode(token());
  const encoded = btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;
  const ws = new WebSocket(url, ["v5.channel.k8s.io", "v4.channel.k8s.io", `base64url.bearer.authorization.k8s.io.${encoded}`]);
  ws.binaryType = "arraybuffer";
  return ws;
}

// Who the token names (a SelfSubjectReview, as `kubectl auth whoami`).
export async function whoami() {
  const review = await create("/apis/authentication.k8s.io/v1/selfsubjectreviews", {
    apiVersion: "authentication.k8s.io/v1",
    kind: "SelfSubjectReview",
  });
  return review.status?.userInfo?.username || "unknown";
}

const keyOf = (o) => `${o.metadata?.namespace || ""}/${o.metadata?.name}`;

// What a list or a watch event holds, as (key, item) pairs: its objects,
// or, as a Table (`table`), its rows keyed by their object's metadata.
function entries(body, table) {
  if (!table) return (body.items || []).map((o) => [keyOf(o), o]);
  return (body.rows || []).map((row) => [keyOf(row.object || {}), row]);
}

// Follows a collection as a reflector does: lists it, then watches from
// the list's resourceVersion, keeping `items` (a Map by namespace/name)
// and calling `changed(items, columns)` after each change; lists again
// when the watch ends or fails. With `table`, the server renders it as
// `kubectl get` shows it (a Table: `columns` and rows). A 401 or 403
// stops it and goes to `failed`, as does every other error (then it
// retries, waiting longer each time). Returns a function that stops it.
export function follow(path, changed, failed, { table = false } = {}) {
  let stopped = false;
  let abort = null;
  let columns = [];
  const items = new Map();
  const accept = table ? TABLE : "application/json";
  const run = async () => {
    let delay = 500;
    while (!stopped) {
      try {
        const list = await get(path, accept);
        items.clear();
        if (table) columns = list.columnDefinitions || [];
        for (const [k, o] of entries(list, table)) items.set(k, o);
        changed(items, columns);
        delay = 500;
        abort = new AbortController();
        const sep = path.includes("?") ? "&" : "?";
        const rv = encodeURIComponent(list.metadata?.resourceVersion || "");
        const response = await fetch(`${path}${sep}watch=1&allowWatchBookmarks=true&resourceVersion=${rv}`, {
          headers: headers(accept),
          credentials: "omit",
          cache: "no-store",
          signal: abort.signal,
        });
        if (!response.ok) throw await failure(response);
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffered = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffered += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffered.indexOf("\n")) >= 0) {
            const line = buffered.slice(0, end).trim();
            buffered = buffered.slice(end + 1);
            if (!line) continue;
            const event = JSON.parse(line);
            if (event.type === "ERROR") {
              throw new ApiError(event.object?.code || 500, event.object?.reason || "", event.object?.message || "watch failed");
            }
            if (event.type === "BOOKMARK") continue;
            for (const [k, o] of table ? entries(event.object, true) : [[keyOf(event.object), event.object]]) {
              if (event.type === "DELETED") items.delete(k);
              else items.set(k, o);
            }
            changed(items, columns);
          }
        }
      } catch (error) {
        if (stopped) return;
        failed(error);
        if (error instanceof ApiError && (error.status === 401 || error.status === 403)) return;
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 10000);
      }
    }
  };
  run();
  return () => {
    stopped = true;
    if (abort) abort.abort();
  };
}
