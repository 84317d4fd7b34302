"""A webhook receiver on 127.0.0.1 for the end-to-end suites."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """A webhook receiver: records what it is sent; answers 500 to the first
    ``failures`` requests, then 204."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.failures = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                with receiver.lock:
                    receiver.received.append(
                        ({k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    failing = receiver.failures > 0
                    receiver.failures -= 1 if failing else 0
                self.send_response(500 if failing else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hooks/svc"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [json.loads(body) for _, body in self.received]

    def unique(self) -> dict[str, dict[str, Any]]:
        """What a receiver that deduplicates by event id keeps."""
        return {e["id"]: e for e in self.events()}
