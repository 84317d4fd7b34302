"""A recording reverse proxy for the tests: it passes every request to one server (svc) as it
came and relays the answer as it comes (a stream stays a stream), keeping a copy of both. A test
puts it between svc and a client that shows nothing of svc's wire (Claude Code): the copies say
which requests the client made and what svc answered each, an SSE stream's events included.

Only for loopback servers the test started; nothing here keeps a connection open between
requests, and the proxy serves until it is closed (``with RecordingProxy(...) as proxy``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import httpx

from tests.support.processes import free_port

# Hop-by-hop headers (RFC 9110, 7.6.1) and those this proxy sets itself.
_NOT_FORWARDED = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "accept-encoding",  # svc's answer is recorded as sent: asked for uncompressed
    "content-encoding",
}


@dataclass
class Exchange:
    """One request the client made and svc's answer."""

    method: str
    path: str  # with its query
    headers: dict[str, str]  # the request's, names in lower case
    body: bytes
    status: int = 0
    answer: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[dict[str, Any]]:
        """The ``data:`` payloads of an SSE answer, parsed, in order."""
        return [
            json.loads(line[len("data:") :])
            for line in self.answer.decode().splitlines()
            if line.startswith("data:") and line[len("data:") :].strip() != "[DONE]"
        ]


class RecordingProxy:
    """Listens on a free port of 127.0.0.1 (``url``) and forwards to ``target`` (a root URL:
    the request's path is appended as it is)."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the exchanges are the log

            def _relay(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                exchange = Exchange(
                    method=self.command,
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length) if length else b"",
                )
                proxy._record(exchange)
                forwarded = {
                    k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED
                }
                answer = bytearray()
                with (
                    httpx.Client(timeout=120) as client,
                    client.stream(
                        self.command,
                        proxy.target + self.path,
                        headers={**forwarded, "accept-encoding": "identity"},
                        content=exchange.body,
                    ) as response,
                ):
                    exchange.status = response.status_code
                    self.send_response(response.status_code)
                    for name, value in response.headers.multi_items():
                        if name.lower() not in _NOT_FORWARDED:
                            self.send_header(name, value)
                    body = self.command != "HEAD"
                    if body:
                        self.send_header("transfer-encoding", "chunked")
                    self.send_header("connection", "close")
                    self.end_headers()
                    for chunk in response.iter_raw():
                        answer += chunk
                        if body:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                    if body:
                        self.wfile.write(b"0\r\n\r\n")
                exchange.answer = bytes(answer)
                self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _relay

        return Handler
