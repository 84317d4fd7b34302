"""Anthropic's structured outputs through the real server and the anthropic SDK (issue 46,
item 4): ``messages.stream(output_format=<pydantic model>)`` on the simulated upstream
comes back parsed; the schema reaches a chat
provider (the mock upstream, a real HTTP server) as a strict ``json_schema`` response format
and a provider that serves the Messages API as the client's ``output_config``; a schema svc
cannot take is the SDK's ``BadRequestError`` naming ``output_config.format``, charged
nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import anthropic
import httpx
import pytest
from pydantic import BaseModel, Field

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server
from tests.support.processes import stop_process

pytestmark = pytest.mark.e2e

FUNDS = 100_000


class Stop(BaseModel):
    city: str
    nights: int = Field(ge=1, le=14)
    transport: Literal["train", "bus", "ferry"]


class Trip(BaseModel):
    title: str
    stops: list[Stop]
    budget: float | None


def _client(server: Server) -> tuple[anthropic.Anthropic, str]:
    """A funded account's client (the session's server has no models file: every alias is
    the simulated upstream)."""
    pid = server.new_account(FUNDS)
    key = server.new_key(pid)
    return anthropic.Anthropic(base_url=server.root_url, api_key=key, max_retries=0), pid


QUESTION: Any = [{"role": "user", "content": "Plan a trip along the coast."}]


def test_messages_stream_returns_the_parsed_model(server: Server) -> None:
    """``messages.stream(output_format=...)``: ``messages.parse`` is its non-streaming twin,
    which svc answers with a stream too (the contract: docs/clients.md's non-streaming
    calls), so the SDK cannot read it; the stream's final message is parsed the same way."""
    client, pid = _client(server)
    with client.messages.stream(
        model="svc-fast", max_tokens=1024, messages=QUESTION, output_format=Trip
    ) as stream:
        for _event in stream:
            pass
        message = stream.get_final_message()
    trip = message.parsed_output
    assert isinstance(trip, Trip)
    assert trip.stops
    assert all(isinstance(stop.nights, int) and 1 <= stop.nights <= 14 for stop in trip.stops)
    assert message.stop_reason == "end_turn"
    assert server.balance(pid) < FUNDS  # charged as any other message


def test_a_schema_svc_cannot_take_is_a_bad_request_charged_nothing(server: Server) -> None:
    client, pid = _client(server)
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="svc-fast",
            max_tokens=100,
            messages=QUESTION,
            output_config={"format": {"type": "json_schema", "schema": [1, 2]}},  # type: ignore[typeddict-item]
        )
    assert "output_config.format.schema" in info.value.message
    assert info.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert server.balance(pid) == FUNDS


@pytest.fixture(scope="module")
def mock() -> Iterator[MockProcess]:
    process = start_in_subprocess(chunks=5)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def mocked(tmp_path_factory: pytest.TempPathFactory, mock: MockProcess) -> Iterator[Server]:
    """svc-fast on the mock as a chat provider, svc-smart on it as a provider that serves
    the Messages API (``native``)."""
    tmp = tmp_path_factory.mktemp("messages-structured")
    path = tmp / "models.toml"
    path.write_text(
        f'[providers.chat]\nbase_url = "{mock.base_url}"\n'
        f'[providers.native]\nbase_url = "{mock.base_url}"\nmessages_api = true\n'
        '[aliases.svc-fast]\nupstreams = [{ provider = "chat", model = "plain" }]\n'
        '[aliases.svc-smart]\nupstreams = [{ provider = "native", model = "native" }]\n'
    )
    srv = start_server(tmp, extra_env={"SVC_MODELS_FILE": str(path)})
    yield srv
    stop_process(srv.process)


def _received(mock: MockProcess) -> dict[str, Any]:
    stats = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()
    return dict(stats["last_request"])


SCHEMA = Trip.model_json_schema()
OUTPUT_CONFIG: Any = {"format": {"type": "json_schema", "schema": SCHEMA}, "effort": "low"}


def _stream(server: Server, model: str) -> None:
    client, pid = _client(server)
    with client.messages.stream(
        model=model, max_tokens=200, messages=QUESTION, output_config=OUTPUT_CONFIG
    ) as stream:
        for _event in stream:
            pass
        stream.get_final_message()
    assert server.balance(pid) < FUNDS


def test_a_chat_provider_is_sent_a_strict_json_schema_response_format(
    mocked: Server, mock: MockProcess
) -> None:
    _stream(mocked, "svc-fast")
    sent = _received(mock)
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Trip", "schema": SCHEMA, "strict": True},
    }
    assert "output_config" not in sent


def test_a_messages_provider_is_sent_output_config_as_written(
    mocked: Server, mock: MockProcess
) -> None:
    _stream(mocked, "svc-smart")
    sent = _received(mock)
    assert sent["output_config"] == OUTPUT_CONFIG
    assert "response_format" not in sent
