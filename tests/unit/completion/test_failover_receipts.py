"""A completion's failovers as its receipt tells them: the upstreams of its alias that failed
before their first piece, each followed by the next, before the one that served. Counted
where the candidates are tried (``Completion.connect``), sent to settle with the usage, and
the same in the receipt read from the usage stream and from the flushed row. The ``svc``
metadata chunk does not carry it (its fields are fixed).

Each test runs on fakeredis, a real Valkey and the Valkey Cluster (the ``ledger`` fixture)
and a SQLite store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import msgspec
import pytest

from app.apis.chat.request import parse_chat_request
from app.completion.catalog import UpstreamRef, default_catalog
from app.completion.completion import Completion
from app.completion.router import UpstreamRouter
from app.completion.service import CompletionService
from app.completion.settlement import drain_background
from app.core.errors import ApiError, ErrorKind, UpstreamError
from app.credits.outcomes import Identity
from app.kv.stream_events import EventField
from app.store import Store
from app.upstream.base import Piece, UpstreamCall, Usage
from app.upstream.simulated import SimulatedProvider
from app.usage.flusher import Flusher
from app.usage.receipts import Receipts
from tests.conftest import Clock
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key

PID = "acct_FO"
KID = "kidFO0000000"
ALIAS = "svc-fast"


class Answering:
    """Streams two pieces, then a usage report."""

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        self.calls += 1
        yield ["one ", "two "]
        yield [Usage(7, 2)]

    async def close(self) -> None:
        return None


class Failing:
    """Fails before its first piece: a server error (the next upstream is tried), or the
    request's own fault (``client_error``: none is)."""

    def __init__(self, *, client_error: bool = False) -> None:
        self.client_error = client_error
        self.calls = 0

    async def stream(self, call: UpstreamCall) -> AsyncIterator[list[Piece]]:
        self.calls += 1
        raise UpstreamError("upstream answered 500", client_error=self.client_error)
        yield []  # pragma: no cover - an async generator that fails on its first read

    async def close(self) -> None:
        return None


async def _completion(
    ledger: Ledgers, clock: Clock, upstreams: list[tuple[str, object]]
) -> tuple[Identity, Completion]:
    """A completion of ``ALIAS`` served by ``upstreams`` (name, provider), tried in order."""
    await account(ledger, PID, purchased=1_000_000)
    ident = await key(ledger, PID, KID)
    aliases = dict(default_catalog().aliases)
    aliases[ALIAS] = msgspec.structs.replace(
        aliases[ALIAS],
        upstreams=tuple(UpstreamRef(provider=name, model=f"{name}-model") for name, _ in upstreams),
    )
    router = UpstreamRouter(dict(upstreams), SimulatedProvider())  # type: ignore[arg-type]
    service = CompletionService(ledger.holds, router, deadline_s=900, clock=clock)
    body = {"model": ALIAS, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    params = parse_chat_request(json.dumps(body).encode(), aliases)
    opened = await service.open(ident, params)
    assert isinstance(opened, Completion)
    return ident, opened


async def _relay(completion: Completion) -> tuple[str, dict[str, object]]:
    """The stream's id and its ``svc`` metadata object."""
    writes: list[bytes] = []

    async def send(data: bytes, more: bool) -> None:
        writes.append(data)

    await completion.relay(send)
    await drain_background()
    events = [e for e in b"".join(writes).decode().split("\n\n") if e.startswith("data: {")]
    last = json.loads(events[-1][6:])
    return last["id"], last["svc"]


async def _fields(ledger: Ledgers, ident: Identity) -> dict[str, str]:
    """The usage event settle appended (the stream's newest entry), as text."""
    ((_, fields),) = await ledger.redis.xrevrange(ledger.layout.events(ident.shard), count=1)
    return {
        (k if isinstance(k, str) else k.decode()): (v if isinstance(v, str) else v.decode())
        for k, v in fields.items()
    }


@pytest.mark.parametrize("failed", [0, 1, 2])
async def test_the_receipt_counts_the_upstreams_failed_over_from(
    ledger: Ledgers, store: Store, clock: Clock, failed: int
) -> None:
    down = [Failing() for _ in range(failed)]
    up = Answering()
    upstreams: list[tuple[str, object]] = [(f"down{n}", p) for n, p in enumerate(down)]
    ident, completion = await _completion(ledger, clock, [*upstreams, ("up", up)])
    assert completion.failovers == failed
    activity_id, svc = await _relay(completion)
    assert [p.calls for p in down] == [1] * failed
    assert up.calls == 1
    # the metadata chunk's fields are the contract's: no failovers there
    assert "failovers" not in svc
    fields = await _fields(ledger, ident)
    # the hot path's entry stays small: the field only when there was a failover
    assert fields.get(EventField.FAILOVERS) == (str(failed) if failed else None)
    receipts = Receipts(store, ledger.redis, ledger.layout)
    before = await receipts.find(PID, activity_id, "live")
    assert before.failovers == failed
    assert await store.get_activity(PID, activity_id) is None  # from the stream
    assert await Flusher(ledger.redis, ledger.layout, store, clock=clock).flush_all() == 1
    row = await store.get_activity(PID, activity_id)
    assert row is not None
    assert row.failovers == failed
    assert await receipts.find(PID, activity_id, "live") == before


async def test_the_request_s_own_fault_is_no_failover_and_leaves_no_receipt(
    ledger: Ledgers, clock: Clock
) -> None:
    """A 400 from the first upstream is the request's fault: the next one is never tried,
    the reservation is released, and no usage (no receipt) is recorded."""
    refusing, never = Failing(client_error=True), Answering()
    with pytest.raises(ApiError) as raised:
        await _completion(ledger, clock, [("refusing", refusing), ("never", never)])
    assert raised.value.kind is ErrorKind.INVALID_VALUE
    assert (refusing.calls, never.calls) == (1, 0)
    await drain_background()
    shard = ledger.layout.shard(PID)
    assert await ledger.redis.xlen(ledger.layout.events(shard)) == 0


async def test_every_upstream_failing_is_a_502_and_leaves_no_receipt(
    ledger: Ledgers, clock: Clock
) -> None:
    failing = [Failing(), Failing()]
    with pytest.raises(ApiError) as raised:
        await _completion(ledger, clock, [("a", failing[0]), ("b", failing[1])])
    assert raised.value.kind is ErrorKind.UPSTREAM_UNAVAILABLE
    assert [p.calls for p in failing] == [1, 1]
    await drain_background()
    shard = ledger.layout.shard(PID)
    assert await ledger.redis.xlen(ledger.layout.events(shard)) == 0
