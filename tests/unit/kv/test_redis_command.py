"""``svc admin redis``'s command runner (issue 33 item 4) on fakeredis, a real Valkey and a
Valkey Cluster: the reply as Redis sent it, as JSON can hold it; an error reply with
Redis's own message."""

from __future__ import annotations

import msgspec
import pytest
from redis.asyncio.cluster import RedisCluster

from app.core.errors import RedisReplyError
from app.kv.client import RedisClient, readable, run_command


async def _run(redis: RedisClient, command: str, *args: str) -> object:
    return readable(await run_command(redis, command, args))


async def test_replies_as_redis_sends_them(redis: RedisClient) -> None:
    # a Cluster's PING goes to every node: the cluster client tells whether all answered
    assert await _run(redis, "PING") == (True if isinstance(redis, RedisCluster) else "PONG")
    assert await _run(redis, "SET", "{s1}:x", "caf\u00e9") == "OK"
    assert await _run(redis, "GET", "{s1}:x") == "caf\u00e9"
    assert await _run(redis, "get", "{s1}:x") == "caf\u00e9"  # any case, as redis-cli
    assert await _run(redis, "GET", "{s1}:none") is None
    assert await _run(redis, "INCRBY", "{s1}:n", "-5") == -5
    assert await _run(redis, "RPUSH", "{s1}:l", "a", "b") == 2
    assert await _run(redis, "LRANGE", "{s1}:l", "0", "-1") == ["a", "b"]
    await _run(redis, "HSET", "{s1}:h", "f", "v")
    assert await _run(redis, "HGETALL", "{s1}:h") in ({"f": "v"}, ["f", "v"])  # RESP3 / RESP2
    await _run(redis, "SETBIT", "{s1}:bits", "0", "1")
    assert await _run(redis, "GET", "{s1}:bits") == "\\x80"  # not UTF-8: escaped, not lost


async def test_an_error_reply_is_redis_s_message(redis: RedisClient) -> None:
    await _run(redis, "SET", "{s1}:x", "text")
    with pytest.raises(RedisReplyError) as wrong:
        await run_command(redis, "HGET", ["{s1}:x", "f"])
    assert "WRONGTYPE" in str(wrong.value)
    with pytest.raises(RedisReplyError):
        await run_command(redis, "NOSUCHCOMMAND", ["{s1}:x"])


def test_readable_holds_every_reply_shape_as_json() -> None:
    reply = {b"k": [b"a", 1, 2.5, None, True, (b"t", b"\xff")], "n": {b"z", b"y"}}
    shown = readable(reply)
    assert shown == {"k": ["a", 1, 2.5, None, True, ["t", "\\xff"]], "n": ["y", "z"]}
    assert msgspec.json.decode(msgspec.json.encode(shown)) == shown
