// Ledger: every credit into or out of the account's pools outside a request, newest first,
// a page at a time, as GET /v1/credits/ledger lists them.
import { api } from "../api.js";
import { emptyState, errorBox, fill, h } from "../dom.js";
import { ledgerTable } from "../ledger.js";

export const TITLE = "Ledger";
const PAGE_SIZE = 25;

export async function render(root) {
  const results = h("div", { "aria-live": "polite" });
  const cursors = [null]; // the `after` of each page shown so far: the last is this page's

  async function show() {
    let page;
    try {
      page = await api("credits/ledger", { query: { limit: PAGE_SIZE, after: cursors[cursors.length - 1] } });
    } catch (error) {
      fill(results, errorBox(error));
      return;
    }
    const last = page.data[page.data.length - 1];
    const newer = h("button", { type: "button", class: "secondary", disabled: cursors.length === 1, onclick: () => { cursors.pop(); show(); } }, "Newer");
    const older = h("button", { type: "button", class: "secondary", disabled: !page.has_more, onclick: () => { cursors.push(last.id); show(); } }, "Older");
    fill(
      results,
      ledgerTable({
        caption: `Ledger entries, newest first (page ${cursors.length})`,
        rows: page.data,
        empty: emptyState("No credits have come in or gone out yet. Purchases, rewards, operators' grants, refunds and expired credits appear here as they happen."),
      }),
      page.data.length || cursors.length > 1 ? h("div", { class: "paging", role: "group", "aria-label": "Pages" }, newer, older) : null,
    );
  }

  root.append(
    h(
      "p",
      { class: "hint" },
      "Each entry is how the pools moved (Credits) and how the debt did (Debt): a refund or a chargeback of credits already spent is owed, and the next credits in pay it first. A pending entry is recorded but not yet in the balance; svc applies it by itself.",
    ),
    h("p", { class: "hint narrow-only" }, "Scroll the table sideways for each entry's source and reference."),
    results,
  );
  await show();
}
