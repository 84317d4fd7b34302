"""granian's RSGI objects behave as svc's RSGI code and the tests' fakes assume
(``app/http/rsgi/protocol.py``, ``tests/support/rsgi_transport.py``): checked against the granian
the lock pins, serving ``tests/support/granian_probe.py`` with svc's own server settings. A granian
upgrade that changes any of this fails here, not in production."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import free_port, stop_process
from tests.support.rsgi_transport import FakeHeaders

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


class Probe:
    def __init__(self, port: int, record: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.record = record

    def records(self, probe: str, count: int = 1, timeout_s: float = 10) -> list[dict[str, Any]]:
        """The probe's records of one kind, once ``count`` are there."""
        deadline = time.monotonic() + timeout_s
        while True:
            lines = self.record.read_text().splitlines() if self.record.exists() else []
            found = [entry for entry in map(json.loads, lines) if entry["probe"] == probe]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def raw(self, request: bytes) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        sock.sendall(request)
        return sock


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Probe]:
    folder = tmp_path_factory.mktemp("granian-probe")
    port = free_port()
    record = folder / "record.jsonl"
    log = (folder / "granian.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "granian", "--interface", "rsgi", "--loop", "uvloop",
            "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--no-ws",
            "tests.support.granian_probe:app",
        ],
        cwd=ROOT,
        env={"PROBE_RECORD": str(record), "PATH": "/usr/bin:/bin"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_process(process)
                raise RuntimeError((folder / "granian.log").read_text()) from None
            time.sleep(0.05)
    yield Probe(port, record)
    stop_process(process)


def test_header_names_are_lower_case_and_odd_values_are_left_out(probe: Probe) -> None:
    headers = [
        (b"X-Mixed-Case", b"v"),
        (b"x-odd", "café".encode()),  # not visible ASCII
        (b"x-many", b"1"),
        (b"x-many", b"2"),
    ]
    seen = httpx.get(f"{probe.url}/headers", headers=headers).json()
    assert "x-mixed-case" in seen["names"]
    assert seen["odd"] is None
    assert seen["many"] == ["1", "2"]
    fake = FakeHeaders.from_raw(headers)
    assert (fake.get("x-odd"), fake.get_all("x-many")) == (seen["odd"], seen["many"])
    assert [name for name, _ in fake.items()] == ["x-mixed-case", "x-many", "x-many"]


def test_a_body_of_known_size_is_read_whole(probe: Probe) -> None:
    answer = httpx.post(f"{probe.url}/body", content=b"x" * 100)
    assert answer.json() == {"size": 100}


def test_a_chunked_body_is_read_in_pieces(probe: Probe) -> None:
    pieces = (b"y" * 50 for _ in range(4))
    answer = httpx.post(f"{probe.url}/body", content=pieces)  # no content-length
    assert answer.json() == {"size": 200}


def test_a_body_over_the_limit_is_refused_unread(probe: Probe) -> None:
    answer = httpx.post(f"{probe.url}/body", content=b"z" * 5000)
    assert (answer.status_code, answer.json()) == (413, {"refused": "request_too_large"})


def test_a_client_leaving_mid_upload_ends_the_body_early(probe: Probe) -> None:
    """granian ends the body without an error: svc tells it by the missing bytes."""
    before = len(probe.records("body", timeout_s=0))
    sock = probe.raw(
        b"POST /body HTTP/1.1\r\nhost: probe\r\ncontent-length: 900\r\n\r\n" + b"a" * 10
    )
    time.sleep(0.2)
    sock.close()
    [*_, last] = probe.records("body", before + 1)
    assert last == {"probe": "body", "outcome": "client disconnected"}


def test_a_streamed_body_ends_when_its_transport_is_released(probe: Probe) -> None:
    started = time.monotonic()
    answer = httpx.get(f"{probe.url}/released", timeout=5)
    assert answer.content == b"data: x\n\n" * 3
    assert time.monotonic() - started < 1.5  # the app still ran for 2 s


def test_a_client_that_leaves_is_seen_and_later_writes_fail(probe: Probe) -> None:
    with httpx.stream("GET", f"{probe.url}/disconnect", timeout=5) as response:
        chunks = response.iter_raw()
        next(chunks)
        next(chunks)
    [seen] = probe.records("disconnect")
    assert seen["disconnect_seen"] is True
    assert seen["raised"] == "RSGIProtocolClosed"
    assert seen["writes"] < 400  # it stopped long before its 500 writes


def test_the_first_response_is_the_response(probe: Probe) -> None:
    answer = httpx.get(f"{probe.url}/twice")
    assert (answer.status_code, answer.text) == (200, "first")
    [seen] = probe.records("twice")
    assert seen["second"] == "ignored"
