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
const GRACE_CHOICES = [
  [0, "None: the old key stops at once"],
  [300, "5 minutes"],
  [3600, "1 hour"],
  [86_400, "1 day"],
  [604_800, "7 days"],
];

const keyText = (key) => `${key.environment === "live" ? "svc_live_" : "svc_test_"}…${key.last4}`;

function statusOf(key) {
  const expires = dateOf(key.expires_at);
  if (key.status === "active" && expires && expires <= Date.now()) return "expired";
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

function rotateKey(key, refresh) {
  const errorText = h("p", { class: "error", role: "alert" });
  const grace = h("select", { id: "rotate-grace", name: "grace_seconds" }, GRACE_CHOICES.map(([seconds, text]) => h("option", { value: seconds }, text)));
  const form = h(
    "form",
    { novalidate: true },
    h("p", null, "The new key gets the same settings and role, and a new secret. The day's spend and the rate limit carry over."),
    session.isOwn(key) ? h("p", { class: "notice" }, "You are signed in with this key: once it stops working, sign in with the new one.") : null,
    h("label", { for: "rotate-grace" }, "The old key keeps working for"),
    grace,
    errorText,
    h(
      "div",
      { class: "actions" },
      h("button", { type: "button", class: "secondary", onclick: () => dialog.close() }, "Cancel"),
      h("button", { type: "submit" }, "Rotate key"),
    ),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const body = { grace_seconds: Number(grace.value) };
      const created = await api(`api-keys/${key.id}/rotate`, { method: "POST", body });
      dialog.close();
      await showSecret({ title: `Key “${key.name}” rotated`, label: "New secret key", secret: created.key });
      announce(`Key ${key.name} rotated.`);
      await refresh();
    } catch (error) {
      errorText.textContent = error.message;
    }
  });
  const dialog = modal(`Rotate “${key.name}”`, form);
  grace.focus();
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

function columns(readOnly, aliases, refresh) {
  const list = [
    { label: "Name", cell: (k) => k.name },
    { label: "Environment", cell: (k) => badge(k.environment) },
    { label: "Key", cell: (k) => h("code", null, keyText(k)) },
    { label: "Role", cell: (k) => badge(k.role) },
    { label: "Status", cell: (k) => badge(statusOf(k)) },
    { label: "Daily cap", cell: capMeter },
    { label: "Rate limit", cell: (k) => (k.rate_limit_rpm === null ? "None" : `${number(k.rate_limit_rpm)}/min`) },
    { label: "Models", cell: (k) => (k.allowed_models === null ? "All" : k.allowed_models.join(", ")) },
    { label: "Expires", cell: (k) => time(k.expires_at) },
    { label: "Last used", cell: (k) => time(k.last_used_at) },
  ];
  if (!readOnly) {
    list.push({
      label: "Actions",
      cell: (k) =>
        k.status !== "active"
          ? h("span", { class: "hint" }, "None")
          : h(
              "div",
              { class: "row-actions" },
              h("button", { type: "button", class: "secondary", "aria-label": `Edit ${k.name}`, onclick: () => editKey(k, aliases, refresh) }, "Edit"),
              h("button", { type: "button", class: "secondary", "aria-label": `Rotate ${k.name}`, onclick: () => rotateKey(k, refresh) }, "Rotate"),
              h("button", { type: "button", class: "danger", "aria-label": `Revoke ${k.name}`, onclick: () => revokeKey(k, refresh) }, "Revoke"),
            ),
    });
  }
  return list;
}

export async function render(root, { readOnly, limit, refresh: rerender }) {
  const [keys, allModels] = await Promise.all([api("api-keys"), models()]);
  const aliases = allModels.filter((alias) => alias !== AUTO_ALIAS);
  const list = h("div");
  const refresh = async () => {
    const fresh = await api("api-keys");
    if (session.learnRole(fresh.data)) return rerender(); // the key changed its own role: the page follows
    fill(list, keyTable(fresh.data));
  };
  const keyTable = (data) =>
    table({
      caption: `${number(data.length)} ${data.length === 1 ? "key" : "keys"}, newest first`,
      columns: columns(readOnly, aliases, refresh),
      rows: data,
      empty: emptyState("No keys yet. Create one to call the API from your app."),
    });
  fill(list, keyTable(keys.data));
  root.append(
    readOnly
      ? h("p", { class: "notice" }, READ_ONLY[limit])
      : h("div", { class: "actions" }, h("button", { type: "button", onclick: () => createKey(aliases, refresh) }, "Create key")),
    h("p", { class: "hint" }, "A key's secret is shown once, when it is created or rotated; here you see its last four characters only. ", `Signed in as ${maskedKey(session.key())}.`),
    list,
  );
}
