// The official OpenAI Node SDK: a streaming chat completion, usage asked for as its docs say.
// With a tool scenario it offers the tool, puts the streamed call together from its pieces and,
// for "tool-result", sends the call and the tool's result back for the model's text answer.
import OpenAI from "openai";
import { args, emit, failure } from "./common.js";

const { baseURL, apiKey, model, scenario, messages, tool } = args();
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const tools = tool && [
  {
    type: "function",
    function: { name: tool.name, description: tool.description, parameters: tool.parameters },
  },
];

async function turn(messages) {
  const seen = { text: "", finishReason: null, toolCalls: [], usage: null, svc: null, error: null };
  try {
    const stream = await client.chat.completions.create({
      model,
      messages,
      ...(tools && { tools }),
      stream: true,
      stream_options: { include_usage: true },
    });
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        seen.text += choice.delta?.content ?? "";
        for (const piece of choice.delta?.tool_calls ?? []) {
          const call = (seen.toolCalls[piece.index] ??= { id: "", name: "", arguments: "" });
          call.id += piece.id ?? "";
          call.name += piece.function?.name ?? "";
          call.arguments += piece.function?.arguments ?? "";
        }
        seen.finishReason = choice.finish_reason ?? seen.finishReason;
      }
      seen.usage = chunk.usage ?? seen.usage;
      seen.svc = chunk.svc ?? seen.svc; // svc's own field on its last chunk
    }
  } catch (error) {
    seen.error = failure(error);
  }
  return seen;
}

const first = await turn(messages);
if (scenario !== "tool-result" || first.error) {
  emit(first);
} else {
  const calls = first.toolCalls.map(({ id, name, arguments: args }) => ({
    id,
    type: "function",
    function: { name, arguments: args },
  }));
  const results = calls.map((call) => ({
    role: "tool",
    tool_call_id: call.id,
    content: tool.result,
  }));
  const answer = await turn([
    ...messages,
    { role: "assistant", content: null, tool_calls: calls },
    ...results,
  ]);
  emit({ ...answer, first });
}
