// The credit ledger in words: what each entry's kind and source are called, its signed
// figures, and the table the Ledger page and the overview both show it in.
import { h, number, table, time } from "./dom.js";

/** An entry's `kind` as a reader says it. */
export const KINDS = {
  purchase: "Purchase",
  reward: "Reward",
  grant: "Grant",
  refund: "Refund",
  dispute: "Dispute",
  dispute_won: "Dispute won",
  debit: "Debit",
  expiry: "Expired",
};

/** Where credits came from or went (an entry's `source`, a reward's `network`). */
export const SOURCES = {
  stripe: "Stripe",
  apple: "Apple",
  google: "Google",
  admob: "AdMob",
  applovin: "AppLovin MAX",
  levelplay: "Unity LevelPlay",
  signed: "Verifier",
  operator: "Operator",
  dev: "Development",
  svc: "svc",
};

/** The kinds of money bought and taken back (the overview's "Purchases and refunds"). */
export const MONEY_KINDS = new Set(["purchase", "grant", "refund", "dispute", "dispute_won", "debit"]);

const MINUS = "\u2212"; // a true minus sign: as wide as the plus, read "minus"

/** A signed count: "+1,250", "−4,000", "0". */
export function signed(value) {
  if (value === 0) return "0";
  return `${value > 0 ? "+" : MINUS}${number(Math.abs(value))}`;
}

/** The entry's kind, marked when it is not in the balance yet. */
function kindOf(entry) {
  const word = KINDS[entry.kind] ?? entry.kind;
  if (entry.status !== "pending") return word;
  return [word, " ", h("span", { class: "badge pending", title: "Recorded, not yet in the balance: svc applies it by itself" }, "pending")];
}

/** The source's own id (a Checkout Session, a view) and the operator's reason, when given. */
function detailOf(entry) {
  const parts = [];
  if (entry.reference) parts.push(h("code", null, entry.reference));
  if (entry.reference && entry.reason) parts.push(" · ");
  if (entry.reason) parts.push(entry.reason);
  return parts.length ? parts : h("span", { class: "hint" }, "—");
}

/** Entries as a table, newest first as the API lists them; `empty` when there are none. */
export function ledgerTable({ caption, rows, empty }) {
  return table({
    caption,
    columns: [
      { label: "Date", cell: (e) => time(e.created_at, { compact: true }) },
      { label: "Kind", cell: kindOf },
      { label: "Credits", number: true, cell: (e) => signed(e.credits) },
      { label: "Debt", number: true, cell: (e) => (e.debt_change === 0 ? "" : signed(e.debt_change)) },
      { label: "Source", cell: (e) => SOURCES[e.source] ?? e.source },
      { label: "Reference or reason", cell: detailOf },
    ],
    rows,
    empty,
  });
}
