"""Key settings end to end, on the shared 2-worker server: the models a key may use, its own
rate limit (under load across workers: exactly rate_limit_rpm served in the minute), and
rotation (a grace period without a lost request; the day's cap neither reset nor doubled)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e
MSG = [{"role": "user", "content": "hi"}]
EVERY_ALIAS = ["svc-fast", "svc-code", "svc-smart"]


def _h(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _chat(server: Server, key: str, model: str = "svc-fast") -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": model, "messages": MSG, "max_tokens": 16},
        headers=_h(key),
        timeout=30,
    )


def _credits_used(response: httpx.Response) -> int:
    """The svc metadata chunk's credits_used (the last data event before [DONE])."""
    return int(json.loads(response.text.split("\n\n")[-3][6:])["svc"]["credits_used"])


def _code(response: httpx.Response) -> str | None:
    """The error code of a refusal; None for anything else."""
    if response.status_code < 400:
        return None
    return str(response.json()["error"]["code"])


def _create(server: Server, manager: str, **settings: object) -> dict[str, object]:
    body = {"name": "scoped", "environment": "live", "daily_cap_credits": None, **settings}
    r = httpx.post(f"{server.base_url}/api-keys", json=body, headers=_h(manager))
    assert r.status_code == 201, r.text
    return dict(r.json())


def _patch(server: Server, manager: str, key_id: object, **changes: object) -> httpx.Response:
    return httpx.patch(f"{server.base_url}/api-keys/{key_id}", json=changes, headers=_h(manager))


def _rotate(server: Server, manager: str, key_id: object, **body: object) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/api-keys/{key_id}/rotate", json=body or None, headers=_h(manager)
    )


# -- allowed models --------------------------------------------------------------------------


def test_a_key_uses_only_its_models_and_svc_auto_needs_them_all(server: Server) -> None:
    pid = server.new_account(100_000)
    manager = server.new_key(pid, role="admin")
    created = _create(server, manager, allowed_models=["svc-fast", "svc-code", "svc-fast"])
    assert created["allowed_models"] == ["svc-fast", "svc-code"]  # each once
    scoped = str(created["key"])
    assert _chat(server, scoped, "svc-fast").status_code == 200
    assert _chat(server, scoped, "svc-code").status_code == 200
    before = server.balance(pid)
    for model in ("svc-smart", "svc-auto"):
        r = _chat(server, scoped, model)
        error = r.json()["error"]
        assert (r.status_code, error["code"], error["type"], error["param"]) == (
            403,
            "model_not_allowed",
            "permission_error",
            "model",
        )
        assert model in error["message"]
    # the Responses API is held to the same list, and through the SDK
    client = openai.OpenAI(base_url=server.base_url, api_key=scoped, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError) as info:
        client.responses.create(model="svc-smart", input="hi", max_output_tokens=16)
    assert info.value.code == "model_not_allowed"
    assert server.balance(pid) == before  # refused before anything was reserved
    # a model that does not exist is still a 404, whatever the key allows
    assert _chat(server, scoped, "gpt-4").status_code == 404
    # the model list shows what the key may use
    assert [m.id for m in client.models.list()] == ["svc-fast", "svc-code"]
    assert client.models.retrieve("svc-code").id == "svc-code"
    with pytest.raises(openai.PermissionDeniedError):
        client.models.retrieve("svc-auto")
    # allowing the third alias allows svc-auto, at once on every worker
    r = _patch(server, manager, created["id"], allowed_models=EVERY_ALIAS)
    assert (r.status_code, r.json()["allowed_models"]) == (200, EVERY_ALIAS)
    assert all(_chat(server, scoped, "svc-auto").status_code == 200 for _ in range(4))
    assert [m.id for m in client.models.list()] == ["svc-auto", *EVERY_ALIAS]
    r = _patch(server, manager, created["id"], allowed_models=[])
    assert r.json()["allowed_models"] == []
    assert {_chat(server, scoped, m).status_code for m in EVERY_ALIAS for _ in range(2)} == {403}
    r = _patch(server, manager, created["id"], allowed_models=None)
    assert r.json()["allowed_models"] is None
    assert _chat(server, scoped, "svc-smart").status_code == 200


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("allowed_models", ["svc-auto"]),
        ("allowed_models", ["gpt-4o"]),
        ("allowed_models", "svc-fast"),
        ("allowed_models", [""]),
        ("allowed_models", ["svc-fast"] * 65),
        ("rate_limit_rpm", 0),
        ("rate_limit_rpm", -1),
        ("rate_limit_rpm", 1_000_001),
        ("rate_limit_rpm", "60"),
        ("rate_limit_rpm", 1.5),
    ],
)
def test_bad_key_settings_are_a_400_naming_the_field(
    server: Server, field: str, value: object
) -> None:
    pid = server.new_account(0)
    manager = server.new_key(pid, role="admin")
    listed = httpx.get(f"{server.base_url}/api-keys", headers=_h(manager)).json()
    body = {"name": "x", "environment": "live", "daily_cap_credits": None, field: value}
    created = httpx.post(f"{server.base_url}/api-keys", json=body, headers=_h(manager))
    patched = _patch(server, manager, listed["data"][0]["id"], **{field: value})
    for r in (created, patched):
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"].startswith(field)  # allowed_models[0]: the item
    assert httpx.get(f"{server.base_url}/api-keys", headers=_h(manager)).json() == listed


def test_unknown_fields_are_refused_on_create(server: Server) -> None:
    pid = server.new_account(0)
    manager = server.new_key(pid, role="admin")
    body = {"name": "x", "environment": "live", "daily_cap_credits": None, "scopes": ["all"]}
    r = httpx.post(f"{server.base_url}/api-keys", json=body, headers=_h(manager))
    assert (r.status_code, r.json()["error"]["param"]) == (400, "scopes")


# -- rate limits -----------------------------------------------------------------------------


async def test_a_key_limited_to_600_rpm_serves_exactly_600_of_1000_in_the_minute(
    server: Server,
) -> None:
    pid = server.new_account(10_000_000)
    manager = server.new_key(pid, role="admin")
    limited = _create(server, manager, rate_limit_rpm=600)
    assert limited["rate_limit_rpm"] == 600
    key = str(limited["key"])
    one = _credits_used(_chat(server, server.new_key(pid)))  # what one such request costs
    before = server.balance(pid)
    started = time.monotonic()
    # 50 connections: both workers serve some; the limit is counted in Redis for all
    limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        semaphore = asyncio.Semaphore(50)

        async def send() -> httpx.Response:
            async with semaphore:
                return await client.post(
                    f"{server.base_url}/chat/completions",
                    json={"model": "svc-fast", "messages": MSG, "max_tokens": 16},
                    headers=_h(key),
                )

        results = await asyncio.gather(*(send() for _ in range(1000)))
    elapsed = time.monotonic() - started
    assert elapsed < 55, "the 1,000 requests must all fall in one minute"
    served = [r for r in results if r.status_code == 200]
    limited_out = [r for r in results if r.status_code == 429]
    assert (len(served), len(limited_out)) == (600, 400)
    for r in limited_out[:20]:
        assert r.json()["error"]["code"] == "rate_limit_exceeded"
        wait_ms = int(r.headers["retry-after-ms"])
        assert 60_000 - (elapsed + 1) * 1000 < wait_ms <= 60_000
    assert before - server.balance(pid) == 600 * one == sum(map(_credits_used, served))


def test_a_lowered_rate_limit_holds_from_the_next_request_on_every_worker(
    server: Server,
) -> None:
    pid = server.new_account(100_000)
    manager = server.new_key(pid, role="admin")
    created = _create(server, manager, rate_limit_rpm=None)
    key = str(created["key"])
    assert all(_chat(server, key).status_code == 200 for _ in range(6))
    r = _patch(server, manager, created["id"], rate_limit_rpm=7)
    assert (r.status_code, r.json()["rate_limit_rpm"]) == (200, 7)
    # starts made without a limit were not recorded: 7 from now, then 429 on both workers
    assert all(_chat(server, key).status_code == 200 for _ in range(7))
    codes = [_chat(server, key) for _ in range(6)]  # new connections each
    assert {(r.status_code, r.json()["error"]["code"]) for r in codes} == {
        (429, "rate_limit_exceeded")
    }
    assert _patch(server, manager, created["id"], rate_limit_rpm=None).is_success
    assert _chat(server, key).status_code == 200


# -- rotation --------------------------------------------------------------------------------


def test_a_rotated_key_keeps_its_settings_and_the_old_one_ends_after_its_grace(
    server: Server,
) -> None:
    pid = server.new_account(100_000)
    manager = server.new_key(pid, role="admin")
    old = _create(
        server,
        manager,
        name="prod",
        daily_cap_credits=5_000,
        allowed_models=["svc-fast"],
        rate_limit_rpm=500,
    )
    assert _chat(server, str(old["key"])).status_code == 200
    r = _rotate(server, manager, old["id"], grace_seconds=3)
    assert r.status_code == 201, r.text
    new = r.json()
    assert (new["key"], new["id"]) != (old["key"], old["id"])
    assert new["replaces"] == old["id"]
    for field in ("name", "environment", "daily_cap_credits", "allowed_models", "rate_limit_rpm"):
        assert new[field] == old[field], field
    assert new["expires_at"] is None
    listed = {
        k["id"]: k
        for k in httpx.get(f"{server.base_url}/api-keys", headers=_h(manager)).json()["data"]
    }
    assert listed[new["id"]]["replaces"] == old["id"]
    assert listed[old["id"]]["expires_at"] is not None
    # both work during the grace period, on every worker
    for _ in range(4):
        assert _chat(server, str(old["key"])).status_code == 200
        assert _chat(server, new["key"]).status_code == 200
    time.sleep(max(0.0, r.json()["created_at"] + 3 + 1 - time.time()))
    for _ in range(4):
        refused = _chat(server, str(old["key"]))
        assert (refused.status_code, refused.json()["error"]["code"]) == (401, "api_key_expired")
        assert _chat(server, new["key"]).status_code == 200
    # an expired key cannot be rotated; neither can a key rotated before, nor a revoked one
    again = _rotate(server, manager, old["id"])
    assert (again.status_code, again.json()["error"]["code"]) == (409, "api_key_not_rotatable")
    assert httpx.delete(f"{server.base_url}/api-keys/{new['id']}", headers=_h(manager)).is_success
    revoked = _rotate(server, manager, new["id"], grace_seconds=0)
    assert (revoked.status_code, revoked.json()["error"]["code"]) == (409, "api_key_not_rotatable")
    assert _rotate(server, manager, "key_doesnotexist").status_code == 404


def test_a_rotation_with_no_grace_ends_the_old_key_at_once(server: Server) -> None:
    pid = server.new_account(100_000)
    manager = server.new_key(pid, role="admin")
    old = _create(server, manager)
    r = httpx.post(f"{server.base_url}/api-keys/{old['id']}/rotate", headers=_h(manager))
    assert r.status_code == 201  # no body: the defaults
    assert {_chat(server, str(old["key"])).status_code for _ in range(4)} == {401}
    assert _chat(server, r.json()["key"]).status_code == 200


@pytest.mark.parametrize("body", [{"grace_seconds": -1}, {"grace_seconds": 604_801}, {"x": 1}])
def test_bad_rotations_are_refused_and_change_nothing(server: Server, body: object) -> None:
    pid = server.new_account(0)
    manager = server.new_key(pid, role="admin")
    old = _create(server, manager)
    before = httpx.get(f"{server.base_url}/api-keys", headers=_h(manager)).json()
    r = _rotate(server, manager, old["id"], **body)  # type: ignore[arg-type]
    assert r.status_code == 400
    assert httpx.get(f"{server.base_url}/api-keys", headers=_h(manager)).json() == before
    test_key = server.new_key(pid, environment="test")
    forbidden = _rotate(server, test_key, old["id"])
    assert (forbidden.status_code, forbidden.json()["error"]["code"]) == (
        403,
        "test_key_forbidden",
    )


def test_the_admin_api_rotates_keys_of_any_account(server: Server) -> None:
    pid = server.new_account(1_000)
    old = server.admin(
        "POST",
        f"/accounts/{pid}/api-keys",
        {"name": "a", "environment": "test", "daily_cap_credits": 9},
    ).json()
    r = server.admin("POST", f"/accounts/{pid}/api-keys/{old['id']}/rotate", {"grace_seconds": 60})
    assert r.status_code == 201
    assert (r.json()["replaces"], r.json()["environment"], r.json()["daily_cap_credits"]) == (
        old["id"],
        "test",
        9,
    )
    other = server.new_account(0)
    assert server.admin("POST", f"/accounts/{other}/api-keys/{old['id']}/rotate").status_code == 404


async def test_a_rotation_under_load_loses_no_request_and_never_exceeds_the_cap(
    server: Server,
) -> None:
    """A client sends with its key while it is rotated (grace 30 s) and switches to the new
    key the moment it has it: every request is served until the cap, which the two keys
    share, is reached; none is refused for its key."""
    pid = server.new_account(10_000_000)
    manager = server.new_key(pid, role="admin")
    one = _credits_used(_chat(server, server.new_key(pid)))
    cap = 150 * one
    old = _create(server, manager, daily_cap_credits=cap)
    current = {"key": str(old["key"])}
    before = server.balance(pid)
    results: list[tuple[str, httpx.Response]] = []
    under_way = asyncio.Event()
    spent_out = asyncio.Event()
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=20)) as client:

        async def sender() -> None:  # one of 20 connections sending back to back
            # until the cap's settled credits are spent: near it, the running requests'
            # holds answer daily_cap_held (retry soon), which must not end the test early
            while len(results) < 300 or not spent_out.is_set():
                key = current["key"]
                response = await client.post(
                    f"{server.base_url}/chat/completions",
                    json={"model": "svc-fast", "messages": MSG, "max_tokens": 16},
                    headers=_h(key),
                )
                results.append((key, response))
                if _code(response) == "daily_cap_exceeded":
                    spent_out.set()
                if len(results) == 60:
                    under_way.set()

        async def rotate() -> None:  # once a fifth of the requests are answered
            await under_way.wait()
            r = await client.post(
                f"{server.base_url}/api-keys/{old['id']}/rotate",
                json={"grace_seconds": 30},
                headers=_h(manager),
            )
            assert r.status_code == 201, r.text
            current["key"] = r.json()["key"]

        await asyncio.gather(rotate(), *(sender() for _ in range(20)))
    by_key = {k for k, _ in results}
    assert len(by_key) == 2, "the rotation must land while requests are sent"
    served = [r for _, r in results if r.status_code == 200]
    capped = [r for _, r in results if r.status_code != 200]
    assert {(r.status_code, _code(r)) for r in capped} <= {
        (429, "daily_cap_exceeded"),
        (429, "daily_cap_held"),
    }
    spent = sum(map(_credits_used, served))
    assert spent <= cap
    assert len(served) == 150  # the cap is reached exactly: one cap for the two keys
    assert len(results) >= 300
    assert before - server.balance(pid) == spent


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"daily_cap_credits": 0}, (429, "daily_cap_exceeded")),
        ({"expires_at": "2026-01-01T00:00:00Z"}, (401, "api_key_expired")),
        ({"allowed_models": []}, (403, "model_not_allowed")),
    ],
)
async def test_a_patch_under_load_holds_for_every_request_sent_after_it(
    server: Server, change: dict[str, object], refusal: tuple[int, str]
) -> None:
    """20 connections (both workers) send back to back; once the PATCH has answered, no
    request sent after that is served."""
    pid = server.new_account(10_000_000)
    manager = server.new_key(pid, role="admin")
    created = _create(server, manager)
    key = str(created["key"])
    sent: list[tuple[float, httpx.Response]] = []
    patched_at = float("inf")
    midway = asyncio.Event()
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=21)) as client:

        async def sender() -> None:
            while len(sent) < 400:
                started = time.monotonic()
                response = await client.post(
                    f"{server.base_url}/chat/completions",
                    json={"model": "svc-fast", "messages": MSG, "max_tokens": 16},
                    headers=_h(key),
                )
                sent.append((started, response))
                if len(sent) == 100:
                    midway.set()

        async def patch_midway() -> None:
            nonlocal patched_at
            await midway.wait()
            r = await client.patch(
                f"{server.base_url}/api-keys/{created['id']}", json=change, headers=_h(manager)
            )
            assert r.status_code == 200, r.text
            patched_at = time.monotonic()

        await asyncio.gather(patch_midway(), *(sender() for _ in range(20)))
    after = [r for started, r in sent if started > patched_at]
    assert len(after) > 50
    assert {(r.status_code, r.json()["error"]["code"]) for r in after} == {refusal}
    before = [r for started, r in sent if started <= patched_at]
    assert any(r.status_code == 200 for r in before)
