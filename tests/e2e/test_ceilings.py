"""Credit ceilings through the real server (2 workers): ``svc-max-credits`` on both streaming
endpoints and a key's ``max_credits_per_request``: the output cap lowered to fit, a prompt
the ceiling cannot hold refused (402 ``credit_ceiling_too_low``) with nothing taken, bad
values refused by name, and 300 requests at once never charged more than their ceilings."""

from __future__ import annotations

import asyncio
import json
import random

import httpx
import openai
import pytest

from app.apis.chat.request import parse_chat_request
from app.apis.responses.request import parse_responses_request
from app.completion.catalog import default_catalog
from app.credits.ceilings import HEADER
from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e
MODEL = "svc-smart"  # 50 / 150 credits per 1,000 prompt / output tokens
MSG = [{"role": "user", "content": "hi"}]


def _h(key: str, ceiling: str | bytes | None = None) -> dict[str, str | bytes]:
    headers: dict[str, str | bytes] = {"authorization": f"Bearer {key}"}
    if ceiling is not None:
        headers[HEADER] = ceiling
    return headers


CHAT_BODY = json.dumps(
    {"model": MODEL, "messages": MSG, "max_tokens": 200, "stream_options": {"include_usage": True}}
).encode()
RESPONSES_BODY = json.dumps({"model": MODEL, "input": "hi", "max_output_tokens": 500}).encode()


def _prompt_units(body: bytes = CHAT_BODY) -> int:
    """A chat body's prompt at its worst, in thousandths of a credit (its bound at the
    dearest prompt price), as reserve.lua is sent it."""
    params = parse_chat_request(body, default_catalog().aliases)
    return params.prompt_token_bound * params.alias.price.prompt_worst


def _responses_units() -> int:
    """RESPONSES_BODY's prompt at its worst, as ``_prompt_units`` for a chat body."""
    params = parse_responses_request(
        RESPONSES_BODY,
        default_catalog().aliases,
        max_messages=1_000,
        max_message_chars=1_000_000,
        image_token_bound=1_000,
    ).chat
    return params.prompt_token_bound * params.alias.price.prompt_worst


def _prompt_credits(units: int | None = None) -> int:
    """What svc holds for a prompt alone (CHAT_BODY's by default)."""
    return -(-(_prompt_units() if units is None else units) // 1000)


def _room(ceiling: int, units: int) -> int:
    """The output tokens a ceiling leaves a prompt (svc-smart's output: 150 per 1,000)."""
    return (ceiling * 1000 - units) // 150


def _data(text: str) -> list[dict[str, object]]:
    """The JSON data of every event (chat chunks, or the Responses API's events)."""
    lines = text.split("\n")
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def _post(server: Server, path: str, body: bytes, key: str, ceiling: int) -> httpx.Response:
    headers = {**_h(key, str(ceiling)), "content-type": "application/json"}
    return httpx.post(f"{server.base_url}{path}", content=body, headers=headers, timeout=30)


def _chat(server: Server, key: str, ceiling: str | bytes | None, **body: object) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": MODEL, "messages": MSG, **body},
        headers=_h(key, ceiling),
        timeout=30,
    )


def test_a_ceiling_lowers_the_output_cap_on_both_endpoints_and_never_charges_more(
    server: Server,
) -> None:
    pid = server.new_account(100_000)
    key = server.new_key(pid)
    units = _prompt_units()
    ceiling = _prompt_credits(units)
    room = _room(ceiling, units)
    assert 1 <= room < 10  # fewer tokens than the simulated reply has
    before = server.balance(pid)
    r = _post(server, "/chat/completions", CHAT_BODY, key, ceiling)
    assert r.status_code == 200, r.text
    chunks = _data(r.text)
    # cut at the lowered cap, not at the client's 200 (the contract's finish is "stop")
    assert chunks[-1]["usage"]["completion_tokens"] == room  # type: ignore[index]
    used = chunks[-1]["svc"]["credits_used"]  # type: ignore[index]
    assert 1 <= used <= ceiling
    assert before - server.balance(pid) == used
    # the Responses API: the same ceiling over its own prompt
    units = _responses_units()
    ceiling = _prompt_credits(units)
    before = server.balance(pid)
    r = _post(server, "/responses", RESPONSES_BODY, key, ceiling)
    assert r.status_code == 200, r.text
    last = _data(r.text)[-1]
    assert last["type"] == "response.incomplete"  # cut at the ceiling's output cap
    response = last["response"]
    assert isinstance(response, dict)
    assert response["usage"]["output_tokens"] == _room(ceiling, units)
    assert 1 <= response["svc"]["credits_used"] <= ceiling
    assert before - server.balance(pid) == response["svc"]["credits_used"]


def test_the_sdk_sends_the_header_and_is_held_to_it(server: Server) -> None:
    """The lowest ceiling the SDK's request is served under leaves it a few output tokens
    (the ceilings below it are 402s that take nothing)."""
    pid = server.new_account(100_000)
    key = server.new_key(pid)
    client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
    before = server.balance(pid)
    for ceiling in range(1, 30):
        refused: openai.APIStatusError | None = None
        try:
            with client.responses.stream(
                model=MODEL, input="hi", max_output_tokens=500, extra_headers={HEADER: str(ceiling)}
            ) as stream:
                # an incomplete response ends the stream without response.completed
                final = next(e for e in stream if e.type == "response.incomplete").response
        except openai.APIStatusError as error:
            refused = error
        if refused is not None:
            assert refused.status_code == 402
            assert server.balance(pid) == before
            continue
        assert final.status == "incomplete"
        assert final.usage is not None
        assert 1 <= final.usage.output_tokens <= 1000 // 150  # one credit's room at most
        assert 1 <= before - server.balance(pid) <= ceiling
        break
    else:
        pytest.fail("no ceiling was served")


def test_a_prompt_the_ceiling_cannot_hold_is_a_402_that_takes_nothing(server: Server) -> None:
    pid = server.new_account(100_000)
    key = server.new_key(pid)
    before = server.balance(pid)
    for path, body, units in (
        ("/chat/completions", CHAT_BODY, _prompt_units()),
        ("/responses", RESPONSES_BODY, _responses_units()),
    ):
        need = _prompt_credits(units)
        r = _post(server, path, body, key, need - 1)
        error = r.json()["error"]
        assert (r.status_code, error["code"]) == (402, "credit_ceiling_too_low"), r.text
        assert r.headers["x-should-retry"] == "false"
        assert f"ceiling is {need - 1} credits" in error["message"]
        assert f"prompt alone may cost up to {need}" in error["message"]
    client = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model=MODEL, messages=MSG, stream=True, extra_headers={HEADER: "1"}
        )  # type: ignore[call-overload]
    assert info.value.status_code == 402
    assert server.balance(pid) == before


@pytest.mark.parametrize(
    "value", ["0", "-3", "abc", "1.5", "10000000000000", "", "1 2", "٣".encode()]
)
def test_a_bad_header_is_a_400_naming_it(server: Server, value: str | bytes) -> None:
    pid = server.new_account(1_000)
    key = server.new_key(pid)
    r = _chat(server, key, value)
    error = r.json()["error"]
    assert (r.status_code, error["code"], error["param"]) == (400, "invalid_value", HEADER), r.text
    assert server.balance(pid) == 1_000


def test_a_keys_ceiling_is_set_shown_changed_and_kept_within_its_granter(
    server: Server,
) -> None:
    pid = server.new_account(100_000)
    manager = server.new_key(pid, role="admin")
    base = f"{server.base_url}/api-keys"
    need = _prompt_credits()
    body = {"name": "capped", "environment": "live", "daily_cap_credits": None}
    created = httpx.post(
        base, json={**body, "max_credits_per_request": need + 2}, headers=_h(manager)
    )
    assert created.status_code == 201, created.text
    capped = created.json()
    assert capped["max_credits_per_request"] == need + 2
    listed = httpx.get(base, headers=_h(manager)).json()["data"]
    assert {k["id"]: k["max_credits_per_request"] for k in listed}[capped["id"]] == need + 2
    # every request of the key holds at most its ceiling; a header cannot lift it
    r = _chat(server, capped["key"], str(need * 10), max_tokens=500)
    assert r.status_code == 200
    assert _data(r.text)[-1]["svc"]["credits_used"] <= need + 2  # type: ignore[index]
    # lowered below the prompt: refused at once (every worker reads it in Redis)
    patched = httpx.patch(
        f"{base}/{capped['id']}", json={"max_credits_per_request": 1}, headers=_h(manager)
    )
    assert patched.json()["max_credits_per_request"] == 1
    for _ in range(4):  # both workers
        refused = _chat(server, capped["key"], None)
        assert refused.json()["error"]["code"] == "credit_ceiling_too_low"
    cleared = httpx.patch(
        f"{base}/{capped['id']}", json={"max_credits_per_request": None}, headers=_h(manager)
    )
    assert cleared.json()["max_credits_per_request"] is None
    assert _chat(server, capped["key"], None, max_tokens=16).status_code == 200
    # bad values are refused by name
    for bad in (0, -1, "5", 1.5, 10**13):
        r = httpx.post(base, json={**body, "max_credits_per_request": bad}, headers=_h(manager))
        assert r.status_code == 400, (bad, r.text)
        assert "max_credits_per_request" in r.text
    # a key made by a key with a ceiling stays within it
    granter = httpx.post(
        base,
        json={**body, "role": "admin", "max_credits_per_request": 50},
        headers=_h(manager),
    ).json()["key"]
    for wider in (None, 51):
        r = httpx.post(base, json={**body, "max_credits_per_request": wider}, headers=_h(granter))
        assert (r.status_code, r.json()["error"]["code"]) == (403, "permission_denied")
        assert "max_credits_per_request" in r.json()["error"]["message"]
    narrower = httpx.post(base, json={**body, "max_credits_per_request": 20}, headers=_h(granter))
    assert narrower.status_code == 201, narrower.text


async def test_300_requests_at_once_are_never_charged_more_than_their_ceilings(
    server: Server,
) -> None:
    need = _prompt_credits()
    pid = server.new_account(1_000_000)
    manager = server.new_key(pid, role="admin")
    async with httpx.AsyncClient(timeout=30) as client:
        made = await client.post(
            f"{server.base_url}/api-keys",
            json={
                "name": "ceiling",
                "environment": "live",
                "daily_cap_credits": None,
                "max_credits_per_request": need + 4,
            },
            headers=_h(manager),
        )
    keyed = made.json()["key"]
    rng = random.Random(300)
    # (key, header ceiling, the ceiling that holds)
    plans = []
    for _ in range(300):
        header = rng.choice([None, need + 1, need + 2, need + 3, need + 9])
        key = rng.choice([manager, keyed])
        limit = min(c for c in (header, need + 4 if key == keyed else None, 10**9) if c)
        plans.append((key, header, limit))
    before = server.balance(pid)
    limits = httpx.Limits(max_connections=300)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def one(key: str, header: int | None) -> dict[str, object]:
            r = await client.post(
                f"{server.base_url}/chat/completions",
                json={"model": MODEL, "messages": MSG, "max_tokens": 40},
                headers=_h(key, None if header is None else str(header)),
            )
            assert r.status_code == 200, r.text
            svc = _data(r.text)[-1]["svc"]
            assert isinstance(svc, dict)
            return svc

        results = await asyncio.gather(*(one(key, header) for key, header, _ in plans))
    for svc, (_key, _header, limit) in zip(results, plans, strict=True):
        assert 1 <= int(svc["credits_used"]) <= limit  # type: ignore[call-overload]
    charged = sum(int(svc["credits_used"]) for svc in results)  # type: ignore[call-overload]
    assert before - server.balance(pid) == charged


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/chat/completions", {"model": MODEL, "messages": MSG, "stream": True}),
        ("/responses", {"model": MODEL, "input": "hi", "stream": True}),
        ("/messages", {"model": MODEL, "messages": MSG, "max_tokens": 50, "stream": True}),
    ],
)
@pytest.mark.parametrize("name", [HEADER, "Idempotency-Key"])
def test_a_repeated_header_is_a_400_in_each_apis_shape_and_takes_nothing(
    server: Server, path: str, body: dict[str, object], name: str
) -> None:
    """Two svc-max-credits headers used to hold the request to the first (a lower ceiling
    after it ignored); two Idempotency-Keys recorded it under the first (issue 44, item 6)."""
    pid = server.new_account(1_000)
    key = server.new_key(pid)
    headers = [("authorization", f"Bearer {key}"), (name, "500"), (name, "1")]
    r = httpx.post(f"{server.base_url}{path}", json=body, headers=headers, timeout=30)
    assert r.status_code == 400, r.text
    if path == "/messages":
        error = r.json()
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
        assert name in error["error"]["message"]
    else:
        error = r.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_value", name)
    assert "more than once" in r.text
    assert server.balance(pid) == 1_000


def test_a_repeated_idempotency_key_on_a_grant_is_a_400_and_grants_nothing(
    server: Server,
) -> None:
    pid = server.new_account(0)
    r = httpx.post(
        f"{server.root_url}/admin/v1/accounts/{pid}/grants",
        json={"credits": 100},
        headers=[
            ("authorization", f"Bearer {server.admin_token}"),
            ("Idempotency-Key", "g-1"),
            ("Idempotency-Key", "g-2"),
        ],
        timeout=30,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "Idempotency-Key"
    assert server.balance(pid) == 0
