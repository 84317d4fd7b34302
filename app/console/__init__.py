"""The account console: a small ES-module app, served by svc itself at ``/console``.

Its files ship in the wheel and the image (``static/``); the browser runs them as they are,
with no build step. The console talks to svc only through the public ``/v1`` API, with a
key the owner pastes, held in the tab's ``sessionStorage``: it adds no new trust.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import NamedTuple

STATIC = Path(__file__).parent / "static"
INDEX = "index.html"

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",  # the modules under /console/js: no inline script, no eval
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",  # the /v1 API of the svc that served the page
        "base-uri 'none'",
        "form-action 'none'",  # every form is handled by script, none is posted
        "frame-ancestors 'none'",
    )
)
"""The console's pages: nothing from another origin, nothing inline."""

_MEDIA_TYPES = {
    ".html": "text/html",  # Litestar adds the charset (utf-8) to text types
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}


class Asset(NamedTuple):
    """One file of the console, read once: its bytes, type and validator."""

    body: bytes
    media_type: str
    etag: str


def load_assets(root: Path = STATIC) -> dict[str, Asset]:
    """Every file under ``root`` by its path relative to it (``js/main.js``)."""
    assets = {}
    for path in sorted(root.rglob("*")):
        media_type = _MEDIA_TYPES.get(path.suffix)
        if media_type is None or not path.is_file():
            continue
        body = path.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        assets[path.relative_to(root).as_posix()] = Asset(body, media_type, etag)
    return assets
