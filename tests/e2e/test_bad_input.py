"""Bad input: the documented status and OpenAI error body, and no credit moved."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e

MSG = [{"role": "user", "content": "hi"}]


def _error(r: httpx.Response) -> dict[str, object]:
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    return dict(body["error"])


@pytest.fixture
def account(server: Server) -> tuple[str, str]:
    pid = server.new_account(50_000)
    # admin: the bad bodies include the key and webhook routes
    return pid, server.new_key(pid, role="admin")


@pytest.mark.parametrize(
    ("auth", "code"),
    [
        (None, "invalid_api_key"),
        ("Bearer", "invalid_api_key"),
        ("Basic abc", "invalid_api_key"),
        ("Bearer sk-not-a-svc-key", "invalid_api_key"),
        ("Bearer svc_live_" + "A" * 50, "invalid_api_key"),  # bad checksum
    ],
)
def test_missing_or_garbled_key(server: Server, auth: str | None, code: str) -> None:
    headers = {"authorization": auth} if auth is not None else {}
    for method, path, body in [
        ("POST", "/chat/completions", {"model": "svc-fast", "messages": MSG}),
        ("GET", "/models", None),
        ("GET", "/credits", None),
    ]:
        r = httpx.request(method, server.base_url + path, json=body, headers=headers)
        assert r.status_code == 401
        err = _error(r)
        assert (err["type"], err["code"]) == ("authentication_error", code)


def test_unknown_well_formed_key(server: Server) -> None:
    from app.keys.format import generate_key

    r = httpx.get(
        server.base_url + "/models", headers={"authorization": f"Bearer {generate_key('live')}"}
    )
    assert r.status_code == 401
    assert _error(r)["code"] == "invalid_api_key"


DEEP = b"[" * 1000 + b"]" * 1000
BAD_BODIES: list[tuple[object, int, str | None, str]] = [
    (b"{not json", 400, None, "invalid_value"),
    ([], 400, "body", "invalid_value"),
    ({"messages": MSG}, 400, "model", "invalid_value"),
    ({"model": "svc-fast"}, 400, "messages", "invalid_value"),
    ({"model": "svc-fast", "messages": []}, 400, "messages", "invalid_value"),
    ({"model": "svc-fast", "messages": "hi"}, 400, "messages", "invalid_value"),
    ({"model": 7, "messages": MSG}, 400, "model", "invalid_value"),
    ({"model": "svc-fast", "messages": [{"content": "x"}]}, 400, "messages[0]", "invalid_value"),
    (
        {"model": "svc-fast", "messages": [{"role": "bot", "content": "x"}]},
        400,
        "messages[0].role",
        "invalid_value",
    ),
    (
        {"model": "svc-fast", "messages": [{"role": "user", "content": 5}]},
        400,
        "messages[0].content",
        "invalid_value",
    ),
    (
        {"model": "svc-fast", "messages": MSG, "temperature": 2.5},
        400,
        "temperature",
        "invalid_value",
    ),
    (
        {"model": "svc-fast", "messages": MSG, "temperature": -0.1},
        400,
        "temperature",
        "invalid_value",
    ),
    (
        {"model": "svc-fast", "messages": MSG, "temperature": "hot"},
        400,
        "temperature",
        "invalid_value",
    ),
    ({"model": "svc-fast", "messages": MSG, "top_p": 1.5}, 400, "top_p", "invalid_value"),
    ({"model": "svc-fast", "messages": MSG, "max_tokens": 0}, 400, "max_tokens", "invalid_value"),
    (
        {"model": "svc-fast", "messages": MSG, "max_completion_tokens": -1},
        400,
        "max_completion_tokens",
        "invalid_value",
    ),
    (
        {"model": "svc-fast", "messages": MSG, "max_tokens": 64, "max_completion_tokens": 0.5},
        400,
        "max_completion_tokens",
        "invalid_value",
    ),
    ({"model": "svc-fast", "messages": MSG, "max_tokens": 1.5}, 400, "max_tokens", "invalid_value"),
    ({"model": "svc-fast", "messages": MSG, "stream": "yes"}, 400, "stream", "invalid_value"),
    # strict types, as OpenAI's: a string is never a number or a boolean
    ({"model": "svc-fast", "messages": MSG, "max_tokens": "5"}, 400, "max_tokens", "invalid_value"),
    (
        {"model": "svc-fast", "messages": MSG, "temperature": "1"},
        400,
        "temperature",
        "invalid_value",
    ),
    ({"model": "svc-fast", "messages": MSG, "stream": "true"}, 400, "stream", "invalid_value"),
    # undecodable: invalid UTF-8 in a string, nesting past the decoder's depth limit (in a
    # field svc ignores, too)
    (
        b'{"model":"svc-fast","messages":[{"role":"user","content":"\xff\xfe"}]}',
        400,
        None,
        "invalid_value",
    ),
    (b'{"model":"svc-fast\xc3","messages":[]}', 400, None, "invalid_value"),
    (b'{"model":"svc-fast","messages":[],"metadata":%s}' % DEEP, 400, None, "invalid_value"),
    (b'{"model":"svc-fast","messages":%s}' % DEEP, 400, None, "invalid_value"),
    ({"model": "gpt-4o", "messages": MSG}, 404, "model", "model_not_found"),
]


@pytest.mark.parametrize(("body", "status", "param", "code"), BAD_BODIES)
def test_bad_body(
    server: Server,
    account: tuple[str, str],
    body: object,
    status: int,
    param: str | None,
    code: str,
) -> None:
    pid, key = account
    before = server.admin("GET", f"/accounts/{pid}/credits").json()
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
    r = httpx.post(server.base_url + "/chat/completions", content=content, headers=headers)
    assert r.status_code == status, r.text
    err = _error(r)
    assert err["code"] == code
    assert err["param"] == param
    assert err["type"] == "invalid_request_error"
    assert server.admin("GET", f"/accounts/{pid}/credits").json() == before


def test_oversized_body(server: Server, account: tuple[str, str]) -> None:
    pid, key = account
    before = server.balance(pid)
    big = "x" * (1_048_576 + 10)
    r = httpx.post(
        server.base_url + "/chat/completions",
        json={"model": "svc-fast", "messages": [{"role": "user", "content": big}]},
        headers={"authorization": f"Bearer {key}"},
    )
    assert r.status_code == 413
    assert _error(r)["code"] == "request_too_large"
    assert server.balance(pid) == before


def test_unaffordable_explicit_max_tokens_is_402(server: Server) -> None:
    pid = server.new_account(10)
    key = server.new_key(pid)
    r = httpx.post(
        server.base_url + "/chat/completions",
        json={"model": "svc-smart", "messages": MSG, "max_tokens": 1000},
        headers={"authorization": f"Bearer {key}"},
    )
    assert r.status_code == 402
    err = _error(r)
    assert (err["type"], err["code"]) == ("insufficient_credits", "insufficient_credits")
    assert r.headers["x-should-retry"] == "false"
    assert server.balance(pid) == 10


def test_wrong_method_and_unknown_path(server: Server, account: tuple[str, str]) -> None:
    _, key = account
    headers = {"authorization": f"Bearer {key}"}
    r = httpx.get(server.base_url + "/chat/completions", headers=headers)
    assert r.status_code == 405
    assert _error(r)["code"] == "method_not_allowed"
    r = httpx.get(server.base_url + "/nope", headers=headers)
    assert r.status_code == 404
    assert _error(r)["type"] == "not_found_error"


def test_admin_requires_token(server: Server) -> None:
    r = httpx.post(server.root_url + "/admin/v1/accounts")
    assert r.status_code == 401
    r = httpx.post(
        server.root_url + "/admin/v1/accounts", headers={"authorization": "Bearer wrong"}
    )
    assert r.status_code == 401
    assert _error(r)["code"] == "invalid_admin_token"


def test_a_whole_float_is_an_integer(server: Server, account: tuple[str, str]) -> None:
    """JSON Schema's ``integer`` includes 64.0 (schemathesis and computing clients send it)."""
    _, key = account
    r = httpx.post(
        server.base_url + "/chat/completions",
        json={"model": "svc-fast", "messages": MSG, "max_tokens": 4.0},
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.text.endswith("data: [DONE]\n\n")


KEY_BODY = b'{"name":"k","environment":"live","daily_cap_credits":%s}'
# (route, body, param) for every JSON route but chat completions (BAD_BODIES covers it)
OTHER_BAD_BODIES: list[tuple[str, bytes, str | None]] = [
    (route, body, param)
    for route in ("/v1/api-keys", "/admin/v1/accounts/{pid}/api-keys")
    for body, param in [
        (KEY_BODY % b'"5"', "daily_cap_credits"),
        (KEY_BODY % b"true", "daily_cap_credits"),
        (KEY_BODY % b"1.5", "daily_cap_credits"),
        (b'{"name":"\xff\xfe","environment":"live","daily_cap_credits":null}', None),
        (b'{"name":"k","environment":"live","daily_cap_credits":null,"x":%s}' % DEEP, None),
    ]
] + [
    ("/admin/v1/accounts/{pid}/grants", b'{"credits":"5"}', "credits"),
    ("/admin/v1/accounts/{pid}/grants", b'{"credits":5,"x":%s}' % DEEP, None),
    ("/admin/v1/accounts/{pid}/spotlights", b'{"view_id":"\xff\xfe"}', None),
    ("/admin/v1/accounts/{pid}/spotlights", b'{"view_id":5}', "view_id"),
    ("/admin/v1/accounts/{pid}/spotlights", b'{"view_id":"v","x":%s}' % DEEP, None),
]


@pytest.mark.parametrize(("route", "body", "param"), OTHER_BAD_BODIES)
def test_bad_body_on_every_json_route(
    server: Server, account: tuple[str, str], route: str, body: bytes, param: str | None
) -> None:
    pid, key = account
    token = server.admin_token if route.startswith("/admin/") else key
    before = server.admin("GET", f"/accounts/{pid}/credits").json()
    keys_before = httpx.get(
        server.base_url + "/api-keys", headers={"authorization": f"Bearer {key}"}
    ).json()
    r = httpx.post(
        server.root_url + route.format(pid=pid),
        content=body,
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    err = _error(r)
    assert (err["type"], err["code"], err["param"]) == (
        "invalid_request_error",
        "invalid_value",
        param,
    )
    assert server.admin("GET", f"/accounts/{pid}/credits").json() == before
    keys_after = httpx.get(
        server.base_url + "/api-keys", headers={"authorization": f"Bearer {key}"}
    ).json()
    assert keys_after == keys_before


@pytest.mark.parametrize("days", ["²", "1²", "٣", "0x10"])
def test_usage_days_that_are_not_plain_digits(
    server: Server, account: tuple[str, str], days: str
) -> None:
    _, key = account
    r = httpx.get(
        server.base_url + "/usage",
        params={"days": days},
        headers={"authorization": f"Bearer {key}"},
    )
    assert r.status_code == 400, r.text
    err = _error(r)
    assert (err["type"], err["code"], err["param"]) == (
        "invalid_request_error",
        "invalid_value",
        "days",
    )
