"""An RSGI app for tests/e2e/test_granian_contract.py: granian serves it for real, and it
reports what it saw of granian's objects, through svc's own RSGI code where svc has some
(``RSGIExchange``), so the test can hold granian to what ``tests/support/rsgi_transport.py`` fakes.

What a request cannot answer itself (its client is gone) goes to the file named by
``PROBE_RECORD``, one JSON line each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from typing import Any

from app.core.errors import ApiError, ClientDisconnected
from app.http.rsgi.exchange import RSGIExchange
from app.http.rsgi.protocol import HTTPProtocol, ProtocolClosed, Scope

BODY_LIMIT = 1000
CHUNK = b"data: x\n\n"


def _record(entry: dict[str, Any]) -> None:
    with open(os.environ["PROBE_RECORD"], "a") as out:
        out.write(json.dumps(entry) + "\n")


def _json(protocol: HTTPProtocol, status: int, value: object) -> None:
    protocol.response_bytes(
        status, [("content-type", "application/json")], json.dumps(value).encode()
    )


async def _headers(scope: Scope, protocol: HTTPProtocol) -> None:
    headers = scope.headers
    _json(
        protocol,
        200,
        {
            "names": [name for name, _ in headers.items()],
            "odd": headers.get("x-odd"),
            "many": headers.get_all("x-many"),
        },
    )


async def _body(scope: Scope, protocol: HTTPProtocol) -> None:
    try:
        body = await RSGIExchange(scope, protocol).body(BODY_LIMIT)
    except ApiError as error:
        _json(protocol, error.status, {"refused": error.kind.code})
        return
    except ClientDisconnected:
        _record({"probe": "body", "outcome": "client disconnected"})
        return
    _record({"probe": "body", "outcome": "read", "size": len(body)})
    _json(protocol, 200, {"size": len(body)})


async def _released(scope: Scope, protocol: HTTPProtocol) -> None:
    """Three chunks, then the transport is let go while the app goes on for 2 s: the body
    must end then, not when the app returns."""
    transport = protocol.response_stream(200, [("content-type", "text/event-stream")])
    for _ in range(3):
        await transport.send_bytes(CHUNK)
    del transport
    await asyncio.sleep(2)


async def _disconnect(scope: Scope, protocol: HTTPProtocol) -> None:
    """Chunks every 20 ms until a write fails; what the app saw of the client leaving."""
    watcher = asyncio.ensure_future(protocol.client_disconnect())
    transport = protocol.response_stream(200, [("content-type", "text/event-stream")])
    raised = None
    writes = 0
    for _ in range(500):
        try:
            await transport.send_bytes(CHUNK)
        except ProtocolClosed as exc:
            raised = type(exc).__name__
            break
        writes += 1
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)
    _record(
        {
            "probe": "disconnect",
            "disconnect_seen": watcher.done(),
            "raised": raised,
            "writes": writes,
        }
    )
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher


async def _twice(scope: Scope, protocol: HTTPProtocol) -> None:
    protocol.response_bytes(200, [("content-type", "text/plain")], b"first")
    try:
        protocol.response_bytes(500, [("content-type", "text/plain")], b"second")
        second = "ignored"
    except Exception as exc:
        second = type(exc).__name__
    _record({"probe": "twice", "second": second})


ROUTES = {
    "/headers": _headers,
    "/body": _body,
    "/released": _released,
    "/disconnect": _disconnect,
    "/twice": _twice,
}


class Probe:
    async def __rsgi__(self, scope: Scope, protocol: HTTPProtocol) -> None:
        route = ROUTES.get(scope.path)
        if route is None:
            protocol.response_bytes(404, [], b"")
            return
        await route(scope, protocol)


app = Probe()
