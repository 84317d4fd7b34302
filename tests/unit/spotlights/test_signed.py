"""The signature of a verifier's callback (app.spotlights.signed): HMAC-SHA256 over the time
and the raw body, two secrets during a rotation, five minutes either way."""

from __future__ import annotations

import pytest

from app.core.errors import ApiError, ErrorKind
from app.spotlights.signed import TOLERANCE_S, check, parse_secrets, sign

NOW = 1_790_000_000
BODY = b'{"intent":"spi_x","view_id":"view-1"}'
SECRETS = parse_secrets(" old-secret , new-secret ,")


def _refused(header: str | None, body: bytes = BODY, now: float = NOW) -> None:
    with pytest.raises(ApiError) as refused:
        check(header, body, SECRETS, now)
    assert (refused.value.kind, refused.value.status) == (ErrorKind.INVALID_SIGNATURE, 401)


def test_secrets_are_read_from_a_comma_separated_list() -> None:
    assert SECRETS == (b"old-secret", b"new-secret")
    assert parse_secrets("") == ()


@pytest.mark.parametrize("secret", [b"old-secret", b"new-secret"])
def test_either_current_secret_signs(secret: bytes) -> None:
    check(sign(secret, NOW, BODY), BODY, SECRETS, NOW)
    check(sign(secret, NOW, BODY), BODY, SECRETS, NOW + TOLERANCE_S)
    check(sign(secret, NOW, BODY), BODY, SECRETS, NOW - TOLERANCE_S)


def test_one_good_digest_among_several_is_enough() -> None:
    good = sign(b"new-secret", NOW, BODY).split(",")[1]
    check(f"t={NOW},v1={'0' * 64},{good}", BODY, SECRETS, NOW)


def test_anything_else_is_refused() -> None:
    _refused(None)
    _refused("")
    _refused(sign(b"retired-secret", NOW, BODY))
    _refused(sign(b"new-secret", NOW, BODY), body=BODY + b" ")
    _refused(sign(b"new-secret", NOW, BODY), now=NOW + TOLERANCE_S + 1)
    _refused(sign(b"new-secret", NOW, BODY), now=NOW - TOLERANCE_S - 1)
    header = sign(b"new-secret", NOW, BODY)
    _refused(header.replace(f"t={NOW}", f"t={NOW + 1}"))  # the time is signed too
    _refused(header.split(",")[1])  # no time
    _refused(header.split(",")[0])  # no digest
    _refused(header[:-1])  # a digest cut short
    _refused(header.replace(f"t={NOW}", "t=soon"))
    _refused(f"t={NOW},v1=" + "é" * 64)  # not ASCII: still only a refusal
    _refused("t=" + "9" * 2000)
