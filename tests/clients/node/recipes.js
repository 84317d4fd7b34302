// The Node recipes of docs/clients.md, run as written there against a real svc server
// (tests/e2e/test_client_recipes.py drives them):
//
//   node recipes.js BASE_URL MODEL RECIPE     (the API key in SVC_API_KEY)
//
// RECIPE, on the Vercel AI SDK's @ai-sdk/openai-compatible provider unless said otherwise
// (SVC_PLAIN=1: without its includeUsage and supportsStructuredOutputs options):
//   text       streamText with includeUsage: text, finish, usage, svc's metadata (raw chunks)
//   object     streamText with Output.object and supportsStructuredOutputs: the partial objects
//              and the parsed, validated object (or the error)
//   tool-json  a tool round trip whose result is sent as `output: { type: "json", value }`;
//              SVC_PROVIDER picks the provider: compatible (default), openai (@ai-sdk/openai's
//              .chat) or responses (@ai-sdk/openai's default, the Responses API)
//   generate   generateText, which does not stream: what the SDK makes of svc's stream
//   retry      streamText with the SDK's default retries: how many requests one call sends
//   openai-retry  the same with the official OpenAI SDK (its default maxRetries)
//
// Every recipe passes a fetch that records each request body it sends (`sent`): the tests check
// what went over the wire (response_format, stream_options, the tool message, the attempts).
// It prints ONE JSON line: what the client saw.
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, Output, streamText, tool as defineTool } from "ai";
import { readFileSync } from "node:fs";
import OpenAI from "openai";
import { z } from "zod";
import { emit, failure } from "./common.js";

const [baseURL, modelId, recipe] = process.argv.slice(2);
const apiKey = process.env.SVC_API_KEY;
if (!baseURL || !modelId || !recipe || !apiKey) {
  console.error("usage: SVC_API_KEY=... node recipes.js BASE_URL MODEL RECIPE");
  process.exit(2);
}
const tools = JSON.parse(readFileSync(new URL("../tools.json", import.meta.url)));

// The SDK prints its warnings on stdout, which carries the one line: the recipes report them.
globalThis.AI_SDK_LOG_WARNINGS = false;

const sent = [];
async function recordingFetch(url, init) {
  sent.push(JSON.parse(init.body));
  return fetch(url, init);
}

// The provider as the docs configure it: usage asked for, structured outputs on. SVC_PLAIN=1
// leaves both options out (their default: false), to show what they change.
const options = { includeUsage: true, supportsStructuredOutputs: true };
const svc = createOpenAICompatible({
  name: "svc",
  baseURL,
  apiKey,
  ...(process.env.SVC_PLAIN === "1" ? {} : options),
  fetch: recordingFetch,
});

function model() {
  const provider = process.env.SVC_PROVIDER ?? "compatible";
  if (provider === "compatible") return svc(modelId);
  const openai = createOpenAI({ baseURL, apiKey, fetch: recordingFetch });
  return provider === "responses" ? openai(modelId) : openai.chat(modelId);
}

// Reads a stream's parts: text, tool calls, the finish and usage, svc's metadata (raw chunks:
// on the last chat chunk, on the response of the Responses API's last event), errors.
async function read(result) {
  const seen = { text: "", finishReason: null, toolCalls: [], usage: null, svc: null, error: null };
  for await (const part of result.fullStream) {
    if (part.type === "text-delta") seen.text += part.text;
    if (part.type === "tool-call") {
      seen.toolCalls.push({ id: part.toolCallId, name: part.toolName, input: part.input });
    }
    if (part.type === "raw") {
      seen.svc = part.rawValue?.svc ?? part.rawValue?.response?.svc ?? seen.svc;
    }
    if (part.type === "error") seen.error = failure(part.error);
    if (part.type === "finish") {
      seen.finishReason = part.finishReason;
      const { inputTokens, outputTokens, totalTokens } = part.totalUsage;
      seen.usage = { inputTokens, outputTokens, totalTokens };
    }
  }
  return seen;
}

const quiet = { onError: () => {} }; // the error part records it; the default logs to stderr

async function text() {
  const result = streamText({
    model: model(),
    prompt: "Say hello in five words.",
    includeRawChunks: true,
    maxRetries: 0,
    ...quiet,
  });
  return read(result);
}

const City = z.object({
  name: z.string(),
  country: z.string(),
  population: z.number().int(),
  tags: z.array(z.enum(["coastal", "capital", "old"])),
});

async function object() {
  const result = streamText({
    model: model(),
    output: Output.object({ schema: City, name: "city" }),
    prompt: "Describe one city as JSON.",
    maxRetries: 0,
    ...quiet,
  });
  const partials = [];
  try {
    for await (const partial of result.partialOutputStream) partials.push(partial);
    const object = await result.output; // parsed, and checked against the schema
    const [usage, warnings] = [await result.totalUsage, await result.warnings];
    return { partials: partials.length, object, usage, warnings, error: null };
  } catch (error) {
    const warnings = await result.warnings;
    return { partials: partials.length, object: null, warnings, error: failure(error) };
  }
}

// The tool without execute, as in vercel-ai.js: the call ends the step, then the result goes
// back in the JSON form.
async function toolJson() {
  const getWeather = defineTool({
    description: tools.tool.description,
    inputSchema: z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]) }),
  });
  const settings = { model: model(), tools: { get_weather: getWeather }, maxRetries: 0, ...quiet };
  const ask = tools.ask;
  const first = streamText({ ...settings, messages: ask, includeRawChunks: true });
  const firstSeen = await read(first);
  if (firstSeen.error || firstSeen.toolCalls.length === 0) return { ...firstSeen, first: null };
  const { messages: step } = await first.response;
  const value = JSON.parse(tools.result);
  const results = firstSeen.toolCalls.map((call) => ({
    type: "tool-result",
    toolCallId: call.id,
    toolName: call.name,
    output: { type: "json", value },
  }));
  const answer = streamText({
    ...settings,
    messages: [...ask, ...step, { role: "tool", content: results }],
    includeRawChunks: true,
  });
  return { ...(await read(answer)), first: firstSeen };
}

async function generate() {
  try {
    const result = await generateText({ model: model(), prompt: "Say hello.", maxRetries: 0 });
    return { text: result.text, error: null };
  } catch (error) {
    return { text: null, error: failure(error) };
  }
}

async function retry() {
  let error = null;
  const started = Date.now();
  const onError = (event) => (error = event.error);
  const seen = await read(streamText({ model: model(), prompt: "Say hello.", onError }));
  return {
    ...seen,
    reason: error?.reason ?? null, // a RetryError's: "maxRetriesExceeded", "errorNotRetryable"
    lastStatus: (error?.lastError ?? error)?.statusCode ?? null,
    seconds: (Date.now() - started) / 1000,
  };
}

async function openaiRetry() {
  const client = new OpenAI({ baseURL, apiKey, fetch: recordingFetch });
  const started = Date.now();
  try {
    const stream = await client.chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "Say hello." }],
      stream: true,
    });
    for await (const _ of stream);
    return { error: null, seconds: (Date.now() - started) / 1000 };
  } catch (error) {
    return { error: failure(error), seconds: (Date.now() - started) / 1000 };
  }
}

const recipes = {
  text,
  object,
  generate,
  retry,
  "tool-json": toolJson,
  "openai-retry": openaiRetry,
};
if (!recipes[recipe]) {
  console.error(`unknown recipe ${recipe}: one of ${Object.keys(recipes).join(", ")}`);
  process.exit(2);
}
const seen = await recipes[recipe]();
emit({ ...seen, sent });
