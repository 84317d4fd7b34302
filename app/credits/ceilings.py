"""A request's credit ceiling: the most one request may hold and be charged.

A client sets it per request with the ``svc-max-credits`` header; a key's owner sets it for
every request of the key (``max_credits_per_request``). reserve.lua applies the lower of
the two: it holds at most that, lowers the output cap to fit, or refuses the request
(``CEILING_TOO_LOW``) when the prompt and one output token cannot fit. Settle never charges
more than the hold, so a request never costs more than its ceiling.
"""

from __future__ import annotations

from typing import Final

from app.core.errors import invalid_value

HEADER: Final = "svc-max-credits"
NO_CEILING: Final = 0
"""A ceiling as reserve.lua and a key's record take "none"."""
MAX_CEILING: Final = 10**12
"""The largest ceiling accepted (as large as any balance a grant can make)."""


def requested_ceiling(raw: str | None) -> int:
    """The ceiling a request's ``svc-max-credits`` header sets (``NO_CEILING`` without one),
    or the 400 naming the header when it is not a whole number from 1 to ``MAX_CEILING``."""
    if raw is None:
        return NO_CEILING
    text = raw.strip()
    if text.isascii() and text.isdigit() and len(text) <= len(str(MAX_CEILING)):
        ceiling = int(text)
        if 1 <= ceiling <= MAX_CEILING:
            return ceiling
    raise invalid_value(
        HEADER,
        f"The {HEADER} header must be a whole number of credits from 1 to {MAX_CEILING:,}: "
        "the most this request may cost.",
    )
