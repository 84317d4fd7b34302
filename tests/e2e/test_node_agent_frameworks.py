"""The agent frameworks for Node, run as their docs show against a real svc server: the
OpenAI Agents SDK for JS (tests/clients/node/agents.js: its own OpenAI client, tracing off,
its default Responses API) runs a chat and a tool round trip, reads usage on its own and pays
what the openai SDK's reference pays; LangChain JS (langchain.js) is in test_clients.py's
suite beside the other clients. For both: what one call does on 402, a daily cap's 429, 401
and 502 (how many requests svc answered, how long), with their default retries."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_clients import (
    BAD_KEY,
    MODEL,
    NODE_DIR,
    TOOLS,
    openai_python,
    openai_python_tools,
)
from tests.e2e.test_coding_agents import answered
from tests.support.processes import free_port

pytestmark = pytest.mark.e2e

WINDOW_S = 15  # how long a refused call is watched: killed past it (a client still retrying)


@dataclass(frozen=True)
class Ran:
    seen: dict[str, Any] | None  # the script's line; None: still running at WINDOW_S
    seconds: float


def node(script: str, base_url: str, key: str, scenario: str, **env: str) -> Ran:
    assert (NODE_DIR / "node_modules").is_dir(), "no tests/clients/node/node_modules: make install"
    start = time.monotonic()
    process = subprocess.Popen(
        ["node", script, base_url, MODEL, scenario],
        cwd=NODE_DIR,
        env={**os.environ, "SVC_API_KEY": key, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=WINDOW_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return Ran(None, time.monotonic() - start)
    assert process.returncode == 0, err
    (line,) = out.splitlines()  # one JSON line, nothing else
    return Ran(json.loads(line), time.monotonic() - start)


def test_agents_sdk_chats_and_reads_its_usage(server: Server) -> None:
    """The reference's text and usage (on the Responses API, from one request) and its
    price."""
    reference = openai_python(server.base_url, server.new_key(server.new_account(100_000)), "hello")
    assert reference["error"] is None
    pid = server.new_account(100_000)
    seen = node("agents.js", server.base_url, server.new_key(pid), "hello").seen
    assert seen is not None
    assert seen["error"] is None, seen
    assert seen["text"] == seen["streamed"] == reference["text"] != ""
    usage = reference["usage"]
    assert seen["usage"] == {
        "requests": 1,
        "inputTokens": usage["prompt"],
        "outputTokens": usage["completion"],
        "totalTokens": usage["total"],
    }
    assert 100_000 - server.balance(pid) == reference["svc"]["credits_used"]


def test_agents_sdk_runs_a_tool_round_trip_and_pays_each_turn(server: Server) -> None:
    """The agent loop: the model's call runs the tool with the reference's arguments, the
    result goes back, the answer is the reference's; the run's usage adds up both turns and
    the account pays what the reference's two turns cost."""
    reference = openai_python_tools(
        server.base_url, server.new_key(server.new_account(100_000)), "tool-result"
    )
    turns = [reference["first"], reference]
    pid = server.new_account(100_000)
    seen = node("agents.js", server.base_url, server.new_key(pid), "tool-result").seen
    assert seen is not None
    assert seen["error"] is None, seen
    assert [{"name": c["name"], "arguments": c["input"]} for c in seen["toolCalls"]] == (
        reference["first"]["calls"]
    )
    assert seen["toolCalls"][0]["name"] == TOOLS["tool"]["name"]
    assert seen["text"] == reference["text"] != ""
    assert seen["usage"] == {
        "requests": 2,
        "inputTokens": sum(t["usage"]["prompt"] for t in turns),
        "outputTokens": sum(t["usage"]["completion"] for t in turns),
        "totalTokens": sum(t["usage"]["total"] for t in turns),
    }
    assert 100_000 - server.balance(pid) == sum(t["svc"]["credits_used"] for t in turns)


# --- refused: 402, a daily cap's 429, 401, 502 ----------------------------------------------

ROUTES = {"agents.js": "/v1/responses", "langchain.js": "/v1/chat/completions"}
CASES = {"poor": 402, "capped": 429, "bad-key": 401, "down": 502}


@pytest.fixture(scope="module")
def down(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose svc-fast is served by one upstream nothing listens on: a 502."""
    tmp = tmp_path_factory.mktemp("down")
    models = tmp / "models.toml"
    models.write_text(
        "[providers.down]\n"
        f'base_url = "http://127.0.0.1:{free_port()}/v1"\n'
        'api_key_env = "DOWN_API_KEY"\n\n'
        f"[aliases.{MODEL}]\n"
        'upstreams = [{ provider = "down", model = "gone" }]\n'
    )
    srv = start_server(tmp, extra_env={"SVC_MODELS_FILE": str(models), "DOWN_API_KEY": "unused"})
    try:
        yield srv
    finally:
        stop_server(srv.process)


@dataclass(frozen=True)
class Refused:
    ran: Ran
    requests: float  # requests svc answered with the case's status


RUNS = {  # name -> (script, case, environment)
    **{f"{s}-{c}": (s, c, {}) for s in ROUTES for c in CASES},
    "langchain.js-down-retries-2": ("langchain.js", "down", {"SVC_MAX_RETRIES": "2"}),
}


@pytest.fixture(scope="module")
def refused(server: Server, down: Server) -> dict[str, Refused]:
    """Each run at once; each script on a route of its own and each case a status of its
    own, so svc's counts tell them apart (the LangChain JS 502 runs one after the other)."""
    keys = {
        "poor": server.new_key(server.new_account(0)),
        "capped": server.new_key(server.new_account(100_000), daily_cap=0),
        "bad-key": BAD_KEY,
        "down": down.new_key(down.new_account(100_000)),
    }

    def measure(names: list[str]) -> dict[str, Refused]:
        def on(case: str) -> Server:
            return down if case == "down" else server

        before = {n: answered(on(c), ROUTES[s], CASES[c]) for n, (s, c, _) in RUNS.items()}

        def one(name: str) -> Ran:
            script, case, env = RUNS[name]
            return node(script, on(case).base_url, keys[case], "hello", **env)

        with ThreadPoolExecutor(len(names)) as pool:
            ran = dict(zip(names, pool.map(one, names), strict=True))
        return {
            n: Refused(
                r, answered(on(RUNS[n][1]), ROUTES[RUNS[n][0]], CASES[RUNS[n][1]]) - before[n]
            )
            for n, r in ran.items()
        }

    first = [n for n in RUNS if n != "langchain.js-down-retries-2"]
    return measure(first) | measure(["langchain.js-down-retries-2"])


@pytest.mark.parametrize(
    ("run", "status", "error_class"),
    [
        ("agents.js-poor", 402, "APIError"),
        ("agents.js-capped", 429, "RateLimitError"),
        ("agents.js-bad-key", 401, "AuthenticationError"),
        ("langchain.js-poor", 402, "APIError"),
        ("langchain.js-capped", 429, "RateLimitError"),  # raised as RateLimitCapacityError
        ("langchain.js-bad-key", 401, "AuthenticationError"),
    ],
)
def test_a_refusal_no_retry_can_help_is_sent_once(
    refused: dict[str, Refused], run: str, status: int, error_class: str
) -> None:
    """x-should-retry: false (the OpenAI SDK under the Agents SDK) and LangChain's own
    rules (no retry of a 4xx but 429; none of a 429 without retry-after): one request, an
    error at once, no sleep on the daily cap."""
    result = refused[run]
    assert result.ran.seen is not None, f"{run} still running after {WINDOW_S} s"
    error = result.ran.seen["error"]
    assert (error["class"], error["status"]) == (error_class, status)
    assert result.requests == 1
    assert result.ran.seen["seconds"] < 2


def test_agents_sdk_retries_a_502_twice_as_the_openai_sdk_does(refused: dict[str, Refused]) -> None:
    result = refused["agents.js-down"]
    assert result.ran.seen is not None
    assert result.ran.seen["error"]["status"] == 502
    assert result.requests == 3
    assert 0.5 < result.ran.seen["seconds"] < 5  # about 0.5 s, then 1 s


def test_langchain_js_retries_a_502_six_times_unless_told(refused: dict[str, Refused]) -> None:
    """LangChain's AsyncCaller: maxRetries 6 (about 1, 2, 4, 8, 16 and 32 s apart, a minute
    and a half in all: still retrying when the window ends); maxRetries: 2 stops it after
    three requests."""
    default = refused["langchain.js-down"]
    assert default.ran.seen is None  # still retrying
    assert 2 <= default.requests <= 5
    told = refused["langchain.js-down-retries-2"]
    assert told.ran.seen is not None
    assert told.ran.seen["error"]["status"] == 502
    assert told.requests == 3
