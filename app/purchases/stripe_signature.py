"""The ``Stripe-Signature`` of a webhook event: ``t=<unix seconds>,v1=<hex HMAC-SHA256 of
t + "." + raw body>`` (more ``v1`` while Stripe rolls a secret; other schemes, such as test
mode's ``v0``, are not read). An event is taken when one ``v1`` is made by one of the
endpoint's signing secrets (two while svc's own is rotated) and its time is within
``TOLERANCE_S`` of svc's clock, either way.

The digest and its constant-time comparison are Stripe's own library's
(``stripe.WebhookSignature.verify_header``): nothing here computes an HMAC. The library reads
the clock itself (``time.time()``) and only checks for old times, so it is called without a
tolerance and the time is checked here, against the caller's ``now``. The header is parsed
here first, strictly (exactly one ``t``, in digits; every ``v1`` in hex; at most
``MAX_HEADER_CHARS``), so the time checked here is the one the library signs with, and
whatever the library would choke on is refused as malformed before it sees it.

The library is imported on the first verification, not with this module: it loads its HTTP
clients (requests, httpx), which a worker that never receives a Stripe event does without
(tests/unit/test_worker_imports.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core.errors import invalid_stripe_signature

SIGNATURE_HEADER = "Stripe-Signature"
TOLERANCE_S = 300
"""Stripe's own default: an event signed more than five minutes from now is refused."""
MAX_HEADER_CHARS = 2048
"""Room for a time and a dozen ``v1`` (67 characters each); longer is not Stripe's."""
_HEX = frozenset("0123456789abcdefABCDEF")


def verify(
    payload: bytes,
    header: str | None,
    secrets: Sequence[str],
    now: float,
    tolerance_s: int = TOLERANCE_S,
) -> None:
    """Return when ``header`` signs ``payload`` (the raw body, as received) with one of
    ``secrets``, at a time within ``tolerance_s`` of ``now``; raise the 400
    ``invalid_stripe_signature`` otherwise, saying which of these failed."""
    if not header:
        raise invalid_stripe_signature(f"The request has no {SIGNATURE_HEADER} header.")
    timestamp = _signed_time(header)
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        # Stripe signs JSON text: a body that is not UTF-8 was not sent by Stripe
        raise invalid_stripe_signature("The body is not UTF-8 text.") from None
    if not _signed_by_one_of(text, header, secrets):
        raise invalid_stripe_signature(
            f"No v1 signature in the {SIGNATURE_HEADER} header matches this body "
            "with a current signing secret."
        )
    if timestamp < now - tolerance_s:
        raise invalid_stripe_signature(
            f"The {SIGNATURE_HEADER} time is more than {tolerance_s} seconds old "
            "(a replayed event, or svc's clock is ahead)."
        )
    if timestamp > now + tolerance_s:
        raise invalid_stripe_signature(
            f"The {SIGNATURE_HEADER} time is more than {tolerance_s} seconds ahead "
            "(svc's clock is behind)."
        )


def _signed_time(header: str) -> int:
    """The header's ``t``, after checking the header has the shape Stripe sends."""
    malformed = invalid_stripe_signature(
        f"The {SIGNATURE_HEADER} header is malformed: Stripe sends "
        "'t=<unix seconds>,v1=<hex signature>'."
    )
    if len(header) > MAX_HEADER_CHARS or not header.isascii():
        raise malformed
    times: list[str] = []
    signatures = 0
    # split as the library splits (no spaces stripped), so both read the same ``t``
    for part in header.split(","):
        name, _, value = part.partition("=")
        if name == "t":
            times.append(value)
        elif name == "v1":
            if not value or not _HEX.issuperset(value):
                raise malformed
            signatures += 1
    if len(times) != 1 or not times[0].isdigit() or len(times[0]) > 12 or signatures == 0:
        raise malformed
    return int(times[0])


def _signed_by_one_of(text: str, header: str, secrets: Sequence[str]) -> bool:
    """Whether the library finds a ``v1`` of ``header`` made by one of ``secrets``. Every
    secret is tried (no early exit), so the time taken does not tell which one matched."""
    from stripe import SignatureVerificationError, WebhookSignature

    matched = False
    for secret in secrets:
        if not secret.strip():
            continue  # the library refuses a blank secret; it can sign nothing
        try:
            # tolerance=None: the library skips its own clock (the time is checked above)
            WebhookSignature.verify_header(text, header, secret, tolerance=None)
        except SignatureVerificationError:
            continue
        matched = True
    return matched
