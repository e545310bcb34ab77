"""A page as a person sees it: opened in headless Chromium (Debian's ``chromium``, driven by
Playwright) in a laptop-sized window, measured, and photographed.

    python tests/page_view.py run.html shot.png     # the README's screenshot: the first screen
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

WINDOW = {"width": 1300, "height": 850}
# As root Chromium needs --no-sandbox; the rest keep it from calling Google's hosts, which
# this machine's closed network refuses, many at a time.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]  # fmt: skip
MEASURE = """() => ({
  scrollWidth: document.documentElement.scrollWidth,
  innerWidth: window.innerWidth,
  innerHeight: window.innerHeight,
  images: [...document.images].map(i => ({alt: i.alt, loaded: i.complete && i.naturalWidth > 0,
                                          width: i.getBoundingClientRect().width})),
  headlineBottom: Math.max(...[...document.querySelectorAll('.tiles, .phases')]
                                 .map(e => e.getBoundingClientRect().bottom)),
  headline: [...document.querySelectorAll('.tile')].map(e => e.innerText.replace(/\\s+/g, ' ').trim()),
})"""


def chromium() -> str | None:
    return shutil.which("chromium")


@dataclass
class PageView:
    scroll_width: int
    inner_width: int
    inner_height: int
    images: list[dict]
    headline_bottom: float
    headline: list[str]


def view(
    page: Path, screenshot: Path | None = None, full_page: bool = True, window: dict[str, int] = WINDOW
) -> PageView:
    """Open ``page`` at ``window``'s size, measure what overflows and what loaded, and keep a
    screenshot (of the whole page, or of the first screen) at ``screenshot``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=FLAGS)
        try:
            tab = browser.new_page(viewport=window)
            tab.goto(page.resolve().as_uri(), wait_until="load")
            seen = tab.evaluate(MEASURE)
            if screenshot is not None:
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                tab.screenshot(path=str(screenshot), full_page=full_page)
        finally:
            browser.close()
    return PageView(seen["scrollWidth"], seen["innerWidth"], seen["innerHeight"], seen["images"],
                    seen["headlineBottom"], seen["headline"])  # fmt: skip


if __name__ == "__main__":
    shown = view(Path(sys.argv[1]), Path(sys.argv[2]), full_page=False)
    print(shown)
