"""``Idempotency-Key`` on the JSON routes that create or grant something (``POST
/v1/api-keys``, the admin routes that create keys, grant credits and reward spotlight
views): the first request with a key runs, and its answer, sealed, is kept for the key's
24 hours; the same request again gets that answer back (``idempotent-replayed: true``)
without running again. The streams do this in their own scripts (``app.http.streams``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from litestar import Request, Response

from app.core.ids import random_id
from app.credits import idempotency
from app.credits.idempotency import RecordedAnswer
from app.runtime import Services

T = TypeVar("T")
REPLAYED = {"idempotent-replayed": "true"}


async def once(
    services: Services,
    request: Request[Any, Any, Any],
    pid: str,
    answer: tuple[int, type[T]],
    run: Callable[[], Awaitable[T]],
) -> Response[T]:
    """``run``'s answer (``answer``: its HTTP status and type), or, for a request with an
    Idempotency-Key that ran before, the answer it got then."""
    status, kind = answer
    key = request.headers.get(idempotency.HEADER)
    if key is None:
        return Response(await run(), status_code=status)
    body = await request.body()
    claim = idempotency.claim(services.layout, pid, key, request.url.path, body)
    ledger, pepper = services.ledger, services.pepper
    token = random_id("run_", 16)
    recorded = await ledger.claim_idempotency(claim, token)
    if recorded is not None:
        kept = idempotency.unseal(pepper, pid, key, recorded.body)
        replay = msgspec.json.decode(kept, type=kind)
        return Response(replay, status_code=recorded.status, headers=REPLAYED)
    try:
        result = await run()
    except BaseException:
        # a request that failed did nothing: its key is free for the request sent again
        await asyncio.shield(ledger.close_idempotency(claim, token, None))
        raise
    sealed = idempotency.seal(pepper, pid, key, msgspec.json.encode(result))
    await ledger.close_idempotency(claim, token, RecordedAnswer(status, sealed))
    return Response(result, status_code=status)
