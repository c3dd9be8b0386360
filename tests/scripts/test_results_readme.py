"""scripts/results_readme: the committed results/README.md is what the committed results give; on
a small generated results folder, a registered section without results reads "No result committed"
in one line, its tables come from the summary and the sweep's CSV, and a changed summary makes
``--check`` fail naming the first line that differs; the prose and the special tables belong to
registered sections."""

import importlib
import json
import re
from pathlib import Path

import pytest

from experiments.studies import SECTIONS, STUDIES, Figure, Section, Study
from scripts.results_readme import document, sections
from scripts.results_readme.sections import SectionError, SectionView
from scripts.results_readme.tables import SPECIAL
from scripts.results_readme.text import BLOCK_START, reflow

cli = importlib.import_module("scripts.results_readme.__main__")
REPO = Path(__file__).resolve().parents[2]

TOY = Study(
    "toy",
    "A toy study",
    (
        Section("toy-runs", "Two setups", "toy/runs", "reproduce-toy", (Figure("toy.png", "A toy figure"),)),
        Section("toy-sweep", "A sweep", "toy/sweep.csv", "sweep-toy"),
        Section("toy-later", "Not run yet", "toy/later", "reproduce-toy-later"),
    ),
    {"a": "setup A", "b": "setup B"},
)  # fmt: skip


def write_collection(folder: Path, accuracy: dict[str, list[float]]) -> None:
    """A collection as ``scripts.collect`` writes it: runs.csv and a summary of each setup's
    final test accuracy per seed."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        f"{setup},{seed},500,test/acc,{acc}\r\n"
        for setup, accs in accuracy.items()
        for seed, acc in enumerate(accs)
    ]
    (folder / "runs.csv").write_text("setup,seed,step,metric,value\r\n" + "".join(rows), newline="")
    setups = {
        setup: {
            "seeds": list(range(len(accs))),
            "diverged": [False] * len(accs),
            "config": {"train.lr": 0.1},
            "test_acc": {"mean": sum(accs) / len(accs), "std": 0.0, "per_seed": accs},
        }
        for setup, accs in accuracy.items()
    }
    summary = {"git_commit": "0123456789abcdef", "command": "make reproduce-toy", "setups": setups}
    (folder / "summary.json").write_text(json.dumps(summary))


SWEEP = """setup,seed,lr,steps,diverged,test_acc,train_acc,final_train_loss
a,0,0.1,100,False,0.5,0.5,1.0
a,0,1.0,100,False,0.75,0.8,0.5
b,0,0.1,100,False,0.625,0.6,0.9
b,0,1.0,100,True,0.1,0.1,nan
"""


@pytest.fixture
def results(tmp_path, monkeypatch) -> Path:
    """A working folder whose ``results/`` holds the toy study's runs and sweep (not its third
    section), the registry being the toy study alone."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(document, "STUDIES", (TOY,))
    root = tmp_path / "results"
    write_collection(root / "toy/runs", {"a": [0.9, 0.8, 0.85], "b": [0.7, 0.75, 0.8]})
    (root / "toy/sweep.csv").write_text(SWEEP)
    return root


def _section(text: str, anchor: str) -> list[str]:
    """The lines of one section, from its heading to the next heading."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if f'<a id="{anchor}"></a>' in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return lines[start:end]


def test_the_committed_results_readme_is_what_the_committed_results_give(monkeypatch):
    monkeypatch.chdir(REPO)  # the results paths are relative to the repository
    committed = (REPO / "results/README.md").read_text()
    assert committed == document.render(), cli.first_difference(committed, document.render())


def test_every_registered_section_and_study_has_its_place(monkeypatch):
    monkeypatch.chdir(REPO)
    text = document.render()
    for study in STUDIES:
        assert f'## <a id="study-{study.name}"></a>{study.title}' in text
        for s in study.sections:
            assert f'### <a id="{s.anchor}"></a>{s.title}' in text
            assert f"(#{s.anchor})" in text  # in the contents and the provenance table


def test_a_section_without_results_says_so_in_one_line(results):
    text = document.render(results)
    body = [line for line in _section(text, "toy-later")[1:] if line]
    assert body == ["No result committed: `make reproduce-toy-later` writes `results/toy/later`."]
    assert "| [Not run yet](#toy-later) | no result | `make reproduce-toy-later` |" in text


def test_the_tables_come_from_the_summary_and_the_sweep(results):
    text = document.render(results)
    runs = "\n".join(_section(text, "toy-runs"))
    assert "| setup A (`a`) | 3 | 85.00% [" in runs and "| setup B (`b`) | 3 | 75.00% [" in runs
    assert "at commit `0123456`" in runs and "seeds: 0–2" in runs
    assert "[`toy.png`]" not in runs and "`toy.png`: not drawn yet (`make figures`)" in runs
    sweep = "\n".join(_section(text, "toy-sweep"))
    assert "every run: `steps` = 100" in sweep
    assert "| 0.1 | 50.00% | 1 | **62.50%** | 0.9 |" in sweep
    assert "| 1 | **75.00%** | 0.5 | diverged | – |" in sweep


def test_check_passes_on_what_it_wrote_and_names_the_line_a_changed_summary_moves(results, capsys):
    cli.main([])
    cli.main(["--check"])
    assert "is up to date" in capsys.readouterr().out
    written = (results / "README.md").read_text()
    write_collection(results / "toy/runs", {"a": [0.9, 0.8, 0.95], "b": [0.7, 0.75, 0.8]})
    with pytest.raises(SystemExit) as e:
        cli.main(["--check"])
    message = str(e.value.code)
    assert "\n" not in message and message.startswith("error: results/README.md differs at line ")
    line = int(re.search(r"at line (\d+)", message).group(1))
    assert written.splitlines()[line - 1].startswith("| setup A (`a`) | 3 | 85.00%")
    assert "88.33%" in message and message.endswith("run `make results-readme`")
    assert (results / "README.md").read_text() == written  # --check writes nothing


def test_check_names_a_missing_file(results):
    with pytest.raises(
        SystemExit, match=r"results/README.md is not there: .* run `make results-readme`"
    ):
        cli.main(["--check"])


def test_results_that_are_not_whole_are_one_line_and_the_file_kept(results):
    (results / "README.md").write_text("the committed file\n")
    (results / "toy/runs/summary.json").write_text("{not json")
    with pytest.raises(SystemExit) as e:
        cli.main([])
    message = str(e.value.code)
    assert "\n" not in message and "toy/runs/summary.json is not valid JSON" in message
    assert message.endswith("README.md left as it was")
    assert (results / "README.md").read_text() == "the committed file\n"


def test_a_sweep_in_which_nothing_varies_is_refused(results):
    (results / "toy/sweep.csv").write_text(
        SWEEP.splitlines()[0] + "\n" + SWEEP.splitlines()[1] + "\n"
    )
    with pytest.raises(SystemExit, match="results/toy/sweep.csv: no setting varies"):
        cli.main([])


def test_prose_reads_only_settings_the_setups_share(results):
    view = SectionView(TOY.sections[0], TOY, results)
    view.summary = json.loads((results / "toy/runs/summary.json").read_text())
    assert view.shared("train.lr") == 0.1
    view.summary["setups"]["b"]["config"]["train.lr"] = 1.0
    with pytest.raises(SectionError, match=r"the setups differ in train.lr"):
        view.shared("train.lr")
    with pytest.raises(SectionError, match=r"setup a records no train.steps"):
        view.shared("train.steps")


def test_prose_and_special_tables_belong_to_registered_sections():
    macros = set(document.prose_macros(document.environment()))
    sections = {document.macro_name(a) for a in SECTIONS}
    studies = {f"study_{document.macro_name(s.name)}" for s in STUDIES}
    assert macros <= sections | studies, macros - sections - studies
    assert set(SPECIAL) <= set(SECTIONS)


def test_reflow_wraps_prose_and_keeps_tables_code_and_lists():
    text = "\n".join(
        [
            "A paragraph " + "word " * 40 + "ending at 2. then more",
            "",
            "| a | b |",
            "|---|---|",
            "```bash",
            "a long command " * 10,
            "```",
            "- an item " + "word " * 30,
            "  continued",
        ]
    )
    out = reflow(text, width=60).splitlines()
    assert all(len(line) <= 60 for line in out if not line.startswith(("|", "a long")))
    assert "| a | b |" in out and "a long command " * 10 in out
    items = out[out.index("```", out.index("```bash") + 1) + 1 :]
    assert items[0].startswith("- an item") and all(line.startswith("  ") for line in items[1:])
    paragraph = out[: out.index("")]
    assert not any(BLOCK_START.match(line) for line in paragraph[1:])


def test_the_check_message_shows_where_two_long_lines_differ():
    line = "| a long row of a table | " + "97.00% | " * 12
    changed = line[:-4] + "x | "
    message = cli.first_difference(f"head\n{changed}\n", f"head\n{line}\n")
    assert message.startswith("differs at line 2: it reads '…")
    assert "x |" in message and "\n" not in message
    assert cli.first_difference("head\n", "head\nmore\n") == (
        "differs at line 2: it ends where the results give 'more'"
    )


def test_a_sweep_reads_its_studys_accuracy_column_in_its_labels_order(results, monkeypatch):
    """A study whose runs report their accuracy under another name (the depth grid's, on a test
    subset) names that column; its setups are listed in its labels' order, not the file's."""
    other = Study(TOY.name, TOY.title, TOY.sections, {"b": "setup B", "a": "setup A"}, sweep_accuracy="acc_subset")  # fmt: skip
    monkeypatch.setattr(document, "STUDIES", (other,))
    # a registered study's accuracy column is an outcome (not a setting) by registration
    monkeypatch.setattr(sections, "OUTCOMES", sections.OUTCOMES | {"acc_subset"})
    (results / "toy/sweep.csv").write_text(SWEEP.replace("test_acc", "acc_subset"))
    sweep = "\n".join(_section(document.render(results), "toy-sweep"))
    assert "| lr | setup B: test accuracy | setup B: final training loss | setup A: test accuracy |" in sweep  # fmt: skip
    assert "| 0.1 | **62.50%** | 0.9 | 50.00% | 1 |" in sweep
    (results / "toy/sweep.csv").write_text(SWEEP)  # the accuracy under the usual name: refused
    with pytest.raises(SystemExit, match="not a sweep's CSV \\(no acc_subset column\\)"):
        cli.main([])


def test_the_inception_ablations_table_reads_each_seeds_curve_at_the_fixed_targets(tmp_path):
    from experiments.studies import study
    from scripts.analysis import time_to_accuracy as tta
    from scripts.results_readme.tables import inception_ablation_tables

    inception = study("inception")
    section = next(x for x in inception.sections if x.anchor == "inception-ablations")
    folder = tmp_path / section.path
    folder.mkdir(parents=True)
    # seed 0 climbs 0.7 -> 0.85 over 1,000 steps; seed 1 stalls at 0.79
    curves = {
        0: {step: 0.7 + 0.15 * step / 1000 for step in range(0, 1001, 100)},
        1: {step: min(0.79, 0.7 + 0.15 * step / 1000) for step in range(0, 1001, 100)},
    }
    rows = [
        f"inception_x2,{seed},{step},{tta.METRIC},{v}"
        for seed, c in curves.items()
        for step, v in c.items()
    ]
    (folder / "runs.csv").write_text("setup,seed,step,metric,value\n" + "\n".join(rows) + "\n")
    config = {"train.lr": 0.0015, "train.lr_mult": 2.0, "train.lr_decay_factor": 0.96}
    ended = [
        {"ended_by": "cap", "steps_done": 1000, "max_acc_subset": 0.85},
        {"ended_by": "plateau", "steps_done": 1000, "max_acc_subset": 0.79},
    ]
    setup = {"seeds": [0, 1], "diverged": [False, False], "config": config, "lr_decay_every": 80}
    summary = {
        "steps": 1000,
        "setups": {"inception_x2": setup},
        "converged": {
            "cap": 1000,
            "test_subset": 5000,
            "eval_every": 100,
            "setups": {"inception_x2": {"seeds": ended}},
        },
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    view = SectionView(section, inception, tmp_path, summary=summary)

    [table] = inception_ablation_tables(view)
    row = dict(zip(table.head, table.rows[0]))
    assert row["arm"] == inception.labels["inception_x2"]
    assert row["initial rate"] == "0.003" and row["decays every"] == "80"
    # the smoothed maximum of seed 0 is the mean of its last three evaluations (a 5-wide window, cut at the end)
    assert row["smoothed maximum"] == f"{(0.835 + 0.85 + 0.82) / 3:.1%}, 79.0%"
    assert row["steps to 75%"] == "400, 400"  # 0.7 + 0.015 * 4 = 0.76 (0.745 at step 300)
    assert row["steps to 80%"] == "700, never"
    assert row["steps to 84%"] == "1,000, never"
    assert row["how it ended"] == "cap at 1,000, plateau at 1,000"
    # the prose names each rate of the sweep with its seeds' best evaluations, and no divergence
    macro = document.prose_macros(document.environment())["inception_ablations"]
    prose = reflow(document._prose(macro, view))
    assert "Inception without BN at ×2 the rate" in prose and "×2 85.00% and 79.00%." in prose
    assert "No run diverged" in prose
    setup["diverged"] = [False, True]
    assert f"{inception.labels['inception_x2']} diverged" in document._prose(macro, view)


def test_a_bench_timed_on_several_machines_names_each_ones_rows():
    from scripts.results_readme.bench import _machine

    epyc = {"key": "mlp", "cpu": "AMD EPYC", "torch": "2.14"}
    assert _machine([epyc, {**epyc, "key": "conv"}]) == "AMD EPYC, torch 2.14"
    rows = [epyc, {**epyc, "key": "conv"}, {"key": "inception", "cpu": "Xeon", "torch": "2.14"}]
    assert _machine(rows) == "AMD EPYC, torch 2.14 (`mlp`, `conv`); Xeon, torch 2.14 (`inception`)"
    assert _machine([{"setting": "a", "cpu": ""}]) == ""
    keyless = [{"route": "peer", "cpu": "AMD EPYC"}, {"route": "peer", "cpu": "Xeon"}]
    assert _machine(keyless) == "AMD EPYC; Xeon"
