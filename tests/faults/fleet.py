"""A fleet: two ``svc serve`` instances (two workers each, their own ports and data
directories) on one Valkey (with AOF, restartable) or one Valkey Cluster, one PostgreSQL
database and one mock upstream, as svc runs behind a load balancer."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis as redis_sync
from redis.cluster import RedisCluster

from bench.mock_upstream import MockProcess
from tests.e2e.conftest import Server, instances
from tests.e2e.test_admin_cli import svc_admin
from tests.e2e.test_upstreams import models_file
from tests.faults.conftest import Valkey
from tests.faults.invariants import Account, check_money, wait_settled
from tests.support.postgres import session_database
from tests.support.valkey_cluster import ValkeyCluster


@dataclass
class Fleet:
    """The instances and what they share."""

    instances: list[Server]
    redis_url: str
    cluster: bool
    database_url: str
    valkey: Valkey | None  # the single server (None on a Cluster)

    @property
    def a(self) -> Server:
        return self.instances[0]

    @property
    def b(self) -> Server:
        return self.instances[1]

    def urls(self) -> Iterator[str]:
        """Each instance's /v1 in turn, forever: the load balancer."""
        return itertools.cycle([srv.base_url for srv in self.instances])

    def redis(self) -> redis_sync.Redis:
        if self.cluster:
            return RedisCluster.from_url(self.redis_url)  # type: ignore[return-value]
        return redis_sync.Redis.from_url(self.redis_url)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until the usage streams are drained into PostgreSQL (the live instances'
        flushers hold the leases; the admin command drains what nobody holds)."""
        deadline = time.monotonic() + timeout_s
        while True:
            code, out = svc_admin(self.a.env, "flush")
            assert code == 0, out
            if out["lag"]["pending_events"] == 0:  # type: ignore[index]
                return
            assert time.monotonic() < deadline, out
            time.sleep(0.3)

    def check(self, accounts: list[Account], *, uncertain: bool = False) -> dict[str, int]:
        r = self.redis()
        try:
            wait_settled(r)
            self.flush()
            return check_money(r, self.database_url, accounts, uncertain=uncertain)
        finally:
            r.close()


@contextlib.contextmanager
def running_fleet(
    tmp: Path,
    postgres_server: str,
    upstream: MockProcess,
    aliases: dict[str, list[str]],
    *,
    cluster: ValkeyCluster | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Fleet]:
    """Start the fleet (on ``cluster``, emptied, or on a Valkey of its own), stop it after."""
    valkey = None
    if cluster is not None:
        redis_url = cluster.url
        RedisCluster.from_url(redis_url).flushall()
    else:
        valkey = Valkey(tmp / "valkey")
        valkey.start()
        redis_url = valkey.url
    path = models_file(
        tmp / "models.toml",
        upstream.base_url,
        aliases,
        first_byte_timeout_s=1.0,
        idle_timeout_s=1.9,
    )
    with session_database(postgres_server) as database_url:
        shared = {
            "SVC_REDIS_URL": redis_url,
            "SVC_REDIS_CLUSTER": str(cluster is not None).lower(),
            "SVC_DATABASE_URL": database_url,
            "SVC_KEY_PEPPER": "fleet-pepper-0123456789abcdef",  # shared: one key, one digest
            "SVC_ADMIN_TOKEN": "fleet-admin-token-0123456789abcdef",
            "SVC_DEV_BOOTSTRAP": "false",
            "SVC_MODELS_FILE": str(path),
            "MOCK_API_KEY": "mock-provider-key",
            "SVC_FLUSH_INTERVAL_S": "0.2",
            "SVC_FLUSH_LEASE_S": "3",
            "SVC_RESERVATION_DEADLINE_S": "6",
            "SVC_SWEEP_INTERVAL_S": "0.5",
            "SVC_REDIS_TIMEOUT_S": "1",
            **(env or {}),
        }
        try:
            with instances(tmp, shared) as servers:
                yield Fleet(servers, redis_url, cluster is not None, database_url, valkey)
        finally:
            if valkey is not None:
                valkey.stop()
