"""API key format, digests and hashes.

A key is ``svc_live_`` or ``svc_test_`` followed by 50 base62 characters: a 12-character
key id, 32 random characters and a 6-character checksum (CRC32 of everything before it).
The checksum lets svc reject typos and garbage before any Redis call.
"""

from __future__ import annotations

import hashlib
import hmac
import zlib

import msgspec
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from app.core.ids import BASE62, base62, random_base62

_BASE62_SET = frozenset(BASE62)
PREFIXES = {"live": "svc_live_", "test": "svc_test_"}
ENVIRONMENTS = tuple(PREFIXES)  # a key's environment: live or test
KID_LEN = 12
RANDOM_LEN = 32
CHECKSUM_LEN = 6
BODY_LEN = KID_LEN + RANDOM_LEN + CHECKSUM_LEN
KEY_LEN = len("svc_live_") + BODY_LEN
PUBLIC_ID_PREFIX = "key_"

# RFC 9106 "second recommended" profile: ~50 ms and 64 MiB per verification, cold path only.
# OWASP's argon2id setting (19 MiB, 2 passes, 1 lane). A key secret carries 190 random bits,
# so the hash guards a stolen database, not a guessable password; heavier settings only
# raise the cost of each cold-path verification (every hash records its own parameters,
# so older hashes still verify).
_hasher = PasswordHasher(time_cost=2, memory_cost=19_456, parallelism=1)


class ParsedKey(msgspec.Struct, frozen=True):
    environment: str
    kid: str


def _checksum(text: str) -> str:
    return base62(zlib.crc32(text.encode()), CHECKSUM_LEN)


def new_kid() -> str:
    """A fresh 12-character key id."""
    return random_base62(KID_LEN)


def generate_key(environment: str, kid: str | None = None) -> str:
    """A new key secret for ``environment`` ("live" or "test")."""
    head = PREFIXES[environment] + (kid or new_kid()) + random_base62(RANDOM_LEN)
    return head + _checksum(head)


def parse_key(secret: str) -> ParsedKey | None:
    """The key's environment and id, or None when it is malformed or its checksum is wrong."""
    if len(secret) != KEY_LEN:
        return None
    environment = "live" if secret.startswith("svc_live_") else "test"
    if not secret.startswith(PREFIXES[environment]):
        return None
    body = secret[len(PREFIXES[environment]) :]
    if not _BASE62_SET.issuperset(body):
        return None
    head = secret[:-CHECKSUM_LEN]
    if not hmac.compare_digest(_checksum(head), secret[-CHECKSUM_LEN:]):
        return None
    return ParsedKey(environment=environment, kid=body[:KID_LEN])


def public_id(kid: str) -> str:
    """The ``id`` a key has in the API."""
    return PUBLIC_ID_PREFIX + kid


def kid_from_public_id(key_id: str) -> str | None:
    """The key id inside an API ``id``, or None when it has the wrong form."""
    if not key_id.startswith(PUBLIC_ID_PREFIX):
        return None
    kid = key_id[len(PUBLIC_ID_PREFIX) :]
    if len(kid) != KID_LEN or not _BASE62_SET.issuperset(kid):
        return None
    return kid


def kid_named(text: str) -> str | None:
    """The key id ``text`` names in either form an operator meets: the API ``id``
    (``key_…``) or the bare id (Redis key names, the durable ``kid``); None for neither."""
    if len(text) == KID_LEN and _BASE62_SET.issuperset(text):
        return text
    return kid_from_public_id(text)


def is_last4(text: str) -> bool:
    """Whether ``text`` can be a key's last four characters (a list's ``last4``)."""
    return len(text) == 4 and _BASE62_SET.issuperset(text)


def digest(pepper: bytes, secret: str) -> str:
    """HMAC-SHA256 of the secret: the hot-path lookup handle. Useless without the pepper."""
    return hmac.new(pepper, secret.encode(), hashlib.sha256).hexdigest()


def hash_secret(secret: str) -> str:
    """argon2id hash kept at rest in the durable store."""
    return _hasher.hash(secret)


def verify_secret(secret_hash: str, secret: str) -> bool:
    """True when ``secret`` matches the stored argon2id hash."""
    try:
        return _hasher.verify(secret_hash, secret)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def bearer_secret(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None
