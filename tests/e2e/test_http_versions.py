"""Which HTTP versions ``svc serve`` speaks (``SVC_HTTP2``): HTTP/1.1 alone by default (an open
stream then holds less memory in granian, issue 53), and h2c (HTTP/2 without TLS, prior
knowledge) beside it when asked. Checked on the wire: a client that opens with HTTP/2's
connection preface gets the server's SETTINGS frame from an HTTP/2 server, and anything
else from an HTTP/1.1 one."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.e2e.conftest import Server, start_server, stop_server

# the client's connection preface, then an empty SETTINGS frame (RFC 9113, 3.4 and 6.5)
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
SETTINGS_FRAME = 4


def _answers_h2(server: Server) -> bool:
    """Whether the server's first frame after HTTP/2's preface is a SETTINGS frame."""
    where = urlsplit(server.root_url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(H2_PREFACE)
        head = b""
        while len(head) < 9:
            got = sock.recv(9 - len(head))
            if not got:
                break
            head += got
    # a frame header: 3 bytes of length, then the type; an HTTP/1.1 server answers text
    return len(head) == 9 and head[3] == SETTINGS_FRAME and not head.startswith(b"HTTP/")


def test_http_1_1_alone_by_default(server: Server) -> None:
    assert not _answers_h2(server)
    response = httpx.get(f"{server.root_url}/healthz", timeout=10)
    assert response.status_code == 200
    assert response.http_version == "HTTP/1.1"


def test_h2c_beside_http_1_1_when_asked(tmp_path: Path) -> None:
    server = start_server(tmp_path, extra_env={"SVC_HTTP2": "true"})
    try:
        assert _answers_h2(server)
        auth = {"authorization": f"Bearer {server.dev_key}"}
        response = httpx.get(f"{server.base_url}/models", headers=auth, timeout=10)
        assert response.status_code == 200  # HTTP/1.1 still served beside it
    finally:
        stop_server(server.process)
