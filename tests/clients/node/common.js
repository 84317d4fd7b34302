// What every client script shares: its arguments and its one line of output.
//
//   node <client>.js BASE_URL MODEL SCENARIO     (the API key in SVC_API_KEY)
//
// SCENARIO names the messages to send, from ../scenarios.json (the Python tests read the same
// file), or is one of the tool scenarios of ../tools.json: "tools" (the question with the tool
// offered: the model calls it) or "tool-result" (that, then the tool's result sent back: the
// model answers in text). The script prints ONE JSON line on stdout: what the client saw.
import { readFileSync } from "node:fs";

const TOOL_SCENARIOS = ["tools", "tool-result"];

export function args() {
  const [baseURL, model, scenario] = process.argv.slice(2);
  const scenarios = JSON.parse(readFileSync(new URL("../scenarios.json", import.meta.url)));
  const tools = JSON.parse(readFileSync(new URL("../tools.json", import.meta.url)));
  const toolScenario = TOOL_SCENARIOS.includes(scenario);
  const messages = toolScenario ? tools.ask : scenarios[scenario];
  if (!baseURL || !model || !messages || !process.env.SVC_API_KEY) {
    console.error("usage: SVC_API_KEY=... node <client>.js BASE_URL MODEL SCENARIO");
    process.exit(2);
  }
  const tool = toolScenario ? { ...tools.tool, result: tools.result } : null;
  return { baseURL, apiKey: process.env.SVC_API_KEY, model, scenario, messages, tool };
}

// undefined (a field the client left out) and NaN become null, so the line keeps every key.
export function emit(result) {
  const line = JSON.stringify(result, (_, v) => (v === undefined || Number.isNaN(v) ? null : v));
  process.stdout.write(line + "\n");
}

export function failure(error) {
  return {
    class: error?.constructor?.name ?? null,
    name: error?.name ?? null,
    status: error?.status ?? error?.statusCode ?? null,
    message: String(error?.message ?? error),
  };
}
