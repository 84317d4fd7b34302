"""A history-checking fault run (issue 48 item 3), in the spirit of Jepsen's bank test: a
real ``svc serve`` (two workers) on a Valkey primary, its replica and a Sentinel; clients
buy (signed Stripe events, retried like Stripe), earn (signed spotlight callbacks), spend
(streamed completions), are granted and debited by the operator (Idempotency-Keys, retried)
and read their balances over a dozen accounts, every operation recorded
(``tests.faults.history``), while the nemeses (``tests.faults.nemesis``) kill -9 the
primary, pause it into a zombie, restart it from an older AOF and kill svc's workers. Once
they stop, the senders' retries finish, and svc repairs (the ledger's rounds, then the
operator's ``reconcile --repair`` and, after a rollback, ``rebuild-redis --force``), the
checkers (``tests.faults.checker``) assert:

- no acknowledged money in lost (every ok purchase, reward and grant is in the ledger,
  applied, its marker in Redis) and no acknowledged debit lost;
- each store transaction, view and Idempotency-Key applied at most once;
- conservation per account: money in − money out − usage charged = available − debt;
- overspend bounded: the debt usage left is at most what one request holds (reported);
- ``svc admin reconcile`` clean.

The same run on a Valkey Cluster with a replica per primary (its own failovers, no
rollback). ``make faults`` runs Sentinel without ``WAIT`` and the Cluster for
``SVC_HISTORY_S`` seconds each (default 25: a few faults); ``make jepsen`` runs all three
topologies (``SVC_HISTORY_TOPOLOGIES``) for many minutes and writes the figures
docs/operations.md ("Durability") quotes."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster as ClusterClient

from app.credits.idempotency import RUNNING_TTL_S
from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_admin_cli import svc_admin
from tests.e2e.test_upstreams import models_file
from tests.faults.checker import check, entry_of
from tests.faults.history import OK, STRIPE_SECRET, VIEW_SECRET, Customer, Workload
from tests.faults.invariants import KEYS, wait_settled
from tests.faults.nemesis import FAULTS, ClusterFaults, Nemesis, SentinelFaults, Topology
from tests.support.valkey_cluster import ValkeyCluster
from tests.support.valkey_sentinel import ValkeySentinel

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

RUN_S = float(os.environ.get("SVC_HISTORY_S", "25"))
FAULT_EVERY_S = float(os.environ.get("SVC_HISTORY_FAULT_EVERY_S", "4"))
ACCOUNTS = int(os.environ.get("SVC_HISTORY_ACCOUNTS", "12"))
KINDS = tuple(os.environ.get("SVC_HISTORY_FAULTS", ",".join(FAULTS)).split(","))
TOPOLOGIES = ("sentinel", "sentinel-min-replicas-1", "cluster")
# the fault suite's short run leaves the WAIT topology to make jepsen (CI's time)
RUN_ON = os.environ.get("SVC_HISTORY_TOPOLOGIES", "sentinel,cluster").split(",")
CLIENTS = 12
MAX_TOKENS = 30  # a completion's largest ask: its hold bounds what a lost settle serves free
REPORT = os.environ.get("SVC_HISTORY_REPORT")  # a file for the figures (make jepsen)


@pytest.fixture
def mock() -> Iterator[MockProcess]:
    upstream = start_in_subprocess(chunks=100)
    yield upstream
    upstream.stop()


@dataclass
class Redis:
    """A topology under test: what svc is told, what the checkers read, its faults."""

    name: str
    env: dict[str, str]
    client: Callable[[], redis.Redis]
    faults: Topology
    kinds: tuple[str, ...]


@pytest.fixture(params=[t for t in TOPOLOGIES if t in RUN_ON])
def topology(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Redis]:
    if request.param == "cluster":
        cluster = ValkeyCluster(tmp_path / "cluster", replicas=1, node_timeout_ms=2000)
        cluster.start()
        seeds = ",".join(f"127.0.0.1:{port}" for port in cluster.ports[1:])
        env = {
            "SVC_REDIS_URL": cluster.url,
            "SVC_REDIS_CLUSTER": "true",
            "SVC_REDIS_CLUSTER_NODES": seeds,
        }
        kinds = tuple(k for k in KINDS if k != "rollback")  # no AOF copy restores a Cluster

        def client() -> redis.Redis:
            return ClusterClient.from_url(cluster.url)  # type: ignore[return-value]

        yield Redis("cluster, a replica per primary", env, client, ClusterFaults(cluster), kinds)
        cluster.stop()
        return
    min_replicas = 1 if request.param.endswith("-1") else 0
    group = ValkeySentinel(tmp_path / "valkey")
    group.start()
    env = {
        "SVC_REDIS_SENTINELS": group.sentinels,
        "SVC_REDIS_MIN_REPLICAS": str(min_replicas),
    }

    def primary() -> redis.Redis:
        port = group.primary()
        assert port is not None
        return redis.Redis(port=port)

    name = f"sentinel, SVC_REDIS_MIN_REPLICAS={min_replicas}"
    yield Redis(name, env, primary, SentinelFaults(group), KINDS)
    group.stop()


@pytest.mark.timeout(RUN_S + 300)  # the run, the retries, the repair and the checks
def test_no_acknowledged_credit_is_lost_across_failovers(
    tmp_path: Path, mock: MockProcess, topology: Redis
) -> None:
    server = _svc(tmp_path, topology.env, mock)
    try:
        customers = [_customer(server, n) for n in range(ACCOUNTS)]
        nemesis = Nemesis(topology.faults, server, tmp_path, topology.kinds)
        workload = Workload(server.root_url, server.admin_token, customers)
        started = time.monotonic()
        asyncio.run(_run(workload, nemesis))
        assert server.process.poll() is None, "svc exited during the run: its server.log says why"
        repaired = _repair(server)
        r = topology.client()
        wait_settled(r, timeout_s=30)
        _flush(server)
        pids = [c.pid for c in customers]
        findings = check(workload.history, r, _database(server), pids)
        code, report = svc_admin(server.env, "reconcile")
        figures = {
            "topology": topology.name,
            "seconds": round(time.monotonic() - started),
            "faults": dict(nemesis.done),
            "failovers": nemesis.failovers,
            "slowest_fault_s": round(max(nemesis.seconds, default=0), 1),
            "operations": workload.history.summary(),
            "repaired": repaired,
            "lost": len(findings.lost),
            "doubled": len(findings.doubled),
            "unbalanced": len(findings.unbalanced),
            "phantom": len(findings.phantom),
            "largest_overspend": findings.largest_overspend,
            "served_free": findings.served_free,
            "reconcile_drift": report.get("accounts_with_drift") if code != 1 else "error",
        }
        workload.history.save(tmp_path / "history.jsonl")
        print(json.dumps(figures))
        if REPORT:
            with open(REPORT, "a") as f:
                f.write(json.dumps(figures) + "\n")
        assert sum(nemesis.done.values()) >= 2, figures  # the run saw faults at all
        assert findings.lost == [], findings.lost[:10]
        assert findings.doubled == [], findings.doubled[:10]
        assert findings.phantom == [], findings.phantom[:10]
        assert findings.unbalanced == [], findings.unbalanced[:10]
        assert findings.largest_overspend <= MAX_TOKENS * 10, findings.overspend
        drifting = [
            (a["account_pid"], a["balance_drift"], a["usage_drift"]) for a in report["accounts"]
        ]
        assert code == 0, drifting[:3]
        assert report["pending_entries"] == 0, report
        # svc stops first: its ledger repair (every worker's round, ~10 s) finds a missing
        # marker and applies the purchase again, which could heal the loss between the
        # checker's marker read and its balance read
        stop_server(server.process)
        _the_checkers_see_a_loss(workload, r, server, pids)
    finally:
        stop_server(server.process)


def _the_checkers_see_a_loss(
    workload: Workload, r: redis.Redis, server: Server, pids: list[str]
) -> None:
    """The checkers can fail: one acknowledged purchase taken out of Redis (its marker and
    its credits, as a failover loses them) is found lost, and its account unbalanced. svc
    is stopped, so its ledger repair cannot put the purchase back meanwhile."""
    assert server.process.poll() is not None
    op = workload.history.of("purchase", OK)[0]
    shard = KEYS.shard(op.pid)
    r.delete(KEYS.grant_marker(shard, entry_of(op, _database(server)).grant_id))
    r.hincrby(KEYS.account(shard, op.pid), "purchased", -op.asked)
    findings = check(workload.history, r, _database(server), pids)
    assert any(op.ref in lost for lost in findings.lost), findings.lost
    assert any(op.pid in line for line in findings.unbalanced), findings.unbalanced


def _svc(tmp: Path, redis_env: dict[str, str], mock: MockProcess) -> Server:
    models = models_file(
        tmp / "models.toml",
        mock.base_url,
        {"svc-fast": ["fast-slow20"]},
        first_byte_timeout_s=1.0,
        idle_timeout_s=1.9,
    )
    env = {
        **redis_env,
        "SVC_REDIS_TIMEOUT_S": "1",
        "SVC_DEV_BOOTSTRAP": "true",
        "SVC_MODELS_FILE": str(models),
        "MOCK_API_KEY": "mock-provider-key",
        "SVC_STRIPE_WEBHOOK_SECRETS": STRIPE_SECRET,
        "SVC_SPOTLIGHT_SECRETS": VIEW_SECRET.decode(),
        "SVC_FLUSH_INTERVAL_S": "0.2",
        "SVC_FLUSH_LEASE_S": "3",
        "SVC_RESERVATION_DEADLINE_S": "6",
        "SVC_SWEEP_INTERVAL_S": "0.5",
    }
    (tmp / "svc").mkdir()
    return start_server(tmp / "svc", workers=2, extra_env=env)


def _customer(server: Server, n: int) -> Customer:
    # a few accounts start poor, so they spend to their last credit under the faults
    pid = server.new_account(300 if n % 4 == 0 else 20_000)
    return Customer(pid, server.new_key(pid))


async def _run(workload: Workload, nemesis: Nemesis) -> None:
    """The clients and the faults for ``RUN_S``, then the senders' retries on a healthy
    group until every money operation is acknowledged."""
    try:
        faults = asyncio.create_task(nemesis.run(workload.stop, FAULT_EVERY_S))
        clients = asyncio.create_task(workload.run(CLIENTS))
        await asyncio.sleep(RUN_S)
        workload.stop.set()
        await asyncio.gather(faults, clients)
        await asyncio.to_thread(nemesis.topology.healthy)
        # longer than an Idempotency-Key's claim lives (a run cut off by a fault holds it)
        await workload.drain(timeout_s=RUNNING_TTL_S + 60)
        assert not workload.pending, [op.ref for op, _ in workload.pending][:5]
    finally:
        await workload.close()


def _repair(server: Server) -> dict[str, object]:
    """The operator's part after the faults, as the runbook (docs/operations.md,
    Durability) says: apply what is pending and recheck every applied entry; then, when
    ``reconcile`` still flags accounts (settles Redis lost after the flusher had made them
    durable: at a failover, or a restart from an older AOF), bring their balances and usage
    counters back to the ledger with ``rebuild-redis --force``."""
    code, out = svc_admin(server.env, "reconcile", "--repair")
    assert code in (0, 3), out
    repaired = {"repaired": out["repaired_entries"], "restored": out["restored_entries"]}
    code, out = svc_admin(server.env, "reconcile")
    assert code in (0, 3), out
    repaired["drifting"] = out["accounts_with_drift"]
    if code == 3:
        code, out = svc_admin(server.env, "rebuild-redis", "--force")
        assert code == 0, out
        repaired["recomputed"] = out["accounts_recomputed"]
        repaired["usage_corrected"] = out["usage_corrected"]
    return repaired


def _flush(server: Server) -> None:
    deadline = time.monotonic() + 60
    while True:
        code, out = svc_admin(server.env, "flush")
        assert code == 0, out
        if out["lag"]["pending_events"] == 0:  # type: ignore[index]
            return
        assert time.monotonic() < deadline, out
        time.sleep(0.3)


def _database(server: Server) -> str:
    return f"sqlite:///{server.data_dir / 'svc.db'}"
