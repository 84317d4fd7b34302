"""The fields of svc's Redis hashes, named and parsed once: the scripts in
``app/credits/lua`` write them, and everything that reads them (the ledger, the flusher,
reconcile, inspect, the benchmark's conservation check) names them through here; so are
the values settle writes into a usage event (its API, and ``Served``: what its activity
row tells). The events stream's entries are named and parsed in ``stream_events``."""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import msgspec

from app.kv.layout import as_text


class AccountField:
    """The account hash ``<p>:{sN}:acct:<pid>``."""

    EARNED: Final = "earned"
    EARNED_EXP: Final = "earned_exp"  # unix seconds; 0 while the pool is empty
    PURCHASED: Final = "purchased"
    STATUS: Final = "status"  # ACCOUNT_ACTIVE | ACCOUNT_DISABLED; absent: active
    EGEN: Final = "egen"  # times the earned pool expired
    LOW: Final = "low"  # the low-balance threshold (credits.low); absent: none
    LOW_MARK: Final = "lowf"  # set while the balance is below it and that was told
    DEBT: Final = "debt"  # credits owed (take_back.lua, lib/debt.lua); absent: 0


ACCOUNT_ACTIVE: Final = "active"
ACCOUNT_DISABLED: Final = "disabled"
"""``AccountField.STATUS`` of an account whose keys are refused (``lib/keys.lua``
``account_refusal``); the durable record's ``status`` takes the same two values."""
ACCOUNT_STATUSES: Final = (ACCOUNT_ACTIVE, ACCOUNT_DISABLED)


def account_status(raw: Any) -> str:
    """An ``AccountField.STATUS`` value as text: absent (a hash from before it existed) is
    active."""
    return ACCOUNT_ACTIVE if raw is None else as_text(raw)


class KeyField:
    """The API key hash ``<p>:{sN}:key:<kid>``."""

    ACCOUNT: Final = "acct"
    STATUS: Final = "status"  # KEY_ACTIVE | KEY_REVOKED
    ENVIRONMENT: Final = "env"
    CAP: Final = "cap"  # credits per UTC day; -1 = no cap
    NAME: Final = "name"
    EXPIRES: Final = "exp"  # unix seconds from which the key is expired; 0 or absent = never
    LAST_USED: Final = "used"  # unix seconds of the key's last reserve; absent: never used
    MODELS: Final = "models"  # ALL_MODELS, or the aliases it may use, each between spaces
    RATE_LIMIT: Final = "rpm"  # requests it may start in any 60 s; 0 or absent = no limit
    CEILING: Final = "mcr"  # the most credits one request may hold; 0 or absent = no ceiling


ALL_MODELS: Final = "*"
"""``KeyField.MODELS`` of a key that may use every alias."""
NO_CAP: Final = -1
"""``KeyField.CAP`` of a key without a daily cap; a threshold argument that clears it."""


def models_field(allowed: str | None) -> str:
    """``KeyField.MODELS`` for a key allowed the aliases ``allowed`` (space-separated; None:
    every alias): each alias between spaces, so ``lib/keys.lua`` finds ``' alias '``."""
    return ALL_MODELS if allowed is None else f" {allowed} "


def allowed_models(raw: Any) -> list[str] | None:
    """The aliases a ``KeyField.MODELS`` value allows, in its order; None: every alias (or
    no record)."""
    if raw is None or as_text(raw) == ALL_MODELS:
        return None
    return as_text(raw).split()


KEY_ACTIVE: Final = b"active"


class ReservationField:
    """An open reservation's hash ``<p>:{sN}:rsv:<rid>``."""

    ACCOUNT: Final = "acct"
    KEY: Final = "kid"
    ENVIRONMENT: Final = "env"
    AMOUNT: Final = "amount"
    FROM_EARNED: Final = "fe"
    FROM_PURCHASED: Final = "fp"
    ALIAS: Final = "alias"
    DAY: Final = "day"
    DEADLINE: Final = "deadline"
    CAP_KEY: Final = "cap_key"  # the cap counter it holds credits in (a key name)
    IDEMPOTENCY: Final = "idem"  # its request's Idempotency-Key record (a key name), if any
    API: Final = "api"  # absent on reservations made before it existed: API_CHAT


API_CHAT: Final = "chat"
"""``POST /v1/chat/completions``; the API of usage recorded before svc told APIs apart."""
API_RESPONSES: Final = "responses"
"""``POST /v1/responses``."""
API_MESSAGES: Final = "messages"
"""``POST /v1/messages`` (Anthropic's Messages API)."""
# chat first: its usage fields count every API
APIS: Final = (API_CHAT, API_RESPONSES, API_MESSAGES)


def earned_expired(earned_exp: int, now: float) -> bool:
    """``lib/earned.lua``'s rule, for the reads made outside the scripts: an earned pool
    whose ``AccountField.EARNED_EXP`` is that (0: empty, never expires) has expired at
    ``now`` (from that second on)."""
    return earned_exp > 0 and now >= earned_exp


def pools(values: list[Any]) -> tuple[int, int, int] | None:
    """``(earned, earned_exp, purchased)`` from an HMGET of ``ACCOUNT_POOLS``; None when the
    account hash does not exist."""
    earned, earned_exp, purchased = values
    if purchased is None:
        return None
    return int(earned or 0), int(earned_exp or 0), int(purchased)


ACCOUNT_POOLS = [AccountField.EARNED, AccountField.EARNED_EXP, AccountField.PURCHASED]

COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "credits")


class UsageCounters(msgspec.Struct, frozen=True):
    """Sums of settled requests."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    credits: int = 0

    def plus(self, other: UsageCounters) -> UsageCounters:
        return UsageCounters(
            self.requests + other.requests,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.credits + other.credits,
        )

    def minus(self, other: UsageCounters) -> UsageCounters:
        return UsageCounters(
            self.requests - other.requests,
            self.prompt_tokens - other.prompt_tokens,
            self.completion_tokens - other.completion_tokens,
            self.credits - other.credits,
        )


def usage_field(environment: str, counter: str, api: str = API_CHAT) -> str:
    """A usage hash's field: ``<environment>:<counter>`` (``live:credits``) counts every
    API; ``<environment>:<api>:<counter>`` (``live:responses:credits``) the part of it an
    API other than chat served. Chat's part is the rest: the hot path of chat completions
    writes no field more than it did before APIs were told apart."""
    if api == API_CHAT:
        return f"{environment}:{counter}"
    return f"{environment}:{api}:{counter}"


GROUP_KEY: Final = "key"
GROUP_MODEL: Final = "model"
GROUPS = (GROUP_KEY, GROUP_MODEL)
"""What a usage day hash also counts per value: the key (its kid) and the model served
(its alias)."""


GROUP_COUNTERS = ("requests", "tokens", "credits")
"""What a group's fields count: prompt and completion tokens as one (a group shows only
their sum), so settle writes three fields per group, not four."""


def group_field(environment: str, group: str, value: str, counter: str) -> str:
    """A usage day hash's field counting one key's or model's part of the day:
    ``<environment>:<group>:<value>:<counter>`` (``live:model:svc-fast:credits``), one
    counter of ``GROUP_COUNTERS``."""
    return f"{environment}:{group}:{value}:{counter}"


def group_values(counters: UsageCounters) -> list[int]:
    """``counters`` as a group's fields count them (in ``GROUP_COUNTERS`` order)."""
    return [
        counters.requests,
        counters.prompt_tokens + counters.completion_tokens,
        counters.credits,
    ]


def is_group_field(name: str) -> bool:
    """Whether a usage hash's field is a ``group_field``."""
    parts = name.split(":")
    return len(parts) >= 4 and parts[1] in GROUPS


def group_counters(
    fields: dict[str, int], environment: str, group: str
) -> dict[str, UsageCounters]:
    """A day hash's counters (``fields``: field -> value) of each value of ``group``; a
    group's tokens (prompt and completion together) are in ``prompt_tokens``."""
    head = f"{environment}:{group}:"
    found: dict[str, dict[str, int]] = {}
    for name, value in fields.items():
        if name.startswith(head):
            grouped, _, counter = name[len(head) :].rpartition(":")
            found.setdefault(grouped, {})[counter] = value
    return {
        grouped: UsageCounters(
            requests=counts.get("requests", 0),
            prompt_tokens=counts.get("tokens", 0),
            credits=counts.get("credits", 0),
        )
        for grouped, counts in found.items()
    }


USAGE_UPSTREAM: Final = "upstream"  # the upstream reported the tokens billed
USAGE_ESTIMATED: Final = "estimated"  # svc counted them (no report came)


class Rates(NamedTuple):
    """An alias's prices, credits per 1,000 tokens, as settle charges them (settle.lua holds
    the formula: docs/api.md, "Pricing"), and as a request's usage event records them
    (``Served.prices``)."""

    input: int  # uncached prompt tokens
    cached_input: int  # prompt tokens the upstream read from its cache
    cache_write: int  # prompt tokens the upstream wrote to its cache (reported apart)
    output: int  # completion tokens, reasoning included


class Served(msgspec.Struct, frozen=True, kw_only=True):
    """What a settled request's activity row tells beyond its usage. Settle takes it as one
    text and its event carries it as it is (``served``): nine fields cost the hot path more
    than one. The default: nothing is known (the sweeper, events from before it)."""

    response_id: str = ""  # chatcmpl-svc-…, resp_svc_…
    created: int = 0  # unix seconds the request started
    ttfb_ms: int = 0
    duration_ms: int = 0
    usage_source: str = USAGE_ESTIMATED
    # the prices settle was sent with (what its receipt names); None: not known (a text
    # written before svc kept them has five fields, not nine)
    prices: Rates | None = None
    # (operators only) the upstream that served: its provider (by its name in the models
    # file, which has no spaces) and model, and what it cost in micro-units of
    # ``cost_currency`` (app.completion.costs; "": the models file names no cost); "" and 0: not
    # known (a text written before svc kept them has nine fields at most)
    provider: str = ""
    upstream_model: str = ""
    cost_currency: str = ""
    upstream_cost: int = 0

    def text(self) -> str:
        """The form settle takes (``parse`` reads it back): space-separated, the prices,
        then the upstream (its model last: the only part that may hold a space)."""
        if not self.response_id:
            return ""
        text = (
            f"{self.response_id} {self.created} {self.ttfb_ms} {self.duration_ms} "
            f"{self.usage_source}"
        )
        if self.prices is None:
            return text
        text = f"{text} {' '.join(str(price) for price in self.prices)}"
        if not self.provider:
            return text
        return (
            f"{text} {self.provider} {self.cost_currency or NO_CURRENCY} "
            f"{self.upstream_cost} {self.upstream_model}"
        )

    @classmethod
    def parse(cls, text: str) -> Served:
        """``text()`` read back, with or without its prices and upstream; anything else is
        nothing known."""
        # The flusher parses one per event: one struct built, the digits checked in C.
        parts = text.split(" ", 12)
        count = len(parts)
        numbers = parts[1:4] + parts[5:9] + parts[11:12]
        if count not in (5, 9, 13) or not all(map(str.isdigit, numbers)):
            return NOTHING_SERVED
        source = USAGE_UPSTREAM if parts[4] == USAGE_UPSTREAM else USAGE_ESTIMATED
        prices = None
        if count > 5:
            prices = Rates(int(parts[5]), int(parts[6]), int(parts[7]), int(parts[8]))
        upstream = count == 13  # else the fields of an upstream keep their defaults
        return cls(
            response_id=parts[0],
            created=int(parts[1]),
            ttfb_ms=int(parts[2]),
            duration_ms=int(parts[3]),
            usage_source=source,
            prices=prices,
            provider=parts[9] if upstream else "",
            cost_currency="" if not upstream or parts[10] == NO_CURRENCY else parts[10],
            upstream_cost=int(parts[11]) if upstream else 0,
            upstream_model=parts[12] if upstream else "",
        )


NO_CURRENCY: Final = "-"
"""``Served.text``'s currency of an upstream whose cost the models file does not name."""


NOTHING_SERVED = Served()
