// The dashboard's shell: sign in with a bearer token, then the view the
// location's hash names (#/overview, #/clusters, #/workloads).

import { signIn, signOut, token, whoami } from "./api.js";
import { clusters, overview, workloads } from "./views.js";

const VIEWS = { overview, clusters, workloads };
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
  const name = (location.hash.replace(/^#\/?/, "") || "overview").split("/")[0];
  const view = VIEWS[name] || overview;
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("current", link.id === `nav-${VIEWS[name] ? name : "overview"}`);
  }
  if (stopView) stopView();
  const container = $("view");
  container.replaceChildren();
  stopView = view(container);
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
