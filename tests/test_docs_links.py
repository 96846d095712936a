"""The README and the reference pages in docs/: every relative link points at a file that exists,
every `#anchor` at a heading of its page (GitHub's rule for heading ids), every page is linked
from the README and links back to it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_follows_github() -> None:
    assert slug("How sure is a prediction? (the error band)") == (
        "how-sure-is-a-prediction-the-error-band"
    )
    assert slug("The solver processes (`server/pool.py`, `server/courier.py`)") == (
        "the-solver-processes-serverpoolpy-servercourierpy"
    )
    assert slug("Scale out: sweeps, batches and scheduler tables on Ray") == (
        "scale-out-sweeps-batches-and-scheduler-tables-on-ray"
    )


def test_there_are_reference_pages() -> None:
    assert len(PAGES) >= 5, [p.name for p in PAGES]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_and_headings(page: Path) -> None:
    bad = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            bad.append(f"{target}: no file {dest.relative_to(ROOT)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not bad, "\n".join(bad)


def test_every_page_is_linked_from_the_readme_and_links_back() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"](docs/{page.name}" in readme, page.name
        intro = page.read_text().split("\n\n")[1]  # the paragraph under the title
        assert "](../README.md)" in intro, page.name
