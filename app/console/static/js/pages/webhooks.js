// Webhooks: where svc posts the account's events; add, remove, see recent deliveries.
import { api, create, send } from "../api.js";
import { announce, badge, emptyState, errorBox, fill, h, markInvalid, number, table, time } from "../dom.js";
import { confirmDialog, showSecret } from "../secrets.js";

export const TITLE = "Webhooks";

const EVENTS = [
  ["credits.low", "The balance fell under the threshold"],
  ["key.cap_threshold", "A key reached 50, 80 or 100 % of its daily cap"],
  ["key.revoked", "A key was revoked"],
  ["key.rotated", "A key was rotated"],
  ["key.expiring", "A key expires within 7 days"],
  ["credits.earned", "A verified spotlight earned credits"],
  ["credits.earned_expiring", "Earned credits expire within 3 days"],
  ["credits.earned_expired", "Earned credits expired"],
  ["credits.purchased", "A purchase added credits"],
  ["credits.refunded", "A refund, a dispute or a debit took credits back"],
  ["account.in_debt", "The account owes credits: requests are refused until a purchase"],
];

function deliveriesTable(list) {
  return table({
    caption: "Recent deliveries, newest event first",
    columns: [
      { label: "Event", cell: (d) => h("code", null, d.type) },
      { label: "Happened", cell: (d) => time(d.created) },
      { label: "Status", cell: (d) => badge(d.status) },
      { label: "Attempts", number: true, cell: (d) => number(d.attempt) },
      { label: "Last answer", cell: (d) => (d.status_code ? `HTTP ${d.status_code}` : d.error ?? "None yet") },
      { label: "Next retry", cell: (d) => time(d.next_retry_at, { never: "None" }) },
    ],
    rows: list.data,
    empty: emptyState("Nothing sent yet: deliveries appear here when a subscribed event happens."),
  });
}

function addForm(refresh) {
  const errorText = h("p", { class: "error", role: "alert" });
  const form = h(
    "form",
    { novalidate: true, "aria-labelledby": "add-webhook-title" },
    h("h2", { id: "add-webhook-title" }, "Add a webhook"),
    h("label", { for: "webhook-url" }, "URL"),
    h("input", { id: "webhook-url", name: "url", type: "url", required: true, placeholder: "https://example.com/svc-events", "aria-describedby": "webhook-url-hint" }),
    h("p", { class: "hint", id: "webhook-url-hint" }, "https, reachable from the internet. Each delivery is signed with the webhook's secret."),
    h(
      "fieldset",
      null,
      h("legend", null, "Events"),
      EVENTS.map(([type, text]) =>
        h("label", { class: "inline" }, h("input", { type: "checkbox", name: "events", value: type, checked: true }), h("span", null, `${text} `, h("code", null, type))),
      ),
    ),
    h("label", { for: "webhook-low" }, "Low balance threshold (credits)"),
    h("input", { id: "webhook-low", name: "low_balance_credits", type: "number", min: 1, step: 1, inputmode: "numeric", "aria-describedby": "webhook-low-hint" }),
    h("p", { class: "hint", id: "webhook-low-hint" }, "When credits.low fires; one for the account. Empty: keep the current one."),
    h("label", { for: "webhook-description" }, "Description"),
    h("input", { id: "webhook-description", name: "description", autocomplete: "off" }),
    errorText,
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Add webhook")),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    errorText.textContent = "";
    const data = new FormData(form);
    const body = { url: String(data.get("url")).trim(), events: data.getAll("events"), description: String(data.get("description")) };
    const low = String(data.get("low_balance_credits") ?? "").trim();
    if (low) body.low_balance_credits = Number(low);
    try {
      const created = await create("webhooks", body);
      form.reset();
      await showSecret({ title: "Webhook added", label: "Signing secret", secret: created.secret, details: [h("p", null, "Check each delivery's svc-signature header with it.")] });
      announce("Webhook added.");
      await refresh();
    } catch (error) {
      errorText.textContent = error.message;
      markInvalid(form, error);
    }
  });
  return form;
}

function webhookCard(hook, refresh, readOnly) {
  const deliveries = h("div");
  const toggle = h("button", { type: "button", class: "secondary", "aria-expanded": "false" }, "Recent deliveries");
  toggle.addEventListener("click", async () => {
    const open = toggle.getAttribute("aria-expanded") === "true";
    toggle.setAttribute("aria-expanded", String(!open));
    if (open) return fill(deliveries);
    try {
      fill(deliveries, deliveriesTable(await api(`webhooks/${hook.id}/deliveries`)));
    } catch (error) {
      fill(deliveries, errorBox(error));
    }
  });
  const remove = readOnly ? null : h("button", {
    type: "button",
    class: "danger",
    onclick: async () => {
      const sure = await confirmDialog({ title: "Remove this webhook?", text: [`Nothing more is sent to ${hook.url}, retries included.`], confirm: "Remove webhook" });
      if (!sure) return;
      try {
        await send(`webhooks/${hook.id}`, { method: "DELETE" });
        announce("Webhook removed.");
        await refresh();
      } catch (error) {
        fill(deliveries, errorBox(error));
      }
    },
  }, "Remove");
  return h(
    "section",
    { class: "card", "aria-label": `Webhook ${hook.url}` },
    h("h3", null, h("code", null, hook.url)),
    hook.description ? h("p", null, hook.description) : null,
    h("p", { class: "hint" }, "Events: ", hook.events.join(", ")),
    h("p", { class: "hint" }, "Added ", time(hook.created_at), hook.low_balance_credits ? ` · low balance under ${number(hook.low_balance_credits)} credits` : ""),
    h("div", { class: "actions" }, toggle, remove),
    deliveries,
  );
}

export async function render(root, { readOnly, limit }) {
  if (limit === "test") {
    // the API shows a test key no webhook: they hear live traffic only
    root.append(h("p", { class: "notice" }, "Webhooks are managed with a live key: sign out and sign in with one."));
    return;
  }
  const list = h("div");
  const refresh = async () => {
    const hooks = await api("webhooks");
    fill(
      list,
      hooks.data.length
        ? h("div", { class: "cards wide" }, hooks.data.map((hook) => webhookCard(hook, refresh, readOnly)))
        : emptyState(
            readOnly
              ? "No webhooks yet. An admin key can add one, to hear about low balances, caps and key changes as they happen."
              : "No webhooks yet. Add one below to hear about low balances, caps and key changes as they happen.",
          ),
    );
  };
  await refresh();
  if (readOnly) {
    const notice = "Signed in with an inference key: read-only. Sign in with an admin key to add or remove webhooks.";
    root.append(h("p", { class: "notice" }, notice), h("h2", null, "Your webhooks"), list);
  } else {
    root.append(h("h2", null, "Your webhooks"), list, addForm(refresh));
  }
}
