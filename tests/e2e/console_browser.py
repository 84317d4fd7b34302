"""Driving the console (``/console``) in a real headless Chromium with Playwright.

Chromium is Debian's package (tests/ensure-chromium.sh installs it; SVC_TEST_CHROMIUM names
another). Every page a test looks at is checked the same way: no accessibility violation
(axe-core), nothing in the browser's console, and a screenshot (into docs/console/ when
SVC_CONSOLE_SCREENSHOTS says so: ``make screenshots``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
VIEWER_ZONE = "America/New_York"  # not UTC: dates must show in the viewer's zone
_AXE = Axe()


def chromium_path() -> str:
    path = os.environ.get("SVC_TEST_CHROMIUM") or shutil.which("chromium")
    if not path:
        raise RuntimeError("no chromium: run `bash tests/ensure-chromium.sh` (make test does)")
    return path


def launch() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path())
        try:
            yield browser
        finally:
            browser.close()


def screenshot_dir(fallback: Path) -> Path:
    wanted = os.environ.get("SVC_CONSOLE_SCREENSHOTS")
    target = (ROOT / wanted) if wanted else fallback
    target.mkdir(parents=True, exist_ok=True)
    return target


@dataclass
class Console:
    """One browser tab on the console, and what its browser console said."""

    page: Page
    url: str  # …/console/
    shots: Path
    messages: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)  # messages a test expects

    def __post_init__(self) -> None:
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.messages.append(f"pageerror: {error}"))

    def _console(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            self.messages.append(f"{message.type}: {message.text}")

    def open(self, name: str) -> None:
        """Go to a section and wait until it has rendered (its heading, no "Loading…")."""
        self.page.goto(f"{self.url}#/{name}")
        self.wait_rendered()

    def wait_rendered(self) -> None:
        expect(self.page.locator("#page h1")).to_have_count(1)
        expect(self.page.get_by_text("Loading…")).to_have_count(0)

    def sign_in(self, key: str) -> None:
        self.page.goto(self.url)
        self.page.get_by_label("API key").fill(key)
        self.page.get_by_role("button", name="Sign in").click()
        expect(self.page.get_by_role("button", name="Sign out")).to_be_visible()
        self.wait_rendered()

    def sign_out(self) -> None:
        self.page.get_by_role("button", name="Sign out").click()
        expect(self.page.get_by_role("heading", name="Sign in to the console")).to_be_visible()

    def stored_key(self) -> Any:
        return self.page.evaluate("() => window.sessionStorage.getItem('svc-console-key')")

    def check(self, shot: str | None = None) -> None:
        """No accessibility violation and no console message on the page as it is now."""
        results = _AXE.run(self.page)
        violations = [
            f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']]}"
            for v in results.response["violations"]
        ]
        assert violations == [], violations
        unexpected = [m for m in self.messages if not any(p.search(m) for p in self.allowed)]
        assert unexpected == [], unexpected
        if shot:
            self.page.screenshot(path=self.shots / f"{shot}.png", full_page=True)

    def page_text(self) -> str:
        """Everything the page holds as text, form fields' values included."""
        return str(
            self.page.evaluate(
                """() => document.documentElement.outerHTML + [...document.querySelectorAll(
                    'input, textarea')].map((field) => field.value).join(' ')"""
            )
        )
