"""What each request cost upstream (issue 52): the models file's costs, checked at start;
the cost of a request through the mock upstream reporting known usage with cached and
cache-write tokens, on chat, Responses and Messages (each through its provider's own API),
exact to the micro-unit against an independent computation; failover; the usage event,
the flushed activity row and cost rollups equal to the sum of the requests; the operator's
receipt names the upstream and its cost, the account's own never does.

On fakeredis, the real Valkey and the Valkey Cluster (the ``ledger`` fixture), a SQLite
store (the PostgreSQL rollups: tests/unit/books)."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import msgspec
import pytest

from app.apis.chat import CHAT
from app.apis.dialect import Dialect
from app.apis.messages import MESSAGES
from app.apis.responses import RESPONSES
from app.completion.catalog import load_catalog
from app.completion.costs import CostEntry, UpstreamCost, cost_micros, upstream_cost
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.completion.settlement import drain_background
from app.core.errors import ModelsFileError
from app.credits.outcomes import Identity, Tokens
from app.http.rsgi.exchange import RSGIExchange
from app.http.streams import serve_stream
from app.kv.fields import Served
from app.kv.stream_events import UsageEvent, parse_event
from app.runtime import build_providers
from app.store import Store
from app.upstream.simulated import SimulatedProvider
from app.usage.activity import ActivityReader, parse_filter
from app.usage.export import activity_csv
from app.usage.flusher import Flusher
from app.usage.receipts import Receipt, Receipts
from bench.mock_upstream import MockUpstream
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.rsgi_transport import FakeHeaders, FakeProtocol, FakeScope
from tests.support.scripts_helpers import account, key
from tests.support.upstream_helpers import stream_services

PID, KID = "acct_COST", "kidCOST00000"
PRICES = {  # the providers' prices per million tokens
    "chat": {"input": "0.4", "cached_input": "0.1", "cache_write": "0.5", "output": "1.6"},
    "resp": {"input": "1.25", "cached_input": "0.125", "cache_write": "1.25", "output": "10"},
    "anth": {"input": "3", "cached_input": "0.3", "cache_write": "3.75", "output": "15"},
}
CURRENCY = {"chat": "USD", "resp": "USD", "anth": "EUR"}


def _cost(name: str) -> str:
    return "{ " + ", ".join(f"{k} = {v}" for k, v in PRICES[name].items()) + " }"


def _models(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(
        f'[providers.chat]\nbase_url = "{base_url}"\n'
        f'[providers.resp]\nbase_url = "{base_url}"\nresponses_api = true\n'
        f'[providers.anth]\nbase_url = "{base_url}"\nmessages_api = true\ncost_currency = "EUR"\n'
        "[aliases.svc-fast]\nupstreams = [\n"
        f'  {{ provider = "chat", model = "down-fail500", cost = {_cost("resp")} }},\n'
        f'  {{ provider = "chat", model = "c-cached30-writes10", cost = {_cost("chat")} }},\n]\n'
        f'[aliases.svc-code]\nupstreams = [{{ provider = "resp", model = "r-cached40-writes20", '
        f"cost = {_cost('resp')} }}]\n"
        f'[aliases.svc-smart]\nupstreams = [{{ provider = "anth", model = "a-cached50-writes25", '
        f"cost = {_cost('anth')} }}]\n"
    )
    return path


REQUESTS: list[tuple[Dialect, str, dict[str, Any]]] = [
    (CHAT, "chat", {"model": "svc-fast", "messages": [{"role": "user", "content": "hi " * 90}]}),
    (RESPONSES, "resp", {"model": "svc-code", "input": "hello " * 80, "stream": True}),
    (
        MESSAGES,
        "anth",
        {
            "model": "svc-smart",
            "max_tokens": 256,
            "messages": [{"role": "user", "content": "hey " * 70}],
            "stream": True,
        },
    ),
]


class Site:
    def __init__(self, ledger: Ledgers, store: Store, clock: Clock, catalog_path: Path) -> None:
        catalog = load_catalog(catalog_path)
        router = UpstreamRouter(
            build_providers(catalog), SimulatedProvider(), catalog.aliases.values()
        )
        self.ledger, self.store, self.clock = ledger, store, clock
        self.service = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
        self.aliases = catalog.aliases

    async def serve(self, ident: Identity, api: Dialect, body: dict[str, Any]) -> UsageEvent:
        raw = json.dumps(body).encode()
        scope = FakeScope("POST", api.path, FakeHeaders([("content-length", str(len(raw)))]))
        services = stream_services(self.service, ident, self.aliases)
        await serve_stream(api, services, RSGIExchange(scope, FakeProtocol([raw])), "req_cost")
        await drain_background()
        stream = self.ledger.layout.events(ident.shard)
        ((entry_id, fields),) = await self.ledger.redis.xrevrange(stream, count=1)
        event = parse_event(entry_id, fields)
        assert isinstance(event, UsageEvent)
        return event


@pytest.fixture
async def site(
    ledger: Ledgers, store: Store, clock: Clock, mock: MockUpstream, tmp_path: Path
) -> tuple[Site, Identity]:
    await account(ledger, PID, purchased=10_000_000)
    ident = await key(ledger, PID, KID)
    return Site(ledger, store, clock, _models(tmp_path, mock.base_url)), ident


def _expected(provider: str, e: UsageEvent) -> int:
    """The cost, worked out apart: tokens times the price per million, rounded up."""
    price = {k: Fraction(v) for k, v in PRICES[provider].items()}
    uncached = e.prompt_tokens - e.cached_tokens - e.cache_write_tokens
    exact = (
        uncached * price["input"]
        + e.cached_tokens * price["cached_input"]
        + e.cache_write_tokens * price["cache_write"]
        + e.completion_tokens * price["output"]
    )
    return math.ceil(exact)


async def test_each_api_s_request_costs_its_usage_at_its_provider_s_prices(
    site: tuple[Site, Identity],
) -> None:
    s, ident = site
    events = []
    for api, provider, body in REQUESTS:
        e = await s.serve(ident, api, body)
        events.append(e)
        assert e.served.usage_source == "upstream"
        assert e.cached_tokens > 0
        assert e.cache_write_tokens > 0
        assert e.served.provider == provider
        assert e.served.cost_currency == CURRENCY[provider]
        assert e.served.upstream_cost == _expected(provider, e) > 0
    fast = events[0]
    assert (fast.failovers, fast.served.upstream_model) == (1, "c-cached30-writes10")
    # the flusher: rollups are the sums of the requests, the rows name the upstream
    assert await Flusher(s.ledger.redis, s.ledger.layout, s.store, clock=s.clock).flush_all()
    sums = await s.store.books_sums(fast.day, fast.day)
    by_alias = {c.alias: c for c in sums.costs}
    for e in events:
        rolled = by_alias[e.alias]
        assert (rolled.requests, rolled.credits, rolled.cost_micros) == (
            1,
            e.credits,
            e.served.upstream_cost,
        )
        assert (rolled.cached_tokens, rolled.cache_write_tokens) == (
            e.cached_tokens,
            e.cache_write_tokens,
        )
        assert (rolled.provider, rolled.upstream_model, rolled.currency) == (
            e.served.provider,
            e.served.upstream_model,
            e.served.cost_currency,
        )
    receipts = Receipts(s.store, s.ledger.redis, s.ledger.layout)
    for e in events:
        rid = e.served.response_id
        row = await s.store.get_activity(PID, rid)
        assert row is not None
        assert row.upstream_cost_micros == e.served.upstream_cost
        operator = await receipts.find_for_operator(PID, rid)
        assert operator.upstream is not None
        assert operator.upstream.cost_micros == e.served.upstream_cost
        assert operator.upstream.currency == e.served.cost_currency
        assert operator.upstream.provider == e.served.provider
        own = msgspec.json.decode(msgspec.json.encode(await receipts.find(PID, rid, "live")))
        assert not _names_upstream(own), own
        assert type(await receipts.find(PID, rid, "live")) is Receipt
    # the account's activity, as JSON and CSV: no upstream, no cost
    reader = ActivityReader(s.store)
    page = await reader.page(PID, "live", parse_filter({}))
    assert len(page.data) == 3
    assert not _names_upstream(msgspec.json.decode(msgspec.json.encode(page)))
    wanted = parse_filter({}, csv_export=True)
    query = await reader.query(PID, "live", wanted)
    lines = [line async for line in activity_csv(reader.rows(query, wanted.limit))]
    assert len(lines) == 4
    assert not any(w in "".join(lines) for w in ("cost", "provider", "c-cached", "EUR"))


OPERATORS_ONLY = {"upstream", "provider", "upstream_model", "cost_currency", "currency"}


def _names_upstream(answer: Any) -> bool:
    """Whether a /v1 answer holds any of the operators' fields (a cost, by name), or the
    upstream's model names or cost currency."""
    keys: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            keys.update(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(answer)
    text = json.dumps(answer)
    return bool(keys & OPERATORS_ONLY or any("cost" in k for k in keys)) or any(
        word in text for word in ("c-cached", "r-cached", "a-cached", "EUR", "micros")
    )


async def test_a_request_every_upstream_failed_costs_nothing(
    ledger: Ledgers, store: Store, clock: Clock, mock: MockUpstream, tmp_path: Path
) -> None:
    await account(ledger, PID, purchased=1_000_000)
    ident = await key(ledger, PID, KID)
    path = tmp_path / "down.toml"
    path.write_text(
        f'[providers.chat]\nbase_url = "{mock.base_url}"\n'
        f'[aliases.svc-fast]\nupstreams = [{{ provider = "chat", model = "x-fail500", '
        f"cost = {_cost('chat')} }}]\n"
    )
    s = Site(ledger, store, clock, path)
    raw = json.dumps(REQUESTS[0][2]).encode()
    scope = FakeScope("POST", CHAT.path, FakeHeaders([("content-length", str(len(raw)))]))
    protocol = FakeProtocol([raw])
    services = stream_services(s.service, ident, s.aliases)
    await serve_stream(CHAT, services, RSGIExchange(scope, protocol), "req_down")
    await drain_background()
    assert protocol.response.result().status == 502
    assert await ledger.redis.xlen(ledger.layout.events(ident.shard)) == 0  # no usage, no cost


# -- the models file ------------------------------------------------------------------------


def test_costs_are_integers_of_micro_units_per_million_tokens(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(
        '[providers.p]\nbase_url = "http://p/v1"\ncost_currency = "JPY"\n'
        '[aliases.svc-fast]\nupstreams = [{ provider = "p", model = "m", '
        "cost = { input = 0.075, output = 2 } }]\n"
    )
    (ref,) = load_catalog(path).aliases["svc-fast"].upstreams
    assert ref.cost == UpstreamCost("JPY", 75_000, 75_000, 75_000, 2_000_000)
    assert load_catalog(path).aliases["svc-code"].upstreams[0].cost is None


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        ("{ input = -0.4, output = 1 }", "input: -0.4 must be a number from 0 up"),
        ('{ input = "0.4", output = 1 }', "Expected `float`, got `str`"),
        ("{ input = 0.0000001, output = 1 }", "input: 1e-07 has more than 6 decimals"),
        ("{ input = nan, output = 1 }", "input: nan must be a number from 0 up"),
        ("{ input = 1 }", "missing required field `output`"),
        ("{ input = 1, output = 1, discount = 1 }", "unknown field `discount`"),
    ],
)
def test_a_bad_cost_stops_start_up_in_one_line(tmp_path: Path, cost: str, message: str) -> None:
    path = tmp_path / "m.toml"
    path.write_text(
        '[providers.p]\nbase_url = "http://p/v1"\n'
        f'[aliases.svc-fast]\nupstreams = [{{ provider = "p", model = "m", cost = {cost} }}]\n'
    )
    with pytest.raises(ModelsFileError) as raised:
        load_catalog(path)
    text = str(raised.value)
    assert message in text
    assert "\n" not in text
    assert text.startswith(f"{path}:")


@pytest.mark.parametrize("currency", ["usd", "US", "DOLLARS"])
def test_a_currency_is_an_iso_code(tmp_path: Path, currency: str) -> None:
    path = tmp_path / "m.toml"
    path.write_text(f'[providers.p]\nbase_url = "http://p/v1"\ncost_currency = "{currency}"\n')
    with pytest.raises(ModelsFileError, match="cost_currency"):
        load_catalog(path)


@pytest.mark.parametrize(
    "tokens",
    [
        Tokens(prompt=0, completion=0),
        Tokens(prompt=1, completion=0),
        Tokens(prompt=12_000, completion=500, cached=8_000, cache_writes=1_000),
        Tokens(prompt=2**40, completion=2**40, cached=2**39, cache_writes=2**38),
    ],
)
def test_the_cost_is_rounded_up_once_to_a_micro_unit(tokens: Tokens) -> None:
    entry = CostEntry(input=0.4, cached_input=0.1, cache_write=0.5, output=1.6)
    price = {"input": Fraction("0.4"), "cached": Fraction("0.1"), "writes": Fraction("0.5")}
    uncached = tokens.prompt - tokens.cached - tokens.cache_writes
    exact = (
        uncached * price["input"]
        + tokens.cached * price["cached"]
        + tokens.cache_writes * price["writes"]
        + tokens.completion * Fraction("1.6")
    )
    assert cost_micros(upstream_cost(entry, "USD"), tokens) == math.ceil(exact)


def test_the_served_text_carries_the_upstream_and_reads_back() -> None:
    served = Served(
        response_id="chatcmpl-svc-1",
        created=5,
        prices=None,
        provider="openai",
        upstream_model="a model name",
        cost_currency="USD",
        upstream_cost=3200,
    )
    # no prices: no upstream either (a sweeper's or an old form)
    assert Served.parse(served.text()).provider == ""
    from app.credits.outcomes import Rates

    priced = msgspec.structs.replace(served, prices=Rates(5, 2, 5, 15))
    assert Served.parse(priced.text()) == priced
    unpriced = msgspec.structs.replace(priced, cost_currency="", upstream_cost=0)
    assert Served.parse(unpriced.text()) == unpriced
    nine = msgspec.structs.replace(priced, provider="", upstream_model="", cost_currency="")
    assert Served.parse(nine.text()) == msgspec.structs.replace(nine, upstream_cost=0)
