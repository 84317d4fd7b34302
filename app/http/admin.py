"""``/admin/v1``: operator and companion-app operations, behind ``SVC_ADMIN_TOKEN``."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, Response, get, patch, post
from litestar.datastructures import ResponseHeader
from litestar.di import Provide

from app.accounts.manage import (
    ApiKeyCreated,
    ApiKeyItem,
    CreditBalance,
    GrantRequest,
    KeyCreateRequest,
    KeyRotateRequest,
    KeyUpdateRequest,
    rotate_request,
)
from app.accounts.rewards import SpotlightRequest, SpotlightReward
from app.core.errors import ErrorKind
from app.core.validation import decode_json
from app.credits import idempotency
from app.http.deps import admin_guard, provide_services
from app.http.headers import NO_STORE
from app.http.idempotent import once
from app.http.openapi import (
    ACTIVITY_PARAMS,
    ADMIN_ERRORS,
    ADMIN_TOKEN,
    BODY_ERRORS,
    ENVIRONMENT_PARAM,
    IDEMPOTENCY_KEY,
    IDEMPOTENT_ERRORS,
    documented,
    errors,
)
from app.http.reports import activity_answer
from app.runtime import Services
from app.usage.activity import parse_environment
from app.usage.flusher import Lag
from app.webhooks.registry import DeliveryList, WebhookList


class AccountCreated(msgspec.Struct):
    account_pid: str


class AdminController(Controller):
    response_headers = [ResponseHeader(name=NO_STORE[0], value=NO_STORE[1])]
    path = "/admin/v1"
    guards = [admin_guard]
    dependencies = {"services": Provide(provide_services)}
    security = ADMIN_TOKEN
    tags = ["admin"]

    @post("/accounts", status_code=201, responses=errors(*ADMIN_ERRORS))
    async def create_account(self, services: Services) -> AccountCreated:
        return AccountCreated(account_pid=await services.accounts.create_account())

    @post(
        "/accounts/{pid:str}/grants",
        status_code=200,
        responses=errors(
            *ADMIN_ERRORS,
            *BODY_ERRORS,
            *IDEMPOTENT_ERRORS,
            ErrorKind.ACCOUNT_NOT_FOUND,
        ),
        operation_class=documented(body=GrantRequest, parameters=[IDEMPOTENCY_KEY]),
    )
    async def grant(
        self, services: Services, pid: str, request: Request[Any, Any, Any]
    ) -> Response[CreditBalance]:
        """Add purchased credits (once per Idempotency-Key, when one is sent)."""
        req = decode_json(await request.body(), GrantRequest)
        # applied once per Idempotency-Key by the grant itself, whatever its record says
        grant_id = idempotency.grant_id(pid, request.headers.get(idempotency.HEADER))
        return await once(
            services,
            request,
            pid,
            idempotency.OPERATOR,
            (200, CreditBalance),
            lambda: services.accounts.grant_purchased(pid, req.credits, grant_id=grant_id),
        )

    @get(
        "/accounts/{pid:str}/credits",
        responses=errors(*ADMIN_ERRORS, ErrorKind.ACCOUNT_NOT_FOUND),
    )
    async def credits(self, services: Services, pid: str) -> CreditBalance:
        return await services.accounts.balance(pid)

    @post(
        "/accounts/{pid:str}/api-keys",
        status_code=201,
        responses=errors(
            *ADMIN_ERRORS,
            *BODY_ERRORS,
            *IDEMPOTENT_ERRORS,
            ErrorKind.KEY_LIMIT,
            ErrorKind.ACCOUNT_NOT_FOUND,
        ),
        operation_class=documented(body=KeyCreateRequest, parameters=[IDEMPOTENCY_KEY]),
    )
    async def create_key(
        self, services: Services, pid: str, request: Request[Any, Any, Any]
    ) -> Response[ApiKeyCreated]:
        """A new key of the account (once per Idempotency-Key, when one is sent)."""
        req = decode_json(await request.body(), KeyCreateRequest)
        return await once(
            services,
            request,
            pid,
            idempotency.OPERATOR,
            (201, ApiKeyCreated),
            lambda: services.accounts.create_key(pid, req),
        )

    @patch(
        "/accounts/{pid:str}/api-keys/{key_id:str}",
        responses=errors(
            *ADMIN_ERRORS, *BODY_ERRORS, ErrorKind.ACCOUNT_NOT_FOUND, ErrorKind.API_KEY_NOT_FOUND
        ),
        operation_class=documented(body=KeyUpdateRequest),
    )
    async def update_key(
        self, services: Services, pid: str, key_id: str, request: Request[Any, Any, Any]
    ) -> ApiKeyItem:
        """Change a key's settings, at once on every worker."""
        await services.accounts.require_account(pid)
        req = decode_json(await request.body(), KeyUpdateRequest)
        return await services.accounts.update_key(pid, key_id, req)

    @post(
        "/accounts/{pid:str}/api-keys/{key_id:str}/rotate",
        status_code=201,
        responses=errors(
            *ADMIN_ERRORS,
            *BODY_ERRORS,
            ErrorKind.ACCOUNT_NOT_FOUND,
            ErrorKind.API_KEY_NOT_FOUND,
            ErrorKind.KEY_NOT_ROTATABLE,
        ),
        operation_class=documented(body=KeyRotateRequest),
    )
    async def rotate_key(
        self, services: Services, pid: str, key_id: str, request: Request[Any, Any, Any]
    ) -> ApiKeyCreated:
        """A new key in place of ``key_id``; the old one works for ``grace_seconds`` more."""
        await services.accounts.require_account(pid)
        req = rotate_request(await request.body())
        return await services.accounts.rotate_key(pid, key_id, req.grace_seconds, role=req.role)

    @post(
        "/accounts/{pid:str}/spotlights",
        status_code=200,
        responses=errors(
            *ADMIN_ERRORS,
            *BODY_ERRORS,
            *IDEMPOTENT_ERRORS,
            ErrorKind.ACCOUNT_NOT_FOUND,
            ErrorKind.SPOTLIGHT_LIMIT,
        ),
        operation_class=documented(body=SpotlightRequest, parameters=[IDEMPOTENCY_KEY]),
    )
    async def spotlight(
        self, services: Services, pid: str, request: Request[Any, Any, Any]
    ) -> Response[SpotlightReward]:
        """Reward a verified spotlight view: earned credits, once per ``view_id`` (and once
        per Idempotency-Key, when one is sent)."""
        req = decode_json(await request.body(), SpotlightRequest)
        return await once(
            services,
            request,
            pid,
            idempotency.OPERATOR,
            (200, SpotlightReward),
            lambda: services.spotlights.reward(pid, req.view_id),
        )

    @get(
        "/accounts/{pid:str}/activity",
        responses=errors(*ADMIN_ERRORS, ErrorKind.ACCOUNT_NOT_FOUND, ErrorKind.INVALID_VALUE),
        operation_class=documented(parameters=[*ACTIVITY_PARAMS, ENVIRONMENT_PARAM]),
    )
    async def activity(
        self, services: Services, pid: str, request: Request[Any, Any, Any]
    ) -> Response[Any]:
        """The account's settled requests (``GET /v1/activity``), in ``environment``
        (live unless told)."""
        await services.accounts.require_account(pid)
        environment = parse_environment(request.query_params.get("environment"))
        return await activity_answer(services, pid, environment, request)

    @get(
        "/accounts/{pid:str}/webhooks",
        responses=errors(*ADMIN_ERRORS, ErrorKind.ACCOUNT_NOT_FOUND),
    )
    async def webhooks(self, services: Services, pid: str) -> WebhookList:
        """The account's webhooks (``GET /v1/webhooks``)."""
        await services.accounts.require_account(pid)
        return await services.webhooks.list(pid)

    @get(
        "/accounts/{pid:str}/webhooks/{webhook_id:str}/deliveries",
        responses=errors(*ADMIN_ERRORS, ErrorKind.ACCOUNT_NOT_FOUND, ErrorKind.WEBHOOK_NOT_FOUND),
    )
    async def webhook_deliveries(
        self, services: Services, pid: str, webhook_id: str
    ) -> DeliveryList:
        """A webhook's recent deliveries (``GET /v1/webhooks/{id}/deliveries``)."""
        await services.accounts.require_account(pid)
        return await services.webhooks.deliveries(pid, webhook_id)

    @get("/usage-lag", responses=errors(*ADMIN_ERRORS))
    async def usage_lag(self, services: Services) -> Lag:
        """Usage events not yet in the durable store, and the age of the oldest."""
        return await services.flusher.lag()
