"""A receipt names the prices its request was settled at: carried in the usage event's
``served`` text (settle.lua takes it and writes it as it is), written by the flusher to the
activity row's price columns (schema version 17), and read back from either. A ``served``
text from before (five fields), a swept request and a row written before version 17 tell
no prices (``null``), never wrong ones.

The settles run on fakeredis, a real Valkey and the Valkey Cluster (the ``ledger``
fixture), the stores on SQLite and PostgreSQL (the ``database`` fixture)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from app.credits.outcomes import Rates, Tokens
from app.kv.fields import NOTHING_SERVED, Served
from app.kv.stream_events import EventField, UsageEvent, parse_event
from app.store import ActivityRecord, Store, migrations
from app.store.migrations import MIGRATIONS
from app.usage.batch_rows import activity_row
from app.usage.flusher import Flusher
from app.usage.receipts import ReceiptPrices, Receipts, receipt
from tests.conftest import Clock
from tests.support.databases import Database
from tests.support.ledgers import Ledgers
from tests.support.scripts_helpers import account, key, reserve

PID = "acct_PR"
KID = "kidPR0000000"
RATES = Rates(input=7, cached_input=3, cache_write=9, output=21)
SERVED = Served(
    response_id="chatcmpl-svc-42",
    created=1_790_000_000,
    ttfb_ms=12,
    duration_ms=345,
    usage_source="upstream",
    prices=RATES,
)
OLD_TEXT = "chatcmpl-svc-42 1790000000 12 345 upstream"
"""A ``served`` text as svc wrote it before it kept prices."""


def test_served_reads_back_with_and_without_prices() -> None:
    assert SERVED.text() == f"{OLD_TEXT} 7 3 9 21"
    assert Served.parse(SERVED.text()) == SERVED
    unpriced = msgspec.structs.replace(SERVED, prices=None)
    assert unpriced.text() == OLD_TEXT  # what settle wrote before: the same text
    assert Served.parse(OLD_TEXT) == unpriced
    assert Served.parse(OLD_TEXT).prices is None
    assert Served.parse("") == NOTHING_SERVED  # the sweeper's
    assert NOTHING_SERVED.text() == ""


@pytest.mark.parametrize(
    "text",
    [
        f"{OLD_TEXT} 7",  # prices cut short
        f"{OLD_TEXT} 7 3 9",
        f"{OLD_TEXT} 7 3 9 21 5",  # one too many
        f"{OLD_TEXT} 7 3 x 21",
        f"{OLD_TEXT} 7 -3 9 21",
        "chatcmpl-svc-42 1790000000 12 x upstream 7 3 9 21",
    ],
)
def test_a_served_text_of_another_shape_tells_nothing(text: str) -> None:
    assert Served.parse(text) == NOTHING_SERVED


def _event(served: str | None) -> UsageEvent:
    fields = {
        EventField.ACCOUNT: PID,
        EventField.KEY: KID,
        EventField.ENVIRONMENT: "live",
        EventField.ALIAS: "svc-fast",
        EventField.DAY: "2026-09-21",
        EventField.PROMPT_TOKENS: "100",
        EventField.COMPLETION_TOKENS: "10",
        EventField.CREDITS: "1",
        EventField.RESERVATION: "rsv_PR1",
        EventField.OUTCOME: "completed",
        EventField.TS: "1790000001",
    }
    if served is not None:
        fields[EventField.SERVED] = served
    event = parse_event(b"1790000001000-0", {k.encode(): v.encode() for k, v in fields.items()})
    assert isinstance(event, UsageEvent)
    return event


def test_the_activity_row_has_the_event_s_prices_or_none() -> None:
    priced = activity_row(3, _event(SERVED.text()))
    assert (
        priced.input_price,
        priced.cached_input_price,
        priced.cache_write_price,
        priced.output_price,
    ) == (7, 3, 9, 21)
    assert receipt(priced).prices == ReceiptPrices(
        input=7, cached_input=3, cache_write=9, output=21
    )
    for old in (_event(OLD_TEXT), _event(None)):  # before svc kept prices; no served at all
        row = activity_row(3, old)
        assert (row.input_price, row.output_price) == (None, None)
        assert receipt(row).prices is None
    assert msgspec.json.decode(msgspec.json.encode(receipt(priced)))["prices"] == {
        "input": 7,
        "cached_input": 3,
        "cache_write": 9,
        "output": 21,
    }


@pytest.fixture
async def store(database: Database) -> AsyncIterator[Store]:
    s = database.open()
    await s.migrate()
    yield s
    await s.close()


async def test_a_receipt_names_its_prices_from_the_stream_and_from_the_store(
    ledger: Ledgers, store: Store, clock: Clock
) -> None:
    """From a real settle on each Redis flavour to each store: the prices settle charged at,
    in the receipt read from the usage stream and the same from the flushed row; a served
    text without prices (an event from before) and a swept request tell none."""
    await account(ledger, PID, purchased=100_000)
    ident = await key(ledger, PID, KID)
    settled = []
    for n, prices in enumerate((RATES, None)):
        hold = await reserve(ledger, ident, f"rsv_PR{n}", clock(), max_out=1_000)
        served = msgspec.structs.replace(
            SERVED, response_id=f"chatcmpl-svc-pr{n}", created=int(clock()), prices=prices
        )
        done = await ledger.holds.settle(
            hold,
            now=clock(),
            rates=RATES,
            tokens=Tokens(1_000, 100, 400, 100),
            outcome="completed",
            served=served,
        )
        settled.append(done.credits_used)
    # 500 uncached x 7 + 400 cached x 3 + 100 written x 9 + 100 x 21 = 7,700
    assert settled == [8, 8]
    swept = await reserve(ledger, ident, "rsv_PRswept", clock(), deadline=clock() + 5)
    clock.advance(10)
    await ledger.holds.settle(
        swept, now=clock(), credits_used=0, outcome="swept", only_if_expired=True
    )
    ids = ("chatcmpl-svc-pr0", "chatcmpl-svc-pr1", "rsv_PRswept")
    receipts = Receipts(store, ledger.redis, ledger.layout)
    before = [await receipts.find(PID, i, "live") for i in ids]
    assert await store.get_activity(PID, ids[0]) is None  # from the stream
    billed = ReceiptPrices(input=7, cached_input=3, cache_write=9, output=21)
    assert [r.prices for r in before] == [billed, None, None]
    assert await Flusher(ledger.redis, ledger.layout, store, clock=clock).flush_all() == 3
    rows = [await store.get_activity(PID, i) for i in ids]
    assert [(r.input_price, r.output_price) if r else "missing" for r in rows] == [
        (7, 21),
        (None, None),
        (None, None),
    ]
    assert [await receipts.find(PID, i, "live") for i in ids] == before


PRICES = ("input_price", "cached_input_price", "cache_write_price", "output_price")


async def test_migration_17_adds_the_price_columns_null_for_rows_already_there(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database at version 16 holds activity rows: after the upgrade they are read with
    no prices (not known), and a row written after it keeps its own."""
    assert dict(MIGRATIONS)[17] == tuple(
        f"ALTER TABLE activity ADD COLUMN {column} BIGINT" for column in PRICES
    )
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:16])
    old = database.open()
    await old.migrate()
    await old.close()
    row = activity_row(3, _event(SERVED.text()))
    # the columns of version 16: those before the prices (later ones came after them)
    fields = ActivityRecord.__struct_fields__
    kept = list(fields[: fields.index(PRICES[0])])
    values = [getattr(row, f) for f in kept]
    literals = ", ".join(repr(v) if isinstance(v, int) else f"'{v}'" for v in values)
    await database.execute(f"INSERT INTO activity ({', '.join(kept)}) VALUES ({literals})")
    monkeypatch.undo()
    s = database.open()
    try:
        await s.migrate()
        found = await s.get_activity(PID, "chatcmpl-svc-42")
        assert found == msgspec.structs.replace(row, **dict.fromkeys(PRICES))
        assert found is not None
        assert receipt(found).prices is None
        later = msgspec.structs.replace(row, event_key="3:1790000002000-0", id="chatcmpl-svc-43")
        assert await s.apply_usage(3, "1790000002000-0", [], activity=[later])
        assert await s.get_activity(PID, "chatcmpl-svc-43") == later
    finally:
        await s.close()
