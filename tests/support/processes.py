"""Process and port helpers of the test suites (the servers they start and stop)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess


def _ephemeral_start() -> int:
    """Where the kernel's ephemeral ports (those of outgoing connections) begin."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_PORTS = range(max(1024, _ephemeral_start() - 12_000), _ephemeral_start())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, below the ephemeral range: a
    port the kernel hands out (bind to 0) can be taken by any outgoing connection before the
    server the test starts binds it; these ports never are, and a random one rarely meets
    another test's."""
    for _ in range(200):
        port = random.choice(_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORTS}")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM a server started in a session of its own, SIGKILL it after 30 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
