"""Health endpoints and the security headers every response carries."""

from __future__ import annotations

import httpx
import pytest

from app.http.headers import SECURITY_HEADERS
from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e


def test_health_and_readiness(server: Server) -> None:
    assert httpx.get(f"{server.root_url}/healthz").json() == {"status": "ok", "checks": {}}
    ready = httpx.get(f"{server.root_url}/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ok",
        "checks": {"redis": True, "scripts": True, "store": True},
    }


def test_every_kind_of_response_carries_the_security_headers(server: Server) -> None:
    headers = {"authorization": f"Bearer {server.dev_key}"}
    responses = [
        httpx.get(f"{server.base_url}/models", headers=headers),  # Litestar JSON
        httpx.get(f"{server.base_url}/models"),  # Litestar error
        httpx.post(  # the raw SSE route
            f"{server.base_url}/chat/completions",
            json={"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}]},
            headers=headers,
        ),
        httpx.post(f"{server.base_url}/chat/completions", content=b"{", headers=headers),
        httpx.get(f"{server.root_url}/healthz"),
    ]
    assert [r.status_code for r in responses] == [200, 401, 200, 400, 200]
    for r in responses:
        for name, value in SECURITY_HEADERS:
            assert r.headers.get(name) == value, (r.request.url, name)
