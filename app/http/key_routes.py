"""The API key routes ``/v1`` and ``/admin/v1`` share, written once: for each operation, its
route (method, status, body, the errors the operation itself answers) and a plain function
that decodes the body and runs it.

The controllers add what differs: the path, how the account is resolved (``/v1``: the
calling key, whose limits bound what it grants; the admin API: the path's account, no key
acting) and the errors of resolving it.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, patch, post
from litestar.handlers import HTTPRouteHandler

from app.accounts.answers import ApiKeyCreated, ApiKeyItem
from app.accounts.bodies import KeyCreateRequest, KeyRotateRequest, KeyUpdateRequest, rotate_request
from app.core.errors import ErrorKind
from app.core.validation import decode_json
from app.http.body_routes import body_route, decoded_once
from app.runtime import Services
from app.store import KeyRecord


def create_route(path: str, *resolving: ErrorKind, **options: Any) -> HTTPRouteHandler:
    """``POST`` of a new key (201; once per Idempotency-Key)."""
    kinds = (*resolving, ErrorKind.KEY_LIMIT)
    return body_route(
        post, path, KeyCreateRequest, *kinds, idempotent=True, status_code=201, **options
    )


def update_route(path: str, *resolving: ErrorKind, **options: Any) -> HTTPRouteHandler:
    """``PATCH`` of a key's settings."""
    kinds = (*resolving, ErrorKind.API_KEY_NOT_FOUND)
    return body_route(patch, path, KeyUpdateRequest, *kinds, **options)


def rotate_route(path: str, *resolving: ErrorKind, **options: Any) -> HTTPRouteHandler:
    """``POST`` of a key's successor (201)."""
    kinds = (
        *resolving,
        ErrorKind.KEY_LIMIT,
        ErrorKind.API_KEY_NOT_FOUND,
        ErrorKind.KEY_NOT_ROTATABLE,
    )
    return body_route(post, path, KeyRotateRequest, *kinds, status_code=201, **options)


async def create_key(
    services: Services,
    request: Request[Any, Any, Any],
    pid: str,
    environment: str,
    *,
    granter: KeyRecord | None,
) -> Response[ApiKeyCreated]:
    """A new key of ``pid``, made once per Idempotency-Key in ``environment`` (the calling
    key's, or ``idempotency.OPERATOR``); ``granter``: the calling key, None for an
    operator."""
    return await decoded_once(
        services,
        request,
        KeyCreateRequest,
        pid,
        environment,
        (201, ApiKeyCreated),
        lambda req: services.api_keys.create_key(pid, req, granter=granter),
    )


async def update_key(
    services: Services,
    request: Request[Any, Any, Any],
    pid: str,
    key_id: str,
    *,
    granter: KeyRecord | None,
) -> ApiKeyItem:
    """The key ``key_id`` of ``pid`` changed as the body says."""
    req = decode_json(await request.body(), KeyUpdateRequest)
    return await services.api_keys.update_key(pid, key_id, req, granter=granter)


async def rotate_key(
    services: Services,
    request: Request[Any, Any, Any],
    pid: str,
    key_id: str,
    *,
    granter: KeyRecord | None,
) -> ApiKeyCreated:
    """A successor of the key ``key_id`` of ``pid`` (the body, optional, sets its grace and
    role)."""
    req = rotate_request(await request.body())
    return await services.api_keys.rotate_key(
        pid, key_id, req.grace_seconds, role=req.role, granter=granter
    )
