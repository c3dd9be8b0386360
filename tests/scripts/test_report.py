"""scripts/report.py: the page holds every study and figure of the registry, its verdict counts
and claims come from the claims themselves, every link resolves, and nothing read from a file
can inject markup."""

import json
import re
from pathlib import Path

import pytest

from experiments.kit.errors import BadResults
from experiments.studies import SECTIONS, STUDIES
from scripts import report
from scripts.claims.table import CLAIMS

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def page():
    import os

    here = os.getcwd()
    os.chdir(REPO)
    try:
        yield report.render()
    finally:
        os.chdir(here)


@pytest.mark.slow
def test_every_figure_and_study_is_on_the_page(page):
    for png in (REPO / "results" / "figures").glob("*.png"):
        assert f'alt="{png.name}"' in page, png.name
    assert 'id="other-figures"' not in page  # every figure has its place in the registry
    for study in STUDIES:
        assert f'id="study-{study.name}"' in page
        for s in study.sections:
            assert f'<h3 id="{s.anchor}">' in page


@pytest.mark.slow
def test_every_link_resolves(page):
    links = re.findall(r'href="([^"]+)"', page)
    anchors = set(re.findall(r'id="([^"]+)"', page))
    assert links
    for link in links:
        if link.startswith("#"):
            assert link[1:] in anchors, link
        else:
            assert (REPO / "results" / link).exists(), link


@pytest.mark.slow
def test_verdict_counts_and_claim_links(page):
    counts = re.findall(r'<span class="badge \w+">(\d+) ([a-z ]+)</span>', page.split("<nav>")[0])
    assert sum(int(n) for n, _ in counts) == len(CLAIMS)
    for i, claim in enumerate(CLAIMS, start=1):
        row = page.split(f'<tr id="claim-{i}">')[1].split("</tr>")[0]
        assert f'href="#{claim.section}"' in row
        assert claim.claim.replace("'", "&#39;") in row


def test_spread_is_the_t_interval_over_seeds():
    values = [0.97, 0.975, 0.972]
    cell = report.spread("test_acc", {"mean": 0.9723, "per_seed": values})
    low, high = re.findall(r"\[(.+)%, (.+)%\]", cell)[0]
    from scripts.analysis.stats import Estimate

    ci = Estimate.of(values).interval()
    assert (float(low), float(high)) == (
        pytest.approx(100 * ci[0], abs=0.005),
        pytest.approx(100 * ci[1], abs=0.005),
    )
    assert report.spread("test_acc", {"mean": 0.9, "per_seed": [0.9]}) == "90.00%"
    two = report.spread("test_acc", {"mean": 0.95, "per_seed": [0.94, 0.96]})
    assert two == "95.00% (94.00%, 96.00%)"  # no interval of one degree of freedom


def test_a_speed_gets_its_range_or_its_value_not_an_interval():
    side_by_side = {"mean": 30.4, "per_seed": [30.4] * 5}  # one process, one measurement
    assert report.spread("steps_per_s", side_by_side) == report._number("steps_per_s", 30.4)
    apart = report.spread("steps_per_s", {"mean": 30.0, "per_seed": [29.0, 30.0, 31.0]})
    assert "range" in apart and "[" not in apart
    assert (
        report._number("steps_per_s", 29.0) in apart
        and report._number("steps_per_s", 31.0) in apart
    )


def test_a_new_study_s_statistics_get_columns_after_the_known_ones():
    stat = {"mean": 0.5, "per_seed": [0.4, 0.6]}
    summary = {"setups": {"a": {"val_loss": stat, "test_acc": stat, "seeds": [0, 1]}}}
    table = report.setups_table(summary, {"a": "A"})
    assert [name for name, _ in table["columns"]] == ["test accuracy", "val loss"]
    assert table["rows"][0]["setup"] == "A" and len(table["rows"][0]["cells"]) == 2


def test_the_papers_numbers_read_as_text():
    assert (
        report.paper_text({"test_acc": 0.783, "at_step": 130_000})
        == "test accuracy 78.3%; at step 130,000"
    )
    assert report.paper_text({"steps_to_baseline_max": 2.1e6, "max_acc": 0.73}) == (
        "steps to Inception's best 2.1M; best accuracy 73.0%"
    )
    assert report.paper_text({"steps_to_baseline_max": None}) == "steps to Inception's best: never"


def test_the_papers_column_is_the_sections_studys_paper_not_the_summarys_copy(
    tmp_path, monkeypatch
):
    """A question's runs trained by the renorm module carry its paper's ImageNet numbers in their
    summary; the question did not measure them, so its table shows none."""
    from experiments.papers import BRN_RESULTS

    stat = {"mean": 0.9, "per_seed": [0.89, 0.91]}
    setups = {name: {"seeds": [0, 1], "test_acc": stat} for name in ("bn32", "bn32_after")}
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "summary.json").write_text(
        json.dumps({"setups": setups, "paper": BRN_RESULTS})
    )
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    here = SECTIONS["mnist"].__class__("q", "Q", "study", "t")
    assert report.section(here, {}, [])["setups"]["paper"] is False  # a question: no paper
    table = report.section(here, {}, [], BRN_RESULTS)["setups"]  # the renorm study's own section
    assert [r["paper"] for r in table["rows"]] == ["test accuracy 78.3%; at step 130,000", "–"]
    assert table["paper"] and table["paper_source"] == BRN_RESULTS["source"]  # which setting


@pytest.mark.slow
def test_only_a_study_that_reproduces_a_paper_shows_its_numbers(page):
    def html_of(anchor: str) -> str:
        return page.split(f'<h3 id="{anchor}">', 1)[1].split("<h3 ", 1)[0]

    assert "<th>the paper" in html_of("renorm") and "ImageNet" in html_of("renorm")
    for question in ("norm-position", "brn-gradient", "dropout"):
        assert "<table" in html_of(question) and "<th>the paper" not in html_of(question)


def test_study_tables_and_bad_files(tmp_path, monkeypatch):
    with pytest.raises(BadResults, match="holds no table"):
        report.markdown_table("# nothing\n", "x.md")
    assert report.markdown_table("| a | b |\n|---|---|\n| 1 | **x** |\n", "x.md") == (
        "<table><tr><th>a</th><th>b</th></tr>\n<tr><td>1</td><td>x</td></tr></table>"
    )
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "summary.json").write_text('{"command": "make')
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    with pytest.raises(BadResults, match="summary.json is not valid JSON"):
        report.section(SECTIONS["mnist"].__class__("a", "A", "study", "t"), {}, [])


def test_values_read_from_files_cannot_inject_markup(tmp_path, monkeypatch):
    (tmp_path / "study").mkdir()
    summary = {
        "command": "<script>x</script>",
        "wall_time_s": 1.0,
        "setups": {"<b>s</b>": {"seeds": [0], "test_acc": {"mean": 0.5, "per_seed": [0.5]}}},
    }
    (tmp_path / "study" / "summary.json").write_text(json.dumps(summary))
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    monkeypatch.setattr(report, "FIGURES", tmp_path)
    sec = SECTIONS["mnist"].__class__("a", "A", "study", "t")
    monkeypatch.setattr(report, "STUDIES", [STUDIES[0].__class__("x", "X", (sec,))])
    monkeypatch.setattr(
        report, "claim_rows", lambda: ([], __import__("collections").Counter(), "<i>x</i>")
    )
    page = report.render()
    assert "<script>x" not in page and "&lt;script&gt;x" in page
    assert "<b>s</b>" not in page and "&lt;b&gt;s&lt;/b&gt;" in page
    assert "<i>x</i>" not in page


# -- results that are not whole: one line, a nonzero exit, report.html left as it was ----------
PAGE = "the page as it was\n"


@pytest.fixture
def results_here(tmp_path, monkeypatch):
    """A ``results/`` in the working folder (as ``make report`` reads it) with the MNIST
    collection and an earlier page."""
    from tests.scripts.claims.test_main import write_collection

    monkeypatch.chdir(tmp_path)
    write_collection(tmp_path / "results/mnist/mnist", {"bn": [0, 1], "baseline": [0, 1]})
    (tmp_path / "results/report.html").write_text(PAGE)
    return tmp_path / "results"


def _refused(match: str) -> None:
    with pytest.raises(SystemExit) as e:
        report.main()
    message = str(e.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert re.search(match, message) and message.endswith("report.html left as it was")
    assert Path("results/report.html").read_text() == PAGE


def test_a_header_only_runs_csv_is_one_line(results_here):
    (results_here / "mnist/mnist/runs.csv").write_text("setup,seed,step,metric,value\n")
    _refused(r"runs.csv does not match its summary.json: no rows of setup\(s\)")


def test_a_summary_that_is_not_json_is_one_line(results_here):
    summary = results_here / "mnist/mnist/summary.json"
    summary.write_text(summary.read_text()[:40])
    _refused(r"mnist/mnist/summary.json is not valid JSON")


def test_a_summary_of_another_study_is_one_line(results_here):
    from tests.scripts.claims.test_main import write_collection

    write_collection(results_here / "mnist/mnist", {"depth10": [0, 1]})  # both files another's
    _refused(r"summary.json has no setup (bn|baseline) \(the summary of another study")


def test_a_wall_time_that_is_not_a_number_is_one_line(results_here, monkeypatch):
    from collections import Counter

    summary = results_here / "mnist/mnist/summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "wall_time_s": "12 s"}))
    monkeypatch.setattr(report, "claim_rows", lambda: ([], Counter(), ""))
    _refused(r"summary.json: wall_time_s is '12 s', not a number of seconds")


def test_a_non_finite_estimate_is_one_line(results_here, monkeypatch):
    from scripts.analysis.stats import Estimate

    def decide_all():  # a claim whose seeds hold an infinity
        Estimate.of([float("inf"), 0.5])

    monkeypatch.setattr(report, "decide_all", decide_all)
    _refused(r"an estimate of \[inf, 0.5\]: empty, or NaN/infinite")


def test_the_page_is_replaced_whole(results_here, monkeypatch):
    from collections import Counter

    monkeypatch.setattr(report, "claim_rows", lambda: ([], Counter(), ""))
    report.main()
    page = Path("results/report.html").read_text()
    assert page.startswith("<!") and page.rstrip().endswith("</html>")
    assert not list(results_here.glob(".*.tmp"))
