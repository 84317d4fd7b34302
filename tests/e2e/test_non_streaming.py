"""``SVC_NON_STREAMING=refuse`` on a real server (issue 44, item 14): the official SDKs' plain
``create()`` (no ``stream=True``), which by the contract is served as a stream it cannot
read and charged, is answered 400 ``stream_required`` instead, raised as the SDK's
``BadRequestError``, before anything is reserved: no credits move. Streamed calls are
served and charged as before. A server left at the default streams a plain ``create()``
anyway (its text is what the SDK returns), and charges it."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = pytest.mark.e2e

FUNDS = 100_000
MODEL = "svc-fast"
MSG = [{"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("refusing"), extra_env={"SVC_NON_STREAMING": "refuse"}
    )
    yield srv
    stop_server(srv.process)


def _openai(server: Server, pid: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid), max_retries=2)


def _anthropic(server: Server, pid: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.root_url, api_key=server.new_key(pid), max_retries=2)


def _refused(error: openai.BadRequestError | anthropic.BadRequestError) -> None:
    assert error.status_code == 400
    assert "stream: true" in str(error.message) or "'stream: true'" in str(error.message)


@pytest.mark.parametrize("stream", [None, False])
def test_the_openai_sdks_plain_create_is_a_400_and_moves_no_credits(
    refusing: Server, stream: bool | None
) -> None:
    pid = refusing.new_account(FUNDS)
    sent = {} if stream is None else {"stream": stream}
    with _openai(refusing, pid) as client:
        with pytest.raises(openai.BadRequestError) as chat:
            client.chat.completions.create(model=MODEL, messages=MSG, **sent)  # type: ignore[call-overload]
        with pytest.raises(openai.BadRequestError) as responses:
            client.responses.create(model=MODEL, input="Say hi.", **sent)  # type: ignore[call-overload]
    for refused in (chat.value, responses.value):
        _refused(refused)
        body = refused.body
        assert isinstance(body, dict)
        assert (body["code"], body["param"], body["type"]) == (
            "stream_required",
            "stream",
            "invalid_request_error",
        )
    assert refusing.balance(pid) == FUNDS


def test_the_anthropic_sdks_plain_create_is_a_400_and_moves_no_credits(
    refusing: Server,
) -> None:
    pid = refusing.new_account(FUNDS)
    with _anthropic(refusing, pid) as client, pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=MODEL, max_tokens=32, messages=MSG)  # type: ignore[arg-type]
    _refused(refused.value)
    body = refused.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert refusing.balance(pid) == FUNDS


def test_streamed_calls_are_served_and_charged_as_before(refusing: Server) -> None:
    pid = refusing.new_account(FUNDS)
    with _openai(refusing, pid) as client:
        chunks = list(client.chat.completions.create(model=MODEL, messages=MSG, stream=True))  # type: ignore[arg-type]
    assert chunks
    after_chat = refusing.balance(pid)
    assert after_chat < FUNDS
    with (
        _anthropic(refusing, pid) as client,
        client.messages.stream(
            model=MODEL,
            max_tokens=32,
            messages=MSG,  # type: ignore[arg-type]
        ) as stream,
    ):
        assert stream.get_final_text()
    assert refusing.balance(pid) < after_chat


def test_count_tokens_asks_for_no_stream_and_is_still_answered(refusing: Server) -> None:
    pid = refusing.new_account(FUNDS)
    with _anthropic(refusing, pid) as client:
        counted = client.messages.count_tokens(model=MODEL, messages=MSG)  # type: ignore[arg-type]
    assert counted.input_tokens >= 1


def test_by_default_a_plain_create_is_streamed_and_charged(server: Server) -> None:
    pid = server.new_account(FUNDS)
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"model": MODEL, "messages": MSG},
        headers={"authorization": f"Bearer {server.new_key(pid)}"},
        timeout=30,
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert server.balance(pid) < FUNDS
