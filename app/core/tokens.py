"""Prompt token counts svc works out itself, before (and without) the upstream's report.

Two numbers with two jobs:

- ``prompt_token_bound``: at least what any upstream can honestly report for the prompt.
  The reservation holds for it, and a reported count above it is clamped to it, so a
  request's charge is always the upstream's report at the alias price and never more than
  was held. Every tokenizer in use (byte-level BPE, SentencePiece with byte fallback) makes
  each token out of at least one byte of UTF-8, so the bytes of the text bound its tokens;
  chat templates add a few tokens per message (role markers, separators) and some a default
  system prompt, which the per-message and per-request allowances cover.
- ``estimate_prompt_tokens``: the fair guess billed when an upstream reports no usage
  (characters / 4 + 4 per message, docs/api.md).
"""

from __future__ import annotations

from collections.abc import Iterable

TEMPLATE_TOKENS_PER_MESSAGE = 8
"""Tokens a chat template may add around one message (OpenAI's adds 3, Llama 3's 5)."""
TEMPLATE_TOKENS_PER_REQUEST = 32
"""Tokens a chat template may add once (the reply's priming; a default system prompt)."""


def utf8_length(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (an ASCII string's length is known without encoding it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def prompt_token_bound(texts: Iterable[str]) -> int:
    """The most prompt tokens an upstream can report for messages with these texts."""
    total = TEMPLATE_TOKENS_PER_REQUEST
    for text in texts:
        total += utf8_length(text) + TEMPLATE_TOKENS_PER_MESSAGE
    return total


def estimate_prompt_tokens(texts: list[str]) -> int:
    """Prompt tokens billed when an upstream reports none: characters / 4 + 4 per message."""
    return sum(len(t) for t in texts) // 4 + 4 * len(texts)
