"""Driving the console (``/console``) in a real headless Chromium with Playwright.

Chromium is Debian's package (tests/ensure-chromium.sh installs it; SVC_TEST_CHROMIUM names
another). Every page a test looks at is checked the same way: no accessibility violation
(axe-core), nothing in the browser's console, and a screenshot (into docs/console/ when
SVC_CONSOLE_SCREENSHOTS says so: ``make screenshots``). ``check_themes`` does it in the light
and the dark theme (the console follows ``prefers-color-scheme``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from axe_playwright_python.sync_playwright import Axe  # type: ignore[import-untyped]
from playwright.sync_api import Browser, Locator, Page, ViewportSize, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
DESKTOP: ViewportSize = {"width": 1280, "height": 860}
PHONE: ViewportSize = {"width": 375, "height": 812}
Scheme = Literal["light", "dark"]
SCHEMES: tuple[Scheme, ...] = ("light", "dark")  # prefers-color-scheme, as Playwright emulates
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
        self.expect_signed_out()
        self.page.get_by_label("API key").fill(key)
        self.page.get_by_role("button", name="Sign in").click()
        expect(self.page.get_by_role("button", name="Sign out")).to_be_visible()
        self.wait_rendered()

    def sign_out(self) -> None:
        self.page.get_by_role("button", name="Sign out").click()
        self.expect_signed_out()

    def expect_signed_out(self) -> None:
        """The sign-in form, and nothing of a session: no navigation, no Sign out."""
        expect(self.page.get_by_role("heading", name="Sign in to the console")).to_be_visible()
        expect(self.page.locator("#sign-out")).to_be_hidden()
        expect(self.page.get_by_role("button", name="Sign out")).to_have_count(0)
        expect(self.page.get_by_role("navigation")).to_have_count(0)

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

    def check_themes(self, shot: str) -> None:
        """``check`` in each color scheme, with a screenshot of each (``{shot}-{scheme}``)."""
        try:
            for scheme in SCHEMES:
                self.page.emulate_media(color_scheme=scheme)
                self.check(f"{shot}-{scheme}")
        finally:
            self.page.emulate_media(color_scheme="light")

    def expect_fully_in_view(self, target: Locator) -> None:
        """All of ``target`` is on screen: not past the viewport's edge, nor scrolled out of
        sight inside a scrolling region (the browser's IntersectionObserver says so)."""
        expect(target).to_be_in_viewport(ratio=1)

    def shows_content_of(self, cell: Locator) -> bool:
        """Whether what ``cell`` holds (its text, not its padding) is all on screen: inside the
        viewport and inside the scrolling region around it."""
        return bool(
            cell.evaluate(
                """(cell) => {
                    const range = document.createRange();
                    range.selectNodeContents(cell);
                    const box = range.getBoundingClientRect();
                    const region = cell.closest('.table-wrap').getBoundingClientRect();
                    const left = Math.max(0, region.left);
                    const right = Math.min(window.innerWidth, region.right);
                    return box.width > 0 && box.left >= left && box.right <= right;
                }"""
            )
        )

    def chart_contrast(self) -> float:
        """The lowest contrast ratio (WCAG's formula) of the charts' bars, gridline labels and
        axes against the page's background, in the theme shown now."""
        return float(
            self.page.evaluate(
                """() => {
                    const rgb = (css) => css.match(/[\\d.]+/g).slice(0, 3).map(Number);
                    const luminance = (css) => {
                        const [r, g, b] = rgb(css).map((c) => {
                            const v = c / 255;
                            return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
                        });
                        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
                    };
                    const ratio = (a, b) => {
                        const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
                        return (hi + 0.05) / (lo + 0.05);
                    };
                    const page = getComputedStyle(document.documentElement).backgroundColor;
                    const marks = document.querySelectorAll(
                        '.chart rect, .chart text, .legend rect, .chart .axis');
                    if (marks.length === 0) return 0;
                    return Math.min(...[...marks].map((mark) => {
                        const style = getComputedStyle(mark);
                        const paint = mark.tagName === 'line' ? style.stroke : style.fill;
                        return ratio(paint, page);
                    }));
                }"""
            )
        )

    def overflows(self) -> list[str]:
        """What spills sideways: the page wider than the viewport, or text running out of a
        card, a notice or a dialog (tables and code scroll inside their own regions)."""
        return list(
            self.page.evaluate(
                """() => {
                    const found = [];
                    const page = document.documentElement;
                    if (page.scrollWidth > innerWidth) found.push(`page: ${page.scrollWidth}px`);
                    const boxes = '.card, .key-card, .notice, .empty, dialog, .top-bar, .hint, '
                        + '.debt-banner';
                    for (const box of document.querySelectorAll(boxes)) {
                        if (box.offsetParent === null && box.tagName !== 'DIALOG') continue;
                        if (box.scrollWidth > box.clientWidth + 1) {
                            const what = box.className || box.tagName;
                            found.push(`${what}: ${box.textContent.slice(0, 40)}`);
                        }
                    }
                    return found;
                }"""
            )
        )

    def page_text(self) -> str:
        """Everything the page holds as text, form fields' values included."""
        return str(
            self.page.evaluate(
                """() => document.documentElement.outerHTML + [...document.querySelectorAll(
                    'input, textarea')].map((field) => field.value).join(' ')"""
            )
        )
