"""``Idempotency-Key`` on the JSON routes that create or grant something (``POST
/v1/api-keys``, ``POST /v1/webhooks``, the admin routes that create keys, grant credits and
reward spotlight views): the first request with a key runs, and its answer, sealed, is kept
for the key's 24 hours; the same request again gets that answer back
(``idempotent-replayed: true``) without running again. The streams do this in their own
scripts (``app.http.streams``).

A record belongs to its account and environment: the key's (``live``; test keys cannot use
these routes) or ``idempotency.OPERATOR`` for the admin API.

The records are ``IdempotencyRecords``' (``app.credits.idempotency``): the run once per key
(``once``: claimed, replayed, kept, or freed when the run fails), what is kept, and what
happens when an answer cannot be (its key freed, the answer sent all the same); this module
only reads the header and body and writes the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from litestar import Request, Response

from app.core.errors import repeated_header
from app.credits import idempotency
from app.credits.outcomes import Refusal
from app.keys.refusals import refusal_error
from app.runtime import Services

T = TypeVar("T")
REPLAYED = {"idempotent-replayed": "true"}


def idempotency_key(request: Request[Any, Any, Any]) -> str | None:
    """The request's Idempotency-Key (None: none sent), or the 400 when it was sent more
    than once."""
    keys = request.headers.getall(idempotency.HEADER, None)
    if keys is None:
        return None
    if len(keys) > 1:
        raise repeated_header(idempotency.SHOWN)
    return str(keys[0])


async def once(
    services: Services,
    request: Request[Any, Any, Any],
    pid: str,
    environment: str,
    answer: tuple[int, type[T]],
    run: Callable[[], Awaitable[T]],
) -> Response[T]:
    """``run``'s answer (``answer``: its HTTP status and type), or, for a request with an
    Idempotency-Key that ran before in ``environment`` (the key's, or
    ``idempotency.OPERATOR``), the answer it got then."""
    key = idempotency_key(request)
    if key is None:
        return Response(await run(), status_code=answer[0])
    records = services.idempotency_records
    claim = records.claim_for(
        pid, key, request.url.path, await request.body(), environment=environment
    )
    answered = await records.once(claim, answer, run)
    if isinstance(answered, Refusal):
        raise refusal_error(answered)
    headers = REPLAYED if answered.replayed else None
    return Response(answered.answer, status_code=answered.status, headers=headers)
