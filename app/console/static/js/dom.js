// Building the page: elements from data (text only, never HTML strings), numbers and dates.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : String(child));
  }
  return parent;
}

function assign(element, props) {
  for (const [name, value] of Object.entries(props ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else if (name === "value" || name === "checked") {
      element[name] = value;
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  return element;
}

/** An HTML element: h("button", {type: "button", onclick}, "Save"). */
export const h = (tag, props, ...children) => append(assign(document.createElement(tag), props), children);

/** An SVG element, the same way. */
export const s = (tag, props, ...children) => append(assign(document.createElementNS(SVG_NS, tag), props), children);

/** Replace everything inside an element. */
export function fill(element, ...children) {
  element.replaceChildren();
  return append(element, children);
}

const NUMBER = new Intl.NumberFormat();
/** A count with the viewer's thousands separators. */
export const number = (value) => NUMBER.format(value);

const LOCAL = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
const LOCAL_DAY = new Intl.DateTimeFormat(undefined, { dateStyle: "medium" });
const LOCAL_THIS_YEAR = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "numeric", minute: "2-digit" });

/** A Date from unix seconds or an ISO 8601 string; null stays null. */
export function dateOf(value) {
  if (value === null || value === undefined) return null;
  return typeof value === "number" ? new Date(value * 1000) : new Date(value);
}

/** When, in the viewer's zone; UTC on hover. `compact`: no year when it is this year's. */
export function time(value, { dayOnly = false, never = "Never", compact = false } = {}) {
  const date = dateOf(value);
  if (date === null) return h("span", { class: "hint" }, never);
  const utc = `${date.toISOString().slice(0, 19).replace("T", " ")} UTC`;
  if (compact && !dayOnly && date.getFullYear() === new Date().getFullYear()) {
    return h("time", { datetime: date.toISOString(), title: utc }, dayAndHour(date));
  }
  const shown = (dayOnly ? LOCAL_DAY : LOCAL).format(date);
  return h("time", { datetime: date.toISOString(), title: utc }, shown);
}

/** "Nov 25, 6:24 PM" as two unbreakable pieces: a narrow column wraps it between them only. */
function dayAndHour(date) {
  const parts = LOCAL_THIS_YEAR.formatToParts(date);
  const split = parts.findIndex((part) => part.type === "hour");
  const text = (list) => list.map((part) => part.value).join("");
  if (split <= 0) return text(parts);
  return [h("span", { class: "nowrap" }, text(parts.slice(0, split)).trim()), " ", h("span", { class: "nowrap" }, text(parts.slice(split)))];
}

/** A UTC day (YYYY-MM-DD) as the viewer reads dates; the day itself on hover. */
export function utcDay(day) {
  const [year, month, date] = day.split("-").map(Number);
  const format = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", timeZone: "UTC" });
  return format.format(new Date(Date.UTC(year, month - 1, date)));
}

/** Today as svc counts days: UTC. */
export const todayUtc = () => new Date().toISOString().slice(0, 10);

/** Tell screen readers what just happened. */
export function announce(text) {
  const region = document.getElementById("announcer");
  region.textContent = "";
  window.setTimeout(() => {
    region.textContent = text;
  }, 50);
}

/** An error as the API worded it, announced. */
export const errorBox = (error) => h("p", { class: "error", role: "alert" }, error.message);

/** What an empty list shows: what it is and what to do next. */
export const emptyState = (...children) => h("div", { class: "empty" }, ...children);

/**
 * A table in a scrollable region: columns are {label, cell(row), number?}; `layout` adds
 * classes to the region ("sticky-actions": the last column stays in view while the others
 * scroll sideways). Rows with no entries show the empty state instead.
 */
export function table({ caption, columns, rows, empty, layout = "" }) {
  if (rows.length === 0) return empty;
  const head = h("tr", null, columns.map((c) => h("th", { scope: "col", class: c.number ? "number" : null }, c.label)));
  const body = rows.map((row) => h("tr", null, columns.map((c) => h("td", { class: c.number ? "number" : null }, c.cell(row)))));
  return h(
    "div",
    { class: `table-wrap ${layout}`.trim(), tabindex: "0", role: "region", "aria-label": caption },
    h("table", null, h("caption", null, caption), h("thead", null, head), h("tbody", null, body)),
  );
}

/** A badge for a status word. */
export const badge = (word) => h("span", { class: `badge ${word}` }, word);

/** A modal dialog (the browser's own: focus stays inside, Escape closes it), removed once closed. */
export function modal(title, ...content) {
  const titleId = `dialog-${crypto.randomUUID()}`;
  const dialog = h("dialog", { "aria-labelledby": titleId }, h("h2", { id: titleId }, title), ...content);
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
  return dialog;
}

/** Mark the field an API error names (its `param`) and move the focus to it. */
export function markInvalid(form, error) {
  for (const field of form.querySelectorAll("[aria-invalid]")) field.removeAttribute("aria-invalid");
  const field = error.param ? form.querySelector(`[name="${CSS.escape(error.param)}"]`) : null;
  if (field) {
    field.setAttribute("aria-invalid", "true");
    field.focus();
  }
}
