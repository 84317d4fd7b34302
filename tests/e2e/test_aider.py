"""aider, the coding agent, run as its users run it against a real ``svc serve``: one edit in
a scratch git repository, with the flags docs/clients.md gives, and what it does on a 402, a
daily-cap 429, a 401 and a 502.

aider pins most of its dependencies exactly, so it has a virtualenv of its own, .venv/aider
(requirements/aider.lock, `make install`; SVC_AIDER_VENV names another). It runs through
tests/clients/python/aider_run.py, which writes down aider's retry waits instead of sleeping
them (up to a minute each). The upstream is a stand-in that answers aider's chat with an edit
in aider's ``whole`` format (the default for a model it does not know) and its commit-message
request with a subject line, each with the same usage, so every request served costs the same.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.completion.catalog import Rates
from app.credits.outcomes import Tokens
from tests.e2e.conftest import ROOT, Server, start_server, stop_server
from tests.support.pricing import charge
from tests.support.processes import free_port
from tests.support.scripted_upstream import USAGE, ScriptedUpstream, scripted_upstream

pytestmark = pytest.mark.e2e

AIDER_VENV = Path(os.environ.get("SVC_AIDER_VENV", ROOT / ".venv" / "aider"))
RUNNER = ROOT / "tests" / "clients" / "python" / "aider_run.py"
ALIAS = "svc-code"
PRICES = Rates(input=20, cached_input=5, cache_write=20, output=60)
PER_REQUEST = charge(PRICES, Tokens(USAGE["prompt_tokens"], USAGE["completion_tokens"]))
FUNDS = 100_000
ASK = "Make hello.py greet svc."
EDITED = 'print("hello, svc")\n'
SUBJECT = "Greet svc in hello.py"
# aider's retries of an error it takes for a passing one: 0.25 s doubled while under its
# RETRY_TIMEOUT of 60 s, so 9 tries over 64 s
AIDER_RETRIES = [0.25 * 2**i for i in range(8)]
# Offline and unattended: no questions, no update check, no analytics, no linting, no repo map
# (it would read the files with tree-sitter first), plain output.
OFFLINE = [
    "--yes-always",
    "--no-auto-lint",
    "--no-check-update",
    "--no-analytics",
    "--no-show-model-warnings",
    "--no-pretty",
    "--no-fancy-input",
    "--no-gitignore",
    "--map-tokens",
    "0",
]


def answer(body: dict[str, Any]) -> str:
    """aider's commit-message request (its own system prompt) gets a subject, the rest the edit."""
    if "commit message" in str(body["messages"][0]["content"]).lower():
        return SUBJECT
    return f"hello.py\n```python\n{EDITED}```\n"


def models_file(path: Path, base_url: str) -> Path:
    path.write_text(
        "[providers.scripted]\n"
        f'base_url = "{base_url}"\n'
        'api_key_env = "SCRIPTED_API_KEY"\n\n'
        f"[aliases.{ALIAS}]\n"
        f"input_price = {PRICES.input}\n"
        f"cached_input_price = {PRICES.cached_input}\n"
        f"output_price = {PRICES.output}\n"
        'upstreams = [{ provider = "scripted", model = "scripted" }]\n'
    )
    return path


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with scripted_upstream(answer) as served:
        yield served


def _start(tmp: Path, base_url: str, **env: str) -> Server:
    path = models_file(tmp / "models.toml", base_url)
    return start_server(
        tmp, extra_env={"SVC_MODELS_FILE": str(path), "SCRIPTED_API_KEY": "unused", **env}
    )


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, upstream: ScriptedUpstream) -> Iterator[Server]:
    srv = _start(tmp_path_factory.mktemp("aider"), upstream.base_url)
    yield srv
    stop_server(srv.process)


@pytest.fixture(scope="module")
def refusing(
    tmp_path_factory: pytest.TempPathFactory, upstream: ScriptedUpstream
) -> Iterator[Server]:
    """A server started with SVC_NON_STREAMING=refuse."""
    srv = _start(
        tmp_path_factory.mktemp("aider-refuse"), upstream.base_url, SVC_NON_STREAMING="refuse"
    )
    yield srv
    stop_server(srv.process)


@pytest.fixture(scope="module")
def down(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose alias's only upstream is down: every request is a 502."""
    srv = _start(tmp_path_factory.mktemp("aider-down"), f"http://127.0.0.1:{free_port()}/v1")
    yield srv
    stop_server(srv.process)


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str
    waits: list[float]  # the retry waits aider asked for, in seconds
    log: list[str]  # the repository's commit subjects, newest first
    text: str  # hello.py afterwards


def aider(tmp: Path, server: Server, key: str, *flags: str) -> Run:
    """One aider run in a fresh repository holding hello.py, with ``flags`` after OFFLINE."""
    assert AIDER_VENV.exists(), f"no {AIDER_VENV}: make install"
    repo, home = tmp / "repo", tmp / "home"
    repo.mkdir()
    home.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),  # aider keeps its caches and settings there
        "GIT_AUTHOR_NAME": "dev",
        "GIT_AUTHOR_EMAIL": "dev@example.com",
        "GIT_COMMITTER_NAME": "dev",
        "GIT_COMMITTER_EMAIL": "dev@example.com",
        "OPENAI_API_BASE": server.base_url,
        "OPENAI_API_KEY": key,
        "AIDER_WAITS": str(tmp / "waits.json"),
    }

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    git("init", "-q")
    (repo / "hello.py").write_text('print("hello")\n')
    git("add", "hello.py")
    git("commit", "-qm", "start")
    command = [str(AIDER_VENV / "bin" / "python"), str(RUNNER), "--model", f"openai/{ALIAS}"]
    done = subprocess.run(
        [*command, *OFFLINE, *flags, "--message", ASK, "hello.py"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    waits_file = tmp / "waits.json"
    return Run(
        done.returncode,
        done.stdout + done.stderr,
        json.loads(waits_file.read_text()) if waits_file.exists() else [],
        git("log", "--format=%s").splitlines(),
        (repo / "hello.py").read_text(),
    )


def test_aider_edits_and_commits_on_a_server_that_refuses_non_streaming_calls(
    refusing: Server, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """aider streams its chat, but asks for its commit message without streaming: refused
    (400 stream_required, nothing charged), aider commits with its placeholder message."""
    pid = refusing.new_account(FUNDS)
    before = len(upstream.served)
    run = aider(tmp_path, refusing, refusing.new_key(pid))
    assert run.returncode == 0, run.output
    assert run.text == EDITED
    assert run.log == ["(no commit message provided)", "start"]
    assert "stream_required" in run.output or "streamed requests only" in run.output
    [chat] = upstream.served[before:]  # the refused request never reached the upstream
    assert chat["stream"] is True
    assert FUNDS - refusing.balance(pid) == PER_REQUEST
    assert run.waits == []


def test_aider_with_no_auto_commits_sends_one_request(
    svc: Server, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    pid = svc.new_account(FUNDS)
    before = len(upstream.served)
    run = aider(tmp_path, svc, svc.new_key(pid), "--no-auto-commits")
    assert run.returncode == 0, run.output
    assert run.text == EDITED
    assert run.log == ["start"]  # the edit is left for you to commit
    assert len(upstream.served) - before == 1
    assert FUNDS - svc.balance(pid) == PER_REQUEST


def test_aider_asks_nineteen_times_for_a_commit_message_it_cannot_read(
    svc: Server, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    """By default aider asks for a commit message with stream: false; svc streams the answer
    all the same, LiteLLM finds no JSON in it ("Empty or invalid response"), aider takes that
    for a server down and asks again for a minute, each time charged, then commits with its
    placeholder message."""
    pid = svc.new_account(FUNDS)
    before = len(upstream.served)
    run = aider(tmp_path, svc, svc.new_key(pid))
    assert run.returncode == 0, run.output
    assert run.text == EDITED
    assert run.log == ["(no commit message provided)", "start"]
    served = upstream.served[before:]
    assert len(served) == 19  # the chat, then 18 for the commit message
    assert FUNDS - svc.balance(pid) == 19 * PER_REQUEST
    # two rounds (its weak model, then its main model: here both svc-code) of 9 tries,
    # 0.25 s to 32 s apart
    assert run.waits == AIDER_RETRIES * 2


@pytest.mark.parametrize(
    ("answer_", "requests", "waits"),
    [
        ("poor", 9, AIDER_RETRIES),  # 402: LiteLLM's APIError, which aider retries
        ("capped", 9, AIDER_RETRIES),  # 429 daily_cap_exceeded: its RateLimitError
        ("unknown", 1, []),  # 401: AuthenticationError, never retried
        ("down", 27, None),  # 502: aider's 9 tries of the OpenAI SDK's 3 requests
    ],
)
def test_aider_on_402_429_401_and_502(
    svc: Server,
    down: Server,
    tmp_path: Path,
    answer_: str,
    requests: int,
    waits: list[float] | None,
) -> None:
    srv = down if answer_ == "down" else svc
    pid = srv.new_account(0 if answer_ == "poor" else FUNDS)
    key = {
        "poor": srv.new_key(pid),
        "capped": srv.new_key(pid, daily_cap=0),
        "unknown": "sk-svc-not-a-key",
        "down": srv.new_key(pid),
    }[answer_]
    before = _answered(srv)
    run = aider(tmp_path, srv, key, "--no-auto-commits")
    assert run.text == 'print("hello")\n'  # nothing edited
    assert _answered(srv) - before == requests, run.output
    if waits is not None:
        assert run.waits == waits
    else:  # each aider try: the OpenAI SDK's two retries (about 0.5 s and 1 s), then aider's wait
        assert run.waits[2::3] == AIDER_RETRIES
        sdk = [wait for i, wait in enumerate(run.waits) if i % 3 != 2]
        assert len(sdk) == 18
        assert all(0.3 <= wait <= 1.0 for wait in sdk), sdk
    assert srv.balance(pid) == (0 if answer_ == "poor" else FUNDS)


def _answered(server: Server) -> float:
    """Chat completions svc has answered, whatever the status."""
    return sum(
        value
        for (name, labels), value in server.metrics().items()
        if name == "svc_requests_total" and dict(labels).get("route") == "/v1/chat/completions"
    )
