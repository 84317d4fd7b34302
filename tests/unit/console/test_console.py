"""The console's files as svc serves them, and the rules its sources keep (no inline
script, no HTML from strings, one list of webhook events)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from litestar import Litestar
from litestar.datastructures import ResponseHeader
from litestar.testing import TestClient

from app.console import CONTENT_SECURITY_POLICY, STATIC, load_assets
from app.http.console import ConsoleController
from app.http.errors import handle_exception
from app.http.headers import SECURITY_HEADERS
from app.keys.roles import DEFAULT_ROLE, ROLES
from app.webhooks.events import EVENT_TYPES

SCRIPTS = sorted(STATIC.rglob("*.js"))


@pytest.fixture
def client() -> Iterator[TestClient[Litestar]]:
    app = Litestar(
        [ConsoleController],
        response_headers=[ResponseHeader(name=k, value=v) for k, v in SECURITY_HEADERS],
        exception_handlers={Exception: handle_exception},
    )
    with TestClient(app) as test_client:
        yield test_client


@pytest.mark.parametrize("path", ["/console", "/console/", "/console/index.html"])
def test_the_page_is_served_with_its_own_policy_and_never_stored(
    client: TestClient[Litestar], path: str
) -> None:
    r = client.get(path)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["x-frame-options"] == "DENY"  # svc's own headers still hold
    assert '<script type="module" src="/console/js/main.js">' in r.text


def test_the_policy_allows_nothing_inline_and_no_other_origin() -> None:
    directives = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert directives["default-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    for name, sources in directives.items():
        for loose in ("unsafe", "http", "*", "data:", "blob:"):
            assert loose not in sources, name


def test_files_are_revalidated_by_their_etag(client: TestClient[Litestar]) -> None:
    first = client.get("/console/js/main.js")
    assert first.status_code == 200
    assert first.headers["content-type"] == "text/javascript; charset=utf-8"
    assert first.headers["cache-control"] == "no-cache"
    again = client.get("/console/js/main.js", headers={"if-none-match": first.headers["etag"]})
    assert (again.status_code, again.content) == (304, b"")
    changed = client.get("/console/js/main.js", headers={"if-none-match": '"other"'})
    assert changed.status_code == 200


@pytest.mark.parametrize(
    "path", ["/console/nope.js", "/console/../app/__init__.py", "/console/js/../../__init__.py"]
)
def test_anything_else_is_an_openai_shaped_404(client: TestClient[Litestar], path: str) -> None:
    r = client.get(path)
    assert r.status_code == 404
    assert set(r.json()["error"]) >= {"message", "type", "code"}


def test_every_file_the_page_and_the_modules_name_is_served() -> None:
    assets = load_assets()
    named = re.findall(r'(?:src|href)="/console/([^"]+)"', assets["index.html"].body.decode())
    for script in SCRIPTS:
        for target in re.findall(r'from "(\.[^"]+)"', script.read_text()):
            named.append((script.parent / target).resolve().relative_to(STATIC).as_posix())
    assert named, "the page names its files"
    assert sorted(set(named) - set(assets)) == []


def test_no_script_builds_html_from_text_or_runs_strings() -> None:
    forbidden = re.compile(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
        r"setTimeout\(\s*[\"'`]|localStorage|document\.cookie"
    )
    for script in SCRIPTS:
        assert forbidden.findall(script.read_text()) == [], script.name


def test_the_page_has_no_inline_script_style_or_handler() -> None:
    page = (STATIC / "index.html").read_text()
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
    assert re.findall(r"\sstyle=|\son[a-z]+=|<style", page) == []


def test_the_webhook_form_offers_every_event_svc_sends() -> None:
    source = (STATIC / "js" / "pages" / "webhooks.js").read_text()
    offered = re.findall(r'^\s*\["([a-z_.]+)", "', source, flags=re.MULTILINE)
    assert offered == list(EVENT_TYPES)


def test_the_key_form_offers_every_role_and_defaults_as_the_api_does() -> None:
    source = (STATIC / "js" / "pages" / "keys.js").read_text()
    offered = re.findall(r'option\("([a-z]+)", "', source)
    assert sorted(offered) == sorted(ROLES)
    assert re.findall(r'const DEFAULT_ROLE = "([a-z]+)"', source) == [DEFAULT_ROLE]
