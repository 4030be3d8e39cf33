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

function headers() {
  return { Authorization: `Bearer ${token()}`, Accept: "application/json" };
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

export async function get(path) {
  const response = await fetch(path, { headers: headers(), credentials: "omit", cache: "no-store" });
  if (!response.ok) throw await failure(response);
  return response.json();
}

export async function create(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { ...headers(), "Content-Type": "application/json" },
    credentials: "omit",
    body: JSON.stringify(body),
  });
  if (!response.ok) throw await failure(response);
  return response.json();
}

// Who the token names (a SelfSubjectReview, as `kubectl auth whoami`).
export async function whoami() {
  const review = await create("/apis/authentication.k8s.io/v1/selfsubjectreviews", {
    apiVersion: "authentication.k8s.io/v1",
    kind: "SelfSubjectReview",
  });
  return review.status?.userInfo?.username || "unknown";
}

const keyOf = (o) => `${o.metadata.namespace || ""}/${o.metadata.name}`;

// Follows a collection as a reflector does: lists it, then watches from
// the list's resourceVersion, keeping `items` (a Map by namespace/name)
// and calling `changed(items)` after each change; lists again when the
// watch ends or fails. A 401 or 403 stops it and goes to `failed`, as
// does every other error (then it retries, waiting longer each time).
// Returns a function that stops it.
export function follow(path, changed, failed) {
  let stopped = false;
  let abort = null;
  const items = new Map();
  const run = async () => {
    let delay = 500;
    while (!stopped) {
      try {
        const list = await get(path);
        items.clear();
        for (const o of list.items || []) items.set(keyOf(o), o);
        changed(items);
        delay = 500;
        abort = new AbortController();
        const sep = path.includes("?") ? "&" : "?";
        const rv = encodeURIComponent(list.metadata?.resourceVersion || "");
        const response = await fetch(`${path}${sep}watch=1&allowWatchBookmarks=true&resourceVersion=${rv}`, {
          headers: headers(),
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
            if (event.type === "DELETED") items.delete(keyOf(event.object));
            else items.set(keyOf(event.object), event.object);
            changed(items);
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
