// Pricing: what each model the key may use costs, as GET /v1/pricing answers it.
import { h, number, table } from "./dom.js";

const price = (value) => (value === null ? "—" : number(value));

/** The price list as a section: the table, the unit and the rounding rule. */
export function pricingSection(prices) {
  return h(
    "section",
    { "aria-label": "Pricing" },
    h("h2", null, "Pricing"),
    h("p", { class: "hint" }, `Prices in ${prices.unit}. A request costs `, h("code", null, prices.formula), "."),
    h("p", { class: "hint" }, prices.rounding),
    table({
      caption: `Prices, ${prices.unit}`,
      columns: [
        { label: "Model", cell: (p) => h("code", null, p.model) },
        { label: "Input", number: true, cell: (p) => price(p.input) },
        { label: "Cached input", number: true, cell: (p) => price(p.cached_input) },
        { label: "Cache write", number: true, cell: (p) => price(p.cache_write) },
        { label: "Output", number: true, cell: (p) => price(p.output) },
        { label: "Max output tokens", number: true, cell: (p) => number(p.max_output_tokens) },
        { label: "Priced as", cell: (p) => (p.routes_to ? p.routes_to.join(", ") : "itself") },
      ],
      rows: prices.data,
      empty: h("div", { class: "empty" }, "This key may use no model."),
    }),
  );
}
