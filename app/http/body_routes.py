"""The JSON routes that decode a body of their own (so a bad one is an OpenAI-shaped 400
naming the field), on ``/v1`` and ``/admin/v1`` alike: how one is declared (``body_route``:
its body, its Idempotency-Key, the errors of decoding and of idempotency) and how a
creation runs (``decoded_once``: decoded, then once per Idempotency-Key).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from litestar import Request, Response
from litestar.handlers import HTTPRouteHandler

from app.apis.operation import BODY_ERRORS, IDEMPOTENCY_KEY, IDEMPOTENT_ERRORS
from app.core.errors import ErrorKind
from app.core.validation import decode_json
from app.http.idempotent import once
from app.http.openapi import documented, errors
from app.runtime import Services

B = TypeVar("B", bound=msgspec.Struct)
T = TypeVar("T")


def body_route(
    route: type[HTTPRouteHandler],
    path: str,
    body: type[msgspec.Struct],
    *kinds: ErrorKind,
    idempotent: bool = False,
    **options: Any,
) -> HTTPRouteHandler:
    """``route`` (``post``, ``patch``) at ``path``, decoding a ``body``: documented with it,
    with the Idempotency-Key when ``idempotent``, and with the errors of decoding (and of
    idempotency) ahead of ``kinds``, the route's own. ``options``: the rest of the route's
    settings (``status_code``, ``dependencies``)."""
    ahead = (*BODY_ERRORS, *IDEMPOTENT_ERRORS) if idempotent else BODY_ERRORS
    parameters = [IDEMPOTENCY_KEY] if idempotent else []
    return route(
        path,
        responses=errors(*ahead, *kinds),
        operation_class=documented(body=body, parameters=parameters),
        **options,
    )


async def decoded_once(
    services: Services,
    request: Request[Any, Any, Any],
    body: type[B],
    pid: str,
    environment: str,
    answer: tuple[int, type[T]],
    run: Callable[[B], Awaitable[T]],
) -> Response[T]:
    """``request``'s body decoded as ``body``, then ``run`` with it, once per
    Idempotency-Key of ``pid`` in ``environment`` (``once``; ``answer``: the HTTP status
    and type of what ``run`` answers)."""
    req = decode_json(await request.body(), body)
    return await once(services, request, pid, environment, answer, lambda: run(req))
