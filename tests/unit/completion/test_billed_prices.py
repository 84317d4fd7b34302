"""A completion settles at its alias's prices and tells them to its receipt: the four prices
settle.lua charged at travel in the usage event's ``served`` text (no field and no Redis
call more on the hot path), and the receipt names them, read from the usage stream and from
the flushed row alike. On fakeredis, a real Valkey and the Valkey Cluster (the ``ledger``
fixture) and a SQLite store."""

from __future__ import annotations

import json

import msgspec

from app.apis.chat.request import parse_chat_request
from app.completion.catalog import UpstreamRef, default_catalog, price
from app.completion.completion import Completion
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.completion.settlement import billed_parts
from app.kv.fields import Served
from app.kv.stream_events import EventField
from app.store import Store
from app.upstream.simulated import SimulatedProvider
from app.usage.flusher import Flusher
from app.usage.receipts import ReceiptPrices, Receipts
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.pricing import charge
from tests.support.scripts_helpers import account, key
from tests.unit.completion.test_failover_receipts import Answering, _fields, _relay

PID = "acct_BP"
KID = "kidBP0000000"
ALIAS = "svc-fast"
PRICE = price(7, 21, cached_input=3, cache_write=9)  # none of them a default alias's


async def test_the_receipt_names_the_prices_the_alias_was_billed_at(
    ledger: Ledgers, store: Store, clock: Clock
) -> None:
    await account(ledger, PID, purchased=1_000_000)
    ident = await key(ledger, PID, KID)
    aliases = dict(default_catalog().aliases)
    aliases[ALIAS] = msgspec.structs.replace(
        aliases[ALIAS], price=PRICE, upstreams=(UpstreamRef(provider="up", model="up-model"),)
    )
    answering = Answering()  # 7 prompt and 2 completion tokens, as the upstream reports
    router = UpstreamRouter({"up": answering}, SimulatedProvider())  # type: ignore[dict-item]
    service = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    body = {"model": ALIAS, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    completion = await service.open(ident, parse_chat_request(json.dumps(body).encode(), aliases))
    assert isinstance(completion, Completion)
    activity_id, svc = await _relay(completion)
    assert answering.calls == 1
    assert svc["credits_used"] == charge(PRICE, billed_parts(completion.relayed.usage, 7, 2))
    served = Served.parse((await _fields(ledger, ident))[EventField.SERVED])
    assert (served.response_id, served.prices) == (activity_id, PRICE.rates)
    billed = ReceiptPrices(input=7, cached_input=3, cache_write=9, output=21)
    receipts = Receipts(store, ledger.redis, ledger.layout)
    before = await receipts.find(PID, activity_id, "live")
    assert (before.prices, before.credits_used) == (billed, svc["credits_used"])
    assert await store.get_activity(PID, activity_id) is None  # from the stream
    assert await Flusher(ledger.redis, ledger.layout, store, clock=clock).flush_all() == 1
    assert await receipts.find(PID, activity_id, "live") == before
