"""A real forward proxy for the tests: Debian's tinyproxy (``tests/ensure-tinyproxy.sh``
installs it), started on a free port of 127.0.0.1 with a configuration of the test's own.
Its log tells which requests went through it."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.processes import free_port, stop_process

_REQUEST = re.compile(r"Request \(file descriptor \d+\): (.+)$")


def tinyproxy_binary() -> str:
    """The tinyproxy binary. Missing, the test is skipped when run by hand, and fails on CI
    (``make test`` installs it there: tests/ensure-tinyproxy.sh)."""
    found = shutil.which("tinyproxy") or shutil.which("tinyproxy", path="/usr/sbin:/usr/bin")
    if found is None:
        missing = "no tinyproxy (make test installs it: tests/ensure-tinyproxy.sh)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    return found


class ForwardProxy:
    """One tinyproxy process. ``user`` and ``password`` turn on its Basic authentication;
    ``connect_ports`` limits the ports CONNECT may reach (none given: every port)."""

    def __init__(
        self,
        folder: Path,
        *,
        user: str | None = None,
        password: str | None = None,
        connect_ports: tuple[int, ...] = (),
    ) -> None:
        self.folder = folder
        self.port = free_port()
        self.user = user
        self.password = password
        self.log = folder / "tinyproxy.log"
        lines = [
            f"Port {self.port}",
            "Listen 127.0.0.1",
            "Timeout 30",
            f'LogFile "{self.log}"',
            "LogLevel Connect",
            "MaxClients 200",
            "Allow 127.0.0.1",
            "DisableViaHeader Yes",
        ]
        if user is not None:
            lines.append(f"BasicAuth {user} {password}")
        lines += [f"ConnectPort {port}" for port in connect_ports]
        self.config = folder / "tinyproxy.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The proxy's URL as ``HTTPS_PROXY`` takes it (with its credentials, if any)."""
        credentials = f"{self.user}:{self.password}@" if self.user is not None else ""
        return f"http://{credentials}127.0.0.1:{self.port}"

    def start(self) -> ForwardProxy:
        out = (self.folder / "tinyproxy.out").open("wb")
        self._process = subprocess.Popen(
            [tinyproxy_binary(), "-d", "-c", str(self.config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError((self.folder / "tinyproxy.out").read_text())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("tinyproxy did not start listening")

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process)
            self._process = None

    def requests(self) -> list[str]:
        """The request lines it received, in order (``CONNECT host:port HTTP/1.1``, ``POST
        http://host:port/path HTTP/1.1``)."""
        if not self.log.exists():
            return []
        found = (_REQUEST.search(line) for line in self.log.read_text().splitlines())
        return [match.group(1) for match in found if match]
