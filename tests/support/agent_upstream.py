"""A stand-in OpenAI-compatible chat upstream that follows a script, for the coding-agent
tests: a turn offered one of the script's tools, before any tool result, is answered with a
call to it (the script's arguments); every other turn (the one carrying the tool's output,
an agent's title request) with text. Each reply streams with fixed usage on its last chunk,
so a test knows what svc must charge; every request is kept, so it can see what the agent
sent (the tool's output among it).

bench/mock_upstream.py calls a tool with ``{}``: an agent's shell needs a command; and
tests/support/scripted_upstream.py streams whatever text a test's function gives (aider's
edit blocks), never a tool call."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.processes import free_port

CALL_USAGE = {"prompt_tokens": 1_000, "completion_tokens": 40, "total_tokens": 1_040}
TEXT_USAGE = {"prompt_tokens": 1_200, "completion_tokens": 20, "total_tokens": 1_220}


@dataclass
class ScriptedUpstream:
    base_url: str  # ends in /v1
    calls: Mapping[str, dict[str, Any]]  # tool name -> the arguments a call to it carries
    answer: str  # the text of every turn that calls no tool
    requests: list[dict[str, Any]] = field(default_factory=list)

    def reply(self, request: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, int]]:
        """(the tool call, or None for text; its usage) for one chat request."""
        self.requests.append(request)
        offered = [(t.get("function") or {}).get("name") for t in request.get("tools") or []]
        answered = any(m.get("role") == "tool" for m in request.get("messages") or [])
        name = next((n for n in offered if n in self.calls), None)
        if name is None or answered:
            return None, TEXT_USAGE
        return {"name": name, "arguments": json.dumps(self.calls[name])}, CALL_USAGE

    def tool_outputs(self) -> list[str]:
        """The content of every tool message the agent sent back, in order."""
        return [
            str(m.get("content"))
            for r in self.requests
            for m in r.get("messages") or []
            if m.get("role") == "tool"
        ]


def _events(model: str, call: dict[str, Any] | None, answer: str, usage: dict[str, int]) -> bytes:
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "model": model}
    base["created"] = 1_767_225_600
    if call is None:
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": answer}]
        finish = "stop"
    else:
        function = {"name": call["name"], "arguments": call["arguments"]}
        tool = {"index": 0, "id": "call_scripted1", "type": "function", "function": function}
        deltas = [{"role": "assistant", "content": None, "tool_calls": [tool]}]
        finish = "tool_calls"
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**base, "choices": [], "usage": usage})
    lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


@contextmanager
def scripted_upstream(
    calls: Mapping[str, dict[str, Any]], answer: str
) -> Iterator[ScriptedUpstream]:
    """The upstream, serving on 127.0.0.1 in a thread until the block ends."""
    port = free_port()
    upstream = ScriptedUpstream(f"http://127.0.0.1:{port}/v1", calls, answer)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["content-length"] or 0)))
            call, usage = upstream.reply(request)
            body = _events(str(request.get("model")), call, upstream.answer, usage)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test reads ``requests``, not a log

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield upstream
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
