"""What only the PostgreSQL store has: URLs, the pool, errors of an unreachable server,
and the advisory locks that keep migrations and usage batches safe across processes.
The store contract itself is tested on every driver in ``test_store.py``."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from urllib.parse import quote

import psycopg
import pytest

from app.core.errors import StoreError
from app.store import AccountRecord, KeyRecord, UsageRollup, open_store
from app.store.migrations import MIGRATIONS
from app.store.postgres import PostgresStore
from app.store.postgres_sql import USAGE_LOCK_CLASS, pg

PASSWORD = "s3cret-Pa55word"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(postgres_url)
    await s.migrate()
    yield s
    await s.close()


def _use(credits: int, kid: str = "k1") -> UsageRollup:
    return UsageRollup(
        account_pid="acct_A",
        kid=kid,
        day="2026-11-20",
        alias="svc-fast",
        environment="live",
        api="chat",
        requests=1,
        prompt_tokens=10,
        completion_tokens=20,
        credits=credits,
    )


def _key(kid: str) -> KeyRecord:
    return KeyRecord(
        kid=kid,
        account_pid="acct_A",
        name=kid,
        environment="live",
        daily_cap_credits=None,
        secret_hash="$argon2id$",
        last4="wxyz",
        created_at=10,  # all in one second: only seq orders them
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once the socket closes


# -- SQL --------------------------------------------------------------------------------


def test_shared_sql_becomes_postgresql_sql() -> None:
    query = "SELECT kid FROM api_keys WHERE account_pid = ? ORDER BY created_at DESC, kid"
    assert pg(query) == (
        'SELECT kid FROM api_keys WHERE account_pid = %s ORDER BY created_at DESC, kid COLLATE "C"'
    )
    assert pg("SELECT day FROM usage_daily ORDER BY day DESC") == (
        'SELECT day FROM usage_daily ORDER BY day COLLATE "C" DESC'
    )
    with pytest.raises(ValueError, match="literal %"):
        pg("SELECT 5 % 2")


# -- open_store -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://svc:{PASSWORD}@db.invalid:5432/svc",
        f"postgres://svc:{PASSWORD}@db.invalid/svc?sslmode=require",
        f"PostgreSQL://svc:{PASSWORD}@db.invalid/svc",
        "postgresql:///svc",  # the local Unix socket
    ],
)
async def test_open_store_does_no_io(url: str) -> None:
    s = open_store(url)
    assert isinstance(s, PostgresStore)
    assert s._pool is None
    assert PASSWORD not in repr(s)
    assert PASSWORD not in s.target
    await s.close()  # never opened: nothing to do


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://svc:{PASSWORD}@db:not-a-port/svc",
        f"postgresql://svc:{PASSWORD}@db/svc?no_such_option=1",
        f"postgresql://svc:{PASSWORD}@[db/svc",
    ],
)
def test_open_store_rejects_a_bad_postgresql_url(url: str) -> None:
    with pytest.raises(ValueError, match="invalid PostgreSQL URL") as err:
        open_store(url)
    assert PASSWORD not in str(err.value)
    assert err.value.__cause__ is None


# -- failures -------------------------------------------------------------------------


async def test_an_unreachable_server_is_a_store_error_without_the_password() -> None:
    s = PostgresStore(
        f"postgresql://svc:{PASSWORD}@127.0.0.1:{_closed_port()}/svc", pool_timeout_s=0.3
    )
    for call in (s.ping, s.migrate):
        with pytest.raises(StoreError) as err:
            await call()
        message = str(err.value)
        assert PASSWORD not in message
        assert "127.0.0.1" in message
        assert "refused" in message.lower()  # the reason, not just "no connection"
        assert err.value.__cause__ is None
    await s.close()


# -- migrations -----------------------------------------------------------------------


async def test_many_stores_migrate_one_database_concurrently(postgres_url: str) -> None:
    stores = [PostgresStore(postgres_url, max_size=2) for _ in range(8)]
    await asyncio.gather(*(s.migrate() for s in stores))
    await asyncio.gather(*(s.migrate() for s in stores))
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        rows = await (await conn.execute("SELECT version FROM schema_migrations")).fetchall()
    assert sorted(rows) == [(v,) for v, _ in MIGRATIONS]
    await asyncio.gather(*(s.close() for s in stores))


# -- usage, exactly once ----------------------------------------------------------------


@pytest.mark.parametrize("isolation", ["read committed", "repeatable read", "serializable"])
async def test_two_stores_applying_one_batch_at_once_apply_it_once(
    postgres_url: str, isolation: str
) -> None:
    # The store asks for READ COMMITTED itself, whatever the session's default.
    escaped = isolation.replace(" ", "\\ ")  # libpq's options split at unescaped spaces
    options = quote(f"-c default_transaction_isolation={escaped}", safe="")
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}options={options}"
    async with await psycopg.AsyncConnection.connect(url) as conn:
        shown = await (await conn.execute("SHOW default_transaction_isolation")).fetchone()
    assert shown == (isolation,)
    first, second = PostgresStore(url), PostgresStore(url)
    await first.migrate()
    rounds = 25
    for n in range(1, rounds + 1):
        batch = [_use(3), _use(4, kid="k2")]
        # Shard 0 gets its first cursor row in round 1, under the same race.
        done = await asyncio.gather(
            first.apply_usage(0, f"{n}-0", batch), second.apply_usage(0, f"{n}-0", batch)
        )
        assert sorted(done) == [False, True]
    totals = await second.usage_totals("acct_A")
    assert totals is not None
    assert (totals.requests, totals.credits) == (2 * rounds, 7 * rounds)
    assert await first.get_cursor(0) == f"{rounds}-0"
    await asyncio.gather(first.close(), second.close())


async def test_apply_usage_waits_for_the_shards_lock(
    store: PostgresStore, postgres_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_url) as other:
        # Another process is in the middle of a batch for shard 5.
        await other.execute(
            "SELECT pg_advisory_xact_lock(%s::integer, %s::integer)", (USAGE_LOCK_CLASS, 5)
        )
        waiting = asyncio.create_task(store.apply_usage(5, "1-0", [_use(3)]))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        assert await store.apply_usage(6, "1-0", [_use(4)])  # other shards go on
        await other.commit()
        assert await asyncio.wait_for(waiting, 5)
    assert await store.get_cursor(5) == "1-0"


async def test_a_cancelled_apply_usage_writes_nothing(
    store: PostgresStore, postgres_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_url) as other:
        await other.execute(
            "SELECT pg_advisory_xact_lock(%s::integer, %s::integer)", (USAGE_LOCK_CLASS, 5)
        )
        waiting = asyncio.create_task(store.apply_usage(5, "1-0", [_use(3)]))
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await other.commit()
    assert await store.get_cursor(5) is None
    assert await store.usage_totals("acct_A") is None
    assert await store.apply_usage(5, "1-0", [_use(3)])  # the pool still works


# -- keys -------------------------------------------------------------------------------


async def test_keys_of_one_account_from_two_stores_get_distinct_seq(
    store: PostgresStore, postgres_url: str
) -> None:
    await store.create_account(AccountRecord(pid="acct_A", created_at=1))
    other = PostgresStore(postgres_url)
    stores = (store, other)
    await asyncio.gather(*(stores[n % 2].insert_key(_key(f"k{n:02}")) for n in range(10)))
    await other.close()
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        query = "SELECT COUNT(DISTINCT seq), MAX(seq) FROM api_keys"
        assert await (await conn.execute(query)).fetchall() == [(10, 10)]
