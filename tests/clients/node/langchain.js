// LangChain JS's ChatOpenAI (@langchain/openai) as its docs show for an OpenAI-compatible
// server: configuration.baseURL and the key, streamed, usage read from the message LangChain
// puts together (usage_metadata: input_tokens, output_tokens, total_tokens). With a tool
// scenario the tool is bound with bindTools (a zod schema); "tool-result" then sends the
// call and a ToolMessage with the tool's result back for the model's text answer.
import { HumanMessage, ToolMessage } from "@langchain/core/messages";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import { args, emit, failure } from "./common.js";

const { baseURL, apiKey, model, scenario, messages, tool } = args();
const retries = process.env.SVC_MAX_RETRIES; // unset: LangChain's default
const chat = new ChatOpenAI({
  model,
  apiKey,
  configuration: { baseURL },
  streaming: true,
  ...(retries !== undefined && { maxRetries: Number(retries) }),
});
const llm = tool
  ? chat.bindTools([
      {
        name: tool.name,
        description: tool.description,
        schema: z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]) }),
      },
    ])
  : chat;

async function turn(history) {
  const seen = { text: "", finishReason: null, toolCalls: [], usage: null, svc: null, error: null };
  let full = null;
  try {
    for await (const chunk of await llm.stream(history)) {
      full = full === null ? chunk : full.concat(chunk);
    }
  } catch (error) {
    seen.error = failure(error);
    return { seen, full };
  }
  seen.text = typeof full.content === "string" ? full.content : JSON.stringify(full.content);
  seen.toolCalls = full.tool_calls.map((c) => ({ id: c.id, name: c.name, input: c.args }));
  seen.finishReason = full.response_metadata?.finish_reason ?? null;
  seen.usage = full.usage_metadata ?? null;
  return { seen, full };
}

const question = messages.map((m) => new HumanMessage(m.content));
const start = performance.now();
const first = await turn(question);
if (scenario !== "tool-result" || first.seen.error) {
  emit({ ...first.seen, seconds: (performance.now() - start) / 1000 });
} else {
  const results = first.full.tool_calls.map(
    (c) => new ToolMessage({ content: tool.result, tool_call_id: c.id }),
  );
  const answer = await turn([...question, first.full, ...results]);
  emit({ ...answer.seen, first: first.seen });
}
