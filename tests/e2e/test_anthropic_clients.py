"""Anthropic's clients against svc's Messages API (``POST /v1/messages``, always streamed) on a
real granian server, each used the way its docs say.

Python: the official ``anthropic`` SDK, the reference (``messages.create(stream=True)``, whose
raw events show svc's metadata on ``message_stop``), its ``messages.stream()`` helper, sync and
async, and LangChain's ``ChatAnthropic``. Node: ``@anthropic-ai/sdk`` and the Vercel AI SDK's
``@ai-sdk/anthropic``, run as tests/clients/node/anthropic.js and vercel-anthropic.js. Every
client streams the scenarios of test_clients.py (tests/clients/scenarios.json, the system
message as the top-level ``system``) and its tool scenarios (tools.json: the simulated upstream
calls get_weather, and in "tool-result" the client sends a ``tool_result`` back and gets text);
the simulated upstream is deterministic, so each client must see the reference's text, call,
usage and stop, and cost the account exactly the ``svc.credits_used`` of the reference's
``message_stop`` event (and of its own, where the client shows it).

Then, with the Python SDK: an image block, ``stop_sequences`` (they reach the upstream as the
chat request's ``stop``: the mock upstream's record says so; the stop sequence an upstream
says it stopped at, vLLM's way or Anthropic's, or the simulated upstream's, is the
``stop_reason`` ``stop_sequence``), a ``max_tokens`` cut, token
counting, and 401, 402, 429 and 502 as the SDK's own exceptions; and Claude Code in print mode
pointed at svc with ``ANTHROPIC_BASE_URL``, through a recording proxy that keeps svc's
answers: it must answer the prompt and cost the account the sum of its requests'
``svc.credits_used``.

Where each client puts svc (probed on a logging server): the Anthropic SDKs (Python, Node),
LangChain and Claude Code take svc's root and add ``/v1/messages``; the Vercel provider adds
``/messages`` to its ``baseURL``, so it takes svc's ``/v1``. The SDKs and LangChain send the key
as ``Authorization: Bearer``, the Vercel provider and Claude Code as ``x-api-key``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import subprocess
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import anthropic
import httpx
import pytest

from bench.mock_upstream import MockProcess, start_in_subprocess
from tests.e2e.conftest import Server, start_server

# the 402, 429 and 502 keys and servers of the retry tests (their fixtures, used by name below)
from tests.e2e.test_client_recipes import Keys, down, keys  # noqa: F401
from tests.e2e.test_clients import (
    BAD_KEY,
    NODE_DIR,
    SCENARIOS,
    TOOL_SCENARIOS,
    TOOLS,
    Run,
    Runner,
    Seen,
    _failure,
    _turns,
    _usage,
    node_client,
)
from tests.support.processes import stop_process
from tests.support.recording_proxy import RecordingProxy

pytestmark = pytest.mark.e2e

MODEL = "svc-fast"
NATIVE = "svc-smart"  # the mocked server's alias on a provider that serves the Messages API
MAX_TOKENS = 1024
FUNDS = 100_000

# --- the Python clients ---------------------------------------------------------------------

Turn = Callable[[list[dict[str, Any]]], tuple[Seen, list[dict[str, Any]]]]


def _seen() -> Seen:
    return {
        "text": "",
        "finish_reason": None,
        "calls": [],
        "usage": None,
        "svc": None,
        "error": None,
        "first": None,
        "stop_sequence": None,  # the reference's alone
    }


def _split(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """A scenario's OpenAI-style messages as the Messages API takes them: the system messages'
    text as the top-level ``system``, the other turns as they are."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    return ("\n".join(system) or None), [m for m in messages if m["role"] != "system"]


def _anthropic_tool() -> dict[str, Any]:
    """tools.json's tool in the Messages API's ``tools`` format."""
    tool = TOOLS["tool"]
    return {
        "name": tool["name"],
        "description": tool["description"],
        "input_schema": tool["parameters"],
    }


def _params(messages: list[dict[str, Any]], tools: bool, **extra: Any) -> dict[str, Any]:
    system, turns = _split(messages)
    return {
        "model": MODEL,
        "max_tokens": MAX_TOKENS,
        "messages": turns,
        **({"system": system} if system else {}),
        **({"tools": [_anthropic_tool()]} if tools else {}),
        **extra,
    }


def _sent_back(block: dict[str, Any]) -> dict[str, Any]:
    """A content block as a client sends it back: the Messages API's fields of a text or a
    tool_use block (the SDK's own, such as a parsed output, left out)."""
    return {k: v for k, v in block.items() if k in ("type", "text", "id", "name", "input")}


def _from_message(seen: Seen, message: Any) -> list[dict[str, Any]]:
    """Fills ``seen`` from the SDK's final message; its content as a client sends it back."""
    for block in message.content:
        if block.type == "text":
            seen["text"] += block.text
        elif block.type == "tool_use":
            seen["calls"].append({"name": block.name, "arguments": block.input})
    seen["finish_reason"] = message.stop_reason
    u = message.usage
    seen["usage"] = _usage(u.input_tokens, u.output_tokens, u.input_tokens + u.output_tokens)
    return [_sent_back(block.to_dict()) for block in message.content]


class _RawEvents:
    """A message put together from the raw events of ``messages.create(stream=True)`` by
    hand: the text deltas, each block's start (a tool_use's input from its JSON deltas), the
    stop, the usage (message_start's, then message_delta's where it sets a count: it is
    cumulative), and svc's metadata off ``message_stop``."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen
        self.blocks: list[dict[str, Any]] = []
        self.inputs: list[str] = []
        self.usage: dict[str, int | None] = {"input_tokens": None, "output_tokens": None}

    def read(self, event: Any) -> None:
        seen, kind = self.seen, event.type
        if kind == "message_start":
            self.usage["input_tokens"] = event.message.usage.input_tokens
        elif kind == "content_block_start":
            self.blocks.append(event.content_block.to_dict())
            self.inputs.append("")
        elif kind == "content_block_delta" and event.delta.type == "text_delta":
            seen["text"] += event.delta.text
            self.blocks[event.index]["text"] += event.delta.text
        elif kind == "content_block_delta" and event.delta.type == "input_json_delta":
            self.inputs[event.index] += event.delta.partial_json
        elif kind == "message_delta":
            seen["finish_reason"] = event.delta.stop_reason
            seen["stop_sequence"] = event.delta.stop_sequence
            for name, value in self.usage.items():
                counted = getattr(event.usage, name, None)
                self.usage[name] = value if counted is None else counted
        elif kind == "message_stop":
            seen["svc"] = (event.model_extra or {}).get("svc")

    def content(self) -> list[dict[str, Any]]:
        """The message's blocks as a client sends them back; the calls and usage to ``seen``."""
        for block, text in zip(self.blocks, self.inputs, strict=True):
            if block["type"] == "tool_use":
                block["input"] = json.loads(text or "{}")
                self.seen["calls"].append({"name": block["name"], "arguments": block["input"]})
        i, o = self.usage["input_tokens"], self.usage["output_tokens"]
        self.seen["usage"] = _usage(i, o, None if i is None or o is None else i + o)
        return [_sent_back(block) for block in self.blocks]


def _raw_turn(client: anthropic.Anthropic, tools: bool, **extra: Any) -> Turn:
    """The reference: ``messages.create(stream=True)``, read by ``_RawEvents``."""

    def turn(messages: list[dict[str, Any]]) -> tuple[Seen, list[dict[str, Any]]]:
        raw = _RawEvents(_seen())
        try:
            for event in client.messages.create(**_params(messages, tools, **extra), stream=True):
                raw.read(event)
        except anthropic.AnthropicError as error:
            raw.seen["error"] = _failure(error)
            return raw.seen, []
        return raw.seen, raw.content()

    return turn


def _stream_turn(client: anthropic.Anthropic, tools: bool) -> Turn:
    """``messages.stream()``, the SDK's helper: its text stream and final message (its
    ``message_stop`` event is rebuilt by the SDK, without svc's metadata)."""

    def turn(messages: list[dict[str, Any]]) -> tuple[Seen, list[dict[str, Any]]]:
        seen, content = _seen(), []
        try:
            with client.messages.stream(**_params(messages, tools)) as stream:
                text = "".join(stream.text_stream)
                content = _from_message(seen, stream.get_final_message())
            assert text == seen["text"]
        except anthropic.AnthropicError as error:
            seen["error"] = _failure(error)
        return seen, content

    return turn


def _async_turn(
    client: anthropic.AsyncAnthropic, tools: bool, loop: asyncio.AbstractEventLoop
) -> Turn:
    """``AsyncAnthropic``'s ``messages.stream()``, as ``_stream_turn``, on ``loop`` (one loop
    for every turn of a client)."""

    async def turn(messages: list[dict[str, Any]]) -> tuple[Seen, list[dict[str, Any]]]:
        seen, content = _seen(), []
        try:
            async with client.messages.stream(**_params(messages, tools)) as stream:
                text = "".join([piece async for piece in stream.text_stream])
                content = _from_message(seen, await stream.get_final_message())
            assert text == seen["text"]
        except anthropic.AnthropicError as error:
            seen["error"] = _failure(error)
        return seen, content

    return lambda messages: loop.run_until_complete(turn(messages))


def _round_trip(turn: Turn, scenario: str) -> Seen:
    """A scenario through one client's ``turn``: the text ones once; "tools" the question
    with the tool offered; "tool-result" that, then the assistant's content and a
    ``tool_result`` for each ``tool_use`` sent back."""
    if scenario not in TOOL_SCENARIOS:
        seen, _ = turn(SCENARIOS[scenario])
        return seen
    first, content = turn(TOOLS["ask"])
    if scenario == "tools" or first["error"] is not None:
        return first
    results = [
        {"type": "tool_result", "tool_use_id": block["id"], "content": TOOLS["result"]}
        for block in content
        if block["type"] == "tool_use"
    ]
    assert results, first
    answer, _ = turn(
        [
            *TOOLS["ask"],
            {"role": "assistant", "content": content},
            {"role": "user", "content": results},
        ]
    )
    return {**answer, "first": first}


def anthropic_python(root_url: str, key: str, scenario: str) -> Seen:
    with anthropic.Anthropic(base_url=root_url, api_key=key, max_retries=0) as client:
        return _round_trip(_raw_turn(client, scenario in TOOL_SCENARIOS), scenario)


def anthropic_python_stream(root_url: str, key: str, scenario: str) -> Seen:
    with anthropic.Anthropic(base_url=root_url, api_key=key, max_retries=0) as client:
        return _round_trip(_stream_turn(client, scenario in TOOL_SCENARIOS), scenario)


def anthropic_python_async(root_url: str, key: str, scenario: str) -> Seen:
    loop = asyncio.new_event_loop()
    client = anthropic.AsyncAnthropic(base_url=root_url, api_key=key, max_retries=0)
    try:
        return _round_trip(_async_turn(client, scenario in TOOL_SCENARIOS, loop), scenario)
    finally:
        loop.run_until_complete(client.close())
        loop.close()


def langchain_anthropic(root_url: str, key: str, scenario: str) -> Seen:
    """``ChatAnthropic`` streamed, the chunks added up into one message; on the tool
    scenarios ``bind_tools`` with a ``@tool``, then a ``ToolMessage`` with the result."""
    from langchain_anthropic import ChatAnthropic
    from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        """The weather in a city."""
        raise NotImplementedError  # never run: the test sends tools.json's result

    llm = ChatAnthropic(  # type: ignore[call-arg]
        model=MODEL,
        base_url=root_url,
        api_key=key,  # type: ignore[arg-type]
        max_retries=0,
    )
    model = llm.bind_tools([get_weather]) if scenario in TOOL_SCENARIOS else llm

    def turn(messages: list[Any]) -> tuple[Seen, Any]:
        seen, full = _seen(), None
        try:
            for chunk in model.stream(messages):
                full = chunk if full is None else full + chunk
        except anthropic.AnthropicError as error:
            seen["error"] = _failure(error)
            return seen, None
        assert full is not None
        seen["text"] = full.text
        seen["calls"] = [{"name": c["name"], "arguments": c["args"]} for c in full.tool_calls]
        seen["finish_reason"] = full.response_metadata.get("stop_reason")
        if full.usage_metadata is not None:
            u = full.usage_metadata
            seen["usage"] = _usage(u["input_tokens"], u["output_tokens"], u["total_tokens"])
        return seen, full

    if scenario not in TOOL_SCENARIOS:
        seen, _ = turn(SCENARIOS[scenario])
        return seen
    question: list[BaseMessage] = [HumanMessage(m["content"]) for m in TOOLS["ask"]]
    first, message = turn(question)
    if scenario == "tools" or first["error"] is not None:
        return first
    results = [ToolMessage(TOOLS["result"], tool_call_id=c["id"]) for c in message.tool_calls]
    answer, _ = turn([*question, message, *results])
    return {**answer, "first": first}


def _node(script: str, suffix: str = "") -> Runner:
    """A tests/clients/node script (test_clients.py's runner), given svc's root URL and
    ``suffix`` after it."""
    run = node_client(script)
    return lambda root_url, key, scenario: run(root_url + suffix, key, scenario)


# Every runner takes svc's root URL.
CLIENTS: dict[str, Runner] = {
    "anthropic-python": anthropic_python,
    "anthropic-python-stream": anthropic_python_stream,
    "anthropic-python-async": anthropic_python_async,
    "anthropic-node": _node("anthropic.js"),
    "vercel-anthropic": _node("vercel-anthropic.js", "/v1"),  # it posts to ${baseURL}/messages
    "langchain-anthropic": langchain_anthropic,
}
OTHERS = [name for name in CLIENTS if name != "anthropic-python"]
# The clients that show the svc metadata of message_stop (the SDK's stream helper rebuilds
# that event, and LangChain keeps nothing of it).
SHOWS_SVC = {"anthropic-python", "anthropic-node", "vercel-anthropic"}
# Each client's spelling of a stop: the Messages API's own, but the Vercel AI SDK's.
ENDS = {name: "end_turn" for name in CLIENTS} | {"vercel-anthropic": "stop"}
TOOL_ENDS = {name: "tool_use" for name in CLIENTS} | {"vercel-anthropic": "tool-calls"}
# Each client's exception for a 401.
AUTH_ERRORS = {name: "AuthenticationError" for name in CLIENTS} | {
    "vercel-anthropic": "APICallError",
    "langchain-anthropic": "AnthropicAuthenticationError",  # a subclass of the SDK's
}


@pytest.fixture(scope="module")
def run(server: Server) -> Callable[[str, str], Run]:
    """Runs a client on a scenario once, with an account of its own, for all the tests below."""
    runs: dict[tuple[str, str], Run] = {}

    def get(client: str, scenario: str) -> Run:
        if (client, scenario) not in runs:
            pid = server.new_account(FUNDS)
            key = server.new_key(pid)
            before = server.balance(pid)
            seen = CLIENTS[client](server.root_url, key, scenario)
            runs[client, scenario] = Run(seen, before - server.balance(pid))
        return runs[client, scenario]

    return get


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("client", OTHERS)
def test_client_sees_the_reference_text(
    run: Callable[[str, str], Run], client: str, scenario: str
) -> None:
    reference = run("anthropic-python", scenario).seen
    seen = run(client, scenario).seen
    assert reference["error"] is None, reference
    assert reference["text"]
    assert reference["finish_reason"] == "end_turn"
    assert seen["error"] is None, seen
    assert seen["text"] == reference["text"]
    assert seen["calls"] == []
    assert seen["finish_reason"] == ENDS[client]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_is_charged_what_svc_reports(
    run: Callable[[str, str], Run], client: str, scenario: str
) -> None:
    reference = run("anthropic-python", scenario)
    result = run(client, scenario)
    assert result.seen["error"] is None, result.seen
    assert result.charged == reference.seen["svc"]["credits_used"] >= 1
    if client in SHOWS_SVC:
        svc = result.seen["svc"]
        assert svc["requested_model"] == MODEL
        assert svc["credits_used"] == result.charged
    else:
        assert result.seen["svc"] is None


# Every client reads the usage of message_start and message_delta (LangChain only the
# delta's, which is the whole of it, as Anthropic sends).
@pytest.mark.parametrize("client", CLIENTS)
def test_client_sees_svcs_usage(run: Callable[[str, str], Run], client: str) -> None:
    reference = run("anthropic-python", "hello").seen["usage"]
    assert reference is not None
    assert reference["prompt"] >= 1
    assert reference["completion"] >= 1
    assert reference["total"] == reference["prompt"] + reference["completion"]
    assert run(client, "hello").seen["usage"] == reference


@pytest.mark.parametrize("client", CLIENTS)
def test_bad_key_is_each_clients_authentication_error(server: Server, client: str) -> None:
    seen = CLIENTS[client](server.root_url, BAD_KEY, "hello")
    error = seen["error"]
    assert error is not None, seen
    assert error["class"] == AUTH_ERRORS[client]
    assert error["status"] == 401
    assert seen["text"] == ""
    if "exception" in error:  # the Python clients': the SDK's own type
        assert isinstance(error["exception"], anthropic.AuthenticationError)


@pytest.mark.parametrize("client", CLIENTS)
def test_client_sees_the_reference_tool_call(run: Callable[[str, str], Run], client: str) -> None:
    reference = run("anthropic-python", "tools").seen
    assert reference["error"] is None, reference
    [call] = reference["calls"]
    assert call["name"] == TOOLS["tool"]["name"]
    assert set(call["arguments"]) == set(TOOLS["tool"]["parameters"]["required"])
    seen = run(client, "tools").seen
    assert seen["error"] is None, seen
    assert seen["calls"] == reference["calls"]
    assert seen["text"] == ""
    assert seen["finish_reason"] == TOOL_ENDS[client]


@pytest.mark.parametrize("client", CLIENTS)
def test_client_sees_the_answer_after_a_tool_result(
    run: Callable[[str, str], Run], client: str
) -> None:
    reference = run("anthropic-python", "tool-result").seen
    assert reference["error"] is None, reference
    assert reference["text"]
    seen = run(client, "tool-result").seen
    first = seen["first"]
    assert first["error"] is None, first
    assert first["calls"] == reference["first"]["calls"]
    assert first["finish_reason"] == TOOL_ENDS[client]
    assert seen["error"] is None, seen
    assert seen["calls"] == []
    assert seen["text"] == reference["text"]
    assert seen["finish_reason"] == ENDS[client]


@pytest.mark.parametrize("scenario", TOOL_SCENARIOS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_sees_svcs_usage_and_is_charged_for_tool_turns(
    run: Callable[[str, str], Run], client: str, scenario: str
) -> None:
    reference = _turns(run("anthropic-python", scenario).seen)
    result = run(client, scenario)
    turns = _turns(result.seen)
    assert [t["usage"] for t in turns] == [t["usage"] for t in reference]
    assert all(t["usage"]["completion"] >= 1 for t in turns)
    assert result.charged == sum(t["svc"]["credits_used"] for t in reference) >= len(turns)
    if client in SHOWS_SVC:
        assert sum(t["svc"]["credits_used"] for t in turns) == result.charged
    else:
        assert all(t["svc"] is None for t in turns)


# --- the Python SDK on the rest of the Messages API -----------------------------------------


def _png() -> bytes:
    """A 2 x 2 RGB PNG, made here."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))  # filter 0, two red pixels
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _charged_run(server: Server, **extra: Any) -> tuple[Seen, int]:
    """One reference turn on the question with ``extra`` parameters, from an account of its
    own: what the client saw and what the account was charged."""
    messages = extra.pop("messages", SCENARIOS["hello"])
    pid = server.new_account(FUNDS)
    before = server.balance(pid)
    with anthropic.Anthropic(
        base_url=server.root_url, api_key=server.new_key(pid), max_retries=0
    ) as client:
        seen, _ = _raw_turn(client, False, **extra)(messages)
    return seen, before - server.balance(pid)


def test_an_image_block_is_served_and_charged_what_svc_reports(server: Server) -> None:
    image = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(_png()).decode(),
        },
    }
    question = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    seen, charged = _charged_run(server, messages=question)
    text_only, _ = _charged_run(server, messages=[{"role": "user", "content": "What is this?"}])
    assert seen["error"] is None, seen
    assert seen["text"]
    assert seen["finish_reason"] == "end_turn"
    assert seen["usage"]["prompt"] >= text_only["usage"]["prompt"]
    assert charged == seen["svc"]["credits_used"] >= 1


def test_a_max_tokens_cut_is_max_tokens_and_charged_what_svc_reports(server: Server) -> None:
    whole, _ = _charged_run(server)
    seen, charged = _charged_run(server, max_tokens=3)
    assert whole["usage"]["completion"] > 3  # so 3 cuts it
    assert seen["error"] is None, seen
    assert seen["finish_reason"] == "max_tokens"
    assert seen["usage"]["completion"] == 3
    assert whole["text"].startswith(seen["text"])
    assert seen["text"] != whole["text"]
    assert charged == seen["svc"]["credits_used"] >= 1


def test_count_tokens_counts_the_prompt_and_charges_nothing(server: Server) -> None:
    pid = server.new_account(FUNDS)
    before = server.balance(pid)
    system, turns = _split(SCENARIOS["chat"])
    with anthropic.Anthropic(
        base_url=server.root_url, api_key=server.new_key(pid), max_retries=0
    ) as client:
        counted = client.messages.count_tokens(model=MODEL, system=system, messages=turns)  # type: ignore[arg-type]
    assert counted.input_tokens >= 1
    assert server.balance(pid) == before


@pytest.fixture(scope="module")
def mocked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, MockProcess]]:
    """A server whose svc-fast is the mock upstream (a real HTTP server that keeps the last
    request it was sent) as a chat provider, and svc-smart the mock as a provider that
    serves the Messages API; and the mock."""
    mock = start_in_subprocess(chunks=5)
    tmp = tmp_path_factory.mktemp("anthropic-mocked")
    models = tmp / "models.toml"
    models.write_text(
        f'[providers.mock]\nbase_url = "{mock.base_url}"\n'
        f'[providers.claude]\nbase_url = "{mock.base_url}"\nmessages_api = true\n'
        '[aliases.svc-fast]\nupstreams = [{ provider = "mock", model = "plain" }]\n'
        f'[aliases.{NATIVE}]\nupstreams = [{{ provider = "claude", model = "native" }}]\n'
    )
    srv = start_server(tmp, extra_env={"SVC_MODELS_FILE": str(models)})
    try:
        yield srv, mock
    finally:
        stop_process(srv.process)
        mock.stop()


def test_stop_sequences_reach_the_upstream_as_stop(
    mocked: tuple[Server, MockProcess],
) -> None:
    srv, mock = mocked
    seen, charged = _charged_run(srv, stop_sequences=["fox", "\n\nHuman:"])
    assert seen["error"] is None, seen
    last = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()["last_request"]
    assert last["stop"] == ["fox", "\n\nHuman:"]
    # the mock's words hold neither: its reply is whole, and ends as end_turn
    assert seen["text"] == "alpha bravo charlie delta echo "
    assert (seen["finish_reason"], seen["stop_sequence"]) == ("end_turn", None)
    assert charged == seen["svc"]["credits_used"] >= 1


@pytest.mark.parametrize("model", [MODEL, NATIVE], ids=["chat-vllm-style", "messages-native"])
def test_the_stop_sequence_an_upstream_matched_is_the_stop_reason(
    mocked: tuple[Server, MockProcess], model: str
) -> None:
    """The mock stops before "charlie" and says so: on chat as vLLM does (the finish
    chunk's ``stop_reason``), on the Messages API as Anthropic does; the SDK sees
    ``stop_sequence`` either way, in the raw events and in its stream helper's message."""
    srv, mock = mocked
    stops = ["\n\nHuman:", "charlie"]
    seen, charged = _charged_run(srv, model=model, stop_sequences=stops)
    assert seen["error"] is None, seen
    last = httpx.get(mock.base_url.removesuffix("/v1") + "/_stats").json()["last_request"]
    assert last["stop" if model == MODEL else "stop_sequences"] == stops
    assert seen["text"] == "alpha bravo "
    assert (seen["finish_reason"], seen["stop_sequence"]) == ("stop_sequence", "charlie")
    assert seen["usage"]["completion"] == 2
    assert charged == seen["svc"]["credits_used"] >= 1
    with anthropic.Anthropic(
        base_url=srv.root_url, api_key=srv.new_key(srv.new_account(FUNDS)), max_retries=0
    ) as client:
        params = _params(SCENARIOS["hello"], False, model=model, stop_sequences=stops)
        with client.messages.stream(**params) as stream:
            message = stream.get_final_message()
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "charlie")
    assert [block.text for block in message.content if block.type == "text"] == ["alpha bravo "]


def test_the_simulated_upstream_stops_before_a_stop_sequence(server: Server) -> None:
    whole, _ = _charged_run(server)
    stop = whole["text"].split(" ")[4]  # a word of the reply: it stops where that first is
    kept = whole["text"][: whole["text"].find(stop)]
    seen, charged = _charged_run(server, stop_sequences=["\n\nHuman:", stop])
    assert seen["error"] is None, seen
    assert seen["text"] == kept
    assert (seen["finish_reason"], seen["stop_sequence"]) == ("stop_sequence", stop)
    assert seen["usage"]["completion"] < whole["usage"]["completion"]
    assert charged == seen["svc"]["credits_used"] >= 1


def _error(server: Server, key: str) -> anthropic.APIStatusError:
    with (
        anthropic.Anthropic(base_url=server.root_url, api_key=key, max_retries=0) as client,
        pytest.raises(anthropic.APIStatusError) as raised,
        client.messages.stream(**_params(SCENARIOS["hello"], False)) as stream,
    ):
        stream.get_final_message()
    return raised.value


def test_no_credits_is_a_402_api_status_error(server: Server, keys: Keys) -> None:  # noqa: F811
    error = _error(server, keys.poor)
    assert error.status_code == 402
    assert isinstance(error, anthropic.PaymentRequiredError)
    assert error.body["error"]["type"] == "billing_error"  # type: ignore[index]


def test_the_daily_cap_is_a_429_rate_limit_error(server: Server, keys: Keys) -> None:  # noqa: F811
    error = _error(server, keys.capped)
    assert isinstance(error, anthropic.RateLimitError)
    assert error.status_code == 429
    assert error.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]


def test_a_failing_upstream_is_a_502_internal_server_error(down: Server) -> None:  # noqa: F811
    pid = down.new_account(FUNDS)
    before = down.balance(pid)
    error = _error(down, down.new_key(pid))
    assert isinstance(error, anthropic.InternalServerError)
    assert error.status_code == 502
    assert error.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert down.balance(pid) == before  # nothing was served: nothing charged


# --- Claude Code ----------------------------------------------------------------------------

# The binary the package's wrapper starts (npm ci --ignore-scripts leaves the package's own
# bin/claude.exe a placeholder: the wrapper finds the platform's binary, its optional
# dependency, itself).
CLAUDE = ["node", str(NODE_DIR / "node_modules/@anthropic-ai/claude-code/cli-wrapper.cjs")]


def claude_code_env(home: Path, base_url: str, key: str) -> dict[str, str]:
    """Claude Code on svc and nothing else: every model it may ask for (the main one, the
    small fast one, a subagent's) is svc's alias, its output limit within the alias's, and
    its telemetry, error reports, update checks and other nonessential traffic off."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "TERM": "dumb",
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": key,  # sent as x-api-key
        "ANTHROPIC_MODEL": MODEL,
        "ANTHROPIC_SMALL_FAST_MODEL": MODEL,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": MODEL,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": MODEL,
        "CLAUDE_CODE_SUBAGENT_MODEL": MODEL,
        # a model it does not know gets 32000, above svc-fast's output limit (16384)
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
    }


@pytest.mark.parametrize(
    ("prompt", "called"), [("say hi", []), ("Read notes.txt, then say hi", ["Read"])]
)
def test_claude_code_answers_a_prompt_and_is_charged_what_svc_reports(
    server: Server, tmp_path: Path, prompt: str, called: list[str]
) -> None:
    """``claude -p`` with its default tools: the simulated upstream answers a prompt that
    names none of them in text, and calls the one a prompt names (Claude Code runs it, here
    on a file that is not there, and sends the result; the upstream answers in text).
    ScheduleWakeup is left out (it waits for its wake-up) and Bash too (nothing here needs a
    command run)."""
    assert (NODE_DIR / "node_modules").is_dir(), "no tests/clients/node/node_modules: make install"
    pid = server.new_account(FUNDS)
    before = server.balance(pid)
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with RecordingProxy(server.root_url) as proxy:
        done = subprocess.run(
            [
                *CLAUDE,
                "-p",
                prompt,
                "--output-format",
                "json",
                "--no-session-persistence",
                "--disallowedTools",
                "ScheduleWakeup",
                "Bash",
            ],
            cwd=work,
            env=claude_code_env(home, proxy.url, server.new_key(pid)),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    assert done.returncode == 0, (done.stdout, done.stderr)
    result = json.loads(done.stdout)
    assert (result["type"], result["subtype"], result["is_error"]) == ("result", "success", False)
    assert result["result"].strip()
    exchanges = proxy.exchanges
    assert exchanges
    credits = 0
    for exchange in exchanges:
        assert (exchange.method, exchange.path.split("?")[0]) == ("POST", "/v1/messages")
        assert exchange.status == 200, exchange.answer
        assert exchange.json()["model"] == MODEL
        assert exchange.headers.get("x-api-key")
        events = exchange.events()
        assert events[-1]["type"] == "message_stop"
        assert events[-1]["svc"]["requested_model"] == MODEL
        credits += events[-1]["svc"]["credits_used"]
    texts = [
        "".join(
            e["delta"]["text"]
            for e in exchange.events()
            if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
        ).strip()
        for exchange in exchanges
    ]
    assert result["result"].strip() in texts  # svc's text is the answer
    calls = [
        e["content_block"]["name"]
        for exchange in exchanges
        for e in exchange.events()
        if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    ]
    assert calls == called
    assert before - server.balance(pid) == credits >= len(exchanges)
