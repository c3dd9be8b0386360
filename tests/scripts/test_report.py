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


def test_file_names_and_summary_values_cannot_inject_markup(tmp_path, monkeypatch):
    evil = tmp_path / 'x" onload="alert(1)" y=<b>.png'
    evil.write_bytes(b"\x89PNG")
    html_figure = report.figure(evil)
    assert 'onload="' not in html_figure and "<b>" not in html_figure
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "summary.json").write_text('{"wall_time_s": "<script>x</script>", "command": "c"}')
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    page = report.section("S", "study", [])
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_a_claims_file_without_a_table_or_a_broken_summary_is_one_line(tmp_path, monkeypatch):
    import pytest

    with pytest.raises(SystemExit, match="CLAIMS.md holds no table"):
        report.markdown_table("# Claims\n\nnothing yet\n")
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "summary.json").write_text('{"command": "make')
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    with pytest.raises(SystemExit, match="summary.json is not valid JSON"):
        report.section("S", "study", [])
