"""A refusal's message says what to do about it where something can be done."""

from __future__ import annotations

import pytest

from app.credits.outcomes import Refusal, ScriptStatus
from app.keys.refusals import refusal_error

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
