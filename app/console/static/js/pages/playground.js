// Playground: one chat completion, streamed token by token, with what it cost, and the same
// request as code.
import { apiBase, maskedKey, models, send, session } from "../api.js";
import { announce, errorBox, fill, h, number } from "../dom.js";

export const TITLE = "Playground";
const DEFAULT_MESSAGE = "Say hello in five words.";
const LANGUAGES = ["curl", "Python", "Node"];

/** The request as code, with the key masked (the viewer pastes their own). */
function snippet(language, model, message) {
  const key = maskedKey(session.key());
  const json = JSON.stringify({ model, stream: true, messages: [{ role: "user", content: message }] });
  const quoted = JSON.stringify(message);
  if (language === "curl") {
    const body = json.replaceAll("'", "'\\''");
    return `curl ${apiBase()}/chat/completions \\\n  -H "Authorization: Bearer ${key}" \\\n  -H "Content-Type: application/json" \\\n  -d '${body}'`;
  }
  if (language === "Python") {
    return [
      "from openai import OpenAI",
      "",
      `client = OpenAI(base_url="${apiBase()}", api_key="${key}")`,
      "stream = client.chat.completions.create(",
      `    model="${model}",`,
      `    messages=[{"role": "user", "content": ${quoted}}],`,
      "    stream=True,",
      ")",
      "for chunk in stream:",
      "    if chunk.choices:",
      '        print(chunk.choices[0].delta.content or "", end="")',
    ].join("\n");
  }
  return [
    'import OpenAI from "openai";',
    "",
    `const client = new OpenAI({ baseURL: "${apiBase()}", apiKey: "${key}" });`,
    "const stream = await client.chat.completions.create({",
    `  model: "${model}",`,
    `  messages: [{ role: "user", content: ${quoted} }],`,
    "  stream: true,",
    "});",
    "for await (const chunk of stream) {",
    '  process.stdout.write(chunk.choices[0]?.delta?.content ?? "");',
    "}",
  ].join("\n");
}

/** The data lines of a Server-Sent Events body, as they arrive. */
async function* events(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of block.split("\n")) {
        if (line.startsWith("data:")) yield line.slice(5).trim();
      }
    }
  }
}

function metadataList(meta, usage) {
  const item = (label, value) => h("div", null, h("dt", null, label), h("dd", null, value));
  return h(
    "dl",
    { class: "metadata", "aria-label": "What the request used" },
    item("Credits used", number(meta.credits_used)),
    item("Balance remaining", number(meta.balance_remaining)),
    usage ? item("Input tokens", number(usage.prompt_tokens)) : null,
    usage ? item("Output tokens", number(usage.completion_tokens)) : null,
  );
}

export async function render(root) {
  const aliases = await models();
  if (aliases.length === 0) {
    root.append(h("p", { class: "empty" }, "This key may use no model: edit its allowed models on the Keys page."));
    return;
  }
  const model = h("select", { id: "play-model", name: "model" }, aliases.map((alias) => h("option", { value: alias }, alias)));
  const message = h("textarea", { id: "play-message", name: "message", rows: 4 });
  message.value = DEFAULT_MESSAGE;
  const sendButton = h("button", { type: "submit" }, "Send");
  const stopButton = h("button", { type: "button", class: "secondary", disabled: true }, "Stop");
  const output = h("div", { class: "output", id: "play-output", "aria-label": "Answer", role: "region", tabindex: "0" });
  const meta = h("div", { id: "play-metadata" });
  const code = h("pre", { id: "play-code", tabindex: "0", "aria-label": "The request as code" });
  let language = LANGUAGES[0];
  const tabs = LANGUAGES.map((name) =>
    h("button", { type: "button", class: "secondary", "aria-pressed": String(name === language), onclick: () => { language = name; showCode(); } }, name),
  );
  const showCode = () => {
    tabs.forEach((tab) => tab.setAttribute("aria-pressed", String(tab.textContent === language)));
    fill(code, h("code", null, snippet(language, model.value, message.value)));
  };
  model.addEventListener("change", showCode);
  message.addEventListener("input", showCode);
  showCode();

  let running = null;
  stopButton.addEventListener("click", () => running?.abort());
  const form = h(
    "form",
    { novalidate: true, "aria-label": "Chat completion" },
    h("label", { for: "play-model" }, "Model"),
    model,
    h("label", { for: "play-message" }, "Message"),
    message,
    h("div", { class: "actions" }, sendButton, stopButton),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    running = new AbortController();
    sendButton.disabled = true;
    stopButton.disabled = false;
    fill(output);
    fill(meta);
    output.setAttribute("aria-busy", "true");
    const body = {
      model: model.value,
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: message.value }],
    };
    let usage = null;
    let failure = null; // an error event mid-stream: the metadata chunk still follows
    try {
      const response = await send("chat/completions", { method: "POST", body, signal: running.signal });
      for await (const data of events(response.body)) {
        if (data === "[DONE]") break;
        const chunk = JSON.parse(data);
        if (chunk.error) failure = errorBox(chunk.error);
        const text = chunk.choices?.[0]?.delta?.content;
        if (text) output.append(text);
        if (chunk.usage) usage = chunk.usage;
        if (chunk.svc) fill(meta, failure, metadataList(chunk.svc, usage));
      }
      announce(failure ? "The answer stopped early." : "The answer is complete.");
    } catch (error) {
      if (error.name !== "AbortError" && session.key()) fill(meta, errorBox(error));
      if (error.name === "AbortError") announce("Stopped.");
    } finally {
      output.removeAttribute("aria-busy");
      sendButton.disabled = false;
      stopButton.disabled = true;
      running = null;
    }
  });

  root.append(
    h("p", { class: "hint" }, "Every request here is real: it is charged to the account like any other."),
    form,
    h("h2", null, "Answer"),
    output,
    meta,
    h("h2", null, "The same request in code"),
    h("div", { class: "tabs", role: "group", "aria-label": "Language" }, tabs),
    code,
  );
}
