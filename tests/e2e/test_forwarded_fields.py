"""Issue 30, item 8, through the real server and the official SDK: a client's
``service_tier="priority"``, ``store=True`` and ``metadata`` reach the provider (the mock
upstream as a real HTTP server) only through an alias whose models file entry allows them,
on chat completions and on Responses (translated to chat, or sent to a provider that
serves Responses), and the request is charged as any other."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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
        "allow_service_tier = true\nallow_store = true\n"
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
