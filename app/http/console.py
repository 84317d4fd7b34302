"""``/console``: the account console's files (``app.console``), with the console's own
Content-Security-Policy; account data is never in them (the browser reads it from /v1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import Controller, Request, Response, get
from litestar.params import FromPath
from litestar.response import Redirect

from app.console import CONTENT_SECURITY_POLICY, INDEX, Asset, load_assets
from app.core.errors import ApiError, ErrorKind
from app.http.headers import NO_STORE

_ASSETS = load_assets()

# The page holds the signed-in account's data once its script has run: never stored. Its
# scripts and styles are revalidated on every load (an upgraded svc serves new ones at once).
_PAGE_CACHE = NO_STORE[1]
_FILE_CACHE = "no-cache"


def _answer(asset: Asset, request: Request[Any, Any, Any], cache_control: str) -> Response[bytes]:
    headers = {
        "content-security-policy": CONTENT_SECURITY_POLICY,
        "cache-control": cache_control,
        "etag": asset.etag,
    }
    if request.headers.get("if-none-match") == asset.etag:
        return Response(b"", status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


@get("/", include_in_schema=False, name="root")
async def root() -> Redirect:
    """``/``: a browser pointed at svc lands on the console, the one page it has (302)."""
    return Redirect(path=ConsoleController.path)


class ConsoleController(Controller):
    path = "/console"
    include_in_schema = False

    @get("/", name="console")
    async def page(self, request: Request[Any, Any, Any]) -> Response[bytes]:
        """The console's one page, at ``/console`` and ``/console/`` (it names its files by
        absolute paths, and routes by the URL's fragment: ``#/keys``)."""
        return _answer(_ASSETS[INDEX], request, _PAGE_CACHE)

    @get("/{name:path}")
    async def file(self, request: Request[Any, Any, Any], name: FromPath[Path]) -> Response[bytes]:
        """A script, style sheet or icon of the console."""
        wanted = name.as_posix().lstrip("/")
        asset = _ASSETS.get(wanted)
        if asset is None:
            raise ApiError(ErrorKind.NOT_FOUND, "No such console file.")
        return _answer(asset, request, _PAGE_CACHE if wanted == INDEX else _FILE_CACHE)
