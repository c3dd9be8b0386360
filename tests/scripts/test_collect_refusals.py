"""scripts/collect.py refuses what would make a collection's comparison meaningless: reused
setups planned to another length than the fresh ones (``train.steps``, ``train.stop.*``), and a
run that another study made; an early stop on a rule every arm shares, or a divergence, is kept."""

import json
import shlex
from pathlib import Path

import pytest
import yaml

from scripts import collect
from tests.experiments.kit.test_results import _write_run

FULL = {
    "train.steps": 3000,
    "train.stop.target": None,
    "train.stop.plateau": None,
    "train.stop.min_steps": 0,
}  # a run's planned length, as it records it


def _renorm_run(folder: Path, setup: str, seed: int, config: dict, **record) -> None:
    """A renorm run as the loop records it: its planned length in ``config``, how it ended in
    ``record`` (``steps_done``, ``stopped``, ``diverged``...)."""
    _write_run(folder, setup, seed, 0.5, 0.5)
    summary = json.loads((folder / "summary.json").read_text())
    steps = config["train.steps"]
    summary.update(steps=steps, steps_done=steps, config={"seed": seed, "train.lr": 0.1, **config})
    summary.update(command=f"python -m experiments.renorm setup={setup} seed={seed}", **record)
    (folder / "summary.json").write_text(json.dumps(summary))


def _earlier(tmp_path: Path, config: dict) -> Path:
    """An earlier collection of bn32 (seeds 0 and 1) run to its full length with ``config``."""
    for seed in (0, 1):
        _renorm_run(tmp_path / "earlier_runs" / f"bn{seed}", "bn32", seed, config)
    collect.main(["renorm", str(tmp_path / "earlier_runs"), "--out", str(tmp_path / "earlier")])
    return tmp_path / "earlier"


def _collect_reusing_bn32(tmp_path: Path, sweep: Path, out: str = "out") -> None:
    collect.main(
        ["renorm", str(sweep), "--out", str(tmp_path / out),
         "--reuse", str(tmp_path / "earlier"), "--reuse-setups", "bn32"]
    )  # fmt: skip


def _stopped_at_10(tmp_path: Path) -> Path:
    """brn32 (seeds 0 and 1) stopped by train.stop.target after 10 of its 3000 steps."""
    early = {**FULL, "train.stop.target": 0.5}
    for seed in (0, 1):
        _renorm_run(
            tmp_path / "sweep" / f"brn{seed}", "brn32", seed, early,
            steps_done=10, stopped="target: test/acc 0.51 >= 0.5",
        )  # fmt: skip
    return tmp_path / "sweep"


def test_reuse_refuses_a_fresh_arm_planned_to_stop_beside_full_length_ones(tmp_path, capsys):
    _earlier(tmp_path, FULL)
    with pytest.raises(SystemExit) as e:
        _collect_reusing_bn32(tmp_path, _stopped_at_10(tmp_path))
    message = str(e.value)
    assert "ran bn32 with train.stop.target=None, this sweep ran brn32 with 0.5" in message
    assert "\n" not in message and not (tmp_path / "out").exists()


def test_a_reused_collection_older_than_the_stopping_record_reads_as_no_rule(tmp_path):
    """Runs made before ``train.stop.*`` was recorded (every committed collection) had none."""
    _earlier(tmp_path, {"train.steps": 3000})
    with pytest.raises(SystemExit, match=r"train\.stop\.target=None, this sweep ran"):
        _collect_reusing_bn32(tmp_path, _stopped_at_10(tmp_path))
    for seed in (0, 1):  # fresh runs of the default rule: the same setting
        _renorm_run(tmp_path / "full" / f"brn{seed}", "brn32", seed, FULL)
    _collect_reusing_bn32(tmp_path, tmp_path / "full")
    assert (tmp_path / "out" / "mnist" / "summary.json").exists()


def test_reuse_refuses_another_cap_and_seeds_of_another_rule_are_not_pooled(tmp_path):
    _earlier(tmp_path, FULL)
    for seed in (0, 1):
        _renorm_run(tmp_path / "sweep" / f"brn{seed}", "brn32", seed, {**FULL, "train.steps": 20})
    with pytest.raises(SystemExit, match="was made with steps=3000, this sweep with 20"):
        _collect_reusing_bn32(tmp_path, tmp_path / "sweep")
    _renorm_run(tmp_path / "mixed" / "0", "brn32", 0, FULL)
    _renorm_run(tmp_path / "mixed" / "1", "brn32", 1, {**FULL, "train.stop.plateau": 0.003})
    with pytest.raises(SystemExit, match=r"runs of brn32 differ in train\.stop\.plateau"):
        collect.main(["renorm", str(tmp_path / "mixed"), "--out", str(tmp_path / "x")])


def test_an_early_stop_on_a_shared_rule_and_a_divergence_are_outcomes_not_settings(tmp_path):
    rule = {**FULL, "train.stop.target": 0.5}  # a time-to-target study: every arm may stop
    _earlier(tmp_path, rule)
    _renorm_run(
        tmp_path / "sweep" / "brn0", "brn32", 0, rule, steps_done=10, stopped="target: reached"
    )
    _renorm_run(
        tmp_path / "sweep" / "brn1", "brn32", 1, rule,
        steps_done=40, diverged=True, diverged_at_step=40, test_acc=None,
    )  # fmt: skip
    _collect_reusing_bn32(tmp_path, tmp_path / "sweep")
    summary = json.loads((tmp_path / "out" / "mnist" / "summary.json").read_text())
    assert summary["setups"]["brn32"]["diverged"] == [False, True]
    assert summary["reused"]["setups"] == ["bn32"]


def _mnist_run(folder: Path, setup: str, seed: int) -> None:
    _write_run(folder, setup, seed, 0.9, 0.9)
    summary = json.loads((folder / "summary.json").read_text())
    summary["command"] = f"python -m experiments.mnist setup={setup} seed={seed}"
    (folder / "summary.json").write_text(json.dumps(summary))


@pytest.mark.parametrize("sweep", [False, True])
def test_a_run_of_another_study_in_the_sweep_folder_is_refused(tmp_path, sweep):
    for seed in (0, 1):
        _mnist_run(tmp_path / "sweep" / f"baseline{seed}", "baseline", seed)
    _renorm_run(tmp_path / "sweep" / "renorm_brn", "brn32", 0, FULL)
    out = ["--sweep", "--out", str(tmp_path / "s.csv")] if sweep else ["--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as e:
        collect.main(["mnist", str(tmp_path / "sweep"), *out])
    message = str(e.value)
    assert f"{tmp_path / 'sweep' / 'renorm_brn'} holds a run of study renorm" in message
    assert "not of mnist" in message and "\n" not in message
    assert not (tmp_path / "o").exists() and not (tmp_path / "s.csv").exists()


def test_a_run_that_records_no_study_is_collected(tmp_path):
    """Summaries without a ``command`` (written by hand) name no study: taken as they are."""
    _mnist_run(tmp_path / "sweep" / "a", "baseline", 0)
    _write_run(tmp_path / "sweep" / "b", "baseline", 1, 0.8, 0.8)  # no command
    collect.main(["mnist", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["setups"]["baseline"]["seeds"] == [0, 1]


def test_a_run_records_its_planned_length_for_the_collection_to_compare():
    from experiments.kit.identity import comparable_config

    flat = {"seed": 3, "train.lr": 0.1, "train.steps": 3000, "train.stop.target": 0.5}
    flat.update({"train.stop.min_steps": 0, "eval.every": 100, "logger.mode": "disabled"})
    # a stopping setting at its default is left out, so a run without a rule records what it did
    assert comparable_config(flat) == {
        "train.lr": 0.1,
        "train.steps": 3000,
        "train.stop.target": 0.5,
    }
    flat["train.stop.target"] = None
    assert comparable_config(flat) == {"train.lr": 0.1, "train.steps": 3000}


# -- runs recorded before their stopping rule was --------------------------------------------
def _old_run(folder: Path, seed: int, rule: str, where: str) -> None:
    """A brn32 run made before summary.json recorded ``train.stop.*``: its config leaves out the
    rule it ran with (``rule``, an override, or "" for none), which its launch recorded
    ``where``: in ``.hydra/overrides.yaml``, a resume's, or only in the summary's command."""
    _renorm_run(folder, "brn32", seed, {"train.steps": 3000})
    overrides = ["setup=brn32", f"seed={seed}", *([rule] if rule else [])]
    if where == "command":
        summary = json.loads((folder / "summary.json").read_text())
        summary["command"] = shlex.join(["python", "-m", "experiments.renorm", *overrides])
        (folder / "summary.json").write_text(json.dumps(summary))
        return
    settings = folder / ".hydra"
    if where == "resumed":  # the first launch had no rule; the resume that ended it, this one
        (settings / "resumed_at_step_1000").mkdir(parents=True)
        (settings / "resumed_at_step_1000" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        overrides = overrides[:2]
    settings.mkdir(exist_ok=True)
    (settings / "overrides.yaml").write_text(yaml.safe_dump(overrides))  # as Hydra saves them


@pytest.mark.parametrize("where", ["overrides", "resumed", "command"])
def test_old_runs_with_another_unrecorded_stopping_rule_are_not_pooled(tmp_path, where):
    _old_run(tmp_path / "sweep" / "brn0", 0, "", where)
    _old_run(tmp_path / "sweep" / "brn1", 1, "train.stop.plateau=0.003", where)
    with pytest.raises(SystemExit) as e:
        collect.main(["renorm", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")])
    assert "runs of brn32 differ in train.stop.plateau (None in " in str(e.value)
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()


def test_old_runs_of_one_unrecorded_rule_pool_with_new_runs_that_record_it(tmp_path):
    rule = "+train.stop={target: 0.5, min_steps: 20}"
    _old_run(tmp_path / "sweep" / "brn0", 0, rule, "overrides")
    _old_run(tmp_path / "sweep" / "brn1", 1, rule, "command")
    recorded = {**FULL, "train.stop.target": 0.5, "train.stop.min_steps": 20}
    _renorm_run(tmp_path / "sweep" / "brn2", "brn32", 2, recorded)
    collect.main(["renorm", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")])
    summary = json.loads((tmp_path / "out" / "mnist" / "summary.json").read_text())
    assert summary["setups"]["brn32"]["seeds"] == [0, 1, 2]
    _renorm_run(tmp_path / "sweep" / "brn3", "brn32", 3, {**recorded, "train.stop.target": 0.6})
    with pytest.raises(SystemExit, match=r"differ in train\.stop\.target \(0\.5 in "):
        collect.main(["renorm", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")])


def test_seeds_trained_side_by_side_read_the_overrides_of_their_folder(tmp_path):
    """A list of seeds trains in one folder (its .hydra), each seed's run in ``seed<k>/``."""
    for seed in (0, 1):
        _renorm_run(tmp_path / "sweep" / "a" / f"seed{seed}", "brn32", seed, {"train.steps": 3000})
    (tmp_path / "sweep" / "a" / ".hydra").mkdir()
    (tmp_path / "sweep" / "a" / ".hydra" / "overrides.yaml").write_text(
        "- seed=[0,1]\n- train.stop.target=0.5\n"
    )
    _old_run(tmp_path / "sweep" / "b", 2, "", "overrides")
    with pytest.raises(SystemExit, match=r"differ in train\.stop\.target \(0\.5 in [^\n]*seed0, "):
        collect.main(["renorm", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")])


def test_overrides_that_cannot_be_read_are_one_line(tmp_path):
    _old_run(tmp_path / "sweep" / "brn0", 0, "", "overrides")
    _old_run(tmp_path / "sweep" / "brn1", 1, "", "overrides")
    (tmp_path / "sweep" / "brn1" / ".hydra" / "overrides.yaml").write_text("- [unclosed\n")
    with pytest.raises(SystemExit, match=r"overrides\.yaml cannot be read \([^\n]*\): move"):
        collect.main(["renorm", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")])
    (tmp_path / "sweep" / "brn1" / ".hydra" / "overrides.yaml").write_text(
        "- train.stop.target=[0.5\n"
    )
    with pytest.raises(SystemExit, match=r"holds an override Hydra cannot read"):
        collect.main(["renorm", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")])
