// Keys: the account's API keys; create, edit, rotate and revoke them with a live admin key.
import { api, create, maskedKey, models, send, session } from "../api.js";
import { announce, badge, dateOf, emptyState, errorBox, fill, h, markInvalid, modal, number, table, time } from "../dom.js";
import { confirmDialog, showSecret } from "../secrets.js";

export const TITLE = "Keys";
const AUTO_ALIAS = "svc-auto"; // allowed whenever every alias it routes to is
const DEFAULT_ROLE = "inference"; // what the API gives a key created without a role: the least
const READ_ONLY = {
  test: "Signed in with a test key: read-only. Sign in with a live key to create, edit, rotate or revoke keys.",
  inference: "Signed in with an inference key: read-only. Sign in with an admin key to create, edit, rotate or revoke keys.",
};
// How long a rotated key keeps working (the API allows 0 to 604,800 seconds). A day by
// default: long enough for every app to switch to the new secret; none for a leaked key.
const GRACE_CHOICES = [
  [0, "None: it stops at once"],
  [3_600, "1 hour"],
  [86_400, "24 hours"],
  [604_800, "7 days (the longest)"],
];
const DEFAULT_GRACE = 86_400;

const keyText = (key) => `${key.environment === "live" ? "svc_live_" : "svc_test_"}…${key.last4}`;

/** The key's status as the console shows it: an active key past its expiry is "expired";
 * one with an active successor, in its grace period, is "rotated". */
function statusOf(key, rotated) {
  const expires = dateOf(key.expires_at);
  if (key.status === "active" && expires && expires <= Date.now()) return "expired";
  if (key.status === "active" && rotated.has(key.id)) return "rotated";
  return key.status;
}

function capMeter(key) {
  const cap = key.daily_cap_credits;
  const used = key.used_today_credits;
  if (cap === null) return h("span", null, `No cap · ${number(used)} today`);
  const label = `${number(used)} of ${number(cap)} credits used today`;
  return h(
    "span",
    { class: "meter" },
    h("progress", { max: Math.max(cap, 1), value: Math.min(used, Math.max(cap, 1)), "aria-label": label }),
    h("span", null, `${number(used)} / ${number(cap)}`),
  );
}

/** A datetime-local value for an ISO time (the viewer's zone), or "". */
function localInput(iso) {
  const date = dateOf(iso);
  if (!date) return "";
  const shifted = new Date(date.getTime() - date.getTimezoneOffset() * 60_000);
  return shifted.toISOString().slice(0, 16);
}

const wholeOrNull = (text) => (text.trim() === "" ? null : Number(text));

function modelChoices(aliases, chosen) {
  const every = h("input", { type: "checkbox", name: "all_models", checked: chosen === null });
  const boxes = aliases.map((alias) =>
    h("input", { type: "checkbox", name: "allowed_models", value: alias, checked: chosen === null || chosen.includes(alias) }),
  );
  const sync = () => boxes.forEach((box) => { box.disabled = every.checked; });
  every.addEventListener("change", sync);
  sync();
  return h(
    "fieldset",
    null,
    h("legend", null, "Models it may use"),
    h("label", { class: "inline" }, every, "Every model"),
    boxes.map((box) => h("label", { class: "inline" }, box, box.value)),
  );
}

function roleChoice(chosen) {
  const option = (role, text) => h("label", { class: "inline" }, h("input", { type: "radio", name: "role", value: role, checked: chosen === role }), text);
  return h(
    "fieldset",
    { "aria-describedby": "key-role-hint" },
    h("legend", null, "Role"),
    option("inference", "Inference"),
    option("admin", "Admin"),
    h("p", { class: "hint", id: "key-role-hint" }, "Inference: API requests and reading the account only. Admin: also manages keys and webhooks."),
  );
}

/** The form's fields as the API names them. */
function formValues(form) {
  const data = new FormData(form);
  const expires = data.get("expires_at");
  return {
    name: String(data.get("name") ?? "").trim(),
    environment: data.get("environment"),
    daily_cap_credits: wholeOrNull(String(data.get("daily_cap_credits") ?? "")),
    rate_limit_rpm: wholeOrNull(String(data.get("rate_limit_rpm") ?? "")),
    max_credits_per_request: wholeOrNull(String(data.get("max_credits_per_request") ?? "")),
    expires_at: expires ? new Date(expires).toISOString() : null,
    allowed_models: form.elements.all_models.checked ? null : data.getAll("allowed_models"),
    role: data.get("role"),
  };
}

/** The create or edit dialog; `onSubmit(values)` returns the API's answer or throws. */
function keyDialog({ title, key = null, aliases, submitLabel, onSubmit }) {
  const errorText = h("p", { class: "error", role: "alert" });
  const form = h(
    "form",
    { novalidate: true },
    h("label", { for: "key-name" }, "Name"),
    h("input", { id: "key-name", name: "name", required: true, value: key?.name ?? "", autocomplete: "off" }),
    key
      ? null
      : h(
          "fieldset",
          null,
          h("legend", null, "Environment"),
          h("label", { class: "inline" }, h("input", { type: "radio", name: "environment", value: "live", checked: true }), "Live"),
          h("label", { class: "inline" }, h("input", { type: "radio", name: "environment", value: "test" }), "Test (read-only in the console)"),
        ),
    h("label", { for: "key-cap" }, "Daily cap (credits)"),
    h("input", { id: "key-cap", name: "daily_cap_credits", type: "number", min: 0, step: 1, inputmode: "numeric", value: key?.daily_cap_credits ?? "", "aria-describedby": "key-cap-hint" }),
    h("p", { class: "hint", id: "key-cap-hint" }, "Empty: no cap. Counted per UTC day, held credits included."),
    h("label", { for: "key-rpm" }, "Rate limit (requests per minute)"),
    h("input", { id: "key-rpm", name: "rate_limit_rpm", type: "number", min: 1, step: 1, inputmode: "numeric", value: key?.rate_limit_rpm ?? "", "aria-describedby": "key-rpm-hint" }),
    h("p", { class: "hint", id: "key-rpm-hint" }, "Empty: no limit."),
    h("label", { for: "key-ceiling" }, "Most credits per request"),
    h("input", { id: "key-ceiling", name: "max_credits_per_request", type: "number", min: 1, step: 1, inputmode: "numeric", value: key?.max_credits_per_request ?? "", "aria-describedby": "key-ceiling-hint" }),
    h("p", { class: "hint", id: "key-ceiling-hint" }, "Empty: no ceiling. A request's output is cut to fit; one whose prompt alone costs more is refused."),
    h("label", { for: "key-expires" }, "Expires"),
    h("input", { id: "key-expires", name: "expires_at", type: "datetime-local", value: localInput(key?.expires_at), "aria-describedby": "key-expires-hint" }),
    h("p", { class: "hint", id: "key-expires-hint" }, "In your time zone. Empty: never."),
    modelChoices(aliases, key ? key.allowed_models : null),
    roleChoice(key ? key.role : DEFAULT_ROLE),
    errorText,
    h(
      "div",
      { class: "actions" },
      h("button", { type: "button", class: "secondary", onclick: () => dialog.close() }, "Cancel"),
      h("button", { type: "submit" }, submitLabel),
    ),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    errorText.textContent = "";
    try {
      await onSubmit(formValues(form), dialog);
    } catch (error) {
      errorText.textContent = error.message;
      markInvalid(form, error);
    }
  });
  const dialog = modal(title, form);
  form.elements.name.focus();
  return dialog;
}

/** What an edit changes: the fields whose value differs from the key's. */
function changes(key, values) {
  const changed = {};
  if (values.name !== key.name) changed.name = values.name;
  if (values.daily_cap_credits !== key.daily_cap_credits) changed.daily_cap_credits = values.daily_cap_credits;
  if (values.rate_limit_rpm !== key.rate_limit_rpm) changed.rate_limit_rpm = values.rate_limit_rpm;
  if (values.max_credits_per_request !== key.max_credits_per_request) changed.max_credits_per_request = values.max_credits_per_request;
  if (localInput(values.expires_at) !== localInput(key.expires_at)) changed.expires_at = values.expires_at;
  if (JSON.stringify(values.allowed_models) !== JSON.stringify(key.allowed_models)) changed.allowed_models = values.allowed_models;
  if (values.role !== key.role) changed.role = values.role;
  return changed;
}

async function createKey(aliases, refresh) {
  keyDialog({
    title: "Create a key",
    aliases,
    submitLabel: "Create key",
    onSubmit: async (values, dialog) => {
      if (values.rate_limit_rpm === null) delete values.rate_limit_rpm; // the account's default
      const created = await create("api-keys", values);
      dialog.close();
      await showSecret({ title: `Key “${created.name}” created`, label: "Secret key", secret: created.key });
      announce(`Key ${created.name} created.`);
      await refresh();
    },
  });
}

function editKey(key, aliases, refresh) {
  keyDialog({
    title: `Edit “${key.name}”`,
    key,
    aliases,
    submitLabel: "Save changes",
    onSubmit: async (values, dialog) => {
      const changed = changes(key, values);
      if (Object.keys(changed).length) await api(`api-keys/${key.id}`, { method: "PATCH", body: changed });
      dialog.close();
      announce(`Key ${values.name} saved.`);
      await refresh();
    },
  });
}

/** What the chosen grace period does to the old key, in words (and its end, as a time). */
function graceEffect(key, seconds) {
  if (seconds === 0) {
    return "The old key stops working the moment the new one exists: every app still using it fails until it has the new secret. Choose this when the old key has leaked.";
  }
  const end = new Date(Date.now() + seconds * 1000);
  const own = dateOf(key.expires_at);
  if (own && own < end) {
    return ["The old key keeps working until its own expiry, ", time(key.expires_at), ", which comes first; then svc refuses it."];
  }
  return ["The old key keeps working until ", time(end.toISOString()), ", so your apps can switch to the new secret; then svc refuses it. Revoke it sooner once nothing uses it."];
}

function rotateKey(key, refresh) {
  const errorText = h("p", { class: "error", role: "alert" });
  const effect = h("p", { class: "hint", id: "rotate-grace-effect", "aria-live": "polite" });
  const choices = GRACE_CHOICES.map(([seconds, text]) =>
    h("label", { class: "inline" }, h("input", { type: "radio", name: "grace_seconds", value: seconds, checked: seconds === DEFAULT_GRACE }), text),
  );
  const form = h(
    "form",
    { novalidate: true },
    h("p", null, "The new key gets a new secret and the same settings and role. The two keys share today's spend against the daily cap, and the rate limit."),
    session.isOwn(key) ? h("p", { class: "notice" }, "You are signed in with this key: sign in with the new one before the old one stops working.") : null,
    h("fieldset", { class: "choices", "aria-describedby": "rotate-grace-effect" }, h("legend", null, "The old key keeps working for"), choices, effect),
    errorText,
    h(
      "div",
      { class: "actions" },
      h("button", { type: "button", class: "secondary", onclick: () => dialog.close() }, "Cancel"),
      h("button", { type: "submit" }, "Rotate key"),
    ),
  );
  const chosen = () => Number(form.elements.grace_seconds.value);
  const explain = () => fill(effect, graceEffect(key, chosen()));
  form.addEventListener("change", explain);
  explain();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    errorText.textContent = "";
    try {
      const body = { grace_seconds: chosen() };
      const created = await api(`api-keys/${key.id}/rotate`, { method: "POST", body });
      dialog.close();
      await showSecret({ title: `Key “${key.name}” rotated`, label: "New secret key", secret: created.key });
      announce(`Key ${key.name} rotated.`);
      await refresh();
    } catch (error) {
      errorText.textContent =
        error.code === "api_key_limit_reached"
          ? "This account is at its limit of active keys, and a key in its grace period still counts. Choose None (the old key stops at once), or revoke a key nothing uses first."
          : error.message;
    }
  });
  const dialog = modal(`Rotate “${key.name}”`, form);
  form.querySelector("input:checked").focus();
}

async function revokeKey(key, refresh) {
  const lines = [`Every request with ${keyText(key)} fails from now on, on every worker. This cannot be undone.`];
  if (session.isOwn(key)) lines.push("You are signed in with this key: the console signs out.");
  const sure = await confirmDialog({ title: `Revoke “${key.name}”?`, text: lines, confirm: "Revoke key" });
  if (!sure) return;
  try {
    await send(`api-keys/${key.id}`, { method: "DELETE" });
    announce(`Key ${key.name} revoked.`);
    await refresh();
  } catch (error) {
    if (!session.key()) return; // the key was the console's own: signed out
    const close = h("button", { type: "button", onclick: () => dialog.close() }, "Close");
    const dialog = modal("The key was not revoked", errorBox(error), h("div", { class: "actions" }, close));
    close.focus();
  }
}

/** What the list says of a key besides its name: the essential first (a card shows the
 * rest in a disclosure). */
function fields(rotated) {
  return [
    { label: "Key", essential: true, cell: (k) => h("code", null, keyText(k)) },
    { label: "Role", essential: true, cell: (k) => badge(k.role) },
    { label: "Status", essential: true, cell: (k) => badge(statusOf(k, rotated)) },
    { label: "Daily cap", essential: true, cell: capMeter },
    { label: "Rate limit", cell: (k) => (k.rate_limit_rpm === null ? "None" : `${number(k.rate_limit_rpm)}/min`) },
    { label: "Per request", cell: (k) => (k.max_credits_per_request === null ? "No ceiling" : `≤ ${number(k.max_credits_per_request)} credits`) },
    { label: "Models", cell: (k) => (k.allowed_models === null ? "All" : modelList(k.allowed_models)) },
    { label: "Expires", cell: (k) => time(k.expires_at, { compact: true }) },
    { label: "Last used", cell: (k) => time(k.last_used_at, { compact: true }) },
  ];
}

/** Aliases, comma-separated, a line breaking only between two (never inside svc-fast). */
const modelList = (aliases) => aliases.map((alias, i) => [i ? ", " : "", h("span", { class: "nowrap" }, alias)]);

/** A key's buttons, each named with the key: Rotate only while it has no successor. A
 * revoked or expired key has none, and its status says why. */
function keyActions(key, rotated, aliases, refresh) {
  const status = statusOf(key, rotated);
  if (status !== "active" && status !== "rotated") return h("span", { class: "hint" }, status);
  const button = (label, style, onclick) => h("button", { type: "button", class: style, "aria-label": `${label} ${key.name}`, onclick }, label);
  return h(
    "div",
    { class: "row-actions" },
    button("Edit", "secondary", () => editKey(key, aliases, refresh)),
    status === "active" ? button("Rotate", "secondary", () => rotateKey(key, refresh)) : null,
    button("Revoke", "danger", () => revokeKey(key, refresh)),
  );
}

const facts = (list, key) => h("dl", { class: "facts" }, list.map((f) => h("div", null, h("dt", null, f.label), h("dd", null, f.cell(key)))));

/** One card per key, for narrow screens: its name as a heading, the essentials, then the rest. */
function keyCards(caption, keys, described, actions) {
  const essential = described.filter((f) => f.essential);
  const more = described.filter((f) => !f.essential);
  return h(
    "ul",
    { class: "key-cards", "aria-label": caption },
    keys.map((key) =>
      h(
        "li",
        { class: "key-card" },
        h("h2", null, key.name),
        facts(essential, key),
        h("details", null, h("summary", null, "Rate limit, models, expiry, last use"), facts(more, key)),
        actions ? actions(key) : null,
      ),
    ),
  );
}

/** The keys twice, one shown at a time: a table from 48rem up, cards below (console.css). */
function keyList(keys, { readOnly, aliases, refresh }) {
  if (keys.length === 0) return emptyState("No keys yet. Create one to call the API from your app.");
  // keys with an active successor: in their grace period, not rotatable again (as the API)
  const rotated = new Set(keys.filter((k) => k.status === "active" && k.replaces).map((k) => k.replaces));
  const caption = `${number(keys.length)} ${keys.length === 1 ? "key" : "keys"}, newest first`;
  const described = fields(rotated);
  const actions = readOnly ? null : (k) => keyActions(k, rotated, aliases, refresh);
  // the table names a key and shows its last four in one column (so it fits 1280 px)
  const named = { label: "Name", cell: (k) => [h("span", { class: "key-name" }, k.name), h("code", { class: "key-text" }, keyText(k))] };
  const columns = [named, ...described.filter((f) => f.label !== "Key")];
  if (actions) columns.push({ label: "Actions", cell: actions });
  return h(
    "div",
    null,
    h("div", { class: "wide-only" }, table({ caption, columns, rows: keys, layout: actions ? "wraps sticky-actions" : "wraps" })),
    h("div", { class: "narrow-only" }, keyCards(caption, keys, described, actions)),
  );
}

export async function render(root, { readOnly, limit, refresh: rerender }) {
  const [keys, allModels] = await Promise.all([api("api-keys"), models()]);
  const aliases = allModels.filter((alias) => alias !== AUTO_ALIAS);
  const list = h("div");
  const refresh = async () => {
    const fresh = await api("api-keys");
    if (session.learnRole(fresh.data)) return rerender(); // the key changed its own role: the page follows
    fill(list, keyList(fresh.data, { readOnly, aliases, refresh }));
  };
  fill(list, keyList(keys.data, { readOnly, aliases, refresh }));
  root.append(
    readOnly
      ? h("p", { class: "notice" }, READ_ONLY[limit])
      : h("div", { class: "actions" }, h("button", { type: "button", onclick: () => createKey(aliases, refresh) }, "Create key")),
    h("p", { class: "hint" }, "A key's secret is shown once, when it is created or rotated; here you see its last four characters only. ", `Signed in as ${maskedKey(session.key())}.`),
    list,
  );
}
