"""A stand-in chat upstream that streams the answer a test scripts for it, with fixed usage:
for agents (aider) whose requests must get one particular answer (an edit block in the
agent's own format) that svc's simulated upstream and the bench's mock never give.

``answer`` maps each request body to the text to stream; every answer reports ``USAGE``, so
a test knows what each request it served costs. The bodies it served are kept in ``served``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE = {"prompt_tokens": 400, "completion_tokens": 40, "total_tokens": 440}


@dataclass
class ScriptedUpstream:
    base_url: str  # ends in /v1
    served: list[dict[str, Any]] = field(default_factory=list)


def _chunks(model: str, text: str) -> Iterator[dict[str, Any]]:
    head = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": model}
    # a few pieces, so the client reads a stream and not one delta
    step = max(1, len(text) // 4)
    for i in range(0, len(text), step):
        delta = {"content": text[i : i + step]}
        yield {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    yield {**head, "choices": [], "usage": USAGE}


@contextmanager
def scripted_upstream(answer: Callable[[dict[str, Any]], str]) -> Iterator[ScriptedUpstream]:
    upstream = ScriptedUpstream(base_url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            upstream.served.append(body)
            wire = b"".join(
                b"data: " + json.dumps(chunk).encode() + b"\n\n"
                for chunk in _chunks(body["model"], answer(body))
            )
            wire += b"data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(wire)))
            self.end_headers()
            self.wfile.write(wire)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows stderr
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    upstream.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield upstream
    finally:
        server.shutdown()
        server.server_close()
