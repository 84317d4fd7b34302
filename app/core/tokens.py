"""Prompt token counts svc works out itself, before (and without) the upstream's report.

Two numbers with two jobs:

- ``prompt_token_bound``: at least what any upstream can honestly report for the prompt.
  The reservation holds for it, and a reported count above it is clamped to it, so a
  request's charge is always the upstream's report at the alias price and never more than
  was held. Every tokenizer in use (byte-level BPE, SentencePiece with byte fallback) makes
  each token out of at least one byte of UTF-8, so the bytes of the text bound its tokens.
  The text is counted by the request body's bytes: a JSON body is at least as long as the
  UTF-8 of the text it carries, and tools, schemas and tool calls are prompt too. What
  images, audio and files carry is left out of that count and bounded on its own: an image
  by a setting (``SVC_IMAGE_TOKEN_BOUND``), audio and files by their bytes. Chat templates
  add a few tokens per message (role markers, separators) and some a default system
  prompt, which the per-message and per-request allowances cover.
- ``estimate_prompt_tokens``: the fair guess billed when an upstream reports no usage
  (characters / 4 + 4 per message, docs/api.md).
"""

from __future__ import annotations

TEMPLATE_TOKENS_PER_MESSAGE = 8
"""Tokens a chat template may add around one message (OpenAI's adds 3, Llama 3's 5)."""
TEMPLATE_TOKENS_PER_REQUEST = 32
"""Tokens a chat template may add once (the reply's priming; a default system prompt)."""


def utf8_length(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (an ASCII string's length is known without encoding it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


IMAGE_TOKENS_ESTIMATE = 1_000
"""Prompt tokens billed for an image when an upstream reports no usage."""
AUDIO_BYTES_PER_TOKEN = 16
"""Audio bytes per prompt token at the most: 16-bit PCM at 16 kHz is 32,000 bytes a second,
and audio tokenizers count tens of tokens a second, not 2,000."""


def prompt_token_bound(text_bytes: int, messages: int, media_tokens: int = 0) -> int:
    """The most prompt tokens an upstream can report for a prompt of ``text_bytes`` bytes of
    UTF-8 text (or more: JSON around it counts too) in ``messages`` messages, plus what its
    images, audio and files may count (``media_tokens``)."""
    return (
        TEMPLATE_TOKENS_PER_REQUEST
        + text_bytes
        + TEMPLATE_TOKENS_PER_MESSAGE * messages
        + media_tokens
    )


def audio_token_bound(base64_chars: int) -> int:
    """The most tokens an audio clip sent as ``base64_chars`` of base64 can count."""
    return (base64_chars * 3 // 4) // AUDIO_BYTES_PER_TOKEN + 1


def estimate_prompt_tokens(texts: list[str]) -> int:
    """Prompt tokens billed when an upstream reports none: characters / 4 + 4 per message."""
    return sum(len(t) for t in texts) // 4 + 4 * len(texts)
