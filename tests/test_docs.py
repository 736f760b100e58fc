"""The documentation site: it builds with warnings as errors, every page of its navigation
is there, and the API reference is made from the docstrings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pages(nav: list) -> list[str]:
    found: list[str] = []
    for entry in nav:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            found += _pages(value) if isinstance(value, list) else [value]
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_every_page_in_the_navigation_is_built(site: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = _pages(config["nav"])
    assert len(pages) >= 12
    for page in pages:
        built = "index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html"
        assert (site / built).is_file(), page


def test_the_api_reference_comes_from_the_docstrings(site: Path) -> None:
    html = (site / "api" / "sim" / "index.html").read_text()
    # the first line of simulate's docstring, and its example as a code block
    assert "Execute <code>plan</code> on <code>cluster</code> in simulated time" in html
    assert "language-pycon" in html and "&gt;&gt;&gt; cluster = get_cluster" in html
    assert "<blockquote>" not in html  # doctest prompts are code, not quotes


def test_no_page_links_outside_the_site(site: Path) -> None:
    # strict mode refuses a link to a missing page, but not one that climbs out of docs/
    for page in (ROOT / "docs").glob("*.md"):
        assert "](../" not in page.read_text(), page.name
