// The console's shell: sign-in, navigation (by the URL's fragment) and sign-out.
import { ApiError, api, looksLikeKey, onKeyRefused, session } from "./api.js";
import { errorBox, fill, h, number } from "./dom.js";
import * as activity from "./pages/activity.js";
import * as keys from "./pages/keys.js";
import * as ledger from "./pages/ledger.js";
import * as overview from "./pages/overview.js";
import * as playground from "./pages/playground.js";
import * as webhooks from "./pages/webhooks.js";

const PAGES = { overview, keys, activity, ledger, webhooks, playground };
const DEFAULT_PAGE = "overview";

const byId = (id) => document.getElementById(id);
let rendering = 0; // the newest render wins when the viewer clicks quickly

function pageName() {
  const name = window.location.hash.replace(/^#\//, "");
  return Object.hasOwn(PAGES, name) ? name : DEFAULT_PAGE;
}

function showSignIn(message = "") {
  showDebt(0);
  byId("nav").hidden = true;
  byId("session").hidden = true;
  fill(byId("page"));
  byId("sign-in").hidden = false;
  byId("sign-in-error").textContent = message;
  document.title = "Sign in · svc console";
  byId("sign-in-key").focus();
}

/** The badge of the signed-in key, [style, text]: its environment, its role, whether it is read-only. */
function badgeOf() {
  if (session.environment() === "test") return ["test", "test key · read-only"];
  const role = session.role();
  if (role === null) return ["live", "live key"]; // until the key list has said
  return session.readOnly() ? ["read-only", `live key · ${role} · read-only`] : ["live", `live key · ${role}`];
}

function showSession() {
  const [style, text] = badgeOf();
  const badgeEl = byId("environment-badge");
  badgeEl.className = `badge ${style}`;
  badgeEl.textContent = text;
  byId("sign-in").hidden = true;
  byId("nav").hidden = false;
  byId("session").hidden = false;
}

/**
 * The banner over every page while the account owes credits (GET /v1/credits `debt`): its
 * live keys are refused until a purchase pays it. Its text changes only when the amount does,
 * so screen readers hear the alert once, not on every page.
 */
function showDebt(debt) {
  const banner = byId("debt-banner");
  const text = `This account owes ${number(debt)} credits: a refund or chargeback took back credits already spent. Requests are refused until a purchase pays it.`;
  banner.hidden = debt <= 0;
  if (debt <= 0) fill(banner);
  else if (!banner.textContent.startsWith(text)) fill(banner, h("p", null, text, " ", h("a", { href: "#/ledger" }, "See the ledger"), "."));
}

async function render() {
  if (!session.key()) {
    showSignIn();
    return;
  }
  showSession();
  const name = pageName();
  const page = PAGES[name];
  for (const link of byId("nav").querySelectorAll("a")) {
    if (link.getAttribute("href") === `#/${name}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${page.TITLE} · svc console`;
  const root = byId("page");
  const ticket = ++rendering;
  fill(root, h("h1", null, page.TITLE), h("p", { class: "hint", role: "status" }, "Loading…"));
  const content = h("div");
  const owed = api("credits").then(
    (credits) => ticket === rendering && showDebt(credits.debt),
    () => {}, // the page's own calls say what went wrong
  );
  try {
    if (session.role() === null) {
      // a reload: what this key may do is learned again, before a page offers anything
      session.learnRole((await api("api-keys")).data);
      showSession();
    }
    await page.render(content, { readOnly: session.readOnly(), limit: session.limit(), refresh: render });
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    if (!session.key()) return; // the key was refused: the sign-in form says why
    fill(content, errorBox(error));
  }
  await owed; // the banner and the page show together
  if (ticket === rendering) fill(root, h("h1", null, page.TITLE), content);
}

async function signIn(event) {
  event.preventDefault();
  const input = byId("sign-in-key");
  const key = input.value.trim();
  const errorText = byId("sign-in-error");
  if (!looksLikeKey(key)) {
    input.setAttribute("aria-invalid", "true");
    errorText.textContent = "That is not an svc API key: keys begin with svc_live_ or svc_test_ and are 59 characters long.";
    input.focus();
    return;
  }
  session.remember(key);
  try {
    await api("credits"); // proves the key before anything is shown
    session.learnRole((await api("api-keys")).data); // and what it may do (its role)
  } catch (error) {
    session.forget();
    input.setAttribute("aria-invalid", "true");
    errorText.textContent = error.message;
    input.focus();
    return;
  }
  input.value = "";
  input.removeAttribute("aria-invalid");
  if (!window.location.hash.startsWith("#/")) window.location.hash = `#/${DEFAULT_PAGE}`;
  await render();
  byId("main").focus();
}

function signOut() {
  session.forget();
  for (const dialog of document.querySelectorAll("dialog")) dialog.close();
  showSignIn("You are signed out; the key is forgotten.");
}

onKeyRefused((message) => {
  session.forget();
  for (const dialog of document.querySelectorAll("dialog")) dialog.close();
  showSignIn(`Signed out: ${message}`);
});

byId("sign-in-form").addEventListener("submit", signIn);
byId("sign-out").addEventListener("click", signOut);
byId("skip-link").addEventListener("click", (event) => {
  event.preventDefault(); // the fragment is the router's
  byId("main").focus();
});
window.addEventListener("hashchange", () => {
  if (window.location.hash.startsWith("#/")) render().then(() => byId("main").focus());
});
render();
