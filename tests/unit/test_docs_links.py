"""Every relative link in README.md and docs/ leads somewhere: the file exists, and a
``#section`` is a heading of it (as GitHub makes a heading's anchor)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation gone, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {anchor(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", page.read_text())) if not re.match(r"[a-z]+:", t)]


def test_the_docs_are_there_and_the_readme_maps_them():
    assert len(PAGES) > 5
    mapped = {t for t in links(ROOT / "README.md") if t.startswith("docs/")}
    assert {f"docs/{p.name}" for p in PAGES[1:]} <= mapped


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, section = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif section and (file.suffix != ".md" or section not in anchors(file)):
            broken.append(f"{target}: no such section")
    assert broken == []


def test_the_anchor_rule():
    assert anchor("Scheduled, incremental runs") == "scheduled-incremental-runs"
    assert anchor("The `csv` module's reading") == "the-csv-modules-reading"
