"""Token counts svc works out itself, before (and without) the upstream's report.

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
- ``estimate_tokens`` (and ``estimate_prompt_tokens``): the fair guess billed when an
  upstream reports no usage, for the prompt and for the output relayed. It counts text by
  its kind, as BPE tokenizers split it, and is calibrated against real tokenizers
  (o200k_base, cl100k_base) on a mixed corpus (tests/unit/core/test_tokens_estimate.py, whose
  measured errors docs/api.md states): never more than 10 % under either on any kind of
  text people send, and over by up to about 1.5x on Latin-script text and 3x on scripts
  o200k_base packs well but cl100k_base does not (Cyrillic, Greek, Indic, Thai).
"""

from __future__ import annotations

TEMPLATE_TOKENS_PER_MESSAGE = 8
"""Tokens a chat template may add around one message (OpenAI's adds 3, Llama 3's 5)."""
TEMPLATE_TOKENS_PER_REQUEST = 32
"""Tokens a chat template may add once (the reply's priming; a default system prompt)."""
ESTIMATED_TOKENS_PER_MESSAGE = 4
"""What the estimate adds per message for the chat template's markers."""


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
    """Prompt tokens billed when an upstream reports none: each message's text estimated
    (``estimate_tokens``), plus the chat template's few tokens per message."""
    return sum(map(estimate_tokens, texts)) + ESTIMATED_TOKENS_PER_MESSAGE * len(texts)


# -- the estimate ---------------------------------------------------------------------------
#
# The text's UTF-8 is mapped byte by byte to one letter per character (continuation bytes
# dropped; a multi-byte character is told by its lead byte, which gives its script's block),
# then counted with bytes.count: a few passes in C, no per-character Python. What is counted
# follows how BPE tokenizers split text before merging (OpenAI's and Llama 3's alike): a
# word is a token, digits go in groups of up to three, a space before a number or a newline
# is a token of its own, punctuation merges in pairs or so; then what makes text denser than
# that: a capital inside a word (camelCase, base64), random letter case (base64, keys), long
# words, and per character of each script.

_CLASS_OF_BYTE: dict[str, bytes] = {
    "l": bytes(range(0x61, 0x7B)),  # a-z
    "u": bytes(range(0x41, 0x5B)),  # A-Z
    "d": bytes(range(0x30, 0x3A)),  # 0-9
    "s": b" ",
    "n": b"\t\n\v\f\r",
    "e": bytes(range(0xC0, 0xCC)),  # Latin-1 supplement, Latin extended, IPA (U+0080-02FF)
    "g": bytes(range(0xCC, 0xD0)) + bytes(range(0xD5, 0xE0)),  # diacritics, Greek, Hebrew, Arabic…
    "r": bytes(range(0xD0, 0xD5)),  # Cyrillic (U+0400-052F)
    "i": b"\xe0\xe1",  # U+0800-1FFF: Indic, Thai, Georgian, Vietnamese's extra Latin…
    "j": b"\xe2",  # U+2000-2FFF: typographic punctuation, arrows, maths, box drawing…
    "c": bytes(range(0xE3, 0xF0)),  # U+3000-FFFF: CJK, kana, hangul, full-width forms
    "x": bytes(range(0xF0, 0x100)),  # beyond U+FFFF: emoji, rare CJK
}


def _class_table() -> bytes:
    table = bytearray(b"p" * 256)  # other ASCII: punctuation and symbols
    for kind, members in _CLASS_OF_BYTE.items():
        for byte in members:
            table[byte] = ord(kind)
    return bytes(table)


_CLASSES = _class_table()
_CONTINUATION = bytes(range(0x80, 0xC0))
# letters, digits and punctuation as runs (everything else separates them)
_RUNS = bytes.maketrans(b"ludpsnegrijcx", b"aa0p.........")
_PER_CHARACTER = (  # tokens per character of each script beyond ASCII
    (b"e", 1.0),
    (b"g", 1.1),
    (b"r", 0.5),
    (b"i", 1.1),
    (b"j", 1.6),
    (b"c", 1.3),
    (b"x", 2.75),
)


def estimate_tokens(text: str) -> int:
    """The tokens ``text`` makes, as estimated for billing without an upstream's report:
    never over its UTF-8 bytes (the bound the reservation holds for)."""
    if not text:
        return 0
    data = text.encode("utf-8", "surrogatepass")
    kinds = data.translate(_CLASSES, _CONTINUATION)
    runs = kinds.translate(_RUNS)
    count = kinds.count
    first = runs[0]
    words = runs.count(b"0a") + runs.count(b"pa") + runs.count(b".a") + (first == 0x61)
    numbers = runs.count(b"a0") + runs.count(b"p0") + runs.count(b".0") + (first == 0x30)
    marks = runs.count(b"ap") + runs.count(b"0p") + runs.count(b".p") + (first == 0x70)
    tokens = (
        words
        + count(b"lu")  # camelCase: each hump its own token
        + 3.5 * count(b"ulu")  # random case (base64, keys): a token per two or so letters
        + 2 * count(b"llllllll")  # a long word is several
        + count(b"d") / 3
        + numbers * 2 / 3  # groups of three digits, from each number's start
        + count(b"sd")  # the space before a number
        + (count(b"p") + marks) / 2
        + count(b"n")
        + count(b"nss")  # indentation after a newline
    )
    if not text.isascii():
        for kind, weight in _PER_CHARACTER:
            tokens += weight * count(kind)
    return min(len(data), int(tokens + 0.999))
