// Bar charts drawn as SVG: stacked series per day, each bar titled (hover), with the numbers
// also in a table for screen readers and keyboard users.
import { h, number, s, table, utcDay } from "./dom.js";

const WIDTH = 480;
const HEIGHT = 220;
const PAD = { top: 12, right: 8, bottom: 26, left: 52 };
const SERIES_COLORS = 8;

/** A step that gives about four gridlines: 1, 2 or 5 times a power of ten. */
function gridStep(max) {
  const rough = max / 4;
  const power = 10 ** Math.floor(Math.log10(rough));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= rough);
}

function gridlines(max, y) {
  const step = gridStep(max);
  const lines = [];
  for (let value = 0; value <= max; value += step) {
    lines.push(
      s("line", { class: value === 0 ? "axis" : "grid", x1: PAD.left, x2: WIDTH - PAD.right, y1: y(value), y2: y(value) }),
      s("text", { x: PAD.left - 6, y: y(value) + 4, "text-anchor": "end" }, number(value)),
    );
  }
  return lines;
}

function dayLabels(days, x, band) {
  const every = Math.ceil(days.length / 5);
  const last = days.length - 1;
  return days.map((day, i) =>
    (last - i) % every === 0 // counted back from today, so today is always labelled
      ? s("text", { x: i === last ? x(i) + band : x(i) + band / 2, y: HEIGHT - 8, "text-anchor": i === last ? "end" : "middle" }, utcDay(day))
      : null,
  );
}

/**
 * days: ["YYYY-MM-DD", … oldest first]; series: [{name, values: [per day]}].
 * Returns the chart, its legend and a table of the same numbers.
 */
export function stackedBars({ title, unit, days, series }) {
  const totals = days.map((_, i) => series.reduce((sum, one) => sum + one.values[i], 0));
  const max = Math.max(1, ...totals);
  const top = gridStep(max) * Math.ceil(max / gridStep(max));
  const plotHeight = HEIGHT - PAD.top - PAD.bottom;
  const y = (value) => PAD.top + plotHeight - (value / top) * plotHeight;
  const slot = (WIDTH - PAD.left - PAD.right) / days.length;
  const band = Math.max(2, slot * 0.7);
  const x = (i) => PAD.left + i * slot + (slot - band) / 2;
  const bars = [];
  days.forEach((day, i) => {
    let base = 0;
    series.forEach((one, k) => {
      const value = one.values[i];
      if (value <= 0) return;
      const height = y(base) - y(base + value);
      base += value;
      bars.push(
        s(
          "rect",
          { class: `series-${k % SERIES_COLORS}`, x: x(i), y: y(base), width: band, height: Math.max(height, 1) },
          s("title", null, `${utcDay(day)} (UTC) · ${one.name}: ${number(value)} ${unit}`),
        ),
      );
    });
  });
  const grand = totals.reduce((a, b) => a + b, 0);
  const summary = `${title}: ${number(grand)} ${unit} over ${days.length} days, at most ${number(max)} in a day.`;
  const chart = s(
    "svg",
    { class: "chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": summary },
    gridlines(top, y),
    bars,
    dayLabels(days, x, band),
  );
  const legend = h(
    "ul",
    { class: "legend", "aria-label": `${title}: series` },
    series.map((one, k) =>
      h(
        "li",
        null,
        s("svg", { viewBox: "0 0 10 10", "aria-hidden": "true" }, s("rect", { class: `series-${k % SERIES_COLORS}`, width: 10, height: 10 })),
        one.name,
      ),
    ),
  );
  const columns = [
    { label: "Day (UTC)", cell: (i) => days[i] },
    ...series.map((one) => ({ label: one.name, number: true, cell: (i) => number(one.values[i]) })),
    { label: "Total", number: true, cell: (i) => number(totals[i]) },
  ];
  const rows = days.map((_, i) => i).filter((i) => totals[i] > 0).reverse();
  const numbers = h(
    "details",
    null,
    h("summary", null, `${title} as a table`),
    table({ caption: title, columns, rows, empty: h("p", { class: "hint" }, "Nothing in these days.") }),
  );
  return h("figure", { class: "chart-figure" }, h("figcaption", null, h("h3", null, title)), chart, series.length > 1 ? legend : null, numbers);
}
