// Activity: the request log, filtered and paged, each request's receipt, and the CSV exports.
import { api, download, models } from "../api.js";
import { emptyState, errorBox, fill, h, modal, number, table, time, todayUtc } from "../dom.js";

export const TITLE = "Activity";
const PAGE_SIZE = 25;
const EXPORT_DAYS = 30;
const AUTO_ALIAS = "svc-auto"; // never serves a request itself: not a filter

const OUTCOMES = {
  completed: "completed",
  client_disconnect: "client left",
  upstream_error: "upstream error",
  shutdown: "shutdown",
  swept: "swept",
};

/** The model that answered, after the alias asked for when it differs (svc-auto → svc-fast);
 * a narrow column wraps after the arrow, never inside an alias. */
function modelOf(row) {
  const alias = (name) => h("span", { class: "nowrap" }, name);
  if (row.requested_model === row.model) return alias(row.model);
  return [alias(row.requested_model), "\u00a0→ ", alias(row.model)];
}

const SOURCES = { upstream: "reported by the upstream", estimated: "estimated by svc" };

/** Which pools the credits came from, as a receipt says (null: none, or not recorded). */
function paidFrom(receipt) {
  if (receipt.environment === "test") return "nothing: a test key is never charged";
  if (receipt.earned_credits === null) return "not recorded for this request";
  return `${number(receipt.earned_credits)} earned, ${number(receipt.purchased_credits)} purchased`;
}

/** A fact of a receipt that may be unknown (null: a request settled before svc kept it, or
 * swept): none, else its number. */
function known(label, value) {
  return value === null || value === undefined ? [] : [[label, number(value)]];
}

/** The prices the request was billed at, as its receipt names them ("Prices billed"); for
 * a request settled before svc kept them (prices null), the served alias's prices as GET
 * /v1/pricing lists them now, labelled so ("Prices now"; none when the key may no longer
 * use the alias, or the list could not be read). */
function pricesOf(receipt, prices) {
  const unit = prices ? ` (${prices.unit})` : ""; // the price list names the unit
  let label = "Prices billed";
  let item = receipt.prices;
  if (!item) {
    label = "Prices now";
    item = prices?.data.find((p) => p.model === receipt.model && p.input !== null);
  }
  if (!item) return [];
  const parts = [[item.input, "input"], [item.cached_input, "cached input"], [item.cache_write, "cache write"], [item.output, "output"]];
  return [[label, `${parts.map(([value, what]) => `${number(value)} ${what}`).join(" · ")}${unit}`]];
}

/** A receipt as a list of facts, in the order a reader checks them. */
function receiptFacts(receipt, keyNames, prices) {
  const facts = [
    ["Request", h("code", null, receipt.id)],
    ["Started", time(receipt.created)],
    ["Key", keyNames.get(receipt.key_id) ?? receipt.key_id],
    ["Model", modelOf(receipt)],
    ["API", receipt.api],
    ["Outcome", h("span", { class: `badge ${receipt.outcome}` }, OUTCOMES[receipt.outcome] ?? receipt.outcome)],
    ...known("Failovers", receipt.failovers),
    ["Input tokens", number(receipt.prompt_tokens)],
    ...known("Cached input tokens", receipt.cached_tokens),
    ...known("Cache-write tokens", receipt.cache_write_tokens),
    ["Output tokens", number(receipt.completion_tokens)],
    ...known("Reasoning tokens", receipt.reasoning_tokens),
    ["Total tokens", `${number(receipt.total_tokens)} (${SOURCES[receipt.usage_source] ?? receipt.usage_source})`],
    ["Credits used", number(receipt.credits_used)],
    ...pricesOf(receipt, prices),
    ["Paid from", paidFrom(receipt)],
    ["First token", `${number(receipt.ttfb_ms)} ms`],
    ["Duration", `${number(receipt.duration_ms)} ms`],
  ];
  return h("dl", { class: "facts" }, facts.map(([label, value]) => h("div", null, h("dt", null, label), h("dd", null, value))));
}

/** A request's receipt in a dialog, asked of the API as it opens. */
async function showReceipt(row, keyNames) {
  const body = h("div", { "aria-live": "polite" }, h("p", { class: "hint" }, "Fetching the receipt…"));
  const close = h("button", { type: "button", class: "secondary", onclick: () => dialog.close() }, "Close");
  const dialog = modal("Receipt", body, h("div", { class: "actions" }, close));
  close.focus();
  try {
    const prices = api("pricing").catch(() => null); // the unit, and the prices of a receipt that has none
    const receipt = await api(`activity/${encodeURIComponent(row.id)}`);
    fill(body, receiptFacts(receipt, keyNames, await prices));
  } catch (error) {
    fill(body, errorBox(error));
  }
}

/** A row's time, as the button that opens its receipt. */
function receiptButton(row, keyNames) {
  return h(
    "button",
    { type: "button", class: "link receipt", "aria-haspopup": "dialog", onclick: () => showReceipt(row, keyNames) },
    time(row.created, { compact: true }),
    h("span", { class: "visually-hidden" }, ", receipt"),
  );
}

/** The essential columns first (what a narrow screen shows without scrolling), then the rest. */
function columns(keyNames) {
  return [
    { label: "Time", cell: (row) => receiptButton(row, keyNames) },
    { label: "Model", cell: modelOf },
    { label: "Credits", number: true, cell: (row) => number(row.credits_used) },
    { label: "Outcome", cell: (row) => h("span", { class: `badge ${row.outcome}` }, OUTCOMES[row.outcome] ?? row.outcome) },
    { label: "Key", cell: (row) => keyNames.get(row.key_id) ?? row.key_id },
    { label: "API", cell: (row) => row.api },
    { label: "Input tokens", number: true, cell: (row) => number(row.prompt_tokens) },
    { label: "Output tokens", number: true, cell: (row) => number(row.completion_tokens) },
    { label: "First token", number: true, cell: (row) => `${number(row.ttfb_ms)} ms` },
    { label: "Duration", number: true, cell: (row) => `${number(row.duration_ms)} ms` },
  ];
}

function select(id, name, label, options) {
  return h(
    "div",
    null,
    h("label", { for: id }, label),
    h("select", { id, name }, h("option", { value: "" }, "All"), options.map(([value, text]) => h("option", { value }, text))),
  );
}

export async function render(root) {
  const [keys, aliases] = await Promise.all([api("api-keys"), models()]);
  const keyNames = new Map(keys.data.map((k) => [k.id, `${k.name} (…${k.last4})`]));
  const filters = h(
    "form",
    { class: "filters", "aria-label": "Filters", novalidate: true },
    select("filter-key", "key_id", "Key", keys.data.map((k) => [k.id, keyNames.get(k.id)])),
    select("filter-model", "model", "Model", aliases.filter((a) => a !== AUTO_ALIAS).map((a) => [a, a])),
    h("div", null, h("label", { for: "filter-day" }, "Day (UTC)"), h("input", { id: "filter-day", name: "day", type: "date", max: todayUtc() })),
    h("div", null, h("button", { type: "submit" }, "Apply filters")),
  );
  const results = h("div", { "aria-live": "polite" });
  const exportError = h("div");
  let cursors = [null]; // the `after` of each page shown so far: the last is this page's

  const wanted = () => {
    const data = new FormData(filters);
    return { key_id: data.get("key_id"), model: data.get("model"), day: data.get("day") };
  };

  async function show() {
    const after = cursors[cursors.length - 1];
    let page;
    try {
      page = await api("activity", { query: { ...wanted(), limit: PAGE_SIZE, after } });
    } catch (error) {
      fill(results, errorBox(error));
      return;
    }
    const newer = h("button", { type: "button", class: "secondary", disabled: cursors.length === 1, onclick: () => { cursors.pop(); show(); } }, "Newer");
    const older = h("button", { type: "button", class: "secondary", disabled: !page.has_more, onclick: () => { cursors.push(page.last_id); show(); } }, "Older");
    const filtered = Object.values(wanted()).some(Boolean);
    fill(
      results,
      table({
        caption: `Requests, newest first (page ${cursors.length})`,
        columns: columns(keyNames),
        rows: page.data,
        layout: "essentials-first",
        empty: emptyState(
          filtered
            ? "No request matches these filters. Clear them to see every request."
            : ["No requests yet. Send one from the ", h("a", { href: "#/playground" }, "Playground"), " or from your app: each settled request appears here within seconds."],
        ),
      }),
      page.data.length || cursors.length > 1 ? h("div", { class: "paging", role: "group", "aria-label": "Pages" }, newer, older) : null,
    );
  }

  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    cursors = [null];
    show();
  });

  const exporting = (label, path, query, filename) =>
    h("button", {
      type: "button",
      class: "secondary",
      onclick: async () => {
        fill(exportError);
        try {
          await download(path, query(), filename);
        } catch (error) {
          fill(exportError, errorBox(error));
        }
      },
    }, label);

  root.append(
    filters,
    h("h2", null, "Requests"),
    h("p", { class: "hint" }, "Each request as it was settled: what it used, how it ended. A request's time opens its receipt. Times are yours; days are UTC, as svc counts them."),
    h("p", { class: "hint narrow-only" }, "Scroll the table sideways for each request's key, tokens and timings."),
    results,
    h("h2", null, "Export CSV"),
    h(
      "div",
      { class: "actions" },
      exporting("Activity (these filters)", "activity", () => ({ ...wanted(), format: "csv" }), "activity.csv"),
      exporting(`Usage by key (${EXPORT_DAYS} days)`, "usage", () => ({ days: EXPORT_DAYS, group_by: "key", format: "csv" }), "usage-by-key.csv"),
      exporting(`Usage by model (${EXPORT_DAYS} days)`, "usage", () => ({ days: EXPORT_DAYS, group_by: "model", format: "csv" }), "usage-by-model.csv"),
    ),
    exportError,
  );
  await show();
}
