"""The app account token (issue 47 item 1): a UUID per account, stable, revealing nothing,
served to the account's live keys only, and the way back from a token to its account."""

from __future__ import annotations

import uuid

import pytest

from app.core.errors import ApiError, ErrorKind
from app.purchases.account_token import AccountTokens, canonical, same_token, token_of
from app.store import Store
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401 (fixtures)

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
KEY = b"k" * 32


def test_a_token_is_a_uuid_of_its_own_version_stable_and_per_account() -> None:
    one = token_of(KEY, "p1")
    assert one == token_of(KEY, "p1")
    assert one != token_of(KEY, "p2")
    assert one != token_of(b"o" * 32, "p1")  # another pepper, another token
    parsed = uuid.UUID(one)
    assert (parsed.version, parsed.variant) == (8, uuid.RFC_4122)
    assert "p1" not in one


def test_tokens_compare_as_uuids() -> None:
    one = token_of(KEY, "p1")
    assert same_token(one.upper(), one)
    assert not same_token(token_of(KEY, "p2"), one)
    assert not same_token("not-a-uuid", one)
    assert canonical(one.upper()) == one
    assert canonical("nope") is None


async def test_a_served_token_leads_back_to_its_account(store: Store) -> None:
    tokens = AccountTokens(store, b"pepper", lambda: 1_000.0)
    served = await tokens.issue("p1")
    assert await tokens.account_of(served.app_account_token.upper()) == "p1"
    assert await tokens.account_of(tokens.of("p2")) is None  # never served: unknown
    assert await tokens.account_of("garbage") is None
    assert await tokens.account_of(None) is None
    tokens.check("p1", served.app_account_token, "appAccountToken")
    with pytest.raises(ApiError) as refused:
        tokens.check("p2", served.app_account_token, "appAccountToken")
    assert refused.value.kind is ErrorKind.ACCOUNT_TOKEN_MISMATCH
    with pytest.raises(ApiError):
        tokens.check("p1", None, "appAccountToken")


async def test_the_route_serves_the_live_keys_own_token(svc: Svc) -> None:  # noqa: F811
    async with svc.client() as client:
        assert (await client.get("/v1/purchases/account-token")).status_code == 401
        test_key = {"authorization": f"Bearer {svc.account.test_key}"}
        refused = await client.get("/v1/purchases/account-token", headers=test_key)
        assert (refused.status_code, refused.json()["error"]["code"]) == (
            403,
            "test_key_forbidden",
        )
        live = {"authorization": f"Bearer {svc.account.live_key}"}
        first = await client.get("/v1/purchases/account-token", headers=live)
        second = await client.get("/v1/purchases/account-token", headers=live)
    assert first.status_code == 200, first.text
    token = first.json()["app_account_token"]
    assert (
        second.json()
        == first.json()
        == {
            "app_account_token": token,
            "object": "app_account_token",
        }
    )
    assert svc.account.pid not in token
    assert await svc.services.store.account_of_token(token) == svc.account.pid
