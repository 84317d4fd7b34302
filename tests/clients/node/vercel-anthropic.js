// The Vercel AI SDK with its Anthropic provider (@ai-sdk/anthropic) on svc's Messages API, used
// as its docs show: createAnthropic({ baseURL, apiKey }) and streamText. The provider posts to
// `${baseURL}/messages`, so BASE_URL is svc's /v1 (as for the OpenAI provider).
// Raw chunks are asked for only to read svc's metadata off the message_stop event; everything
// else is the SDK's view. The scenario's system message goes through as streamText's messages
// take it (the provider makes it the top-level `system`).
// With a tool scenario the tool is defined the SDK's way (zod input schema, no execute, so the
// model's call ends the step); "tool-result" then sends the step's messages and the tool's
// result back for the model's text answer.
import { createAnthropic } from "@ai-sdk/anthropic";
import { streamText, tool as defineTool } from "ai";
import { z } from "zod";
import { args, emit, failure } from "./common.js";

// The SDK's warnings (svc-fast is a model it does not know, so it caps max_tokens at 4096; a
// system message in `messages`) go to stderr: stdout is the one JSON line.
globalThis.AI_SDK_LOG_WARNINGS = ({ warnings }) => {
  for (const warning of warnings) console.error("AI SDK warning:", JSON.stringify(warning));
};

const { baseURL, apiKey, model, scenario, messages, tool } = args();
const provider = createAnthropic({ baseURL, apiKey });
// tools.json's get_weather, as a zod schema (the SDK sends it as JSON Schema)
const tools = tool && {
  [tool.name]: defineTool({
    description: tool.description,
    inputSchema: z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]) }),
  }),
};

async function turn(messages) {
  const seen = { text: "", finishReason: null, toolCalls: [], usage: null, svc: null, error: null };
  const result = streamText({
    model: provider(model),
    messages,
    ...(tools && { tools }),
    maxRetries: 0,
    includeRawChunks: true,
    onError: () => {}, // the error part below records it; the default logs it to stderr
  });
  for await (const part of result.fullStream) {
    if (part.type === "text-delta") seen.text += part.text;
    if (part.type === "tool-call") {
      seen.toolCalls.push({ id: part.toolCallId, name: part.toolName, input: part.input });
    }
    if (part.type === "raw" && part.rawValue?.type === "message_stop") {
      seen.svc = part.rawValue.svc ?? null;
    }
    if (part.type === "error") seen.error = failure(part.error);
    if (part.type === "finish") {
      seen.finishReason = part.finishReason;
      const { inputTokens, outputTokens, totalTokens } = part.totalUsage;
      seen.usage = { inputTokens, outputTokens, totalTokens };
    }
  }
  return { seen, result };
}

const first = await turn(messages);
if (scenario !== "tool-result" || first.seen.error) {
  emit(first.seen);
} else {
  const { messages: step } = await first.result.response; // the assistant's tool-call message
  const results = first.seen.toolCalls.map((call) => ({
    type: "tool-result",
    toolCallId: call.id,
    toolName: call.name,
    output: { type: "text", value: tool.result },
  }));
  const answer = await turn([...messages, ...step, { role: "tool", content: results }]);
  emit({ ...answer.seen, first: first.seen });
}
