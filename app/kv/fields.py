"""The fields of svc's Redis hashes, named once: the scripts in ``app/credits/lua`` write
them, and everything that reads a hash (the ledger, reconcile, inspect, the metrics, the
benchmark's conservation check) names them through here."""

from __future__ import annotations

import msgspec

COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "credits")


class UsageCounters(msgspec.Struct, frozen=True):
    """Sums of settled requests."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    credits: int = 0

    def plus(self, other: UsageCounters) -> UsageCounters:
        return UsageCounters(
            self.requests + other.requests,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.credits + other.credits,
        )


def usage_field(environment: str, counter: str) -> str:
    """A usage hash's field: ``<environment>:<counter>`` (``live:credits``)."""
    return f"{environment}:{counter}"
