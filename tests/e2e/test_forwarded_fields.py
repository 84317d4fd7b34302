"""Issue 30, item 8, through the real server and the official SDK: a client's
``service_tier="priority"``, ``store=True`` and ``metadata`` reach the provider (the mock
upstream as a real HTTP server) only through an alias whose models file entry allows them,
on chat completions and on Responses (translated to chat, or sent to a provider that
serves Responses), and the request is charged as any other. ``top_k`` likewise
(``allow_top_k``), from a chat client's ``extra_body`` and from a Messages request
translated to chat."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server
from tests.support.processes import stop_process

pytestmark = pytest.mark.e2e

ASKED = {"service_tier": "priority", "store": True, "metadata": {"job": "7"}}


@pytest.fixture(scope="module")
def mock() -> Iterator[MockProcess]:
    process = start_in_subprocess(chunks=5)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("forwarded")
    path = tmp / "models.toml"
    path.write_text(
        f'[providers.chat]\nbase_url = "{mock.base_url}"\n'
        f'[providers.native]\nbase_url = "{mock.base_url}"\nresponses_api = true\n'
        # left as they are: nothing that costs more or is kept goes through
        '[aliases.svc-fast]\nupstreams = [{ provider = "chat", model = "plain" }]\n'
        '[aliases.svc-smart]\nupstreams = [{ provider = "native", model = "native" }]\n'
        # the operator lets clients choose
        '[aliases.svc-code]\nupstreams = [{ provider = "chat", model = "allowed" }]\n'
        "allow_service_tier = true\nallow_store = true\nallow_top_k = true\n"
    )
    srv = start_server(tmp, extra_env={"SVC_MODELS_FILE": str(path)})
    yield srv
    stop_process(srv.process)


def _received(mock: MockProcess) -> dict[str, Any]:
    stats = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()
    return dict(stats["last_request"])


def _client(server: Server) -> tuple[openai.OpenAI, str]:
    pid = server.new_account(100_000)
    return openai.OpenAI(base_url=server.base_url, api_key=server.new_key(pid), max_retries=0), pid


def _chat(server: Server, model: str) -> None:
    """A streamed chat completion asking for all of ``ASKED``, charged what it reports."""
    client, pid = _client(server)
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            service_tier="priority",
            store=True,
            metadata={"job": "7"},
        )
    )
    credits = chunks[-1].model_extra["svc"]["credits_used"]  # type: ignore[index]
    assert credits >= 1
    assert server.balance(pid) == 100_000 - credits


def _responses(server: Server, model: str) -> None:
    client, pid = _client(server)
    events = list(
        client.responses.create(
            model=model,
            input="hi",
            stream=True,
            service_tier="priority",
            store=True,
            metadata={"job": "7"},
        )
    )
    response = events[-1].response  # type: ignore[union-attr]
    assert events[-1].type == "response.completed"
    assert response.metadata == {"job": "7"}  # echoed to the client all the same
    credits = response.model_extra["svc"]["credits_used"]  # type: ignore[index]
    assert server.balance(pid) == 100_000 - credits


def test_chat_drops_service_tier_and_store_unless_the_alias_allows(
    server: Server, mock: MockProcess
) -> None:
    _chat(server, "svc-fast")
    sent = _received(mock)
    assert sent["model"] == "plain"
    assert not set(ASKED) & set(sent), sent
    _chat(server, "svc-code")
    sent = _received(mock)
    assert sent["model"] == "allowed"
    assert {name: sent.get(name) for name in ASKED} == ASKED


def test_responses_translated_to_chat_follow_the_same_rule(
    server: Server, mock: MockProcess
) -> None:
    _responses(server, "svc-fast")
    sent = _received(mock)
    assert "messages" in sent
    assert not set(ASKED) & set(sent), sent
    _responses(server, "svc-code")
    sent = _received(mock)
    assert {name: sent.get(name) for name in ASKED} == ASKED


def test_a_provider_that_serves_responses_is_told_not_to_store(
    server: Server, mock: MockProcess
) -> None:
    _responses(server, "svc-smart")
    sent = _received(mock)
    assert (sent["model"], sent["input"], sent["store"]) == ("native", "hi", False)
    assert not {"service_tier", "metadata"} & set(sent), sent


# -- top_k, where the upstream takes it -------------------------------------------------------


@pytest.mark.parametrize(("model", "sent"), [("svc-fast", None), ("svc-code", 40)])
def test_top_k_reaches_the_provider_only_where_the_alias_allows_it(
    server: Server, mock: MockProcess, model: str, sent: int | None
) -> None:
    client, pid = _client(server)
    messages: Any = [{"role": "user", "content": "hi"}]
    chunks = list(
        client.chat.completions.create(
            model=model, messages=messages, stream=True, extra_body={"top_k": 40}
        )
    )
    assert chunks[-1].model_extra["svc"]["credits_used"] >= 1  # type: ignore[index]
    assert _received(mock).get("top_k") == sent
    # a Messages request's top_k, translated to chat: the same rule
    with (
        anthropic.Anthropic(
            base_url=server.root_url, api_key=server.new_key(pid), max_retries=0
        ) as claude,
        claude.messages.stream(
            model=model,
            max_tokens=64,
            messages=messages,
            extra_body={"top_k": 40},  # this SDK has no top_k of its own
        ) as stream,
    ):
        message = stream.get_final_message()
    assert message.stop_reason == "end_turn"
    received = _received(mock)
    assert "messages" in received
    assert received.get("top_k") == sent


# -- the safety identifier (issue 35, item 5) -----------------------------------------------

END_USER = "end-user-4711"


def _identifier_sent(
    mock: MockProcess, client: openai.OpenAI, api: str, model: str, **fields: Any
) -> str:
    """The ``safety_identifier`` the provider received for one streamed request of
    ``client``'s account (``api``: "chat" or "responses")."""
    if api == "chat":
        messages: Any = [{"role": "user", "content": "hi"}]
        list(client.chat.completions.create(model=model, messages=messages, stream=True, **fields))
    else:
        list(client.responses.create(model=model, input="hi", stream=True, **fields))
    sent = _received(mock)
    assert ("messages" in sent) == (api == "chat" or model != "svc-smart"), sent
    identifier = sent["safety_identifier"]
    assert isinstance(identifier, str)
    return identifier


@pytest.mark.parametrize(
    ("api", "model"),
    [("chat", "svc-fast"), ("responses", "svc-fast"), ("responses", "svc-smart")],
    ids=["chat", "responses-translated", "responses-native"],
)
def test_the_provider_is_sent_the_accounts_safety_identifier(
    server: Server, mock: MockProcess, api: str, model: str
) -> None:
    alice, alice_pid = _client(server)
    bob, bob_pid = _client(server)
    first = _identifier_sent(mock, alice, api, model)
    assert _identifier_sent(mock, alice, api, model) == first  # stable per account
    assert first.startswith("svc_")
    assert len(first) <= 64
    assert alice_pid not in first
    other = _identifier_sent(mock, bob, api, model)
    assert other != first
    assert bob_pid not in other
    # the client's own identifier of its end user: combined with the account, never sent
    for field in ("safety_identifier", "user"):
        combined = _identifier_sent(mock, alice, api, model, **{field: END_USER})
        assert combined not in (first, END_USER)
        assert END_USER not in combined
        assert _identifier_sent(mock, bob, api, model, **{field: END_USER}) != combined
        sent = _received(mock)
        assert sent.get("user") == (END_USER if field == "user" else None)  # as it came


def test_chat_and_responses_send_one_account_the_same_identifier(
    server: Server, mock: MockProcess
) -> None:
    client, _pid = _client(server)
    chat = _identifier_sent(mock, client, "chat", "svc-fast")
    assert _identifier_sent(mock, client, "responses", "svc-fast") == chat
    assert _identifier_sent(mock, client, "responses", "svc-smart") == chat
