"""The official openai SDK against a real granian server, changing only base URL and key."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e

ALIASES = ["svc-auto", "svc-fast", "svc-code", "svc-smart"]


@pytest.mark.parametrize("alias", ALIASES)
def test_sdk_streams_a_paid_completion(server: Server, alias: str) -> None:
    pid = server.new_account(100_000)
    client = openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid))
    before = server.balance(pid)
    stream = client.chat.completions.create(
        model=alias,
        messages=[{"role": "user", "content": "Say hello in five words."}],
        stream=True,
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    meta = chunks[-1].model_extra["svc"]  # type: ignore[index]
    assert text
    assert set(meta) == {"requested_model", "credits_used", "balance_remaining"}
    assert meta["requested_model"] == alias
    assert meta["credits_used"] >= 1
    after = server.balance(pid)
    assert before - after == meta["credits_used"]
    assert meta["balance_remaining"] == after
    credits = client.get("/credits", cast_to=object)
    assert credits["total_available"] == after  # type: ignore[index]


def test_sdk_lists_models(server: Server) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key=server.dev_key)
    models = client.models.list()
    assert [m.id for m in models.data] == ALIASES
    assert all(m.owned_by == "svc" and m.object == "model" for m in models.data)


def test_sdk_retrieves_a_model_as_listed(server: Server) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key=server.dev_key, max_retries=0)
    listed = {m.id: m for m in client.models.list().data}
    model = client.models.retrieve("svc-fast")
    assert (model.id, model.object, model.owned_by) == ("svc-fast", "model", "svc")
    assert model.created == listed["svc-fast"].created
    assert model == listed["svc-fast"]
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("nope")
    assert info.value.code == "model_not_found"
    assert info.value.param == "model"


def test_sdk_non_stream_request_still_gets_a_stream(server: Server) -> None:
    pid = server.new_account(100_000)
    client = openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid))
    with client.chat.completions.with_streaming_response.create(
        model="svc-fast", messages=[{"role": "user", "content": "hi"}], stream=False
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = response.read().decode()
    assert body.endswith("data: [DONE]\n\n")


def test_sdk_sees_openai_errors(server: Server) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key=server.dev_key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    assert info.value.code == "model_not_found"
    bad = openai.OpenAI(base_url=server.base_url, api_key="svc_live_" + "x" * 50, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    poor = openai.OpenAI(
        base_url=server.base_url, api_key=server.new_key(server.new_account(0)), max_retries=0
    )
    with pytest.raises(openai.APIStatusError) as paid:
        poor.chat.completions.create(
            model="svc-fast", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    assert paid.value.status_code == 402
