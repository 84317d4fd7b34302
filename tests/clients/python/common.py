"""What the Python client scripts share: their arguments, the request bodies they record, and
their one line of output per recipe (the Python side of ../node/common.js).

    SVC_API_KEY=... .venv/clients/bin/python <client>_recipes.py \
        BASE_URL MODEL RECIPE [NAME=VALUE ...]

runs one recipe (NAME=VALUE: the script's settings) and prints ONE JSON line: what the client
saw, and ``sent``, every request body it sent. With ``-`` as the only argument, a script reads
recipes from stdin instead, one JSON object a line (``base_url``, ``model``, ``recipe``,
``api_key``, ``settings``), runs them one after the other and prints a line for each: the tests
use that, so that Python's start-up and the clients' imports (about 2 s of CPU) are paid once.

The scripts run with the interpreter of .venv/clients (requirements/clients.lock), whose
packages cannot be installed beside the test lock: tests/e2e/test_client_recipes_isolated.py
starts them as subprocesses.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel


class Address(BaseModel):
    street: str
    city: str
    country: str


class Person(BaseModel):
    """The object the structured-output recipes ask for: nested (its JSON Schema refers to
    Address through $ref and $defs), with an enum and a list."""

    name: str
    age: int
    role: Literal["admin", "member"]
    address: Address
    tags: list[str]


@dataclass
class Job:
    """One recipe to run, and the request bodies it sent, in order."""

    base_url: str  # ends in /v1
    model: str
    recipe: str
    api_key: str
    settings: dict[str, str] = field(default_factory=dict)
    sent: list[dict[str, Any]] = field(default_factory=list)

    def setting(self, name: str) -> str | None:
        return self.settings.get(name)

    def http_client(self) -> httpx.Client:
        """An HTTP client for the OpenAI SDK that records each body it sends in ``sent``."""
        return httpx.Client(event_hooks={"request": [self._record]})

    def async_http_client(self) -> httpx.AsyncClient:
        async def record(request: httpx.Request) -> None:
            self._record(request)

        return httpx.AsyncClient(event_hooks={"request": [record]})

    def _record(self, request: httpx.Request) -> None:
        self.sent.append(json.loads(request.content))


def failure(error: BaseException) -> dict[str, Any]:
    """An exception as the line reports it, with the error that caused it (``raise ... from``)."""
    cause = error.__cause__
    return {
        "class": type(error).__name__,
        "module": type(error).__module__,
        "status": getattr(error, "status_code", None),
        "message": str(error),
        "cause": failure(cause) if cause is not None else None,
    }


def emit(result: dict[str, Any]) -> None:
    """Prints one JSON line; pydantic models as their fields."""

    def plain(value: Any) -> Any:
        dump = getattr(value, "model_dump", None)
        return dump(mode="json") if callable(dump) else repr(value)

    sys.stdout.write(json.dumps(result, default=plain) + "\n")
    sys.stdout.flush()


def jobs(script: str) -> list[Job]:
    argv = sys.argv[1:]
    if argv == ["-"]:
        return [Job(**json.loads(line)) for line in sys.stdin if line.strip()]
    key = os.environ.get("SVC_API_KEY")
    if len(argv) < 3 or not key or not all("=" in arg for arg in argv[3:]):
        print(
            f"usage: SVC_API_KEY=... {script} BASE_URL MODEL RECIPE [NAME=VALUE ...]\n"
            f"       {script} -    (recipes as JSON lines on stdin)",
            file=sys.stderr,
        )
        sys.exit(2)
    settings = dict(arg.split("=", 1) for arg in argv[3:])
    return [Job(argv[0], argv[1], argv[2], key, settings)]


def main(
    script: str,
    run: Callable[[Job, dict[str, Any]], None],
    seen: dict[str, Any],
    describe: Callable[[Exception], dict[str, Any]] = lambda error: {},
) -> None:
    """Runs each job: ``run`` fills a copy of ``seen``; an exception it raises is reported as
    ``error`` (``failure``, and what ``describe`` adds for the client's own exceptions)."""
    for job in jobs(script):
        line = json.loads(json.dumps(seen))  # a fresh copy of the empty line
        try:
            run(job, line)
        except Exception as error:  # what the client raised is what the line reports
            line["error"] = {**failure(error), **describe(error)}
        line["sent"] = job.sent
        emit(line)
