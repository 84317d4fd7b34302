"""``OperatorTokens``: the admin and metrics tokens compared with the bearer presented, a
wrong one a 401 counted by its own throttle (wrong admin tokens apart from wrong keys and
metrics tokens), an unset admin token refusing everyone, an unset metrics token opening the
metrics, and an address over the admin throttle's limit refused the right token too."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable

import pytest

from app.core.errors import ApiError, ErrorKind
from app.credits.throttle_counts import WindowCount
from app.keys.operators import ADMIN_REFUSED, METRICS_REFUSED, OperatorTokens
from app.keys.throttle import FailedAuthThrottle

ADMIN = "a" * 32
METRICS = "the metrics token"
ADDRESS = "203.0.113.7"


class _Counts:
    """Two throttles' counters in memory: ``keys`` (wrong keys and metrics tokens) and
    ``admin`` (wrong admin tokens)."""

    def __init__(self) -> None:
        self.counted: Counter[str] = Counter()

    def counter(self, name: str) -> FailedAuthThrottle:
        async def count(address: str, window_s: float) -> WindowCount:
            self.counted[name] += 1
            return WindowCount(self.counted[name], window_s)

        async def read(address: str) -> WindowCount:
            return WindowCount(self.counted[name], 60.0)

        return FailedAuthThrottle(2, 60.0, count, read=read if name == "admin" else None)


def _tokens(
    counts: _Counts, admin: str | None = ADMIN, metrics: str | None = METRICS
) -> OperatorTokens:
    return OperatorTokens(
        admin,
        metrics,
        auth_throttle=counts.counter("keys"),
        admin_throttle=counts.counter("admin"),
    )


async def _refused(admit: Awaitable[None]) -> ApiError:
    with pytest.raises(ApiError) as refused:
        await admit
    return refused.value


async def test_the_right_tokens_pass_and_count_nothing() -> None:
    counts = _Counts()
    tokens = _tokens(counts)
    await tokens.admit_admin(f"Bearer {ADMIN}", ADDRESS)
    await tokens.admit_metrics(f"bearer {METRICS}", ADDRESS)
    assert not counts.counted


async def test_a_wrong_admin_token_is_a_401_counted_apart() -> None:
    counts = _Counts()
    refused = await _refused(_tokens(counts).admit_admin("Bearer wrong", ADDRESS))
    assert (refused.kind, refused.message) == (ErrorKind.ADMIN_UNAUTHORIZED, ADMIN_REFUSED)
    assert counts.counted == {"admin": 1}


async def test_an_unset_admin_token_refuses_everyone() -> None:
    counts = _Counts()
    refused = await _refused(_tokens(counts, admin=None).admit_admin("Bearer ", ADDRESS))
    assert refused.kind is ErrorKind.ADMIN_UNAUTHORIZED


async def test_over_the_admin_limit_the_right_token_is_refused_too() -> None:
    counts = _Counts()
    tokens = _tokens(counts)
    for _ in range(3):
        with pytest.raises(ApiError):
            await tokens.admit_admin(None, ADDRESS)
    refused = await _refused(tokens.admit_admin(f"Bearer {ADMIN}", ADDRESS))
    assert refused.kind is ErrorKind.AUTH_RATE_LIMITED


async def test_a_wrong_metrics_token_is_counted_with_wrong_keys() -> None:
    counts = _Counts()
    refused = await _refused(_tokens(counts).admit_metrics(f"Bearer {ADMIN}", ADDRESS))
    assert (refused.kind, refused.message) == (ErrorKind.ADMIN_UNAUTHORIZED, METRICS_REFUSED)
    assert counts.counted == {"keys": 1}


async def test_an_unset_metrics_token_opens_the_metrics() -> None:
    counts = _Counts()
    await _tokens(counts, metrics=None).admit_metrics(None, ADDRESS)
    assert not counts.counted
