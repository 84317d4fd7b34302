"""The JSON routes the dialects answer beside their streams (``Dialect.beside``: the
Messages API's ``count_tokens``), as Litestar routes: the key read where the dialect reads
it and presented, the body read within the request-size limit, the route's work done by
its dialect, and every error, a method other than POST and a body too large included,
answered in the dialect's shape (the route's own exception handler: Litestar answers an
unrouted method before any route's, so the other methods have a route that refuses them).

Their operations in the OpenAPI document are the dialects' own (``JsonRoute.operation``,
added by ``app.http.openapi_document``): an API's error shape is more than Litestar's
response specs can state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from litestar import Request, Response, post, route
from litestar.enums import HttpMethod
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler

from app.apis.dialect import Dialect, JsonRoute
from app.completion.request import request_limits
from app.core.errors import ApiError, ErrorKind
from app.core.logs import request_id
from app.http.deps import request_address, services_of
from app.http.errors import request_too_large, shaped_handler
from app.http.headers import NO_STORE

NOT_POST = [method for method in HttpMethod if method is not HttpMethod.POST]


def beside_routes(dialects: Iterable[Dialect]) -> list[HTTPRouteHandler]:
    """The Litestar routes of the dialects' JSON routes: for each, POST and the refusal of
    every other method."""
    return [handler for d in dialects for json in d.beside for handler in _handlers(d, json)]


def _handlers(dialect: Dialect, json: JsonRoute) -> tuple[HTTPRouteHandler, HTTPRouteHandler]:
    handlers = {Exception: shaped_handler(dialect.error_shape)}

    async def answer(request: Request[Any, Any, Any]) -> Response[Any]:
        services = services_of(request)
        limit = services.settings.max_body_bytes

        async def body() -> bytes:
            try:
                return await request.body()
            except HTTPException as exc:
                # Litestar's own 413 (the app's request_max_body_size is this limit), with
                # the words the streams answer it with
                if exc.status_code == ErrorKind.REQUEST_TOO_LARGE.status:
                    raise request_too_large(limit) from None
                raise

        credentials = dialect.credentials(lambda name: request.headers.get(name))
        address = request_address(services, request.scope)
        async with services.auth.presented(credentials, address) as key:
            limits = request_limits(services.settings)
            answered = await json.answer(services.auth, key, body, services.aliases, limits)
        rid = request_id.get() or ""
        return Response(answered, headers={NO_STORE[0]: NO_STORE[1], "request-id": rid})

    async def refuse() -> None:
        raise ApiError(ErrorKind.METHOD_NOT_ALLOWED, f"Use POST for {json.path}.")

    options: dict[str, Any] = {"exception_handlers": handlers, "include_in_schema": False}
    # the refusal first: it takes OPTIONS before Litestar adds its own answer to it
    return (
        route(json.path, http_method=NOT_POST, **options)(refuse),
        post(json.path, status_code=200, **options)(answer),
    )
