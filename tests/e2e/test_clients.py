"""Real client libraries against a real granian server, each used the way its docs say.

Node: the official ``openai`` SDK, the Vercel AI SDK (``ai`` + ``@ai-sdk/openai``) and
LangChain JS (``@langchain/openai``'s ``ChatOpenAI``), run as
the small scripts in tests/clients/node (``make install`` installs their pinned packages).
Python: the official ``openai`` SDK (the reference every other client is compared with),
LangChain's ``ChatOpenAI`` and LiteLLM used as a library. Every client streams the same
scenario (tests/clients/scenarios.json) from svc-fast; the simulated upstream is deterministic,
so each must see the reference's text and cost the account the same credits.

Tools (tests/clients/tools.json): each client offers get_weather its own way (a JSON Schema, a
zod schema, a LangChain ``@tool``) on the question, and the simulated upstream calls it; in
"tool-result" the client then sends the call and the tool's result back and gets text. Each
must see the reference's call (name, arguments) and answer, each in its own spelling.
"""

from __future__ import annotations

import json
import os
import subprocess
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import openai
import pytest

from tests.e2e.conftest import ROOT, Server

# LiteLLM fetches its model price list from the internet when imported, unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytestmark = pytest.mark.e2e

MODEL = "svc-fast"
CLIENTS_DIR = ROOT / "tests" / "clients"
NODE_DIR = CLIENTS_DIR / "node"
SCENARIOS: dict[str, list[dict[str, str]]] = json.loads(
    (CLIENTS_DIR / "scenarios.json").read_text()
)
TOOLS: dict[str, Any] = json.loads((CLIENTS_DIR / "tools.json").read_text())
TOOL_SCENARIOS = ["tools", "tool-result"]
BAD_KEY = "svc_live_" + "x" * 50

# What one client saw: text, finish_reason, usage ({prompt, completion, total} or None), svc
# (the metadata on svc's last chunk, None where the client does not show it) and error (None,
# or {class, status} and for the Python clients the exception itself). With tools also calls
# (each {name, arguments}: the arguments parsed) and, after a tool result, first: what the
# client saw of the turn that called the tool (the other keys are then the answer's).
Seen = dict[str, Any]
Runner = Callable[[str, str, str], Seen]  # (base URL, API key, scenario) -> what it saw


def _usage(prompt: Any, completion: Any, total: Any) -> dict[str, int] | None:
    if prompt is None and completion is None and total is None:
        return None
    return {"prompt": prompt, "completion": completion, "total": total}


def _failure(error: Exception) -> dict[str, Any]:
    return {
        "class": type(error).__name__,
        "status": getattr(error, "status_code", None),
        "exception": error,
    }


def openai_python(base_url: str, key: str, scenario: str) -> Seen:
    messages = SCENARIOS[scenario]
    seen: Seen = {"text": "", "finish_reason": None, "usage": None, "svc": None, "error": None}
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    try:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=messages,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            for choice in chunk.choices:
                seen["text"] += choice.delta.content or ""
                seen["finish_reason"] = choice.finish_reason or seen["finish_reason"]
            if chunk.usage is not None:
                u = chunk.usage
                seen["usage"] = _usage(u.prompt_tokens, u.completion_tokens, u.total_tokens)
            seen["svc"] = (chunk.model_extra or {}).get("svc", seen["svc"])
    except openai.OpenAIError as error:
        seen["error"] = _failure(error)
    finally:
        client.close()
    return seen


def langchain(base_url: str, key: str, scenario: str) -> Seen:
    messages = SCENARIOS[scenario]
    from langchain_core.exceptions import LangChainException
    from langchain_openai import ChatOpenAI

    seen: Seen = {"text": "", "finish_reason": None, "usage": None, "svc": None, "error": None}
    llm = ChatOpenAI(
        model=MODEL,
        base_url=base_url,
        api_key=key,  # type: ignore[arg-type]
        streaming=True,
        stream_usage=True,
        max_retries=0,
    )
    try:
        full = None
        for chunk in llm.stream(messages):
            full = chunk if full is None else full + chunk
    except (openai.OpenAIError, LangChainException) as error:
        seen["error"] = _failure(error)
        return seen
    assert full is not None
    seen["text"] = full.content
    seen["finish_reason"] = full.response_metadata.get("finish_reason")
    if full.usage_metadata is not None:
        u = full.usage_metadata
        seen["usage"] = _usage(u["input_tokens"], u["output_tokens"], u["total_tokens"])
    return seen


def litellm_client(base_url: str, key: str, scenario: str) -> Seen:
    messages = SCENARIOS[scenario]
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banner on errors
    seen: Seen = {"text": "", "finish_reason": None, "usage": None, "svc": None, "error": None}
    try:
        with warnings.catch_warnings():
            # LiteLLM reads a Pydantic attribute the deprecated way while it puts a streamed usage
            # object together (its code, not svc's); the suite turns warnings into errors, which
            # LiteLLM's stream handler would report as a failed stream.
            warnings.simplefilter("ignore", DeprecationWarning)
            stream = litellm.completion(
                model=f"openai/{MODEL}",
                api_base=base_url,
                api_key=key,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
                max_retries=0,
            )
            for chunk in stream:
                for choice in chunk.choices:
                    seen["text"] += choice.delta.content or ""
                    seen["finish_reason"] = choice.finish_reason or seen["finish_reason"]
                u = getattr(chunk, "usage", None)
                if u is not None:
                    seen["usage"] = _usage(u.prompt_tokens, u.completion_tokens, u.total_tokens)
    except openai.OpenAIError as error:  # litellm's errors derive from the openai SDK's
        seen["error"] = _failure(error)
    return seen


def _seen() -> Seen:
    return {
        "text": "",
        "finish_reason": None,
        "calls": [],
        "usage": None,
        "svc": None,
        "error": None,
        "first": None,
    }


def _openai_tool(name: str) -> dict[str, Any]:
    """tools.json's tool in the Chat Completions ``tools`` format."""
    assert name == TOOLS["tool"]["name"]
    return {"type": "function", "function": TOOLS["tool"]}


def _answer_messages(first: Seen, calls: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The question, the assistant's tool calls (as streamed: id, name, arguments text) and a
    result for each: what a client sends back after running the tools."""
    assert first["error"] is None, first
    assert calls, first
    return [
        *TOOLS["ask"],
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ],
        },
        *({"role": "tool", "tool_call_id": c["id"], "content": TOOLS["result"]} for c in calls),
    ]


def _streamed_calls(pieces: list[Any]) -> list[dict[str, str]]:
    """Tool calls put together from their streamed pieces (``delta.tool_calls``)."""
    calls: dict[int, dict[str, str]] = {}
    for piece in pieces:
        call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
        call["id"] += piece.id or ""
        call["name"] += (piece.function and piece.function.name) or ""
        call["arguments"] += (piece.function and piece.function.arguments) or ""
    return [calls[i] for i in sorted(calls)]


def _parsed(calls: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in calls]


def openai_python_tools(base_url: str, key: str, scenario: str) -> Seen:
    """The reference for the tool scenarios: the Python SDK's round trip."""
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    tools = [_openai_tool(TOOLS["tool"]["name"])]

    def turn(messages: list[dict[str, Any]]) -> tuple[Seen, list[dict[str, str]]]:
        seen, pieces = _seen(), []
        try:
            stream = client.chat.completions.create(
                model=MODEL,
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
            for chunk in stream:
                for choice in chunk.choices:
                    seen["text"] += choice.delta.content or ""
                    pieces += choice.delta.tool_calls or []
                    seen["finish_reason"] = choice.finish_reason or seen["finish_reason"]
                if chunk.usage is not None:
                    u = chunk.usage
                    seen["usage"] = _usage(u.prompt_tokens, u.completion_tokens, u.total_tokens)
                seen["svc"] = (chunk.model_extra or {}).get("svc", seen["svc"])
        except openai.OpenAIError as error:
            seen["error"] = _failure(error)
        calls = _streamed_calls(pieces)
        seen["calls"] = _parsed(calls)
        return seen, calls

    try:
        first, calls = turn(TOOLS["ask"])
        if scenario == "tools":
            return first
        answer, _ = turn(_answer_messages(first, calls))
        return {**answer, "first": first}
    finally:
        client.close()


def langchain_tools(base_url: str, key: str, scenario: str) -> Seen:
    """LangChain's agent loop by hand: ``bind_tools`` with a ``@tool``, the streamed chunks
    added up into one message, then a ``ToolMessage`` with the result."""
    from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        """The weather in a city."""
        raise NotImplementedError  # never run: the test sends tools.json's result

    llm = ChatOpenAI(
        model=MODEL,
        base_url=base_url,
        api_key=key,  # type: ignore[arg-type]
        streaming=True,
        stream_usage=True,
        max_retries=0,
    ).bind_tools([get_weather])

    def turn(messages: list[BaseMessage]) -> tuple[Seen, Any]:
        seen, full = _seen(), None
        for chunk in llm.stream(messages):
            full = chunk if full is None else full + chunk
        assert full is not None
        seen["text"] = full.content
        seen["calls"] = [{"name": c["name"], "arguments": c["args"]} for c in full.tool_calls]
        seen["finish_reason"] = full.response_metadata.get("finish_reason")
        if full.usage_metadata is not None:
            u = full.usage_metadata
            seen["usage"] = _usage(u["input_tokens"], u["output_tokens"], u["total_tokens"])
        return seen, full

    question: list[BaseMessage] = [HumanMessage(m["content"]) for m in TOOLS["ask"]]
    first, message = turn(question)
    if scenario == "tools":
        return first
    results = [ToolMessage(TOOLS["result"], tool_call_id=c["id"]) for c in message.tool_calls]
    answer, _ = turn([*question, message, *results])
    return {**answer, "first": first}


def litellm_tools(base_url: str, key: str, scenario: str) -> Seen:
    import litellm

    litellm.suppress_debug_info = True

    def turn(messages: list[dict[str, Any]]) -> tuple[Seen, list[dict[str, str]]]:
        seen, pieces = _seen(), []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # as in litellm_client
            stream = litellm.completion(
                model=f"openai/{MODEL}",
                api_base=base_url,
                api_key=key,
                messages=messages,
                tools=[_openai_tool(TOOLS["tool"]["name"])],
                stream=True,
                stream_options={"include_usage": True},
                max_retries=0,
                # LiteLLM 1.107.0rc2 routes any request with tools through its MCP gateway
                # check, which imports the `mcp` package (its optional "mcp"/"proxy" extra,
                # not installed here): without this private switch it raises
                # ModuleNotFoundError before sending anything. Nothing to do with svc.
                _skip_mcp_handler=True,
            )
            for chunk in stream:
                for choice in chunk.choices:
                    seen["text"] += choice.delta.content or ""
                    pieces += choice.delta.tool_calls or []
                    seen["finish_reason"] = choice.finish_reason or seen["finish_reason"]
                u = getattr(chunk, "usage", None)
                if u is not None:
                    seen["usage"] = _usage(u.prompt_tokens, u.completion_tokens, u.total_tokens)
        calls = _streamed_calls(pieces)
        seen["calls"] = _parsed(calls)
        return seen, calls

    first, calls = turn(TOOLS["ask"])
    if scenario == "tools":
        return first
    answer, _ = turn(_answer_messages(first, calls))
    return {**answer, "first": first}


def node_client(script: str, api: Literal["chat", "responses"] = "chat") -> Runner:
    """A runner for one tests/clients/node script (it reads the scenario file itself), on the
    Chat Completions API or, for a client that has both, the Responses API."""

    def run(base_url: str, key: str, scenario: str) -> Seen:
        assert (NODE_DIR / "node_modules").is_dir(), (
            "no tests/clients/node/node_modules: make install"
        )
        done = subprocess.run(
            ["node", script, base_url, MODEL, scenario],
            cwd=NODE_DIR,
            env={**os.environ, "SVC_API_KEY": key, "SVC_OPENAI_API": api},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        (line,) = done.stdout.splitlines()  # one JSON line, nothing else
        return _node_seen(json.loads(line))

    return run


def _node_seen(raw: dict[str, Any]) -> Seen:
    usage = raw["usage"] or {}
    return {
        "text": raw["text"],
        "finish_reason": raw["finishReason"],  # both spell it "stop", like the wire
        "calls": [
            # the Node SDK gives the arguments' JSON text, the Vercel AI SDK its parsed input
            {
                "name": c["name"],
                "arguments": c["input"] if "input" in c else json.loads(c["arguments"]),
            }
            for c in raw.get("toolCalls") or []
        ],
        "usage": _usage(  # the OpenAI SDK's names, the Vercel AI SDK's, LangChain JS's
            usage.get("prompt_tokens", usage.get("inputTokens", usage.get("input_tokens"))),
            usage.get("completion_tokens", usage.get("outputTokens", usage.get("output_tokens"))),
            usage.get("total_tokens", usage.get("totalTokens")),
        ),
        "svc": raw["svc"],
        "error": raw["error"],
        "first": raw.get("first") and _node_seen(raw["first"]),
    }


CLIENTS: dict[str, Runner] = {
    "openai-python": openai_python,
    "openai-node": node_client("openai.js"),
    "vercel-ai": node_client("vercel-ai.js"),
    # the provider's default model, openai("svc-fast"), calls POST /v1/responses
    "vercel-ai-responses": node_client("vercel-ai.js", "responses"),
    "langchain-js": node_client("langchain.js"),
    "langchain": langchain,
    "litellm": litellm_client,
}
# The same clients on the tool scenarios (the Node scripts take those too).
TOOL_CLIENTS: dict[str, Runner] = {
    **CLIENTS,
    "openai-python": openai_python_tools,
    "langchain": langchain_tools,
    "litellm": litellm_tools,
}
# The clients that show the svc metadata of the last chunk (LangChain and LiteLLM drop it).
SHOWS_SVC = {"openai-python", "openai-node", "vercel-ai", "vercel-ai-responses"}
OTHERS = [name for name in CLIENTS if name != "openai-python"]


@dataclass(frozen=True)
class Run:
    seen: Seen
    charged: int  # the account's balance before the request minus after it


@pytest.fixture(scope="module")
def run(server: Server) -> Callable[[str, str], Run]:
    """Runs a client on a scenario once, with an account of its own, for all the tests below."""
    runs: dict[tuple[str, str], Run] = {}

    def get(client: str, scenario: str) -> Run:
        if (client, scenario) not in runs:
            pid = server.new_account(100_000)
            key = server.new_key(pid)
            before = server.balance(pid)
            runner = (TOOL_CLIENTS if scenario in TOOL_SCENARIOS else CLIENTS)[client]
            seen = runner(server.base_url, key, scenario)
            runs[client, scenario] = Run(seen, before - server.balance(pid))
        return runs[client, scenario]

    return get


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("client", OTHERS)
def test_client_sees_the_reference_text(
    run: Callable[[str, str], Run], client: str, scenario: str
) -> None:
    reference = run("openai-python", scenario).seen
    seen = run(client, scenario).seen
    assert reference["error"] is None
    assert reference["text"]
    assert seen["error"] is None
    assert seen["text"] == reference["text"]
    assert seen["finish_reason"] == "stop"


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_is_charged_what_svc_reports(
    run: Callable[[str, str], Run], client: str, scenario: str
) -> None:
    reference = run("openai-python", scenario)
    result = run(client, scenario)
    assert result.seen["error"] is None
    assert result.charged == reference.seen["svc"]["credits_used"] >= 1
    if client in SHOWS_SVC:
        svc = result.seen["svc"]
        assert svc["requested_model"] == MODEL
        assert svc["credits_used"] == result.charged
    else:
        assert result.seen["svc"] is None


# Every client reads OpenAI's usage object on svc's metadata chunk (each asks for it).
@pytest.mark.parametrize("client", CLIENTS)
def test_client_sees_svcs_usage(run: Callable[[str, str], Run], client: str) -> None:
    reference = run("openai-python", "hello").seen["usage"]
    assert reference is not None
    assert reference["prompt"] >= 1
    assert reference["completion"] >= 1
    assert reference["total"] == reference["prompt"] + reference["completion"]
    assert run(client, "hello").seen["usage"] == reference


# Each client's own error type for a 401 (LangChain raises its subclass of openai's).
AUTH_ERRORS = {
    "openai-python": "AuthenticationError",
    "openai-node": "AuthenticationError",
    "vercel-ai": "APICallError",
    "vercel-ai-responses": "APICallError",
    "langchain-js": "AuthenticationError",
    "langchain": "OpenAIAuthenticationError",
    "litellm": "AuthenticationError",
}


@pytest.mark.parametrize("client", CLIENTS)
def test_bad_key_is_each_clients_authentication_error(server: Server, client: str) -> None:
    seen = CLIENTS[client](server.base_url, BAD_KEY, "hello")
    error = seen["error"]
    assert error is not None, seen
    assert error["class"] == AUTH_ERRORS[client]
    assert error["status"] == 401
    assert seen["text"] == ""
    exception = error.get("exception")
    if client == "langchain":
        from langchain_core.exceptions import ModelAuthenticationError

        assert isinstance(exception, ModelAuthenticationError)
        assert isinstance(exception, openai.AuthenticationError)
    elif client == "litellm":
        import litellm

        assert isinstance(exception, litellm.AuthenticationError)


# Each client's spelling of the finish after a tool call.
TOOL_FINISH = {
    "openai-python": "tool_calls",
    "openai-node": "tool_calls",
    "vercel-ai": "tool-calls",
    "vercel-ai-responses": "tool-calls",
    "langchain-js": "tool_calls",
    "langchain": "tool_calls",
    "litellm": "tool_calls",
}


def _turns(seen: Seen) -> list[Seen]:
    """The turns a run saw: the tool call's, then the answer's when it sent a result."""
    return [seen["first"], seen] if seen["first"] is not None else [seen]


@pytest.mark.parametrize("client", CLIENTS)
def test_client_sees_the_reference_tool_call(run: Callable[[str, str], Run], client: str) -> None:
    reference = run("openai-python", "tools").seen
    assert reference["error"] is None
    [call] = reference["calls"]
    assert call["name"] == TOOLS["tool"]["name"]
    assert set(call["arguments"]) == set(TOOLS["tool"]["parameters"]["required"])
    seen = run(client, "tools").seen
    assert seen["error"] is None
    assert seen["calls"] == reference["calls"]
    assert seen["text"] == ""
    assert seen["finish_reason"] == TOOL_FINISH[client]


@pytest.mark.parametrize("client", CLIENTS)
def test_client_sees_the_answer_after_a_tool_result(
    run: Callable[[str, str], Run], client: str
) -> None:
    reference = run("openai-python", "tool-result").seen
    assert reference["error"] is None
    assert reference["text"]
    seen = run(client, "tool-result").seen
    first = seen["first"]
    assert first["error"] is None
    assert first["calls"] == reference["first"]["calls"]
    assert first["finish_reason"] == TOOL_FINISH[client]
    assert seen["error"] is None
    assert seen["calls"] == []
    assert seen["text"] == reference["text"]
    assert seen["finish_reason"] == "stop"


@pytest.mark.parametrize("scenario", TOOL_SCENARIOS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_sees_svcs_usage_and_is_charged_for_tool_turns(
    run: Callable[[str, str], Run], client: str, scenario: str
) -> None:
    reference = _turns(run("openai-python", scenario).seen)
    result = run(client, scenario)
    turns = _turns(result.seen)
    assert [t["usage"] for t in turns] == [t["usage"] for t in reference]
    assert all(t["usage"]["completion"] >= 1 for t in turns)
    assert result.charged == sum(t["svc"]["credits_used"] for t in reference) >= len(turns)
    if client in SHOWS_SVC:
        assert sum(t["svc"]["credits_used"] for t in turns) == result.charged
    else:
        assert all(t["svc"] is None for t in turns)


def langchain_unasked(base_url: str, key: str, scenario: str) -> Seen:
    """LangChain's ``ChatOpenAI`` as most code builds it for a base URL of its own: no
    ``stream_usage``, so it asks for no usage (its bodies are kept in ``sent``)."""
    import httpx
    from langchain_openai import ChatOpenAI

    sent: list[dict[str, Any]] = []
    hooks = {"request": [lambda request: sent.append(json.loads(request.content))]}
    with httpx.Client(event_hooks=hooks) as http:
        llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key=key, http_client=http)  # type: ignore[arg-type]
        full = None
        for chunk in llm.stream(SCENARIOS[scenario]):
            full = chunk if full is None else full + chunk
    assert full is not None
    u = full.usage_metadata
    usage = None if u is None else _usage(u["input_tokens"], u["output_tokens"], u["total_tokens"])
    return {"text": full.content, "usage": usage, "sent": sent}


def openai_python_unasked(base_url: str, key: str, scenario: str) -> Seen:
    """The openai SDK's stream without ``stream_options``: the usage of its last chunk, and
    every chunk's (None on all but that one)."""
    with openai.OpenAI(base_url=base_url, api_key=key, max_retries=0) as client:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=SCENARIOS[scenario],  # type: ignore[arg-type]
            stream=True,
        )
        chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usages = [
        None if u is None else _usage(u.prompt_tokens, u.completion_tokens, u.total_tokens)
        for u in (c.usage for c in chunks)
    ]
    return {"text": text, "usage": usages[-1], "usages": usages}


@pytest.mark.parametrize("runner", [openai_python_unasked, langchain_unasked])
def test_client_sees_usage_without_asking(
    server: Server, run: Callable[[str, str], Run], runner: Runner
) -> None:
    """Usage needs no ``stream_options.include_usage`` (as on OpenRouter): a client that does
    not ask reads the same usage on the last chunk as one that does, counted once."""
    reference = run("openai-python", "hello").seen
    key = server.new_key(server.new_account(100_000))
    seen = runner(server.base_url, key, "hello")
    assert all("stream_options" not in body for body in seen.get("sent", []))
    assert seen["text"] == reference["text"]
    assert seen["usage"] == reference["usage"] is not None
    if "usages" in seen:  # on the last chunk alone
        usages = seen["usages"]
        assert [u is not None for u in usages] == [False] * (len(usages) - 1) + [True]
