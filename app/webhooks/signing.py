"""Signing secrets and signatures.

A webhook's secret is derived, never stored: ``whsec_`` + HMAC-SHA256(key pepper, the
webhook's id and a random salt the store keeps). Without the pepper the store's rows give
nothing away; with it, svc signs every delivery with the secret shown once at creation.

A delivery's ``svc-signature`` header is ``t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
"<t>.<raw body>")>`` (docs/api.md shows how to verify it).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from app.core.ids import base62

SIGNATURE_HEADER = "svc-signature"
SECRET_PREFIX = "whsec_"


def new_salt() -> str:
    return secrets.token_hex(16)


def webhook_secret(pepper: bytes, webhook_id: str, salt: str) -> str:
    mac = hmac.new(pepper, f"svc webhook secret\0{webhook_id}\0{salt}".encode(), hashlib.sha256)
    return SECRET_PREFIX + base62(int.from_bytes(mac.digest()), 43)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``svc-signature`` header's value for ``body`` sent at ``timestamp``."""
    signed = b"%d." % timestamp + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"
