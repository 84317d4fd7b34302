"""The public model aliases, their prices and output limits."""

from __future__ import annotations

import math

import msgspec

ALIAS_IDS = ("svc-auto", "svc-fast", "svc-code", "svc-smart")
AUTO = "svc-auto"
SIMULATED = "simulated"


class UpstreamRef(msgspec.Struct, frozen=True, kw_only=True):
    """One place an alias can be served from: a provider and the real model name there."""

    provider: str
    model: str


class Price(msgspec.Struct, frozen=True, kw_only=True):
    """Credits per 1,000 tokens."""

    input: int
    output: int

    def credits(self, prompt_tokens: int, completion_tokens: int) -> int:
        """Credits a request costs: at least 1, rounded up."""
        units = prompt_tokens * self.input + completion_tokens * self.output
        return max(1, math.ceil(units / 1000))


class Alias(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    created: int
    price: Price
    default_output_tokens: int = 4096
    max_output_tokens: int = 16_384
    enabled: bool = True
    upstreams: tuple[UpstreamRef, ...] = (UpstreamRef(provider=SIMULATED, model="simulated"),)


_CREATED = 1_767_225_600  # 2026-01-01T00:00:00Z

DEFAULT_ALIASES: dict[str, Alias] = {
    "svc-auto": Alias(
        id="svc-auto", name="Auto", created=_CREATED, price=Price(input=5, output=15)
    ),
    "svc-fast": Alias(
        id="svc-fast", name="Fast", created=_CREATED, price=Price(input=5, output=15)
    ),
    "svc-code": Alias(
        id="svc-code", name="Code", created=_CREATED, price=Price(input=20, output=60)
    ),
    "svc-smart": Alias(
        id="svc-smart", name="Smart", created=_CREATED, price=Price(input=50, output=150)
    ),
}

_CODE_HINTS = ("```", "def ", "class ", "function ", "import ", "#include", "SELECT ", "=>")
_SMART_PROMPT_CHARS = 2_000


def route_auto(prompt_text: str, message_count: int) -> str:
    """Pick the alias svc-auto serves a request with. Cheap on purpose: a few substring checks.

    Code fences or programming keywords go to Code; long or many-turn conversations go to
    Smart; everything else to Fast.
    """
    if any(hint in prompt_text for hint in _CODE_HINTS):
        return "svc-code"
    if len(prompt_text) > _SMART_PROMPT_CHARS or message_count > 8:
        return "svc-smart"
    return "svc-fast"
