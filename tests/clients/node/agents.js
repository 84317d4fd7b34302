// The OpenAI Agents SDK for JS (@openai/agents) as its docs show for another OpenAI-compatible
// server: an OpenAI client of its own given to setDefaultOpenAIClient, tracing off (it would
// export traces to OpenAI with the key), the SDK's default API (Responses), streamed. Usage is
// the run's own (result.state.usage: requests, inputTokens, outputTokens, totalTokens).
// With a tool scenario the agent has the tool (a zod schema; it returns tools.json's
// result): "tools" stops at the call (toolUseBehavior stop_on_first_tool, so the answer is the
// tool's output after one request), "tool-result" lets the agent loop send it back and answer.
import { Agent, run, setDefaultOpenAIClient, setTracingDisabled, tool as defineTool } from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";
import { args, emit, failure } from "./common.js";

const { baseURL, apiKey, model, scenario, messages, tool } = args();
const retries = process.env.SVC_MAX_RETRIES; // unset: the OpenAI SDK's default
setTracingDisabled(true);
setDefaultOpenAIClient(
  new OpenAI({ baseURL, apiKey, ...(retries !== undefined && { maxRetries: Number(retries) }) }),
);

const calls = [];
const tools = tool
  ? [
      defineTool({
        name: tool.name,
        description: tool.description,
        parameters: z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]) }),
        execute: async (input) => {
          calls.push({ name: tool.name, input });
          return tool.result;
        },
      }),
    ]
  : [];
const agent = new Agent({
  name: "svc",
  model,
  tools,
  ...(scenario === "tools" && { toolUseBehavior: "stop_on_first_tool" }),
});

const seen = { text: "", finishReason: null, toolCalls: calls, usage: null, svc: null, error: null };
const start = performance.now();
try {
  const result = await run(agent, messages.map((m) => ({ role: m.role, content: m.content })), {
    stream: true,
  });
  for await (const event of result.toTextStream()) {
    seen.streamed = (seen.streamed ?? "") + event;
  }
  await result.completed;
  seen.text = scenario === "tools" ? "" : result.finalOutput;
  seen.finalOutput = result.finalOutput;
  const usage = result.state.usage;
  seen.usage = {
    requests: usage.requests,
    inputTokens: usage.inputTokens,
    outputTokens: usage.outputTokens,
    totalTokens: usage.totalTokens,
  };
} catch (error) {
  seen.error = failure(error);
}
seen.seconds = (performance.now() - start) / 1000;
emit(seen);
