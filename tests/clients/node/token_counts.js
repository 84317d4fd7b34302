// Real tokenizers' counts for svc's token estimate (tests/unit/core/test_tokens_estimate.py).
//
//   node token_counts.js < texts.json     (a JSON array of strings)
//
// Prints ONE JSON line: {"<encoding>": [count per text, in order], ...} for OpenAI's
// o200k_base (GPT-4o and later) and cl100k_base (GPT-4, GPT-3.5), both bundled by
// gpt-tokenizer (no download at run time).
import { readFileSync } from "node:fs";
import { countTokens as o200k } from "gpt-tokenizer/encoding/o200k_base";
import { countTokens as cl100k } from "gpt-tokenizer/encoding/cl100k_base";

const texts = JSON.parse(readFileSync(0, "utf8"));
const counts = { o200k_base: texts.map((t) => o200k(t)), cl100k_base: texts.map((t) => cl100k(t)) };
process.stdout.write(JSON.stringify(counts) + "\n");
