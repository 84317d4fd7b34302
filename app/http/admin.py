"""``/admin/v1``: operator and companion-app operations, behind ``SVC_ADMIN_TOKEN``."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.datastructures import ResponseHeader
from litestar.di import Provide

from app.accounts.answers import (
    AccountList,
    ApiKeyCreated,
    ApiKeyDeleted,
    ApiKeyItem,
    CreditBalance,
)
from app.accounts.audit import AuditPage, audit_page, parse_audit_filter
from app.accounts.bodies import (
    AccountCreateRequest,
    AccountUpdateRequest,
    DebitRequest,
    GrantRequest,
    account_create_request,
    account_update_request,
)
from app.accounts.ledger_pages import LedgerList, ledger_list, parse_ledger_filter
from app.accounts.lookup import parse_account_filter
from app.accounts.rewards import SpotlightRequest, SpotlightReward
from app.books.overview import AccountOverview, account_overview, parse_overview
from app.core.errors import ErrorKind
from app.core.validation import decode_json
from app.credits import idempotency
from app.http import key_routes
from app.http.body_routes import body_route, decoded_once
from app.http.deps import admin_guard, operator_middleware, provide_services
from app.http.headers import NO_STORE
from app.http.idempotent import idempotency_key, once
from app.http.openapi import ADMIN_ERRORS, ADMIN_TOKEN, errors
from app.http.queries import (
    Environment,
    Query,
    accounts_query,
    activity_query,
    audit_query,
    ledger_query,
    purchases_query,
)
from app.http.reports import activity_answer, operator_receipt_answer
from app.ops.lookup import AccountDetail, account_detail
from app.purchases.listing import PurchaseList, parse_purchase_filter, purchase_list
from app.runtime import Services
from app.usage.activity import parse_environment
from app.usage.flusher import Lag
from app.usage.receipts import OperatorReceipt
from app.webhooks.registry import DeliveryList, WebhookList


class AccountCreated(msgspec.Struct):
    account_pid: str


# The errors of a route on one account: the admin token's, and the account's 404.
_ACCOUNT = (*ADMIN_ERRORS, ErrorKind.ACCOUNT_NOT_FOUND)
_TAKEN = (ErrorKind.EXTERNAL_ID_TAKEN,)  # another account has the external_id asked for


class AdminController(Controller):
    response_headers = [ResponseHeader(name=NO_STORE[0], value=NO_STORE[1])]
    path = "/admin/v1"
    guards = [admin_guard]
    middleware = [operator_middleware]
    dependencies = {"services": Provide(provide_services)}
    security = ADMIN_TOKEN
    tags = ["admin"]

    @body_route(post, "/accounts", AccountCreateRequest, *ADMIN_ERRORS, *_TAKEN, status_code=201)
    async def create_account(
        self, services: Services, request: Request[Any, Any, Any]
    ) -> AccountCreated:
        """A new account, with the app's ``external_id`` of it when the body names one."""
        req = account_create_request(await request.body())
        return AccountCreated(account_pid=await services.accounts.create_account(req.external_id))

    @get(
        "/accounts",
        dependencies={"params": Provide(accounts_query)},
        responses=errors(*ADMIN_ERRORS, ErrorKind.INVALID_VALUE),
    )
    async def accounts(self, services: Services, params: Query) -> AccountList | AccountOverview:
        """Accounts, newest first, a page at a time (``limit``, ``after``); ``query`` finds
        them by account id, key id (either form) or a key's last four characters;
        ``external_id`` lists the one the app knows by that id. With ``sort`` (spend,
        balance, created): the overview, every account's balance, debt and live spend over
        the last ``days`` (default 30), the first ``limit`` of them, and the totals of the
        credits outstanding and of the debt."""
        overview = parse_overview(params)
        if overview is not None:
            return await account_overview(
                services.store, services.money, overview, services.clock()
            )
        return await services.accounts.find_accounts(parse_account_filter(params))

    @get("/accounts/{pid:str}", responses=errors(*_ACCOUNT))
    async def account(self, services: Services, pid: str) -> AccountDetail:
        """The account: status, balance (as ``/v1/credits``), keys (as ``/v1/api-keys``,
        never a secret), usage today."""
        return await account_detail(
            services.accounts, services.api_keys, services.usage, pid, services.clock()
        )

    @body_route(
        patch, "/accounts/{pid:str}", AccountUpdateRequest, *_ACCOUNT, *_TAKEN, status_code=200
    )
    async def update_account(
        self, services: Services, pid: str, request: Request[Any, Any, Any]
    ) -> AccountDetail:
        """Disable the account (every key refused at once, on every instance: 403
        ``account_disabled``) or enable it again; set, change or clear (null) its
        ``external_id``. Answers the account."""
        await services.accounts.update(pid, account_update_request(await request.body()))
        return await account_detail(
            services.accounts, services.api_keys, services.usage, pid, services.clock()
        )

    @delete(
        "/accounts/{pid:str}/api-keys/{key_id:str}",
        status_code=200,
        responses=errors(*_ACCOUNT, ErrorKind.API_KEY_NOT_FOUND),
    )
    async def revoke_key(self, services: Services, pid: str, key_id: str) -> ApiKeyDeleted:
        """Revoke any key of the account, at once on every worker (as ``DELETE
        /v1/api-keys/{id}``)."""
        await services.accounts.require_account(pid)
        return await services.api_keys.revoke_key(pid, key_id)

    @body_route(
        post,
        "/accounts/{pid:str}/grants",
        GrantRequest,
        *_ACCOUNT,
        idempotent=True,
        status_code=200,
    )
    async def grant(
        self, services: Services, pid: str, request: Request[Any, Any, Any]
    ) -> Response[CreditBalance]:
        """Add purchased credits (once per Idempotency-Key, when one is sent)."""
        req = decode_json(await request.body(), GrantRequest)
        key = idempotency_key(request)
        return await once(
            services,
            request,
            pid,
            idempotency.OPERATOR,
            (200, CreditBalance),
            lambda: services.accounts.grant_purchased(
                pid, req.credits, idempotency_key=key, reason=req.reason
            ),
        )

    @body_route(
        post,
        "/accounts/{pid:str}/debits",
        DebitRequest,
        *_ACCOUNT,
        idempotent=True,
        status_code=200,
    )
    async def debit(
        self, services: Services, pid: str, request: Request[Any, Any, Any]
    ) -> Response[CreditBalance]:
        """Take credits back as a refund does: the purchased pool first, then the earned
        one, the rest owed as debt (once per Idempotency-Key, when one is sent)."""
        req = decode_json(await request.body(), DebitRequest)
        key = idempotency_key(request)
        return await once(
            services,
            request,
            pid,
            idempotency.OPERATOR,
            (200, CreditBalance),
            lambda: services.accounts.debit(
                pid, req.credits, idempotency_key=key, reason=req.reason
            ),
        )

    @get(
        "/accounts/{pid:str}/ledger",
        dependencies={"params": Provide(ledger_query)},
        responses=errors(*_ACCOUNT, ErrorKind.INVALID_VALUE),
    )
    async def ledger(self, services: Services, pid: str, params: Query) -> LedgerList:
        """The account's credit ledger, newest first, a page at a time (``limit``,
        ``after``): every purchase, reward, grant, refund, dispute, debit and expiry."""
        await services.accounts.require_account(pid)
        return await ledger_list(services.store, pid, parse_ledger_filter(params))

    @get("/accounts/{pid:str}/credits", responses=errors(*_ACCOUNT))
    async def credits(self, services: Services, pid: str) -> CreditBalance:
        return await services.accounts.balance(pid)

    @key_routes.create_route("/accounts/{pid:str}/api-keys", *_ACCOUNT)
    async def create_key(
        self, services: Services, pid: str, request: Request[Any, Any, Any]
    ) -> Response[ApiKeyCreated]:
        """A new key of the account (once per Idempotency-Key, when one is sent)."""
        operator = idempotency.OPERATOR
        return await key_routes.create_key(services, request, pid, operator, granter=None)

    @key_routes.update_route("/accounts/{pid:str}/api-keys/{key_id:str}", *_ACCOUNT)
    async def update_key(
        self, services: Services, pid: str, key_id: str, request: Request[Any, Any, Any]
    ) -> ApiKeyItem:
        """Change a key's settings, at once on every worker."""
        await services.accounts.require_account(pid)
        return await key_routes.update_key(services, request, pid, key_id, granter=None)

    @key_routes.rotate_route("/accounts/{pid:str}/api-keys/{key_id:str}/rotate", *_ACCOUNT)
    async def rotate_key(
        self, services: Services, pid: str, key_id: str, request: Request[Any, Any, Any]
    ) -> ApiKeyCreated:
        """A new key in place of ``key_id``; the old one works for ``grace_seconds`` more."""
        await services.accounts.require_account(pid)
        return await key_routes.rotate_key(services, request, pid, key_id, granter=None)

    @body_route(
        post,
        "/accounts/{pid:str}/spotlights",
        SpotlightRequest,
        *_ACCOUNT,
        ErrorKind.SPOTLIGHT_LIMIT,
        idempotent=True,
        status_code=200,
    )
    async def spotlight(
        self, services: Services, pid: str, request: Request[Any, Any, Any]
    ) -> Response[SpotlightReward]:
        """Reward a verified spotlight view: earned credits, once per ``view_id`` (and once
        per Idempotency-Key, when one is sent)."""
        return await decoded_once(
            services,
            request,
            SpotlightRequest,
            pid,
            idempotency.OPERATOR,
            (200, SpotlightReward),
            lambda req: services.spotlights.reward(pid, req.view_id),
        )

    @get(
        "/accounts/{pid:str}/activity",
        dependencies={"params": Provide(activity_query)},
        responses=errors(*_ACCOUNT, ErrorKind.INVALID_VALUE),
    )
    async def activity(
        self, services: Services, pid: str, params: Query, environment: Environment = None
    ) -> Response[Any]:
        """The account's settled requests (``GET /v1/activity``), in ``environment``
        (live unless told)."""
        await services.accounts.require_account(pid)
        return await activity_answer(services, pid, parse_environment(environment), params)

    @get(
        "/accounts/{pid:str}/activity/{activity_id:str}",
        responses=errors(*_ACCOUNT, ErrorKind.ACTIVITY_NOT_FOUND),
    )
    async def receipt(self, services: Services, pid: str, activity_id: str) -> OperatorReceipt:
        """One settled request of the account, live or test (``GET /v1/activity/{id}``),
        with the upstream that served it and what it cost (``upstream``: operators only)."""
        await services.accounts.require_account(pid)
        return await operator_receipt_answer(services, pid, activity_id)

    @get("/accounts/{pid:str}/webhooks", responses=errors(*_ACCOUNT))
    async def webhooks(self, services: Services, pid: str) -> WebhookList:
        """The account's webhooks (``GET /v1/webhooks``)."""
        await services.accounts.require_account(pid)
        return await services.webhooks.list(pid)

    @get(
        "/accounts/{pid:str}/webhooks/{webhook_id:str}/deliveries",
        responses=errors(*_ACCOUNT, ErrorKind.WEBHOOK_NOT_FOUND),
    )
    async def webhook_deliveries(
        self, services: Services, pid: str, webhook_id: str
    ) -> DeliveryList:
        """A webhook's recent deliveries (``GET /v1/webhooks/{id}/deliveries``)."""
        await services.accounts.require_account(pid)
        return await services.webhooks.deliveries(pid, webhook_id)

    @get(
        "/audit",
        dependencies={"params": Provide(audit_query)},
        responses=errors(*ADMIN_ERRORS, ErrorKind.INVALID_VALUE),
    )
    async def audit(self, services: Services, params: Query) -> AuditPage:
        """The operators' actions on money, keys and accounts' status, newest first, a page
        at a time (``limit``, ``after``); ``account``: one account's."""
        return await audit_page(services.store, parse_audit_filter(params))

    @get(
        "/purchases",
        dependencies={"params": Provide(purchases_query)},
        responses=errors(*ADMIN_ERRORS, ErrorKind.INVALID_VALUE),
    )
    async def purchases(self, services: Services, params: Query) -> PurchaseList:
        """The purchases the stores confirmed, newest first, a page at a time (``limit``,
        ``after``); ``status=unmatched``: those paid and not granted, for an operator."""
        return await purchase_list(services.store, parse_purchase_filter(params))

    @get("/usage-lag", responses=errors(*ADMIN_ERRORS))
    async def usage_lag(self, services: Services) -> Lag:
        """Usage events not yet in the durable store, and the age of the oldest."""
        return await services.flusher.lag()
