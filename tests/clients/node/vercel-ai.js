// The Vercel AI SDK with its OpenAI provider: on the Chat Completions API (.chat(model)), or
// with SVC_OPENAI_API=responses on the provider's default, the Responses API (provider(model)),
// used as its docs show, with no option of svc's.
// Raw chunks are asked for only to read svc's metadata (on the last chunk of a chat stream, on
// the response of a Responses stream's last event); everything else is the SDK's view.
// With a tool scenario the tool is defined the SDK's way (zod input schema, no execute, so the
// model's call ends the step); "tool-result" then sends the step's messages and the tool's
// result back for the model's text answer.
import { createOpenAI } from "@ai-sdk/openai";
import { streamText, tool as defineTool } from "ai";
import { z } from "zod";
import { args, emit, failure } from "./common.js";

const { baseURL, apiKey, model, scenario, messages, tool } = args();
const provider = createOpenAI({ baseURL, apiKey });
const responses = process.env.SVC_OPENAI_API === "responses";
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
    model: responses ? provider(model) : provider.chat(model),
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
    if (part.type === "raw") {
      seen.svc = (responses ? part.rawValue?.response?.svc : part.rawValue?.svc) ?? seen.svc;
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
