"""The query parameters of the lists and reports (``app.http.queries``): Litestar documents
them from the declarations the handlers get them from, and what the document states of each
(an integer's range, a set of values) is what the rule's owner accepts. Each documented
bound and value is taken by the route; one past a bound, or a value not listed, is the 400
``invalid_value`` naming the parameter, as the rule's owner answers it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.core.settings import Settings
from app.http.app import create_app
from tests.unit.http.test_http_routes import Svc, assert_error, models_file, svc

__all__ = ["models_file", "svc"]  # the fixtures this module borrows

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
ADMIN = "test-admin-token"
# Every route whose query a rule checks, and the query its parameters are tried with (the
# overview's ``days`` counts with ``sort`` only).
ROUTES = {
    "/v1/credits/ledger": {},
    "/v1/usage": {},
    "/v1/activity": {},
    "/v1/spotlights/rewards": {},
    "/admin/v1/accounts": {"sort": "spend"},
    "/admin/v1/accounts/{pid}/ledger": {},
    "/admin/v1/accounts/{pid}/activity": {},
    "/admin/v1/audit": {},
    "/admin/v1/purchases": {},
    "/admin/v1/books": {},
}


@pytest.fixture(scope="module")
def documented() -> dict[str, list[dict[str, Any]]]:
    """Each route's query parameters, as Litestar documents them."""
    document = create_app(Settings()).openapi_schema.to_schema()
    return {
        path: [p for p in document["paths"][path]["get"]["parameters"] if p["in"] == "query"]
        for path in ROUTES
    }


def _tries(schema: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Values the schema allows, and values next to them it does not."""
    if schema["type"] == "integer":
        low, high = schema["minimum"], schema["maximum"]
        return [str(low), str(high)], [str(low - 1), str(high + 1), "ten"]
    if "enum" in schema:
        return list(schema["enum"]), ["none-of-these"]
    return [], []


def test_every_route_documents_its_checked_parameters(
    documented: dict[str, list[dict[str, Any]]],
) -> None:
    for path, parameters in documented.items():
        assert any(_tries(p["schema"])[1] for p in parameters), path
        assert all(not p["required"] and p["description"] for p in parameters), path


@pytest.mark.parametrize("path", list(ROUTES))
async def test_the_documented_values_are_the_ones_the_route_takes(
    svc: Svc, documented: dict[str, list[dict[str, Any]]], path: str
) -> None:
    url = path.format(pid=svc.account.pid)
    key = ADMIN if path.startswith("/admin") else svc.account.live_key
    async with svc.client() as client:
        for parameter in documented[path]:
            name = parameter["name"]
            allowed, refused = _tries(parameter["schema"])
            for value in allowed:
                answer = await _get(client, url, key, {**ROUTES[path], name: value})
                assert answer.status_code == 200, (name, value, answer.text)
            for value in refused:
                answer = await _get(client, url, key, {**ROUTES[path], name: value})
                assert_error(answer, 400, "invalid_request_error", "invalid_value")
                assert answer.json()["error"]["param"] == name, (value, answer.text)


async def _get(
    client: httpx.AsyncClient, url: str, key: str, params: dict[str, str]
) -> httpx.Response:
    return await client.get(url, params=params, headers={"authorization": f"Bearer {key}"})
