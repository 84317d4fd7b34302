// The official OpenAI Node SDK: a streaming chat completion, usage asked for as its docs say.
import OpenAI from "openai";
import { args, emit, failure } from "./common.js";

const { baseURL, apiKey, model, messages } = args();
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const seen = { text: "", finishReason: null, usage: null, svc: null, error: null };
try {
  const stream = await client.chat.completions.create({
    model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      seen.text += choice.delta?.content ?? "";
      seen.finishReason = choice.finish_reason ?? seen.finishReason;
    }
    seen.usage = chunk.usage ?? seen.usage;
    seen.svc = chunk.svc ?? seen.svc; // svc's own field on its last chunk
  }
} catch (error) {
  seen.error = failure(error);
}
emit(seen);
