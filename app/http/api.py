"""``/v1`` routes other than chat completions."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.datastructures import ResponseHeader
from litestar.di import Provide

from app.accounts.answers import (
    ApiKeyCreated,
    ApiKeyDeleted,
    ApiKeyItem,
    ApiKeyList,
    CreditBalance,
)
from app.accounts.ledger_pages import LedgerList, ledger_list, parse_ledger_filter
from app.apis.operation import API_KEY, KEY_ERRORS
from app.completion.catalog import Alias
from app.completion.pricing import PriceList, price_list
from app.completion.request import usable_alias, usable_aliases
from app.core.errors import ErrorKind
from app.core.validation import decode_json
from app.credits.outcomes import Identity
from app.http import key_routes
from app.http.body_routes import body_route, decoded_once
from app.http.deps import live_only, provide_identity, provide_services, request_address
from app.http.headers import NO_STORE
from app.http.openapi import errors
from app.http.queries import Days, GroupBy, Query, UsageFormat, activity_query, ledger_query
from app.http.reports import activity_answer, csv_download, receipt_answer
from app.keys.roles import require_manager
from app.runtime import Services
from app.store import KeyRecord
from app.usage.export import parse_format, usage_rows
from app.usage.reader import parse_days, parse_group_by
from app.usage.receipts import Receipt
from app.webhooks.registry import (
    DeliveryList,
    WebhookCreated,
    WebhookCreateRequest,
    WebhookDeleted,
    WebhookItem,
    WebhookList,
    WebhookUpdateRequest,
)


async def provide_manager(services: Services, ident: Identity) -> KeyRecord:
    """The record of the request's key when it may manage keys and webhooks (a live
    ``admin`` key; 403 otherwise): its limits bound what it may grant (app.keys.roles)."""
    return require_manager(await services.api_keys.caller(ident.pid, ident.kid))


class ModelItem(msgspec.Struct):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(msgspec.Struct):
    object: str
    data: list[ModelItem]


async def _allowed_models(
    services: Services, request: Request[Any, Any, Any]
) -> frozenset[str] | None:
    """The request's key, authenticated: the models it may use (None: all)."""
    return await services.auth.authenticated(
        request.headers.get("authorization"),
        request_address(services, request.scope),
        services.auth.allowed_models,
    )


def model_item(alias: Alias) -> ModelItem:
    """An alias as OpenAI's model object, in the list and on its own."""
    return ModelItem(id=alias.id, object="model", created=alias.created, owned_by="svc")


# What a route needs of the request's key, checked before the route's own work: any key
# (``ident``), a live one (``live``), or one that may manage keys and webhooks (``caller``).
_IDENT = {"ident": Provide(provide_identity)}
_LIVE = {**_IDENT, "live": Provide(live_only("Webhooks belong to live traffic"))}
_MANAGER = {**_IDENT, "caller": Provide(provide_manager)}
_LIVE_ERRORS = (*KEY_ERRORS, ErrorKind.TEST_KEY_FORBIDDEN)
_MANAGER_ERRORS = (*_LIVE_ERRORS, ErrorKind.PERMISSION_DENIED)


class V1Controller(Controller):
    response_headers = [ResponseHeader(name=NO_STORE[0], value=NO_STORE[1])]
    path = "/v1"
    dependencies = {"services": Provide(provide_services)}
    security = API_KEY
    tags = ["v1"]

    @get("/models", responses=errors(*KEY_ERRORS))
    async def models(self, services: Services, request: Request[Any, Any, Any]) -> ModelList:
        """The enabled model aliases the key may use (spec 2.1, 4.2)."""
        allowed = await _allowed_models(services, request)
        items = [model_item(a) for a in usable_aliases(services.aliases, allowed)]
        return ModelList(object="list", data=items)

    @get(
        "/models/{model:str}",
        responses=errors(*KEY_ERRORS, ErrorKind.MODEL_NOT_FOUND, ErrorKind.MODEL_NOT_ALLOWED),
    )
    async def retrieve_model(
        self, services: Services, request: Request[Any, Any, Any], model: str
    ) -> ModelItem:
        """One enabled model alias, as listed by ``GET /v1/models``; an unknown or disabled
        one is 404 ``model_not_found``, one the key may not use 403 ``model_not_allowed``."""
        allowed = await _allowed_models(services, request)
        return model_item(usable_alias(services.aliases, model, allowed))

    @get("/pricing", responses=errors(*KEY_ERRORS))
    async def pricing(self, services: Services, request: Request[Any, Any, Any]) -> PriceList:
        """What each enabled model alias the key may use costs (the aliases ``GET
        /v1/models`` lists): input, cached input, cache write and output prices in credits
        per 1,000 tokens, the formula and its rounding, and the output cap."""
        allowed = await _allowed_models(services, request)
        usable = {a.id for a in usable_aliases(services.aliases, allowed)}
        return price_list(services.aliases, usable)

    @get("/credits", responses=errors(*KEY_ERRORS))
    async def credits(self, services: Services, request: Request[Any, Any, Any]) -> CreditBalance:
        """The account's credit pools (spec 2.5); one script call checks the key too."""
        return await services.auth.authenticated(
            request.headers.get("authorization"),
            request_address(services, request.scope),
            services.accounts.key_balance,
        )

    @get(
        "/credits/ledger",
        dependencies={**_IDENT, "params": Provide(ledger_query)},
        responses=errors(*KEY_ERRORS, ErrorKind.INVALID_VALUE),
    )
    async def ledger(self, services: Services, ident: Identity, params: Query) -> LedgerList:
        """Every credit into or out of the account's pools outside a request (purchases,
        rewards, grants, refunds, disputes, debits, expiries), newest first, a page at a
        time (``limit``, ``after``)."""
        return await ledger_list(services.store, ident.pid, parse_ledger_filter(params))

    @get(
        "/usage",
        dependencies=_IDENT,
        responses=errors(*KEY_ERRORS, ErrorKind.INVALID_VALUE),
    )
    async def usage(
        self,
        services: Services,
        ident: Identity,
        days: Days = None,
        group_by: GroupBy = None,
        format_: UsageFormat = None,
    ) -> Response[Any]:
        """All-time usage and the last ``days`` (1-366, default 30) UTC days, newest first,
        for the key's environment (spec 2.6); ``group_by`` (key, model, api) breaks each day down;
        ``format=csv``: the days as CSV rows."""
        window, grouped = parse_days(days), parse_group_by(group_by)
        csv_wanted = parse_format(format_) == "csv"
        summary = await services.usage.summary(
            ident.pid, ident.environment, services.clock(), window, grouped
        )
        if not csv_wanted:
            return Response(summary)
        return csv_download(usage_rows(summary, grouped), "usage.csv")

    @get(
        "/activity",
        dependencies={**_IDENT, "params": Provide(activity_query)},
        responses=errors(*KEY_ERRORS, ErrorKind.INVALID_VALUE),
    )
    async def activity(self, services: Services, ident: Identity, params: Query) -> Response[Any]:
        """The account's settled requests in the key's environment, newest first, a page
        at a time (``limit``, ``after``), by ``key_id``, ``model`` or ``day``;
        ``format=csv``: every row the filters name, as CSV."""
        return await activity_answer(services, ident.pid, ident.environment, params)

    @get(
        "/activity/{activity_id:str}",
        dependencies=_IDENT,
        responses=errors(*KEY_ERRORS, ErrorKind.ACTIVITY_NOT_FOUND),
    )
    async def receipt(self, services: Services, ident: Identity, activity_id: str) -> Receipt:
        """One settled request of the account in the key's environment, by its id (a
        chunk's ``chatcmpl-svc-…``, a response's ``resp_svc_…``, a message's ``msg_svc_…``,
        a swept request's ``rsv_…``): the models, tokens, credits, the prices they were
        charged at (credits per 1,000 tokens, whatever the model costs now; null when not
        recorded) and the pools they came from, the outcome and the timings. There from the
        moment the stream ends, before the list shows it; another account's request, or
        another environment's, is 404."""
        return await receipt_answer(services, ident.pid, activity_id, ident.environment)

    @get("/api-keys", dependencies=_IDENT, responses=errors(*KEY_ERRORS))
    async def list_keys(self, services: Services, ident: Identity) -> ApiKeyList:
        """The account's keys, newest first; secrets are never included (spec 4.5)."""
        return await services.api_keys.list_keys(ident.pid)

    @key_routes.create_route("/api-keys", *_MANAGER_ERRORS, dependencies=_MANAGER)
    async def create_key(
        self, services: Services, caller: KeyRecord, request: Request[Any, Any, Any]
    ) -> Response[ApiKeyCreated]:
        """A new key for the caller's account; the secret is in this response only. Needs
        an ``admin`` key; the new key is ``inference`` unless ``role`` says otherwise, and
        never gets more than the caller has."""
        pid, environment = caller.account_pid, caller.environment
        return await key_routes.create_key(services, request, pid, environment, granter=caller)

    @key_routes.update_route("/api-keys/{key_id:str}", *_MANAGER_ERRORS, dependencies=_MANAGER)
    async def update_key(
        self, services: Services, caller: KeyRecord, key_id: str, request: Request[Any, Any, Any]
    ) -> ApiKeyItem:
        """Change a key's name, daily cap, expiry, allowed models or rate limit: each holds
        from the very next request on every worker. Fields left out keep their value; the
        environment never changes. Needs an ``admin`` key, which cannot lift a key past its
        own limits (its own included)."""
        pid = caller.account_pid
        return await key_routes.update_key(services, request, pid, key_id, granter=caller)

    @key_routes.rotate_route(
        "/api-keys/{key_id:str}/rotate", *_MANAGER_ERRORS, dependencies=_MANAGER
    )
    async def rotate_key(
        self, services: Services, caller: KeyRecord, key_id: str, request: Request[Any, Any, Any]
    ) -> ApiKeyCreated:
        """A new key in place of ``key_id`` (same settings, new secret, shown once); the old
        key works for ``grace_seconds`` more. The day's spend and rate limit carry over.
        Needs an ``admin`` key."""
        pid = caller.account_pid
        return await key_routes.rotate_key(services, request, pid, key_id, granter=caller)

    @delete(
        "/api-keys/{key_id:str}",
        status_code=200,
        dependencies=_MANAGER,
        responses=errors(*_MANAGER_ERRORS, ErrorKind.API_KEY_NOT_FOUND),
    )
    async def revoke_key(self, services: Services, caller: KeyRecord, key_id: str) -> ApiKeyDeleted:
        """Revoke a key at once on every worker (spec 4.7). Needs an ``admin`` key."""
        return await services.api_keys.revoke_key(caller.account_pid, key_id, granter=caller)

    @body_route(
        post,
        "/webhooks",
        WebhookCreateRequest,
        *_MANAGER_ERRORS,
        ErrorKind.WEBHOOK_LIMIT,
        idempotent=True,
        status_code=201,
        dependencies=_MANAGER,
    )
    async def create_webhook(
        self, services: Services, caller: KeyRecord, request: Request[Any, Any, Any]
    ) -> Response[WebhookCreated]:
        """A new webhook for the caller's account; its signing secret is in this response
        only. The URL must be https and reach the public internet (400 naming ``url``).
        Needs an ``admin`` key."""
        pid = caller.account_pid
        return await decoded_once(
            services,
            request,
            WebhookCreateRequest,
            pid,
            caller.environment,
            (201, WebhookCreated),
            lambda req: services.webhooks.create(pid, req),
        )

    @get("/webhooks", dependencies=_LIVE, responses=errors(*_LIVE_ERRORS))
    async def list_webhooks(self, services: Services, live: Identity) -> WebhookList:
        """The account's webhooks, oldest first; secrets are never included."""
        return await services.webhooks.list(live.pid)

    @body_route(
        patch,
        "/webhooks/{webhook_id:str}",
        WebhookUpdateRequest,
        *_MANAGER_ERRORS,
        ErrorKind.WEBHOOK_NOT_FOUND,
        dependencies=_MANAGER,
    )
    async def update_webhook(
        self,
        services: Services,
        caller: KeyRecord,
        webhook_id: str,
        request: Request[Any, Any, Any],
    ) -> WebhookItem:
        """Change a webhook's URL, events or description (fields left out keep theirs).
        Needs an ``admin`` key."""
        req = decode_json(await request.body(), WebhookUpdateRequest)
        return await services.webhooks.update(caller.account_pid, webhook_id, req)

    @delete(
        "/webhooks/{webhook_id:str}",
        status_code=200,
        dependencies=_MANAGER,
        responses=errors(*_MANAGER_ERRORS, ErrorKind.WEBHOOK_NOT_FOUND),
    )
    async def delete_webhook(
        self, services: Services, caller: KeyRecord, webhook_id: str
    ) -> WebhookDeleted:
        """Delete a webhook: nothing more is sent to it, retries included. Needs an
        ``admin`` key."""
        return await services.webhooks.delete(caller.account_pid, webhook_id)

    @get(
        "/webhooks/{webhook_id:str}/deliveries",
        dependencies=_LIVE,
        responses=errors(*_LIVE_ERRORS, ErrorKind.WEBHOOK_NOT_FOUND),
    )
    async def webhook_deliveries(
        self, services: Services, live: Identity, webhook_id: str
    ) -> DeliveryList:
        """The webhook's most recent deliveries (100), newest event first: each event's
        state, attempts, the last answer and when it is retried next."""
        return await services.webhooks.deliveries(live.pid, webhook_id)
