"""What the ad networks' callbacks to svc have in common: a query string read one way (each
parameter once, percent-decoded as UTF-8, at most 4 KiB), a network's event id taken as the
view's id, a hex digest compared with each key's in constant time, and the count of the
callbacks refused before a reward was attempted.

Each network's own sequence (parse, allowlist, signature, reward) is its module's:
``admob``, ``applovin``, ``levelplay``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from urllib.parse import unquote_to_bytes

from app.accounts.rewards import MAX_VIEW_ID
from app.core.errors import ApiError, ErrorKind, invalid_value
from app.core.metrics import METRICS

MAX_QUERY_BYTES = 4096  # the networks' callbacks are well under 1 KiB
MAX_NAME_CHARS = 40  # of a parameter an error names back


def component(raw: bytes) -> str:
    """A query component percent-decoded (``+`` is a space, as in any form-encoded query);
    raises ``UnicodeDecodeError`` when it is not UTF-8."""
    return unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")


def parameters(raw_query: bytes) -> dict[str, str]:
    """A callback's query string (bytes as received, without the ``?``) as its parameters;
    a 400 ``invalid_value`` when it is too long, not UTF-8, or names a parameter twice
    (which of the two the network signed cannot be known)."""
    if len(raw_query) > MAX_QUERY_BYTES:
        raise invalid_value("query", f"The query string is over {MAX_QUERY_BYTES} bytes.")
    found: dict[str, str] = {}
    for part in raw_query.split(b"&"):
        if not part:
            continue
        raw_name, _, raw_value = part.partition(b"=")
        try:
            name, value = component(raw_name), component(raw_value)
        except UnicodeDecodeError:
            raise invalid_value("query", "A query parameter is not UTF-8.") from None
        if name in found:
            shown = name[:MAX_NAME_CHARS]
            raise invalid_value(shown, f"The query parameter '{shown}' is given twice.")
        found[name] = value
    return found


def required(found: dict[str, str], name: str) -> str:
    """The parameter ``name``, or the 400 that says it is missing or empty."""
    value = found.get(name, "")
    if not value:
        raise invalid_value(name, f"The query parameter '{name}' is required.")
    return value


def event_id(found: dict[str, str], name: str) -> str:
    """The network's id of the view (its ``name`` parameter): what the reward's grant id
    and the ledger name it by, so 1 to ``MAX_VIEW_ID`` printable characters."""
    value = required(found, name)
    if len(value) > MAX_VIEW_ID or not value.isprintable():
        raise invalid_value(name, f"'{name}' must be 1 to {MAX_VIEW_ID} printable characters.")
    return value


def digest_matches(given: str, expected: Iterable[str]) -> bool:
    """Whether the hex digest ``given`` is one of ``expected`` (each key's), in either
    case; every one is compared in constant time, none skipped."""
    sent = given.lower().encode("ascii", errors="replace")
    matched = False
    for digest in expected:
        matched |= hmac.compare_digest(sent, digest.encode("ascii"))
    return matched


def signature_refused(network: str, what: str) -> ApiError:
    """The 401 for a callback whose hash none of the network's keys makes (``what`` names
    the parameter and the scheme; never a key)."""
    return ApiError(
        ErrorKind.INVALID_SIGNATURE,
        f"The {network} callback's {what} does not match a current key.",
    )


@contextmanager
def refusals_counted(network: str) -> Iterator[None]:
    """Counts, as ``invalid_signature``, a callback refused before its reward was attempted
    (not the network's callback, an ad unit that does not reward, a hash no key makes);
    what the reward itself answers is ``VerifiedRewards.reward``'s to count."""
    try:
        yield
    except ApiError as error:
        if error.kind in (ErrorKind.INVALID_VALUE, ErrorKind.INVALID_SIGNATURE):
            METRICS.labelled(METRICS.spotlight_callbacks, network, "invalid_signature").inc()
        raise
