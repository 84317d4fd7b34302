"""The Stripe-Signature of a webhook event (app.purchases.stripe_signature): a v1 digest one
current secret makes (two during a rotation), within five minutes either way, refused with
a 400 that names neither the header nor a secret."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.core.errors import ApiError, ErrorKind
from app.purchases.stripe_signature import MAX_HEADER_CHARS, TOLERANCE_S, verify
from tests.support.stripe_signing import checkout_session, sign

NOW = 1_790_000_000
BODY = checkout_session()
OLD, NEW = "whsec_old_0123456789", "whsec_new_9876543210"
SECRETS = (OLD, NEW)


def _refused(
    header: str | None, body: bytes = BODY, now: float = NOW, secrets: tuple[str, ...] = SECRETS
) -> str:
    with pytest.raises(ApiError) as refused:
        verify(body, header, secrets, now)
    error = refused.value
    assert (error.kind, error.status) == (ErrorKind.INVALID_STRIPE_SIGNATURE, 400)
    body_text = error.body().decode()
    assert '"code":"invalid_stripe_signature"' in body_text
    assert '"type":"invalid_request_error"' in body_text
    for secret in (*secrets, OLD, NEW):
        assert not secret.strip() or secret not in body_text
    for part in (header or "").split(","):  # neither the time nor a digest is echoed
        value = part.partition("=")[2]
        assert len(value) < 8 or value[:8] not in body_text
    return error.message


def test_a_body_signed_now_by_the_secret_is_taken() -> None:
    verify(BODY, sign(BODY, NEW, NOW), (NEW,), NOW)


@pytest.mark.parametrize("secret", SECRETS)
def test_during_a_rotation_either_secret_signs(secret: str) -> None:
    verify(BODY, sign(BODY, secret, NOW), SECRETS, NOW)


def test_the_edges_of_the_tolerance_are_inside_it() -> None:
    header = sign(BODY, NEW, NOW)
    verify(BODY, header, SECRETS, NOW + TOLERANCE_S)
    verify(BODY, header, SECRETS, NOW - TOLERANCE_S)
    verify(BODY, header, SECRETS, NOW + 10, tolerance_s=10)


def test_one_good_v1_among_several_and_other_schemes_is_enough() -> None:
    good = sign(BODY, NEW, NOW).split(",")[1]
    verify(BODY, f"t={NOW},v1={'0' * 64},{good},v0={'1' * 64}", SECRETS, NOW)


def test_a_missing_header_is_refused() -> None:
    assert "no Stripe-Signature header" in _refused(None)
    assert "no Stripe-Signature header" in _refused("")


def test_a_retired_or_wrong_secret_is_refused() -> None:
    message = _refused(sign(BODY, "whsec_retired_000000", NOW))
    assert "No v1 signature" in message
    _refused(sign(BODY, NEW, NOW), secrets=(OLD,))
    _refused(sign(BODY, NEW, NOW), secrets=())
    _refused(sign(BODY, NEW, NOW), secrets=("", "  "))


def test_a_changed_body_or_time_is_refused() -> None:
    header = sign(BODY, NEW, NOW)
    _refused(header, body=BODY + b" ")
    _refused(header.replace(f"t={NOW}", f"t={NOW + 1}"))  # the time is signed too
    _refused(header[:-1] + ("0" if header[-1] != "0" else "1"))


def test_a_stale_event_is_refused() -> None:
    message = _refused(sign(BODY, NEW, NOW), now=NOW + TOLERANCE_S + 1)
    assert "old" in message
    assert "old" in _refused(sign(BODY, NEW, NOW - 3600), now=NOW)


def test_an_event_from_the_future_is_refused() -> None:
    message = _refused(sign(BODY, NEW, NOW), now=NOW - TOLERANCE_S - 1)
    assert "ahead" in message


def test_a_stale_time_is_only_reported_for_a_genuine_signature() -> None:
    # a forged header learns nothing about svc's clock: it is a mismatch, whatever its time
    assert "No v1 signature" in _refused(sign(BODY, "whsec_forged_00000", NOW - 3600))


@pytest.mark.parametrize(
    "header",
    [
        f"v1={'0' * 64}",  # no time
        f"t={NOW}",  # no digest
        f"t={NOW},v0={'0' * 64}",  # no v1
        f"t=soon,v1={'0' * 64}",
        f"t=-{NOW},v1={'0' * 64}",
        f"t={NOW},t={NOW},v1={'0' * 64}",  # which time is meant is unknown
        f"t={NOW}, v1={'0' * 64}",
        f"t={NOW},v1=",
        f"t={NOW},v1={'z' * 64}",
        f"t={NOW},v1=" + "é" * 64,
        "t=" + "9" * 13 + f",v1={'0' * 64}",
        f"t={NOW}," + ",".join([f"v1={'0' * 64}"] * 40),  # longer than any header of Stripe's
        "garbage",
    ],
)
def test_a_malformed_header_is_refused(header: str) -> None:
    assert "malformed" in _refused(header)


def test_the_longest_header_svc_reads_is_still_verified() -> None:
    good = sign(BODY, NEW, NOW)
    padding = f",v1={'0' * 64}"
    header = good + padding * ((MAX_HEADER_CHARS - len(good)) // len(padding))
    assert len(header) <= MAX_HEADER_CHARS
    verify(BODY, header, SECRETS, NOW)


def test_a_body_that_is_not_utf8_is_refused() -> None:
    body = b'{"id": "\xff"}'
    assert "UTF-8" in _refused(sign(body, NEW, NOW), body=body)


def test_stripe_s_library_is_loaded_by_the_first_verification_only() -> None:
    # it brings requests and httpx: a worker that is never sent an event does without them
    probe = (
        "import sys\n"
        "import app.purchases.stripe_signature as signature, app.purchases.stripe_events\n"
        "before = 'stripe' in sys.modules\n"
        "try:\n"
        "    signature.verify(b'{}', 't=1,v1=00', ['whsec_x'], 1.0)\n"
        "except Exception:\n"
        "    pass\n"
        "print(before, 'stripe' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
