"""What counts as a token count in an upstream's usage report: the one owner of that rule,
for every API an upstream may speak (``sse``, ``responses_sse``, ``messages_sse``).

A count is a JSON integer from 0 to ``MAX_TOKEN_COUNT``. Anything else an upstream puts
there (``true``, which Python would take for 1, a float, a string, a negative number, a
number no JSON client reads exactly) is no count: a report whose prompt or completion count
is not one is no report (svc's estimate bills, as for a stream that reported nothing), and
a detail that is not one is left out. A count above what the reservation held for is still
a count: settlement clamps it to the hold (``app.completion.settlement``).
"""

from __future__ import annotations

from app.upstream.base import Usage

MAX_TOKEN_COUNT = 2**53 - 1
"""The largest count read: the largest integer a JSON client (a JavaScript one) reads
exactly, and far past any hold."""


def token_count(value: object) -> int | None:
    """``value`` when it is a count, else None (``bool`` is an ``int`` to Python: not one)."""
    if type(value) is int and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return None


def token_counts(details: object) -> dict[str, int] | None:
    """The counts of a usage report's details object (providers send nulls for what they do
    not count), None when it has none."""
    if type(details) is not dict or not details:
        return None
    counts = {
        name: value
        for name, value in details.items()
        if type(value) is int and 0 <= value <= MAX_TOKEN_COUNT
    }
    return counts or None


def usage_report(
    prompt: object, completion: object, prompt_details: object, completion_details: object
) -> Usage | None:
    """The usage an upstream reported, or None when its prompt or completion count is not a
    count (the report is not to be trusted: the estimate bills)."""
    prompt_tokens = token_count(prompt)
    completion_tokens = token_count(completion)
    if prompt_tokens is None or completion_tokens is None:
        return None
    return Usage(
        prompt_tokens,
        completion_tokens,
        token_counts(prompt_details),
        token_counts(completion_details),
    )
