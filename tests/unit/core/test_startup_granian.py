"""The hand-over to granian: "serving on" is logged once granian listens, and a failure
before that is a start-up failure like the others (one line, exit 2); after it, granian's
own exceptions go on as they are."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import granian
import pytest

from app.cli import run_granian
from app.core.logs import granian_log_config
from app.core.settings import Settings

RUST_ERROR = "Address already in use (os error 98)\n\nStack backtrace:\n   0: <unknown>\n"


class FakeGranian:
    """Stands in for ``granian.Granian``: runs its startup hooks unless told to fail first."""

    fail_before: Exception | None = None
    fail_after: Exception | None = None

    def __init__(self, target: str, **options: Any) -> None:
        self.target = target
        self.options = options
        self.hooks: list[Callable[[], None]] = []

    def on_startup(self, hook: Callable[[], None]) -> Callable[[], None]:
        self.hooks.append(hook)
        return hook

    def serve(self) -> None:
        if self.fail_before is not None:
            raise self.fail_before
        for hook in self.hooks:
            hook()
        if self.fail_after is not None:
            raise self.fail_after


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> type[FakeGranian]:
    class Fake(FakeGranian):
        pass

    monkeypatch.setattr(granian, "Granian", Fake)
    monkeypatch.delenv("SVC_LOG_LEVEL", raising=False)
    return Fake


SETTINGS = Settings(host="127.0.0.1", port=8123, workers=2)


def test_serving_is_logged_by_granians_startup_hook(
    fake: type[FakeGranian], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="svc.serve"):
        assert run_granian(SETTINGS, granian_log_config()) == 0
    assert [r.getMessage() for r in caplog.records if r.name == "svc.serve"] == [
        "serving on http://127.0.0.1:8123/v1 with 2 worker(s)"
    ]


def test_a_bind_failure_in_granian_is_one_line_and_nothing_served(
    fake: type[FakeGranian],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake.fail_before = RuntimeError(RUST_ERROR)
    with caplog.at_level(logging.INFO, logger="svc.serve"):
        assert run_granian(SETTINGS, granian_log_config()) == 2
    assert not [r for r in caplog.records if r.name == "svc.serve"]
    assert capsys.readouterr().err.splitlines() == [
        "svc: cannot start: 127.0.0.1:8123 is in use: another process listens there. Stop "
        "it, or set SVC_PORT (or --port) to a free port"
    ]


def test_a_failure_once_serving_is_granians_own(fake: type[FakeGranian]) -> None:
    fake.fail_after = RuntimeError("a worker could not be respawned")
    with pytest.raises(RuntimeError, match="respawned"):
        run_granian(SETTINGS, granian_log_config())
