"""The coding agents from npm, run as their users run them against a real svc server, with
nothing set but svc's base URL and a key (docs/clients.md, "Codex CLI" and "opencode"):
``codex exec`` (Responses API) and ``opencode run`` (Chat Completions) each finish a task
that takes one shell call, the account pays exactly for each turn, and what each does on
402, a daily cap's 429, 401 and 502 is measured (how many requests svc answered, how long).

The upstream is tests/support/agent_upstream.py: it calls the agent's shell tool on the
first turn (``cat`` of a file holding a token), answers the next with text. Codex and
opencode call no network of their own here: opencode's models.dev fetch and update check
are turned off through its environment (offline CI), not through svc's settings."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.completion.catalog import DEFAULT_ALIASES
from app.credits.outcomes import Tokens
from tests.e2e.conftest import ROOT, Server, start_server, stop_server
from tests.support.agent_upstream import (
    CALL_USAGE,
    TEXT_USAGE,
    ScriptedUpstream,
    scripted_upstream,
)
from tests.support.pricing import charge
from tests.support.processes import free_port

pytestmark = pytest.mark.e2e

NODE_MODULES = ROOT / "tests" / "clients" / "node" / "node_modules"
CODEX = NODE_MODULES / ".bin" / "codex"
# opencode as its Linux x64 binary package (opencode-ai's own bin is a placeholder its
# postinstall script replaces, and `make install` runs no install scripts: the Makefile).
OPENCODE = NODE_MODULES / "opencode-linux-x64" / "bin" / "opencode"
MODEL = "svc-code"
DOWN = "svc-smart"  # served by an upstream nothing listens on: a 502 before any token
TOKEN = "TOKEN-7f3e9a"
TASK = "Print the token in token.txt."
ANSWER = f"The token is {TOKEN}."
# The shell call each agent is answered with, by its tool's name: Codex 0.171 runs commands
# with exec_command, opencode with bash.
SHELL_CALLS = {
    "exec_command": {"cmd": "cat token.txt"},
    "bash": {"command": "cat token.txt", "description": "Print the token"},
}
TIMEOUT_S = 40  # a bound on each agent run: killed past it (a refused agent still retrying)
BAD_KEY = "svc_live_" + "x" * 50


@dataclass(frozen=True)
class Agents:
    server: Server
    upstream: ScriptedUpstream


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agents]:
    assert CODEX.exists(), "no Codex CLI: make install"
    assert OPENCODE.exists(), "no opencode binary: make install (on Linux x64)"
    tmp = tmp_path_factory.mktemp("agents")
    with scripted_upstream(SHELL_CALLS, ANSWER) as upstream:
        models = tmp / "models.toml"
        models.write_text(
            "[providers.scripted]\n"
            f'base_url = "{upstream.base_url}"\n'
            'api_key_env = "SCRIPTED_API_KEY"\n\n'
            "[providers.down]\n"
            f'base_url = "http://127.0.0.1:{free_port()}/v1"\n'
            'api_key_env = "SCRIPTED_API_KEY"\n\n'
            f"[aliases.{MODEL}]\n"
            'upstreams = [{ provider = "scripted", model = "scripted" }]\n\n'
            f"[aliases.{DOWN}]\n"
            'upstreams = [{ provider = "down", model = "gone" }]\n'
        )
        env = {"SVC_MODELS_FILE": str(models), "SCRIPTED_API_KEY": "scripted-provider-key"}
        server = start_server(tmp, extra_env=env)
        try:
            yield Agents(server, upstream)
        finally:
            stop_server(server.process)


@dataclass(frozen=True)
class Ran:
    returncode: int | None  # None: still running at TIMEOUT_S, then killed
    stdout: str
    stderr: str
    seconds: float


def _workspace(tmp: Path) -> Path:
    """A project as the agent's user has one: a git repository (Codex refuses to run outside
    one unless told) with the file the task reads."""
    work = tmp / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True, timeout=30)
    (work / "token.txt").write_text(TOKEN + "\n")
    return work


def _home(tmp: Path) -> dict[str, str]:
    """A home of the run's own, so no config, login or history of the machine's is read."""
    home = tmp / "home"
    home.mkdir()
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
    }


def codex_command(tmp: Path, base_url: str, key: str, model: str = MODEL) -> tuple[Any, ...]:
    """``codex exec TASK`` with docs/clients.md's config.toml in a CODEX_HOME of its own."""
    env = _home(tmp)
    codex_home = Path(env["HOME"]) / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "svc"\n\n'
        "[model_providers.svc]\n"
        'name = "svc"\n'
        f'base_url = "{base_url}"\n'
        'env_key = "SVC_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    env |= {"CODEX_HOME": str(codex_home), "SVC_API_KEY": key}
    return [str(CODEX), "exec", TASK], env


def opencode_command(tmp: Path, base_url: str, key: str, model: str = MODEL) -> tuple[Any, ...]:
    """``opencode run TASK`` with docs/clients.md's opencode.json in the project."""
    config = {
        "provider": {
            "svc": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "svc",
                "options": {"baseURL": base_url, "apiKey": "{env:SVC_API_KEY}"},
                "models": {model: {"name": model}},
            }
        },
        "model": f"svc/{model}",
    }
    (tmp / "work" / "opencode.json").write_text(json.dumps(config))
    offline = {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1"}
    env = _home(tmp) | offline | {"SVC_API_KEY": key}
    return [str(OPENCODE), "run", TASK], env


AGENTS = {"codex": codex_command, "opencode": opencode_command}
ROUTES = {"codex": "/v1/responses", "opencode": "/v1/chat/completions"}


def start(agent: str, tmp: Path, base_url: str, key: str, model: str = MODEL) -> Any:
    work = _workspace(tmp)
    argv, env = AGENTS[agent](tmp, base_url, key, model)
    process = subprocess.Popen(
        argv,
        cwd=work,
        # PWD too: opencode takes its project directory from it, as a shell would set it
        env={**os.environ, **env, "PWD": str(work)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return process, time.monotonic()


def finish(started: Any) -> Ran:
    """The run, waited for up to TIMEOUT_S from its start, then killed."""
    process, t0 = started
    try:
        out, err = process.communicate(timeout=max(0.0, TIMEOUT_S - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        out, err = process.communicate()
        return Ran(None, out, err, time.monotonic() - t0)
    return Ran(process.returncode, out, err, time.monotonic() - t0)


def answered(server: Server, route: str, status: int) -> float:
    """How many requests on ``route`` svc has answered with ``status``."""
    return sum(
        value
        for (name, labels), value in server.metrics().items()
        if name == "svc_requests_total"
        and dict(labels).get("route") == route
        and dict(labels).get("status") == str(status)
    )


@pytest.mark.parametrize("agent", AGENTS)
def test_agent_runs_a_shell_call_through_svc_and_pays_each_turn(
    agents: Agents, agent: str, tmp_path: Path
) -> None:
    server, upstream = agents.server, agents.upstream
    pid = server.new_account(100_000)
    key = server.new_key(pid)
    seen_before = len(upstream.requests)
    ran = finish(start(agent, tmp_path, server.base_url, key))
    assert ran.returncode == 0, ran.stderr
    assert ANSWER in ran.stdout

    mine = upstream.requests[seen_before:]
    turns = [r for r in mine if r.get("tools")]  # opencode also asks for a title, tool-less
    assert len(turns) == 2
    assert not any(m.get("role") == "tool" for m in turns[0]["messages"])
    # the shell ran: its output is what the second turn sent back
    (output,) = [m["content"] for m in turns[1]["messages"] if m.get("role") == "tool"]
    assert TOKEN in str(output)

    # paid exactly what each turn's usage costs at the alias's price, no more, no less
    price = DEFAULT_ALIASES[MODEL].price
    usages = [TEXT_USAGE if r is not turns[0] else CALL_USAGE for r in mine]
    expected = sum(
        charge(price, Tokens(u["prompt_tokens"], u["completion_tokens"])) for u in usages
    )
    assert 100_000 - server.balance(pid) == expected
    headers = {"authorization": f"Bearer {key}"}
    usage = httpx.get(f"{server.base_url}/usage", headers=headers, timeout=30).json()
    assert (usage["requests_count"], usage["credits_spent"]) == (len(mine), expected)


# --- what each agent does when svc refuses ------------------------------------------------

CASES = {  # case -> the status svc answers
    "poor": 402,  # an account with no credits
    "capped": 429,  # a key whose daily cap (0) is reached: daily_cap_exceeded
    "bad-key": 401,
    "down": 502,  # the alias's one upstream is down: upstream_unavailable
}


@dataclass(frozen=True)
class Refused:
    ran: Ran
    requests: float  # how many requests svc answered with the case's status


@pytest.fixture(scope="module")
def refused(
    agents: Agents, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], Refused]:
    """Each agent on each case, all at once (each agent on a route of its own, each case a
    status of its own, so svc's counts tell them apart)."""
    server = agents.server
    keys = {
        "poor": server.new_key(server.new_account(0)),
        "capped": server.new_key(server.new_account(100_000), daily_cap=0),
        "bad-key": BAD_KEY,
        "down": server.new_key(server.new_account(100_000)),
    }
    before = {
        (agent, case): answered(server, ROUTES[agent], status)
        for agent in AGENTS
        for case, status in CASES.items()
    }
    started = {
        (agent, case): start(
            agent,
            tmp_path_factory.mktemp(f"{agent}-{case}"),
            server.base_url,
            keys[case],
            DOWN if case == "down" else MODEL,
        )
        for agent in AGENTS
        for case in CASES
    }
    with ThreadPoolExecutor(len(started)) as pool:  # each waited for from its own start
        runs = dict(zip(started, pool.map(finish, started.values()), strict=True))
    return {
        (agent, case): Refused(
            runs[agent, case],
            answered(server, ROUTES[agent], CASES[case]) - before[agent, case],
        )
        for agent, case in runs
    }


def _refused(refused: dict[tuple[str, str], Refused], agent: str, case: str) -> Refused:
    result = refused[agent, case]
    assert result.ran.returncode != 0, result.ran.stdout  # never a success nor a silent 0
    return result


@pytest.mark.parametrize(("case", "requests"), [("poor", 6), ("bad-key", 6), ("down", 30)])
def test_codex_retries_what_it_cannot_read_as_final(
    refused: dict[tuple[str, str], Refused], case: str, requests: int
) -> None:
    """Codex reads no x-should-retry: a 402 and a 401 are retried as a dropped stream (five
    "Reconnecting... n/5", about 8 s), a 502 also as a failed request (4 request retries
    times 5 stream retries, about 25 s); then it exits 1 with svc's message."""
    result = _refused(refused, "codex", case)
    assert result.ran.returncode == 1
    assert result.requests == requests
    assert f"unexpected status {CASES[case]}" in result.ran.stderr


def test_codex_gives_up_on_the_daily_cap_at_once(refused: dict[tuple[str, str], Refused]) -> None:
    """No retry-after on a daily cap's 429: Codex sends one request and exits, where a
    retry-after of hours froze it."""
    result = _refused(refused, "codex", "capped")
    assert (result.ran.returncode, result.requests) == (1, 1)
    assert result.ran.seconds < 15
    assert "429" in result.ran.stderr


@pytest.mark.parametrize("case", ["poor", "bad-key"])
def test_opencode_stops_on_a_402_and_a_401(
    refused: dict[tuple[str, str], Refused], case: str
) -> None:
    """One request for the task and one for the session's title, then exit 1 with svc's
    message on stderr."""
    result = _refused(refused, "opencode", case)
    assert (result.ran.returncode, result.requests) == (1, 2)
    message = {"poor": "Not enough credits", "bad-key": "Incorrect API key"}[case]
    assert message in result.ran.stderr


@pytest.mark.parametrize("case", ["capped", "down"])
def test_opencode_retries_a_429_and_a_502_with_its_own_backoff(
    refused: dict[tuple[str, str], Refused], case: str
) -> None:
    """opencode retries every 429 and 5xx (x-should-retry unread) five times, 2, 4, 8, 16
    and 30 s apart when no retry-after says otherwise (the title's request twice more): it
    is still retrying when the window ends, about 8 requests in, and exits 1 after about
    80 s (measured once, docs/clients.md). No header of svc's makes it sleep longer."""
    result = refused["opencode", case]
    assert result.ran.returncode is None  # killed at TIMEOUT_S, still retrying
    assert 4 <= result.requests <= 9
