// The console's only way to svc: the public /v1 API, with the key the owner signed in with.
// The key lives in this tab's sessionStorage: never a cookie, never the URL, never logged.

const KEY_SLOT = "svc-console-key";
const API_ROOT = new URL("/v1/", window.location.origin);
const KEY_SHAPE = /^svc_(live|test)_[0-9A-Za-z]{50}$/;

export class ApiError extends Error {
  /** An answer other than 2xx, as the API's error object says it (or a network failure). */
  constructor(status, error) {
    super(error?.message || `svc answered HTTP ${status}.`);
    this.name = "ApiError";
    this.status = status;
    this.code = error?.code ?? null;
    this.param = error?.param ?? null;
  }
}

// The signed-in key's role, as its own item in the key list says: kept in memory only (a
// reload asks the API again), so it is never older than the page and never stored.
let known = { key: null, role: null };

export const session = {
  key: () => window.sessionStorage.getItem(KEY_SLOT),
  environment() {
    const match = KEY_SHAPE.exec(this.key() ?? "");
    return match ? match[1] : null;
  },
  /** "admin" or "inference" once learned (learnRole); null until then. */
  role() {
    return known.key !== null && known.key === this.key() ? known.role : null;
  },
  /** Whether a key-list item is the signed-in key (its last four characters and environment). */
  isOwn(item) {
    const secret = this.key() ?? "";
    return secret.endsWith(item.last4) && secret.startsWith(`svc_${item.environment}_`);
  },
  /**
   * Learn the role from the account's key list; whether it changed. Two active items that
   * look alike (same last four and environment) count as the lesser role: the console then
   * shows less than the key may do, never more (the API decides either way).
   */
  learnRole(items) {
    const own = items.filter((item) => item.status === "active" && this.isOwn(item));
    const role = own.length > 0 && own.every((item) => item.role === "admin") ? "admin" : "inference";
    const changed = this.role() !== role;
    known = { key: this.key(), role };
    return changed;
  },
  /** Why the key cannot manage keys and webhooks ("test", "inference"), or null: it can. */
  limit() {
    if (this.environment() !== "live") return "test";
    return this.role() === "admin" ? null : "inference";
  },
  readOnly() {
    return this.limit() !== null;
  },
  remember: (key) => window.sessionStorage.setItem(KEY_SLOT, key),
  forget: () => {
    window.sessionStorage.removeItem(KEY_SLOT);
    known = { key: null, role: null };
  },
};

/** Whether text has the form of an svc key (svc checks it for real on the first call). */
export const looksLikeKey = (text) => KEY_SHAPE.test(text);

/** A key as the console may show it: the prefix and the last four characters. */
export const maskedKey = (key) => `${key.slice(0, 9)}…${key.slice(-4)}`;

/** The API's base URL, as a client configures it. */
export const apiBase = () => API_ROOT.href.replace(/\/$/, "");

let keyRefused = () => {};
/** What to do when svc refuses the signed-in key (revoked, expired, …): sign out. */
export function onKeyRefused(handler) {
  keyRefused = handler;
}

export function apiUrl(path, query = {}) {
  const url = new URL(path, API_ROOT);
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
  }
  return url;
}

async function errorOf(response) {
  let payload = null;
  try {
    payload = await response.json();
  } catch {
    // not JSON: the status says it
  }
  return new ApiError(response.status, payload?.error);
}

/** One call; answers other than 2xx throw ApiError with the API's message. */
export async function send(path, { method = "GET", query, body, headers = {}, signal } = {}) {
  const init = {
    method,
    signal,
    headers: { authorization: `Bearer ${session.key()}`, ...headers },
    cache: "no-store",
    credentials: "omit",
    referrerPolicy: "no-referrer",
  };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(apiUrl(path, query), init);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, { message: "svc could not be reached: check the connection and try again." });
  }
  if (!response.ok) {
    const error = await errorOf(response);
    if (response.status === 401) keyRefused(error.message);
    throw error;
  }
  return response;
}

/** A call's JSON answer. */
export async function api(path, options) {
  return (await send(path, options)).json();
}

/** A call that creates something: retried safely under one Idempotency-Key. */
export async function create(path, body) {
  const headers = { "idempotency-key": `console-${crypto.randomUUID()}` };
  return api(path, { method: "POST", body, headers });
}

/** Save a CSV answer as a file (the key goes in the header, so a plain link cannot). */
export async function download(path, query, filename) {
  const blob = await (await send(path, { query })).blob();
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** The model aliases the signed-in key may use. */
export async function models() {
  return (await api("models")).data.map((model) => model.id);
}
