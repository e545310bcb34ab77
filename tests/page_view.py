"""A page as a person sees it: opened in headless Chromium (Debian's ``chromium``, driven by
Playwright) in a laptop-sized window, measured, and photographed.

    python tests/page_view.py run.html shot.png     # the README's screenshot: the first screen
"""

from __future__ import annotations

import itertools
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

WINDOW = {"width": 1300, "height": 850}
ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "test-artifacts"
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


def drawn_lanes(run: dict) -> dict[str, list[tuple[float, float]]]:
    """The task timeline as drawn: each lane's label with its bars' (start, end), in seconds."""
    from kappa_ingest.report import plots

    ax = plots.task_timeline(run).axes[0]
    names = {round(y): label.get_text() for y, label in zip(ax.get_yticks(), ax.get_yticklabels(), strict=True)}
    out: dict[str, list[tuple[float, float]]] = {}
    for bar in ax.patches:
        if bar.get_width() > 0:
            out.setdefault(names[round(bar.get_y() + bar.get_height() / 2)], []).append(
                (bar.get_x(), bar.get_x() + bar.get_width())
            )
    return {k: sorted(v) for k, v in out.items()}


def overlaps(run: dict) -> list[tuple]:
    """Bars drawn over each other in one lane of the timeline (a millisecond of grace: Spark's
    times are rounded to it)."""
    return [
        (k, a, b) for k, bars in drawn_lanes(run).items() for a, b in itertools.pairwise(bars) if a[1] > b[0] + 0.001
    ]


def check_run_page(run: dict, figures: int) -> PageView:
    """A run's page (``metrics_store.run``'s tables) as a reader meets it: nothing wider than a
    1300 px window, every figure loaded, the headline on the first screen, no two tasks in one
    lane of the timeline. Page and screenshot are kept in build/test-artifacts/."""
    from kappa_ingest.report.html import render_html

    assert chromium() is not None, "no chromium on PATH: `make browser` (which `make test` runs) installs Debian's"
    rid = run["runs"][0]["run_id"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = ARTIFACTS / f"report-{rid}.html"
    page.write_text(render_html(run))
    seen = view(page, ARTIFACTS / f"report-{rid}.png")
    assert seen.scroll_width <= seen.inner_width == WINDOW["width"], f"{page}: {seen.scroll_width} px wide"
    assert len(seen.images) == figures and all(i["loaded"] and i["width"] > 300 for i in seen.images), seen.images
    assert seen.headline_bottom <= seen.inner_height, f"{page}: the headline ends at {seen.headline_bottom} px"
    assert not overlaps(run), overlaps(run)
    return seen


if __name__ == "__main__":
    shown = view(Path(sys.argv[1]), Path(sys.argv[2]), full_page=False)
    print(shown)
