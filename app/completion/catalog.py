"""The public model aliases, their prices and output limits."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET

from app.completion.costs import CURRENCY, DEFAULT_CURRENCY, CostEntry, UpstreamCost, upstream_cost
from app.completion.models_errors import convert, fail
from app.core.errors import ModelsFileError
from app.core.settings import HEARTBEATS_PER_DEADLINE
from app.credits.outcomes import Rates
from app.upstream.config import ProviderConfig

ALIAS_IDS = ("svc-auto", "svc-fast", "svc-code", "svc-smart")
AUTO = "svc-auto"
FAST, CODE, SMART = "svc-fast", "svc-code", "svc-smart"
AUTO_ROUTES = (FAST, CODE, SMART)
"""What ``route_auto`` chooses from."""
SIMULATED = "simulated"

GATED_FIELDS: dict[str, tuple[str, ...]] = {
    "allow_service_tier": ("service_tier",),
    "allow_store": ("store", "metadata"),
    "allow_top_k": ("top_k",),
    "allow_audio": ("modalities", "audio"),
    "allow_prediction": ("prediction",),
}
"""The one list of the request fields that reach a provider only when the models file
allows them for the alias serving the request (keyed by the ``Alias`` flag that does), on
Chat Completions and Responses alike. ``service_tier`` changes what the operator pays per
token ("priority" costs more), which the alias's price cannot see; ``store`` has the
provider keep the request and its answer, and ``metadata`` tags what it keeps (OpenAI
takes it with ``store`` only); ``top_k`` is no Chat Completions field (OpenAI refuses it),
an extension of servers that take it (vLLM, SGLang), which the operator knows the alias's
providers to be (a provider that serves Messages gets it always); ``modalities``/``audio``
ask for spoken output, at several times text's price per token (svc relays no audio and
bills it as text); the provider bills the tokens of a ``prediction`` it rejects as output,
though none reaches the client. Left out silently: OpenAI-compatible clients send them
routinely, and a 400 would break them. Fields svc does not model (``web_search_options``,
``prompt_cache_retention``, …) never reach a provider; ``reasoning_effort`` (its tokens are
in the usage report) and what identifies the client (``user``, ``safety_identifier``) pass."""


class UpstreamRef(msgspec.Struct, frozen=True, kw_only=True):
    """One place an alias can be served from: a provider, the real model name there, and
    what the provider charges for it (None: the models file names no cost)."""

    provider: str
    model: str
    cost: UpstreamCost | None = None


def quarter_up(price: int) -> int:
    """The default cached-input price: a quarter of the input price, rounded up to a whole
    credit (5 -> 2, 20 -> 5, 50 -> 13): never more than the input price."""
    return -(-price // 4)


class Price(msgspec.Struct, frozen=True, kw_only=True):
    """Credits per 1,000 tokens: uncached prompt tokens (``input``), prompt tokens the
    upstream read from its cache (``cached_input``, at most ``input``), prompt tokens it
    wrote to its cache, when it reports those apart (``cache_write``), and completion tokens
    (``output``). What a request costs is worked out by settle.lua alone, from ``rates``."""

    input: int
    output: int
    cached_input: int
    cache_write: int

    @property
    def rates(self) -> Rates:
        return Rates(self.input, self.cached_input, self.cache_write, self.output)

    @property
    def prompt_worst(self) -> int:
        """The most one prompt token can cost, what a reservation holds per prompt token: a
        cache write may be dearer than the input price; a cached token never is."""
        return max(self.input, self.cache_write)


def price(
    input: int, output: int, cached_input: int | None = None, cache_write: int | None = None
) -> Price:
    """A ``Price``; the cached-input price left out is ``quarter_up(input)``, the cache-write
    price the input price."""
    return Price(
        input=input,
        output=output,
        cached_input=quarter_up(input) if cached_input is None else cached_input,
        cache_write=input if cache_write is None else cache_write,
    )


class Alias(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    created: int
    price: Price
    default_output_tokens: int = 4096
    max_output_tokens: int = 16_384
    enabled: bool = True
    upstreams: tuple[UpstreamRef, ...] = (UpstreamRef(provider=SIMULATED, model="simulated"),)
    native_responses: bool = False
    """Some upstream of it serves the Responses API itself (its provider's
    ``responses_api``): Responses requests keep their own form for it."""
    native_messages: bool = False
    """Some upstream of it serves Anthropic's Messages API itself (its provider's
    ``messages_api``): Messages requests keep their own form for it."""
    # the models file lets clients' GATED_FIELDS of each flag through to the provider
    allow_service_tier: bool = False
    allow_store: bool = False
    allow_top_k: bool = False
    allow_audio: bool = False
    allow_prediction: bool = False

    def withheld_fields(self) -> dict[str, Any]:
        """The request fields left out of what this alias's upstreams are sent, each as
        ``UNSET`` (for ``msgspec.structs.replace``); worked out once per set of flags."""
        return _withheld(
            self.allow_service_tier,
            self.allow_store,
            self.allow_top_k,
            self.allow_audio,
            self.allow_prediction,
        )


@functools.cache
def _withheld(*allowed: bool) -> dict[str, Any]:
    """``allowed``: each flag of ``GATED_FIELDS``, in its order."""
    gated = zip(GATED_FIELDS.values(), allowed, strict=True)
    return {name: UNSET for names, allow in gated if not allow for name in names}


_CREATED = 1_767_225_600  # 2026-01-01T00:00:00Z

DEFAULT_ALIASES: dict[str, Alias] = {
    "svc-auto": Alias(id="svc-auto", name="Auto", created=_CREATED, price=price(5, 15)),
    "svc-fast": Alias(id="svc-fast", name="Fast", created=_CREATED, price=price(5, 15)),
    "svc-code": Alias(id="svc-code", name="Code", created=_CREATED, price=price(20, 60)),
    "svc-smart": Alias(id="svc-smart", name="Smart", created=_CREATED, price=price(50, 150)),
}

_CODE_HINTS = ("```", "def ", "class ", "function ", "import ", "#include", "SELECT ", "=>")
_SMART_PROMPT_CHARS = 2_000


def route_auto(prompt_text: str, message_count: int) -> str:
    """Pick the alias svc-auto serves a request with. Cheap on purpose: a few substring checks.

    Code fences or programming keywords go to Code; long or many-turn conversations go to
    Smart; everything else to Fast.
    """
    if any(hint in prompt_text for hint in _CODE_HINTS):
        return CODE
    if len(prompt_text) > _SMART_PROMPT_CHARS or message_count > 8:
        return SMART
    return FAST


def key_model_ids(catalog: Catalog) -> tuple[str, ...]:
    """The aliases a key's ``allowed_models`` may name: all but svc-auto (allowed when every
    alias it may route to is)."""
    return tuple(alias_id for alias_id in catalog.aliases if alias_id != AUTO)


# -- the models file (SVC_MODELS_FILE) ------------------------------------------------------


class UpstreamEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    provider: str
    model: str
    cost: CostEntry | None = None


class AliasOverride(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the models file may set for an alias; anything left out keeps its default."""

    enabled: bool | None = None
    created: int | None = None
    input_price: int | None = None
    cached_input_price: int | None = None
    cache_write_price: int | None = None
    output_price: int | None = None
    default_output_tokens: int | None = None
    max_output_tokens: int | None = None
    upstreams: list[UpstreamEntry] | None = None
    allow_service_tier: bool | None = None
    allow_store: bool | None = None
    allow_top_k: bool | None = None
    allow_audio: bool | None = None
    allow_prediction: bool | None = None


class ModelsFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    providers: dict[str, ProviderConfig] = {}
    aliases: dict[str, AliasOverride] = {}


class Catalog(msgspec.Struct, frozen=True):
    aliases: dict[str, Alias]
    providers: dict[str, ProviderConfig]


def default_catalog() -> Catalog:
    return Catalog(aliases=dict(DEFAULT_ALIASES), providers={})


def _check_timeouts(path: Path, text: str, spec: ModelsFile, deadline_s: float) -> None:
    """A stream still waiting on its upstream must never be swept as if its worker died.

    The relay moves the deadline to now + deadline only when a chunk arrives, and at most
    once a third of the deadline (the first time a third after the first token). Worst
    case: the first token takes first_byte_timeout_s, the next chunk lands just before an
    extension is due (none is made), then the upstream stays silent for idle_timeout_s.
    With both under a third, that adds up to less than the deadline; a limit of the whole
    deadline would let a silence of two thirds outlive it. (An alias that fails over waits
    for several first bytes in a row before its first extension; not covered here.)"""
    limit = deadline_s / HEARTBEATS_PER_DEADLINE
    for name, provider in spec.providers.items():
        for setting in ("first_byte_timeout_s", "idle_timeout_s"):
            value = getattr(provider, setting)
            if value >= limit:
                raise fail(
                    path,
                    text,
                    ["providers", name, setting],
                    f"{value:g} s is not shorter than a third of SVC_RESERVATION_DEADLINE_S "
                    f"({deadline_s:g} s / {HEARTBEATS_PER_DEADLINE} = {limit:g} s): the "
                    f"sweeper could refund a stream still waiting on provider '{name}'. "
                    "Lower the timeout or raise SVC_RESERVATION_DEADLINE_S",
                )


def _check(path: Path, text: str, spec: ModelsFile) -> None:
    for name, override in spec.aliases.items():
        field = ["aliases", name]
        if name not in ALIAS_IDS:
            raise fail(path, text, field, f"unknown alias; use one of {', '.join(ALIAS_IDS)}")
        for ref in override.upstreams or []:
            if ref.provider != SIMULATED and ref.provider not in spec.providers:
                raise fail(path, text, [*field, "upstreams"], f"no provider named '{ref.provider}'")
            try:
                _upstream_ref(ref, spec.providers)
            except ValueError as exc:
                raise fail(path, text, [*field, "upstreams", "cost"], str(exc)) from None
        if override.upstreams is not None and not override.upstreams:
            raise fail(path, text, [*field, "upstreams"], "needs at least one upstream")
        for key in (
            "input_price",
            "cached_input_price",
            "cache_write_price",
            "output_price",
            "default_output_tokens",
            "max_output_tokens",
        ):
            value = getattr(override, key)
            if value is not None and value < (0 if key.endswith("price") else 1):
                raise fail(path, text, [*field, key], "out of range")
    _check_providers(path, text, spec)


def _check_providers(path: Path, text: str, spec: ModelsFile) -> None:
    for name, provider in spec.providers.items():
        if not provider.base_url.startswith(("http://", "https://")):
            raise fail(path, text, ["providers", name, "base_url"], "must be an http(s) URL")
        if not CURRENCY.match(provider.cost_currency):
            raise fail(path, text, ["providers", name, "cost_currency"], "not like USD or EUR")
        if name.split() != [name]:  # a usage event names it between spaces (Served)
            raise fail(path, text, ["providers", name], "a provider's name has no spaces")


def _upstream_ref(entry: UpstreamEntry, providers: dict[str, ProviderConfig]) -> UpstreamRef:
    """``entry`` with its cost as integers in its provider's currency (the simulated
    provider's: ``DEFAULT_CURRENCY``); ``ValueError`` for a cost that cannot be one."""
    provider = providers.get(entry.provider)
    currency = DEFAULT_CURRENCY if provider is None else provider.cost_currency
    cost = None if entry.cost is None else upstream_cost(entry.cost, currency)
    return UpstreamRef(provider=entry.provider, model=entry.model, cost=cost)


def _merge(base: Alias, o: AliasOverride, providers: dict[str, ProviderConfig]) -> Alias:
    # a new input price moves the cached-input and cache-write defaults with it
    new_input = o.input_price is not None
    cached_input = o.cached_input_price
    if cached_input is None and not new_input:
        cached_input = base.price.cached_input
    cache_write = o.cache_write_price
    if cache_write is None and not new_input:
        cache_write = base.price.cache_write
    priced = price(
        base.price.input if o.input_price is None else o.input_price,
        base.price.output if o.output_price is None else o.output_price,
        cached_input,
        cache_write,
    )
    merged = msgspec.structs.replace(
        base,
        enabled=base.enabled if o.enabled is None else o.enabled,
        created=base.created if o.created is None else o.created,
        price=priced,
        default_output_tokens=o.default_output_tokens or base.default_output_tokens,
        max_output_tokens=o.max_output_tokens or base.max_output_tokens,
        **{flag: getattr(base if getattr(o, flag) is None else o, flag) for flag in GATED_FIELDS},
        upstreams=tuple(_upstream_ref(u, providers) for u in o.upstreams)
        if o.upstreams
        else base.upstreams,
    )
    if merged.default_output_tokens > merged.max_output_tokens:
        merged = msgspec.structs.replace(merged, default_output_tokens=merged.max_output_tokens)
    return merged


def load_catalog(path: Path, *, reservation_deadline_s: float | None = None) -> Catalog:
    """Read a models file; raise ``ModelsFileError`` naming line and field when it is broken,
    or when a provider's timeouts do not fit the reservation deadline (unchecked if None)."""
    text = path.read_text()
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelsFileError(f"{path}: {exc}") from exc
    unknown = set(raw) - {"providers", "aliases"}
    if unknown:
        raise fail(path, text, [sorted(unknown)[0]], "unknown section")
    sections: dict[str, dict[str, object]] = {}
    for section in ("providers", "aliases"):
        value = raw.get(section, {})
        if not isinstance(value, dict):
            raise fail(path, text, [section], "must be a table")
        sections[section] = value
    spec = ModelsFile(
        providers={
            name: convert(path, text, value, ProviderConfig, ["providers", name])
            for name, value in sections["providers"].items()
        },
        aliases={
            name: convert(path, text, value, AliasOverride, ["aliases", name])
            for name, value in sections["aliases"].items()
        },
    )
    _check(path, text, spec)
    if reservation_deadline_s is not None:
        _check_timeouts(path, text, spec, reservation_deadline_s)
    aliases = dict(DEFAULT_ALIASES)
    for name, override in spec.aliases.items():
        merged = _merge(aliases[name], override, spec.providers)
        if merged.price.cached_input > merged.price.input:
            raise fail(
                path,
                text,
                ["aliases", name, "cached_input_price"],
                f"{merged.price.cached_input} is more than the input price "
                f"({merged.price.input}): a reservation holds every prompt token at the "
                "input price (or the cache-write price, when that is higher)",
            )
        served_by = [
            spec.providers[ref.provider]
            for ref in merged.upstreams
            if ref.provider in spec.providers
        ]
        aliases[name] = msgspec.structs.replace(
            merged,
            native_responses=any(provider.responses_api for provider in served_by),
            native_messages=any(provider.messages_api for provider in served_by),
        )
    return Catalog(aliases=aliases, providers=dict(spec.providers))
