// The dashboard's shell: sign in with a bearer token, then the view the
// location's hash names (#/overview, #/clusters, #/cluster/NAME,
// #/workloads, #/workload/NAMESPACE/BINDING, #/policies, #/network,
// #/peering, #/member/NAME[/pod/NAMESPACE/POD], #/fleet-apis).

import { signIn, signOut, token, whoami } from "./api.js";
import { cluster, clusters, overview } from "./fleet.js";
import { member } from "./member.js";
import { fleetApis, network, peering } from "./more.js";
import { policies, workload, workloads } from "./workloads.js";

// Each view mounts into a container with the hash's further parts and
// returns what stops it; `nav` is the menu entry it belongs to.
const VIEWS = {
  overview: { nav: "overview", mount: (c) => overview(c) },
  clusters: { nav: "clusters", mount: (c) => clusters(c) },
  cluster: { nav: "clusters", mount: (c, [name]) => cluster(c, name) },
  workloads: { nav: "workloads", mount: (c) => workloads(c) },
  workload: { nav: "workloads", mount: (c, [ns, name]) => workload(c, ns, name) },
  policies: { nav: "policies", mount: (c) => policies(c) },
  network: { nav: "network", mount: (c) => network(c) },
  peering: { nav: "peering", mount: (c) => peering(c) },
  member: { nav: "clusters", mount: (c, [name, ...rest]) => member(c, name, rest) },
  "fleet-apis": { nav: "fleet-apis", mount: (c) => fleetApis(c) },
};
const $ = (id) => document.getElementById(id);
let stopView = null;

function showLogin(message) {
  if (stopView) stopView();
  stopView = null;
  $("view").replaceChildren();
  $("nav").hidden = true;
  $("sign-out").hidden = true;
  $("who").textContent = "";
  $("login").hidden = false;
  $("login-error").textContent = message || "";
}

function route() {
  const [name, ...rest] = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const view = VIEWS[name] || VIEWS.overview;
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("current", link.id === `nav-${view.nav}`);
  }
  if (stopView) stopView();
  const container = $("view");
  container.replaceChildren();
  stopView = view.mount(container, rest);
}

async function start() {
  if (!token()) {
    showLogin("");
    return;
  }
  let user;
  try {
    user = await whoami();
  } catch (error) {
    signOut();
    showLogin(error.status === 401 ? "The hub does not accept this token." : `Cannot sign in: ${error.message}`);
    return;
  }
  $("login").hidden = true;
  $("nav").hidden = false;
  $("sign-out").hidden = false;
  $("who").textContent = `Signed in as ${user}`;
  route();
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  signIn($("token").value);
  $("token").value = "";
  start();
});
$("sign-out").addEventListener("click", () => {
  signOut();
  showLogin("Signed out.");
});
window.addEventListener("hashchange", () => {
  if (token()) route();
});
start();
