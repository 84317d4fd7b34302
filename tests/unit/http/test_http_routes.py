"""The HTTP layer in process: the Gateway granian serves (the RSGI chat route, and the
Litestar app behind the ASGI adapter) driven through ``tests.support.rsgi_transport`` on fakeredis
and a SQLite store, without granian. Every route takes the path it takes in production.

The Gateway is an RSGI app, not a Litestar app, so Litestar's test client is not used, nor
the lifespan (it would open the Redis and database of the settings). The services are built
here instead and put where the lifespan would put them (``app.state.services``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fakeredis
import httpx
import pytest

from app.accounts.bodies import KeyCreateRequest
from app.core.metrics import METRICS
from app.core.settings import Settings
from app.http.app import create_app
from app.http.headers import SECURITY_HEADERS
from app.http.rsgi.gateway import Gateway
from app.keys.format import generate_key
from app.runtime import Services
from app.store import Store
from tests.support.rsgi_transport import RSGITransport

# create_app registers routes whose parameters use spellings Litestar 2.23+ deprecates
# (inferred dependencies and path parameters); `svc serve` is unaffected.
pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)

FAILED_AUTH_LIMIT = 3
CHAT = "/v1/chat/completions"
CHAT_BODY = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}
SSE_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}


@dataclass
class Account:
    pid: str
    live_key: str
    test_key: str
    spare_key_id: str  # another live key of the account (for DELETE /v1/api-keys/{id})


@dataclass
class Svc:
    """The Gateway on in-process services, and an account with credits."""

    gateway: Gateway
    services: Services
    account: Account

    def client(self, address: str = "203.0.113.10") -> httpx.AsyncClient:
        """A client whose requests come from ``address`` (the failed-auth throttle's key)."""
        transport = RSGITransport(self.gateway, client=(address, 50_000))
        return httpx.AsyncClient(transport=transport, base_url="http://svc.test")


@pytest.fixture
def models_file(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """No models file (the default aliases), or the text a test passes with
    ``@pytest.mark.parametrize("models_file", [text], indirect=True)`` written to one."""
    text: str | None = getattr(request, "param", None)
    if text is None:
        return None
    path = tmp_path / "models.toml"
    path.write_text(text)
    return str(path)


@pytest.fixture
async def svc(tmp_path: Path, store: Store, models_file: str | None) -> AsyncIterator[Svc]:
    settings = Settings(
        data_dir=str(tmp_path),
        models_file=models_file,
        redis_url="redis://in-process.invalid",  # never dialled: fakeredis is passed in
        database_url=f"sqlite:///{tmp_path / 'svc.db'}",  # the `store` fixture's file
        key_pepper="test-pepper",
        admin_token="test-admin-token",
        failed_auth_limit=FAILED_AUTH_LIMIT,
        failed_auth_window_s=600,
    )
    services = Services(settings, fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()), store)
    app = create_app(settings)
    app.state.services = services  # what the lifespan does; it is not run here
    accounts, keys = services.accounts, services.api_keys
    pid = await accounts.create_account()
    await accounts.grant_purchased(pid, 100_000, source="test")
    live = await keys.create_key(  # manages the account's keys: asks for admin
        pid,
        KeyCreateRequest(name="live", environment="live", daily_cap_credits=None, role="admin"),
    )
    test = await keys.create_key(
        pid, KeyCreateRequest(name="test", environment="test", daily_cap_credits=None)
    )
    spare = await keys.create_key(
        pid, KeyCreateRequest(name="spare", environment="live", daily_cap_credits=None)
    )
    try:
        yield Svc(Gateway(app), services, Account(pid, live.key, test.key, spare.id))
    finally:
        await services.close()


# Every route that takes an API key: method, path, JSON body, status with a valid live key.
KEY_ROUTES = [
    ("GET", "/v1/models", None, 200),
    ("GET", "/v1/models/svc-fast", None, 200),
    ("GET", "/v1/pricing", None, 200),
    ("GET", "/v1/credits", None, 200),
    ("GET", "/v1/usage", None, 200),
    ("GET", "/v1/api-keys", None, 200),
    (
        "POST",
        "/v1/api-keys",
        {"name": "new", "environment": "live", "daily_cap_credits": None},
        201,
    ),
    ("DELETE", "/v1/api-keys/{spare}", None, 200),
    ("POST", CHAT, CHAT_BODY, 200),
]
ROUTE_IDS = [f"{method} {path}" for method, path, _, _ in KEY_ROUTES]


async def call(
    client: httpx.AsyncClient,
    method: str,
    path: str,
    key: str | None,
    body: Any = None,
    svc: Svc | None = None,
) -> httpx.Response:
    if svc is not None:
        path = path.format(spare=svc.account.spare_key_id)
    headers = {} if key is None else {"authorization": f"Bearer {key}"}
    return await client.request(method, path, json=body, headers=headers)


def assert_error(response: httpx.Response, status: int, type_: str, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert (error["type"], error["code"]) == (type_, code), error
    assert set(error) == {"message", "type", "param", "code"}


def assert_common_headers(response: httpx.Response) -> None:
    """One request id, and the security headers every response carries."""
    [request_id] = response.headers.get_list("x-request-id")
    assert request_id.startswith("req_")
    for name, value in SECURITY_HEADERS:
        assert response.headers[name] == value


def requests_answered() -> float:
    """Σ ``svc_requests_total`` over every label set (this process's metrics)."""
    assert METRICS.registry is not None, "unit tests run without a shared metrics directory"
    return sum(
        sample.value
        for family in METRICS.registry.collect()
        for sample in family.samples
        if sample.name == "svc_requests_total"
    )


def sse_events(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]


# -- authentication, the same on every route -------------------------------------------


@pytest.mark.parametrize(("method", "path", "body", "_ok"), KEY_ROUTES, ids=ROUTE_IDS)
@pytest.mark.parametrize(
    "key", [None, "not-a-key", generate_key("live")], ids=["missing", "malformed", "unknown"]
)
async def test_a_bad_key_is_401_on_every_route(
    svc: Svc, method: str, path: str, body: Any, _ok: int, key: str | None
) -> None:
    async with svc.client() as client:
        response = await call(client, method, path, key, body, svc)
    assert_error(response, 401, "authentication_error", "invalid_api_key")
    assert_common_headers(response)


@pytest.mark.parametrize(("method", "path", "body", "ok"), KEY_ROUTES, ids=ROUTE_IDS)
async def test_a_valid_key_is_served_on_every_route(
    svc: Svc, method: str, path: str, body: Any, ok: int
) -> None:
    async with svc.client() as client:
        response = await call(client, method, path, svc.account.live_key, body, svc)
    assert response.status_code == ok, response.text
    assert_common_headers(response)


@pytest.mark.parametrize(("method", "path", "body", "ok"), KEY_ROUTES, ids=ROUTE_IDS)
async def test_a_key_record_redis_lost_is_restored_from_the_store_on_every_route(
    svc: Svc, method: str, path: str, body: Any, ok: int
) -> None:
    async with svc.client() as client:
        warm = await client.get(
            "/v1/models", headers={"authorization": f"Bearer {svc.account.live_key}"}
        )
        assert warm.status_code == 200  # the worker now caches the key's identity
        ident = await svc.services.auth.identify(f"Bearer {svc.account.live_key}")
        await svc.services.redis.delete(svc.services.layout.api_key(ident.shard, ident.kid))
        response = await call(client, method, path, svc.account.live_key, body, svc)
    assert response.status_code == ok, response.text
    assert svc.services.auth.cold_verifications == 1


@pytest.mark.parametrize(("method", "path", "body", "_ok"), KEY_ROUTES, ids=ROUTE_IDS)
async def test_failed_keys_are_counted_on_every_route_and_then_refused_with_429(
    svc: Svc, method: str, path: str, body: Any, _ok: int
) -> None:
    unknown = generate_key("live")
    async with svc.client("198.51.100.7") as client:
        for _ in range(FAILED_AUTH_LIMIT):
            response = await call(client, method, path, unknown, body, svc)
            assert_error(response, 401, "authentication_error", "invalid_api_key")
        # over the limit the address's wrong keys are refused with 429 ...
        response = await call(client, method, path, unknown, body, svc)
        assert_error(response, 429, "rate_limit_error", "auth_rate_limited")
        assert 0 < int(response.headers["retry-after"]) <= 600
        assert response.headers["x-should-retry"] == "false"
        assert_common_headers(response)
        # ... and its valid keys are served (a NAT neighbour's failures lock nobody out)
        response = await call(client, method, path, svc.account.live_key, body, svc)
        assert response.status_code != 429, response.text
    async with svc.client("198.51.100.8") as other:
        response = await call(other, method, path, svc.account.live_key, body, svc)
    assert response.status_code != 429  # other addresses are not affected


async def test_a_revoked_key_is_401_api_key_revoked(svc: Svc) -> None:
    async with svc.client() as client:
        spare = await svc.services.api_keys.create_key(
            svc.account.pid,
            KeyCreateRequest(name="gone", environment="live", daily_cap_credits=None),
        )
        revoke = await call(client, "DELETE", f"/v1/api-keys/{spare.id}", svc.account.live_key)
        assert revoke.status_code == 200, revoke.text
        for method, path, body, _ in KEY_ROUTES:
            response = await call(client, method, path, spare.key, body, svc)
            assert_error(response, 401, "authentication_error", "api_key_revoked")


# -- models -----------------------------------------------------------------------------

ALIASES = ["svc-auto", "svc-fast", "svc-code", "svc-smart"]
CREATED = 1_767_225_600  # the default aliases' `created`
# svc-code switched off and svc-smart's `created` moved, by the operator's models file
CODE_DISABLED = "[aliases.svc-code]\nenabled = false\n\n[aliases.svc-smart]\ncreated = 123\n"


@pytest.mark.parametrize("alias", ALIASES)
async def test_a_model_is_the_object_the_list_shows(svc: Svc, alias: str) -> None:
    async with svc.client() as client:
        listed = await call(client, "GET", "/v1/models", svc.account.live_key)
        response = await call(client, "GET", f"/v1/models/{alias}", svc.account.test_key)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert_common_headers(response)
    expected = {"id": alias, "object": "model", "created": CREATED, "owned_by": "svc"}
    assert response.json() == expected
    assert [m for m in listed.json()["data"] if m["id"] == alias] == [expected]


@pytest.mark.parametrize("model", ["nope", "gpt-4o", "SVC-FAST", "svc-fast "])
async def test_an_unknown_model_id_is_404_model_not_found(svc: Svc, model: str) -> None:
    async with svc.client() as client:
        response = await call(client, "GET", f"/v1/models/{model}", svc.account.live_key)
    assert_error(response, 404, "invalid_request_error", "model_not_found")
    assert_common_headers(response)
    error = response.json()["error"]
    assert error["param"] == "model"
    assert error["message"] == (
        f"The model '{model}' does not exist. Use one of: svc-auto, svc-fast, svc-code, svc-smart."
    )


@pytest.mark.parametrize("models_file", [CODE_DISABLED], indirect=True)
async def test_a_disabled_model_is_404_and_the_others_follow_the_models_file(
    svc: Svc,
) -> None:
    key = svc.account.live_key
    async with svc.client() as client:
        disabled = await call(client, "GET", "/v1/models/svc-code", key)
        smart = await call(client, "GET", "/v1/models/svc-smart", key)
        listed = await call(client, "GET", "/v1/models", key)
    assert_error(disabled, 404, "invalid_request_error", "model_not_found")
    assert disabled.json()["error"]["message"] == (
        "The model 'svc-code' does not exist. Use one of: svc-auto, svc-fast, svc-smart."
    )
    assert smart.json() == {"id": "svc-smart", "object": "model", "created": 123, "owned_by": "svc"}
    assert [m["id"] for m in listed.json()["data"]] == ["svc-auto", "svc-fast", "svc-smart"]


async def test_a_bad_key_is_refused_before_the_model_id_is_judged(svc: Svc) -> None:
    async with svc.client() as client:
        response = await call(client, "GET", "/v1/models/nope", "not-a-key")
    assert_error(response, 401, "authentication_error", "invalid_api_key")


# -- chat completions -------------------------------------------------------------------


async def test_a_test_key_streams_from_the_simulated_upstream_and_deducts_nothing(
    svc: Svc,
) -> None:
    async with svc.client() as client:
        response = await call(client, "POST", CHAT, svc.account.test_key, CHAT_BODY)
        credits = await call(client, "GET", "/v1/credits", svc.account.live_key)
    assert response.status_code == 200, response.text
    for name, value in SSE_HEADERS.items():
        assert response.headers[name] == value
    assert_common_headers(response)
    events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert {chunk["model"] for chunk in chunks} == {"svc-fast"}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert credits.json()["total_available"] == 100_000


async def test_an_unknown_model_is_404_model_not_found(svc: Svc) -> None:
    async with svc.client() as client:
        body = {**CHAT_BODY, "model": "gpt-4o"}
        response = await call(client, "POST", CHAT, svc.account.live_key, body)
    assert_error(response, 404, "invalid_request_error", "model_not_found")
    assert response.json()["error"]["param"] == "model"
    assert_common_headers(response)


async def test_a_body_that_is_not_json_is_400_invalid_value(svc: Svc) -> None:
    async with svc.client() as client:
        response = await client.post(
            CHAT,
            content=b'{"model": "svc-fast", "messages": [',
            headers={"authorization": f"Bearer {svc.account.live_key}"},
        )
    assert_error(response, 400, "invalid_request_error", "invalid_value")
    assert_common_headers(response)


async def test_a_bad_key_is_refused_before_the_body_is_judged(svc: Svc) -> None:
    async with svc.client() as client:
        response = await client.post(
            CHAT, content=b"{not json", headers={"authorization": "Bearer not-a-key"}
        )
    assert_error(response, 401, "authentication_error", "invalid_api_key")


async def test_a_body_over_the_limit_is_413(svc: Svc) -> None:
    limit = svc.services.settings.max_body_bytes
    async with svc.client() as client:
        response = await client.post(
            CHAT,
            content=b" " * (limit + 1),
            headers={"authorization": f"Bearer {svc.account.live_key}"},
        )
    assert_error(response, 413, "invalid_request_error", "request_too_large")
    assert_common_headers(response)


async def test_a_streamed_body_over_the_limit_is_413_without_a_content_length(svc: Svc) -> None:
    limit = svc.services.settings.max_body_bytes
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        while sent <= 4 * limit:
            sent += 65_536
            yield b" " * 65_536

    async with svc.client() as client:
        response = await client.post(
            CHAT, content=body(), headers={"authorization": f"Bearer {svc.account.live_key}"}
        )
    assert_error(response, 413, "invalid_request_error", "request_too_large")
    assert_common_headers(response)
    assert sent <= limit + 65_536  # read no further than the limit


async def test_not_enough_credits_is_402_and_tells_sdks_not_to_retry(svc: Svc) -> None:
    accounts = svc.services.accounts
    pid = await accounts.create_account()  # no credits
    poor = await svc.services.api_keys.create_key(
        pid, KeyCreateRequest(name="poor", environment="live", daily_cap_credits=None)
    )
    async with svc.client() as client:
        response = await call(client, "POST", CHAT, poor.key, CHAT_BODY)
    assert_error(response, 402, "insufficient_credits", "insufficient_credits")
    assert response.headers["x-should-retry"] == "false"
    assert_common_headers(response)


async def test_the_client_request_id_is_echoed_once(svc: Svc) -> None:
    async with svc.client() as client:
        response = await client.post(
            CHAT,
            json=CHAT_BODY,
            headers={"authorization": f"Bearer {svc.account.test_key}", "x-request-id": "abc-1"},
        )
    assert response.status_code == 200, response.text
    assert response.headers.get_list("x-request-id") == ["abc-1"]


@pytest.mark.parametrize(("key", "status"), [("bad", 401), ("test", 200)])
async def test_the_trailing_slash_reaches_the_one_chat_handler(
    svc: Svc, key: str, status: int
) -> None:
    secret = svc.account.test_key if key == "test" else "not-a-key"
    before = requests_answered()
    async with svc.client() as client:
        response = await call(client, "POST", CHAT + "/", secret, CHAT_BODY)
    assert response.status_code == status, response.text
    assert_common_headers(response)  # one x-request-id
    assert requests_answered() == before + 1
    if status == 200:
        assert sse_events(response)[-1] == "[DONE]"


async def test_chat_refuses_other_methods_with_405(svc: Svc) -> None:
    async with svc.client() as client:
        response = await call(client, "GET", CHAT, svc.account.live_key)
    assert_error(response, 405, "invalid_request_error", "method_not_allowed")
    assert_common_headers(response)


# -- pricing ----------------------------------------------------------------------------


def _docs_price_table() -> list[dict[str, Any]]:
    """docs/api.md's table of the default aliases' prices, as GET /v1/pricing's rows."""
    text = (Path(__file__).parents[3] / "docs" / "api.md").read_text()
    start = text.index(
        "| Alias | Input | Cached input | Cache write | Output | Max output tokens |"
    )
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        prices = [None if c == "—" else int(c) for c in cells[1:5]]
        rows.append(
            {
                "model": cells[0],
                **dict(
                    zip(("input", "cached_input", "cache_write", "output"), prices, strict=True)
                ),
                "max_output_tokens": int(cells[5]),
            }
        )
    return rows


async def test_pricing_answers_the_docs_table_for_the_default_aliases(svc: Svc) -> None:
    async with svc.client() as client:
        response = await call(client, "GET", "/v1/pricing", svc.account.test_key)
        models = await call(client, "GET", "/v1/models", svc.account.live_key)
    assert response.status_code == 200, response.text
    assert_common_headers(response)
    answer = response.json()
    assert answer["unit"] == "credits per 1,000 tokens"
    assert answer["formula"].startswith("max(1, ceil((uncached_prompt_tokens * input")
    assert "rounded up" in answer["rounding"]
    rows = [{k: v for k, v in item.items() if k != "routes_to"} for item in answer["data"]]
    assert rows == _docs_price_table()
    assert [i["model"] for i in answer["data"]] == [m["id"] for m in models.json()["data"]]
    assert answer["data"][0]["routes_to"] == ["svc-fast", "svc-code", "svc-smart"]
    assert all(i["routes_to"] is None for i in answer["data"][1:])


@pytest.mark.parametrize(
    "models_file",
    [CODE_DISABLED + "\n[aliases.svc-fast]\ninput_price = 8\ncache_write_price = 12\n"],
    indirect=True,
)
async def test_pricing_follows_the_models_file(svc: Svc) -> None:
    async with svc.client() as client:
        response = await call(client, "GET", "/v1/pricing", svc.account.live_key)
    data = {i["model"]: i for i in response.json()["data"]}
    assert sorted(data) == ["svc-auto", "svc-fast", "svc-smart"]  # svc-code is off
    fast = data["svc-fast"]
    assert (fast["input"], fast["cached_input"], fast["cache_write"], fast["output"]) == (
        8,
        2,
        12,
        15,
    )
    assert data["svc-auto"]["routes_to"] == ["svc-fast", "svc-smart"]
