"""Hydra jobs end to end (tiny MNIST runs in subprocesses): a refused command leaves the run
directory as it was, a failing job of a sweep leaves the other jobs to run under every launcher
and is named at the end, and each job's recorded command runs that job again."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.kit.jobs import job_command
from tests.configs import CONFIGS
from tests.runs import files_in, metric_rows

TINY = [
    "data=fashion_mnist",
    "data.download=false",
    "data.verify=false",
    "logger.mode=disabled",
    "train.steps=6",
    "eval.every=3",
    "train.batch_size=20",
    "population.num_batches=2",
    "threads=1",
]


def _mnist(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m experiments.mnist`` on the tiny data; ``-m`` among ``args`` makes it a sweep
    (Hydra's flags, ``-m`` and ``--config-dir DIR``, go before the overrides)."""
    flags, rest, items = [], [], iter(args)
    for a in items:
        if a == "-m":
            flags.append(a)
        elif a == "--config-dir":
            flags += [a, next(items)]
        else:
            rest.append(a)
    args = tuple(rest)
    return subprocess.run(
        [sys.executable, "-m", "experiments.mnist", *flags, f"data.root={root}", *TINY, *args],
        capture_output=True,
        text=True,
        cwd=CONFIGS.parent,
        timeout=300,
    )


def test_the_command_outside_hydra_is_the_command_line_quoted(monkeypatch):
    from experiments.kit import jobs

    monkeypatch.setattr(jobs.HydraConfig, "initialized", staticmethod(lambda: False))
    monkeypatch.setattr(sys, "argv", ["x", "seed=[0,1]", "train.lr=0.5"])
    assert (
        job_command("experiments.mnist") == "python -m experiments.mnist 'seed=[0,1]' train.lr=0.5"
    )


@pytest.mark.slow
def test_a_refused_command_changes_nothing_in_the_run_directory(tiny_data, tmp_path):
    run = tmp_path / "run"
    first = _mnist(tiny_data, f"hydra.run.dir={run}")
    assert first.returncode == 0
    assert "steps: 6" in (run / ".hydra" / "config.yaml").read_text()
    closing = "final test accuracy"  # printed without a terminal, and in the job's log
    assert closing in first.stdout and closing in (run / "mnist.log").read_text()
    before = files_in(run)
    refused = _mnist(tiny_data, "train.steps=9", f"hydra.run.dir={run}")
    assert refused.returncode == 1 and "already holds a run" in refused.stderr
    assert files_in(run) == before  # the record of its settings included


@pytest.mark.slow
def test_overwrite_keeps_the_replaced_run_aside_and_collection_skips_it(tiny_data, tmp_path):
    run = tmp_path / "run"
    assert _mnist(tiny_data, "seed=[0,1]", f"hydra.run.dir={run}").returncode == 0
    old = json.loads((run / "seed1" / "summary.json").read_text())
    out = _mnist(tiny_data, "seed=[0]", "train.lr=0.5", "overwrite=true", f"hydra.run.dir={run}")
    assert out.returncode == 0, out.stderr[-2000:]
    [aside] = (run / ".replaced").iterdir()
    assert json.loads((aside / "seed1" / "summary.json").read_text()) == old
    assert (aside / "checkpoint.pt").exists() and "lr: 1.0" in (
        aside / ".hydra/config.yaml"
    ).read_text()
    assert not (run / "seed1").exists()  # no stale seed beside the new run
    collected = subprocess.run(
        [sys.executable, "-m", "scripts.collect", "mnist", str(run), "--out", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        cwd=CONFIGS.parent,
        timeout=120,
    )
    assert collected.returncode == 0, collected.stderr[-2000:]
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert summary["setups"]["bn"]["seeds"] == [0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "launcher",
    [
        pytest.param([], id="basic"),
        pytest.param(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], id="joblib"),
        pytest.param(["hydra/launcher=submitit_local"], id="submitit", marks=pytest.mark.slow),
    ],
)
def test_a_failing_job_leaves_the_others_to_run_and_is_named_at_the_end(
    tiny_data, tmp_path, launcher
):
    sweep = tmp_path / "sweep"
    out = _mnist(tiny_data, "-m", "train.lr=-1,0.5", *launcher, f"hydra.sweep.dir={sweep}")
    assert out.returncode == 1
    assert "1 job(s) of the sweep" in out.stderr
    assert (
        "job 0 (" in out.stderr and "train.lr=-1" in out.stderr and "must be positive" in out.stderr
    )
    assert "Traceback" not in out.stderr
    [summary] = [json.loads(p.read_text()) for p in sweep.rglob("summary.json")]
    assert summary["lr"] == 0.5


@pytest.mark.slow
def test_a_jobs_recorded_command_runs_that_job_again(tiny_data, tmp_path):
    sweep = tmp_path / "sweep"
    out = _mnist(tiny_data, "-m", "train.lr=0.5,2.0", f"hydra.sweep.dir={sweep}")
    assert out.returncode == 0, out.stderr[-2000:]
    [job] = [
        p.parent for p in sweep.rglob("summary.json") if json.loads(p.read_text())["lr"] == 2.0
    ]
    assert job.name.startswith("1_bn_seed0_") and "train.lr=2.0" in job.name  # told apart by name
    command = json.loads((job / "summary.json").read_text())["command"]
    assert "0.5" not in command  # this job's own overrides, not the sweep's
    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "experiments.mnist"]
    again = subprocess.run(
        [sys.executable, *args[1:], f"hydra.run.dir={tmp_path / 'again'}"],
        capture_output=True,
        text=True,
        cwd=CONFIGS.parent,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert metric_rows(tmp_path / "again") == metric_rows(job)


@pytest.mark.slow
def test_a_relative_data_root_is_the_launch_folders_with_chdir(tiny_data, tmp_path):
    relative = Path(os.path.relpath(tiny_data, CONFIGS.parent))
    run = tmp_path / "run"
    out = _mnist(relative, "hydra.job.chdir=true", f"hydra.run.dir={run}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert (run / "summary.json").exists()


def test_every_study_takes_the_shared_hydra_settings():
    import yaml

    from experiments.studies import TRAINING

    for study in TRAINING:
        root = yaml.safe_load((CONFIGS / study / f"{study}.yaml").read_text())
        assert "kit" in root["defaults"], f"{study}.yaml must list kit in its defaults"
        assert root["hydra"]["searchpath"] == ["file://${kit_configs:}"]  # the shared groups
    kit = yaml.safe_load((CONFIGS / "kit.yaml").read_text())["hydra"]
    assert kit["output_subdir"] is None and "failed_jobs" in kit["callbacks"]


@pytest.mark.slow
def test_a_learning_rate_search_goes_on_past_a_failed_trial(tiny_data, tmp_path):
    import yaml

    sweeper = tmp_path / "configs" / "hydra" / "sweeper"
    sweeper.mkdir(parents=True)
    (sweeper / "two_lrs.yaml").write_text(
        "defaults: [search]\nn_trials: 4\nparams:\n  train.lr: choice(-1.0, 0.5)\n"
    )
    sweep = tmp_path / "search"
    out = _mnist(
        tiny_data, "-m", "--config-dir", str(tmp_path / "configs"), "hydra/sweeper=two_lrs",
        f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert out.returncode == 1 and "train.lr=-1.0 must be positive" in out.stderr  # named
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    states = [t["state"] for t in results["trials"]]
    assert len(states) == 4 and "FAIL" in states and "COMPLETE" in states  # it went on
    assert results["direction"] == "maximize" and results["best_params"] == {"train.lr": 0.5}
    [failed] = [t for t in results["trials"] if t["state"] == "FAIL"]
    assert "no objective" in failed["reason"]


@pytest.mark.slow
def test_the_shipped_search_runs_and_a_study_without_an_objective_refuses_it(tiny_data, tmp_path):
    import yaml

    db = [
        f"hydra.sweeper.storage=sqlite:///{tmp_path / 'search.db'}",
        "hydra.sweeper.study_name=lr",
    ]
    out = _mnist(
        tiny_data, "-m", "hydra/sweeper=lr_search", "hydra.sweeper.n_trials=2",
        f"hydra.sweep.dir={tmp_path / 'search'}", "norm.momentum=interval(0.01,0.5)", *db,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "best of 2 trials" in out.stdout + out.stderr
    more = _mnist(
        tiny_data, "-m", "hydra/sweeper=lr_search", "hydra.sweeper.n_trials=3",
        f"hydra.sweep.dir={tmp_path / 'more'}", "norm.momentum=interval(0.01,0.5)", *db,
    )  # fmt: skip
    assert more.returncode == 0, more.stderr[-2000:]
    results = yaml.safe_load((tmp_path / "more" / "optimization_results.yaml").read_text())
    assert [t["number"] for t in results["trials"]] == [0, 1, 2]  # one more, numbered on
    assert set(results["best_params"]) == {"train.lr", "norm.momentum"}
    [job] = [p.name for p in (tmp_path / "more").iterdir() if p.is_dir()]
    assert job.startswith("2_")  # its folder numbered on too
    refused = subprocess.run(
        [sys.executable, "-m", "experiments.depth", "-m", "hydra/sweeper=lr_search"],
        capture_output=True, text=True, cwd=CONFIGS.parent, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 1 and "depth returns no objective to search" in refused.stderr


@pytest.mark.slow
def test_no_logger_writes_no_wandb_files(tiny_data, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    run = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "experiments.mnist", f"data.root={tiny_data}",
         *[a for a in TINY if not a.startswith("logger.")], "~logger", f"hydra.run.dir={run}"],
        capture_output=True, text=True, cwd=CONFIGS.parent, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert (run / "summary.json").exists() and not list(run.rglob("wandb*"))


@pytest.mark.slow
def test_an_offline_wandb_run_is_quiet_on_the_console(tiny_data, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    run = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "experiments.mnist", f"data.root={tiny_data}",
         *[a for a in TINY if not a.startswith("logger.")], "logger.mode=offline",
         f"hydra.run.dir={run}"],
        capture_output=True, text=True, cwd=CONFIGS.parent, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert list((run / "wandb").glob("offline-run-*")) and "wandb:" not in out.stdout + out.stderr


# --- the search sweeper, with a launcher of its own (no Hydra job runs) --------------------------


class _Launcher:
    """Returns ``values`` one per job, in order; ``None`` as a job's value: no objective. Past the
    last value, a Ctrl-C."""

    def __init__(self, values):
        self.values = list(values)
        self.jobs: list[tuple[int, list[list[str]]]] = []  # (first job's index, its batch)

    def launch(self, batch, initial_job_idx):
        from hydra.core.utils import JobReturn, JobStatus

        self.jobs.append((initial_job_idx, batch))
        if not self.values:
            raise KeyboardInterrupt
        return [
            JobReturn(status=JobStatus.COMPLETED, _return_value=self.values.pop(0)) for _ in batch
        ]


def _search(
    tmp_path, values, params="interval(0.01, 1.0)", n_trials=3, arguments=(), launcher=None, **kw
):
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from hydra_plugins.bn_repro_search.search_sweeper import SearchSweeper

    space = {"train.lr": params} if params else {}
    sweeper = SearchSweeper(kw.pop("direction", "maximize"), n_trials, 1, 0, space, **kw)
    sweeper.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}})
    sweeper.hydra_context = SimpleNamespace(config_loader=None)
    sweeper.launcher = launcher or _Launcher(values)
    sweeper.sweep(list(arguments))
    return tmp_path / "optimization_results.yaml"


def test_an_inverted_search_interval_is_one_line_before_any_trial(tmp_path):
    with pytest.raises(
        SystemExit, match=r"^error: hydra.sweeper.params: train.lr=interval\(1, 0.1\)"
    ):
        _search(tmp_path, [0.5], params="interval(1, 0.1)")
    assert not (tmp_path / "optimization_results.yaml").exists()


def test_a_ctrl_c_during_a_search_keeps_the_trials_done(tmp_path):
    import yaml

    with pytest.raises(KeyboardInterrupt):
        _search(tmp_path, [0.5, 0.7], n_trials=3)
    results = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    assert [t["value"] for t in results["trials"]] == [0.5, 0.7]
    assert results["best_value"] == 0.7
    assert not list(tmp_path.glob("*.tmp"))


def test_an_interrupted_search_with_storage_resumes_numbering_on(tmp_path):
    """Ctrl-C after two trials of four; the same command again finishes the other two, numbered
    on, the trial cut short recorded as such and not counted, no earlier draw repeated."""
    import yaml

    db = {"storage": f"sqlite:///{tmp_path / 'search.db'}", "study_name": "lr"}
    with pytest.raises(KeyboardInterrupt):
        _search(tmp_path / "first", [0.5, 0.7], n_trials=4, **db)
    resumed = _Launcher([0.6, 0.8])
    results = yaml.safe_load(
        _search(tmp_path / "again", None, n_trials=4, launcher=resumed, **db).read_text()
    )
    trials = results["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2, 3, 4]
    assert [t["state"] for t in trials] == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert trials[2]["reason"] == "interrupted"
    assert [t["value"] for t in trials if t["state"] == "COMPLETE"] == [0.5, 0.7, 0.6, 0.8]
    assert [index for index, _ in resumed.jobs] == [3, 4]  # its job folders numbered on too
    lrs = [t["params"]["train.lr"] for t in trials]
    assert len(set(lrs)) == 5 and results["best_value"] == 0.8
    done = _Launcher([])  # the search is complete: running it again starts no trial
    again = _search(tmp_path / "third", None, n_trials=4, launcher=done, **db)
    assert done.jobs == [] and yaml.safe_load(again.read_text())["best_value"] == 0.8


def test_a_search_storage_needs_a_name_and_its_direction(tmp_path):
    db = f"sqlite:///{tmp_path / 'search.db'}"
    with pytest.raises(ValueError, match="storage needs hydra.sweeper.study_name"):
        _search(tmp_path, [0.5], storage=db)
    _search(tmp_path, [0.5], n_trials=1, storage=db, study_name="lr")
    with pytest.raises(SystemExit, match=r"^error: the search lr in .* was to maximize; "):
        _search(tmp_path, [0.5], storage=db, study_name="lr", direction="minimize")
    with pytest.raises(SystemExit, match=r"^error: hydra.sweeper.storage=nosuch://x cannot be"):
        _search(tmp_path, [0.5], storage="nosuch://x", study_name="lr")


def test_a_command_line_range_is_searched_in_place_of_params(tmp_path):
    """As Hydra's Optuna sweeper takes it: 'norm.momentum=interval(0.01,0.5)' joins the space,
    and one of params' keys given on the command line replaces its range."""
    import yaml
    from hydra.core.override_parser.overrides_parser import OverridesParser

    launcher = _Launcher([0.5, 0.6])
    ranges = ["norm.momentum=interval(0.01,0.5)", "train.lr=choice(0.1,0.2)", "train.steps=7"]
    results = yaml.safe_load(
        _search(tmp_path, None, n_trials=2, arguments=ranges, launcher=launcher).read_text()
    )
    assert results["searched"] == ranges[:2]
    for _, [job] in launcher.jobs:
        values = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(job)}
        assert values["train.steps"] == 7 and values["train.lr"] in (0.1, 0.2)
        assert 0.01 <= values["norm.momentum"] <= 0.5
    for bad, why in [
        ("norm.momentum=interval(0.5,0.01)", "low end must be below"),
        ("norm.momentum=glob(*)", "use interval"),
    ]:
        with pytest.raises(SystemExit, match=rf"^error: {re.escape(bad)}: .*{why}"):
            _search(tmp_path / "bad", [0.5], arguments=[bad])
    with pytest.raises(SystemExit, match="^error: nothing to search"):
        _search(tmp_path / "none", [0.5], params=None)


def test_a_trial_with_a_diverged_seed_has_no_objective(tmp_path):
    """The entry point's objective is None when one of a trial's runs diverged, not the
    survivors' mean: the sweeper records the trial as failed."""
    import yaml
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict, read_write

    from experiments.kit.config import run_study
    from tests.configs import compose_config

    cfg = compose_config("mnist", ["logger.mode=disabled"])
    with read_write(HydraConfig.get()), open_dict(HydraConfig.get()):
        HydraConfig.get().runtime.output_dir = str(tmp_path)
    runs = [{"test_acc": 0.9, "diverged": False}, {"diverged": True, "diverged_at_step": 3}]
    assert run_study(lambda _cfg, _out: runs, cfg) is None
    assert run_study(lambda _cfg, _out: runs[:1], cfg) == 0.9
    results = yaml.safe_load(_search(tmp_path, [None, 0.8], n_trials=2).read_text())
    assert [t["state"] for t in results["trials"]] == ["FAIL", "COMPLETE"]
