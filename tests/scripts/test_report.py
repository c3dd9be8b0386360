"""scripts/report.py: the page embeds every figure and links only to files that exist."""

import re
from pathlib import Path

from scripts import report

REPO = Path(__file__).resolve().parents[2]


def test_every_figure_is_on_the_page_and_every_link_exists(monkeypatch):
    monkeypatch.chdir(REPO)
    page = report.render()
    for png in (REPO / "results" / "figures").glob("*.png"):
        assert f'alt="{png.name}"' in page, png.name
    links = re.findall(r'href="([^"]+)"', page)
    assert links
    for link in links:
        assert (REPO / "results" / link).exists(), link
    assert "<h2>Claims</h2>" in page and "reproduced" in page


def test_markdown_table_to_html():
    text = "intro\n\n| a | b |\n|---|---|\n| 1 | **x** |\n"
    assert (
        report.markdown_table(text)
        == "<table><tr><th>a</th><th>b</th></tr>\n<tr><td>1</td><td>x</td></tr></table>"
    )
