# ruff: noqa: F811
# (the fixtures imported from test_http_routes are the tests' parameters)
"""An output limit above the alias's, through the Gateway on fakeredis and SQLite, on each
streaming API: served with the alias's limit (reserved as the client's own would be) and
said in ``svc-max-tokens-clamped``; a request within the limit has no such header."""

from __future__ import annotations

from typing import Any

import pytest

from app.accounts.bodies import KeyCreateRequest
from app.completion.request import CLAMPED_HEADER
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
HI = [{"role": "user", "content": "hi"}]
# each API's request, given its output limit
BODIES = {
    "/v1/chat/completions": lambda n: {"model": "svc-fast", "messages": HI, "max_tokens": n},
    "/v1/responses": lambda n: {"model": "svc-fast", "input": "hi", "max_output_tokens": n},
    "/v1/messages": lambda n: {"model": "svc-fast", "messages": HI, "max_tokens": n},
}


def _recording_reserve(svc: Svc, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The output bounds of each reserve the completions make."""
    holds = svc.services.completions.holds
    reserve = holds.reserve
    seen: list[dict[str, Any]] = []

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        seen.append({"max_out": kwargs["max_out"], "min_out": kwargs["min_out"]})
        return await reserve(*args, **kwargs)

    monkeypatch.setattr(holds, "reserve", recorded)
    return seen


@pytest.mark.parametrize("path", list(BODIES))
async def test_an_output_limit_above_the_alias_is_served_at_it_and_said(
    svc: Svc, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = svc.services.aliases["svc-fast"].max_output_tokens
    reserves = _recording_reserve(svc, monkeypatch)
    headers = {"authorization": f"Bearer {svc.account.live_key}"}
    async with svc.client() as client:
        clamped = await client.post(path, json=BODIES[path](999_999), headers=headers)
        within = await client.post(path, json=BODIES[path](limit), headers=headers)
    assert clamped.status_code == 200, clamped.text
    assert clamped.headers[CLAMPED_HEADER] == str(limit)
    assert within.status_code == 200, within.text
    assert CLAMPED_HEADER not in within.headers
    # held as a client's own limit is: all of it or nothing (never lowered by the balance)
    assert reserves == [{"max_out": limit, "min_out": limit}] * 2


@pytest.mark.parametrize("path", list(BODIES))
async def test_a_lowered_limit_the_balance_cannot_hold_is_a_402_as_the_clients_own_is(
    svc: Svc, path: str
) -> None:
    """100 credits cannot hold svc-fast's 16,384 output tokens (about 246 credits): the
    lowered limit is refused whole, as an explicit one is, not lowered further."""
    accounts = svc.services.accounts
    pid = await accounts.create_account()
    await accounts.grant_purchased(pid, 100, source="test")
    created = await svc.services.api_keys.create_key(
        pid, KeyCreateRequest(name="poor", environment="live", daily_cap_credits=None)
    )
    headers = {"authorization": f"Bearer {created.key}"}
    async with svc.client() as client:
        refused = await client.post(path, json=BODIES[path](999_999), headers=headers)
    assert refused.status_code == 402, refused.text
    assert CLAMPED_HEADER not in refused.headers
    assert (await accounts.balance(pid)).total_available == 100
