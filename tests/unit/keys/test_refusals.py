"""A refusal's message says what to do about it where something can be done."""

from __future__ import annotations

import pytest

from app.core.clock import DAY_S, parse_iso_utc
from app.core.errors import CAP_HELD_RETRY_AFTER_S
from app.credits.outcomes import Refusal, ScriptStatus
from app.keys.refusals import CAP_RESETS_HEADER, refusal_error

NOW = 1_790_000_000.0


@pytest.mark.parametrize(
    ("status", "fixes"),
    [
        (ScriptStatus.INSUFFICIENT_CREDITS, ("max_tokens", "add credits")),
        (ScriptStatus.DAILY_CAP_EXCEEDED, ("00:00 UTC", "daily_cap_credits")),
        (ScriptStatus.MODEL_NOT_ALLOWED, ("GET /v1/models", "allowed_models")),
        (ScriptStatus.RATE_LIMITED, ("retry-after",)),
    ],
)
def test_a_refusal_names_its_fix(status: ScriptStatus, fixes: tuple[str, ...]) -> None:
    error = refusal_error(Refusal(status, 1_000, NOW, requested="svc-code", alias="svc-code"))
    for fix in fixes:
        assert fix in error.message


def test_a_reached_daily_cap_says_when_it_resets_and_asks_for_no_retry() -> None:
    """Clients obey retry-after: hours of it froze coding agents. The reset time is in the
    message and in its own header instead; a cap taken by running requests keeps its few
    seconds of retry-after."""
    before_midnight = 1_790_035_199.5  # 2026-09-21T23:59:59.5Z
    for now in (NOW, before_midnight, 1_790_035_200.0):
        error = refusal_error(Refusal(ScriptStatus.DAILY_CAP_EXCEEDED, 0, now))
        resets = error.headers[CAP_RESETS_HEADER]
        midnight = parse_iso_utc(resets)
        assert midnight is not None
        assert midnight % DAY_S == 0
        assert 0 < midnight - now <= DAY_S
        assert resets in error.message
        assert "retry-after" not in error.headers
        assert error.headers["x-should-retry"] == "false"
    assert CAP_RESETS_HEADER == "svc-cap-resets-at"
    assert (
        refusal_error(Refusal(ScriptStatus.DAILY_CAP_EXCEEDED, 0, before_midnight)).headers[
            CAP_RESETS_HEADER
        ]
        == "2026-09-22T00:00:00Z"
    )
    held = refusal_error(Refusal(ScriptStatus.DAILY_CAP_HELD, 0, NOW))
    assert held.headers["retry-after"] == str(CAP_HELD_RETRY_AFTER_S)
    assert CAP_RESETS_HEADER not in held.headers
