// The official Anthropic Node SDK on svc's Messages API (POST /v1/messages): messages.stream(),
// used as its docs show. BASE_URL is svc's root (the SDK adds /v1/messages itself).
// The scenario's OpenAI-style messages become the Messages API's: system messages the top-level
// `system`, the rest as they are. Iterating the stream gives the raw events, so svc's metadata
// is read off the message_stop event; everything else is the SDK's final message.
// With a tool scenario it offers the tool (tools.json's schema as input_schema) and, for
// "tool-result", sends the assistant's content back with a tool_result for each tool_use.
import Anthropic from "@anthropic-ai/sdk";
import { args, emit, failure } from "./common.js";

const { baseURL, apiKey, model, scenario, messages, tool } = args();
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });
const system = messages.filter((m) => m.role === "system").map((m) => m.content).join("\n");
const question = messages.filter((m) => m.role !== "system");
const tools = tool && [
  { name: tool.name, description: tool.description, input_schema: tool.parameters },
];
const MAX_TOKENS = 1024;

async function turn(messages) {
  const seen = { text: "", finishReason: null, toolCalls: [], usage: null, svc: null, error: null };
  let message = null;
  try {
    const stream = client.messages.stream({
      model,
      max_tokens: MAX_TOKENS,
      messages,
      ...(system && { system }),
      ...(tools && { tools }),
    });
    for await (const event of stream) {
      if (event.type === "message_stop") seen.svc = event.svc ?? null; // svc's own field
    }
    message = await stream.finalMessage();
  } catch (error) {
    seen.error = failure(error);
    return { seen, message };
  }
  for (const block of message.content) {
    if (block.type === "text") seen.text += block.text;
    if (block.type === "tool_use") {
      seen.toolCalls.push({ id: block.id, name: block.name, input: block.input });
    }
  }
  seen.finishReason = message.stop_reason;
  const { input_tokens: inputTokens, output_tokens: outputTokens } = message.usage;
  seen.usage = { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens };
  return { seen, message };
}

const first = await turn(question);
if (scenario !== "tool-result" || first.seen.error) {
  emit(first.seen);
} else {
  const results = first.seen.toolCalls.map((call) => ({
    type: "tool_result",
    tool_use_id: call.id,
    content: tool.result,
  }));
  const answer = await turn([
    ...question,
    { role: "assistant", content: first.message.content },
    { role: "user", content: results },
  ]);
  emit({ ...answer.seen, first: first.seen });
}
