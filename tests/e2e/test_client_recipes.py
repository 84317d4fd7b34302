"""The recipes of docs/clients.md for pydantic-ai, DSPy and the Vercel AI SDK's
``@ai-sdk/openai-compatible`` provider, run as written there against a real ``svc serve``,
and the doc's retry table for every client.

Each recipe streams text with the usage the client reads, and the structured-output ones
parse a schema's object (pydantic-ai: tool output and ``NativeOutput``; DSPy: a ``Predict``
through ``dspy.streamify``; openai-compatible: ``Output.object`` with
``supportsStructuredOutputs``). The simulated upstream answers the default aliases, so each
client's text, usage and charge can be compared with the official Python SDK's for the same
messages. Also checked: what a non-streaming call gets (served, charged, unreadable); the
Vercel AI SDK's JSON tool result (``output: {type: "json", value}``) on its three ways to
call svc; and how many requests each client sends when svc answers 402, a daily-cap 429 or a
502 (counted by svc's ``svc_requests_total``): the OpenAI SDKs (Python and Node), LangChain,
LiteLLM, pydantic-ai, DSPy and the Vercel AI SDK.

The Node recipes run as tests/clients/node/recipes.js, all at once in one fixture (the
Vercel SDK's retries of a 429 and a 502 wait 2 + 4 s each, so they overlap with the rest).
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
import pytest
from pydantic import BaseModel

from tests.e2e.conftest import ROOT, Server, start_server
from tests.support.processes import free_port
from tests.support.processes import stop_process as stop_server

# DSPy reads LiteLLM's price list for its model metadata and, unless told so, downloads it.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytestmark = pytest.mark.e2e

MODEL = "svc-fast"
NODE_DIR = ROOT / "tests" / "clients" / "node"
TOOLS: dict[str, Any] = json.loads((ROOT / "tests" / "clients" / "tools.json").read_text())
HELLO = "Say hello in five words."
CHAT_ROUTE = "/v1/chat/completions"


class City(BaseModel):
    name: str
    country: str
    population: int


@dataclass(frozen=True)
class Reference:
    """What the official Python SDK sees for the same messages: the text, the usage and the
    credits svc reports."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    credits: int


def reference(server: Server, messages: list[dict[str, Any]]) -> Reference:
    client = openai.OpenAI(
        base_url=server.base_url, api_key=server.new_key(server.new_account(100_000))
    )
    text, usage, svc = "", None, None
    with client:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=messages,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            text += "".join(c.delta.content or "" for c in chunk.choices)
            usage = chunk.usage or usage
            svc = (chunk.model_extra or {}).get("svc", svc)
    assert usage is not None
    assert svc is not None
    return Reference(text, usage.prompt_tokens, usage.completion_tokens, svc["credits_used"])


def requests_answered(server: Server, status: int) -> float:
    """How many chat completions svc has answered with ``status`` (every model label)."""
    return sum(
        value
        for (name, labels), value in server.metrics().items()
        if name == "svc_requests_total"
        and dict(labels).get("route") == CHAT_ROUTE
        and dict(labels).get("status") == str(status)
    )


@dataclass(frozen=True)
class Keys:
    """A key for each answer the retry tests need, on the shared server and a server whose
    only upstream is down."""

    poor: str  # an account with no credits: 402
    capped: str  # a key with a daily cap of 0: 429 daily_cap_exceeded
    down: str  # on ``down``: 502 upstream_unavailable, x-should-retry: true


@pytest.fixture(scope="module")
def down(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose svc-fast is served by one upstream nothing listens on: every completion
    is a 502 before the first token (nothing charged)."""
    tmp = tmp_path_factory.mktemp("down")
    models = tmp / "models.toml"
    models.write_text(
        "[providers.down]\n"
        f'base_url = "http://127.0.0.1:{free_port()}/v1"\n'
        'api_key_env = "DOWN_API_KEY"\n\n'
        "[aliases.svc-fast]\n"
        'upstreams = [{ provider = "down", model = "gone" }]\n'
    )
    srv = start_server(tmp, extra_env={"SVC_MODELS_FILE": str(models), "DOWN_API_KEY": "unused"})
    try:
        yield srv
    finally:
        stop_server(srv.process)


@pytest.fixture(scope="module")
def keys(server: Server, down: Server) -> Keys:
    return Keys(
        poor=server.new_key(server.new_account(0)),
        capped=server.new_key(server.new_account(100_000), daily_cap=0),
        down=down.new_key(down.new_account(100_000)),
    )


# --- the OpenAI SDK and the clients built on it ---------------------------------------------


def with_openai_sdk(base_url: str, key: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key=key)  # max_retries: the default, 2
    with client:
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": HELLO}], stream=True
        )
        for _ in stream:
            pass


def with_langchain(base_url: str, key: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=MODEL,
        base_url=base_url,
        api_key=key,  # type: ignore[arg-type]
        streaming=True,
    )
    for _ in llm.stream(HELLO):
        pass


def with_litellm(base_url: str, key: str) -> None:
    import litellm

    litellm.suppress_debug_info = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # LiteLLM's own (test_clients.py)
        stream = litellm.completion(
            model=f"openai/{MODEL}",
            api_base=base_url,
            api_key=key,
            messages=[{"role": "user", "content": HELLO}],
            stream=True,
        )
        for _ in stream:
            pass


@pytest.mark.parametrize(
    ("answer", "status", "attempts"), [("poor", 402, 1), ("capped", 429, 1), ("down", 502, 3)]
)
@pytest.mark.parametrize("client", [with_openai_sdk, with_langchain, with_litellm])
def test_openai_sdk_clients_follow_x_should_retry(
    server: Server,
    down: Server,
    keys: Keys,
    client: Callable[[str, str], None],
    answer: str,
    status: int,
    attempts: int,
) -> None:
    srv = down if answer == "down" else server
    before = requests_answered(srv, status)
    with pytest.raises(openai.APIError):  # each client's own error, all subclasses of it
        client(srv.base_url, getattr(keys, answer))
    assert requests_answered(srv, status) - before == attempts


# --- pydantic-ai ---------------------------------------------------------------------------


def pydantic_ai_model(base_url: str, key: str, sent: list[dict[str, Any]] | None = None) -> Any:
    """The recipe's model; with ``sent``, its OpenAI client records each request body."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    if sent is None:
        return OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key=key))

    async def record(request: httpx2.Request) -> None:
        sent.append(json.loads(request.content))

    client = openai.AsyncOpenAI(
        base_url=base_url,
        api_key=key,
        http_client=httpx2.AsyncClient(event_hooks={"request": [record]}),
    )
    return OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))


async def test_pydantic_ai_streams_text_with_usage(server: Server) -> None:
    from pydantic_ai import Agent

    ref = reference(server, [{"role": "user", "content": HELLO}])
    pid = server.new_account(100_000)
    sent: list[dict[str, Any]] = []
    agent = Agent(pydantic_ai_model(server.base_url, server.new_key(pid), sent))
    async with agent.run_stream(HELLO) as result:
        pieces = [text async for text in result.stream_text(delta=True, debounce_by=None)]
    assert len(pieces) > 1
    assert "".join(pieces) == ref.text
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens) == (ref.prompt_tokens, ref.completion_tokens)
    assert usage.requests == 1
    [body] = sent
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert 100_000 - server.balance(pid) == ref.credits


@pytest.mark.parametrize("mode", ["tool", "native"])
async def test_pydantic_ai_streams_a_validated_object(server: Server, mode: str) -> None:
    from pydantic_ai import Agent, NativeOutput

    pid = server.new_account(100_000)
    sent: list[dict[str, Any]] = []
    model = pydantic_ai_model(server.base_url, server.new_key(pid), sent)
    agent = Agent(model, output_type=City if mode == "tool" else NativeOutput(City))
    async with agent.run_stream("Describe one city.") as result:
        partials = [city async for city in result.stream_output(debounce_by=None)]
        city = await result.get_output()
    assert isinstance(city, City)
    assert city.name
    assert partials[-1] == city
    [body] = sent
    if mode == "tool":  # the default: the model calls a tool whose arguments are the object
        assert [t["function"]["name"] for t in body["tools"]] == ["final_result"]
        assert body["tool_choice"] == "required"
    else:
        assert body["response_format"]["type"] == "json_schema"
        schema = body["response_format"]["json_schema"]["schema"]
        assert set(schema["required"]) == {"name", "country", "population"}
    assert 100_000 - server.balance(pid) >= 1


async def test_pydantic_ai_run_without_streaming_is_charged_and_unreadable(
    server: Server,
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    pid = server.new_account(100_000)
    agent = Agent(pydantic_ai_model(server.base_url, server.new_key(pid)))
    with pytest.raises(UnexpectedModelBehavior, match="expected JSON data"):
        await agent.run(HELLO)
    charged = 100_000 - server.balance(pid)
    assert charged >= 1  # served and paid for, then thrown away

    # run() streams when it is given an event_stream_handler
    async def handler(ctx: Any, events: Any) -> None:
        async for _ in events:
            pass

    result = await agent.run(HELLO, event_stream_handler=handler)
    assert result.output == reference(server, [{"role": "user", "content": HELLO}]).text
    assert 100_000 - server.balance(pid) == 2 * charged


@pytest.mark.parametrize(
    ("answer", "status", "error", "attempts"),
    [
        ("poor", 402, "ModelQuotaExceededError", 1),  # x-should-retry: false
        ("capped", 429, "ModelRateLimitError", 1),  # x-should-retry: false
        ("down", 502, "ModelServerError", 3),  # the OpenAI SDK's 2 retries
    ],
)
async def test_pydantic_ai_retries_as_the_openai_sdk_does(
    server: Server, down: Server, keys: Keys, answer: str, status: int, error: str, attempts: int
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import ModelHTTPError

    srv = down if answer == "down" else server
    before = requests_answered(srv, status)
    agent = Agent(pydantic_ai_model(srv.base_url, getattr(keys, answer)))
    with pytest.raises(ModelHTTPError) as info:
        async with agent.run_stream(HELLO) as result:
            await result.get_output()
    assert type(info.value).__name__ == error
    assert info.value.status_code == status
    assert requests_answered(srv, status) - before == attempts


async def test_pydantic_ai_max_retries_setting_stops_the_retries(down: Server, keys: Keys) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import ModelHTTPError

    before = requests_answered(down, 502)
    agent = Agent(pydantic_ai_model(down.base_url, keys.down), model_settings={"max_retries": 0})
    with pytest.raises(ModelHTTPError):
        async with agent.run_stream(HELLO) as result:
            await result.get_output()
    assert requests_answered(down, 502) - before == 1


# --- DSPy ----------------------------------------------------------------------------------


def dspy_lm(base_url: str, key: str, **settings: Any) -> Any:
    import dspy

    # cache=False: DSPy would answer a repeated call from its cache, here the tests' own
    return dspy.LM(f"openai/{MODEL}", api_base=base_url, api_key=key, cache=False, **settings)


async def dspy_stream(lm: Any, question: str) -> tuple[list[Any], Any]:
    """The recipe: a Predict through dspy.streamify, listening to its answer field."""
    import dspy

    program = dspy.streamify(
        dspy.Predict("question -> answer"),
        stream_listeners=[dspy.streaming.StreamListener(signature_field_name="answer")],
    )
    chunks, prediction = [], None
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        async for item in program(question=question):
            if isinstance(item, dspy.streaming.StreamResponse):
                chunks.append(item)
            elif isinstance(item, dspy.Prediction):
                prediction = item
    return chunks, prediction


async def test_dspy_streamify_streams_a_predict_with_usage(server: Server) -> None:
    pid = server.new_account(100_000)
    lm = dspy_lm(server.base_url, server.new_key(pid))
    chunks, prediction = await dspy_stream(lm, "What is the capital of Norway?")
    assert prediction is not None
    assert isinstance(prediction.answer, str)
    assert prediction.answer
    assert chunks
    assert {c.signature_field_name for c in chunks} == {"answer"}
    assert chunks[-1].is_last_chunk
    # with the JSONAdapter the listener streams the field's JSON text, quotes included
    assert json.loads("".join(c.chunk for c in chunks)) == prediction.answer
    [call] = lm.history
    ref = reference(server, call["messages"])  # the same messages through the Python SDK
    usage = call["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (
        ref.prompt_tokens,
        ref.completion_tokens,
    )
    assert 100_000 - server.balance(pid) == ref.credits


async def test_dspy_answers_a_repeated_call_from_its_cache_free(server: Server) -> None:
    """dspy.LM's default cache=True (here in memory only, not in the home directory)."""
    import dspy

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    pid = server.new_account(100_000)
    lm = dspy.LM(f"openai/{MODEL}", api_base=server.base_url, api_key=server.new_key(pid))
    first_chunks, first = await dspy_stream(lm, "Which city is the capital of Norway?")
    charged = 100_000 - server.balance(pid)
    again_chunks, again = await dspy_stream(lm, "Which city is the capital of Norway?")
    assert first_chunks
    assert again_chunks == []  # no request: the cached prediction at once
    assert again is not None
    assert first is not None
    assert again.answer == first.answer
    assert charged >= 1
    assert 100_000 - server.balance(pid) == charged


def test_dspy_predict_without_streamify_is_charged_and_unreadable(server: Server) -> None:
    import dspy
    from dspy.utils.exceptions import LMProviderError

    pid = server.new_account(100_000)
    lm = dspy_lm(server.base_url, server.new_key(pid))
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()), pytest.raises(LMProviderError) as info:
        dspy.Predict("question -> answer")(question="What is the capital of Norway?")
    assert "is not JSON" in str(info.value)
    assert 100_000 - server.balance(pid) >= 1  # served and paid for, then thrown away


@pytest.fixture
def dspy_delays(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits DSPy computes between its attempts, recorded and not waited."""
    from dspy.clients import execution

    computed: list[float] = []
    delay = execution._delay

    def spy(exc: Exception, attempt: int) -> float:
        computed.append(delay(exc, attempt))
        return 0

    monkeypatch.setattr(execution, "_delay", spy)
    return computed


async def test_dspy_does_not_retry_a_402(
    server: Server, keys: Keys, dspy_delays: list[float]
) -> None:
    from dspy.utils.exceptions import LMBillingError

    before = requests_answered(server, 402)
    with pytest.raises(LMBillingError):
        await dspy_stream(dspy_lm(server.base_url, keys.poor), "hi")
    assert requests_answered(server, 402) - before == 1
    assert dspy_delays == []


async def test_dspy_retries_a_daily_cap_429_after_1_2_and_4_seconds(
    server: Server, keys: Keys, dspy_delays: list[float]
) -> None:
    """num_retries=3 (the default): DSPy retries every 429, here after its own backoff (the
    cap's 429 has no retry-after, which DSPy slept on until 00:00 UTC); the error then says
    when the cap resets."""
    from dspy.utils.exceptions import LMRateLimitError

    before = requests_answered(server, 429)
    with pytest.raises(LMRateLimitError):
        await dspy_stream(dspy_lm(server.base_url, keys.capped), "hi")
    assert requests_answered(server, 429) - before == 4
    assert dspy_delays == [1, 2, 4]

    # num_retries=0: one request, and no retry-after to wait for
    before = requests_answered(server, 429)
    with pytest.raises(LMRateLimitError) as info:
        await dspy_stream(dspy_lm(server.base_url, keys.capped, num_retries=0), "hi")
    assert requests_answered(server, 429) - before == 1
    assert len(dspy_delays) == 3
    assert info.value.retry_after is None
    assert "00:00:00Z" in str(info.value)


async def test_dspy_retries_a_502_after_1_2_and_4_seconds(
    down: Server, keys: Keys, dspy_delays: list[float]
) -> None:
    from dspy.utils.exceptions import LMServerError

    before = requests_answered(down, 502)
    with pytest.raises(LMServerError):
        await dspy_stream(dspy_lm(down.base_url, keys.down), "hi")
    assert requests_answered(down, 502) - before == 4
    assert dspy_delays == [1, 2, 4]


# --- Node: @ai-sdk/openai-compatible (and the OpenAI provider for tool results) -------------


@dataclass(frozen=True)
class NodeRun:
    seen: dict[str, Any]  # recipes.js's line: what the client saw and `sent`, the bodies
    charged: int


NODE_RUNS: dict[str, tuple[str, str, dict[str, str]]] = {
    # name: (recipe, which key, extra environment)
    "text": ("text", "funded", {}),
    "object": ("object", "funded", {}),
    "text-plain": ("text", "funded", {"SVC_PLAIN": "1"}),
    "object-plain": ("object", "funded", {"SVC_PLAIN": "1"}),
    "tool-json": ("tool-json", "funded", {}),
    "tool-json-openai": ("tool-json", "funded", {"SVC_PROVIDER": "openai"}),
    "tool-json-responses": ("tool-json", "funded", {"SVC_PROVIDER": "responses"}),
    "generate": ("generate", "funded", {}),
    "retry-402": ("retry", "poor", {}),
    "retry-429": ("retry", "capped", {}),
    "retry-502": ("retry", "down", {}),
    "retry-429-openai": ("retry", "capped", {"SVC_PROVIDER": "openai"}),  # @ai-sdk/openai
    "openai-retry-402": ("openai-retry", "poor", {}),
    "openai-retry-429": ("openai-retry", "capped", {}),
    "openai-retry-502": ("openai-retry", "down", {}),
}


@pytest.fixture(scope="module")
def node(server: Server, down: Server, keys: Keys) -> Callable[[str], NodeRun]:
    """Runs every Node recipe at once, each with an account of its own where it pays."""
    assert (NODE_DIR / "node_modules").is_dir(), "no tests/clients/node/node_modules: make install"
    started: dict[str, tuple[subprocess.Popen[str], str | None]] = {}
    for name, (recipe, key, env) in NODE_RUNS.items():
        pid = server.new_account(100_000) if key == "funded" else None
        secret = server.new_key(pid) if pid else getattr(keys, key)
        process = subprocess.Popen(
            ["node", "recipes.js", (down if key == "down" else server).base_url, MODEL, recipe],
            cwd=NODE_DIR,
            env={**os.environ, "SVC_API_KEY": secret, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started[name] = (process, pid)
    runs: dict[str, NodeRun] = {}
    for name, (process, pid) in started.items():
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        (line,) = out.splitlines()  # one JSON line, nothing else
        charged = 100_000 - server.balance(pid) if pid else 0
        runs[name] = NodeRun(json.loads(line), charged)
    return runs.__getitem__


def test_openai_compatible_streams_text_with_usage(
    server: Server, node: Callable[[str], NodeRun]
) -> None:
    ref = reference(server, [{"role": "user", "content": HELLO}])
    run = node("text")
    seen = run.seen
    assert seen["error"] is None
    assert seen["text"] == ref.text
    assert seen["finishReason"] == "stop"
    [body] = seen["sent"]
    assert body["stream_options"] == {"include_usage": True}  # includeUsage: true
    usage = seen["usage"]
    assert (usage["inputTokens"], usage["outputTokens"]) == (
        ref.prompt_tokens,
        ref.completion_tokens,
    )
    assert usage["totalTokens"] == ref.prompt_tokens + ref.completion_tokens
    assert seen["svc"]["credits_used"] == run.charged == ref.credits


def test_openai_compatible_streams_a_structured_object(node: Callable[[str], NodeRun]) -> None:
    run = node("object")
    seen = run.seen
    [body] = seen["sent"]
    format_ = body["response_format"]  # supportsStructuredOutputs: true
    assert format_["type"] == "json_schema"
    assert format_["json_schema"]["name"] == "city"
    assert format_["json_schema"]["strict"] is True
    assert seen["error"] is None
    assert seen["warnings"] == []
    city = seen["object"]  # parsed and checked against the zod schema by the SDK
    assert set(city) == {"name", "country", "population", "tags"}
    assert isinstance(city["population"], int)
    assert set(city["tags"]) <= {"coastal", "capital", "old"}
    assert seen["partials"] >= 1
    assert seen["usage"]["outputTokens"] >= 1
    assert run.charged >= 1


def test_openai_compatible_without_its_options(
    server: Server, node: Callable[[str], NodeRun]
) -> None:
    """Without includeUsage no usage is asked for, and it is shown all the same (svc's last
    chunk always carries it: what Mastra's OpenAI-compatible models read); without
    supportsStructuredOutputs the schema stays in the SDK (response_format json_object), and
    an answer the model wrote without it does not parse."""
    text = node("text-plain").seen
    assert text["error"] is None
    assert text["text"]
    assert "stream_options" not in text["sent"][0]
    ref = reference(server, [{"role": "user", "content": HELLO}])
    assert text["usage"] == {
        "inputTokens": ref.prompt_tokens,
        "outputTokens": ref.completion_tokens,
        "totalTokens": ref.prompt_tokens + ref.completion_tokens,
    }
    assert text["svc"]["credits_used"] == node("text-plain").charged
    run = node("object-plain")
    [body] = run.seen["sent"]
    assert body["response_format"] == {"type": "json_object"}
    [warning] = run.seen["warnings"]
    assert warning["feature"] == "responseFormat"
    assert run.seen["error"]["class"] == "NoObjectGeneratedError"
    assert run.charged >= 1


@pytest.mark.parametrize("name", ["tool-json", "tool-json-openai", "tool-json-responses"])
def test_vercel_json_tool_result_reaches_the_model(
    node: Callable[[str], NodeRun], name: str
) -> None:
    """AI SDK 5+'s tool result `output: {type: "json", value}` is sent as the value's JSON
    text, on Chat Completions (openai-compatible, @ai-sdk/openai's .chat) and on Responses."""
    run = node(name)
    seen = run.seen
    first = seen["first"]
    assert first is not None, seen
    assert first["finishReason"] == "tool-calls"
    [call] = first["toolCalls"]
    assert call["name"] == TOOLS["tool"]["name"]
    assert set(call["input"]) == {"city", "unit"}
    value = json.dumps(json.loads(TOOLS["result"]), separators=(",", ":"))
    answer = seen["sent"][-1]
    if name == "tool-json-responses":
        [result] = [i for i in answer["input"] if i.get("type") == "function_call_output"]
        assert result["output"] == value
    else:
        [result] = [m for m in answer["messages"] if m["role"] == "tool"]
        assert result["content"] == value
    assert seen["error"] is None
    assert seen["text"]
    assert seen["finishReason"] == "stop"
    assert first["svc"]["credits_used"] + seen["svc"]["credits_used"] == run.charged


def test_openai_compatible_generate_text_is_charged_and_unreadable(
    node: Callable[[str], NodeRun],
) -> None:
    run = node("generate")
    assert run.seen["error"]["class"] == "APICallError"
    assert run.seen["error"]["message"] == "Invalid JSON response"
    assert "stream" not in run.seen["sent"][0]
    assert run.charged >= 1  # served and paid for, then thrown away


@pytest.mark.parametrize(("status", "attempts"), [(402, 1), (429, 1), (502, 3)])
def test_node_openai_sdk_follows_x_should_retry(
    node: Callable[[str], NodeRun], status: int, attempts: int
) -> None:
    seen = node(f"openai-retry-{status}").seen
    assert seen["error"]["status"] == status
    assert len(seen["sent"]) == attempts


def test_vercel_does_not_retry_a_402(node: Callable[[str], NodeRun]) -> None:
    seen = node("retry-402").seen
    assert len(seen["sent"]) == 1
    assert seen["error"]["status"] == 402


@pytest.mark.parametrize(
    ("name", "status"), [("retry-429", 429), ("retry-502", 502), ("retry-429-openai", 429)]
)
def test_vercel_retries_a_daily_cap_429_and_a_502_twice(
    node: Callable[[str], NodeRun], name: str, status: int
) -> None:
    """maxRetries 2 (the default), after 2 and 4 s: x-should-retry is not read (the daily
    cap's 429 has no retry-after, so the SDK's backoff is all it waits)."""
    seen = node(name).seen
    assert len(seen["sent"]) == 3
    assert seen["error"]["class"] == "RetryError"
    assert seen["reason"] == "maxRetriesExceeded"
    assert seen["lastStatus"] == status
    assert 6 <= seen["seconds"] < 15
