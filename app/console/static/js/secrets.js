// Showing a new secret (a key's, a webhook's) the one time svc gives it out.
import { announce, h, modal } from "./dom.js";

async function copy(input) {
  try {
    await navigator.clipboard.writeText(input.value);
  } catch {
    input.select(); // the clipboard is not allowed here: selected for the viewer to copy
    return false;
  }
  return true;
}

/**
 * A dialog with the secret, a copy button and the warning that it is never shown again;
 * closing it clears the secret from the page. Returns a promise that settles on close.
 */
export function showSecret({ title, label, secret, details = [] }) {
  const field = h("input", { id: "new-secret", name: "secret", readonly: true, value: secret, spellcheck: "false", autocomplete: "off" });
  const status = h("p", { class: "hint", role: "status" });
  const copyButton = h("button", {
    type: "button",
    class: "secondary",
    onclick: async () => {
      const copied = await copy(field);
      status.textContent = copied ? "Copied to the clipboard." : "Selected: press Ctrl+C (⌘C) to copy.";
      announce(status.textContent);
    },
  }, "Copy");
  const forget = () => {
    field.value = ""; // gone from the page with the dialog
  };
  const done = h("button", { type: "button", onclick: () => { forget(); dialog.close(); } }, "I have saved it");
  const dialog = modal(
    title,
    h("p", { class: "notice", role: "note" }, "This is the only time the secret is shown: svc keeps only a hash of it. Copy it and store it somewhere safe now."),
    ...details,
    h("label", { for: "new-secret" }, label),
    h("div", { class: "secret" }, field, copyButton),
    status,
    h("div", { class: "actions" }, done),
  );
  copyButton.focus();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      forget(); // closed with Escape, too
      resolve();
    });
  });
}

/** A yes/no question in a dialog; resolves true when the viewer confirms. */
export function confirmDialog({ title, text, confirm, danger = true }) {
  return new Promise((resolve) => {
    let answer = false;
    const yes = h("button", { type: "button", class: danger ? "danger" : null, onclick: () => { answer = true; dialog.close(); } }, confirm);
    const no = h("button", { type: "button", class: "secondary", onclick: () => dialog.close() }, "Cancel");
    const dialog = modal(title, ...text.map((line) => h("p", null, line)), h("div", { class: "actions" }, no, yes));
    no.focus();
    dialog.addEventListener("close", () => resolve(answer));
  });
}
