"""Hostile requests on every kind of route: each answer is the documented status with an
OpenAI-shaped body, the security headers, and no traceback, module, exception class,
backend or SQL text; nothing is charged."""

from __future__ import annotations

import httpx
import pytest

from app.http.headers import SECURITY_HEADERS
from tests.e2e.conftest import Server
from tests.e2e.leaks import INTERNALS

pytestmark = pytest.mark.e2e

MSG = [{"role": "user", "content": "hi"}]
HUGE = "1" + "0" * 40  # beyond any 64-bit integer
BIG = b"{" + b" " * 1_100_000 + b"}"  # valid JSON, over the 1 MiB body limit

# (method, path, auth: "key" | "admin" | None, body, content type, status, code)
Case = tuple[str, str, str | None, bytes | None, str | None, int, str]
CASES: list[Case] = [
    ("POST", "/v1/chat/completions", "key", b'{"model": "svc-fast", "messages": [', None, 400,
     "invalid_value"),
    ("POST", "/v1/chat/completions", "key",
     # beyond any 64-bit integer, below 1 (one above the alias's limit is lowered to it)
     b'{"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": -'
     + HUGE.encode() + b"}", None, 400, "invalid_value"),
    ("POST", "/v1/chat/completions", "key",
     b'{"model": "svc-fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e999}',
     None, 400, "invalid_value"),
    ("POST", "/v1/chat/completions", "key", '{"model": "svc-\u00e9\U0001f600", "messages": []}'
     .encode(), None, 404, "model_not_found"),
    ("POST", "/v1/chat/completions", "key", b'{"model": "\\ud800", "messages": []}', None, 400,
     "invalid_value"),
    ("POST", "/v1/chat/completions", "key", b"model=svc-fast", "application/x-www-form-urlencoded",
     400, "invalid_value"),
    ("POST", "/v1/chat/completions", "key", b"\xff\xfe\x00", "text/plain", 400, "invalid_value"),
    ("POST", "/v1/chat/completions", "key", BIG, None, 413, "request_too_large"),
    ("PUT", "/v1/chat/completions", "key", None, None, 405, "method_not_allowed"),
    ("GET", f"/v1/usage?days={HUGE}", "key", None, None, 400, "invalid_value"),
    ("GET", "/v1/usage?days=%F0%9F%98%80", "key", None, None, 400, "invalid_value"),
    ("POST", "/v1/api-keys", "key", b"[1, 2", None, 400, "invalid_value"),
    ("POST", "/v1/api-keys", "key",
     b'{"name": "k", "environment": "live", "daily_cap_credits": ' + HUGE.encode() + b"}", None,
     400, "invalid_value"),
    ("POST", "/v1/api-keys", "key", b"name=k", "application/x-www-form-urlencoded", 400,
     "invalid_value"),
    ("POST", "/v1/api-keys", "key", BIG, None, 413, "request_too_large"),
    ("PATCH", "/v1/api-keys", "key", None, None, 405, "method_not_allowed"),
    ("PUT", "/v1/models", "key", None, None, 405, "method_not_allowed"),
    ("DELETE", "/healthz", None, None, None, 405, "method_not_allowed"),
    ("GET", "/v1/no-such-route", "key", None, None, 404, "not_found"),
    ("GET", "/v1/models", None, None, None, 401, "invalid_api_key"),
    ("POST", "/admin/v1/accounts/acct_x/grants", "admin", b'{"credits": ' + HUGE.encode() + b"}",
     None, 400, "invalid_value"),
    ("POST", "/admin/v1/accounts/acct_x/grants", "admin", b'{"credits": "lots"}', None, 400,
     "invalid_value"),
    ("POST", "/admin/v1/accounts/acct_x/grants", "admin", BIG, None, 413, "request_too_large"),
    ("POST", "/admin/v1/accounts/acct_x/spotlights", "admin", b"\x00\x01", None, 400,
     "invalid_value"),
    ("GET", "/admin/v1/accounts/%00%27%3B--/credits", "admin", None, None, 404,
     "account_not_found"),
    ("PATCH", "/admin/v1/usage-lag", "admin", None, None, 405, "method_not_allowed"),
    ("GET", "/admin/v1/usage-lag", None, None, None, 401, "invalid_admin_token"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "auth", "body", "content_type", "status", "code"),
    CASES,
    ids=[f"{c[0]} {c[1][:40]} {c[6]}" for c in CASES],
)
def test_hostile_request_gets_a_clean_error(
    server: Server,
    method: str,
    path: str,
    auth: str | None,
    body: bytes | None,
    content_type: str | None,
    status: int,
    code: str,
) -> None:
    pid = server.new_account(1_000)
    tokens = {"key": server.new_key(pid, role="admin"), "admin": server.admin_token}
    headers = {"content-type": content_type or "application/json"}
    if auth is not None:
        headers["authorization"] = f"Bearer {tokens[auth]}"
    r = httpx.request(method, server.root_url + path, content=body, headers=headers, timeout=30)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert INTERNALS.search(r.text) is None, r.text
    for name, value in SECURITY_HEADERS:
        assert r.headers[name] == value
    assert server.balance(pid) == 1_000


def test_the_document_is_served_with_security_headers(server: Server) -> None:
    for path in ("/schema", "/schema/openapi.json"):
        r = httpx.get(server.root_url + path)
        assert r.status_code == 200
        assert r.json()["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
        for name, value in SECURITY_HEADERS:
            assert r.headers[name] == value
