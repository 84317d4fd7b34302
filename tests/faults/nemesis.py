"""The faults of a history run (issue 48 item 3), under a real ``svc serve``, on one of two
topologies: a Valkey primary, its replica and a Sentinel (``tests.support.valkey_sentinel``),
or a Valkey Cluster with a replica per primary (``tests.support.valkey_cluster``).

- ``kill``: kill -9 a primary; its replica is promoted (by the Sentinel, or by the Cluster
  itself); the old primary comes back as a replica;
- ``zombie``: SIGSTOP a primary past the failover, then resume it: for a moment it still
  believes it is a primary, until it is demoted (writes it takes then are lost);
- ``rollback`` (Sentinel only): the primary restarted from a copy of its AOF taken earlier
  in the run (the Sentinel paused meanwhile, so no failover hides it): every write since
  the copy is gone, on the replica too once it syncs again;
- ``worker``: kill -9 one of svc's workers with streams open (granian starts another).

Each fault is followed by a wait until every primary has a replica in sync, so the next
starts from a healthy group."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from tests.e2e.conftest import Server
from tests.faults.conftest import worker_pids
from tests.support.valkey_cluster import (
    SLOTS,
    ValkeyCluster,
    kill_node,
    pause_node,
    restart_node,
    slot_owner,
    wait_for_promotion,
)
from tests.support.valkey_sentinel import ValkeySentinel

FAULTS = ("kill", "zombie", "rollback", "worker")
RESPAWN_GUARD_S = 8.0
FAILOVERS = ("kill", "zombie")


class Topology(Protocol):
    def kill(self) -> None: ...
    def zombie(self) -> None: ...
    def rollback(self, copy: Path, restore: bool) -> None: ...
    def healthy(self) -> None: ...


@dataclass
class SentinelFaults:
    group: ValkeySentinel

    def kill(self) -> None:
        old = self._primary()
        self.group.kill(old)
        self.group.wait_for_failover(old)
        self.group.restart(old)

    def zombie(self) -> None:
        old = self._primary()
        self.group.pause(old)
        try:
            self.group.wait_for_failover(old)
        finally:
            self.group.resume(old)

    def rollback(self, copy: Path, restore: bool) -> None:
        """Copy the primary's AOF (``restore`` False), or restart it from that copy."""
        primary = self._primary()
        if not restore:
            self.group.copy_aof(primary, copy)
            return
        self.group.sentinel_pause()
        try:
            self.group.kill(primary)
            self.group.restore_aof(primary, copy)
            self.group.restart(primary)
        finally:
            self.group.sentinel_resume()

    def healthy(self) -> None:
        self.group.wait_linked()

    def _primary(self) -> int:
        primary = self.group.primary()
        assert primary is not None
        return primary


@dataclass
class ClusterFaults:
    cluster: ValkeyCluster
    rng: random.Random = field(default_factory=lambda: random.Random(48))

    def kill(self) -> None:
        slot, old = self._a_primary()
        kill_node(self.cluster, old)
        wait_for_promotion(self.cluster, slot, old)
        restart_node(self.cluster, old)

    def zombie(self) -> None:
        slot, old = self._a_primary()
        pause_node(self.cluster, old, paused=True)
        try:
            wait_for_promotion(self.cluster, slot, old)
        finally:
            pause_node(self.cluster, old, paused=False)

    def rollback(self, copy: Path, restore: bool) -> None:
        raise AssertionError("a Cluster run has no rollback fault")

    def healthy(self) -> None:
        self.cluster.wait_ready()

    def _a_primary(self) -> tuple[int, int]:
        """A slot and the port of the primary serving it, one of the primaries at random."""
        slot = self.rng.choice([0, SLOTS // 2, SLOTS - 1])
        owner = slot_owner(self.cluster, slot)
        assert owner is not None
        return slot, owner


def _age_s(pid: int) -> float:
    return time.time() - psutil.Process(pid).create_time()


@dataclass
class Nemesis:
    topology: Topology
    server: Server
    folder: Path
    faults: tuple[str, ...] = FAULTS
    done: Counter[str] = field(default_factory=Counter)
    seconds: list[float] = field(default_factory=list)  # each fault's time to a healthy group
    copied: bool = False  # a rollback's copy is made, the next rollback restores it

    @property
    def failovers(self) -> int:
        return sum(self.done[name] for name in FAILOVERS)

    def one(self, fault: str) -> None:
        started = time.monotonic()
        if fault == "rollback":
            self.topology.rollback(self.folder / "aof-copy", restore=self.copied)
            fault, self.copied = ("rollback" if self.copied else "aof_copy"), not self.copied
        elif fault == "worker":
            # granian exits altogether when a worker dies within 5.5 s of its respawn (a
            # crash loop): only a worker older than that is killed, as a crash would be
            settled = [p for p in worker_pids(self.server) if _age_s(p) > RESPAWN_GUARD_S]
            if not settled:
                return  # the last one killed is not back long enough: no fault this time
            os.kill(random.choice(settled), signal.SIGKILL)
            time.sleep(1.0)
        else:
            getattr(self.topology, fault)()
        self.topology.healthy()
        self.done[fault] += 1
        self.seconds.append(time.monotonic() - started)

    async def run(self, stop: asyncio.Event, every_s: float, seed: int = 48) -> None:
        """A fault every ``every_s`` seconds until ``stop``, in a shuffled cycle of the
        faults (a rollback first makes its copy, then rolls back to it next time)."""
        rng = random.Random(seed)
        order: list[str] = []
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), every_s)
                return
            except TimeoutError:
                pass
            if not order:
                order = list(self.faults) * 2
                rng.shuffle(order)
            await asyncio.to_thread(self.one, order.pop())
