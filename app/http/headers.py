"""Headers every response carries."""

from __future__ import annotations

SECURITY_HEADERS = (
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("content-security-policy", "default-src 'none'; frame-ancestors 'none'"),
)
"""An API has no page to frame, sniff or refer from."""

NO_STORE = ("cache-control", "no-store")
"""On every answer that shows an account's data (the /v1 and admin routes, the console's
page): no browser or proxy keeps a copy."""
