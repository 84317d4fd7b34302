"""The recipes of docs/clients.md for instructor, LlamaIndex's ``OpenAILike`` and AutoGen, run
as written there against a real ``svc serve``, with their retries.

None installs beside requirements/test.lock (instructor wants jiter<0.15, the pinned openai 3
jiter>=0.16; llama-index-llms-openai wants openai<3, openai-agents openai>=3; autogen-core pins
protobuf~=5.29, runtime.lock has protobuf 7), so they live in a virtualenv of their own,
.venv/clients (requirements/clients.lock, `make install`; SVC_CLIENTS_VENV names another), and
the recipes are scripts that its interpreter runs: tests/clients/python/instructor_recipes.py,
llamaindex_recipes.py and autogen_recipes.py, all at once in one fixture, each printing one
JSON line a recipe of what its client saw and the request bodies it sent.

Every body a recipe sent is sent again here with the official Python SDK (the reference): the
simulated upstream answers the same body with the same text, so the recipe's text, object,
usage and charge are checked against it. Also checked: what a non-streaming call gets (served,
charged, unreadable), and how many requests each client sends on a 402, a daily-cap 429 and a
502 (a second server whose only upstream is down).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.conftest import ROOT, Server, start_server
from tests.support.processes import free_port
from tests.support.processes import stop_process as stop_server

pytestmark = pytest.mark.e2e

MODEL = "svc-fast"
CLIENTS_VENV = Path(os.environ.get("SVC_CLIENTS_VENV", ROOT / ".venv" / "clients"))
CLIENTS_PYTHON = CLIENTS_VENV / "bin" / "python"
SCRIPTS = ROOT / "tests" / "clients" / "python"
PERSON_FIELDS = {"name", "age", "role", "address", "tags"}
FUNDS = 100_000

RUNS: dict[str, tuple[str, str, str, dict[str, str]]] = {
    # name: (script, recipe, which key, settings)
    "instructor-tools": ("instructor", "partial", "funded", {"mode": "tools"}),
    "instructor-json": ("instructor", "partial", "funded", {"mode": "json"}),
    "instructor-md_json": ("instructor", "partial", "funded", {"mode": "md_json"}),
    "instructor-json_schema": ("instructor", "partial", "funded", {"mode": "json_schema"}),
    "instructor-stream": ("instructor", "stream", "funded", {}),
    "instructor-iterable": ("instructor", "iterable", "funded", {}),
    "instructor-create": ("instructor", "create", "funded", {}),
    "instructor-create-once": ("instructor", "create", "funded", {"max_retries": "0"}),
    "instructor-full-stream": ("instructor", "full-stream", "funded", {"max_retries": "0"}),
    "instructor-validation": ("instructor", "validation", "funded", {"max_retries": "1"}),
    "instructor-402": ("instructor", "partial", "poor", {}),
    "instructor-429": ("instructor", "partial", "capped", {}),
    "instructor-502": ("instructor", "partial", "down", {}),
    "instructor-502-once": ("instructor", "partial", "down", {"http_retries": "0"}),
    "llamaindex-stream-chat": ("llamaindex", "stream-chat", "funded", {}),
    "llamaindex-stream-chat-plain": ("llamaindex", "stream-chat", "funded", {"plain": "1"}),
    "llamaindex-astream-chat": ("llamaindex", "astream-chat", "funded", {}),
    "llamaindex-stream-complete": ("llamaindex", "stream-complete", "funded", {}),
    "llamaindex-not-chat": ("llamaindex", "stream-complete", "funded", {"chat_model": "0"}),
    "llamaindex-structured": ("llamaindex", "structured", "funded", {}),
    "llamaindex-chat": ("llamaindex", "chat", "funded", {}),
    "llamaindex-complete": ("llamaindex", "complete", "funded", {}),
    "llamaindex-402": ("llamaindex", "stream-chat", "poor", {}),
    "llamaindex-429": ("llamaindex", "stream-chat", "capped", {}),
    "llamaindex-502": ("llamaindex", "stream-chat", "down", {}),
    "llamaindex-502-once": ("llamaindex", "stream-chat", "down", {"max_retries": "0"}),
    "llamaindex-chat-429": ("llamaindex", "chat-retry", "capped", {}),
    "llamaindex-chat-502": ("llamaindex", "chat-retry", "down", {}),
    "autogen-stream": ("autogen", "stream", "funded", {}),
    "autogen-create": ("autogen", "create", "funded", {}),
    "autogen-agent": ("autogen", "agent", "funded", {}),
    "autogen-agent-reflect": ("autogen", "agent", "funded", {"reflect": "1"}),
    "autogen-402": ("autogen", "stream", "poor", {}),
    "autogen-429": ("autogen", "stream", "capped", {}),
    "autogen-401": ("autogen", "stream", "unknown", {}),
    "autogen-502": ("autogen", "stream", "down", {}),
    "autogen-502-once": ("autogen", "stream", "down", {"max_retries": "0"}),
}


@dataclass(frozen=True)
class Run:
    seen: dict[str, Any]  # the script's line: what the client saw, and `sent`, the bodies
    charged: int  # credits the run's own account paid (0 for the shared keys)


@dataclass(frozen=True)
class Reference:
    """What the official Python SDK sees for the same request body."""

    text: str
    arguments: str  # the tool calls' arguments, as streamed
    prompt_tokens: int
    completion_tokens: int
    credits: int

    def object(self) -> Any:
        """The JSON the model answered: a tool call's arguments, or the text's object (in a
        Markdown code block in instructor's MD_JSON mode)."""
        if self.arguments:
            return json.loads(self.arguments)
        return json.loads(self.text[self.text.index("{") : self.text.rindex("}") + 1])


def reference(server: Server, body: dict[str, Any]) -> Reference:
    request = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    client = openai.OpenAI(
        base_url=server.base_url, api_key=server.new_key(server.new_account(FUNDS))
    )
    text, arguments, usage, svc = "", "", None, None
    with client:
        stream = client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
        for chunk in stream:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or []:
                    arguments += (call.function and call.function.arguments) or ""
            usage = chunk.usage or usage
            svc = (chunk.model_extra or {}).get("svc", svc)
    assert usage is not None
    assert svc is not None
    return Reference(
        text, arguments, usage.prompt_tokens, usage.completion_tokens, svc["credits_used"]
    )


@dataclass(frozen=True)
class Keys:
    poor: str  # an account with no credits: 402
    capped: str  # a key with a daily cap of 0: 429 daily_cap_exceeded
    down: str  # on ``down``: 502 upstream_unavailable, x-should-retry: true
    unknown: str = "sk-svc-not-a-key"  # 401


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
def runs(
    server: Server, down: Server, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Run]:
    """Runs every recipe, each with an account of its own where it pays: one process a script,
    both at once, which reads its recipes on stdin and prints a line for each."""
    assert CLIENTS_PYTHON.exists(), f"no {CLIENTS_PYTHON}: make install"
    keys = Keys(
        poor=server.new_key(server.new_account(0)),
        capped=server.new_key(server.new_account(FUNDS), daily_cap=0),
        down=down.new_key(down.new_account(FUNDS)),
    )
    accounts: dict[str, str] = {}
    jobs: dict[str, dict[str, str]] = {}  # script: {run's name: its recipe as a JSON line}
    for name, (script, recipe, key, settings) in RUNS.items():
        if key == "funded":
            accounts[name] = server.new_account(FUNDS)
        job = {
            "base_url": (down if key == "down" else server).base_url,
            "model": MODEL,
            "recipe": recipe,
            "api_key": server.new_key(accounts[name]) if key == "funded" else getattr(keys, key),
            "settings": settings,
        }
        jobs.setdefault(script, {})[name] = json.dumps(job)
    started: dict[str, subprocess.Popen[str]] = {}
    for script, lines in jobs.items():
        recipes = tmp_path_factory.mktemp("recipes") / f"{script}.jsonl"
        recipes.write_text("".join(f"{line}\n" for line in lines.values()))
        with recipes.open() as stdin:
            started[script] = subprocess.Popen(
                [str(CLIENTS_PYTHON), f"{script}_recipes.py", "-"],
                cwd=SCRIPTS,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
    done: dict[str, Run] = {}
    for script, process in started.items():
        out, err = process.communicate(timeout=90)
        assert process.returncode == 0, err
        # one JSON line a recipe, in order, and nothing else
        for name, line in zip(jobs[script], out.splitlines(), strict=True):
            charged = FUNDS - server.balance(accounts[name]) if name in accounts else 0
            done[name] = Run(json.loads(line), charged)
    return done.__getitem__


# --- instructor ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["tools", "json", "md_json", "json_schema"])
def test_instructor_streams_a_nested_object_in_every_mode(
    server: Server, runs: Callable[[str], Run], mode: str
) -> None:
    run = runs(f"instructor-{mode}")
    seen = run.seen
    assert seen["error"] is None
    [body] = seen["sent"]
    assert body["stream"] is True
    assert "stream_options" not in body  # instructor asks for no usage
    if mode == "tools":  # the default: a tool whose arguments are the object, forced
        [tool] = body["tools"]
        assert body["tool_choice"] == {
            "type": "function",
            "function": {"name": tool["function"]["name"]},
        }
        schema = tool["function"]["parameters"]
    elif mode == "json_schema":
        assert body["response_format"]["type"] == "json_schema"
        schema = body["response_format"]["json_schema"]["schema"]
    else:  # the schema in a system message; JSON mode adds response_format json_object
        assert body["messages"][0]["role"] == "system"
        assert ("response_format" in body) == (mode == "json")
        schema = None
    if schema is not None:  # the nested model by reference
        assert schema["properties"]["address"] == {"$ref": "#/$defs/PartialAddress"}
    objects = seen["objects"]
    assert len(objects) > 1  # the object grows as the stream comes
    person = objects[-1]
    assert set(person) == PERSON_FIELDS
    assert person["role"] in ("admin", "member")
    assert set(person["address"]) == {"street", "city", "country"}
    ref = reference(server, body)
    assert person == ref.object()
    assert run.charged == ref.credits


def test_instructor_streams_with_create_partial_or_create_stream_true(
    runs: Callable[[str], Run],
) -> None:
    """create(response_model=Partial[Person], stream=True) is create_partial."""
    partial, stream = runs("instructor-tools").seen, runs("instructor-stream").seen
    assert stream["error"] is None
    assert stream["objects"] == partial["objects"]
    assert stream["sent"] == partial["sent"]


def test_instructor_create_iterable_streams_each_object(
    server: Server, runs: Callable[[str], Run]
) -> None:
    run = runs("instructor-iterable")
    seen = run.seen
    assert seen["error"] is None
    [body] = seen["sent"]
    assert body["stream"] is True
    [tool] = body["tools"]  # one tool whose one argument is the list of objects
    ref = reference(server, body)
    assert list(ref.object()) == list(tool["function"]["parameters"]["properties"])
    [items] = ref.object().values()
    assert seen["objects"] == items
    assert all(set(person) == PERSON_FIELDS for person in items)
    assert run.charged == ref.credits


def test_instructor_create_without_streaming_is_charged_and_asked_again(
    server: Server, runs: Callable[[str], Run]
) -> None:
    """The OpenAI SDK returns svc's stream as a str, in which instructor finds no choices: it
    takes that for a bad answer and asks again (max_retries, default 3), each time charged."""
    run = runs("instructor-create")
    error = run.seen["error"]
    assert error["class"] == "InstructorRetryException"
    assert error["cause"]["class"] == "ResponseParsingError"
    assert error["attempts"] == 4
    assert error["last_completion"] == "str"
    assert error["failed"] == ["No choices in OpenAI response (mode: tool_call)"] * 4
    sent = run.seen["sent"]
    assert len(sent) == 4
    assert all("stream" not in body for body in sent)
    # each try carries the error of the last one: four different requests, four charges
    assert [len(body["messages"]) for body in sent] == [1, 2, 3, 4]
    assert run.charged == sum(reference(server, body).credits for body in sent)

    once = runs("instructor-create-once")
    assert once.seen["error"]["attempts"] == 1
    assert len(once.seen["sent"]) == 1
    assert once.charged == reference(server, once.seen["sent"][0]).credits


def test_instructor_does_not_stream_a_whole_model(
    server: Server, runs: Callable[[str], Run]
) -> None:
    """stream=True with a plain response model (max_retries=0 here): the request streams, the
    parse does not."""
    run = runs("instructor-full-stream")
    error = run.seen["error"]
    assert error["class"] == "InstructorRetryException"
    assert error["failed"] == ["No choices in OpenAI response (mode: tool_call)"]
    assert error["last_completion"] == "Stream"
    [body] = run.seen["sent"]
    assert body["stream"] is True
    assert run.charged == reference(server, body).credits  # served and paid for, thrown away


def test_instructor_max_retries_asks_again_after_a_failed_validation(
    server: Server, runs: Callable[[str], Run]
) -> None:
    run = runs("instructor-validation")  # max_retries=1
    error = run.seen["error"]
    assert error["class"] == "InstructorRetryException"
    assert error["cause"]["class"] == "ValidationError"
    assert error["attempts"] == 2
    assert all("must be in capital letters" in failed for failed in error["failed"])
    first, second = run.seen["sent"]
    assert len(second["messages"]) > len(first["messages"])  # the error, for the model to fix
    assert run.charged == reference(server, first).credits + reference(server, second).credits


@pytest.mark.parametrize(
    ("name", "status", "cause", "attempts"),
    [
        ("instructor-402", 402, "APIStatusError", 1),  # x-should-retry: false
        ("instructor-429", 429, "RateLimitError", 1),  # x-should-retry: false
        ("instructor-502", 502, "InternalServerError", 3),  # the OpenAI client's 2 retries
        ("instructor-502-once", 502, "InternalServerError", 1),  # OpenAI(max_retries=0)
    ],
)
def test_instructor_leaves_http_retries_to_the_openai_client(
    runs: Callable[[str], Run], name: str, status: int, cause: str, attempts: int
) -> None:
    seen = runs(name).seen
    error = seen["error"]
    assert error["class"] == "InstructorRetryException"
    assert error["attempts"] == 1  # instructor's own retries are for validation only
    assert error["cause"]["class"] == cause
    assert error["cause"]["status"] == status
    assert len(seen["sent"]) == attempts


# --- LlamaIndex: OpenAILike ------------------------------------------------------------------


@pytest.mark.parametrize("recipe", ["stream-chat", "astream-chat", "stream-complete"])
def test_llamaindex_streams_text_with_usage(
    server: Server, runs: Callable[[str], Run], recipe: str
) -> None:
    run = runs(f"llamaindex-{recipe}")
    seen = run.seen
    assert seen["error"] is None
    [body] = seen["sent"]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}  # additional_kwargs
    assert body["messages"][-1]["role"] == "user"  # is_chat_model: Chat Completions
    ref = reference(server, body)
    assert seen["deltas"] > 1
    assert seen["text"] == ref.text
    assert seen["usage"] == {
        "prompt_tokens": ref.prompt_tokens,
        "completion_tokens": ref.completion_tokens,
        "total_tokens": ref.prompt_tokens + ref.completion_tokens,
    }
    assert seen["svc"]["credits_used"] == run.charged == ref.credits


def test_llamaindex_needs_is_chat_model(runs: Callable[[str], Run]) -> None:
    """Without is_chat_model=True, OpenAILike calls the legacy completions endpoint (a body with
    a prompt and no messages), which svc does not serve."""
    run = runs("llamaindex-not-chat")
    [body] = run.seen["sent"]
    assert "prompt" in body
    assert "messages" not in body
    assert run.seen["error"]["class"] == "NotFoundError"
    assert run.seen["error"]["status"] == 404
    assert run.charged == 0


def test_llamaindex_without_stream_options_shows_usage_all_the_same(
    server: Server, runs: Callable[[str], Run]
) -> None:
    run = runs("llamaindex-stream-chat-plain")
    seen = run.seen
    [body] = seen["sent"]
    assert "stream_options" not in body
    ref = reference(server, body)
    assert seen["usage"] == {  # svc's last chunk carries it, asked for or not
        "prompt_tokens": ref.prompt_tokens,
        "completion_tokens": ref.completion_tokens,
        "total_tokens": ref.prompt_tokens + ref.completion_tokens,
    }
    assert seen["text"] == ref.text
    assert seen["svc"]["credits_used"] == run.charged  # billed all the same


def test_llamaindex_streams_a_structured_nested_object(
    server: Server, runs: Callable[[str], Run]
) -> None:
    run = runs("llamaindex-structured")
    seen = run.seen
    assert seen["error"] is None
    [body] = seen["sent"]
    [tool] = body["tools"]  # is_function_calling_model: the object as a tool call
    assert tool["function"]["name"] == "Person"
    assert "$defs" in tool["function"]["parameters"]
    assert len(seen["objects"]) > 1
    person = seen["objects"][-1]
    assert set(person) == PERSON_FIELDS
    ref = reference(server, body)
    assert person == ref.object()
    assert run.charged == ref.credits


@pytest.mark.parametrize("recipe", ["chat", "complete"])
def test_llamaindex_without_streaming_is_charged_and_unreadable(
    server: Server, runs: Callable[[str], Run], recipe: str
) -> None:
    run = runs(f"llamaindex-{recipe}")
    error = run.seen["error"]
    assert error["class"] == "AttributeError"
    assert error["message"] == "'str' object has no attribute 'choices'"
    [body] = run.seen["sent"]  # never retried: not an error LlamaIndex retries
    assert body["stream"] is False
    assert "stream_options" not in body  # LlamaIndex drops it from a call that does not stream
    assert run.charged == reference(server, body).credits  # served and paid for, thrown away


@pytest.mark.parametrize(
    ("name", "status", "error", "attempts"),
    [
        ("llamaindex-402", 402, "APIStatusError", 1),  # x-should-retry: false
        ("llamaindex-429", 429, "RateLimitError", 1),  # x-should-retry: false
        ("llamaindex-502", 502, "InternalServerError", 4),  # max_retries=3, the OpenAI client's
        ("llamaindex-502-once", 502, "InternalServerError", 1),  # max_retries=0
    ],
)
def test_llamaindex_streams_retry_as_the_openai_client_does(
    runs: Callable[[str], Run], name: str, status: int, error: str, attempts: int
) -> None:
    seen = runs(name).seen
    assert seen["error"]["class"] == error
    assert seen["error"]["status"] == status
    assert len(seen["sent"]) == attempts


def test_llamaindex_chat_retries_twice_over(runs: Callable[[str], Run]) -> None:
    """chat() (not streaming) adds LlamaIndex's own retries around the OpenAI client's: up to
    max_retries attempts while under 60 s, after a 429's retry-after (at most 120 s) or a
    backoff. A daily cap (no retry-after: when it resets is in svc-cap-resets-at): three
    requests, after its random backoff of 1 to 20 s; a 502: 3 attempts of 4 requests each."""
    capped = runs("llamaindex-chat-429").seen
    assert capped["error"]["status"] == 429
    assert len(capped["sent"]) == 3
    assert len(capped["waited"]) == 2
    assert all(1 <= waited <= 20 for waited in capped["waited"]), capped["waited"]
    down = runs("llamaindex-chat-502").seen
    assert down["error"]["status"] == 502
    assert len(down["sent"]) == 12
    assert len(down["waited"]) == 11  # the OpenAI client's 3 + 3 + 3, LlamaIndex's 2


# --- AutoGen: OpenAIChatCompletionClient, AssistantAgent -------------------------------------


def test_autogen_streams_text_and_reads_its_usage(
    server: Server, runs: Callable[[str], Run]
) -> None:
    run = runs("autogen-stream")
    seen = run.seen
    assert seen["error"] is None
    [body] = seen["sent"]
    assert body["stream"] is True
    assert "stream_options" not in body  # AutoGen asks for no usage; svc sends it anyway
    ref = reference(server, body)
    assert len(seen["deltas"]) > 1
    assert "".join(seen["deltas"]) == seen["text"] == ref.text
    assert seen["finish_reason"] == "stop"
    usage = {"prompt_tokens": ref.prompt_tokens, "completion_tokens": ref.completion_tokens}
    assert seen["usage"] == seen["total_usage"] == usage  # RequestUsage
    assert run.charged == ref.credits


def test_autogen_create_is_charged_and_unreadable(
    server: Server, runs: Callable[[str], Run]
) -> None:
    run = runs("autogen-create")
    error = run.seen["error"]
    assert error["class"] == "AttributeError"
    assert error["message"] == "'str' object has no attribute 'usage'"
    [body] = run.seen["sent"]  # not retried
    assert body["stream"] is False
    assert run.charged == reference(server, body).credits  # served and paid for, thrown away


def test_an_autogen_agent_calls_its_tool_and_returns_its_result(
    server: Server, runs: Callable[[str], Run]
) -> None:
    """reflect_on_tool_use False (its default without an output type): one request, and the
    tool's result is the answer."""
    run = runs("autogen-agent")
    seen = run.seen
    assert seen["error"] is None
    [body] = seen["sent"]
    assert body["stream"] is True  # model_client_stream=True
    assert body["tool_choice"] == "auto"
    assert [tool["function"]["name"] for tool in body["tools"]] == ["get_weather"]
    ref = reference(server, body)
    city = ref.object()["city"]
    request, execution, summary = seen["messages"][1:]
    assert request["type"] == "ToolCallRequestEvent"
    assert "name='get_weather'" in request["text"]
    usage = {"prompt_tokens": ref.prompt_tokens, "completion_tokens": ref.completion_tokens}
    assert request["usage"] == seen["total_usage"] == usage
    assert execution["type"] == "ToolCallExecutionEvent"
    assert summary == {"type": "ToolCallSummaryMessage", "text": f"sunny in {city}", "usage": None}
    assert run.charged == ref.credits


def test_an_autogen_agent_reflecting_on_its_tool_asks_again(
    server: Server, runs: Callable[[str], Run]
) -> None:
    run = runs("autogen-agent-reflect")
    seen = run.seen
    assert seen["error"] is None
    first, second = seen["sent"]
    assert first["stream"] is second["stream"] is True
    assert second["messages"][-1]["role"] == "tool"
    asked, answered = reference(server, first), reference(server, second)
    assert asked.arguments
    answer = seen["messages"][-1]
    assert answer["type"] == "TextMessage"
    assert answer["text"] == answered.text
    assert answer["usage"] == {
        "prompt_tokens": answered.prompt_tokens,
        "completion_tokens": answered.completion_tokens,
    }
    assert seen["total_usage"] == {
        "prompt_tokens": asked.prompt_tokens + answered.prompt_tokens,
        "completion_tokens": asked.completion_tokens + answered.completion_tokens,
    }
    assert run.charged == asked.credits + answered.credits


@pytest.mark.parametrize(
    ("name", "status", "error", "attempts"),
    [
        ("autogen-402", 402, "APIStatusError", 1),  # x-should-retry: false
        ("autogen-429", 429, "RateLimitError", 1),  # x-should-retry: false
        ("autogen-401", 401, "AuthenticationError", 1),
        ("autogen-502", 502, "InternalServerError", 3),  # the OpenAI client's 2 retries
        ("autogen-502-once", 502, "InternalServerError", 1),  # max_retries=0
    ],
)
def test_autogen_retries_as_the_openai_client_does(
    runs: Callable[[str], Run], name: str, status: int, error: str, attempts: int
) -> None:
    seen = runs(name).seen
    assert seen["error"]["class"] == error
    assert seen["error"]["status"] == status
    assert len(seen["sent"]) == attempts
    assert seen["elapsed"] < 5  # no sleep on a daily cap
