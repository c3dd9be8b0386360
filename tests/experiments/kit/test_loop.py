"""experiments.kit.loop.TrainLoop on its own: K tiny linear regressions trained in lockstep on
random data (no study, no data files), with SGD + momentum, a learning-rate schedule, noise from
torch's global generator and a study state, so that a resume has every piece of state to get right.
"""

import gc
import itertools
import json
import math
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import nn

import bn
from experiments.kit.errors import ConfigError
from experiments.kit.loop import Run, TrainLoop
from tests.interrupt import dies_at_step
from tests.processes import free_port, spawn
from tests.runs import files_in, metric_rows

IN, OUT, N_TRAIN, N_TEST = 5, 3, 64, 32


def _cfg(*overrides: str) -> DictConfig:
    base = OmegaConf.create(
        {
            "seed": [0],
            "resume": False,
            "overwrite": False,
            "train": {"steps": 12, "lr": 0.05, "batch_size": 8},
            "eval": {"every": 4},
            "logger": {"mode": "disabled", "project": "test", "group": "test", "tags": []},
        }
    )
    return OmegaConf.merge(base, OmegaConf.from_dotlist(list(overrides)))


def _data(seed: int, n: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN, generator=g)
    w = torch.arange(IN * OUT, dtype=torch.float32).view(IN, OUT) / 10
    return x, x @ w + 0.1 * torch.randn(n, OUT, generator=g)


class Copies(nn.Module):
    """``len(seeds)`` independent linear maps, copy ``k`` initialised from ``seeds[k]`` alone."""

    def __init__(self, seeds: list[int]) -> None:
        super().__init__()
        ws = [torch.randn(IN, OUT, generator=torch.Generator().manual_seed(s)) for s in seeds]
        self.weight = nn.Parameter(torch.stack(ws))
        self.bias = nn.Parameter(torch.zeros(len(seeds), 1, OUT))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (K, B, IN) -> (K, B, OUT)
        return torch.baddbmm(self.bias, x, self.weight)


class History(list):
    """A study's own state, checkpointed through torch's protocol."""

    def state_dict(self) -> list:
        return list(self)

    def load_state_dict(self, history: list) -> None:
        self[:] = history


@dataclass
class Regression:
    """The test's run for TrainLoop (a :class:`~experiments.kit.loop.Training`), its history
    checkpointed; ``stop`` is set by the tests of stopping rules."""

    batches: Callable
    step: Callable
    evaluate: Callable
    history: History
    stop: Callable | None = None

    def state_dict(self) -> list:
        return self.history.state_dict()

    def load_state_dict(self, history: list) -> None:
        self.history.load_state_dict(history)


def _train(cfg: DictConfig, out: Path, *, die_at=None, nan_at=None, noise=True, spy=None):
    """Train one copy per seed of ``cfg.seed``; returns (summaries, model, study state).

    ``die_at``: the batches raise KeyboardInterrupt at that step (a kill); ``nan_at=(k, step)``:
    copy ``k``'s weights become NaN before that step; ``noise``: the inputs get noise from
    torch's global generator (state that only the checkpoint's RNG state restores); ``spy``:
    called with the step at the start of every step."""
    seeds = list(cfg.seed)
    torch.manual_seed(1234)  # the process's global generator, as a study seeds it
    x_train, y_train = _data(0, N_TRAIN)
    x_test, y_test = _data(1, N_TEST)
    model = Copies(seeds)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.train.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
    runs = [
        Run(name=f"lin-s{s}", out_dir=out / f"seed{s}", summary={"setup": "lin", "seed": s})
        for s in seeds
    ]
    for run in runs:
        run.out_dir.mkdir(parents=True, exist_ok=True)
    history = History()  # the study's own state: every evaluation's test losses
    b = cfg.train.batch_size

    def batches(start: int):
        for step in itertools.count(start):
            idx = torch.stack(
                [
                    torch.randint(
                        N_TRAIN, (b,), generator=torch.Generator().manual_seed(s * 1000 + step)
                    )
                    for s in seeds
                ]
            )
            yield x_train[idx], y_train[idx]

    def step_fn(step: int, batch) -> dict:
        if spy is not None:
            spy(step)
        x, y = batch
        if noise:
            x = x + 0.01 * torch.randn_like(x)
        if nan_at is not None and step == nan_at[1]:
            with torch.no_grad():
                model.weight[nan_at[0]].fill_(float("nan"))
        losses = ((model(x) - y) ** 2).mean((1, 2))
        optimizer.zero_grad()
        losses.sum().backward()  # each copy its own gradient
        optimizer.step()
        return {
            "loss": losses.tolist(),
            "weight_norm": model.weight.detach().norm(dim=(1, 2)).tolist(),
        }

    def evaluate(step: int) -> list[dict]:
        with torch.no_grad():
            losses = ((model(x_test.expand(len(seeds), -1, -1)) - y_test) ** 2).mean((1, 2))
        history.append(losses.tolist())
        return [{"test/loss": v} for v in losses.tolist()]

    training = Regression(
        dies_at_step(batches, die_at) if die_at is not None else batches, step_fn, evaluate, history
    )
    loop = TrainLoop(
        model=model,
        runs=runs,
        training=training,
        steps=cfg.train.steps,
        eval_every=cfg.eval.every,
        ckpt_dir=out,
        batch_size=b,
        optimizer=optimizer,
        scheduler=scheduler,
    )
    loop.start(cfg)
    summaries = loop.finish(loop.run())
    return summaries, model, history


def _closemetric_rows(a: list[dict], b: list[dict]) -> None:
    assert [(r["step"], r["metric"]) for r in a] == [(r["step"], r["metric"]) for r in b]
    np.testing.assert_allclose(
        [float(r["value"]) for r in a], [float(r["value"]) for r in b], rtol=1e-5, atol=1e-7
    )


def _assert_same_weights(a: nn.Module, b: nn.Module) -> None:
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


# --- (a) resume after a kill ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [[0], [0, 1]])
def test_resume_after_a_kill_equals_the_uninterrupted_run(tmp_path, seeds):
    seed = f"seed=[{','.join(map(str, seeds))}]"
    full, full_model, full_history = _train(_cfg(seed), tmp_path / "full")

    with pytest.raises(KeyboardInterrupt):  # killed at step 10, after the checkpoint of step 8
        _train(_cfg(seed), tmp_path / "killed", die_at=10)
    killed = metric_rows(tmp_path / "killed" / "seed0")
    assert max(int(r["step"]) for r in killed) == 8
    assert torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)["step"] == 8

    resumed, model, history = _train(_cfg(seed, "resume=true"), tmp_path / "killed")
    for s in seeds:
        assert metric_rows(tmp_path / "killed" / f"seed{s}") == metric_rows(
            tmp_path / "full" / f"seed{s}"
        )
    _assert_same_weights(model, full_model)
    assert history == full_history  # the study's state came back with the checkpoint
    for a, b in zip(resumed, full, strict=True):
        for key in ("test_loss", "final_train_loss", "steps_done", "diverged"):
            assert a[key] == b[key], key
    assert torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)["step"] == 12


@pytest.mark.slow
def test_without_the_checkpoints_rng_state_a_resume_would_differ(tmp_path):
    """The resume test can fail: a run that restarts the noise from another generator state
    does not reproduce the uninterrupted run."""
    _, full_model, _ = _train(_cfg(), tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        _train(_cfg(), tmp_path / "killed", die_at=10)
    ckpt = tmp_path / "killed" / "checkpoint.pt"
    state = torch.load(ckpt, weights_only=True)
    state["rng"][0]["torch"] = torch.Generator().manual_seed(99).get_state()
    torch.save(state, ckpt)
    _, model, _ = _train(_cfg("resume=true"), tmp_path / "killed")
    assert not torch.equal(model.weight, full_model.weight)


def test_a_checkpoint_of_two_processes_is_not_resumed_by_one(tmp_path):
    """Each process's generator state is kept by rank; a run of another size cannot take them."""
    with pytest.raises(KeyboardInterrupt):
        _train(_cfg(), tmp_path, die_at=10)
    ckpt = tmp_path / "checkpoint.pt"
    state = torch.load(ckpt, weights_only=True)
    assert len(state["rng"]) == 1  # one process
    state["rng"] *= 2
    torch.save(state, ckpt)
    with pytest.raises(ConfigError, match=r"written by 2 process\(es\) and this run has 1"):
        _train(_cfg("resume=true"), tmp_path)


def _diverging_worker(rank: int, port: int, out: str) -> None:
    """Rank 1's network alone turns NaN at step 6; rank 0's stays finite."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        [summary], _, _ = _train(_cfg(), Path(out) / str(rank), nan_at=(0, 6) if rank else None)
    finally:
        dist.destroy_process_group()
    (Path(out) / f"{rank}.json").write_text(json.dumps(summary))


@pytest.mark.slow
def test_processes_stop_at_the_same_step_when_one_diverges(tmp_path):
    """A process that stopped alone would leave the others waiting in their next collective."""
    spawn(_diverging_worker, (free_port(), str(tmp_path)), timeout=120)
    summaries = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    assert all(s["diverged"] for s in summaries)
    assert summaries[0]["diverged_at_step"] == summaries[1]["diverged_at_step"] == 7
    assert summaries[0]["steps_done"] == summaries[1]["steps_done"]


def test_a_resume_keeps_the_rows_logged_at_its_checkpoints_step_and_logs_them_once(tmp_path):
    """A checkpoint at step 4 holds step 4 done: its rows stay, those after it go (they are
    logged again), and a metric already logged at step 4 is not written a second time."""
    from experiments.kit.runlog import RunLog

    (tmp_path / "metrics.csv").write_text(
        "step,metric,value\n0,test/loss,3\n4,train/loss,2\n4,test/loss,1\n8,test/loss,0.5\n"
    )
    log = RunLog(tmp_path, wandb_kwargs={}, mode="disabled", resume_step=4)
    log.log(4, {"test/loss": 1.0, "test/acc": 0.7})  # the loop's evaluation at the resume step
    log.log(8, {"test/loss": 0.25})
    log.close()
    rows = [(r["step"], r["metric"], r["value"]) for r in metric_rows(tmp_path)]
    assert rows == [
        ("0", "test/loss", "3"),
        ("4", "train/loss", "2"),
        ("4", "test/loss", "1"),
        ("4", "test/acc", "0.7"),
        ("8", "test/loss", "0.25"),
    ]


# --- (b) K copies in lockstep equal K separate runs ------------------------------------------------


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_the_collector_pauses_between_evaluations_and_frees_cycles_at_each(tmp_path):
    """Automatic garbage collection is off during the steps (a step's objects die by reference
    count), each evaluation collects the cycles made since, and the collector is on again after
    the run."""
    made: list[tuple[int, weakref.ref]] = []
    seen = []

    def spy(step: int) -> None:
        alive_from_before = [s for s, ref in made if ref() is not None and s < step - step % 4]
        seen.append((step, gc.isenabled(), alive_from_before))
        made.append((step, weakref.ref(_Cycle())))  # unreachable at once, but for the cycle

    assert gc.isenabled()
    _train(_cfg("train.steps=12", "eval.every=4"), tmp_path, spy=spy)
    assert gc.isenabled()
    assert [s for s, _, _ in seen] == list(range(12))
    assert not any(enabled for _, enabled, _ in seen)
    assert all(not alive for _, _, alive in seen)  # each evaluation freed the earlier cycles
    assert all(ref() is None for _, ref in made)


@pytest.mark.slow
def test_copies_in_lockstep_equal_separate_runs(tmp_path):
    together, model, _ = _train(_cfg("seed=[3,4]"), tmp_path / "both", noise=False)
    for k, seed in enumerate((3, 4)):
        [alone], alone_model, _ = _train(_cfg(f"seed=[{seed}]"), tmp_path / f"s{seed}", noise=False)
        assert together[k]["seed"] == seed
        assert together[k]["test_loss"] == pytest.approx(alone["test_loss"], rel=1e-5)
        _closemetric_rows(
            metric_rows(tmp_path / "both" / f"seed{seed}"),
            metric_rows(tmp_path / f"s{seed}" / f"seed{seed}"),
        )
        torch.testing.assert_close(model.weight[k], alone_model.weight[0])
    assert together[0]["test_loss"] != together[1]["test_loss"]  # two different networks


# --- (c) one copy diverges --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_diverging_copy_stops_and_the_other_goes_on(tmp_path):
    [alone], _, _ = _train(_cfg("seed=[0]"), tmp_path / "alone", noise=False)
    ok, bad = _train(_cfg("seed=[0,1]"), tmp_path / "both", nan_at=(1, 5), noise=False)[0]
    assert bad["diverged"] and bad["diverged_at_step"] == bad["steps_done"] == 6
    assert "test_loss" not in bad
    assert not ok["diverged"] and ok["steps_done"] == 12 and "diverged_at_step" not in ok
    assert ok["test_loss"] == pytest.approx(alone["test_loss"], rel=1e-5)

    bad_rows = metric_rows(tmp_path / "both" / "seed1")
    assert max(int(r["step"]) for r in bad_rows) == 6  # nothing logged after it diverged
    assert [r["value"] for r in bad_rows if r["step"] == "6"] == ["nan"]  # the loss that did it
    assert {int(r["step"]) for r in bad_rows if r["metric"] == "test/loss"} == {0, 4}
    ok_rows = metric_rows(tmp_path / "both" / "seed0")
    assert {int(r["step"]) for r in ok_rows if r["metric"] == "test/loss"} == {0, 4, 8, 12}
    _closemetric_rows(ok_rows, metric_rows(tmp_path / "alone" / "seed0"))
    ckpt = torch.load(tmp_path / "both" / "checkpoint.pt", weights_only=True)
    assert ckpt["diverged_at_step"] == [None, 6]


@pytest.mark.slow
def test_a_diverged_copy_stays_diverged_after_a_resume(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _train(_cfg("seed=[0,1]"), tmp_path / "run", nan_at=(1, 5), die_at=10)
    ok, bad = _train(_cfg("seed=[0,1]", "resume=true"), tmp_path / "run")[0]
    assert bad["diverged"] and bad["diverged_at_step"] == 6 and not ok["diverged"]
    assert max(int(r["step"]) for r in metric_rows(tmp_path / "run" / "seed1")) == 6


# --- (d) what a resume may change ---------------------------------------------------------------


def test_resume_with_another_learning_rate_is_refused(tmp_path):
    _train(_cfg("train.steps=8"), tmp_path)
    before = metric_rows(tmp_path / "seed0")
    with pytest.raises(ConfigError, match=r"holds the run of train\.lr=0\.05, not train\.lr=0\.1;"):
        _train(_cfg("train.steps=8", "train.lr=0.1", "resume=true"), tmp_path)
    assert metric_rows(tmp_path / "seed0") == before  # the refused run wrote nothing


@pytest.mark.slow
def test_resume_with_more_steps_continues_the_run(tmp_path):
    _, full_model, _ = _train(_cfg("train.steps=12"), tmp_path / "full")
    _train(_cfg("train.steps=8"), tmp_path / "longer")
    [summary], model, _ = _train(_cfg("train.steps=12", "resume=true"), tmp_path / "longer")
    assert summary["steps_done"] == 12
    assert summary["cpu_capability"].startswith(torch.backends.cpu.get_cpu_capability())
    assert summary["compiled_kernels"] == bn.compiled.used()
    assert metric_rows(tmp_path / "longer" / "seed0") == metric_rows(tmp_path / "full" / "seed0")
    _assert_same_weights(model, full_model)


@pytest.mark.slow
def test_refused_resume_then_allowed_resume_in_one_process(tmp_path):
    """A refused resume leaves the run directory usable by the next run of the same process."""
    _train(_cfg("train.steps=8"), tmp_path)
    with pytest.raises(ConfigError, match="train.lr"):
        _train(_cfg("train.steps=8", "train.lr=0.1", "resume=true"), tmp_path)
    [summary], _, _ = _train(_cfg("train.steps=12", "resume=true"), tmp_path)
    assert summary["steps_done"] == 12


@pytest.mark.slow
def test_a_second_run_into_a_used_directory_is_refused(tmp_path):
    _train(_cfg("train.steps=4"), tmp_path)
    with pytest.raises(ConfigError, match="already holds a run"):
        _train(_cfg("train.steps=4"), tmp_path)
    _train(_cfg("train.steps=4", "overwrite=true"), tmp_path)


# --- (e), (f) a bad or missing checkpoint ------------------------------------------------------------


def test_a_garbage_checkpoint_is_a_config_error_naming_the_file(tmp_path):
    ckpt = tmp_path / "checkpoint.pt"
    ckpt.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(ConfigError, match=re.escape(str(ckpt))):
        _train(_cfg("resume=true"), tmp_path)


def test_a_checkpoint_of_something_else_is_a_config_error_naming_the_file(tmp_path):
    ckpt = tmp_path / "checkpoint.pt"
    torch.save({"weights": torch.zeros(3)}, ckpt)
    with pytest.raises(ConfigError, match=re.escape(str(ckpt))):
        _train(_cfg("resume=true"), tmp_path)


@pytest.mark.slow
def test_resume_without_a_checkpoint_says_so_and_starts_at_step_0(tmp_path, capsys):
    [summary], model, _ = _train(_cfg("resume=true"), tmp_path / "run")
    out = capsys.readouterr()
    ckpt = tmp_path / "run" / "checkpoint.pt"
    assert f"resume=true but {ckpt} does not exist: starting at step 0" in out.out + out.err
    _, fresh, _ = _train(_cfg(), tmp_path / "fresh")
    assert metric_rows(tmp_path / "run" / "seed0") == metric_rows(tmp_path / "fresh" / "seed0")
    assert int(metric_rows(tmp_path / "run" / "seed0")[0]["step"]) == 0
    assert summary["steps_done"] == 12 and math.isfinite(summary["test_loss"])
    _assert_same_weights(model, fresh)


# --- (g) a stop rule ends the run early ----------------------------------------------------------


def _enough_at(step_to_stop: int):
    return lambda step, evals: f"enough at {step}" if step >= step_to_stop else None


def test_a_stop_rule_ends_the_run_at_an_evaluation(tmp_path, monkeypatch):
    _stop_after(monkeypatch, 8)
    [summary], _, _ = _train(_cfg(), tmp_path)
    assert summary["steps_done"] == 8 and summary["stopped"] == "enough at 8"
    rows = metric_rows(tmp_path / "seed0")
    assert max(int(r["step"]) for r in rows) == 8
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert ckpt["step"] == 8 and ckpt["stopped"] == "enough at 8"


@pytest.mark.slow
def test_a_stopped_run_stays_stopped_when_resumed(tmp_path, monkeypatch):
    _stop_after(monkeypatch, 8)
    _train(_cfg(), tmp_path)
    before = metric_rows(tmp_path / "seed0")
    [summary], _, _ = _train(_cfg("resume=true"), tmp_path)
    assert summary["steps_done"] == 8 and summary["stopped"] == "enough at 8"
    assert metric_rows(tmp_path / "seed0") == before


def _stop_after(monkeypatch, step: int) -> None:
    """Every TrainLoop built in the test gets a stop rule that fires at ``step``."""
    original = TrainLoop.__init__

    def init(self, **kwargs):
        kwargs["training"].stop = _enough_at(step)
        original(self, **kwargs)

    monkeypatch.setattr(TrainLoop, "__init__", init)


@pytest.mark.slow
def test_resuming_a_finished_run_gives_the_same_summary(tmp_path):
    [done], _, _ = _train(_cfg(), tmp_path)
    written = (tmp_path / "seed0" / "summary.json").read_bytes()
    [again], _, _ = _train(_cfg("resume=true"), tmp_path)
    # kept as it was, throughput included (no step ran to measure it): how a sweep resumed
    # as a whole passes over its finished runs
    assert again == json.loads(written)
    assert (tmp_path / "seed0" / "summary.json").read_bytes() == written
    assert {k: v for k, v in again.items() if k != "steps_per_s"} == {
        k: v for k, v in done.items() if k != "steps_per_s"
    }  # its last evaluation came back with the checkpoint; resume=true is not a changed setting
    [changed], _, _ = _train(_cfg("resume=true", "eval.every=6"), tmp_path)  # a harmless change
    assert changed["resumed_with"] == {"eval.every": [4, 6]} and changed["steps_per_s"] is None
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert (
        ckpt["commit"] == done["git_commit"]
        and ckpt["last_eval"][0]["test/loss"] == done["test_loss"]
    )


@pytest.mark.slow
def test_a_resume_at_another_commit_keeps_the_first_and_says_so(tmp_path, monkeypatch):
    from experiments.kit import loop

    _train(_cfg("train.steps=8"), tmp_path)
    monkeypatch.setattr(loop, "git_commit", lambda: "later")
    [summary], _, _ = _train(_cfg("train.steps=12", "resume=true"), tmp_path)
    assert summary["git_commit"] != "later" and summary["resumed_at_commit"] == "later"


# --- what a run directory holds: written only after the checks, replaced runs kept aside ----------


@pytest.mark.slow
def test_a_refused_run_changes_nothing_in_the_run_directory(tmp_path):
    _train(_cfg("train.steps=4"), tmp_path)
    assert "steps: 4" in (tmp_path / ".hydra" / "config.yaml").read_text()
    before = files_in(tmp_path)
    with pytest.raises(ConfigError, match="already holds a run"):
        _train(_cfg("train.steps=8"), tmp_path)
    with pytest.raises(ConfigError, match="train.lr"):
        _train(_cfg("train.lr=0.1", "resume=true"), tmp_path)
    assert files_in(tmp_path) == before


@pytest.mark.slow
def test_overwrite_keeps_the_earlier_run_whole_and_out_of_the_way(tmp_path):
    _train(_cfg("seed=[0,1,2]", "train.steps=4"), tmp_path)
    before = files_in(tmp_path)
    _train(_cfg("seed=[0]", "train.steps=4", "train.lr=0.1", "overwrite=true"), tmp_path)
    [aside] = (tmp_path / ".replaced").iterdir()
    assert files_in(aside) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".hydra", ".lock", ".replaced", "checkpoint.pt", "seed0"
    ]  # fmt: skip
    assert "lr: 0.1" in (tmp_path / ".hydra" / "config.yaml").read_text()


@pytest.mark.slow
def test_overwrite_killed_before_its_first_checkpoint_never_resumes_the_replaced_run(tmp_path):
    _train(_cfg("train.steps=12"), tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        _train(_cfg("train.steps=12", "overwrite=true"), tmp_path / "run", die_at=2)
    _train(_cfg("train.steps=12", "resume=true"), tmp_path / "run")
    _train(_cfg("train.steps=12"), tmp_path / "fresh")
    assert metric_rows(tmp_path / "run" / "seed0") == metric_rows(tmp_path / "fresh" / "seed0")


@pytest.mark.slow
def test_a_resumed_run_records_its_settings_beside_the_first(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _train(_cfg("train.steps=12"), tmp_path, die_at=6)
    first = (tmp_path / ".hydra" / "config.yaml").read_text()
    _train(_cfg("train.steps=16", "resume=true"), tmp_path)
    assert (tmp_path / ".hydra" / "config.yaml").read_text() == first
    assert "steps: 16" in (tmp_path / ".hydra" / "resumed_at_step_4" / "config.yaml").read_text()


# --- W&B as its users expect: its own variables, one config per seed -----------------------------


def _captured_wandb(monkeypatch) -> list[dict]:
    """Stand in for W&B: record what each run would start it with."""
    from experiments.kit import runlog

    started: list[dict] = []

    def fake(out_dir, mode, kwargs, wandb_dir=None):
        started.append({"mode": mode, "dir": wandb_dir, **kwargs})

    monkeypatch.setattr(runlog, "_wandb_run", fake)
    return started


def test_each_seeds_wandb_run_has_its_own_seed_and_says_its_setup(tmp_path, monkeypatch):
    started = _captured_wandb(monkeypatch)
    for var in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_TAGS", "WANDB_RUN_GROUP", "WANDB_DIR",
                "WANDB_NAME", "WANDB_JOB_TYPE", "WANDB_RUN_ID"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    _train(_cfg("seed=[0,1]", "logger.mode=offline", "logger.tags=[mine]"), tmp_path)
    assert [s["config"]["seed"] for s in started] == [0, 1]
    assert all(s["job_type"] == "lin" and s["config"]["setup"] == "lin" for s in started)
    assert all(s["tags"][1:] == ["lin", "mine"] and s["group"] == "test" for s in started)


@pytest.mark.slow
def test_wandb_variables_win_over_the_configs_defaults(tmp_path, monkeypatch):
    started = _captured_wandb(monkeypatch)
    monkeypatch.setenv("WANDB_PROJECT", "theirs")
    monkeypatch.setenv("WANDB_TAGS", "a,b")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    _train(_cfg("logger.mode=offline"), tmp_path / "run")
    [s] = started
    assert (s["project"], s["mode"], s["dir"]) == ("theirs", "offline", str(tmp_path / "wb"))
    assert s["tags"][1:] == ["lin", "a", "b"]  # the study's name first
    monkeypatch.setenv("WANDB_MODE", "disabled")
    _train(_cfg("logger.mode=offline"), tmp_path / "off")
    assert len(started) == 1  # disabled: W&B not started, nothing of it written
    assert not list((tmp_path / "off").rglob("wandb*"))
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    with pytest.raises(ConfigError, match="WANDB_MODE=sometimes"):
        _train(_cfg("logger.mode=offline"), tmp_path / "bad")


def _wandb_init_calls(monkeypatch) -> list[dict]:
    """Stand in for ``wandb.init`` itself: record its arguments, start nothing."""
    import types

    import wandb

    calls: list[dict] = []

    def init(**kwargs):
        calls.append(kwargs)
        return types.SimpleNamespace(log=lambda *a, **k: None, finish=lambda: None)

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.delenv("WANDB_MODE", raising=False)  # tests/conftest.py's disabled
    return calls


@pytest.mark.slow
def test_wandb_name_job_type_and_run_id_variables_win_over_the_codes_defaults(
    tmp_path, monkeypatch
):
    calls = _wandb_init_calls(monkeypatch)
    names = ("WANDB_NAME", "WANDB_JOB_TYPE", "WANDB_RUN_ID")
    for var in names:
        monkeypatch.delenv(var, raising=False)
    _train(_cfg("train.steps=4", "logger.mode=offline"), tmp_path / "code")
    code_id = (tmp_path / "code" / "seed0" / "wandb_id.txt").read_text()
    assert [(c["name"], c["job_type"], c["id"]) for c in calls] == [("lin-s0", "lin", code_id)]
    for var, value in zip(names, ("mine", "probe", "run42")):
        monkeypatch.setenv(var, value)
    _train(_cfg("train.steps=4", "logger.mode=offline"), tmp_path / "env")
    assert (calls[-1]["name"], calls[-1]["job_type"], calls[-1]["id"]) == ("mine", "probe", "run42")
    assert (tmp_path / "env" / "seed0" / "wandb_id.txt").read_text() == "run42"  # resumes it
    with pytest.raises(ConfigError, match=r"WANDB_RUN_ID=run42 .* seed=\[0, 1\] start 2"):
        _train(_cfg("train.steps=4", "seed=[0,1]", "logger.mode=offline"), tmp_path / "two")
    monkeypatch.setattr("experiments.kit.jobs.in_sweep", lambda: True)
    with pytest.raises(ConfigError, match="WANDB_RUN_ID=run42 .* each job of the sweep"):
        _train(_cfg("train.steps=4", "logger.mode=offline"), tmp_path / "sweep")


def test_uncommitted_code_is_recorded_with_a_hash_of_the_changes(tmp_path):
    import subprocess

    from experiments.kit.runlog import code_changes

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "experiments").mkdir()
    step = tmp_path / "experiments" / "step.py"
    step.write_text("lr = 1.0\n")
    (tmp_path / "notes.txt").write_text("not code")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    assert code_changes(tmp_path) is None
    (tmp_path / "notes.txt").write_text("edited, but not what a run executes")
    assert code_changes(tmp_path) is None
    step.write_text("lr = 0.5\n")
    one = code_changes(tmp_path)
    step.write_text("lr = 0.25\n")
    assert one is not None and code_changes(tmp_path) not in (None, one)
    step.write_text("lr = 1.0\n")
    (tmp_path / "experiments" / "new.py").write_text("x = 1\n")
    assert code_changes(tmp_path) is not None  # an untracked file of the code counts


@pytest.mark.slow
def test_a_row_torn_by_a_kill_is_dropped_on_resume(tmp_path, capsys):
    with pytest.raises(KeyboardInterrupt):
        _train(_cfg("train.steps=12"), tmp_path / "run", die_at=6)
    with (tmp_path / "run" / "seed0" / "metrics.csv").open("a") as f:
        f.write("5,,\n")  # the kill cut this row short
    _train(_cfg("train.steps=12", "resume=true"), tmp_path / "run")
    assert "dropped 1 unreadable row(s)" in capsys.readouterr().err
    _train(_cfg("train.steps=12"), tmp_path / "fresh")
    assert metric_rows(tmp_path / "run" / "seed0") == metric_rows(tmp_path / "fresh" / "seed0")


@pytest.mark.slow
def test_resume_refuses_another_thread_count_and_records_both_commands(tmp_path, capsys):
    with pytest.raises(KeyboardInterrupt):
        _train(_cfg("train.steps=12", "threads=1"), tmp_path, die_at=6)
    with pytest.raises(ConfigError, match="threads"):
        _train(_cfg("train.steps=12", "threads=2", "resume=true"), tmp_path)
    _train(_cfg("train.steps=16", "threads=1", "resume=true"), tmp_path)
    out = capsys.readouterr()
    assert "train.steps=16 (was 12)" in out.out + out.err and "resume=" not in out.out + out.err


def test_resume_refuses_another_length_when_the_renorm_ramp_is_scaled_to_it(tmp_path):
    """The norm declares what its layers depend on beyond ``norm.*`` (kit.norm.resume_fixed);
    the resume check asks it, as the loop does."""
    from experiments.kit.identity import check_same_run
    from experiments.kit.norm import resume_fixed

    def resume(saved: dict, now: dict) -> dict:
        return check_same_run(tmp_path, saved, now, fixed=resume_fixed(saved))

    brn = {
        "norm.kind": "batchrenorm",
        "norm.schedule.kind": "paper",
        "norm.schedule.paper_steps": 160000,
    }
    with pytest.raises(
        ConfigError,
        match=re.escape(
            f"{tmp_path} holds a Batch Renorm run whose r_max/d_max ramp is scaled to "
            "train.steps=200 (norm.schedule.paper_steps): resuming with train.steps=400 would "
            "change the ramp mid-run; resume with the same train.steps"
        ),
    ):
        resume({**brn, "train.steps": 200}, {**brn, "train.steps": 400})
    fixed = {**brn, "norm.schedule.paper_steps": None}
    assert resume({**fixed, "train.steps": 200}, {**fixed, "train.steps": 400})
    for other in ({**brn, "norm.schedule.kind": "fixed"}, {**brn, "norm.kind": "batchnorm"}):
        assert resume({**other, "train.steps": 200}, {**other, "train.steps": 400})


def test_resume_refuses_another_thread_count_but_not_another_evaluation_interval(tmp_path):
    """Another thread count changes the float rounding from the resume on (another run);
    another eval.every only changes what is logged."""
    from experiments.kit.identity import check_same_run

    saved = {"threads": 1, "eval.every": 4, "train.lr": 0.1}
    with pytest.raises(ConfigError, match=r"threads=1, not threads=2"):
        check_same_run(tmp_path, saved, {**saved, "threads": 2})
    assert check_same_run(tmp_path, saved, {**saved, "eval.every": 8}) == {"eval.every": [4, 8]}


@pytest.mark.slow
def test_a_wandb_that_cannot_start_leaves_nothing_in_the_way_of_the_retry(tmp_path, monkeypatch):
    from experiments.kit import runlog

    def refuse(*_args, **_kw):
        raise ConfigError("W&B could not start")

    monkeypatch.setattr(runlog, "_wandb_run", refuse)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    with pytest.raises(ConfigError, match="W&B could not start"):
        _train(_cfg("logger.mode=online"), tmp_path)
    assert not (tmp_path / "seed0" / "metrics.csv").exists()
    _train(_cfg(), tmp_path)  # the retry, W&B off: not refused as "already holds a run"


@pytest.mark.slow
def test_overwrite_gives_the_new_run_a_new_wandb_id(tmp_path):
    _train(_cfg("train.steps=4"), tmp_path)
    (tmp_path / "seed0" / "wandb_id.txt").write_text("old-id")  # as an offline run leaves it
    _train(_cfg("train.steps=4", "overwrite=true"), tmp_path)
    assert not (tmp_path / "seed0" / "wandb_id.txt").exists()  # the next W&B start draws a new one
    [aside] = (tmp_path / ".replaced").iterdir()
    assert (aside / "seed0" / "wandb_id.txt").read_text() == "old-id"


def test_a_run_refused_by_the_lock_changes_nothing_in_the_live_runs_directory(tmp_path):
    from experiments.kit.runlog import RunDirLock

    _train(_cfg("train.steps=4"), tmp_path)
    before = files_in(tmp_path)
    live = RunDirLock(tmp_path)  # as a run still training there holds it
    try:
        with pytest.raises(ConfigError, match="is in use"):
            _train(_cfg("train.steps=8", "overwrite=true"), tmp_path)
    finally:
        live.release()
    assert files_in(tmp_path) == before and not (tmp_path / ".replaced").exists()


def test_a_training_with_a_state_it_cannot_restore_is_refused(tmp_path):
    class SavesOnly:
        def batches(self, start):
            return iter(())

        def step(self, step, batch):
            return {"loss": 0.0}

        def evaluate(self, step):
            return {}

        def state_dict(self):
            return {}

    with pytest.raises(TypeError, match="state_dict and load_state_dict together"):
        TrainLoop(
            model=nn.Linear(1, 1), runs=[Run("r", tmp_path)], training=SavesOnly(), steps=1,
            eval_every=1, ckpt_dir=tmp_path, batch_size=1,
        )  # fmt: skip


def test_a_run_records_the_instruction_sets_its_kernels_used(monkeypatch):
    from experiments.kit.runlog import cpu_capability

    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert cpu_capability() == torch.backends.cpu.get_cpu_capability()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    assert cpu_capability() == f"{torch.backends.cpu.get_cpu_capability()}, oneDNN at most AVX2"


def test_steps_per_s_times_the_loop_alone(tmp_path, monkeypatch):
    """What ``make bench`` reads as a run's loop time: the steps and their evaluations, never the
    evaluation of the networks at initialization. On a clock that a step moves by 1 s, an
    evaluation after a step by 0.5 s and the initial one by 100 s, 12 steps with 3 evaluations
    take 13.5 s."""
    from experiments.kit import loop as loop_module

    now = [0.0]
    evaluate = TrainLoop._evaluate_and_log

    def timed_evaluation(self, with_train):
        now[0] += 0.5 if self.step else 100.0
        return evaluate(self, with_train)

    def tick(step):
        now[0] += 1.0

    monkeypatch.setattr(loop_module.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(TrainLoop, "_evaluate_and_log", timed_evaluation)
    summaries, _, _ = _train(_cfg("seed=[0]"), tmp_path, spy=tick)
    assert summaries[0]["steps_done"] == 12
    assert summaries[0]["steps_per_s"] == round(12 / 13.5, 2)
