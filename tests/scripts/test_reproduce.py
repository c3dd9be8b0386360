"""scripts/reproduce.py and the registry's reproductions: the commands each one runs (dry run),
which arms a question takes from results/renorm, the Makefile's one line per reproduction, and
(slow) a real run end to end: progress, collection, figures, and a failed job that stops only
its own reproduction's collection."""

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.kit.config import setups
from experiments.studies import REPRODUCTIONS, SECTIONS, Job, Reproduction, study_of_reproduction
from scripts import reproduce
from tests.idx_files import make_dataset

REPO = Path(__file__).resolve().parents[2]


def _dry(capsys, *argv: str) -> list[str]:
    assert reproduce.main([*argv, "--dry-run"]) == 0
    return capsys.readouterr().out.splitlines()


def _trained(lines: list[str], module: str) -> list[str]:
    """The setups the dry run trains with ``experiments.<module>``, in the order printed."""
    return [
        re.search(r" setup=(\S+)", line).group(1)
        for line in lines
        if f"-m experiments.{module} " in line
    ]


def test_every_section_is_written_by_a_registered_reproduction():
    for section in SECTIONS.values():
        r = REPRODUCTIONS[section.reproduction]
        outs = [x.collect.out for x in reproduce.expand([r.name]) if x.collect]
        assert any(section.path == out or section.path.startswith(out + "/") for out in outs), (
            section.anchor
        )


@pytest.mark.parametrize("name", [n for n, r in REPRODUCTIONS.items() if r.stages])
def test_every_job_names_a_setup_of_the_module_it_runs(name):
    r = REPRODUCTIONS[name]
    module = reproduce.module_of(r).split(".")[1]
    jobs = [job for stage in r.stages for job in stage]
    assert jobs and len({j.name for j in jobs}) == len(jobs)
    for job in jobs:
        [setup] = [a.split("=", 1)[1] for a in job.args if a.startswith("setup=")]
        assert setup in setups(module), (name, job.name)


@pytest.mark.parametrize("name", list(REPRODUCTIONS))
def test_every_reproduction_dry_runs(capsys, name):
    extra = ["data.root=/images"] if REPRODUCTIONS[name].requires else []
    lines = _dry(capsys, name, *extra)
    leaves = reproduce.expand([name])
    jobs = sum(len(reproduce.Runner._jobs(reproduce.Runner(leaves, Path("x"), [], 2, 1, False, True), r, s))
               for r in leaves for s in range(len(r.stages)))  # fmt: skip
    assert sum("-m experiments." in line and "kit.data" not in line for line in lines) == jobs
    assert all(
        "threads=1" in line
        for line in lines
        if "hydra.run.dir=" in line and "torch.distributed" not in line
    )
    collected = [line for line in lines if "-m scripts.collect" in line]
    assert len(collected) == sum(r.collect is not None for r in leaves)


@pytest.mark.parametrize(
    "name, new, reused",
    [
        ("question-brn-gradient", ["bn_micro4_rgrad", "brn_micro4_bngrad"], ["bn_micro4", "brn_micro4"]),
        ("question-norm-position-conv", ["bn32_after", "nonorm"], ["bn32"]),
    ],
)  # fmt: skip
def test_reference_arms_are_reused_unless_told_to_run_them(capsys, name, new, reused):
    lines = _dry(capsys, name)
    assert sorted(_trained(lines, "renorm")) == sorted(new)
    assert f"--reuse results/renorm --reuse-setups {','.join(reused)}" in "\n".join(lines)
    for argv in (["--no-reuse"], ["seed=[0,1,2]"]):  # other settings: run them here
        lines = _dry(capsys, name, *argv)
        assert sorted(_trained(lines, "renorm")) == sorted(reused + new)
        assert "--reuse" not in "\n".join(lines)


def test_the_reused_runs_have_the_questions_seeds():
    summary = json.loads((REPO / "results/renorm/fashion_mnist/summary.json").read_text())
    for name in ("question-brn-gradient", "question-norm-position-conv"):
        r = REPRODUCTIONS[name]
        [seeds] = {a for job in r.stages[0] for a in job.args if a.startswith("seed=")}
        for setup in r.collect.reuse.setups:
            assert f"seed={summary['setups'][setup]['seeds']}".replace(" ", "") == seeds


def test_overrides_replace_a_jobs_own_value_and_reach_every_job(capsys):
    lines = _dry(capsys, "reproduce-mnist", "seed=[7]", "train.steps=10")
    trained = [line for line in lines if "-m experiments.mnist" in line]
    assert len(trained) == 2
    for line in trained:
        assert line.count("seed=") == 1 and shlex.split(line)[-2:] == ["seed=[7]", "train.steps=10"]


def test_a_group_runs_its_members_once_and_its_figures_last(capsys):
    lines = _dry(capsys, "reproduce-questions", "question-mlp")
    assert (
        sum("-m scripts.collect mnist" in line and "questions/mlp" in line for line in lines) == 1
    )
    assert lines[-1].endswith("-m scripts.plot_questions")
    assert all(
        study_of_reproduction(m).name == "questions" for m in ("question-mlp", "question-dropout")
    )


def test_a_stage_waits_for_the_one_before_and_takes_its_overrides(capsys):
    lines = _dry(capsys, "reproduce-inception-converged")
    trained = [line for line in lines if "-m experiments.inception" in line]
    assert [("setup=inception " in line) for line in trained] == [True] * 2 + [False] * 8
    assert all("stop_at_target" in line for line in trained[2:])


def test_bad_requests_are_one_line(capsys):
    for argv, message in (
        (["nothing-here"], "no reproduction nothing-here"),
        (["reproduce-inception"], "reproduce-inception needs data.root=..."),
        (["reproduce-mnist", "--jobs", "0"], "--jobs and --nproc must be at least 1"),
        ([], "name a reproduction"),
    ):
        with pytest.raises(SystemExit):
            reproduce.main(argv)
        assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_has_one_target_per_reproduction_and_lists_them():
    names = subprocess.run([sys.executable, "-m", "scripts.reproduce", "--names"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert names == list(REPRODUCTIONS)
    shown = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout  # fmt: skip
    assert all(re.search(rf"^  {re.escape(n)} +\S", shown, re.M) for n in names)
    dry = subprocess.run(["make", "-n", "--no-print-directory", "reproduce-renorm", "JOBS=3",
                          "ARGS=logger.mode=online"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    assert re.search(r"-m scripts.reproduce reproduce-renorm --jobs 3 .*logger.mode=online", dry)


@pytest.mark.slow
def test_a_real_run_collects_plots_and_names_a_failed_job(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    make_dataset(data, folder="MNIST")
    make_dataset(data)
    bad = Reproduction(
        "broken", "a reproduction whose one job fails", module="mnist", data=("mnist",),
        stages=((Job("bn", ("setup=bn",)), Job("lr", ("setup=bn", "train.lr=-1"))),),
        collect=reproduce.REPRODUCTIONS["reproduce-mnist"].collect,
    )  # fmt: skip
    monkeypatch.setitem(reproduce.REPRODUCTIONS, "broken", bad)
    quick = ["debug=quick", f"data.root={data}", "data.download=false", "data.verify=false"]
    home = tmp_path / "home"
    code = reproduce.main(
        ["reproduce-mnist", "broken", "--home", str(home), "--out", str(tmp_path / "runs"), *quick]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert re.search(r"^\[\d/4\] reproduce-mnist bn: done in \d+ s; about .* left", out, re.M)
    assert "failed: broken lr (exit 1" in out and "train.lr=-1" in out
    assert "error: broken not collected: lr failed" in out
    summary = json.loads((home / "results/mnist/mnist/summary.json").read_text())
    assert summary["command"] == f"python -m scripts.reproduce reproduce-mnist {' '.join(quick)}"
    assert summary["wall_time_s"] > 0
    assert sorted(summary["setups"]) == ["baseline", "bn"]  # the broken one's runs are not in it
    assert (home / "results/figures/mnist_fig1.png").exists()
    assert (tmp_path / "runs/broken/logs/lr.log").exists()
    with pytest.raises(SystemExit):  # a used run folder is refused, not overwritten
        reproduce.main(["reproduce-mnist", "--out", str(tmp_path / "runs"), *quick])


def test_figures_redraws_each_figure_script_once_then_the_documents(monkeypatch):
    ran = []
    monkeypatch.setattr(reproduce, "_run", lambda cmd, log=None, cwd=REPO: ran.append(cmd[2]) or 0)
    assert reproduce.main(["--figures"]) == 0
    scripts = [c.removeprefix("scripts.") for c in ran]
    documents = ["claims", "report", "results_readme"]
    assert scripts[-3:] == documents and len(scripts) == len(set(scripts))
    drawn = {p[0] for r in REPRODUCTIONS.values() for p in r.plots}
    assert set(scripts) == drawn | set(documents)


def test_a_failing_stage_hook_stops_only_its_reproduction(monkeypatch, tmp_path, capsys):
    ran = []
    monkeypatch.setattr(reproduce, "_run", lambda cmd, log=None, cwd=REPO: ran.append(cmd) or 0)
    staged = Reproduction(
        "staged", "two stages, the hook between them fails", module="mnist",
        stages=((Job("a", ("setup=bn",)),), (Job("b", ("setup=bn",)),)),
        between="json:loads",  # called with a folder: a TypeError
        collect=REPRODUCTIONS["reproduce-mnist"].collect,
    )  # fmt: skip
    monkeypatch.setitem(reproduce.REPRODUCTIONS, "staged", staged)
    code = reproduce.main(
        ["staged", "sweep-lr", "--out", str(tmp_path / "runs"), "data.download=false"]
    )
    out = capsys.readouterr().out
    assert code == 1 and "failed: staged: json:loads" in out
    assert "error: staged not collected" in out
    assert not [c for c in ran if "hydra.run.dir=" in " ".join(c) and "/staged/b" in " ".join(c)]
    assert [c for c in ran if c[2] == "scripts.collect" and "lr_sweep.csv" in " ".join(c)]


@pytest.mark.parametrize(
    "item", ["data=fashion_mnist", "data.name=fashion_mnist", "++data.name=x", "~data.name"]
)
def test_a_data_override_is_refused(capsys, item):
    # data.name= used to pass: MNIST's reproduction trained on Fashion-MNIST and filed it as MNIST
    with pytest.raises(SystemExit):
        reproduce.main(["reproduce-mnist", item, "--dry-run"])
    assert "a reproduction's data are part of it" in capsys.readouterr().err


def test_a_group_s_figures_wait_for_its_own_members_only():
    everything = reproduce.group_plots(["reproduce-all"])
    assert ("plot_questions",) in everything and ("claims",) in everything
    # a group that rewrites the claims table rewrites every document, results/README.md last
    assert everything[-3:] == [("claims",), ("report",), ("results_readme",)]
    assert reproduce.group_plots(["confirm-all"])[-1] == ("results_readme",)
    drawn = reproduce.group_plots(["reproduce-all"], failed={"question-mlp"})
    # the questions' group and reproduce-all hold question-mlp: not drawn; no other group is lost
    assert ("plot_questions",) not in drawn and ("claims",) not in drawn
    assert reproduce.group_plots(["reproduce-questions"], failed={"reproduce-mnist"}) == [
        ("plot_questions",)
    ]


@pytest.mark.parametrize("spelling", ["false", "False", "no", "off", "0", "+data.download=false"])
def test_data_download_false_in_any_spelling_prepares_no_data(monkeypatch, spelling):
    ran = []
    monkeypatch.setattr(reproduce, "_run", lambda cmd, log=None, cwd=REPO: ran.append(cmd) or 0)
    item = spelling if "=" in spelling else f"data.download={spelling}"
    reproduce.prepare_data([REPRODUCTIONS["reproduce-mnist"]], [item], dry_run=False)
    assert ran == []
    reproduce.prepare_data(
        [REPRODUCTIONS["reproduce-mnist"]], ["data.download=true"], dry_run=False
    )
    assert [c[2:4] for c in ran] == [["experiments.kit.data", "mnist"]]


@pytest.mark.parametrize("prefix", ["", "+", "++"])
def test_the_data_are_prepared_where_the_jobs_read_them(monkeypatch, prefix):
    """``data.root`` set with Hydra's ``+``/``++`` prefixes too: the jobs read it, so the data
    must be fetched there, not into ./data."""
    ran = []
    monkeypatch.setattr(reproduce, "_run", lambda cmd, log=None, cwd=REPO: ran.append(cmd) or 0)
    reproduce.prepare_data(
        [REPRODUCTIONS["reproduce-mnist"]], [f"{prefix}data.root=/elsewhere"], dry_run=False
    )
    assert [c[2:] for c in ran] == [["experiments.kit.data", "mnist", "/elsewhere"]]


@pytest.mark.slow
def test_a_job_s_time_is_taken_where_it_ran(tmp_path):
    before = time.monotonic()
    rc, ended = reproduce._timed([sys.executable, "-c", "pass"], tmp_path / "log")
    assert rc == 0 and before < ended <= time.monotonic()


def test_collection_gets_a_run_folder_when_every_run_was_reused(monkeypatch, tmp_path):
    seen = []
    folder = tmp_path / "runs" / "reproduce-mnist"

    def run(cmd, log=None, cwd=REPO):
        seen.append(folder.is_dir())
        return 0

    monkeypatch.setattr(reproduce, "_run", run)
    runner = reproduce.Runner(
        [REPRODUCTIONS["reproduce-mnist"]], tmp_path / "runs", [], 1, 1, False, False, tmp_path
    )
    runner.collect(REPRODUCTIONS["reproduce-mnist"])
    assert seen and all(seen)


def test_prefixed_overrides_name_the_key_they_set():
    """Hydra's ``+key=``, ``++key=`` and ``~key`` set (or delete) ``key``: they replace the job's
    own ``key=`` (or ``+key=``) as a plain ``key=`` would."""
    args = ("setup=bn", "train.lr=0.1", "+probe.unit=3")
    for given in ("+train.lr=0.5", "++train.lr=0.5", "~train.lr"):
        assert reproduce.with_overrides(args, [given]) == ["setup=bn", "+probe.unit=3", given]
    assert reproduce.with_overrides(args, ["probe.unit=4"]) == [
        "setup=bn", "train.lr=0.1", "probe.unit=4"
    ]  # fmt: skip
    # and a job's own ~key is replaced by a plain key= (each prefix stripped on both sides)
    assert reproduce.with_overrides(("~train.lr", "setup=bn"), ["train.lr=0.5"]) == [
        "setup=bn", "train.lr=0.5"
    ]  # fmt: skip


def test_a_deletion_is_an_override_that_reaches_every_job(capsys):
    lines = _dry(capsys, "reproduce-mnist", "~train.lr")  # a name to the runner, once
    trained = [shlex.split(line) for line in lines if "-m experiments.mnist" in line]
    assert len(trained) == 2 and all(cmd[-1] == "~train.lr" for cmd in trained)


def test_a_prefixed_override_counts_as_its_key_in_the_requests_checks(capsys):
    with pytest.raises(SystemExit):
        reproduce.main(["reproduce-mnist", "+data=fashion_mnist", "--dry-run"])
    assert "a reproduction's data are part of it" in capsys.readouterr().err
    lines = _dry(capsys, "reproduce-inception", "++data.root=/images")  # it needs data.root
    assert any("-m experiments.inception " in line for line in lines)


def _timed_reproduction(estimates: tuple[float, ...]) -> Reproduction:
    jobs = tuple(Job(f"j{s:g}", ("setup=bn",), estimate_s=s) for s in estimates)
    return Reproduction("timed", "jobs of several lengths", module="mnist", stages=(jobs,))


def test_jobs_start_longest_first(tmp_path, capsys):
    """The longest jobs first, so that no long job starts last and runs on alone."""
    runner = reproduce.Runner([_timed_reproduction((60, 600, 5, 120))], tmp_path, [], 2, 1, False, True)  # fmt: skip
    assert runner.run() == 0
    started = re.findall(r"hydra\.run\.dir=\S+/timed/(j\d+)\b", capsys.readouterr().out)
    assert started == ["j600", "j120", "j60", "j5"]


@pytest.mark.parametrize("jobs,left", [(1, "40 min"), (2, "20 min"), (4, "10 min")])
def test_the_time_left_is_shared_among_the_jobs_at_a_time(monkeypatch, tmp_path, capsys, jobs, left):  # fmt: skip
    """The estimate divides the jobs' time by the number run at a time."""
    monkeypatch.setattr(reproduce, "_run", lambda cmd, log=None, cwd=REPO: 0)
    r = _timed_reproduction((600, 600.5, 601, 601.5))  # 40 min of jobs
    assert reproduce.Runner([r], tmp_path, [], jobs, 1, False, False, tmp_path).run() == 0
    first = capsys.readouterr().out.splitlines()[0]
    want = f"4 jobs, {jobs} at a time; about {left} left (the registry's estimates)"
    assert first.startswith(want)


def test_each_job_says_when_it_starts_and_when_it_ends(monkeypatch, tmp_path, capsys):
    """A job runs for minutes: a line when it starts, not only when it ends."""
    monkeypatch.setattr(reproduce, "_run", lambda cmd, log=None, cwd=REPO: 0)
    r = _timed_reproduction((60, 600))
    assert reproduce.Runner([r], tmp_path, [], 1, 1, False, False, tmp_path).run() == 0
    lines = capsys.readouterr().out.splitlines()
    clock = r"at \d\d:\d\d:\d\d"  # the wall-clock time it started
    said = [line for line in lines if line.startswith("[")]
    for line, want in zip(said, [
        rf"\[1/2\] started timed j600 {clock}$",
        r"\[1/2\] timed j600: done",
        rf"\[2/2\] started timed j60 {clock}$",
        r"\[2/2\] timed j60: done",
    ], strict=True):  # fmt: skip
        assert re.match(want, line), line


def test_a_dry_run_prints_commands_a_shell_runs_as_they_are(capsys):
    """``seed=[0,1,2]`` unquoted is a glob to a shell (zsh refuses it; bash may expand it)."""
    lines = _dry(capsys, "reproduce-mnist")
    jobs = [line for line in lines if "-m experiments.mnist" in line]
    assert jobs and all("'seed=[0,1,2]'" in line for line in jobs)
    assert all("seed=[0,1,2]" in shlex.split(line) for line in jobs)


def test_a_run_folder_with_accents_and_spaces_reaches_hydra_as_it_is(tmp_path, capsys):
    """Unquoted, Hydra's override grammar refuses ``é`` and splits at ``,`` or ``=``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from experiments.kit.config import preflight
    from tests.configs import CONFIGS  # with every study's schema registered

    folder = tmp_path / "é x" / "it's, a=b\\"
    r = REPRODUCTIONS["reproduce-mnist"]
    for job in (Job("one", ("setup=bn",)), Job("many", ("setup=bn,nonorm",), sweep=True)):
        cmd = reproduce.command(r, job, folder, [], 1)
        [where] = [a for a in cmd if a.startswith("hydra.")]
        assert OverridesParser.create().parse_override(where).value() == str(folder)
    preflight("mnist", [where])  # the folder, unquoted: not a file, and writable
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit, match="is a file"):
        preflight("mnist", [f"hydra.run.dir={reproduce.hydra_quoted(str(tmp_path / 'file'))}"])
    with initialize_config_dir(config_dir=str(CONFIGS / "mnist"), version_base="1.3"):
        cfg = compose("mnist", [where.replace("sweep", "run")], return_hydra_config=True)
    assert cfg.hydra.run.dir == str(folder)
    lines = _dry(capsys, "reproduce-mnist", "--out", str(tmp_path / "é x"))
    assert all(
        OverridesParser.create().parse_override(a).value().startswith(str(tmp_path / "é x"))
        for line in lines
        for a in shlex.split(line)
        if a.startswith("hydra.run.dir=")
    )


@pytest.mark.slow
def test_a_reproduction_runs_through_a_hydra_launcher_and_is_collected_as_usual(tmp_path, capsys):
    """``hydra/launcher=submitit_local`` (what ``submitit_slurm`` is on a cluster): every job a
    multirun the launcher runs, in its own process; the collection and the figure as without."""
    data = tmp_path / "data"
    make_dataset(data, folder="MNIST")
    quick = ["debug=quick", f"data.root={data}", "data.download=false", "data.verify=false"]
    launcher = ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"]
    home, runs = tmp_path / "home", tmp_path / "runs"
    code = reproduce.main(
        ["reproduce-mnist", "--home", str(home), "--out", str(runs), *quick, *launcher]
    )
    assert code == 0, capsys.readouterr().out
    assert (runs / "reproduce-mnist/bn/.submitit").is_dir()  # the launcher ran it
    summary = json.loads((home / "results/mnist/mnist/summary.json").read_text())
    assert sorted(summary["setups"]) == ["baseline", "bn"]
    assert all(e["seeds"] == [0, 1, 2] for e in summary["setups"].values())
    assert summary["command"].endswith(" ".join(launcher))
    assert (home / "results/figures/mnist_fig1.png").exists()
