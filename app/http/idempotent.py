"""``Idempotency-Key`` on the JSON routes that create or grant something (``POST
/v1/api-keys``, ``POST /v1/webhooks``, the admin routes that create keys, grant credits and
reward spotlight views): the first request with a key runs, and its answer, sealed, is kept
for the key's 24 hours; the same request again gets that answer back
(``idempotent-replayed: true``) without running again. The streams do this in their own
scripts (``app.http.streams``).

A record belongs to its account and environment: the key's (``live``; test keys cannot use
these routes) or ``idempotency.OPERATOR`` for the admin API.

Every answer a route can produce is kept: the bound is ``idempotency.answer_limit`` of the
request-size limit (``SVC_MAX_BODY_BYTES``), which no answer of these routes reaches.

When the answer cannot be recorded (Redis fails as the run closes its key, or an answer
is over the bound), what the request did stands and its answer is sent: undoing it (a key
or webhook revoked, a grant taken back) could fail the same way, and a 503 for a request
that did its work would leave a resource nobody knows the secret of. The key is freed
instead, so the client is never left with a key that answers 409 for a day: at once when
Redis answers, else when the claim lapses (``idempotency.RUNNING_TTL_S``, a minute). A
retry with that key then runs again, as one without a key would.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from litestar import Request, Response

from app.core.errors import repeated_header
from app.core.ids import random_id
from app.credits import idempotency
from app.credits.idempotency import IdempotencyClaim, IdempotencyRecords, RecordedAnswer
from app.credits.outcomes import Refusal
from app.keys.refusals import refusal_error
from app.kv.client import REDIS_ERRORS
from app.runtime import Services

T = TypeVar("T")
REPLAYED = {"idempotent-replayed": "true"}
log = logging.getLogger("svc.http")


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
    status, kind = answer
    key = idempotency_key(request)
    if key is None:
        return Response(await run(), status_code=status)
    records = services.idempotency_records
    claim = records.claim_for(
        pid, key, request.url.path, await request.body(), environment=environment
    )
    token = random_id("run_", 16)
    recorded = await records.claim(claim, token)
    if isinstance(recorded, Refusal):
        raise refusal_error(recorded)
    if recorded is not None:
        kept = claim.seal.unseal(recorded.body)
        replay = msgspec.json.decode(kept, type=kind)
        return Response(replay, status_code=recorded.status, headers=REPLAYED)
    try:
        result = await run()
    except BaseException:
        # a request that failed did nothing: its key is free for the request sent again
        await _free(records, claim, token)
        raise
    sealed = claim.seal.seal(msgspec.json.encode(result))
    if len(sealed) > idempotency.answer_limit(services.settings.max_body_bytes):
        log.warning("idempotent answer of %d bytes not kept; its key is freed", len(sealed))
        await _free(records, claim, token)
    else:
        try:
            # shielded: a client that leaves now still finds its answer when it retries
            await asyncio.shield(records.close(claim, token, RecordedAnswer(status, sealed)))
        except REDIS_ERRORS as exc:
            log.warning("idempotent answer not recorded (%s); its key is freed", type(exc).__name__)
            await _free(records, claim, token)
    return Response(result, status_code=status)


async def _free(records: IdempotencyRecords, claim: IdempotencyClaim, token: str) -> None:
    """Free the key of the run ``token``; when Redis fails here too, its claim lapses on its
    own (``RUNNING_TTL_S``) and the request's own outcome stands."""
    try:
        await asyncio.shield(records.close(claim, token, None))
    except REDIS_ERRORS as exc:
        log.warning("idempotency key not freed (%s); its claim lapses", type(exc).__name__)
