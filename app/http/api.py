"""``/v1`` routes other than chat completions."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, get
from litestar.di import Provide

from app.accounts import CreditBalance, credit_balance
from app.http.deps import provide_identity, provide_services
from app.ledger import Identity, key_refusal
from app.runtime import Services


class ModelItem(msgspec.Struct):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(msgspec.Struct):
    object: str
    data: list[ModelItem]


class V1Controller(Controller):
    path = "/v1"
    dependencies = {"services": Provide(provide_services)}

    @get("/models", dependencies={"ident": Provide(provide_identity)})
    async def models(self, services: Services, ident: Identity) -> ModelList:
        """The enabled model aliases (spec 2.1, 4.2)."""
        items = [
            ModelItem(id=a.id, object="model", created=a.created, owned_by="svc")
            for a in services.aliases.values()
            if a.enabled
        ]
        return ModelList(object="list", data=items)

    @get("/credits")
    async def credits(self, services: Services, request: Request[Any, Any, Any]) -> CreditBalance:
        """The account's credit pools (spec 2.5); one script call checks the key too."""
        ident = await services.auth.identify(request.headers.get("authorization"))
        status, balance = await services.ledger.balance(ident, services.clock())
        refusal = key_refusal(status)
        if refusal is not None:
            raise refusal
        return credit_balance(balance)
