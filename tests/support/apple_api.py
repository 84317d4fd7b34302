"""A stand-in App Store Server API: a local HTTP server (a thread of the test) that records
every request it gets and answers each with the status the test sets (202, as Apple answers
a consumption request, unless told)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt


class Received:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    def bearer_claims(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The ``Authorization: Bearer`` JWT's header and claims (read, not verified: the
        test checks what svc put in it)."""
        token = self.headers["authorization"].removeprefix("Bearer ")
        return jwt.get_unverified_header(token), jwt.decode(
            token, options={"verify_signature": False}
        )


class StandIn:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.status = 202
        self.url = ""


@contextmanager
def app_store_api() -> Iterator[StandIn]:
    stand_in = StandIn()

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            stand_in.received.append(Received("PUT", self.path, headers, body))
            self.send_response(stand_in.status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stand_in.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stand_in
    finally:
        server.shutdown()
        server.server_close()
