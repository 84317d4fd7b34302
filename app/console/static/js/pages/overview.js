// Overview: the balance and where it went, and what needs a look.
import { api } from "../api.js";
import { stackedBars } from "../chart.js";
import { dateOf, emptyState, h, number, table, time, todayUtc } from "../dom.js";
import { MONEY_KINDS, SOURCES, ledgerTable } from "../ledger.js";
import { pricingSection } from "../pricing.js";

export const TITLE = "Overview";
const CHART_DAYS = 30;
const EARNED_WARNING_MS = 3 * 86_400_000; // earned credits about to expire: under 3 days
const KEY_EXPIRY_NOTICE_MS = 7 * 86_400_000;
const CAP_NOTICE = 0.8; // a key at 80 % of its daily cap
const MONEY_LINES = 5; // purchases and refunds shown; the Ledger page has the rest

function card(title, figure, ...lines) {
  return h("section", { class: "card", "aria-label": title }, h("h2", null, title), h("p", { class: "figure" }, figure), ...lines);
}

function balanceCards(credits, today) {
  const expires = dateOf(credits.earned_expires_at);
  const soon = expires && credits.earned_available > 0 && expires - Date.now() < EARNED_WARNING_MS;
  return h(
    "div",
    { class: "cards" },
    card("Total balance", number(credits.total_available), h("p", { class: "hint" }, "credits available now")),
    card("Purchased", number(credits.purchased_available), h("p", { class: "hint" }, "never expire")),
    card(
      "Earned",
      number(credits.earned_available),
      expires ? h("p", null, "Expire ", time(credits.earned_expires_at)) : h("p", { class: "hint" }, "none waiting"),
      soon ? h("p", { class: "notice", role: "note" }, "Under 3 days left: these are spent first.") : null,
    ),
    card(
      "Spent today (UTC)",
      number(today?.credits_spent ?? 0),
      h("p", { class: "hint" }, `${number(today?.requests_count ?? 0)} requests · ${number(today?.total_tokens ?? 0)} tokens`),
    ),
  );
}

/** Earned credits, view by view: what each reward gave and the expiry it set. */
function rewardsSection(rewards) {
  const summary = `${number(rewards.rewards_today)} of ${number(rewards.daily_limit)} rewards today (UTC), ${number(rewards.credits_per_reward)} credits each.`;
  return h(
    "section",
    { "aria-label": "Spotlight rewards" },
    h("h2", null, "Spotlight rewards"),
    h("p", { class: "hint" }, summary),
    table({
      caption: "Latest spotlight rewards",
      columns: [
        { label: "Time", cell: (r) => time(r.granted_at) },
        { label: "Network", cell: (r) => SOURCES[r.network] ?? r.network },
        { label: "View", cell: (r) => h("code", null, r.view_id) },
        { label: "Credits", number: true, cell: (r) => number(r.credits) },
        { label: "Earned credits expire", cell: (r) => time(r.earned_expires_at) },
      ],
      rows: rewards.data,
      empty: h("div", { class: "empty" }, "No spotlight rewards yet: each verified view in the companion app earns credits here."),
    }),
  );
}

/** Credits bought and taken back: the latest purchases, grants, refunds, disputes and debits. */
function moneySection(ledger) {
  const rows = ledger.data; // the money kinds only: the API filters them (kind=)
  return h(
    "section",
    { "aria-label": "Purchases and refunds" },
    h("h2", null, "Purchases and refunds"),
    h("p", { class: "hint" }, "Credits bought and taken back, newest first. Every entry, rewards and expiries included, is in the ", h("a", { href: "#/ledger" }, "Ledger"), "."),
    ledgerTable({
      caption: "Latest purchases and refunds",
      rows,
      empty: emptyState("No purchases or refunds yet: credits bought, and any refund or chargeback of them, appear here."),
    }),
  );
}

/** The last CHART_DAYS UTC days, oldest first, each with its groups by model. */
function chartData(usage) {
  const daily = [...usage.daily].reverse();
  const days = daily.map((d) => d.day_bucket);
  const models = [...new Set(daily.flatMap((d) => (d.groups ?? []).map((g) => g.model)))].sort();
  const series = models.map((model) => ({
    name: model,
    values: daily.map((d) => (d.groups ?? []).find((g) => g.model === model)?.credits_spent ?? 0),
  }));
  const requests = [{ name: "Requests", values: daily.map((d) => d.requests_count) }];
  return { days, series, requests };
}

function attentionItems(credits, keys) {
  const items = [];
  const now = Date.now();
  const expires = dateOf(credits.earned_expires_at);
  if (expires && credits.earned_available > 0 && expires - now < EARNED_WARNING_MS) {
    items.push(h("li", null, `${number(credits.earned_available)} earned credits expire `, time(credits.earned_expires_at), "."));
  }
  if (credits.total_available === 0) items.push(h("li", null, "The balance is 0: every request is refused until credits are added."));
  const rotated = new Set(keys.filter((k) => k.status === "active" && k.replaces).map((k) => k.replaces)); // in a grace period
  for (const key of keys.filter((k) => k.status === "active")) {
    const cap = key.daily_cap_credits;
    if (cap !== null && key.used_today_credits >= cap * CAP_NOTICE) {
      const share = cap === 0 ? 100 : Math.round((key.used_today_credits / cap) * 100);
      items.push(h("li", null, `Key “${key.name}” has used ${share} % of its daily cap (${number(key.used_today_credits)} of ${number(cap)} credits).`));
    }
    const keyExpires = dateOf(key.expires_at);
    if (keyExpires && keyExpires > now && keyExpires - now < KEY_EXPIRY_NOTICE_MS) {
      items.push(
        rotated.has(key.id)
          ? h("li", null, `The old “${key.name}” key (rotated) stops working `, time(key.expires_at), ": switch its apps to the new one.")
          : h("li", null, `Key “${key.name}” expires `, time(key.expires_at), ": rotate it or set a new expiry."),
      );
    }
  }
  return items;
}

export async function render(root) {
  const [credits, usage, keys, rewards, prices, ledger] = await Promise.all([
    api("credits"),
    api("usage", { query: { days: CHART_DAYS, group_by: "model" } }),
    api("api-keys"),
    api("spotlights/rewards", { query: { limit: 10 } }),
    api("pricing"),
    api("credits/ledger", { query: { limit: MONEY_LINES, kind: [...MONEY_KINDS].join(",") } }),
  ]);
  const today = usage.daily.find((d) => d.day_bucket === todayUtc());
  const { days, series, requests } = chartData(usage);
  const attention = attentionItems(credits, keys.data);
  root.append(
    balanceCards(credits, today),
    h("h2", null, "Next to look at"),
    attention.length
      ? h("ul", { class: "attention" }, attention)
      : h("p", { class: "hint" }, "Nothing needs your attention: no key is near its cap or about to expire."),
    h("h2", null, `The last ${CHART_DAYS} days`),
    usage.requests_count === 0
      ? h("div", { class: "empty" }, "No requests yet. Try one in the ", h("a", { href: "#/playground" }, "Playground"), ", or point any OpenAI SDK at this server with a key.")
      : h(
          "div",
          { class: "split" },
          stackedBars({ title: "Credits by model", unit: "credits", days, series }),
          stackedBars({ title: "Requests", unit: "requests", days, series: requests }),
        ),
    moneySection(ledger),
    rewardsSection(rewards),
    pricingSection(prices),
  );
}
