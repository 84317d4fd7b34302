// The Vercel AI SDK with its OpenAI provider, on the Chat Completions API (.chat(model)).
// Raw chunks are asked for only to read svc's metadata; everything else is the SDK's view.
import { createOpenAI } from "@ai-sdk/openai";
import { streamText } from "ai";
import { args, emit, failure } from "./common.js";

const { baseURL, apiKey, model, messages } = args();
const provider = createOpenAI({ baseURL, apiKey });
const seen = { text: "", finishReason: null, usage: null, svc: null, error: null };
const result = streamText({
  model: provider.chat(model),
  messages,
  maxRetries: 0,
  includeRawChunks: true,
  onError: () => {}, // the error part below records it; the default logs it to stderr
});
for await (const part of result.fullStream) {
  if (part.type === "text-delta") seen.text += part.text;
  if (part.type === "raw") seen.svc = part.rawValue?.svc ?? seen.svc;
  if (part.type === "error") seen.error = failure(part.error);
  if (part.type === "finish") {
    seen.finishReason = part.finishReason;
    const { inputTokens, outputTokens, totalTokens } = part.totalUsage;
    seen.usage = { inputTokens, outputTokens, totalTokens };
  }
}
emit(seen);
