# ruff: noqa: F811
# (the fixtures imported from test_http_routes are the tests' parameters)
"""``POST /v1/messages/count_tokens`` as the Litestar route the Messages dialect declares
(``MESSAGES.beside``), through the Gateway: every answer in Anthropic's shape with its
``request-id``, the refusals Litestar would answer before a route (another method, a body
too large) included, and the metrics the streams keep."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.accounts.bodies import KeyCreateRequest
from app.apis.messages import COUNT_TOKENS_PATH as COUNT
from app.core.metrics import METRICS
from app.http.headers import SECURITY_HEADERS
from tests.unit.http.test_http_routes import Svc, models_file, svc  # noqa: F401

pytestmark = pytest.mark.filterwarnings(
    "ignore::litestar.exceptions.base_exceptions.LitestarDeprecationWarning"
)
BODY = {"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]}


def _sample(name: str, **labels: str) -> float:
    assert METRICS.registry is not None, "unit tests run without a shared metrics directory"
    return METRICS.registry.get_sample_value(name, labels) or 0.0


def _anthropic_error(r: httpx.Response, status: int, error_type: str, says: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    answer = r.json()
    assert answer["type"] == "error"
    assert answer["error"]["type"] == error_type
    assert says in answer["error"]["message"]
    [rid] = r.headers.get_list("x-request-id")
    assert answer["request_id"] == r.headers["request-id"] == rid
    for name, value in SECURITY_HEADERS:
        assert r.headers[name] == value


async def test_a_count_carries_its_request_id_where_anthropics_sdks_read_it(svc: Svc) -> None:
    headers = {"x-api-key": svc.account.live_key, "x-request-id": "client-7"}
    before = _sample("svc_requests_total", route=COUNT, status="200", model="")
    async with svc.client() as client:
        r = await client.post(COUNT, json=BODY, headers=headers)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["request-id"] == r.headers["x-request-id"] == "client-7"
    for name, value in SECURITY_HEADERS:
        assert r.headers[name] == value
    assert _sample("svc_requests_total", route=COUNT, status="200", model="") == before + 1


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"])
async def test_another_method_is_405_in_anthropics_shape(svc: Svc, method: str) -> None:
    async with svc.client() as client:
        r = await client.request(method, COUNT, headers={"x-api-key": svc.account.live_key})
    _anthropic_error(r, 405, "invalid_request_error", "Use POST")


async def test_a_body_over_the_limit_is_413_in_anthropics_shape_and_not_counted(
    svc: Svc,
) -> None:
    limited = await svc.services.api_keys.create_key(
        svc.account.pid,
        KeyCreateRequest(name="one", environment="live", daily_cap_credits=None, rate_limit_rpm=1),
    )
    key = {"x-api-key": limited.key}
    limit = svc.services.settings.max_body_bytes
    sent = 0

    async def streamed() -> AsyncIterator[bytes]:
        nonlocal sent
        while sent <= 4 * limit:
            sent += 65_536
            yield b" " * 65_536

    refused = _sample("svc_rejections_total", code="request_too_large")
    async with svc.client() as client:
        declared = await client.post(COUNT, content=b" " * (limit + 1), headers=key)
        _anthropic_error(declared, 413, "request_too_large", f"larger than {limit} bytes")
        chunked = await client.post(COUNT, content=streamed(), headers=key)
        _anthropic_error(chunked, 413, "request_too_large", f"larger than {limit} bytes")
        assert sent <= limit + 65_536  # read no further than the limit
        # neither was one of the key's one request a minute
        assert (await client.post(COUNT, json=BODY, headers=key)).status_code == 200
    assert _sample("svc_rejections_total", code="request_too_large") == refused + 2


async def test_the_path_with_a_trailing_slash_counts_too(svc: Svc) -> None:
    """As every Litestar route and the streams are served with or without one."""
    async with svc.client() as client:
        r = await client.post(COUNT + "/", json=BODY, headers={"x-api-key": svc.account.live_key})
    assert r.status_code == 200
    assert set(r.json()) == {"input_tokens"}
