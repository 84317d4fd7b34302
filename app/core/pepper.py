"""Keys derived from the key pepper.

The pepper (``SVC_KEY_PEPPER``, or the one generated into the data directory) is the secret
every worker of a deployment shares. A use that needs a key of its own gets one from
``derive_key``: HMAC-SHA256(pepper, a name for the use). Keys of different uses say nothing
about each other or about the pepper, and every worker derives the same one.
"""

from __future__ import annotations

import hashlib
import hmac


def derive_key(pepper: bytes, purpose: str) -> bytes:
    """The 32-byte key of ``purpose`` (a fixed name, one per use: "spotlight-intent" seals
    the spotlight intents, "svc safety identifier" keys the safety identifiers)."""
    return hmac.digest(pepper, purpose.encode(), hashlib.sha256)
